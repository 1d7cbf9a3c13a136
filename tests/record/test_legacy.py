"""Magic 0/1 message sets to and from batches (rustka.record.legacy).

The message sets here are written byte by byte from Kafka's format (offset, size,
CRC-32, magic, attributes, [timestamp], key, value); sarama's real ones are in
tests/kafka/test_go_client.py.
"""

from __future__ import annotations

import gzip
import struct
import zlib

import pytest

from rustka.errors import InvalidBatch
from rustka.record.batch import (
    CorruptMessage,
    Record,
    compress_batch,
    decode_records,
    encode_batch,
    parse_header,
    set_base_offset,
)
from rustka.record.compression import CODEC_GZIP
from rustka.record.control import COMMIT, encode_control_batch
from rustka.record.header import CODEC_MASK
from rustka.record.legacy import down_convert, is_legacy, up_convert


def message(
    key: bytes | None,
    value: bytes | None,
    *,
    magic: int = 1,
    timestamp: int = 1_000,
    attributes: int = 0,
    offset: int = 0,
) -> bytes:
    body = struct.pack(">Bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    return frame(body, offset)


def frame(body: bytes, offset: int = 0) -> bytes:
    """A message set entry around ``body`` (magic onwards), with its CRC-32."""
    crc = struct.pack(">I", zlib.crc32(body))
    return struct.pack(">qi", offset, len(crc + body)) + crc + body


def parse_set(data: bytes) -> list[tuple[int, int, int, int | None, bytes | None, bytes | None]]:
    """(offset, magic, attributes, timestamp, key, value) of each message, CRCs checked."""
    out = []
    pos = 0
    while pos < len(data):
        offset, size = struct.unpack_from(">qi", data, pos)
        body = data[pos + 12 : pos + 12 + size]
        (crc,) = struct.unpack_from(">I", body)
        assert zlib.crc32(body[4:]) == crc
        magic, attributes = struct.unpack_from(">Bb", body, 4)
        i, ts = 6, None
        if magic == 1:
            (ts,) = struct.unpack_from(">q", body, i)
            i += 8
        fields = []
        for _ in range(2):
            (n,) = struct.unpack_from(">i", body, i)
            i += 4
            fields.append(None if n < 0 else body[i : i + n])
            i += max(n, 0)
        assert i == len(body)
        out.append((offset, magic, attributes, ts, fields[0], fields[1]))
        pos += 12 + size
    return out


def test_magic_0_messages_become_one_batch_without_timestamps() -> None:
    data = message(b"k0", b"v0", magic=0) + message(None, b"v1", magic=0, offset=1)
    assert is_legacy(data)
    batch = up_convert(data)
    header = parse_header(batch)
    assert (header.magic, header.record_count, header.producer_id) == (2, 2, -1)
    assert header.max_timestamp == -1
    assert decode_records(batch) == [
        Record(b"k0", b"v0", (), -1, 0),
        Record(None, b"v1", (), -1, 1),
    ]


def test_a_gzip_wrapper_becomes_a_gzip_batch_with_the_inner_timestamps() -> None:
    inner = message(b"a", b"1", timestamp=5) + message(b"b", None, timestamp=7, offset=1)
    data = message(None, gzip.compress(inner), attributes=CODEC_GZIP, timestamp=7, offset=1)
    batch = up_convert(data)
    header = parse_header(batch)
    assert header.attributes & CODEC_MASK == CODEC_GZIP
    assert header.max_timestamp == 7
    assert decode_records(batch) == [Record(b"a", b"1", (), 5, 0), Record(b"b", None, (), 7, 1)]


def test_a_log_append_time_wrapper_gives_its_timestamp_to_every_inner_message() -> None:
    inner = message(b"a", b"1", timestamp=5) + message(b"b", b"2", timestamp=6, offset=1)
    data = message(None, gzip.compress(inner), attributes=CODEC_GZIP | 0x08, timestamp=99)
    assert [r.timestamp for r in decode_records(up_convert(data))] == [99, 99]


def test_a_cut_last_message_is_dropped_but_a_cut_first_one_is_refused() -> None:
    whole = message(b"k", b"v")
    batch = up_convert(whole + message(b"x", b"y")[:-3])
    assert parse_header(batch).record_count == 1
    with pytest.raises(InvalidBatch, match="runs past"):
        up_convert(whole[:-3])


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (bytearray(message(b"k", b"v")), CorruptMessage, "CRC-32"),
        (frame(struct.pack(">Bbii", 0, 0, -1, -1) + b"tail"), InvalidBatch, "after its"),
        (
            message(
                None,
                gzip.compress(
                    message(None, gzip.compress(message(b"k", b"v")), attributes=CODEC_GZIP)
                ),
                attributes=CODEC_GZIP,
            ),
            InvalidBatch,
            "compressed message inside",
        ),
        (message(None, None, attributes=CODEC_GZIP), InvalidBatch, "without a value"),
        (message(b"k", b"v", attributes=4), InvalidBatch, "codec 4"),
        (b"", InvalidBatch, "empty"),
    ],
)
def test_malformed_message_sets_are_refused_with_a_reason(
    data: bytes | bytearray, error: type[Exception], match: str
) -> None:
    if isinstance(data, bytearray):
        data[-1] ^= 0xFF  # damage the value after the CRC was taken
        data = bytes(data)
    with pytest.raises(error, match=match):
        up_convert(data)


def test_a_length_past_the_message_is_refused_before_it_is_read() -> None:
    data = frame(struct.pack(">Bbii", 0, 0, 1 << 30, -1))
    with pytest.raises(InvalidBatch, match="does not fit"):
        up_convert(data)


def stored(records: list[Record], base: int, codec: int = 0) -> bytes:
    batch = bytearray(compress_batch(encode_batch(records), codec))
    set_base_offset(batch, 0, base)
    return bytes(batch)


def test_stored_batches_go_down_as_messages_at_their_offsets() -> None:
    first = stored([Record(b"k0", b"v0", (("h", b"x"),), 10), Record(None, b"v1", (), 11)], 5)
    marker = bytearray(encode_control_batch(1, 0, COMMIT, 0, 12))
    set_base_offset(marker, 0, 7)
    second = stored([Record(b"k2", None, (), 13)], 8, CODEC_GZIP)
    chunks = [first, bytes(marker), second[:20], second[20:]]
    assert parse_set(down_convert(chunks, 1, 0)) == [
        (5, 1, 0, 10, b"k0", b"v0"),  # headers dropped
        (6, 1, 0, 11, None, b"v1"),
        (8, 1, 0, 13, b"k2", None),  # the marker at 7 skipped, the gzip batch expanded
    ]
    assert parse_set(down_convert(chunks, 0, 6)) == [
        (6, 0, 0, None, None, b"v1"),  # below the fetch offset: left out
        (8, 0, 0, None, b"k2", None),
    ]
    # A batch cut short at the end of a fetch is left out, as a client would skip it.
    assert [m[0] for m in parse_set(down_convert([first, second[:-1]], 1, 0))] == [5, 6]
