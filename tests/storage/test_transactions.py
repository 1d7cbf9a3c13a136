"""Transactions in a partition log: markers, the last stable offset, the aborted list,
and all of it rebuilt from the log after a clean close and after a crash."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from rustka.errors import ProducerFenced
from rustka.record.batch import Record, decode_records, encode_batch, parse_header
from rustka.record.control import ABORT, COMMIT, marker_type
from rustka.storage.log_config import LogConfig
from rustka.storage.partition_log import PartitionLog
from rustka.storage.producer_state import SNAPSHOT_FILE, AbortedTxn, ProducerStateManager

TS = 1_700_000_000_000


def config(segment_bytes: int = 100_000) -> LogConfig:
    return LogConfig(
        segment_bytes=segment_bytes,
        segment_ms=None,
        retention_ms=None,
        index_interval_bytes=128,
        flush="never",
    )


def txn_batch(pid: int, seq: int, records: int = 2, epoch: int = 0, tag: str = "") -> bytes:
    """A transactional producer's batch: producer fields and the transactional bit set."""
    data = bytearray(
        encode_batch(
            [Record(b"k", f"{tag}{pid}-{seq}-{j}".encode(), timestamp=TS) for j in range(records)]
        )
    )
    struct.pack_into(">h", data, 21, 0x10)
    struct.pack_into(">qhi", data, 43, pid, epoch, seq)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def plain(value: str) -> bytes:
    return encode_batch([Record(None, value.encode(), timestamp=TS)])


def batches(log: PartitionLog) -> list[tuple[int, int, bytes]]:
    """(base offset, attributes, bytes) of every stored batch."""
    out = []
    offset = log.log_start_offset
    while offset < log.end_offset:
        data = log.read(offset, 1)
        header = parse_header(data)
        out.append((header.base_offset, header.attributes, data[: header.size]))
        offset = header.next_offset
    return out


def test_lso_stops_at_the_open_transaction_and_moves_at_its_marker(tmp_path: Path) -> None:
    """The LSO is the first offset of the earliest open transaction, else the end; a
    commit marker is a control batch (0x30) holding a COMMIT EndTransactionMarker."""
    log = PartitionLog.open(tmp_path, config())
    log.append(plain("a"))
    assert log.last_stable_offset == 1
    log.append(txn_batch(7, 0))  # offsets 1-2
    log.append(plain("b"))  # 3
    assert log.last_stable_offset == 1
    assert log.open_transactions() == {7: 1}
    committed, _ = log.read_committed(0, 1 << 20)
    assert [parse_header(committed).base_offset] == [0]
    assert len(committed) == parse_header(committed).size
    marker = log.append_marker(7, 0, commit=True)
    assert marker == 4
    assert log.last_stable_offset == log.end_offset == 5
    assert log.open_transactions() == {}
    stored = batches(log)
    assert [(b, a) for b, a, _ in stored] == [(0, 0), (1, 0x10), (3, 0), (4, 0x30)]
    control = stored[-1][2]
    header = parse_header(control)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 0, -1)
    assert marker_type(control) == COMMIT
    (record,) = decode_records(control)
    assert record.key == b"\x00\x00\x00\x01" and record.value == b"\x00\x00\x00\x00\x00\x00"
    assert log.aborted_transactions(0, 5) == []
    log.close()


def test_aborts_are_listed_for_the_ranges_they_touch(tmp_path: Path) -> None:
    """An abort marker adds (producer, first, last, LSO); a fetch range gets the aborted
    transactions whose records it may hold (Kafka's collectAbortedTxns)."""
    log = PartitionLog.open(tmp_path, config())
    log.append(txn_batch(1, 0))  # 0-1
    log.append(txn_batch(2, 0))  # 2-3
    log.append(txn_batch(1, 2))  # 4-5
    assert log.last_stable_offset == 0
    assert log.append_marker(1, 0, commit=False) == 6
    # Producer 2 is still open from offset 2.
    assert log.last_stable_offset == 2
    assert log.aborted_transactions(0, 7) == [AbortedTxn(1, 0, 6, 2)]
    assert log.append_marker(2, 0, commit=True) == 7
    assert log.last_stable_offset == 8
    assert log.aborted_transactions(7, 8) == []
    assert log.aborted_transactions(6, 8) == [AbortedTxn(1, 0, 6, 2)]
    assert log.is_aborted(1, 4) and not log.is_aborted(2, 2)
    assert marker_type(batches(log)[3][2]) == ABORT
    log.close()


def test_a_marker_of_an_older_epoch_is_fenced(tmp_path: Path) -> None:
    """Kafka's appendEndTxnMarker check: a newer epoch wrote, the old marker is refused."""
    log = PartitionLog.open(tmp_path, config())
    log.append(txn_batch(3, 0, epoch=2))
    with pytest.raises(ProducerFenced, match="epoch 1"):
        log.append_marker(3, 1, commit=True)
    assert log.end_offset == 2
    # A fencing abort carries the bumped epoch; the old epoch's batches are refused after.
    log.append_marker(3, 3, commit=False)
    with pytest.raises(ProducerFenced):
        log.append(txn_batch(3, 2, epoch=2))
    log.append(txn_batch(3, 0, epoch=3))
    assert log.open_transactions() == {3: 3}
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_transaction_state_is_rebuilt_from_the_log(tmp_path: Path, clean: bool) -> None:
    """After a clean close (snapshot) or a crash (headers and markers replayed, also across
    a roll's snapshot) the open transactions, the LSO and the aborted list are the same."""
    log = PartitionLog.open(tmp_path, config(segment_bytes=300))
    for i in range(3):
        log.append(plain(f"p{i}"))
    log.append(txn_batch(1, 0))
    log.append(txn_batch(2, 0))
    log.append_marker(1, 0, commit=False)
    for i in range(3):
        log.append(txn_batch(3, i * 2, tag="x"))
    log.append_marker(3, 0, commit=True)
    log.append(txn_batch(4, 0))
    assert len(log.segments) > 1
    expected = (
        log.last_stable_offset,
        log.open_transactions(),
        log.aborted_transactions(0, log.end_offset),
    )
    if clean:
        log.close()
    else:
        # A crash: no close, and the snapshot is the one the last roll wrote (or none).
        for seg in log.segments:
            seg.close()
    reopened = PartitionLog.open(tmp_path, config(segment_bytes=300), recover=not clean)
    assert (
        reopened.last_stable_offset,
        reopened.open_transactions(),
        reopened.aborted_transactions(0, reopened.end_offset),
    ) == expected
    assert expected[1] == {2: 5, 4: 15}
    reopened.close()
    # Without any snapshot the whole log is replayed to the same state.
    (tmp_path / SNAPSHOT_FILE).unlink()
    again = PartitionLog.open(tmp_path, config(segment_bytes=300))
    assert again.open_transactions() == expected[1]
    assert again.aborted_transactions(0, again.end_offset) == expected[2]
    again.close()


def test_snapshots_carry_transactions_and_old_snapshots_still_load() -> None:
    """Version 2 snapshots keep open transactions and aborts; version 1 ones have none."""
    state = ProducerStateManager()
    state.update(9, 0, 0, 2, 10, 11, transactional=True)
    state.update(8, 0, 0, 1, 12, 12, transactional=True)
    state.end_transaction(8, 0, 13, commit=False)
    decoded = ProducerStateManager.decode(state.encode(14))
    assert decoded is not None
    offset, copy = decoded
    assert offset == 14
    assert copy.ongoing() == {9: 10}
    assert copy.aborted == [AbortedTxn(8, 12, 13, 10)]
    assert copy.first_unstable_offset() == 10
    # Version 1: magic, version, offset, count; one producer with one batch.
    body = struct.pack(">4sBQI", b"RKPS", 1, 5, 1) + struct.pack(">qhB", 4, 0, 1)
    body += struct.pack(">iiqq", 0, 1, 3, 4)
    old = ProducerStateManager.decode(body + struct.pack(">I", crc32c(body)))
    assert old is not None and old[1].ongoing() == {} and old[1].aborted == []
    assert old[1].entry(4) is not None


def compacted(segment_bytes: int = 250) -> LogConfig:
    return LogConfig(
        cleanup_policy="compact",
        segment_bytes=segment_bytes,
        segment_ms=None,
        retention_ms=None,
        index_interval_bytes=128,
        flush="never",
    )


def keyed_txn(pid: int, seq: int, key: bytes, value: bytes) -> bytes:
    data = bytearray(encode_batch([Record(key, value, timestamp=TS)]))
    struct.pack_into(">h", data, 21, 0x10)
    struct.pack_into(">qhi", data, 43, pid, 0, seq)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def clean_once(log: PartitionLog) -> None:
    from rustka.storage.cleaner import Cleaning

    cleaning = Cleaning(log, map_bytes=1 << 20, now_ms=TS + 10_000)
    for _ in range(10_000):
        if cleaning.done:
            return
        cleaning.step(1 << 16)
    raise AssertionError("the round did not finish")


def committed_values(log: PartitionLog) -> dict[bytes, bytes]:
    """What a read_committed consumer ends with per key: aborted records dropped."""
    aborted = log.aborted_transactions(0, log.end_offset)
    out: dict[bytes, bytes] = {}
    for base, attributes, data in batches(log):
        pid = parse_header(data).producer_id
        if attributes & 0x20:
            continue
        if attributes & 0x10 and any(
            t.producer_id == pid and t.first_offset <= base <= t.last_offset for t in aborted
        ):
            continue
        for record in decode_records(data):
            if record.key is not None and record.value is not None:
                out[record.key] = record.value
    return out


def test_the_cleaner_keeps_markers_stops_at_the_lso_and_aborts_supersede_nothing(
    tmp_path: Path,
) -> None:
    """A committed value followed by an aborted one of the same key survives compaction
    (Kafka's cleaner leaves aborted records out of its map), every marker is kept, and
    nothing at or past the first open transaction is cleaned."""
    from rustka.storage.cleaner import cleanable_range

    log = PartitionLog.open(tmp_path, compacted())
    for i in range(6):
        log.append(encode_batch([Record(b"k%d" % (i % 2), b"plain-%d" % i, timestamp=TS)]))
    log.append(keyed_txn(1, 0, b"k0", b"aborted"))
    log.append_marker(1, 0, commit=False)
    log.append(keyed_txn(2, 0, b"k1", b"committed"))
    log.append_marker(2, 0, commit=True)
    log.append(keyed_txn(3, 0, b"k2", b"open"))  # stays open
    open_at = log.end_offset - 1
    for i in range(6):
        log.append(encode_batch([Record(b"k9", b"later-%d" % i, timestamp=TS)]))
    log.roll()
    before = committed_values(log)
    assert before[b"k0"] == b"plain-4" and before[b"k1"] == b"committed"
    assert log.last_stable_offset == open_at
    assert cleanable_range(log, TS + 10_000).first_uncleanable <= open_at
    stored_before = sum(len(decode_records(d)) for _b, _a, d in batches(log))
    clean_once(log)
    # The round did clean: superseded plain values are gone.
    assert sum(len(decode_records(d)) for _b, _a, d in batches(log)) < stored_before
    after = committed_values(log)
    assert after[b"k0"] == b"plain-4" and after[b"k1"] == b"committed"
    kinds = [marker_type(d) for _b, a, d in batches(log) if a & 0x20]
    assert kinds == [ABORT, COMMIT]
    assert log.last_stable_offset == open_at
    assert log.open_transactions() == {3: open_at}
    log.close()
