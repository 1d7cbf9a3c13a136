"""The transaction log: last record per transactional id wins, tombstones, damage skipped,
compaction keeping exactly the live entries."""

from __future__ import annotations

from pathlib import Path

from rustka.storage.log_config import LogConfig
from rustka.storage.log_files import log_name
from rustka.storage.txn_log import (
    TRANSACTIONS_DIR,
    TransactionLog,
    TxnMetadata,
    TxnState,
    decode_value,
    encode_value,
)


def meta(tid: str, state: TxnState = TxnState.ONGOING, epoch: int = 0) -> TxnMetadata:
    return TxnMetadata(
        tid,
        1000 + len(tid),
        epoch,
        60_000,
        state,
        5,
        3,
        frozenset({("orders", 0), ("orders", 2)}),
        {"g": {("in", 1): (42, "meta")}},
    )


def test_values_round_trip_and_garbage_is_refused() -> None:
    m = meta("a")
    assert decode_value("a", encode_value(m)) == m
    assert decode_value("a", encode_value(m)[:-1]) is None
    assert decode_value("a", encode_value(m) + b"x") is None
    assert TxnState.PREPARE_COMMIT.kafka_name == "PrepareCommit"


def test_replay_keeps_the_last_record_per_id_and_tombstones_delete(tmp_path: Path) -> None:
    config = LogConfig(flush="never")
    store = TransactionLog.open(tmp_path, config)
    store.write(meta("a"))
    store.write(meta("b"))
    store.write(meta("a", TxnState.COMPLETE_COMMIT, epoch=1))
    store.write(meta("b"), remove=True)
    store.close()
    again = TransactionLog.open(tmp_path, config)
    assert again.entries() == {"a": meta("a", TxnState.COMPLETE_COMMIT, epoch=1)}
    again.compact()
    assert again.records_in_log == 1
    again.close()
    third = TransactionLog.open(tmp_path, config)
    assert third.entries() == {"a": meta("a", TxnState.COMPLETE_COMMIT, epoch=1)}
    third.close()


def test_a_damaged_batch_is_skipped_and_the_rest_applies(tmp_path: Path) -> None:
    config = LogConfig(flush="never")
    store = TransactionLog.open(tmp_path, config)
    store.write(meta("a"))
    size = store.log.end_offset
    store.write(meta("b"))
    store.close()
    assert size == 1
    path = tmp_path / TRANSACTIONS_DIR / log_name(0)
    data = bytearray(path.read_bytes())
    data[70] ^= 0xFF  # inside the first record: its CRC fails
    path.write_bytes(bytes(data))
    again = TransactionLog.open(tmp_path, config)
    assert list(again.entries()) == ["b"]
    assert len(again.skipped_batches) == 1
    again.close()
