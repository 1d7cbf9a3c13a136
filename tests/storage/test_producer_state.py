"""Idempotent producer state: Kafka's sequence rules, and its rebuild from the log."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from rustka.errors import OutOfOrderSequence, ProducerFenced
from rustka.record.batch import Record, decode_records, encode_batch
from rustka.storage.log_config import LogConfig
from rustka.storage.log_files import log_name
from rustka.storage.partition_log import PartitionLog
from rustka.storage.producer_state import (
    BATCHES_KEPT,
    MAX_SEQUENCE,
    SNAPSHOT_FILE,
    BatchMetadata,
    ProducerStateManager,
    last_sequence,
)

TS = 1_700_000_000_000
PID = 4242


def config() -> LogConfig:
    return LogConfig(
        segment_bytes=600,
        segment_ms=None,
        retention_ms=None,
        index_interval_bytes=128,
        flush="never",
    )


def idempotent(seq: int, records: int = 2, pid: int = PID, epoch: int = 0, tag: str = "") -> bytes:
    """A batch as an idempotent producer sends it: producer fields set, CRC recomputed."""
    data = bytearray(
        encode_batch(
            [Record(b"k", f"{tag}{seq}-{j}".encode(), timestamp=TS) for j in range(records)]
        )
    )
    struct.pack_into(">qhi", data, 43, pid, epoch, seq)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def values(log: PartitionLog) -> list[bytes]:
    out: list[bytes] = []
    offset = log.log_start_offset
    while offset < log.end_offset:
        records = decode_records(log.read(offset, 1), min_offset=offset)
        out.extend(r.value or b"" for r in records)
        offset = records[-1].offset + 1  # type: ignore[operator]
    return out


# ---------------------------------------------------------------------- the rules


def test_sequences_wrap_after_the_largest_int32() -> None:
    """Sequences wrap to 0 after 2^31-1, within a batch and from one batch to the next."""
    assert last_sequence(MAX_SEQUENCE - 1, 3) == 0
    assert last_sequence(MAX_SEQUENCE, 1) == MAX_SEQUENCE
    state = ProducerStateManager()
    state.update(PID, 0, MAX_SEQUENCE - 1, 2, 0, 1)
    assert state.check(PID, 0, 0, 5) is None
    with pytest.raises(OutOfOrderSequence, match="expected sequence 0"):
        state.check(PID, 0, MAX_SEQUENCE + 0, 1)


def test_duplicate_gap_and_reorder() -> None:
    """A batch seen among the last five is a duplicate; anything else must follow the last."""
    state = ProducerStateManager()
    assert state.check(PID, 0, 0, 3) is None
    state.update(PID, 0, 0, 3, 100, 102)
    state.update(PID, 0, 3, 2, 103, 104)
    assert state.check(PID, 0, 0, 3) == BatchMetadata(0, 2, 100, 102)
    assert state.check(PID, 0, 3, 2) == BatchMetadata(3, 4, 103, 104)
    assert state.check(PID, 0, 5, 1) is None
    with pytest.raises(OutOfOrderSequence, match="expected sequence 5, got 7"):
        state.check(PID, 0, 7, 1)
    with pytest.raises(OutOfOrderSequence, match="expected sequence 5, got 1"):
        state.check(PID, 0, 1, 2)


def test_only_the_last_five_batches_are_remembered() -> None:
    """A retry older than the last five batches is no longer a duplicate: it is out of order."""
    state = ProducerStateManager()
    for i in range(BATCHES_KEPT + 1):
        state.update(PID, 0, i, 1, i, i)
    entry = state.entry(PID)
    assert entry is not None and len(entry.batches) == BATCHES_KEPT
    assert state.check(PID, 0, 1, 1) == BatchMetadata(1, 1, 1, 1)
    with pytest.raises(OutOfOrderSequence):
        state.check(PID, 0, 0, 1)


def test_epochs_fence_and_restart_sequences() -> None:
    """An older epoch is fenced; a newer one must start at sequence 0 and forgets the old."""
    state = ProducerStateManager()
    state.update(PID, 3, 0, 2, 0, 1)
    with pytest.raises(ProducerFenced, match=r"epoch 2.*epoch 3"):
        state.check(PID, 2, 2, 1)
    with pytest.raises(OutOfOrderSequence, match="must start at sequence 0"):
        state.check(PID, 4, 2, 1)
    assert state.check(PID, 4, 0, 1) is None
    state.update(PID, 4, 0, 1, 2, 2)
    entry = state.entry(PID)
    assert entry is not None and entry.epoch == 4 and len(entry.batches) == 1
    assert state.check(PID, 4, 0, 1) == BatchMetadata(0, 0, 2, 2)


def test_snapshot_round_trip_and_damage() -> None:
    """encode/decode keep every entry; a flipped byte makes the snapshot unusable."""
    state = ProducerStateManager()
    for pid in (1, 2, 99):
        for i in range(7):
            state.update(pid, pid % 3, i * 2, 2, 1000 * pid + i * 2, 1000 * pid + i * 2 + 1)
    data = state.encode(12345)
    decoded = ProducerStateManager.decode(data)
    assert decoded is not None
    assert decoded[0] == 12345 and decoded[1].producers() == state.producers()
    damaged = bytearray(data)
    damaged[20] ^= 1
    assert ProducerStateManager.decode(bytes(damaged)) is None
    assert ProducerStateManager.decode(data[:-1]) is None


# ---------------------------------------------------------------------- in the partition log


def test_duplicate_is_answered_with_original_offsets_and_not_stored(tmp_path: Path) -> None:
    """A retried batch returns its first offsets with duplicate=True; the log does not grow."""
    log = PartitionLog.open(tmp_path, config())
    log.append(encode_batch([Record(b"x", b"plain", timestamp=TS)]))
    first = log.append(idempotent(0, 3))
    second = log.append(idempotent(3, 2))
    assert (first, second) == ((1, 3), (4, 5))
    assert not first.duplicate
    end = log.end_offset
    again = log.append(idempotent(0, 3))
    assert again == (1, 3) and again.duplicate
    assert log.append(idempotent(3, 2)) == (4, 5)
    assert log.end_offset == end
    assert values(log) == [b"plain", b"0-0", b"0-1", b"0-2", b"3-0", b"3-1"]
    log.close()


def test_gap_and_fenced_epoch_are_refused_and_store_nothing(tmp_path: Path) -> None:
    """A sequence gap raises OutOfOrderSequence, an old epoch ProducerFenced; nothing is written."""
    log = PartitionLog.open(tmp_path, config())
    log.append(idempotent(0, 2, epoch=1))
    size = log.size_bytes
    with pytest.raises(OutOfOrderSequence, match="expected sequence 2, got 3"):
        log.append(idempotent(3, 1, epoch=1))
    with pytest.raises(ProducerFenced):
        log.append(idempotent(2, 1, epoch=0))
    with pytest.raises(OutOfOrderSequence, match="sequence 0"):
        log.append(idempotent(5, 1, epoch=2))
    assert (log.end_offset, log.size_bytes) == (2, size)
    assert log.append(idempotent(2, 1, epoch=1)) == (2, 2)
    assert log.append(idempotent(0, 1, epoch=2)) == (3, 3)
    with pytest.raises(ProducerFenced):
        log.append(idempotent(3, 1, epoch=1))
    log.close()


def test_group_commit_checks_each_payload_in_order(tmp_path: Path) -> None:
    """In one append_many: consecutive batches chain, a retry is a duplicate, a gap fails alone."""
    log = PartitionLog.open(tmp_path, config())
    results = log.append_many(
        [
            idempotent(0, 2),
            idempotent(2, 2),
            idempotent(0, 2),
            idempotent(9, 1),
            idempotent(0, 1, pid=7),
        ]
    )
    assert results[:3] == [(0, 1), (2, 3), (0, 1)]
    assert [r.duplicate for r in results] == [False, False, True, False, False]
    assert results[3].error is not None and isinstance(results[3].error, OutOfOrderSequence)
    assert results[3] == (-1, -1)
    assert results[4] == (4, 4) and results[4].error is None
    assert values(log) == [b"0-0", b"0-1", b"2-0", b"2-1", b"0-0"]
    assert log.append(idempotent(4, 1)) == (5, 5)
    log.close()


def test_state_survives_a_clean_restart_with_or_without_snapshot(tmp_path: Path) -> None:
    """After close and reopen (from the snapshot, or replaying every header) nothing changes."""
    log = PartitionLog.open(tmp_path, config())
    placed = [log.append(idempotent(seq, 2)) for seq in range(0, 40, 2)]
    assert len(log.segments) >= 3
    state = log.producer_state.producers()
    log.close()
    assert (tmp_path / SNAPSHOT_FILE).exists()
    for drop_snapshot in (False, True):
        if drop_snapshot:
            (tmp_path / SNAPSHOT_FILE).unlink()
        again = PartitionLog.open(tmp_path, config())
        assert again.producer_state.producers() == state
        retry = again.append(idempotent(38, 2))
        assert retry.duplicate and retry == placed[-1]
        with pytest.raises(OutOfOrderSequence):
            again.append(idempotent(41, 1))
        again.close()


def test_state_after_a_crash_reflects_only_what_survived(tmp_path: Path) -> None:
    """Recovery cuts the last batch: its retry is stored anew, the one before is a duplicate."""
    log = PartitionLog.open(tmp_path, config())
    placed = [log.append(idempotent(seq, 2)) for seq in range(0, 40, 2)]
    active = log.segments[-1]
    lost = placed[-1]
    assert active.base_offset < lost[0]
    for seg in log.segments:  # a crash: no close, no snapshot at the end
        seg.close()
    path = tmp_path / log_name(active.base_offset)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 5)
    again = PartitionLog.open(tmp_path, config(), recover=True)
    assert again.end_offset == lost[0]
    assert again.append(idempotent(36, 2)).duplicate
    stored = again.append(idempotent(38, 2))
    assert stored == lost and not stored.duplicate
    assert values(again)[-2:] == [b"38-0", b"38-1"]
    again.close()


def test_snapshot_past_the_recovered_end_is_ignored(tmp_path: Path) -> None:
    """A clean snapshot newer than what survives recovery is dropped for a full replay."""
    log = PartitionLog.open(tmp_path, config())
    placed = [log.append(idempotent(seq, 1)) for seq in range(30)]
    log.close()
    newest = max(p.name for p in tmp_path.glob("*.log"))
    path = tmp_path / newest
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 3)
    (tmp_path / "recovery-point").unlink()
    again = PartitionLog.open(tmp_path, config(), recover=True)
    assert again.end_offset == placed[-1][0]
    entry = again.producer_state.entry(PID)
    assert entry is not None and entry.batches[-1].last_sequence == 28
    assert again.append(idempotent(29, 1)) == placed[-1]
    again.close()


def test_damaged_snapshot_falls_back_to_replay(tmp_path: Path) -> None:
    """A snapshot that fails its CRC is ignored; the headers give the same state."""
    log = PartitionLog.open(tmp_path, config())
    for seq in range(0, 20, 2):
        log.append(idempotent(seq, 2))
    state = log.producer_state.producers()
    log.close()
    snapshot = tmp_path / SNAPSHOT_FILE
    snapshot.write_bytes(snapshot.read_bytes()[:-1] + b"\0")
    again = PartitionLog.open(tmp_path, config())
    assert again.producer_state.producers() == state
    again.close()
