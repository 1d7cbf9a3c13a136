"""The log cleaner (rustka/storage/cleaner.py) on real partition logs, without a reactor.

Kafka's semantics are the reference (LogCleaner, LogCleanerManager.cleanableOffsets,
MemoryRecords.filterTo): the latest record of each key stays at its offset, the
active segment is never touched, the compaction lags and the dirty ratio decide
what is cleaned, tombstones last until their delete horizon, and a rewritten
batch keeps its header fields.
"""

from __future__ import annotations

import os
import random
import struct
import tracemalloc
from pathlib import Path

import pytest
from crc32c import crc32c

from rustka.errors import OffsetLost, StorageError
from rustka.record.batch import (
    DELETE_HORIZON_BIT,
    BatchHeader,
    Record,
    compress_batch,
    decode_records,
    delete_horizon,
    encode_batch,
    parse_header,
)
from rustka.storage import inspect
from rustka.storage.cleaner import (
    CleanableRange,
    Cleaning,
    OffsetMap,
    cleanable_range,
    group_segments,
    map_entry_bytes,
)
from rustka.storage.log_config import LogConfig
from rustka.storage.log_files import (
    CLEANED_SUFFIX,
    CLEANER_CHECKPOINT_FILE,
    CLEANER_SWAP_FILE,
    CleanerSwap,
    encode_cleaner_swap,
)
from rustka.storage.partition_log import PartitionLog, SegmentsChanged
from rustka.storage.producer_state import SNAPSHOT_FILE

NOW = 1_700_000_000_000
OLD = NOW - 3_600_000
RETENTION = 60_000


def compacted(**changes: object) -> LogConfig:
    settings: dict[str, object] = {
        "cleanup_policy": "compact",
        "segment_bytes": 2048,
        "segment_ms": None,
        "retention_ms": None,
        "index_interval_bytes": 256,
        "flush": "never",
        "delete_retention_ms": RETENTION,
    }
    settings.update(changes)
    return LogConfig(**settings)  # type: ignore[arg-type]


def open_log(path: Path, config: LogConfig | None = None, **kwargs: object) -> PartitionLog:
    return PartitionLog.open(path, config or compacted(), clock=lambda: NOW, **kwargs)  # type: ignore[arg-type]


def put(
    log: PartitionLog,
    key: bytes | None,
    value: bytes | None,
    ts: int = OLD,
    headers: tuple[tuple[str, bytes | None], ...] = (),
) -> int:
    return log.append(encode_batch([Record(key, value, headers, ts)])).first


def clean(log: PartitionLog, now: int = NOW, map_bytes: int = 1 << 20) -> Cleaning:
    cleaning = Cleaning(log, map_bytes=map_bytes, now_ms=now)
    for _ in range(10_000):
        if cleaning.done:
            return cleaning
        cleaning.step(64 * 1024)
    raise AssertionError("the round did not finish")


def batches(log: PartitionLog) -> list[tuple[BatchHeader, list[Record]]]:
    """Every stored batch with its records, read the way a fetch reads them."""
    out: list[tuple[BatchHeader, list[Record]]] = []
    offset = log.log_start_offset
    while offset < log.end_offset:
        data = log.read(offset, 1 << 20)
        pos = 0
        while pos < len(data):
            header = parse_header(data, pos)
            out.append((header, decode_records(data, pos)))
            pos += header.size
            offset = header.next_offset
    return out


def stored(log: PartitionLog) -> list[Record]:
    return [r for _, records in batches(log) for r in records]


def fill(log: PartitionLog, rng: random.Random, writes: int, keys: int) -> dict[bytes, Record]:
    """Random versions of ``keys`` keys, a tenth of them tombstones; the latest of each."""
    latest: dict[bytes, Record] = {}
    for i in range(writes):
        key = b"key-%d" % rng.randrange(keys)
        value = None if rng.random() < 0.1 else b"value-%d" % i
        headers = (("n", b"%d" % i),) if i % 7 == 0 else ()
        offset = put(log, key, value, OLD + i, headers)
        latest[key] = Record(key, value, headers, OLD + i, offset)
    return latest


def by_offset(records: dict[bytes, Record]) -> list[Record]:
    return sorted(records.values(), key=lambda r: r.offset or 0)


def empty_of(log: PartitionLog, offset: int) -> bytes:
    """The stored bytes of the (header-only) batch at ``offset``."""
    data = log.read(offset, 1)
    return data[: parse_header(data).size]


def idempotent(records: list[Record], pid: int, seq: int, epoch: int = 0) -> bytes:
    data = bytearray(encode_batch(records))
    struct.pack_into(">qhi", data, 43, pid, epoch, seq)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


# ---------------------------------------------------------------------- what is kept


def test_keeps_the_latest_record_of_every_key_at_its_offset(tmp_path: Path) -> None:
    data_dir = tmp_path
    tmp_path = data_dir / "topic" / "0"
    log = open_log(tmp_path)
    latest = fill(log, random.Random(7), 900, 40)
    log.roll()
    before = log.size_bytes
    cleaning = clean(log)
    assert stored(log) == by_offset(latest)  # tombstones too: their horizon is ahead
    assert log.size_bytes < before / 5
    assert (log.log_start_offset, log.end_offset) == (0, 900)
    stats = cleaning.stats
    assert (stats.records_read, stats.records_kept) == (900, 40)
    assert stats.keys_mapped == 40 and stats.cleaned_to == 900
    assert stats.bytes_read > before and stats.bytes_written == log.size_bytes
    assert log.cleaner_checkpoint.first_dirty == 900
    assert not [n for n in os.listdir(tmp_path) if n.endswith(CLEANED_SUFFIX)]
    log.close()
    again = open_log(tmp_path, recover=True)
    assert stored(again) == by_offset(latest)
    assert all(seg.last_recovery is None for seg in again.segments)
    report = inspect.check_data_dir(data_dir)
    assert report.files_checked > 10 and not report.problems, report.problems
    again.close()


def test_every_read_path_serves_across_the_gaps(tmp_path: Path) -> None:
    """A fetch at an offset cleaning removed gets the next stored batch (as Kafka serves
    it), a time lookup skips the gaps, and a single-record read names the next offset."""
    log = open_log(tmp_path)
    for i in range(60):
        put(log, b"k%d" % (i % 3), b"v%d" % i, OLD + i)
    log.roll()
    clean(log)
    kept = [r.offset for r in stored(log)]
    assert kept == [57, 58, 59]
    for offset in range(0, 60):
        data = log.read(offset, 1)
        first = decode_records(data, min_offset=offset)[0]
        assert first.offset == next(k for k in kept if k >= offset)
    assert log.offset_for_timestamp(OLD) == (57, OLD + 57)
    with pytest.raises(OffsetLost) as lost:
        log.read_record(10)
    assert lost.value.next_offset == 57
    record = log.read_record(58)
    assert record is not None and record.value == b"v58"
    log.close()


def test_the_active_segment_is_never_cleaned(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(40):
        put(log, b"same", b"old-%d" % i)
    log.roll()
    for i in range(5):
        put(log, b"same", b"new-%d" % i)
    active = log.segments[-1]
    before = os.pread(os.open(active.log_path, os.O_RDONLY), active.size, 0)
    found = cleanable_range(log, NOW)
    assert found.first_uncleanable == active.base_offset == 40
    clean(log)
    # The sealed part keeps its own latest (the map never sees the active segment),
    # and the active segment is byte for byte what was appended.
    assert [r.value for r in stored(log)] == [b"old-39"] + [b"new-%d" % i for i in range(5)]
    assert log.segments[-1] is active
    assert os.pread(os.open(active.log_path, os.O_RDONLY), active.size, 0) == before
    log.close()


def test_records_without_a_key_are_dropped_up_to_the_mapped_range(tmp_path: Path) -> None:
    """Written before the topic was compacted, say: the cleaner drops them (Kafka's
    invalidMessage), but only where its map reaches; after it they stay."""
    log = open_log(tmp_path)
    put(log, None, b"no key")
    put(log, b"k", b"v")
    log.roll()
    put(log, None, b"in the active segment")
    cleaning = clean(log)
    assert [(r.key, r.value) for r in stored(log)] == [
        (b"k", b"v"),
        (None, b"in the active segment"),
    ]
    assert cleaning.stats.records_without_key == 1
    log.close()


# ---------------------------------------------------------------------- choosing what to clean


def test_cleanable_range_and_dirty_ratio_as_kafka_computes_them(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, random.Random(1), 300, 10)
    log.roll()
    first = cleanable_range(log, NOW)
    assert (first.first_dirty, first.clean_bytes, first.dirty_ratio) == (0, 0, 1.0)
    assert first.cleanable_bytes == log.size_bytes - log.segments[-1].size
    assert first.due(0.5) and first.due(0.99)
    clean(log)
    cleaned = log.size_bytes
    fill(log, random.Random(2), 100, 10)
    log.roll()
    second = cleanable_range(log, NOW)
    assert second.first_dirty == 300 and second.first_uncleanable == 400
    assert second.clean_bytes == cleaned
    assert second.dirty_ratio == pytest.approx(
        second.cleanable_bytes / (cleaned + second.cleanable_bytes)
    )
    assert second.due(second.dirty_ratio - 0.01)
    assert not second.due(second.dirty_ratio)  # Kafka: strictly above min.cleanable.dirty.ratio
    empty = CleanableRange(5, 5, 100, 0)
    assert empty.dirty_ratio == 0 and not empty.due(0.0)
    log.close()


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path) -> None:
    """A segment whose newest record is within min.compaction.lag.ms of now, and all
    after it, are uncleanable (Kafka's cleanableOffsets)."""
    log = open_log(tmp_path, compacted(min_compaction_lag_ms=600_000))
    for i in range(30):
        put(log, b"k", b"old-%d" % i, NOW - 3_600_000)
    log.roll()
    young = log.end_offset
    for i in range(30):
        put(log, b"k", b"young-%d" % i, NOW - 60_000)
    log.roll()
    found = cleanable_range(log, NOW)
    assert found.first_uncleanable == young
    clean(log)
    values = [r.value for r in stored(log)]
    assert values == [b"old-29"] + [b"young-%d" % i for i in range(30)]
    later = cleanable_range(log, NOW + 600_000)
    assert later.first_uncleanable == log.segments[-1].base_offset
    clean(log, now=NOW + 600_000)
    assert [r.value for r in stored(log)] == [b"young-29"]
    log.close()


def test_max_compaction_lag_makes_a_log_due_whatever_its_dirty_ratio(tmp_path: Path) -> None:
    config = compacted(max_compaction_lag_ms=3_600_000, min_cleanable_dirty_ratio=0.99)
    log = open_log(tmp_path, config)
    for i in range(200):
        put(log, b"k%d" % i, b"v" * 20, NOW - 7_200_000)
    log.roll()
    clean(log)
    put(log, b"k1", b"new", NOW - 7_200_000)
    log.roll()
    found = cleanable_range(log, NOW)
    assert found.dirty_ratio < 0.99 and found.overdue
    assert found.due(config.min_cleanable_dirty_ratio)
    assert not cleanable_range(log, NOW - 3_700_000).overdue
    log.close()


def test_group_segments_merges_up_to_segment_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, compacted(segment_bytes=1000))
    for i in range(60):
        put(log, b"k%d" % i, b"v" * 40)
    log.roll()
    sealed = log.segments[:-1]
    groups = group_segments(sealed, 2500, log.end_offset)
    assert [seg for group in groups for seg in group] == sealed
    for group in groups:
        assert sum(seg.size for seg in group) <= 2500 or len(group) == 1
    assert len(sealed) == 6 and len(groups) == 3
    assert [len(g) for g in group_segments(sealed, 1, log.end_offset)] == [1] * len(sealed)
    log.close()


# ---------------------------------------------------------------------- tombstones


def test_tombstones_stay_until_their_delete_horizon_then_go(tmp_path: Path) -> None:
    """KIP-534: the first clean that keeps a tombstone stamps its batch with the horizon
    now + delete.retention.ms (bit 0x40); a clean at or after it drops the tombstone,
    and the checkpoint's horizon makes the log due then even with nothing new."""
    log = open_log(tmp_path)
    put(log, b"gone", b"v1")
    put(log, b"kept", b"v2")
    put(log, b"gone", None)
    log.roll()
    clean(log)
    (head_kept, _), (head_tomb, tomb) = batches(log)
    assert tomb[0].key == b"gone" and tomb[0].value is None and tomb[0].timestamp == OLD
    assert head_tomb.attributes & DELETE_HORIZON_BIT
    assert delete_horizon(head_tomb) == NOW + RETENTION
    assert delete_horizon(head_kept) is None
    assert log.cleaner_checkpoint.horizon == NOW + RETENTION
    assert not cleanable_range(log, NOW + RETENTION - 1).due(0.5)
    clean(log, now=NOW + RETENTION - 1)
    assert [r.value for r in stored(log)] == [b"v2", None]
    found = cleanable_range(log, NOW + RETENTION)
    assert found.horizon_due and found.cleanable_bytes == 0 and found.due(0.5)
    cleaning = clean(log, now=NOW + RETENTION)
    assert [(r.key, r.value) for r in stored(log)] == [(b"kept", b"v2")]
    assert cleaning.stats.tombstones_dropped == 1
    assert log.cleaner_checkpoint.horizon == -1
    log.close()


# ---------------------------------------------------------------------- batches


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_rewritten_batches_keep_their_header_fields(tmp_path: Path, codec: str) -> None:
    """Base offset, last offset delta, producer id, epoch and base sequence, codec and
    the kept records' timestamps are what the producer sent."""
    log = open_log(tmp_path)
    records = [Record(b"k%d" % (i % 4), b"v%d" % i, timestamp=OLD + i) for i in range(10)]
    batch = idempotent(records, pid=900, seq=0, epoch=2)
    log.append(batch if codec == "none" else compress_batch(batch, codec))
    put(log, b"k0", b"newer")
    log.roll()
    original = parse_header(batch if codec == "none" else compress_batch(batch, codec))
    clean(log)
    (header, kept), (_, newer) = batches(log)
    # k0's versions are all older than "newer"; k1, k2, k3 keep their last.
    assert [(r.offset, r.value) for r in kept] == [(6, b"v6"), (7, b"v7"), (9, b"v9")]
    assert [r.timestamp for r in kept] == [OLD + 6, OLD + 7, OLD + 9]
    assert (header.base_offset, header.last_offset_delta) == (0, 9)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (900, 2, 0)
    assert header.attributes == original.attributes
    assert header.record_count == 3 and header.max_timestamp == OLD + 9
    assert newer[0].value == b"newer"
    log.close()


def test_emptied_batches_are_kept_only_where_kafka_keeps_them(tmp_path: Path) -> None:
    """An idempotent producer's last batch stays as a header (its sequence), and so does
    the round's last batch (its end offset); other emptied batches go."""
    log = open_log(tmp_path)
    log.append(idempotent([Record(b"a", b"1", timestamp=OLD)], pid=5, seq=0))
    log.append(idempotent([Record(b"a", b"2", timestamp=OLD)], pid=5, seq=1))
    put(log, b"a", b"3")
    put(log, b"b", b"4")
    put(log, b"b", b"5")
    put(log, None, b"no key, and the round's last batch")
    log.roll()
    cleaning = clean(log)
    kept = [(h.base_offset, h.record_count, h.producer_id) for h, _ in batches(log)]
    assert kept == [(1, 0, 5), (2, 1, -1), (4, 1, -1), (5, 0, -1)]
    assert cleaning.stats.batches_emptied == 2
    assert parse_header(empty_of(log, 1)).last_offset_delta == 0
    put(log, b"b", b"6")
    log.roll()
    clean(log)
    kept = [(h.base_offset, h.record_count) for h, _ in batches(log)]
    assert kept == [(1, 0), (2, 1), (6, 1)]
    log.close()


def test_idempotent_producer_state_survives_cleaning_and_restarts(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for seq in range(6):
        log.append(idempotent([Record(b"k", b"%d" % seq, timestamp=OLD)], pid=7, seq=seq))
    put(log, b"k", b"plain")
    log.roll()
    state = log.producer_state.producers()
    clean(log)
    assert log.producer_state.producers() == state
    log.close()
    for snapshot in (True, False):
        if not snapshot:
            os.unlink(tmp_path / SNAPSHOT_FILE)
        again = open_log(tmp_path)
        entry = again.producer_state.entry(7)
        assert entry is not None and entry.epoch == 0
        assert entry.batches[-1] == state[7].batches[-1]
        if snapshot:
            assert again.producer_state.producers() == state
        retry = again.append_many([idempotent([Record(b"k", b"5", timestamp=OLD)], 7, 5)])[0]
        assert retry.duplicate and retry.first == 5
        again.close()
    again = open_log(tmp_path)
    assert again.append(idempotent([Record(b"k", b"6", timestamp=OLD)], 7, 6)).first == 7
    again.close()


# ---------------------------------------------------------------------- policies


def test_compact_delete_applies_retention_and_compact_alone_does_not(tmp_path: Path) -> None:
    for policy, survives in (("compact", True), ("compact,delete", False)):
        log = open_log(tmp_path / policy, compacted(cleanup_policy=policy, retention_ms=1000))
        for i in range(40):
            put(log, b"k%d" % i, b"v" * 30, NOW - 10_000)
        log.roll()
        deleted = log.enforce_retention(NOW)
        assert (log.log_start_offset == 0) is survives, (policy, deleted)
        log.close()


def test_an_idle_compacted_log_rolls_its_active_segment_after_segment_ms(
    tmp_path: Path,
) -> None:
    """Otherwise its last records would never be compacted: the cleaner skips the
    active segment, and an idle topic sees no append to roll it."""
    log = open_log(tmp_path, compacted(segment_ms=1000))
    put(log, b"k", b"v1", NOW)
    put(log, b"k", b"v2", NOW)
    log.enforce_retention(NOW + 1000)
    assert len(log.segments) == 1
    log.enforce_retention(NOW + 1001)
    assert len(log.segments) == 2 and log.segments[-1].size == 0
    clean(log)
    assert [r.value for r in stored(log)] == [b"v2"]
    plain = open_log(tmp_path / "plain", LogConfig(segment_ms=1000, retention_ms=None))
    put(plain, b"k", b"v", NOW)
    plain.enforce_retention(NOW + 5000)
    assert len(plain.segments) == 1
    log.close()
    plain.close()


# ---------------------------------------------------------------------- the key map


def test_a_full_key_map_cleans_a_prefix_and_the_next_round_the_rest(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    latest = fill(log, random.Random(3), 600, 120)
    log.roll()
    small = 40 * map_entry_bytes(7)
    first = clean(log, map_bytes=small)
    assert 0 < first.stats.cleaned_to < 600
    assert first.stats.keys_mapped <= 40 and first.stats.map_memory_bytes <= small
    assert log.cleaner_checkpoint.first_dirty == first.stats.cleaned_to
    for _ in range(20):
        if log.cleaner_checkpoint.first_dirty == 600:
            break
        clean(log, map_bytes=small)
    assert log.cleaner_checkpoint.first_dirty == 600
    assert stored(log) == by_offset(latest)
    log.close()


def test_a_key_map_too_small_for_one_batch_is_an_error(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(encode_batch([Record(b"k%d" % i, b"v", timestamp=OLD) for i in range(50)]))
    log.roll()
    cleaning = Cleaning(log, map_bytes=10 * map_entry_bytes(3), now_ms=NOW)
    with pytest.raises(StorageError, match="cannot hold the keys of one batch"):
        cleaning.step(1 << 20)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(CLEANED_SUFFIX)]
    log.close()


def test_the_key_map_stays_within_its_memory_bound() -> None:
    """The most Python allocates for the map (tracemalloc's peak, a table resize
    included) stays under its bound, for short keys stored as they are and long ones
    stored as digests, and the map does not count wildly more than it uses."""
    for key_size in (8, 15, 40):
        for limit in (1 << 20, 4_300_000, 8 << 20):
            tracemalloc.start()
            offset_map = OffsetMap(limit)
            stored_keys = 0
            for offset in range(200_000):
                # A fresh key each time, as decoding a record makes one.
                if not offset_map.put(b"%0*d" % (key_size, offset), offset + 1_000_000):
                    break
                stored_keys += 1
            used, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert 5_000 < stored_keys < 200_000
            assert peak <= limit, (key_size, peak, limit)
            assert offset_map.memory_used <= limit
            assert used > 0.5 * offset_map.memory_used, (key_size, used)
            assert offset_map.get(b"%0*d" % (key_size, 0)) == 1_000_000
            assert offset_map.get(b"absent") == -1


# ---------------------------------------------------------------------- interruptions


def test_a_round_stops_when_retention_removes_its_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, compacted(cleanup_policy="compact,delete", retention_ms=1000))
    for i in range(200):
        put(log, b"k%d" % (i % 50), b"v" * 30, NOW - 10_000 if i < 100 else NOW)
    log.roll()
    before = stored(log)
    cleaning = Cleaning(log, map_bytes=1 << 20, now_ms=NOW, chunk_bytes=512)
    cleaning.step(1)
    assert not cleaning.done
    log.enforce_retention(NOW)
    with pytest.raises(SegmentsChanged):
        for _ in range(1000):
            cleaning.step(1)
    assert cleaning.done
    assert stored(log) == [r for r in before if (r.offset or 0) >= log.log_start_offset]
    assert not [n for n in os.listdir(tmp_path) if n.endswith(CLEANED_SUFFIX)]
    log.close()


def test_abort_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, random.Random(4), 400, 20)
    log.roll()
    before = stored(log)
    cleaning = Cleaning(log, map_bytes=1 << 20, now_ms=NOW, chunk_bytes=1024)
    for _ in range(40):
        cleaning.step(2048)
        if any(n.endswith(CLEANED_SUFFIX) for n in os.listdir(tmp_path)):
            break
    assert any(n.endswith(CLEANED_SUFFIX) for n in os.listdir(tmp_path))
    cleaning.abort()
    assert cleaning.done
    assert not [n for n in os.listdir(tmp_path) if n.endswith(CLEANED_SUFFIX)]
    log.close()
    assert stored(open_log(tmp_path)) != [] and log.cleaner_checkpoint.first_dirty == 0
    again = open_log(tmp_path)
    assert stored(again)[-len(before) // 4 :] == before[-len(before) // 4 :]
    again.close()


def test_gaps_are_allowed_where_the_cleaner_wrote(tmp_path: Path) -> None:
    """Below the checkpoint's bound a cleaned segment's gaps are normal, even under a full
    recovery scan; a damaged or lost checkpoint of a compacted log lets every sealed
    segment keep its gaps rather than read them as damage and cut records off
    (elsewhere a skipped offset is still damage: tests/storage/test_segment.py)."""
    log = open_log(tmp_path)
    for i in range(30):
        put(log, b"k%d" % (i % 2), b"v%d" % i)
    log.roll()
    clean(log)
    assert log.cleaner_checkpoint.cleaned_below == log.segments[-1].base_offset == 30
    log.close()
    for damage in (b"garbage", None):
        if damage is None:
            os.unlink(tmp_path / CLEANER_CHECKPOINT_FILE)
        else:
            (tmp_path / CLEANER_CHECKPOINT_FILE).write_bytes(damage)
        again = open_log(tmp_path, recover=True)
        assert [r.value for r in stored(again)] == [b"v28", b"v29"]
        assert again.cleaner_checkpoint.cleaned_below == 30
        assert again.cleaner_checkpoint.first_dirty == 0
        again.close()


def test_a_damaged_swap_file_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    put(log, b"k", b"v")
    log.close()
    (tmp_path / CLEANER_SWAP_FILE).write_bytes(b"RKCS\x01 torn")
    with pytest.raises(StorageError, match="cleaner-swap is damaged"):
        open_log(tmp_path)


def test_rustka_check_reports_the_cleaner_files(tmp_path: Path) -> None:
    """A damaged checkpoint is a problem of its own file, and a swap file left by a crash
    is a note (the next start finishes the swap); the cleaned segments' gaps are not."""
    directory = tmp_path / "topic" / "0"
    log = open_log(directory)
    for i in range(30):
        put(log, b"k%d" % (i % 2), b"v%d" % i)
    log.roll()
    clean(log)
    log.close()
    assert not inspect.check_data_dir(tmp_path).problems
    (directory / CLEANER_SWAP_FILE).write_bytes(encode_cleaner_swap(CleanerSwap(0, (0,), 30)))
    report = inspect.check_data_dir(tmp_path)
    assert not report.problems
    assert any("being swapped in" in note for note in report.notes)
    os.unlink(directory / CLEANER_SWAP_FILE)
    (directory / CLEANER_CHECKPOINT_FILE).write_bytes(b"\x00" * 28)
    problems = inspect.check_data_dir(tmp_path).problems
    assert any(p.file.endswith(CLEANER_CHECKPOINT_FILE) for p in problems), problems
