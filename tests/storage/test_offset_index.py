"""OffsetIndex on its own: bytes on disk, lookup, append, truncation, sanity checks."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from rustka.errors import StorageError
from rustka.storage.offset_index import INDEX_ENTRY_SIZE, OffsetIndex

BASE = 1000


def made(tmp_path: Path, entries: list[tuple[int, int]]) -> OffsetIndex:
    index = OffsetIndex(tmp_path / "x.index", BASE, create=True)
    index.append(entries)
    return index


def test_entries_are_eight_big_endian_bytes(tmp_path: Path) -> None:
    """Each entry is u32 relative offset then u32 position, big-endian, appended in order."""
    index = made(tmp_path, [(BASE + 5, 300), (BASE + 9, 700)])
    assert INDEX_ENTRY_SIZE == 8
    assert index.path.read_bytes() == struct.pack(">IIII", 5, 300, 9, 700)
    assert OffsetIndex.decode(index.path.read_bytes()) == (
        OffsetIndex.decode(OffsetIndex.encode([5, 9], [300, 700]))
    )
    assert [list(a) for a in OffsetIndex.decode(index.path.read_bytes())] == [[5, 9], [300, 700]]
    index.close()


def test_lookup_finds_the_last_entry_at_or_below(tmp_path: Path) -> None:
    """lookup returns the largest indexed offset <= target, or the segment start."""
    index = made(tmp_path, [(BASE + 5, 300), (BASE + 9, 700), (BASE + 20, 1500)])
    assert index.lookup(BASE) == (BASE, 0)
    assert index.lookup(BASE + 4) == (BASE, 0)
    assert index.lookup(BASE + 5) == (BASE + 5, 300)
    assert index.lookup(BASE + 8) == (BASE + 5, 300)
    assert index.lookup(BASE + 19) == (BASE + 9, 700)
    assert index.lookup(BASE + 10**6) == (BASE + 20, 1500)
    assert index.last_entry() == (BASE + 20, 1500)
    index.close()


def test_truncate_by_offset_and_by_position(tmp_path: Path) -> None:
    """truncate_to drops entries at or above an offset; truncate_to_position those at or past."""
    index = made(tmp_path, [(BASE + 5, 300), (BASE + 9, 700), (BASE + 20, 1500)])
    index.truncate_to(BASE + 9)
    assert index.entries() == [(5, 300)]
    assert index.path.stat().st_size == INDEX_ENTRY_SIZE
    index.append([(BASE + 9, 700), (BASE + 20, 1500)])
    index.truncate_to_position(701)
    assert index.entries() == [(5, 300), (9, 700)]
    assert index.path.read_bytes() == struct.pack(">IIII", 5, 300, 9, 700)
    index.close()


def test_load_and_sanity_check_catch_bad_files(tmp_path: Path) -> None:
    """Missing, ragged, unordered, out-of-bounds and misaligned indexes each give a reason."""
    path = tmp_path / "x.index"
    assert OffsetIndex(path, BASE).load() == "the index file is missing"
    path.write_bytes(b"\0" * 12)
    assert "multiple of 8" in (OffsetIndex(path, BASE).load() or "")
    starts = {300: BASE + 5, 700: BASE + 9}

    def checked(pairs: list[tuple[int, int]], log_size: int = 2000) -> str | None:
        path.write_bytes(b"".join(struct.pack(">II", r, p) for r, p in pairs))
        index = OffsetIndex(path, BASE)
        assert index.load() is None
        try:
            return index.sanity_check(log_size, starts.get)
        finally:
            index.close()

    assert checked([(5, 300), (9, 700)]) is None
    assert "out of order" in (checked([(9, 700), (5, 300)]) or "")
    assert "first batch" in (checked([(0, 0)]) or "")
    assert "past the end" in (checked([(5, 300), (9, 700)], log_size=700) or "")
    assert "starts at" in (checked([(5, 300), (10, 700)]) or "")


def test_replace_rewrites_only_when_different(tmp_path: Path) -> None:
    """replace adopts rebuilt entries and reports whether the file had to change."""
    index = made(tmp_path, [(BASE + 5, 300)])
    rels, positions = OffsetIndex.decode(struct.pack(">II", 5, 300))
    assert index.replace(rels, positions) is False
    rels, positions = OffsetIndex.decode(struct.pack(">IIII", 5, 300, 7, 400))
    assert index.replace(rels, positions) is True
    assert index.path.read_bytes() == struct.pack(">IIII", 5, 300, 7, 400)
    index.close()


def test_failed_open_is_a_storage_error(tmp_path: Path) -> None:
    """An index in a directory that does not exist cannot be opened: StorageError, not OSError."""
    with pytest.raises(StorageError, match="cannot open index"):
        OffsetIndex(tmp_path / "missing" / "x.index", BASE, create=True)
