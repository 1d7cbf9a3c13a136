"""PartitionLog: offsets, rolling, reads, recovery point, retention and failed writes."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
from itertools import pairwise
from pathlib import Path

import pytest
from crc32c import crc32c

from rustka.errors import CorruptBatch, InvalidBatch, OffsetLost, OffsetOutOfRange
from rustka.record.batch import (
    HEADER_SIZE,
    Record,
    decode_records,
    encode_batch,
    scan_batches,
)
from rustka.storage.log_config import LogConfig
from rustka.storage.log_files import RECOVERY_POINT_FILE, index_name, log_name, time_index_name
from rustka.storage.partition_log import PartitionLog
from rustka.storage.producer_state import SNAPSHOT_FILE

TS = 1_700_000_000_000
ROOT = Path(__file__).resolve().parents[2]


def config(**overrides: object) -> LogConfig:
    settings: dict[str, object] = {
        "segment_bytes": 400,
        "segment_ms": None,
        "retention_ms": None,
        "index_interval_bytes": 128,
        "flush": "never",
    }
    settings.update(overrides)
    return LogConfig(**settings)  # type: ignore[arg-type]


def payload(i: int, records: int = 1, ts: int | None = None) -> bytes:
    stamp = TS + i if ts is None else ts
    return encode_batch(
        [
            Record(f"k{i}".encode(), f"value-{i}-{j}".encode(), timestamp=stamp)
            for j in range(records)
        ]
    )


def fill(log: PartitionLog, count: int, start: int = 0, **kwargs: int) -> list[tuple[int, int]]:
    return [log.append(payload(i, **kwargs)) for i in range(start, start + count)]


def values_at(log: PartitionLog, offset: int) -> list[Record]:
    return decode_records(log.read(offset, 1), min_offset=offset)


def recovery_point(directory: Path) -> int:
    data = (directory / RECOVERY_POINT_FILE).read_bytes()
    offset, checksum = struct.unpack(">QI", data)
    assert crc32c(data[:8]) == checksum
    return offset


def test_open_creates_directory_and_empty_first_segment(tmp_path: Path) -> None:
    """A new partition dir gets segment 0; the log is empty at offset 0."""
    directory = tmp_path / "orders" / "0"
    log = PartitionLog.open(directory, config())
    assert (log.log_start_offset, log.end_offset, log.size_bytes) == (0, 0, 0)
    assert (directory / log_name(0)).exists() and (directory / index_name(0)).exists()
    assert log.read(0, 100) == b""
    assert log.read_record(0) is None
    assert log.describe() == {"log_start": 0, "end": 0, "segments": 1, "bytes": 0}
    log.close()


def test_tiny_segments_roll_and_every_offset_reads_back(tmp_path: Path) -> None:
    """Rollover every few records keeps offsets contiguous across segments and readable."""
    log = PartitionLog.open(tmp_path, config())
    ranges = fill(log, 60, records=2)
    assert ranges == [(2 * i, 2 * i + 1) for i in range(60)]
    segments = log.segments
    assert len(segments) >= 10
    for older, newer in pairwise(segments):
        assert older.next_offset == newer.base_offset
        assert older.size >= 400 or older.size + 100 > 400
    assert log.size_bytes == sum(s.size for s in segments)
    for offset in range(log.end_offset):
        record = log.read_record(offset)
        assert record is not None and record.offset == offset
        assert record.value == f"value-{offset // 2}-{offset % 2}".encode()
        assert values_at(log, offset)[0].offset == offset
    log.close()


def test_index_stays_sparse_with_default_interval(tmp_path: Path) -> None:
    """With 4096-byte intervals every segment has at most size/4096 + 1 index entries."""
    log = PartitionLog.open(tmp_path, config(segment_bytes=16 * 1024, index_interval_bytes=4096))
    for i in range(30):
        log.append_many([payload(i * 10 + j, records=5) for j in range(10)])
    assert len(log.segments) > 1
    for seg in log.segments:
        assert seg.index_entries <= seg.size // 4096 + 1
    for offset in range(0, log.end_offset, 7):
        assert log.read_record(offset).offset == offset  # type: ignore[union-attr]
    log.close()


def test_append_many_assigns_consecutive_ranges_across_rolls(tmp_path: Path) -> None:
    """Group commit returns one range per payload and rolls between payloads when full."""
    log = PartitionLog.open(tmp_path, config(segment_bytes=300))
    payloads = [payload(i, records=1 + i % 3) for i in range(12)]
    ranges = log.append_many(payloads)
    expected, offset = [], 0
    for i in range(12):
        expected.append((offset, offset + i % 3))
        offset += 1 + i % 3
    assert ranges == expected
    assert log.end_offset == offset
    assert len(log.segments) > 2
    for first, last in ranges:
        records = values_at(log, first)
        assert [r.offset for r in records] == list(range(first, last + 1))
    log.close()


def test_append_copies_payload_and_leaves_input_untouched(tmp_path: Path) -> None:
    """Offsets are rewritten in the log's own copy, never in the caller's buffer."""
    log = PartitionLog.open(tmp_path, config())
    fill(log, 3)
    data = bytearray(payload(9))
    before = bytes(data)
    assert log.append(data) == (3, 3)
    assert bytes(data) == before
    assert log.read(3, 1)[:8] == struct.pack(">q", 3)
    log.close()


def test_invalid_payload_writes_nothing(tmp_path: Path) -> None:
    """A bad payload anywhere in a group raises InvalidBatch and leaves the log unchanged."""
    log = PartitionLog.open(tmp_path, config())
    fill(log, 5)
    size, end = log.size_bytes, log.end_offset
    broken = bytearray(payload(1))
    broken[-1] ^= 1
    with pytest.raises(InvalidBatch, match="payload 1"):
        log.append_many([payload(6), bytes(broken)])
    with pytest.raises(InvalidBatch):
        log.append(b"\x00" * 10)
    assert (log.size_bytes, log.end_offset) == (size, end)
    assert sum(p.stat().st_size for p in tmp_path.glob("*.log")) == size
    log.close()


def test_read_bounds(tmp_path: Path) -> None:
    """Offsets outside [log start, end] raise OffsetOutOfRange with the bounds; end reads empty."""
    log = PartitionLog.open(tmp_path, config())
    fill(log, 10)
    with pytest.raises(OffsetOutOfRange) as exc:
        log.read(11, 100)
    assert (exc.value.offset, exc.value.log_start, exc.value.end) == (11, 0, 10)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)
    assert log.read(10, 100) == b""
    assert log.read_record(10) is None
    data = log.read(0, 10**6)
    batches, end = scan_batches(data)
    assert end == len(data) and batches[0][1].base_offset == 0
    log.close()


def test_reopen_restores_state_and_recovery_point(tmp_path: Path) -> None:
    """Close records the end offset as the recovery point; reopen restores segments and offsets.

    After reopening, the recovery point moves back to the active segment's base,
    so a crash from then on rescans that segment.
    """
    log = PartitionLog.open(tmp_path, config())
    fill(log, 40)
    bases = [s.base_offset for s in log.segments]
    end, size = log.end_offset, log.size_bytes
    log.close()
    assert recovery_point(tmp_path) == end
    again = PartitionLog.open(tmp_path, config())
    assert [s.base_offset for s in again.segments] == bases
    assert (again.end_offset, again.size_bytes) == (end, size)
    assert recovery_point(tmp_path) == bases[-1]
    assert again.append(payload(40)) == (40, 40)
    again.close()


def test_leftover_files_are_removed_on_open(tmp_path: Path) -> None:
    """*.deleted, *.tmp, *.cleaned and index files without a log are cleaned up at open."""
    log = PartitionLog.open(tmp_path, config())
    fill(log, 5)
    log.close()
    leftovers = ("00000000000000000099.log.deleted", "x.tmp", "y.cleaned", index_name(77))
    for name in (*leftovers, time_index_name(78)):
        (tmp_path / name).write_bytes(b"junk")
    (tmp_path / "notes.txt").write_bytes(b"keep")
    again = PartitionLog.open(tmp_path, config())
    assert sorted(os.listdir(tmp_path)) == sorted(
        [
            log_name(0),
            index_name(0),
            time_index_name(0),
            RECOVERY_POINT_FILE,
            SNAPSHOT_FILE,
            "notes.txt",
        ]
    )
    assert again.end_offset == 5
    again.close()


def test_recovery_scans_only_segments_after_the_recovery_point(tmp_path: Path) -> None:
    """recover=True CRC-scans only segments at or after the recovery point.

    A rotten batch in an old segment is not scanned (reads still catch it),
    while a torn tail in the active segment is cut and reported.
    """
    log = PartitionLog.open(tmp_path, config())
    fill(log, 40)
    old = log.segments[0]
    active = log.segments[-1]
    end = log.end_offset
    old_size, active_base = old.size, active.base_offset
    log.flush()
    # Simulate a crash: no close(), so the recovery point stays at the active base.
    assert recovery_point(tmp_path) == active_base
    path = tmp_path / log_name(0)
    data = bytearray(path.read_bytes())
    data[HEADER_SIZE + 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with open(tmp_path / log_name(active_base), "ab") as f:
        f.write(payload(99)[:30])
    again = PartitionLog.open(tmp_path, config(), recover=True)
    assert again.segments[0].last_recovery is None
    assert again.segments[0].size == old_size
    info = again.segments[-1].last_recovery
    assert info is not None and info.truncated_bytes == 30
    assert again.end_offset == end
    with pytest.raises(CorruptBatch, match="position 0"):
        again.read(0, 100)
    assert again.read_record(end - 1) is not None
    again.close()
    for seg in log.segments:
        seg.close()


def test_recovery_truncation_inside_an_old_segment_drops_the_rest(tmp_path: Path) -> None:
    """Corruption found by recovery in an old segment ends the log there, later ones removed.

    Without a recovery point every segment is scanned; dropping the segments
    after the cut leaves no gap in the offsets.
    """
    log = PartitionLog.open(tmp_path, config())
    fill(log, 40)
    segments = log.segments
    victim = segments[1]
    later = [s.base_offset for s in segments[2:]]
    log.close()
    (tmp_path / RECOVERY_POINT_FILE).unlink()
    path = tmp_path / log_name(victim.base_offset)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))
    again = PartitionLog.open(tmp_path, config(), recover=True)
    info = again.segments[-1].last_recovery
    assert again.segments[-1].base_offset == victim.base_offset
    assert info is not None and str(later) in info.reason
    assert all(not (tmp_path / log_name(b)).exists() for b in later)
    end = again.end_offset
    assert victim.base_offset <= end < victim.next_offset
    assert again.append(payload(1)) == (end, end)
    again.close()


def test_time_based_roll_uses_injected_clock(tmp_path: Path) -> None:
    """The active segment rolls once its first batch is older than segment_ms, by the clock."""
    now = [TS]
    log = PartitionLog.open(
        tmp_path, config(segment_bytes=10**6, segment_ms=1000), clock=lambda: now[0]
    )
    log.append(payload(0, ts=TS))
    now[0] = TS + 1000
    log.append(payload(1, ts=TS + 1000))
    assert len(log.segments) == 1
    now[0] = TS + 1001
    log.append(payload(2, ts=TS + 1001))
    assert [s.base_offset for s in log.segments] == [0, 2]
    now[0] = TS + 1500
    log.append(payload(3, ts=TS + 1500))
    assert len(log.segments) == 2
    log.close()


def test_old_client_timestamps_do_not_roll_every_append(tmp_path: Path) -> None:
    """Batches stamped long ago roll at most once per segment_ms of clock time."""
    now = [TS]
    log = PartitionLog.open(
        tmp_path, config(segment_bytes=10**6, segment_ms=1000), clock=lambda: now[0]
    )
    for i in range(5):
        log.append(payload(i, ts=TS - 10**6))
    assert len(log.segments) == 2
    log.close()


def test_size_retention_deletes_whole_oldest_segments_only(tmp_path: Path) -> None:
    """Retention by bytes keeps the total within the limit, deleting whole old segments."""
    log = PartitionLog.open(tmp_path, config(retention_bytes=1000))
    fill(log, 60)
    before = log.segments
    deleted = log.enforce_retention(TS)
    assert deleted == [s.base_offset for s in before[: len(deleted)]]
    assert deleted and log.size_bytes <= 1000
    assert log.size_bytes + before[len(deleted) - 1].size > 1000
    assert log.log_start_offset == log.segments[0].base_offset == before[len(deleted)].base_offset
    with pytest.raises(OffsetOutOfRange) as exc:
        log.read(0, 100)
    assert (exc.value.log_start, exc.value.end) == (log.log_start_offset, 60)
    assert log.read_record(log.log_start_offset).offset == log.log_start_offset  # type: ignore[union-attr]
    log.close()


def test_released_segments_give_their_space_back_before_the_next_pass(tmp_path: Path) -> None:
    """Deleted segments stay open for earlier readers until released, then close for good."""
    log = PartitionLog.open(tmp_path, config(retention_bytes=1000, file_delete_delay_ms=0))
    fill(log, 60)
    deleted = log.enforce_retention(TS)
    assert deleted
    pid = os.getpid()

    def open_deleted() -> list[str]:
        fds = Path(f"/proc/{pid}/fd")
        return [
            target
            for target in (os.readlink(fd) for fd in fds.iterdir() if fd.exists())
            if target.startswith(str(tmp_path)) and "deleted" in target
        ]

    assert open_deleted(), "a deleted segment is still open for readers after the pass"
    assert log.release_deleted() == len(deleted)
    assert open_deleted() == []
    assert log.release_deleted() == 0
    log.close()


def test_retention_never_deletes_the_active_segment(tmp_path: Path) -> None:
    """Even with a zero byte budget the active segment and the end offset survive."""
    log = PartitionLog.open(tmp_path, config(retention_bytes=0))
    fill(log, 30)
    active = log.segments[-1]
    log.enforce_retention(TS)
    assert log.segments == [active]
    assert log.log_start_offset == active.base_offset and log.end_offset == 30
    assert log.enforce_retention(TS) == []
    log.close()


def test_time_retention_with_injected_now(tmp_path: Path) -> None:
    """Segments whose newest record is older than retention_ms are deleted, oldest first.

    An old, non-empty active segment is rolled first and expires on a later pass.
    """
    log = PartitionLog.open(tmp_path, config(retention_ms=10_000))
    fill(log, 20, ts=TS)
    fill(log, 20, start=20, ts=TS + 50_000)
    old = [s.base_offset for s in log.segments if s.max_timestamp == TS]
    assert old and len(old) < len(log.segments) - 1
    assert log.enforce_retention(TS + 5_000) == []
    assert log.enforce_retention(TS + 59_999) == old
    assert log.segments[0].max_timestamp == TS + 50_000
    assert log.log_start_offset == log.segments[0].base_offset <= 20
    # Everything is now old: the active segment is rolled, then expires next pass.
    end = log.end_offset
    remaining = [s.base_offset for s in log.segments]
    assert log.enforce_retention(TS + 100_000) == remaining[:-1]
    assert log.segments[-1].size == 0 and log.segments[-1].base_offset == end
    assert log.enforce_retention(TS + 100_000) == [remaining[-1]]
    assert (log.log_start_offset, log.end_offset, log.size_bytes) == (end, end, 0)
    assert log.append(payload(1)) == (end, end)
    log.close()


def test_deleted_segments_stay_readable_until_the_next_pass(tmp_path: Path) -> None:
    """A reader holding a deleted segment can finish; the next pass closes and removes it."""
    log = PartitionLog.open(tmp_path, config(retention_bytes=0, file_delete_delay_ms=0))
    fill(log, 20)
    held = log.segments[0]
    data = held.read(0, 10**6)
    log.enforce_retention(TS)
    assert (tmp_path / (log_name(0) + ".deleted")).exists()
    assert held.read(0, 10**6) == data
    log.enforce_retention(TS)
    assert not any(name.endswith(".deleted") for name in os.listdir(tmp_path))
    log.close()


def test_roll_and_delete_before(tmp_path: Path) -> None:
    """roll() seals a non-empty active segment; delete_before drops segments wholly below."""
    log = PartitionLog.open(tmp_path, config(segment_bytes=10**6))
    fill(log, 5)
    log.roll()
    log.roll()
    assert [s.base_offset for s in log.segments] == [0, 5]
    fill(log, 5, start=5)
    assert log.delete_before(7) == [0]
    assert log.log_start_offset == 5
    assert log.delete_before(100) == []
    log.close()


def test_concurrent_reader_sees_only_complete_appends(tmp_path: Path) -> None:
    """A reader thread racing the writer only ever gets whole, contiguous batches below end."""
    log = PartitionLog.open(tmp_path, config(segment_bytes=2000))
    problems: list[str] = []
    done = threading.Event()

    def reader() -> None:
        offset = 0
        while not done.is_set() or offset < log.end_offset:
            end = log.end_offset
            if offset >= end:
                continue
            data = log.read(offset, 700)
            batches, stop = scan_batches(data)
            if stop != len(data) or batches[0][1].base_offset > offset:
                problems.append(f"bad read at {offset}")
                return
            offset = batches[-1][1].next_offset

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(0, 600, 3):
            log.append_many([payload(i + j, records=2) for j in range(3)])
    finally:
        done.set()
        thread.join()
    assert problems == []
    assert log.end_offset == 1200
    log.close()


_FAILING_WRITE = r"""
import json, resource, signal, sys
from pathlib import Path
from rustka.errors import StorageError
from rustka.storage.partition_log import PartitionLog
from rustka.storage.log_config import LogConfig
from rustka.record.batch import Record, encode_batch

def batch(size):
    return encode_batch([Record(None, b"x" * size, timestamp=1)])

directory = Path(sys.argv[1])
log = PartitionLog.open(directory, LogConfig(segment_bytes=1000, segment_ms=None,
                                             retention_ms=None, flush="always"))
while log.segments[-1].size < 850:
    log.append(batch(40))
state = {"end": log.end_offset, "bytes": log.size_bytes, "segments": len(log.segments)}
def recovery_point():
    path = directory / "recovery-point"
    return int.from_bytes(path.read_bytes()[:8], "big") if path.exists() else 0

rp = recovery_point()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
errors = []
for payloads in ([batch(5000)], [batch(200), batch(5000)]):
    try:
        log.append_many(payloads)
    except StorageError as e:
        errors.append(str(e))
after = {"end": log.end_offset, "bytes": log.size_bytes, "segments": len(log.segments)}
rp_after = recovery_point()
files = sorted(p.name for p in directory.iterdir())
sizes = sum(p.stat().st_size for p in directory.glob("*.log"))
ok = log.append(batch(10))
last = log.read_record(ok[0])
log.close()
print(json.dumps({"state": state, "after": after, "errors": errors, "files": files,
                  "sizes": sizes, "ok": ok, "value": last.value.decode(),
                  "rp": [rp, rp_after]}))
"""


def test_failed_writes_leave_the_log_unchanged(tmp_path: Path) -> None:
    """A write the OS refuses (file size limit, like a full disk) is rolled back completely.

    Runs in a child process because RLIMIT_FSIZE applies to the whole process.
    The second case fails in a freshly rolled segment after part of the group
    went to the old one: both are undone and the new segment removed.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _FAILING_WRITE, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    result = json.loads(done.stdout)
    assert len(result["errors"]) == 2
    assert all("nothing was written" in e for e in result["errors"])
    assert result["after"] == result["state"]
    assert result["sizes"] == result["state"]["bytes"]
    assert [f for f in result["files"] if f not in (RECOVERY_POINT_FILE, SNAPSHOT_FILE)] == [
        index_name(0),
        log_name(0),
        time_index_name(0),
    ]
    assert result["rp"] == [0, 0]
    end = result["state"]["end"]
    assert log_name(end + 1) in result["errors"][1]  # it failed in the freshly rolled segment
    assert result["ok"] == [end, end]
    assert result["value"] == "x" * 10
    again = PartitionLog.open(tmp_path, config(), recover=True)
    assert all(s.last_recovery is None for s in again.segments)
    assert again.end_offset == end + 1
    again.close()


def _log_with_recovery_gap(directory: Path) -> tuple[PartitionLog, int, int]:
    """A log whose second segment lost its tail to recovery while later segments survived.

    The victim segment's index is removed and a byte of a middle batch flipped,
    so a normal open rebuilds that segment by a CRC scan and cuts it at the bad
    batch; the segments after it stay. Returns (log, first lost, next stored).
    """
    log = PartitionLog.open(directory, config())
    fill(log, 40)
    victim = log.segments[1]
    following = log.segments[2].base_offset
    log.close()
    batches, _ = scan_batches((directory / log_name(victim.base_offset)).read_bytes())
    assert len(batches) >= 3
    pos, header = batches[len(batches) // 2]
    path = directory / log_name(victim.base_offset)
    data = bytearray(path.read_bytes())
    data[pos + HEADER_SIZE + 1] ^= 0xFF
    path.write_bytes(bytes(data))
    (directory / index_name(victim.base_offset)).unlink()
    again = PartitionLog.open(directory, config())
    info = again.segments[1].last_recovery
    assert info is not None and info.kept_next_offset == header.base_offset
    assert again.segments[2].base_offset == following > header.base_offset
    return again, header.base_offset, following


def test_batched_read_inside_a_recovery_gap_serves_the_next_batch(tmp_path: Path) -> None:
    """Kafka's rule: a read of a lost offset below the end gets the first batch after the gap."""
    log, lost, following = _log_with_recovery_gap(tmp_path)
    assert lost < following < log.end_offset
    for offset in range(lost, following):
        records = decode_records(log.read(offset, 1))
        assert records[0].offset == following
        assert records[0].value == f"value-{following}-0".encode()
    assert decode_records(log.read(lost - 1, 1))[-1].offset == lost - 1
    log.close()


def test_single_record_read_inside_a_recovery_gap_names_the_next_offset(tmp_path: Path) -> None:
    """read_record of a lost offset raises OffsetLost with the next stored offset."""
    log, lost, following = _log_with_recovery_gap(tmp_path)
    for offset in (lost, following - 1):
        with pytest.raises(
            OffsetLost, match=f"offset {offset} holds no record.*crash recovery.*{following}"
        ) as caught:
            log.read_record(offset)
        assert (caught.value.offset, caught.value.next_offset) == (offset, following)
    record = log.read_record(following)
    assert record is not None and record.offset == following
    assert log.read_record(log.end_offset) is None
    log.close()


def test_a_segment_rolls_when_its_index_is_full(tmp_path: Path) -> None:
    """Kafka's segment.index.bytes: once the offset index holds that many bytes of entries
    (or the time index does), the next append starts a new segment."""
    log = PartitionLog.open(
        tmp_path,
        config(segment_bytes=1 << 20, index_interval_bytes=1, segment_index_bytes=8 * 3),
    )
    try:
        fill(log, 12)
        assert len(log.segments) > 1
        assert all(seg.index_entries <= 3 for seg in log.segments)
        assert all(len(seg.time_index) <= 3 for seg in log.segments)
        assert [r.value for r in values_at(log, 11)][-1:] == [b"value-11-0"]
    finally:
        log.close()
    roomy = PartitionLog.open(tmp_path / "roomy", config(segment_bytes=1 << 20))
    try:
        fill(roomy, 12)
        assert len(roomy.segments) == 1
    finally:
        roomy.close()


# -- DeleteRecords: the log start inside a segment -------------------------------------------


def log_start_file(directory: Path) -> int:
    from rustka.storage.log_files import LOG_START_FILE, decode_log_start

    return decode_log_start((directory / LOG_START_FILE).read_bytes())


def test_delete_records_moves_the_log_start_into_a_segment(tmp_path: Path) -> None:
    """The new start lies inside the first segment: reads below it are out of range, the
    batch holding it is still served whole, and it never moves back."""
    directory = tmp_path / "t" / "0"
    log = PartitionLog.open(directory, config(segment_bytes=10_000))
    fill(log, 10, records=3)  # batches of 3: offsets 0..29 in one segment
    assert len(log.segments) == 1
    assert log.delete_records(7) == 7
    assert (log.log_start_offset, log.end_offset) == (7, 30)
    assert log_start_file(directory) == 7
    with pytest.raises(OffsetOutOfRange) as info:
        log.read(6, 100)
    assert (info.value.log_start, info.value.end) == (7, 30)
    with pytest.raises(OffsetOutOfRange):
        log.read_record(3)
    # The batch 6..8 holds offset 7: served whole, the reader skips what is below.
    assert [r.offset for r in values_at(log, 7)] == [7, 8]
    assert log.read_record(7).value == b"value-2-1"  # type: ignore[union-attr]
    assert log.delete_records(5) == 7  # never backwards
    assert log.delete_records(7) == 7
    assert log.describe()["log_start"] == 7
    log.close()


def test_delete_records_to_the_high_watermark_and_beyond(tmp_path: Path) -> None:
    """-1 is the high watermark (the end, on one node); past it is OffsetOutOfRange and
    nothing changes; a negative offset other than -1 likewise."""
    log = PartitionLog.open(tmp_path / "t" / "0", config())
    fill(log, 4)
    for bad in (5, -2):
        with pytest.raises(OffsetOutOfRange):
            log.delete_records(bad)
    assert log.log_start_offset == 0
    assert log.delete_records(-1) == 4
    assert (log.log_start_offset, log.end_offset) == (4, 4)
    assert log.read(4, 100) == b""
    log.append(payload(9))
    assert [r.offset for r in values_at(log, 4)] == [4]
    log.close()


def test_list_offsets_by_time_never_answers_below_the_log_start(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t" / "0", config(segment_bytes=10_000))
    fill(log, 6, records=2)  # offsets 2i, 2i+1 stamped TS + i
    log.delete_records(5)
    assert log.offset_for_timestamp(TS) == (5, TS + 2)
    assert log.offset_for_timestamp(TS + 3) == (6, TS + 3)
    log.close()


def test_log_start_survives_a_restart_and_retention_deletes_segments_below_it(
    tmp_path: Path,
) -> None:
    """Kept in log-start-offset across a reopen (with or without recovery); the next
    retention pass deletes the segments wholly below it even on a compact-only log,
    keeps the one it falls in, and the start stays where it was put."""
    directory = tmp_path / "t" / "0"
    log = PartitionLog.open(directory, config())
    fill(log, 30)
    bases = [seg.base_offset for seg in log.segments]
    assert len(bases) >= 4
    inside = bases[2] + 1
    log.delete_records(inside)
    log.close()
    for recover in (False, True):
        log = PartitionLog.open(directory, config(), recover=recover)
        assert (log.log_start_offset, log.end_offset) == (inside, 30)
        with pytest.raises(OffsetOutOfRange):
            log.read(inside - 1, 10)
        log.close()
    log = PartitionLog.open(directory, config(cleanup_policy="compact"))
    assert log.enforce_retention(TS) == bases[:2]
    assert log.segments[0].base_offset == bases[2]
    assert log.log_start_offset == inside
    log.close()
    log = PartitionLog.open(directory, config())
    assert log.log_start_offset == inside and log.segments[0].base_offset == bases[2]
    log.close()


def test_log_start_when_retention_deleted_past_it(tmp_path: Path) -> None:
    """A stale stored start below the first segment counts for nothing."""
    directory = tmp_path / "t" / "0"
    log = PartitionLog.open(directory, config())
    fill(log, 30)
    log.delete_records(1)
    second = log.segments[2].base_offset
    log.delete_before(second)
    assert log.log_start_offset == second
    log.close()
    log = PartitionLog.open(directory, config())
    assert log.log_start_offset == second
    log.close()


def test_an_interrupted_log_start_write_keeps_the_old_start(tmp_path: Path) -> None:
    """A crash before the rename leaves log-start-offset.tmp (torn, garbage): opening
    removes it and keeps the start the last complete write recorded."""
    from rustka.storage.log_files import LOG_START_FILE

    directory = tmp_path / "t" / "0"
    log = PartitionLog.open(directory, config())
    fill(log, 10)
    log.delete_records(3)
    log.close()
    (directory / (LOG_START_FILE + ".tmp")).write_bytes(b"\x00\x00\x00")
    log = PartitionLog.open(directory, config(), recover=True)
    assert log.log_start_offset == 3 and log.log_start_note is None
    assert not (directory / (LOG_START_FILE + ".tmp")).exists()
    log.close()


def test_a_damaged_log_start_file_loses_no_record(tmp_path: Path) -> None:
    """Damage cannot say where the start was: the log starts at its first segment (the
    records are still there), the open says so, and rustka check reports the file."""
    from rustka.storage.inspect import check_data_dir
    from rustka.storage.log_files import LOG_START_FILE

    directory = tmp_path / "t" / "0"
    log = PartitionLog.open(directory, config())
    fill(log, 10)
    log.delete_records(3)
    log.close()
    assert check_data_dir(tmp_path).problems == []
    path = directory / LOG_START_FILE
    data = bytearray(path.read_bytes())
    data[7] ^= 0x01
    path.write_bytes(bytes(data))
    problems = check_data_dir(tmp_path).problems
    assert [(p.file, p.message) for p in problems] == [(str(path), "checksum mismatch")]
    log = PartitionLog.open(directory, config())
    assert log.log_start_offset == 0
    assert log.log_start_note is not None and "damaged" in log.log_start_note
    assert log.read_record(0).value == b"value-0-0"  # type: ignore[union-attr]
    log.close()


def test_a_log_that_ends_below_its_stored_start_starts_over_there(tmp_path: Path) -> None:
    """Segments lost below the stored start (files removed by hand): as Kafka's loader,
    the log restarts empty at the start, so no deleted offset is handed out again."""
    from rustka.storage.inspect import check_data_dir

    directory = tmp_path / "t" / "0"
    log = PartitionLog.open(directory, config())
    fill(log, 30)
    log.delete_records(25)
    lost = [seg.base_offset for seg in log.segments if seg.base_offset >= 20]
    assert lost and lost[0] < 25
    log.close()
    for seg_base in lost:
        for name in (log_name(seg_base), index_name(seg_base), time_index_name(seg_base)):
            (directory / name).unlink()
    notes = check_data_dir(tmp_path)
    assert any("log start 25" in p.message for p in notes.problems)
    log = PartitionLog.open(directory, config())
    assert (log.log_start_offset, log.end_offset) == (25, 25)
    assert [seg.base_offset for seg in log.segments] == [25]
    assert log.log_start_note is not None
    assert log.append(payload(99)) == (25, 25)
    log.close()


_KILL_CHILD = r"""
import sys
from pathlib import Path
from rustka.storage.partition_log import PartitionLog
from rustka.storage.log_config import LogConfig
from rustka.record.batch import Record, encode_batch

directory = Path(sys.argv[1])
log = PartitionLog.open(directory, LogConfig(segment_bytes=400, segment_ms=None,
                                             retention_ms=None, flush="never"))
if log.end_offset == 0:
    for i in range(2000):
        log.append(encode_batch([Record(None, b"v%d" % i, timestamp=1)]))
    log.flush()
print("ready", flush=True)
target = log.log_start_offset
while target < log.end_offset:
    target += 1
    log.delete_records(target)
    print(target, flush=True)
"""


def test_kill_9_while_moving_the_log_start_keeps_every_answered_move(tmp_path: Path) -> None:
    """A child moves the log start one offset at a time, printing each answered move; it
    is killed at a random point of its output. Reopened, the log starts at the last
    answered move or the one in flight, never below, and the file is whole."""
    import random
    import signal

    directory = tmp_path / "t" / "0"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    answered = 0
    for round_ in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", _KILL_CHILD, str(directory)],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        for _ in range(random.randint(1, 200)):
            line = child.stdout.readline()
            if not line:
                break
            answered = int(line)
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        # Every move it printed before it died was answered.
        for line in child.stdout.read().split():
            answered = int(line)
        child.stdout.close()
        log = PartitionLog.open(directory, config(), recover=True)
        try:
            assert log.log_start_offset in (answered, answered + 1), round_
            assert log_start_file(directory) == log.log_start_offset
            assert log.end_offset == 2000
            if log.log_start_offset < 2000:
                assert log.read_record(log.log_start_offset) is not None
        finally:
            log.close()


def test_deleted_segments_stay_open_for_file_delete_delay_ms(tmp_path: Path) -> None:
    """Kafka's file.delete.delay.ms: a deleted segment's files go neither at the next
    pass nor at a release before the delay is over, and go at either once it is; a
    segment deleted later keeps its own delay."""
    now = [TS]
    log = PartitionLog.open(
        tmp_path, config(retention_bytes=0, file_delete_delay_ms=1000), clock=lambda: now[0]
    )
    fill(log, 20)

    def deleted_files() -> list[str]:
        return sorted(name for name in os.listdir(tmp_path) if name.endswith(".log.deleted"))

    first = log.enforce_retention(TS)
    assert first and deleted_files()
    now[0] += 999
    assert log.release_deleted() == 0
    assert log.enforce_retention(now[0]) == []
    assert deleted_files()
    fill(log, 10, start=20)
    log.roll()
    second = log.enforce_retention(now[0])  # at TS + 999: due at TS + 1999
    assert second
    now[0] = TS + 1000
    assert log.release_deleted() == len(first)
    assert deleted_files() == sorted(log_name(b) + ".deleted" for b in second)
    now[0] = TS + 1999
    assert log.enforce_retention(now[0]) == []
    assert deleted_files() == []
    log.close()


def test_flush_always_fsyncs_the_log_alone_and_recovery_rebuilds_the_indexes(
    tmp_path: Path,
) -> None:
    """An acknowledgement under flush=always waits for one fsync, of the log: the active
    segment's indexes are not made durable per append, since a crash is followed by a
    recovery scan of that segment, which rebuilds them from the log."""
    from rustka.storage.file_io import SYNC_STATS

    log = PartitionLog.open(
        tmp_path, config(flush="always", segment_bytes=1 << 20, index_interval_bytes=1)
    )
    before = SYNC_STATS.count
    fill(log, 30)
    # Each append added index entries, and still cost one fsync.
    assert SYNC_STATS.count - before == 30
    active = log.segments[-1]
    assert active.index_entries >= 29
    base = active.base_offset
    # A crash that lost everything the indexes held: no close(), index files emptied.
    for seg in log.segments:
        seg.close()
    for name in (index_name(base), time_index_name(base)):
        (tmp_path / name).write_bytes(b"")
    again = PartitionLog.open(
        tmp_path,
        config(flush="always", segment_bytes=1 << 20, index_interval_bytes=1),
        recover=True,
    )
    assert again.end_offset == 30
    info = again.segments[-1].last_recovery
    assert info is not None and info.index_rebuilt
    assert again.segments[-1].index_entries >= 29
    for i in range(30):
        [record] = values_at(again, i)
        assert record.key == f"k{i}".encode()
    assert again.offset_for_timestamp(TS + 17) == (17, TS + 17)
    again.close()
