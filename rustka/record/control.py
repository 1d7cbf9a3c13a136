"""Kafka's control batches: the commit and abort markers a transaction ends with.

A control batch is a RecordBatch v2 with the transactional and control
attribute bits set, the transaction's producer id and epoch, no sequence, and
one record: Kafka's EndTransactionMarker. Its key is ``int16 version (0),
int16 type`` (0 abort, 1 commit) and its value ``int16 version (0), int32
coordinator epoch``. Only the broker writes them (a client's control batch is
INVALID_RECORD, docs/kafka.md "Produce validation"); consumers skip them, and
read_committed consumers use the abort markers, with the aborted-transactions
list a Fetch returns, to drop aborted records (docs/kafka.md, "Transactions").
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from rustka.record.batch import (
    BatchHeader,
    Buffer,
    decode_records,
    encode_varint,
    encode_varlong,
)
from rustka.record.header import (
    CONTROL_BIT,
    COVERED_HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_LEADER_EPOCH,
    NO_SEQUENCE,
    PREFIX_CRC,
    TRANSACTIONAL_BIT,
)

__all__ = [
    "ABORT",
    "COMMIT",
    "CONTROL_BIT",
    "TRANSACTIONAL_BIT",
    "encode_control_batch",
    "is_control",
    "is_transactional",
    "marker_type",
]

ABORT = 0
COMMIT = 1
_MARKER_VERSION = 0
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def is_control(header: BatchHeader) -> bool:
    return bool(header.attributes & CONTROL_BIT)


def is_transactional(header: BatchHeader) -> bool:
    return bool(header.attributes & TRANSACTIONAL_BIT)


def encode_control_batch(
    producer_id: int, producer_epoch: int, marker: int, coordinator_epoch: int, timestamp: int
) -> bytes:
    """One uncompressed control batch holding one COMMIT or ABORT marker record."""
    if marker not in (ABORT, COMMIT):
        raise ValueError(f"marker type {marker}: 0 (abort) or 1 (commit)")
    key = _KEY.pack(_MARKER_VERSION, marker)
    value = _VALUE.pack(_MARKER_VERSION, coordinator_epoch)
    body = (
        b"\x00"
        + encode_varlong(0)
        + encode_varint(0)
        + encode_varint(len(key))
        + key
        + encode_varint(len(value))
        + value
        + encode_varint(0)
    )
    record = encode_varint(len(body)) + body
    covered = (
        COVERED_HEADER.pack(
            TRANSACTIONAL_BIT | CONTROL_BIT,
            0,
            timestamp,
            timestamp,
            producer_id,
            producer_epoch,
            NO_SEQUENCE,
            1,
        )
        + record
    )
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(record)
    return PREFIX_CRC.pack(0, batch_length, NO_LEADER_EPOCH, MAGIC, crc32c(covered)) + covered


def marker_type(data: Buffer, pos: int = 0) -> int | None:
    """COMMIT or ABORT for the control batch at ``pos``; None if its record is no marker.

    Kafka skips control records of unknown types, and so does replay.
    """
    records = decode_records(data, pos, verify=False)
    if not records or records[0].key is None or len(records[0].key) < _KEY.size:
        return None
    version, kind = _KEY.unpack_from(records[0].key, 0)
    if version != _MARKER_VERSION or kind not in (ABORT, COMMIT):
        return None
    return kind
