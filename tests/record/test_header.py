"""The RecordBatch v2 header's one declaration (rustka/record/header.py) against the
batches the codec builds: every named offset reads the field parse_header reports."""

from __future__ import annotations

import struct

from rustka.record import header as h
from rustka.record.batch import Record, encode_batch, parse_header
from rustka.record.control import COMMIT, encode_control_batch


def _stamped(batch: bytes, producer_id: int, epoch: int, sequence: int) -> bytes:
    out = bytearray(batch)
    h.PRODUCER_FIELDS.pack_into(out, h.PRODUCER_AT, producer_id, epoch, sequence)
    return bytes(out)


def test_each_offset_reads_the_field_the_parser_reports() -> None:
    batch = _stamped(encode_batch([Record(b"k", b"v"), Record(None, b"w")], 7, 1234), 99, 3, 5)
    header = parse_header(batch)
    assert struct.unpack_from(">i", batch, h.LENGTH_AT)[0] == header.batch_length
    assert batch[h.MAGIC_AT] == header.magic == h.MAGIC
    assert struct.unpack_from(">I", batch, h.CRC_AT)[0] == header.crc
    assert struct.unpack_from(">h", batch, h.ATTRIBUTES_AT)[0] == header.attributes
    assert batch[h.ATTRIBUTES_LOW_AT] == header.attributes & 0xFF
    assert struct.unpack_from(">i", batch, h.LAST_OFFSET_DELTA_AT)[0] == header.last_offset_delta
    assert struct.unpack_from(">q", batch, h.MAX_TIMESTAMP_AT)[0] == header.max_timestamp
    assert h.first_producer(batch) == (header.producer_id, header.producer_epoch) == (99, 3)
    assert struct.unpack_from(">i", batch, h.BASE_SEQUENCE_AT)[0] == header.base_sequence == 5
    assert h.OFFSET_LENGTH.unpack_from(batch) == (7, len(batch) - h.LOG_OVERHEAD)


def test_only_a_whole_transactional_v2_header_is_transactional() -> None:
    marker = encode_control_batch(42, 1, COMMIT, 0, 1000)
    plain = encode_batch([Record(b"k", b"v")])
    assert h.is_transactional_batch(marker)
    assert parse_header(marker).attributes & (h.TRANSACTIONAL_BIT | h.CONTROL_BIT) == 0x30
    assert not h.is_transactional_batch(plain)
    assert not h.is_transactional_batch(None)
    # Too short to hold a batch: Kafka sees no batch at all, so nothing transactional.
    assert not h.is_transactional_batch(marker[: h.HEADER_SIZE - 1])
    other_magic = bytearray(marker)
    other_magic[h.MAGIC_AT] = 1
    assert not h.is_transactional_batch(bytes(other_magic))
