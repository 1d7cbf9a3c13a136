"""The RecordBatch v2 header: where each field sits and what its attribute bits mean.

Every layer reads batch headers without decoding the records: the Kafka front-end
checks the first batch of a Produce before handing it on, the core checks a
transactional batch's producer, storage scans, replays and cleans, the mirror
re-stamps producer fields, the console shows the flags. They all take the layout
from here, so it is written once, below all of them.

Batch layout, big-endian, 61-byte header then the records::

    offset size field
         0    8 baseOffset            int64   not covered by the CRC
         8    4 batchLength           int32   bytes after this field (size - 12)
        12    4 partitionLeaderEpoch  int32   not covered by the CRC
        16    1 magic                 int8    always 2
        17    4 crc                   uint32  CRC-32C of bytes [21, 12 + batchLength)
        21    2 attributes            int16   bits 0-2 compression, 3 timestamp type,
                                              4 transactional, 5 control,
                                              6 delete horizon (KIP-534)
        23    4 lastOffsetDelta       int32
        27    8 baseTimestamp         int64
        35    8 maxTimestamp          int64
        43    8 producerId            int64
        51    2 producerEpoch         int16
        53    4 baseSequence          int32
        57    4 recordCount           int32
        61      records
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = [
    "ATTRIBUTES_AT",
    "ATTRIBUTES_LOW_AT",
    "BASE_SEQUENCE_AT",
    "CODEC_MASK",
    "CONTROL_BIT",
    "COVERED_HEADER",
    "CRC_AT",
    "DELETE_HORIZON_BIT",
    "HEADER",
    "HEADER_SIZE",
    "LAST_OFFSET_DELTA",
    "LAST_OFFSET_DELTA_AT",
    "LENGTH_AT",
    "LOG_OVERHEAD",
    "MAGIC",
    "MAGIC_AT",
    "MAX_TIMESTAMP_AT",
    "MIN_BATCH_LENGTH",
    "NO_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "OFFSET_LENGTH",
    "PREFIX_CRC",
    "PRODUCER_AT",
    "PRODUCER_END",
    "PRODUCER_FIELDS",
    "PRODUCER_ID_EPOCH",
    "TIMESTAMP_TYPE_BIT",
    "TRANSACTIONAL_BIT",
    "first_producer",
    "is_transactional_batch",
]

HEADER_SIZE: Final = 61
LOG_OVERHEAD: Final = 12
"""baseOffset and batchLength: the bytes batchLength does not count."""
MAGIC: Final = 2

LENGTH_AT: Final = 8
MAGIC_AT: Final = 16
CRC_AT: Final = 17
ATTRIBUTES_AT: Final = 21
ATTRIBUTES_LOW_AT: Final = 22
"""The attributes' low byte, which holds every bit Kafka defines."""
LAST_OFFSET_DELTA_AT: Final = 23
MAX_TIMESTAMP_AT: Final = 35
PRODUCER_AT: Final = 43
BASE_SEQUENCE_AT: Final = 53
PRODUCER_END: Final = BASE_SEQUENCE_AT
"""Where producerId and producerEpoch end."""

MIN_BATCH_LENGTH: Final = HEADER_SIZE - LOG_OVERHEAD
"""batchLength of a batch with no records: a smaller one cannot be a batch."""

CODEC_MASK: Final = 0x07
TIMESTAMP_TYPE_BIT: Final = 0x08
TRANSACTIONAL_BIT: Final = 0x10
CONTROL_BIT: Final = 0x20
DELETE_HORIZON_BIT: Final = 0x40
"""Attribute bit 6 (KIP-534): the batch's baseTimestamp is its tombstones' delete horizon."""

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_LEADER_EPOCH: Final = -1

HEADER: Final = struct.Struct(">qiibIhiqqqhii")
OFFSET_LENGTH: Final = struct.Struct(">qi")
"""baseOffset and batchLength, the prefix every batch walk reads first."""
COVERED_HEADER: Final = struct.Struct(">hiqqqhii")
"""The CRC-covered part of the header, attributes through recordCount."""
PREFIX_CRC: Final = struct.Struct(">qiibI")
"""The header before the covered part, packed once the CRC is known."""
LAST_OFFSET_DELTA: Final = struct.Struct(">i")
"""lastOffsetDelta alone, for walks that need only where each batch ends."""
PRODUCER_ID_EPOCH: Final = struct.Struct(">qh")
PRODUCER_FIELDS: Final = struct.Struct(">qhi")
"""producerId, producerEpoch and baseSequence, which the mirror clears."""

assert HEADER.size == HEADER_SIZE
assert OFFSET_LENGTH.size == LOG_OVERHEAD
assert PREFIX_CRC.size == ATTRIBUTES_AT
assert ATTRIBUTES_AT + COVERED_HEADER.size == HEADER_SIZE
assert PRODUCER_AT + PRODUCER_ID_EPOCH.size == PRODUCER_END

Buffer = bytes | bytearray | memoryview


def is_transactional_batch(records: Buffer | None) -> bool:
    """Whether the first batch of a record set is a transactional v2 batch.

    Kafka decides a Produce's transactional checks on the first batch alone, and
    only on a whole header: a record set too short for one holds no batch at all,
    and the log validator refuses it.
    """
    return (
        records is not None
        and len(records) >= HEADER_SIZE
        and records[MAGIC_AT] == MAGIC
        and bool(records[ATTRIBUTES_LOW_AT] & TRANSACTIONAL_BIT)
    )


def first_producer(records: Buffer) -> tuple[int, int]:
    """The first batch's producer id and epoch; the caller knows a header is there."""
    producer_id, epoch = PRODUCER_ID_EPOCH.unpack_from(records, PRODUCER_AT)
    return producer_id, epoch
