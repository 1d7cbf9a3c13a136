"""Shared file operations (rustka/storage/file_io.py): closing many things safely."""

from __future__ import annotations

import pytest

from rustka.storage.file_io import close_all, closing_on_error


class Thing:
    def __init__(self, fails: bool = False) -> None:
        self.fails = fails
        self.closed = 0

    def close(self) -> None:
        self.closed += 1
        if self.fails:
            raise OSError(f"close failed {id(self)}")


def test_close_all_closes_every_one_and_raises_the_first_error() -> None:
    things = [Thing(), Thing(fails=True), Thing(), Thing(fails=True)]
    with pytest.raises(OSError) as raised:
        close_all(things)
    assert raised.value.args[0] == f"close failed {id(things[1])}"
    assert [t.closed for t in things] == [1, 1, 1, 1]


def test_close_all_of_healthy_things_raises_nothing() -> None:
    things = [Thing(), Thing()]
    close_all(things)
    assert [t.closed for t in things] == [1, 1]


def test_closing_on_error_closes_only_when_the_block_raises() -> None:
    kept = Thing()
    with closing_on_error(kept) as same:
        assert same is kept
    assert kept.closed == 0
    dropped = Thing()
    with pytest.raises(KeyboardInterrupt), closing_on_error(dropped):
        raise KeyboardInterrupt
    assert dropped.closed == 1
