"""The time index (.timeindex) and lookups by timestamp (Kafka's ListOffsets by time)."""

from __future__ import annotations

import struct
from itertools import pairwise
from pathlib import Path

import pytest

from rustka.record.batch import (
    Record,
    decode_records,
    encode_batch,
    set_base_offset,
    validate_batches,
)
from rustka.storage.log_config import LogConfig
from rustka.storage.log_files import log_name, time_index_name
from rustka.storage.partition_log import PartitionLog
from rustka.storage.segment import Segment
from rustka.storage.time_index import TIME_INDEX_ENTRY_SIZE, TimeIndex

TS = 1_700_000_000_000


def config() -> LogConfig:
    return LogConfig(
        segment_bytes=1500,
        segment_ms=None,
        retention_ms=None,
        index_interval_bytes=200,
        flush="never",
    )


def stamp(i: int) -> int:
    """Mostly rising timestamps with regular dips, so max timestamp and order differ."""
    return TS + i * 100 - (250 if i % 4 == 3 else 0)


def payload(i: int) -> bytes:
    """Batch i: 1-3 records, a millisecond apart from the batch's stamp."""
    return encode_batch(
        [
            Record(f"k{i}".encode(), f"v{i}-{j}".encode(), timestamp=stamp(i) + j)
            for j in range(1 + i % 3)
        ]
    )


def filled(directory: Path, count: int = 60) -> PartitionLog:
    log = PartitionLog.open(directory, config())
    for i in range(count):
        log.append(payload(i))
    return log


def all_records(log: PartitionLog) -> list[Record]:
    records: list[Record] = []
    offset = log.log_start_offset
    while offset < log.end_offset:
        data = log.read(offset, 1 << 20)
        pos = 0
        while pos < len(data):
            batch = decode_records(data, pos)
            records.extend(batch)
            pos += struct.unpack_from(">i", data, pos + 8)[0] + 12
        offset = records[-1].offset + 1  # type: ignore[operator]
    return records


def brute_force(records: list[Record], target: int) -> tuple[int, int] | None:
    """Kafka's rule by definition: the earliest offset whose timestamp is >= target."""
    for record in records:
        assert record.timestamp is not None and record.offset is not None
        if record.timestamp >= target:
            return record.offset, record.timestamp
    return None


def targets(records: list[Record]) -> list[int]:
    stamps = sorted({r.timestamp for r in records if r.timestamp is not None})
    picks = {TS - 10**6, stamps[0], stamps[-1], stamps[-1] + 1}
    for ts in stamps[::3]:
        picks |= {ts - 1, ts, ts + 1}
    return sorted(picks)


def check_all(log: PartitionLog) -> int:
    records = all_records(log)
    checked = 0
    for target in targets(records):
        assert log.offset_for_timestamp(target) == brute_force(records, target), target
        checked += 1
    return checked


def test_entries_are_twelve_big_endian_bytes(tmp_path: Path) -> None:
    """i64 timestamp then u32 relative offset; lookup gives the last entry below the target."""
    index = TimeIndex(tmp_path / "x.timeindex", 500, create=True)
    index.append([(TS, 503), (TS + 50, 520)])
    assert TIME_INDEX_ENTRY_SIZE == 12
    assert index.path.read_bytes() == struct.pack(">qIqI", TS, 3, TS + 50, 20)
    assert index.lookup(TS) == 500
    assert index.lookup(TS + 1) == 503
    assert index.lookup(TS + 50) == 503
    assert index.lookup(TS + 51) == 520
    assert index.last_entry() == (TS + 50, 520)
    index.truncate_to(520)
    assert index.entries() == [(TS, 3)]
    assert index.path.stat().st_size == TIME_INDEX_ENTRY_SIZE
    index.close()
    again = TimeIndex(tmp_path / "x.timeindex", 500)
    assert again.load() is None and again.entries() == [(TS, 3)]
    again.close()


def test_segment_time_index_is_sparse_and_rising(tmp_path: Path) -> None:
    """Entries only at index points where the max grew; each names the batch that set it."""
    log = filled(tmp_path)
    assert len(log.segments) >= 4
    for seg in log.segments:
        entries = seg.time_index_snapshot()
        assert len(entries) <= len(seg.index_snapshot())
        assert all(a[0] < b[0] and a[1] < b[1] for a, b in pairwise(entries))
        on_disk = (tmp_path / time_index_name(seg.base_offset)).read_bytes()
        assert on_disk == b"".join(struct.pack(">qI", t, r) for t, r in entries)
        for ts, rel in entries:
            batch = decode_records(seg.read(seg.base_offset + rel, 1))
            assert batch[0].offset == seg.base_offset + rel
            assert max(r.timestamp for r in batch) == ts  # type: ignore[type-var]
    assert any(seg.time_index_snapshot() for seg in log.segments)
    log.close()


def test_lookup_by_time_across_segments(tmp_path: Path) -> None:
    """Every probed timestamp answers the earliest offset at or after it, or None past the end."""
    log = filled(tmp_path)
    assert check_all(log) > 30
    newest = max(seg.max_timestamp for seg in log.segments)
    assert log.offset_for_timestamp(newest + 1) is None
    assert log.offset_for_timestamp(0) == (0, stamp(0))
    log.close()


def test_lookup_after_clean_restart(tmp_path: Path) -> None:
    """A clean close and reopen trusts the time indexes and answers the same."""
    log = filled(tmp_path)
    before = {t: log.offset_for_timestamp(t) for t in targets(all_records(log))}
    files = {
        s.base_offset: (tmp_path / time_index_name(s.base_offset)).read_bytes()
        for s in log.segments
    }
    log.close()
    again = PartitionLog.open(tmp_path, config())
    assert all(s.last_recovery is None for s in again.segments)
    assert {t: again.offset_for_timestamp(t) for t in before} == before
    assert {
        s.base_offset: (tmp_path / time_index_name(s.base_offset)).read_bytes()
        for s in again.segments
    } == files
    again.close()


def test_lookup_after_crash_recovery_cut_the_tail(tmp_path: Path) -> None:
    """A torn active segment is cut by recovery; lookups see only what survived."""
    log = filled(tmp_path)
    active = log.segments[-1]
    keep = active.size
    log.append(encode_batch([Record(b"late", b"x", timestamp=TS + 10**7)]))
    assert log.offset_for_timestamp(TS + 10**7) is not None
    path = tmp_path / log_name(active.base_offset)
    for seg in log.segments:
        seg.close()
    with open(path, "r+b") as f:
        f.truncate(keep + 30)
    again = PartitionLog.open(tmp_path, config(), recover=True)
    info = again.segments[-1].last_recovery
    assert info is not None and info.truncated_bytes == 30
    assert again.offset_for_timestamp(TS + 10**7) is None
    assert check_all(again) > 30
    again.close()


@pytest.mark.parametrize("damage", ["deleted", "garbage", "unordered"])
def test_missing_or_corrupt_time_index_is_rebuilt(tmp_path: Path, damage: str) -> None:
    """A deleted, ragged or unordered .timeindex is rebuilt from the log, byte for byte."""
    log = filled(tmp_path)
    files = {
        s.base_offset: (tmp_path / time_index_name(s.base_offset)).read_bytes()
        for s in log.segments
    }
    log.close()
    for base, data in files.items():
        path = tmp_path / time_index_name(base)
        if damage == "deleted":
            path.unlink()
        elif damage == "garbage":
            path.write_bytes(data + b"\x01\x02\x03")
        elif len(data) >= 2 * TIME_INDEX_ENTRY_SIZE:
            path.write_bytes(data[12:24] + data[:12] + data[24:])
    again = PartitionLog.open(tmp_path, config())
    rebuilt = [s for s in again.segments if s.last_recovery is not None]
    assert rebuilt and all(s.last_recovery.index_rebuilt for s in rebuilt)  # type: ignore[union-attr]
    assert {
        s.base_offset: (tmp_path / time_index_name(s.base_offset)).read_bytes()
        for s in again.segments
    } == files
    assert check_all(again) > 30
    again.close()


def test_truncation_and_deletion_take_the_time_index_along(tmp_path: Path) -> None:
    """truncate_to drops time entries past the cut; delete renames and removes the file."""
    seg = Segment.create(tmp_path, 0, 100)
    buf = bytearray()
    batches = []
    placed: list[tuple[int, int, int]] = []  # (position, base offset, max timestamp)
    offset = 0
    for i in range(30):
        data = payload(i)
        start = len(buf)
        buf += data
        for pos, header in validate_batches(data):
            set_base_offset(buf, start + pos, offset)
            batches.append((start + pos, header))
            placed.append((start + pos, offset, header.max_timestamp))
            offset += header.last_offset_delta + 1
    seg.append(buf, batches)
    entries = seg.time_index_snapshot()
    assert len(entries) >= 3
    cut = next(i for i, (_, base, _) in enumerate(placed) if base == entries[1][1])
    seg.truncate_to(placed[cut][0])
    assert seg.time_index_snapshot() == entries[:1]
    assert seg.max_timestamp == max(ts for _, _, ts in placed[:cut])
    assert seg.next_offset == placed[cut][1]
    seg.delete()
    assert (tmp_path / (time_index_name(0) + ".deleted")).exists()
    seg.close()
    seg.remove_files()
    assert list(tmp_path.iterdir()) == []
