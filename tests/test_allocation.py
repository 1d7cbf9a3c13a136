"""The collector pause used while building many records at once."""

from __future__ import annotations

import gc

import pytest

from rustka.allocation import collector_paused


def test_pauses_and_restores_the_collector() -> None:
    """Inside, the cyclic collector is off; afterwards it is on again."""
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restores_after_an_exception() -> None:
    """An error while building does not leave the collector switched off."""
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_leaves_a_disabled_collector_disabled() -> None:
    """A caller that runs with the collector off keeps it off (nesting is safe too)."""
    gc.disable()
    try:
        with collector_paused(), collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
