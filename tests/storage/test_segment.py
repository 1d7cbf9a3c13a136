"""Segments: sparse index, reads by offset, reopening, index rebuilds, recovery, corruption."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest

from rustka.errors import CorruptBatch, OffsetOutOfRange, StorageError
from rustka.record.batch import (
    HEADER_SIZE,
    Record,
    decode_records,
    encode_batch,
    parse_header,
    scan_batches,
    set_base_offset,
    validate_batches,
)
from rustka.storage.log_files import base_offset_of, index_name, log_name, time_index_name
from rustka.storage.segment import Segment

TS = 1_700_000_000_000
INTERVAL = 256


def batch(i: int, records: int = 1, pad: int = 0, ts: int | None = None) -> bytes:
    """A batch whose record sizes vary with ``i`` so batch boundaries are irregular."""
    stamp = TS + i if ts is None else ts
    return encode_batch(
        [
            Record(f"k{i}".encode(), b"v" * (1 + (i * 7 + j) % 40 + pad), timestamp=stamp)
            for j in range(records)
        ]
    )


def append(seg: Segment, payloads: list[bytes]) -> list[tuple[int, int, int]]:
    """Append payloads the way PartitionLog does; returns (position, first, last) per batch."""
    buf = bytearray()
    batches = []
    placed = []
    offset = seg.next_offset
    for payload in payloads:
        start = len(buf)
        buf += payload
        for pos, header in validate_batches(payload):
            set_base_offset(buf, start + pos, offset)
            batches.append((start + pos, header))
            placed.append((seg.size + start + pos, offset, offset + header.last_offset_delta))
            offset += header.last_offset_delta + 1
    seg.append(buf, batches)
    return placed


def filled(directory: Path, count: int = 120, base: int = 0) -> tuple[Segment, list]:
    """A segment with ``count`` irregular batches appended in a few writes."""
    seg = Segment.create(directory, base, INTERVAL)
    placed = []
    payloads = [batch(i, records=1 + i % 3) for i in range(count)]
    for start in range(0, count, 7):
        placed += append(seg, payloads[start : start + 7])
    return seg, placed


def stored(directory: Path, base: int = 0) -> bytes:
    return (directory / log_name(base)).read_bytes()


def flip(path: Path, position: int, mask: int = 0xFF) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))


def test_files_are_named_by_twenty_digit_base_offset(tmp_path: Path) -> None:
    """create() makes NNNN(20).log, .index and .timeindex; only exact 20-digit names parse."""
    seg = Segment.create(tmp_path, 1234, INTERVAL)
    seg.close()
    assert sorted(os.listdir(tmp_path)) == [
        "00000000000000001234.index",
        "00000000000000001234.log",
        "00000000000000001234.timeindex",
    ]
    assert base_offset_of("00000000000000001234.log") == 1234
    assert base_offset_of(index_name(7), ".index") == 7
    assert base_offset_of("1234.log") is None
    assert base_offset_of("0000000000000000123x.log") is None
    assert base_offset_of("00000000000000001234.log.deleted") is None


def test_create_refuses_existing_segment(tmp_path: Path) -> None:
    """A second create() at the same base offset is a StorageError, not a truncation."""
    seg, _ = filled(tmp_path, 5)
    size = seg.size
    with pytest.raises(StorageError, match="already exists"):
        Segment.create(tmp_path, 0, INTERVAL)
    assert (tmp_path / log_name(0)).stat().st_size == size
    seg.close()


def test_index_is_sparse_and_points_at_batch_starts(tmp_path: Path) -> None:
    """At most one entry per interval of log, each naming the base offset of its batch."""
    seg, placed = filled(tmp_path)
    entries = seg.index_snapshot()
    assert 0 < len(entries) <= seg.size // INTERVAL + 1
    starts = {pos: first for pos, first, _ in placed}
    previous = 0
    for rel, pos in entries:
        assert starts[pos] == rel
        assert pos - previous >= INTERVAL
        previous = pos
    on_disk = (tmp_path / index_name(0)).read_bytes()
    assert on_disk == b"".join(struct.pack(">II", r, p) for r, p in entries)
    seg.close()


def test_read_at_every_offset_returns_the_batch_holding_it(tmp_path: Path) -> None:
    """read(offset, 1) returns exactly the batch containing offset, for every offset."""
    seg, placed = filled(tmp_path)
    log = stored(tmp_path)
    sizes = {pos: parse_header(log, pos).size for pos, _, _ in placed}
    for pos, first, last in placed:
        for offset in range(first, last + 1):
            assert seg.read(offset, 1) == log[pos : pos + sizes[pos]]
    assert seg.read(seg.next_offset, 1000) == b""
    with pytest.raises(OffsetOutOfRange):
        seg.read(-1, 10)
    seg.close()


def test_read_returns_whole_batches_within_limits(tmp_path: Path) -> None:
    """max_bytes trims to whole batches (at least one); max_position hides later bytes."""
    seg, placed = filled(tmp_path, 20)
    log = stored(tmp_path)
    data = seg.read(0, 500)
    _, end = scan_batches(data)
    assert end == len(data) <= 500
    assert data == log[: len(data)]
    assert len(seg.read(0, 10**9)) == seg.size
    cut = placed[5][0]
    assert seg.read(0, 10**9, max_position=cut) == log[:cut]
    assert seg.read(placed[5][1], 10**9, max_position=cut) == b""
    seg.close()


def test_reopen_reads_index_and_bounded_tail_only(tmp_path: Path) -> None:
    """Reopening restores next_offset/size/max timestamp without reading early batches' bodies.

    An early batch's records are damaged on disk: a full scan would notice, but
    open(recover=False) must not read them, so it reports no repair.
    """
    seg, placed = filled(tmp_path)
    expected = (seg.size, seg.next_offset, seg.max_timestamp, seg.index_snapshot())
    seg.close()
    flip(tmp_path / log_name(0), placed[1][0] + HEADER_SIZE + 2)
    again = Segment.open(tmp_path, 0, INTERVAL)
    assert again.last_recovery is None
    assert (again.size, again.next_offset, again.max_timestamp, again.index_snapshot()) == expected
    assert again.first_timestamp == TS
    with pytest.raises(CorruptBatch):
        again.read(placed[1][1], 1)
    again.close()


def test_reopen_continues_appending(tmp_path: Path) -> None:
    """After a reopen, appends extend the same offset chain and index."""
    seg, _ = filled(tmp_path, 40)
    seg.close()
    again = Segment.open(tmp_path, 0, INTERVAL)
    before = again.next_offset
    placed = append(again, [batch(i) for i in range(40, 60)])
    assert placed[0][1] == before
    for _, first, last in placed:
        assert decode_records(again.read(first, 1))[-1].offset == last
    again.close()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("missing", "missing"),
        ("short", "multiple of 8"),
        ("garbage", "index"),
        ("past_end", "past the end"),
        ("wrong_batch", "starts at"),
        ("unordered", "out of order"),
    ],
)
def test_untrusted_index_is_rebuilt_from_the_log(tmp_path: Path, damage: str, reason: str) -> None:
    """A missing, short, garbage, out-of-range, misaligned or unordered index is rebuilt."""
    seg, placed = filled(tmp_path)
    good = (tmp_path / index_name(0)).read_bytes()
    seg.close()
    index = tmp_path / index_name(0)
    if damage == "missing":
        index.unlink()
    elif damage == "short":
        index.write_bytes(good[:-3])
    elif damage == "garbage":
        index.write_bytes(bytes(range(256)) * 2)
    elif damage == "past_end":
        index.write_bytes(good + struct.pack(">II", 10_000, 10**7))
    elif damage == "wrong_batch":
        rel, pos = struct.unpack(">II", good[-8:])
        index.write_bytes(good[:-8] + struct.pack(">II", rel + 1, pos))
    else:
        index.write_bytes(good[8:16] + good[:8] + good[16:])
    again = Segment.open(tmp_path, 0, INTERVAL)
    info = again.last_recovery
    assert info is not None and info.index_rebuilt and info.truncated_bytes == 0
    assert reason in info.reason
    assert index.read_bytes() == good
    for _, first, last in placed[::5]:
        assert decode_records(again.read(last, 1))[0].offset == first
    again.close()


def test_lost_index_tail_is_restored_without_a_full_rebuild(tmp_path: Path) -> None:
    """Entries missing at the end of the index (crash before the index write) are re-added."""
    seg, _ = filled(tmp_path)
    good = (tmp_path / index_name(0)).read_bytes()
    seg.close()
    (tmp_path / index_name(0)).write_bytes(good[:16])
    again = Segment.open(tmp_path, 0, INTERVAL)
    assert again.last_recovery is None
    assert (tmp_path / index_name(0)).read_bytes() == good
    again.close()


def test_bad_index_entry_missed_by_open_is_bypassed_on_read(tmp_path: Path) -> None:
    """Open checks a sample of entries; a bad unsampled one is caught at lookup and bypassed."""
    seg, placed = filled(tmp_path, 300)
    entries = seg.index_snapshot()
    assert len(entries) >= 31  # open samples every other entry or sparser: entry 1 is unchecked
    seg.close()
    rel, pos = entries[1]
    index = tmp_path / index_name(0)
    data = bytearray(index.read_bytes())
    data[8:16] = struct.pack(">II", rel, pos + 1)
    index.write_bytes(bytes(data))
    again = Segment.open(tmp_path, 0, INTERVAL)
    assert again.last_recovery is None
    assert again.index_snapshot()[1] == (rel, pos + 1)
    log = stored(tmp_path)
    for at, _, last in placed:
        size = parse_header(log, at).size
        assert again.read(last, 1) == log[at : at + size]
    again.close()


@pytest.mark.parametrize("recover", [True, False])
def test_torn_tail_is_truncated(tmp_path: Path, recover: bool) -> None:
    """Half a batch written by hand is cut on open, and the cut is reported."""
    seg, _ = filled(tmp_path, 30)
    size, next_offset = seg.size, seg.next_offset
    seg.close()
    half = bytearray(batch(99, records=3))
    set_base_offset(half, 0, next_offset)
    with open(tmp_path / log_name(0), "ab") as f:
        f.write(half[: len(half) // 2])
    again = Segment.open(tmp_path, 0, INTERVAL, recover=recover)
    info = again.last_recovery
    assert info is not None
    assert info.truncated_bytes == len(half) // 2
    assert info.first_lost_position == size
    assert info.kept_next_offset == next_offset
    assert "incomplete" in info.reason
    assert (tmp_path / log_name(0)).stat().st_size == size == again.size
    new = append(again, [batch(100)])
    assert new[0][1] == next_offset
    assert decode_records(again.read(next_offset, 1))[0].offset == next_offset
    again.close()


def test_recover_truncates_at_a_corrupt_middle_batch(tmp_path: Path) -> None:
    """A damaged byte in a middle batch: recovery keeps everything before it, nothing after."""
    seg, placed = filled(tmp_path, 30)
    total = seg.size
    seg.close()
    pos, first, _ = placed[15]
    flip(tmp_path / log_name(0), pos + HEADER_SIZE + 1)
    again = Segment.open(tmp_path, 0, INTERVAL, recover=True)
    info = again.last_recovery
    assert info is not None
    assert (info.first_lost_position, info.kept_next_offset) == (pos, first)
    assert info.truncated_bytes == total - pos
    assert "CRC" in info.reason
    assert again.next_offset == first and again.size == pos
    kept = again.index_snapshot()
    assert kept and all(p < pos for _, p in kept)
    again.close()


def test_recover_treats_a_broken_offset_chain_as_corruption(tmp_path: Path) -> None:
    """A CRC-valid batch whose base offset skips ahead ends the valid log."""
    seg, _ = filled(tmp_path, 10)
    size, next_offset = seg.size, seg.next_offset
    seg.close()
    extra = bytearray(batch(50))
    set_base_offset(extra, 0, next_offset + 5)
    with open(tmp_path / log_name(0), "ab") as f:
        f.write(extra)
    again = Segment.open(tmp_path, 0, INTERVAL, recover=True)
    info = again.last_recovery
    assert info is not None and info.first_lost_position == size
    assert f"expected {next_offset}" in info.reason
    assert again.next_offset == next_offset
    again.close()


def test_clean_recover_reports_nothing(tmp_path: Path) -> None:
    """A full recovery scan of an intact segment changes nothing and reports nothing."""
    seg, _ = filled(tmp_path)
    state = (seg.size, seg.next_offset, seg.max_timestamp, seg.index_snapshot())
    seg.close()
    again = Segment.open(tmp_path, 0, INTERVAL, recover=True)
    assert again.last_recovery is None
    assert (again.size, again.next_offset, again.max_timestamp, again.index_snapshot()) == state
    again.close()


def test_corrupt_stored_batch_fails_reads_of_it_only(tmp_path: Path) -> None:
    """Reading a corrupt batch raises CorruptBatch naming file and position; others still read."""
    seg, placed = filled(tmp_path, 30)
    pos, first, last = placed[10]
    flip(tmp_path / log_name(0), pos + HEADER_SIZE + 3)
    for offset in range(first, last + 1):
        with pytest.raises(CorruptBatch, match=rf"{log_name(0)}.*position {pos}\b"):
            seg.read(offset, 1)
    for _, other_first, other_last in placed[:10] + placed[11:]:
        records = decode_records(seg.read(other_last, 1))
        assert records[0].offset == other_first
    before = seg.read(placed[9][1], 10**9)
    assert len(before) == pos - placed[9][0]
    seg.close()


def test_truncate_to_rederives_state(tmp_path: Path) -> None:
    """truncate_to a batch boundary drops later bytes and index entries and restores next_offset."""
    seg, placed = filled(tmp_path)
    pos, first, _ = placed[len(placed) // 2]
    seg.truncate_to(pos)
    assert (seg.size, seg.next_offset) == (pos, first)
    kept = seg.index_snapshot()
    assert kept and all(p < pos for _, p in kept)
    assert (tmp_path / index_name(0)).stat().st_size == 8 * seg.index_entries
    seg.truncate_to(0)
    assert (seg.size, seg.next_offset, seg.max_timestamp) == (0, 0, -1)
    seg.close()


def test_delete_renames_files_but_open_segment_stays_readable(tmp_path: Path) -> None:
    """delete() renames to *.deleted; reads through the open fds keep working until close."""
    seg, _ = filled(tmp_path, 10)
    data = seg.read(0, 10**9)
    seg.delete()
    assert sorted(os.listdir(tmp_path)) == [
        index_name(0) + ".deleted",
        log_name(0) + ".deleted",
        time_index_name(0) + ".deleted",
    ]
    assert seg.read(0, 10**9) == data
    seg.close()
    seg.remove_files()
    assert os.listdir(tmp_path) == []


def _classify(seg: Segment, offsets: range, original: bytes) -> str:
    try:
        data = seg.read(offsets.start, 1)
    except CorruptBatch:
        return "read_error"
    if not data:
        return "missing"
    records = decode_records(data)
    assert [r.offset for r in records] == list(offsets)
    assert records == decode_records(original)
    assert data[:12] == original[:12] and data[16:] == original[16:]
    return "harmless"


@pytest.mark.parametrize("mode", ["live", "reopen", "reopen_indexed", "recover"])
def test_every_single_byte_flip_of_a_stored_batch_is_caught(tmp_path: Path, mode: str) -> None:
    """Flip each byte of the middle batch (fresh copy each time): only the leader epoch is harmless.

    live: the segment was open when the byte rotted, so reads must catch it.
    reopen: the batch lies in the tail that open(recover=False) walks, which
    catches structural damage (offset chain, length, magic) by escalating to a
    CRC scan that truncates at the batch; reads catch the rest.
    reopen_indexed: an index entry after the batch keeps it out of the tail walk,
    so every flip is left to reads. recover: the CRC scan truncates at the batch.
    """
    interval = INTERVAL if mode == "reopen_indexed" else 4096
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    seg = Segment.create(pristine, 0, interval)
    placed = append(seg, [batch(1, records=3), batch(2, records=4, pad=20), batch(3, records=2)])
    assert seg.index_entries == (1 if mode == "reopen_indexed" else 0)
    seg.close()
    log = stored(pristine)
    pos, first, last = placed[1]
    size = parse_header(log, pos).size
    original = log[pos : pos + size]
    outcomes: dict[str, int] = {}
    for i in range(size):
        work = tmp_path / f"{mode}-{i}"
        shutil.copytree(pristine, work)
        if mode == "live":
            seg = Segment.open(work, 0, interval)
            flip(work / log_name(0), pos + i)
        else:
            flip(work / log_name(0), pos + i)
            seg = Segment.open(work, 0, interval, recover=mode == "recover")
        info = seg.last_recovery
        if info is not None:
            assert (info.first_lost_position, info.kept_next_offset) == (pos, first)
            outcome = "truncated"
            assert seg.read(first, 1) == b""
        else:
            outcome = _classify(seg, range(first, last + 1), original)
        from_start = seg.read(0, 10**9)
        if outcome == "harmless":
            assert len(from_start) == len(log) and from_start[:pos] == log[:pos]
        else:
            assert from_start == log[:pos]
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        seg.close()
        shutil.rmtree(work)
    epoch = 4
    if mode in ("live", "reopen_indexed"):
        assert outcomes == {"read_error": size - epoch, "harmless": epoch}
    elif mode == "reopen":
        structural = 8 + 4 + 1 + 4  # base offset, length, magic, last offset delta
        assert outcomes == {
            "truncated": structural,
            "read_error": size - structural - epoch,
            "harmless": epoch,
        }
    else:
        assert outcomes == {"truncated": size - epoch, "harmless": epoch}


def test_a_cleaned_segment_may_skip_offsets_between_batches(tmp_path: Path) -> None:
    """With ``gaps`` (a segment the log cleaner wrote) a batch may start above the
    previous batch's end, as cleaning leaves it; a batch starting below it is still
    damage, and without ``gaps`` the skip itself is."""
    seg, _ = filled(tmp_path, 10)
    size, next_offset = seg.size, seg.next_offset
    seg.close()
    extra = bytearray(batch(50))
    set_base_offset(extra, 0, next_offset + 5)
    with open(tmp_path / log_name(0), "ab") as f:
        f.write(extra)
    again = Segment.open(tmp_path, 0, INTERVAL, recover=True, gaps=True)
    assert again.last_recovery is None
    assert again.next_offset == next_offset + 6
    records = decode_records(again.read(next_offset + 1, 1))
    assert records[0].offset == next_offset + 5
    chunks = list(again.batches_from(0, 300))
    assert [h.base_offset for _, entries in chunks for _, h in entries][-1] == next_offset + 5
    assert sum(len(buf) for buf, _ in chunks) == again.size
    again.close()
    backwards = bytearray(batch(51))
    set_base_offset(backwards, 0, next_offset)
    with open(tmp_path / log_name(0), "ab") as f:
        f.write(backwards)
    cut = Segment.open(tmp_path, 0, INTERVAL, recover=True, gaps=True)
    assert cut.last_recovery is not None and cut.next_offset == next_offset + 6
    cut.close()
    strict = Segment.open(tmp_path, 0, INTERVAL, recover=True)
    assert strict.next_offset == next_offset and strict.size == size
    strict.close()


def test_batches_from_reads_whole_checked_batches_and_stops_at_damage(tmp_path: Path) -> None:
    seg, placed = filled(tmp_path, 40)
    start = placed[5][0]
    seen = [
        (h.base_offset, pos) for buf, entries in seg.batches_from(start, 500) for pos, h in entries
    ]
    assert [offset for offset, _ in seen] == [first for _, first, _ in placed[5:]]
    assert seg.position_of(placed[7][1]) == placed[7][0]
    assert seg.position_of(seg.next_offset) == seg.size
    seg.close()
    with open(tmp_path / log_name(0), "r+b") as f:
        f.seek(placed[20][0] + HEADER_SIZE + 2)
        f.write(b"\xff")
    damaged = Segment.open(tmp_path, 0, INTERVAL)
    with pytest.raises(CorruptBatch, match="CRC"):
        for _ in damaged.batches_from(0, 500):
            pass
    damaged.close()


def test_rename_moves_the_three_files_with_their_descriptors(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, 7, INTERVAL, suffix=".cleaned", gaps=True)
    append(seg, [batch(i) for i in range(3)])
    assert sorted(os.listdir(tmp_path)) == [
        n + ".cleaned" for n in sorted((index_name(7), log_name(7), time_index_name(7)))
    ]
    seg.rename("")
    assert sorted(os.listdir(tmp_path)) == sorted((index_name(7), log_name(7), time_index_name(7)))
    assert decode_records(seg.read(7, 1))[0].offset == 7
    seg.close()
