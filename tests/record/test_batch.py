"""Kafka RecordBatch v2 encoding, decoding, validation and recovery scanning."""

from __future__ import annotations

import random
import re
import struct
import time

import pytest
from crc32c import crc32c

from rustka.errors import CorruptBatch, InvalidBatch, RecordTooLarge
from rustka.record import batch as record_batch
from rustka.record.batch import (
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    CorruptMessage,
    InvalidTimestamp,
    Record,
    accept_batches,
    compress_batch,
    crc_ok,
    decode_records,
    decode_varint,
    decode_varlong,
    delete_horizon,
    empty_batch,
    encode_batch,
    encode_varint,
    encode_varlong,
    parse_header,
    rewrite_batch,
    scan_batches,
    set_base_offset,
    validate_batches,
)

TS = 1_700_000_000_000


def three_record_batch(base_offset: int = 0) -> bytes:
    """A fixed batch used by the tests that need exact sizes."""
    return encode_batch(
        [
            Record(b"k1", b"v1", (("h", b"x"),), timestamp=TS),
            Record(None, b"value-two", timestamp=TS + 5),
            Record(b"k3", None, timestamp=TS + 9),
        ],
        base_offset=base_offset,
    )


def patch(batch: bytes, offset: int, fmt: str, value: int, *, fix_crc: bool = True) -> bytes:
    """Overwrite one header field and (by default) re-seal the CRC, to forge valid-CRC input."""
    buf = bytearray(batch)
    struct.pack_into(fmt, buf, offset, value)
    if fix_crc:
        struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


def reseal_records(batch: bytes, records: bytes, count: int) -> bytes:
    """Replace a batch's record area with arbitrary bytes behind a consistent header and CRC."""
    header = bytearray(batch[:HEADER_SIZE])
    struct.pack_into(">i", header, 8, HEADER_SIZE - LOG_OVERHEAD + len(records))
    struct.pack_into(">i", header, 23, count - 1)
    struct.pack_into(">i", header, 57, count)
    body = bytes(header[21:]) + records
    struct.pack_into(">I", header, 17, crc32c(body))
    return bytes(header) + records


# --------------------------------------------------------------------------- byte layout


def test_crc32c_is_castagnoli() -> None:
    """The CRC library computes CRC-32C (Castagnoli), whose check value is 0xE3069283."""
    assert crc32c(b"123456789") == 0xE3069283


def test_known_byte_vector() -> None:
    """encode_batch produces exactly the bytes the v2 spec prescribes, field by field."""
    records = [
        Record(b"k", b"hi", (("h", b"v"),), timestamp=1000),
        Record(None, b"", timestamp=998),
    ]
    # Record 0: attributes 0, timestampDelta 0, offsetDelta 0, keyLength 1 (zig-zag 2), "k",
    # valueLength 2 (zig-zag 4), "hi", headerCount 1, headerKeyLength 1, "h",
    # headerValueLength 1, "v" -> 13 bytes, so the length prefix is zig-zag(13) = 26.
    record0_body = bytes([0x00, 0x00, 0x00, 0x02]) + b"k" + bytes([0x04]) + b"hi"
    record0_body += bytes([0x02, 0x02]) + b"h" + bytes([0x02]) + b"v"
    assert len(record0_body) == 13
    record0 = bytes([0x1A]) + record0_body
    # Record 1: attributes 0, timestampDelta -2 (zig-zag 3), offsetDelta 1 (zig-zag 2),
    # keyLength -1 (zig-zag 1, null), valueLength 0, headerCount 0 -> 6 bytes, prefix 12.
    record1 = bytes([0x0C, 0x00, 0x03, 0x02, 0x01, 0x00, 0x00])
    records_bytes = record0 + record1
    covered = (
        struct.pack(">h", 0)  # attributes
        + struct.pack(">i", 1)  # lastOffsetDelta
        + struct.pack(">q", 1000)  # baseTimestamp (first record's)
        + struct.pack(">q", 1000)  # maxTimestamp
        + struct.pack(">q", -1)  # producerId
        + struct.pack(">h", -1)  # producerEpoch
        + struct.pack(">i", -1)  # baseSequence
        + struct.pack(">i", 2)  # recordCount
        + records_bytes
    )
    expected = (
        struct.pack(">q", 7)  # baseOffset
        + struct.pack(">i", 49 + len(records_bytes))  # batchLength
        + struct.pack(">i", -1)  # partitionLeaderEpoch
        + struct.pack(">b", 2)  # magic
        + struct.pack(">I", crc32c(covered))  # crc
        + covered
    )
    assert len(expected) == HEADER_SIZE + 21
    assert encode_batch(records, base_offset=7) == expected


def test_header_fields_and_properties() -> None:
    """parse_header reads every field and derives size/last/next offsets from them."""
    batch = three_record_batch(base_offset=100)
    header = parse_header(batch)
    assert header.base_offset == 100
    assert header.magic == MAGIC
    assert header.record_count == 3
    assert header.last_offset_delta == 2
    assert header.base_timestamp == TS
    assert header.max_timestamp == TS + 9
    assert header.producer_id == -1
    assert header.producer_epoch == -1
    assert header.base_sequence == -1
    assert header.attributes == 0
    assert header.size == len(batch) == header.batch_length + LOG_OVERHEAD
    assert header.last_offset == 102
    assert header.next_offset == 103
    assert crc_ok(batch, 0, header)


def test_parse_header_at_position() -> None:
    """parse_header and crc_ok work on a batch that starts mid-buffer."""
    batch = three_record_batch(base_offset=5)
    buf = b"\x00" * 13 + batch
    header = parse_header(buf, 13)
    assert header.base_offset == 5
    assert crc_ok(buf, 13, header)


# --------------------------------------------------------------------------- round trips


def roundtrip(records: list[Record], base_offset: int = 0) -> list[Record]:
    data = encode_batch(records, base_offset=base_offset, timestamp=TS)
    assert validate_batches(data)[0][1].record_count == len(records)
    return decode_records(data)


def test_roundtrip_null_and_empty_fields() -> None:
    """Null key, null value and empty key survive as None / b'' respectively."""
    records = [
        Record(None, None),
        Record(b"", b""),
        Record(None, b"v"),
        Record(b"k", None),
    ]
    out = roundtrip(records, base_offset=40)
    assert [(r.key, r.value) for r in out] == [(None, None), (b"", b""), (None, b"v"), (b"k", None)]
    assert [r.offset for r in out] == [40, 41, 42, 43]
    assert all(r.timestamp == TS for r in out)


def test_roundtrip_headers() -> None:
    """Headers keep order, null values, empty values and non-ASCII keys."""
    headers = (("trace-id", b"abc"), ("null", None), ("empty", b""), ("clé-ключ-🔑", b"\xff\x00"))
    out = roundtrip([Record(b"k", b"v", headers), Record(b"k2", b"v2", (("a", None),))])
    assert out[0].headers == headers
    assert out[1].headers == (("a", None),)


def test_roundtrip_large_value() -> None:
    """Values over 64 KiB (multi-byte length varints) round trip intact."""
    big = bytes(range(256)) * 1024 + b"tail"
    out = roundtrip([Record(b"big", big), Record(b"small", b"s")])
    assert out[0].value == big
    assert out[1].value == b"s"


def test_roundtrip_many_records() -> None:
    """Ten thousand records (offset deltas past one varint byte) decode in order."""
    records = [Record(str(i).encode(), b"v" * (i % 50)) for i in range(10_000)]
    out = roundtrip(records, base_offset=1_000_000)
    assert len(out) == 10_000
    assert out[9_999].offset == 1_009_999
    assert out[9_999].key == b"9999"
    assert [r.value for r in out] == [r.value for r in records]


def test_roundtrip_timestamps_and_deltas() -> None:
    """Per-record timestamps, including earlier and far-later ones, decode exactly."""
    stamps = [TS, TS - 1, TS + 10_000_000, TS - 86_400_000, TS]
    data = encode_batch([Record(b"k", b"v", timestamp=t) for t in stamps])
    header = parse_header(data)
    assert header.base_timestamp == TS
    assert header.max_timestamp == TS + 10_000_000
    assert [r.timestamp for r in decode_records(data)] == stamps


def test_missing_timestamps_use_batch_timestamp_or_now() -> None:
    """Records without a timestamp take the batch timestamp, or the current time."""
    assert decode_records(encode_batch([Record(b"k", b"v")], timestamp=42))[0].timestamp == 42
    before = int(time.time() * 1000)
    stamped = decode_records(encode_batch([Record(b"k", b"v")]))[0].timestamp
    after = int(time.time() * 1000)
    assert stamped is not None
    assert before <= stamped <= after


def test_decode_accepts_bytearray_and_memoryview_at_offset() -> None:
    """decode_records reads a batch in the middle of any buffer type."""
    batch = three_record_batch(base_offset=9)
    buf = bytearray(b"junk" + batch + b"more")
    for source in (buf, memoryview(buf), bytes(buf)):
        out = decode_records(source, 4)
        assert [r.offset for r in out] == [9, 10, 11]
        assert out[0].headers == (("h", b"x"),)


def test_decode_min_offset_skips_leading_records() -> None:
    """min_offset drops records below it but keeps their offsets and contents correct."""
    batch = three_record_batch(base_offset=10)
    assert [r.offset for r in decode_records(batch, min_offset=11)] == [11, 12]
    assert decode_records(batch, min_offset=12)[0].key == b"k3"
    assert decode_records(batch, min_offset=13) == []
    assert len(decode_records(batch, min_offset=0)) == 3


def test_encode_rejects_empty_batch_and_out_of_range_fields() -> None:
    """A batch needs a record, and offsets/timestamps must fit their int64 fields."""
    with pytest.raises(InvalidBatch, match="at least one record"):
        encode_batch([])
    with pytest.raises(InvalidBatch, match="out of range"):
        encode_batch([Record(b"k", b"v")], base_offset=1 << 63)
    with pytest.raises(InvalidBatch, match="out of range"):
        encode_batch([Record(b"k", b"v", timestamp=1 << 63)])


# --------------------------------------------------------------------------- varints


@pytest.mark.parametrize(
    "value", [0, 1, -1, 63, -64, 64, -65, 8191, -8192, 8192, 300, -(1 << 31), (1 << 31) - 1]
)
def test_varint_roundtrip(value: int) -> None:
    """Zig-zag varints round trip across the one/two-byte and slow-path boundaries."""
    encoded = encode_varint(value)
    assert decode_varint(encoded) == (value, len(encoded))
    assert len(encoded) <= 5


@pytest.mark.parametrize("value", [0, -1, 1 << 40, -(1 << 40), -(1 << 63), (1 << 63) - 1])
def test_varlong_roundtrip(value: int) -> None:
    """Zig-zag varlongs round trip up to the int64 limits in at most 10 bytes."""
    encoded = encode_varlong(value)
    assert decode_varlong(encoded) == (value, len(encoded))
    assert len(encoded) <= 10


def test_varint_known_encodings() -> None:
    """Zig-zag maps 0,-1,1,-2 to 0,1,2,3 and 150 to the protobuf bytes ac 02."""
    assert [encode_varint(v) for v in (0, -1, 1, -2)] == [b"\x00", b"\x01", b"\x02", b"\x03"]
    assert encode_varint(75) == b"\x96\x01"
    assert encode_varint(-(1 << 31)) == b"\xff\xff\xff\xff\x0f"


def test_varint_bounds() -> None:
    """Over-long or truncated varints are CorruptBatch; out-of-range encodes are InvalidBatch."""
    with pytest.raises(CorruptBatch, match="longer than 5"):
        decode_varint(b"\xff" * 6)
    with pytest.raises(CorruptBatch, match="longer than 10"):
        decode_varlong(b"\xff" * 11)
    with pytest.raises(CorruptBatch, match="past the end"):
        decode_varint(b"\xff\xff")
    with pytest.raises(CorruptBatch, match="past the end"):
        decode_varint(b"\x96\x01", 0, 1)
    with pytest.raises(InvalidBatch):
        encode_varint(1 << 31)
    with pytest.raises(InvalidBatch):
        encode_varlong(1 << 63)


# --------------------------------------------------------------------------- set_base_offset


def test_set_base_offset_keeps_crc_valid() -> None:
    """Rewriting baseOffset in place leaves the CRC valid and shifts every record offset."""
    batch = three_record_batch()
    buf = bytearray(b"\x00" * 20 + batch)
    original_crc = parse_header(buf, 20).crc
    set_base_offset(buf, 20, 123_456_789_012)
    header = parse_header(buf, 20)
    assert header.base_offset == 123_456_789_012
    assert header.crc == original_crc
    assert crc_ok(buf, 20, header)
    assert validate_batches(buf[20:])[0][1].base_offset == 123_456_789_012
    assert [r.offset for r in decode_records(buf, 20)] == [
        123_456_789_012,
        123_456_789_013,
        123_456_789_014,
    ]


# --------------------------------------------------------------------------- validate_batches


def test_validate_accepts_back_to_back_batches() -> None:
    """Several complete batches return their positions and headers in order."""
    a = three_record_batch()
    b = encode_batch([Record(b"x", b"y")], timestamp=TS)
    payload = a + b + a
    result = validate_batches(memoryview(payload))
    assert [pos for pos, _ in result] == [0, len(a), len(a) + len(b)]
    assert [h.record_count for _, h in result] == [3, 1, 3]


def test_validate_rejects_empty_payload() -> None:
    """An empty payload carries no batch and is rejected."""
    with pytest.raises(InvalidBatch, match="empty payload"):
        validate_batches(b"")


def test_validate_rejects_too_short() -> None:
    """Fewer bytes than a batch header is rejected, naming the header size."""
    with pytest.raises(InvalidBatch, match=r"batch 0 at position 0: .*shorter than the 61-byte"):
        validate_batches(three_record_batch()[:40])


def test_validate_rejects_length_past_buffer() -> None:
    """A batch whose batchLength runs past the payload (torn batch) is rejected."""
    batch = three_record_batch()
    with pytest.raises(InvalidBatch, match=r"batch 0 at position 0: .*runs 1 bytes past"):
        validate_batches(batch[:-1])
    grown = patch(batch, 8, ">i", parse_header(batch).batch_length + 100, fix_crc=False)
    with pytest.raises(InvalidBatch, match="past the end of the payload"):
        validate_batches(grown)


def test_validate_rejects_length_below_minimum() -> None:
    """A batchLength too small to hold the header is CorruptMessage, Kafka's CORRUPT_MESSAGE
    for a batch shorter than its own header."""
    batch = patch(three_record_batch(), 8, ">i", 10, fix_crc=False)
    with pytest.raises(CorruptMessage, match=r"batch 0 at position 0: .*below the minimum 49"):
        validate_batches(batch)


def test_validate_rejects_trailing_bytes() -> None:
    """Bytes after the last whole batch are rejected, short or header-sized."""
    batch = three_record_batch()
    with pytest.raises(
        InvalidBatch, match=rf"5 trailing bytes after 1 batches at position {len(batch)}"
    ):
        validate_batches(batch + b"\x00" * 5)
    with pytest.raises(InvalidBatch, match=rf"batch 1 at position {len(batch)}"):
        validate_batches(batch + b"\x00" * 70)


def test_validate_rejects_bad_magic() -> None:
    """A magic byte other than 2 (older message formats) is rejected."""
    batch = patch(three_record_batch(), 16, ">b", 1, fix_crc=False)
    with pytest.raises(InvalidBatch, match="batch 0 at position 0: magic byte is 1"):
        validate_batches(batch)


def test_validate_rejects_crc_mismatch() -> None:
    """A single damaged record byte fails the CRC, naming the batch."""
    good = three_record_batch()
    bad = bytearray(good)
    bad[-1] ^= 0x01
    with pytest.raises(InvalidBatch, match=rf"batch 1 at position {len(good)}: CRC-32C mismatch"):
        validate_batches(good + bytes(bad))


def test_validate_rejects_zero_record_count() -> None:
    """A batch claiming no records is rejected even with a consistent CRC."""
    batch = patch(three_record_batch(), 57, ">i", 0)
    batch = patch(batch, 23, ">i", -1)
    with pytest.raises(InvalidBatch, match="record count 0 is below 1"):
        validate_batches(batch)


def test_validate_rejects_count_delta_mismatch() -> None:
    """recordCount must equal lastOffsetDelta + 1, or offsets would be mis-assigned."""
    batch = patch(three_record_batch(), 57, ">i", 5)
    with pytest.raises(InvalidBatch, match=r"record count 5 does not match last offset delta 2"):
        validate_batches(batch)


def test_validate_rejects_garbage_behind_a_compression_bit() -> None:
    """A codec bit on plain records is a batch that cannot be decompressed: InvalidBatch."""
    for codec, name in ((1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")):
        batch = patch(three_record_batch(), 21, ">h", codec)
        with pytest.raises(InvalidBatch, match=rf"batch 0 at position 0: {name} records"):
            validate_batches(batch)


@pytest.mark.parametrize(
    ("attributes", "message", "error"),
    [
        (0x10, "a transactional batch needs a producer id", InvalidBatch),
        (0x20, "may not write control batches", InvalidBatch),
        (0x40, "delete-horizon", InvalidBatch),
        (0x08, "LogAppendTime", InvalidTimestamp),
        (0x05, "unknown compression codec 5", InvalidBatch),
    ],
)
def test_validate_rejects_broker_only_attributes(
    attributes: int, message: str, error: type[InvalidBatch]
) -> None:
    """Transactional batches without a producer id, control batches and broker-only flags
    are refused with a clear error; LogAppendTime as InvalidTimestamp (Kafka's
    INVALID_TIMESTAMP)."""
    batch = patch(three_record_batch(), 21, ">h", attributes)
    for check in (validate_batches, accept_batches):
        with pytest.raises(error, match=message) as info:
            check(batch)
        assert type(info.value) is error


def test_parse_header_rejections() -> None:
    """parse_header names short input, wrong magic and impossible lengths."""
    batch = three_record_batch()
    with pytest.raises(InvalidBatch, match="need 61 header bytes, only 60"):
        parse_header(batch[:60])
    with pytest.raises(InvalidBatch, match="magic byte is 0"):
        parse_header(patch(batch, 16, ">b", 0, fix_crc=False))
    with pytest.raises(InvalidBatch, match="below the minimum"):
        parse_header(patch(batch, 8, ">i", 48, fix_crc=False))


def test_crc_ok_false_when_batch_incomplete() -> None:
    """crc_ok reports False rather than checking a partial batch."""
    batch = three_record_batch()
    header = parse_header(batch)
    assert crc_ok(batch, 0, header)
    assert not crc_ok(batch[:-1], 0, header)


# --------------------------------------------------------------------------- scan_batches


def test_scan_batches_full_log() -> None:
    """A clean log scans to its end with every batch listed."""
    batches = [three_record_batch(base_offset=3 * i) for i in range(4)]
    log = b"".join(batches)
    found, end = scan_batches(log)
    assert end == len(log)
    assert [h.base_offset for _, h in found] == [0, 3, 6, 9]


def test_scan_batches_stops_at_torn_tail() -> None:
    """A partially written last batch (or partial header) ends the valid prefix."""
    batch = three_record_batch()
    for cut in (1, 30, HEADER_SIZE, len(batch) - 1):
        found, end = scan_batches(batch + batch + batch[:cut])
        assert len(found) == 2
        assert end == 2 * len(batch)


def test_scan_batches_stops_at_corrupt_batch() -> None:
    """The first batch with a CRC mismatch, bad magic or bad length ends the scan."""
    batch = three_record_batch()
    corrupt = bytearray(batch)
    corrupt[HEADER_SIZE + 3] ^= 0x10
    found, end = scan_batches(batch + bytes(corrupt) + batch)
    assert (len(found), end) == (1, len(batch))
    found, end = scan_batches(batch + patch(batch, 16, ">b", 1, fix_crc=False))
    assert (len(found), end) == (1, len(batch))
    found, end = scan_batches(batch + patch(batch, 8, ">i", 3, fix_crc=False))
    assert (len(found), end) == (1, len(batch))


def test_scan_batches_from_position() -> None:
    """Scanning from a later position reports absolute positions."""
    batch = three_record_batch()
    log = batch + batch + batch
    found, end = scan_batches(log, len(batch))
    assert [pos for pos, _ in found] == [len(batch), 2 * len(batch)]
    assert end == len(log)
    assert scan_batches(b"") == ([], 0)
    assert scan_batches(log, len(log)) == ([], len(log))


# --------------------------------------------------------------------------- corrupt records


def test_decode_rejects_crc_mismatch_unless_unverified() -> None:
    """A damaged value byte is CorruptBatch; verify=False decodes the damaged bytes as-is."""
    batch = bytearray(three_record_batch())
    index = bytes(batch).index(b"value-two")
    batch[index] = ord("V")
    with pytest.raises(CorruptBatch, match="CRC-32C mismatch"):
        decode_records(batch)
    assert decode_records(batch, verify=False)[1].value == b"Value-two"


def test_decode_rejects_compressed_and_truncated() -> None:
    """Undecodable compressed, truncated or non-v2 input is CorruptBatch."""
    batch = three_record_batch()
    with pytest.raises(CorruptBatch, match="snappy"):
        decode_records(patch(batch, 21, ">h", 2))
    with pytest.raises(CorruptBatch, match="past the end of the buffer"):
        decode_records(batch[:-1])
    with pytest.raises(CorruptBatch, match="magic"):
        decode_records(patch(batch, 16, ">b", 1, fix_crc=False))


@pytest.mark.parametrize(
    ("records", "count", "message"),
    [
        (b"\xff\xff\xff\xff\xff\xff", 1, "longer than 5"),
        (b"\x02\x00", 1, "past the end"),
        (b"\x7f" + b"\x00" * 10, 1, "length -64 runs past"),
        (b"\x0c\x00\x00\x00\x05\x00\x00", 1, "negative key length -3"),
        (b"\x0c\x00\x00\x00\x20\x00\x00", 1, "key length 16 runs past"),
        (b"\x0c\x00\x00\x00\x01\x20\x00", 1, "value length 16 runs past"),
        (b"\x0c\x00\x00\x00\x01\x03\x00", 1, "negative value length -2"),
        (b"\x0c\x00\x00\x00\x01\x01\x40", 1, "header count 32 cannot fit"),
        (b"\x12\x00\x00\x00\x01\x01\x02\x02\xff\x01", 1, "not valid UTF-8"),
        (b"\x0c\x00\x00\x03\x01\x01\x00", 1, "offset delta -2 is out of order"),
        (b"\x0c\x00\x00\x02\x01\x01\x00", 1, "offset delta 1 is out of order"),
        (b"\x0c\x00\x00\x00\x01\x01\x00" * 2, 2, "offset delta 0 is out of order"),
        (b"\x0e\x00\x00\x00\x01\x01\x00\x00", 1, "1 bytes left over after its fields"),
        (b"\x0c\x00\x00\x00\x01\x01\x00\x00", 1, "1 bytes left over after 1 records"),
        (b"\x0c\x00\x00\x00\x01\x01\x00", 2, "past the end of the batch"),
    ],
)
def test_decode_malformed_records_raise_corrupt_batch(
    records: bytes, count: int, message: str
) -> None:
    """Structurally broken records behind a valid CRC raise CorruptBatch, never IndexError."""
    batch = reseal_records(three_record_batch(), records, count)
    assert crc_ok(batch, 0, parse_header(batch))
    with pytest.raises(CorruptBatch, match=message):
        decode_records(batch)


def test_decode_random_garbage_only_raises_corrupt_batch() -> None:
    """Random record bytes behind a valid CRC either decode or raise CorruptBatch."""
    rng = random.Random(20240601)
    template = three_record_batch()
    outcomes = {"decoded": 0, "corrupt": 0}
    for _ in range(3000):
        records = rng.randbytes(rng.randrange(0, 40))
        batch = reseal_records(template, records, rng.randrange(1, 4))
        try:
            decode_records(batch)
        except CorruptBatch:
            outcomes["corrupt"] += 1
        else:
            outcomes["decoded"] += 1
    assert outcomes["corrupt"] > 2000
    assert sum(outcomes.values()) == 3000


def test_decode_flipped_record_bytes_never_crash() -> None:
    """Every single-byte flip of the record area, CRC re-sealed, decodes or is CorruptBatch."""
    template = three_record_batch()
    records = template[HEADER_SIZE:]
    for i in range(len(records)):
        damaged = bytearray(records)
        damaged[i] ^= 0xFF
        batch = reseal_records(template, bytes(damaged), 3)
        try:
            out = decode_records(batch)
        except CorruptBatch:
            continue
        assert [r.offset for r in out] == [0, 1, 2]


# --------------------------------------------------------------------------- integrity


def test_every_byte_flip_is_detected_or_outside_crc() -> None:
    """Flipping any byte is caught, except in baseOffset and partitionLeaderEpoch (no CRC)."""
    batch = three_record_batch()
    assert len(batch) == 101
    uncovered_positions = set(range(0, 8)) | set(range(12, 16))
    detected: list[int] = []
    undetected: list[int] = []
    for i in range(len(batch)):
        flipped = bytearray(batch)
        flipped[i] ^= 0xFF
        if _flip_detected(bytes(flipped)):
            detected.append(i)
            with pytest.raises((CorruptBatch, InvalidBatch)):
                decode_records(flipped)
        else:
            undetected.append(i)
    assert set(undetected) == uncovered_positions
    assert len(undetected) == 12
    assert len(detected) == 89


def _flip_detected(buf: bytes) -> bool:
    """True when any of the integrity checks notices the damage."""
    try:
        header = parse_header(buf)
    except InvalidBatch:
        return True
    if not crc_ok(buf, 0, header):
        return True
    try:
        validate_batches(buf)
    except InvalidBatch:
        return True
    found, end = scan_batches(buf)
    return end != len(buf) or len(found) != 1


def test_batch_header_is_frozen() -> None:
    """Headers and records are immutable values, safe to share between threads."""
    header = parse_header(three_record_batch())
    with pytest.raises(AttributeError):
        header.base_offset = 5  # type: ignore[misc]
    assert header.base_offset == 0
    with pytest.raises(AttributeError):
        Record(b"k", b"v").key = b"x"  # type: ignore[misc]


def test_record_keeps_dataclass_value_semantics() -> None:
    """Records build by keyword, compare and hash by value, but only against other Records."""
    record = Record(key=b"k", value=b"v", timestamp=5)
    assert record == Record(b"k", b"v", (), 5, None)
    assert hash(record) == hash(Record(b"k", b"v", (), 5, None))
    assert repr(record) == "Record(key=b'k', value=b'v', headers=(), timestamp=5, offset=None)"
    plain = (b"k", b"v", (), 5, None)
    assert record != plain
    assert plain != record
    assert not record == plain  # noqa: SIM201 - exercises __eq__ itself
    with pytest.raises(TypeError):
        _ = record < Record(b"l", b"v")
    with pytest.raises(AttributeError):
        record.offset = 1  # type: ignore[misc]


def test_two_byte_varint_boundaries_decode() -> None:
    """Lengths and deltas at the 1/2/3-byte zig-zag boundaries (63, 64, 8191, 8192) decode."""
    sizes = [0, 63, 64, 100, 8191, 8192]
    records = [Record(bytes([n % 251]) * n, b"v" * (n // 2 + 1)) for n in sizes * 20]
    out = roundtrip(records, base_offset=7)
    assert [(r.key, r.value) for r in out] == [(r.key, r.value) for r in records]
    assert [r.offset for r in out] == list(range(7, 7 + len(records)))


def test_two_byte_record_length_cut_at_batch_end_is_corrupt() -> None:
    """A record length whose second varint byte would lie past the batch is CorruptBatch."""
    batch = reseal_records(three_record_batch(), b"\x80", 1)
    with pytest.raises(CorruptBatch, match="past the end"):
        decode_records(batch)


def test_record_fields_overrunning_its_length_say_so() -> None:
    """Fields that run past the record's stated length are reported as an overrun."""
    batch = reseal_records(three_record_batch(), b"\x02\x00\x00\x00\x01\x01\x00", 1)
    with pytest.raises(CorruptBatch, match="overruns its length by 5 bytes"):
        decode_records(batch)


# ------------------------------------------------------------------- record-level validation


def raw_record(
    offset_delta: int,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    *,
    ts_delta: int = 0,
    headers: bytes = b"\x00",
    attributes: bytes = b"\x00",
    length_adjust: int = 0,
) -> bytes:
    """One record's bytes built field by field, so tests can break any single field."""
    body = attributes + encode_varlong(ts_delta) + encode_varint(offset_delta)
    body += encode_varint(-1) if key is None else encode_varint(len(key)) + key
    body += encode_varint(-1) if value is None else encode_varint(len(value)) + value
    body += headers
    return encode_varint(len(body) + length_adjust) + body


def forged(records: bytes, count: int, *, max_ts_delta: int = 0) -> bytes:
    """A batch around ``records`` with a consistent header (count, maxTimestamp) and CRC."""
    batch = reseal_records(three_record_batch(), records, count)
    return patch(batch, 35, ">q", parse_header(batch).base_timestamp + max_ts_delta)


def test_validate_accepts_forged_good_records() -> None:
    """The forging helpers produce batches the validator and the decoder both accept."""
    batch = forged(raw_record(0) + raw_record(1, None, None, ts_delta=7), 2, max_ts_delta=7)
    assert validate_batches(batch)[0][1].record_count == 2
    assert [r.offset for r in decode_records(batch)] == [0, 1]


@pytest.mark.parametrize(
    ("records", "count", "message"),
    [
        (raw_record(0) + raw_record(2), 2, r"record 1 \(byte 9 of the records\): offset delta 2"),
        (raw_record(1), 1, "record 0 .*offset delta 1, expected 0"),
        (raw_record(0, length_adjust=1), 1, "runs 1 bytes past the batch end"),
        (raw_record(0, length_adjust=1) + b"\x00", 1, "does not match its fields"),
        (raw_record(0) + b"\x00\x00", 1, "2 bytes left over after 1 records"),
        (b"\x0c\x00\x00\x00\x03\x00\x00", 1, "key length -2 is negative"),
        (raw_record(0, headers=encode_varint(-1)), 1, "header count -1 is negative"),
        (raw_record(0, headers=encode_varint(100)), 1, "header count 100 cannot fit"),
        (
            raw_record(0, headers=b"\x02" + encode_varint(-1) + encode_varint(-1)),
            1,
            "header 0 key length -1: header keys may not be null",
        ),
        (
            raw_record(0, headers=b"\x02\x02\xff" + encode_varint(-1)),
            1,
            "header 0 key is not valid UTF-8",
        ),
        (
            raw_record(0, headers=b"\x02\x02h" + encode_varint(-3)),
            1,
            "header 0 value length -3 is negative",
        ),
        (b"\x20\x00" + b"\xff" * 11 + b"\x00" * 4, 1, "longer than 10 bytes"),
        (b"\x18\x00\x00" + b"\xff" * 6 + b"\x00" * 4, 1, "longer than 5 bytes"),
        (b"\x14\x00\x00\xff\xff\xff\xff\x7f\x00\x00\x00", 1, "overflows 32 bits"),
        (b"\x08\x00\x00\x00\x00", 1, "below the minimum 6"),
        (b"\x0c\x00\x00\x00\x08ab", 1, "key length 4 runs past the end of the record"),
        (b"\x0c\x00\x00\x00\x00\x10abcde", 1, "value length 8 runs past the end"),
        (encode_varint(-5) + b"\x00" * 6, 1, "record length -5 is below the minimum"),
    ],
)
def test_validate_rejects_malformed_records(records: bytes, count: int, message: str) -> None:
    """Each malformed field is InvalidBatch naming the batch and record; CRC is valid."""
    batch = forged(records, count)
    with pytest.raises(InvalidBatch, match="batch 0 at position 0") as info:
        validate_batches(batch)
    assert type(info.value) is InvalidBatch
    assert re.search(message, str(info.value)), str(info.value)


def test_validate_crc_mismatch_is_corrupt_message() -> None:
    """A damaged client batch is CorruptMessage (Kafka's CORRUPT_MESSAGE), not stored-data
    corruption: it is an InvalidBatch and never a CorruptBatch."""
    batch = bytearray(three_record_batch())
    batch[-3] ^= 0x01
    with pytest.raises(CorruptMessage, match="batch 0 at position 0: CRC-32C mismatch") as info:
        validate_batches(bytes(batch))
    assert isinstance(info.value, InvalidBatch)
    assert not isinstance(info.value, CorruptBatch)


def test_validate_checks_max_timestamp_and_int64_range() -> None:
    """maxTimestamp must be the largest record timestamp; timestamps must fit in int64."""
    batch = forged(raw_record(0, ts_delta=5) + raw_record(1, ts_delta=-3), 2, max_ts_delta=4)
    with pytest.raises(InvalidBatch, match=r"maxTimestamp .* is not the largest record timestamp"):
        validate_batches(batch)
    assert validate_batches(patch(batch, 35, ">q", TS + 5))
    near_max = patch(forged(raw_record(0, ts_delta=10), 1), 27, ">q", (1 << 63) - 5)
    near_max = patch(near_max, 35, ">q", (1 << 63) - 1)
    with pytest.raises(InvalidBatch, match="do not fit in int64"):
        validate_batches(near_max)


# --------------------------------------------------------------------------- accept_batches


def test_accept_batches_returns_a_correct_payload_unchanged() -> None:
    """The fast path: nothing to rewrite, the very bytes given come back with their headers."""
    payload = three_record_batch() + encode_batch([Record(b"x", b"y")], timestamp=TS)
    stored, headers = accept_batches(payload)
    assert stored is payload
    assert headers == validate_batches(payload)


@pytest.mark.parametrize("claimed", [-1, 0, TS, TS + 100])
def test_accept_batches_rewrites_a_wrong_max_timestamp_and_its_crc(claimed: int) -> None:
    """maxTimestamp -1 (Go clients) or any other wrong value becomes the records' largest
    timestamp, as Kafka's log validator writes it; the CRC is recomputed, so the stored
    batch passes the strict validator and decodes, and the header returned is the stored
    one. A correct batch beside it is not touched."""
    good = encode_batch([Record(b"a", b"1")], timestamp=TS - 50)
    lying = patch(three_record_batch(), 35, ">q", claimed)
    with pytest.raises(InvalidBatch, match=f"maxTimestamp {claimed} is not the largest"):
        validate_batches(good + lying)
    stored, headers = accept_batches(good + lying)
    assert len(stored) == len(good + lying)
    assert stored[: len(good)] == good
    assert headers == validate_batches(stored)
    assert [h.max_timestamp for _, h in headers] == [TS - 50, TS + 9]
    pos, header = headers[1]
    assert header == parse_header(stored, pos)
    assert crc_ok(stored, pos, header)
    assert stored[len(good) :] == patch(lying, 35, ">q", TS + 9)
    assert [r.timestamp for r in decode_records(stored, pos)] == [TS, TS + 5, TS + 9]


def test_accept_batches_takes_records_without_timestamps() -> None:
    """Records whose timestamp is -1 (librdkafka's C++ API for "none", sent with a
    maxTimestamp of 0) are accepted and the batch stored with maxTimestamp -1, the floor
    Kafka's running maximum starts from; so are timestamps below -1."""
    for ts, claimed in ((-1, 0), (-1, -1), (-7, -7)):
        batch = encode_batch([Record(b"k", b"v", timestamp=ts)] * 3)
        batch = patch(batch, 35, ">q", claimed)
        stored, [(_, header)] = accept_batches(batch)
        assert header.max_timestamp == -1
        assert validate_batches(stored)[0][1] == header
        assert [r.timestamp for r in decode_records(stored)] == [ts] * 3


def test_accept_batches_rewrites_compressed_batches_and_keeps_the_codec() -> None:
    """A compressed batch's maxTimestamp comes from its decompressed records; the records
    stay compressed, byte for byte."""
    batch = compress_batch(three_record_batch(), "gzip")
    lying = patch(batch, 35, ">q", -1)
    stored, [(_, header)] = accept_batches(lying)
    assert header.max_timestamp == TS + 9
    assert header.attributes & 0x07 == 1
    assert stored[HEADER_SIZE:] == batch[HEADER_SIZE:]
    assert stored == batch


def test_accept_batches_checks_the_size_limit_before_the_crc() -> None:
    """A batch over ``max_batch_bytes`` is RecordTooLarge even when its CRC is wrong too,
    as Kafka checks max.message.bytes first; at the limit it is accepted."""
    batch = three_record_batch()
    damaged = bytearray(batch)
    damaged[-1] ^= 0x01
    with pytest.raises(RecordTooLarge, match=f"is {len(batch)} bytes, above the broker's"):
        accept_batches(bytes(damaged), max_batch_bytes=len(batch) - 1)
    with pytest.raises(CorruptMessage):
        accept_batches(bytes(damaged), max_batch_bytes=len(batch))
    assert accept_batches(batch, max_batch_bytes=len(batch))[0] is batch


@pytest.mark.parametrize("codec", [None, "gzip", "lz4"])
def test_log_append_time_stamps_every_batch_with_the_brokers_clock(codec: str | None) -> None:
    """A LogAppendTime topic (Kafka's LogValidator): the timestamp-type bit and maxTimestamp
    are the broker's, the CRC is recomputed, the records and their codec are as sent."""
    plain = three_record_batch()
    sent = plain if codec is None else compress_batch(plain, codec)
    payload = sent + encode_batch([Record(b"x", b"y")], timestamp=TS)
    stored, headers = accept_batches(payload, log_append_time=True, now=TS + 1000)
    assert headers == scan_batches(stored)[0]
    for pos, header in headers:
        assert header.attributes & 0x08
        assert header.max_timestamp == TS + 1000
        assert crc_ok(stored, pos, header)
    first = headers[0][1]
    assert first.attributes & 0x07 == parse_header(sent).attributes & 0x07
    assert first.base_timestamp == TS
    assert stored[HEADER_SIZE : first.size] == sent[HEADER_SIZE:]
    assert [r.timestamp for r in decode_records(stored)] == [TS, TS + 5, TS + 9]
    with pytest.raises(InvalidTimestamp):
        accept_batches(stored)


def test_restamping_a_broker_built_batch_is_the_same_stamp() -> None:
    """The seed Produce's one-record batches are stamped by the same function."""
    payload = encode_batch([Record(b"k", b"v")], timestamp=TS)
    stored, [(pos, header)] = record_batch.restamp_batches(
        payload, validate_batches(payload), log_append_time=TS + 5
    )
    assert (header.attributes & 0x08, header.max_timestamp) == (0x08, TS + 5)
    assert crc_ok(stored, pos, header) and len(stored) == len(payload)


@pytest.mark.parametrize(
    ("sent", "target"), [(None, 3), (None, 4), ("gzip", 0), ("snappy", 1), ("zstd", 2)]
)
def test_a_topics_compression_type_recompresses_batches(sent: str | None, target: int) -> None:
    """compression.type other than producer: the batch is rebuilt in the topic's codec, with
    its new length and CRC; the records, offsets and producer fields stay."""
    plain = patch(patch(three_record_batch(), 43, ">q", 77), 53, ">i", 5)
    payload = plain if sent is None else compress_batch(plain, sent)
    stored, [(pos, header)] = accept_batches(payload, codec=target)
    assert header.attributes & 0x07 == target
    assert validate_batches(stored) == [(pos, header)]
    before = parse_header(payload)
    for field in ("last_offset_delta", "base_timestamp", "max_timestamp", "producer_id"):
        assert getattr(header, field) == getattr(before, field), field
    assert decode_records(stored) == decode_records(payload)
    assert accept_batches(stored, codec=target)[0] is stored


@pytest.mark.parametrize(
    ("timestamps", "refused"),
    [
        ([TS - 60_001], TS - 60_001),
        ([TS, TS + 1001], TS + 1001),
        ([-1, -1], None),
        ([-1, TS - 60_001], TS - 60_001),
        ([-1, TS], None),
        ([TS - 60_000, TS + 1000], None),
    ],
)
def test_record_timestamps_outside_the_topics_window_are_invalid(
    timestamps: list[int], refused: int | None
) -> None:
    """message.timestamp.before.max.ms / after.max.ms (Kafka's validateTimestamp): checked
    for every record with a timestamp; -1 ("none") always passes."""
    batch = encode_batch([Record(b"k", b"v", timestamp=t) for t in timestamps])
    window = {"now": TS, "before_max_ms": 60_000, "after_max_ms": 1000}
    if refused is None:
        accept_batches(batch, **window)
    else:
        with pytest.raises(InvalidTimestamp, match=f"timestamp {refused} is out of range"):
            accept_batches(batch, **window)
    accept_batches(batch, now=TS)
    accept_batches(batch, log_append_time=True, **window)


def test_record_attributes_are_ignored() -> None:
    """A v2 record's attributes byte is unused: any value is accepted, as Kafka accepts it."""
    batch = forged(raw_record(0, attributes=b"\x7f") + raw_record(1, attributes=b"\xff"), 2)
    assert accept_batches(batch)[0] is batch
    assert [r.value for r in decode_records(batch)] == [b"v", b"v"]


def test_validate_rejects_producer_id_without_sequence() -> None:
    """An idempotent batch (producer id >= 0) needs a sequence >= 0, as Kafka requires."""
    batch = patch(patch(three_record_batch(), 43, ">q", 7), 53, ">i", -1)
    with pytest.raises(InvalidBatch, match="producer id 7 with invalid sequence -1"):
        validate_batches(batch)
    assert validate_batches(patch(batch, 53, ">i", 0))


def big_batch(count: int, *, spread_ms: int = 0) -> bytes:
    return encode_batch(
        [
            Record(b"key-%08d" % i, b"v" * 100, timestamp=TS + (i * spread_ms) // max(count, 1))
            for i in range(count)
        ]
    )


@pytest.mark.parametrize("spread_ms", [0, 50, 5000, 1 << 40])
def test_validate_big_batches_of_every_delta_width(spread_ms: int) -> None:
    """Runs of same-layout records cross the 1/2/3-byte offset-delta widths and accept."""
    batch = big_batch(9000, spread_ms=spread_ms)
    assert validate_batches(batch)[0][1].record_count == 9000


@pytest.mark.parametrize("victim", [1, 63, 64, 65, 4000, 8191, 8192, 8999])
def test_validate_finds_one_bad_record_inside_a_run(victim: int) -> None:
    """One wrong offset delta deep inside a run of identical layouts is found and named."""
    records = b"".join(
        raw_record(victim + 1 if i == victim else i, b"key-%04d" % (i % 10000), b"x" * 100)
        for i in range(9000)
    )
    batch = forged(records, 9000)
    with pytest.raises(InvalidBatch, match=rf"record {victim} .*offset delta {victim + 1}"):
        validate_batches(batch)


def test_validate_fast_and_slow_paths_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random byte damage behind a valid CRC: the run checker and the one-record-at-a-time
    parser give the same verdict, and every accepted batch decodes to its record count."""
    rng = random.Random(20240611)
    base = b"".join(
        raw_record(i, b"k%03d" % i, b"value-%d" % (i % 7), ts_delta=i % 70) for i in range(200)
    )
    verdicts = {"accepted": 0, "rejected": 0}
    for _ in range(600):
        body = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            body[rng.randrange(len(body))] = rng.choice(
                (0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256))
            )
        batch = forged(bytes(body), 200, max_ts_delta=69)

        def verdict(batch: bytes = batch) -> str:
            try:
                validate_batches(batch)
            except InvalidBatch as exc:
                return str(exc)
            return "ok"

        fast = verdict()
        monkeypatch.setattr(record_batch, "_MIN_RUN", 1 << 30)
        slow = verdict()
        monkeypatch.undo()
        assert fast == slow
        if fast == "ok":
            verdicts["accepted"] += 1
            decoded = decode_records(batch)
            assert [r.offset for r in decoded] == list(range(200))
        else:
            verdicts["rejected"] += 1
    assert verdicts["accepted"] > 50 and verdicts["rejected"] > 50, verdicts


# --------------------------------------------------------------------------- cleaner rewrites


def producer_batch(
    records: list[Record], codec: str | None = None, base_offset: int = 500
) -> bytes:
    """An idempotent producer's batch (id 77, epoch 3, sequence 40, leader epoch 9) at
    ``base_offset``, compressed with ``codec``."""
    data = bytearray(encode_batch(records, base_offset=base_offset))
    struct.pack_into(">i", data, 12, 9)
    struct.pack_into(">qhi", data, 43, 77, 3, 40)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    batch = bytes(data)
    return batch if codec is None else compress_batch(batch, codec)


CLEANER_RECORDS = [
    Record(b"a", b"1", timestamp=TS + 5),
    Record(b"b", b"2", (("h", b"x"), ("n", None)), timestamp=TS - 3),
    Record(b"c", None, timestamp=TS + 9),
    Record(b"d", b"4", timestamp=TS + 1),
]


@pytest.mark.clients
@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_rewrite_batch_keeps_offsets_producer_fields_codec_and_timestamps(
    codec: str | None,
) -> None:
    """Kafka's buildRetainedRecordsInto: the header's fields stay, each kept record keeps
    its offset (so the offset deltas skip the removed ones) and its timestamp, the CRC is
    recomputed, and a Kafka client's own reader (aiokafka's) reads the result the same."""
    from aiokafka.record.default_records import DefaultRecordBatch

    original = producer_batch(CLEANER_RECORDS, codec)
    header = parse_header(original)
    kept = [decode_records(original)[i] for i in (1, 3)]
    rewritten = rewrite_batch(header, kept)
    new = parse_header(rewritten)
    assert crc_ok(rewritten, 0, new)
    assert new.size == len(rewritten)
    same = ("base_offset", "last_offset_delta", "producer_id", "producer_epoch", "base_sequence")
    assert [getattr(new, f) for f in same] == [getattr(header, f) for f in same]
    assert new.partition_leader_epoch == 9
    assert new.attributes == header.attributes  # the codec bits, nothing added
    assert new.record_count == 2
    assert new.base_timestamp == TS - 3  # the first kept record's
    assert new.max_timestamp == TS + 1  # the largest kept timestamp, as the validator has it
    assert decode_records(rewritten) == kept
    assert [(r.offset, r.timestamp) for r in kept] == [(501, TS - 3), (503, TS + 1)]
    theirs = list(DefaultRecordBatch(bytearray(rewritten)))
    assert [(r.offset, r.timestamp, r.key, r.value) for r in theirs] == [
        (r.offset, r.timestamp, r.key, r.value) for r in kept
    ]


def test_rewrite_batch_with_a_delete_horizon_sets_the_bit_and_base_timestamp() -> None:
    """KIP-534: the horizon becomes the base timestamp, flagged by attribute bit 0x40; the
    records' own timestamps (deltas from the new base, negative here) do not change."""
    original = producer_batch(CLEANER_RECORDS, "zstd")
    header = parse_header(original)
    assert delete_horizon(header) is None
    kept = decode_records(original)[1:3]
    horizon = TS + 86_400_000
    rewritten = rewrite_batch(header, kept, horizon=horizon)
    new = parse_header(rewritten)
    assert new.attributes == header.attributes | DELETE_HORIZON_BIT
    assert delete_horizon(new) == horizon == new.base_timestamp
    assert new.max_timestamp == TS + 9
    assert decode_records(rewritten) == kept
    # A later rewrite that keeps the horizon keeps it.
    again = rewrite_batch(new, decode_records(rewritten)[:1], horizon=delete_horizon(new))
    assert delete_horizon(parse_header(again)) == horizon


def test_rewrite_batch_refuses_records_outside_or_out_of_order() -> None:
    header = parse_header(producer_batch(CLEANER_RECORDS))
    records = decode_records(producer_batch(CLEANER_RECORDS))
    with pytest.raises(InvalidBatch, match="outside"):
        rewrite_batch(header, [records[2], records[0]])
    with pytest.raises(InvalidBatch, match="outside"):
        rewrite_batch(header, [Record(b"k", b"v", timestamp=TS, offset=499)])
    with pytest.raises(InvalidBatch, match="at least one"):
        rewrite_batch(header, [])


def test_empty_batch_is_a_header_with_the_offsets_and_producer_fields() -> None:
    """Kafka's writeEmptyHeader: no records, no codec, base timestamp -1, the rest kept."""
    header = parse_header(producer_batch(CLEANER_RECORDS, "gzip"))
    empty = empty_batch(header)
    new = parse_header(empty)
    assert len(empty) == HEADER_SIZE == new.size
    assert crc_ok(empty, 0, new)
    assert (new.base_offset, new.last_offset, new.record_count) == (500, 503, 0)
    assert (new.producer_id, new.producer_epoch, new.base_sequence) == (77, 3, 40)
    assert (new.base_timestamp, new.max_timestamp) == (-1, header.max_timestamp)
    assert new.attributes == 0 and new.partition_leader_epoch == 9
    assert decode_records(empty) == []


def test_a_compacted_topic_refuses_records_without_a_key() -> None:
    """Kafka's LogValidator on a compacted topic: a null key is INVALID_RECORD
    (InvalidBatch), in a run of records as well as in a record parsed alone."""
    keyed = encode_batch([Record(b"k%d" % i, b"v") for i in range(20)], timestamp=TS)
    assert accept_batches(keyed, require_keys=True)[1]
    one = encode_batch([Record(None, b"v")], timestamp=TS)
    many = encode_batch([Record(b"k", b"v")] * 10 + [Record(None, b"v")] * 10, timestamp=TS)
    nulls = encode_batch([Record(None, b"v")] * 20, timestamp=TS)
    for batch in (one, many, compress_batch(nulls, "lz4")):
        assert accept_batches(batch)[1]
        with pytest.raises(InvalidBatch, match="compacted topic cannot accept a record without"):
            accept_batches(batch, require_keys=True)


def test_rank_range_is_min_and_max_on_both_sides_of_the_scan_threshold() -> None:
    from rustka.record.batch import _RANK_SCAN_MAX, _rank_range

    rng = random.Random(7)
    for n in (1, 2, 60, _RANK_SCAN_MAX, _RANK_SCAN_MAX + 1, 5000):
        for spread in (0, 1, 40, 255):
            base = rng.randrange(256 - spread)
            data = bytes(base + rng.randrange(spread + 1) for _ in range(n))
            assert _rank_range(data) == (min(data), max(data)), (n, spread)
    assert _rank_range(bytes([9] * 3000 + [0] + [255])) == (0, 255)


@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
def test_record_prefixes_read_each_records_key_and_value_head_as_decoding_would(
    codec: str,
) -> None:
    from rustka.record.batch import record_prefixes

    records = [
        Record(key=None, value=b"\x00\x00\x00\x00\x07rest"),
        Record(key=b"k" * 300, value=None, headers=(("h", b"v" * 200),)),
        Record(key=b"", value=b"ab"),
        Record(key=b"key", value=b"v" * 10_000, timestamp=2**40),
    ] + [Record(key=None, value=b"%05d-tail" % i) for i in range(200)]
    batch = encode_batch(records, timestamp=1_000)
    if codec != "none":
        batch = compress_batch(batch, codec)
    (payload, checked) = accept_batches(batch, max_batch_bytes=1 << 20, now=1_000)
    pos, header = checked[0]
    cut = [
        (None if r.key is None else r.key[:5], None if r.value is None else r.value[:5])
        for r in decode_records(payload, pos)
    ]
    assert record_prefixes(payload, pos, header, 5) == cut
    assert cut[0] == (None, b"\x00\x00\x00\x00\x07") and cut[1] == (b"kkkkk", None)
