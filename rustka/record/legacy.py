"""The message sets of Kafka before 0.11 (magic 0 and 1), converted to and from batches.

rustka stores only RecordBatch v2 (docs/kafka.md, "Storage"). Produce v0-2 and Fetch v0-3
carry the older format, and sarama at its default configuration (Kafka 0.8.2)
and Debian's kafka-go still speak it, so the Kafka front-end converts at the
edge as Kafka 3.9's log validator and fetch path did (docs/kafka.md, "Old
versions"):

- up: a message set becomes one v2 batch with the wrapper's codec, the records'
  keys, values and timestamps (magic 0 has none: -1, Kafka's NO_TIMESTAMP), no
  headers and no producer id; offsets are the broker's, as always;
- down: stored batches become one uncompressed message per record at its own
  offset, headers dropped, control batches skipped, records below the fetch
  offset left out.

A message is ``offset int64, size int32, crc int32, magic int8, attributes
int8, [timestamp int64 (magic 1)], key bytes, value bytes``; the CRC is
CRC-32 (not the batches' CRC-32C) over magic to the end. A compressed message
(codec bits in attributes) wraps a message set in its value. Every length is
checked against what remains before it is used; decompression is bounded.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

from rustka.errors import InvalidBatch
from rustka.record.batch import (
    Buffer,
    CorruptMessage,
    Record,
    compress_batch,
    decode_records,
    encode_batch,
    parse_header,
)
from rustka.record.compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_SNAPPY,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    decompress,
)
from rustka.record.control import is_control
from rustka.record.header import CODEC_MASK, HEADER_SIZE, MAGIC

__all__ = ["LegacyMessage", "down_convert", "is_legacy", "up_convert"]

_ENTRY = struct.Struct(">qi")  # offset, message size
_MESSAGE = struct.Struct(">iBb")  # crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_MAGIC_AT = 16  # offset (8) + size (4) + crc (4)
_MIN_MESSAGE = 4 + 1 + 1 + 4 + 4  # crc, magic, attributes, null key, null value
_LOG_APPEND_TIME = 0x08  # attributes bit 3 on magic 1
_LEGACY_CODECS = (0, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4)
NO_TIMESTAMP = -1

LegacyMessage = tuple[bytes | None, bytes | None, int]
"""key, value, timestamp (-1 for magic 0) of one message."""


def is_legacy(records: Buffer) -> bool:
    """Whether a Produce's records start with a magic 0 or 1 message rather than a batch."""
    view = memoryview(records)
    return len(view) > _MAGIC_AT and view[_MAGIC_AT] in (0, 1)


def up_convert(
    records: Buffer, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> bytes:
    """One v2 batch holding the messages of a magic 0/1 message set, compressed with the
    codec the producer used (a topic's ``compression.type`` applies later, as for any
    batch). Raises InvalidBatch (CORRUPT_MESSAGE for a bad CRC) on anything malformed."""
    messages, codec = _messages(bytes(records), max_decompressed_bytes, nested=False)
    if not messages:
        raise InvalidBatch("an empty message set")
    batch = encode_batch(
        [Record(key, value, (), timestamp) for key, value, timestamp in messages],
        timestamp=NO_TIMESTAMP,
    )
    return compress_batch(batch, codec) if codec else batch


def _messages(data: bytes, limit: int, *, nested: bool) -> tuple[list[LegacyMessage], int]:
    out: list[LegacyMessage] = []
    codec = 0
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < _ENTRY.size:
            if nested or not out:
                raise InvalidBatch(f"a message set ends in a partial entry at byte {pos}")
            break  # a producer may cut the last message short, as Kafka tolerated
        _offset, size = _ENTRY.unpack_from(data, pos)
        start = pos + _ENTRY.size
        if size < _MIN_MESSAGE:
            raise InvalidBatch(f"message at byte {pos}: size {size} is too small")
        if size > end - start:
            if nested or not out:
                raise InvalidBatch(f"message at byte {pos}: size {size} runs past the set")
            break
        stop = start + size
        crc, magic, attributes = _MESSAGE.unpack_from(data, start)
        if magic not in (0, 1):
            raise InvalidBatch(f"message at byte {pos}: magic {magic} in a legacy message set")
        if zlib.crc32(memoryview(data)[start + 4 : stop]) != crc & 0xFFFFFFFF:
            raise CorruptMessage(f"message at byte {pos}: CRC-32 mismatch")
        i = start + _MESSAGE.size
        timestamp = NO_TIMESTAMP
        if magic == 1:
            if stop - i < _TIMESTAMP.size:
                raise InvalidBatch(f"message at byte {pos}: no room for its timestamp")
            (timestamp,) = _TIMESTAMP.unpack_from(data, i)
            i += _TIMESTAMP.size
        key, i = _bytes(data, i, stop, pos)
        value, i = _bytes(data, i, stop, pos)
        if i != stop:
            raise InvalidBatch(f"message at byte {pos}: {stop - i} bytes after its value")
        message_codec = attributes & CODEC_MASK
        if message_codec not in _LEGACY_CODECS:
            raise InvalidBatch(f"message at byte {pos}: codec {message_codec}")
        if message_codec:
            if nested:
                raise InvalidBatch(f"message at byte {pos}: a compressed message inside one")
            if value is None:
                raise InvalidBatch(f"message at byte {pos}: a compressed message without a value")
            inner, _ = _messages(decompress(message_codec, value, limit), limit, nested=True)
            if magic == 1 and attributes & _LOG_APPEND_TIME:
                inner = [(k, v, timestamp) for k, v, _ in inner]
            out.extend(inner)
            codec = message_codec
        else:
            out.append((key, value, timestamp))
        pos = stop
    return out, codec


def _bytes(data: bytes, i: int, stop: int, where: int) -> tuple[bytes | None, int]:
    if stop - i < _LENGTH.size:
        raise InvalidBatch(f"message at byte {where}: a length runs past the message")
    (length,) = _LENGTH.unpack_from(data, i)
    i += _LENGTH.size
    if length == -1:
        return None, i
    if length < 0 or length > stop - i:
        raise InvalidBatch(f"message at byte {where}: length {length} does not fit")
    return data[i : i + length], i + length


def down_convert(
    chunks: Iterable[Buffer],
    magic: int,
    min_offset: int,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """Stored batches (a Fetch's chunks) as a message set of ``magic`` 0 or 1: one
    uncompressed message per record, at its offset. A partial batch at the end (a
    Fetch may stop inside one) is left out, as a client would skip it."""
    data = b"".join(bytes(c) for c in chunks)
    out: list[bytes] = []
    pos, end = 0, len(data)
    while end - pos >= HEADER_SIZE:
        header = parse_header(data, pos)
        if header.magic != MAGIC or pos + header.size > end:
            break
        if not is_control(header) and header.last_offset >= min_offset:
            log_append = bool(header.attributes & _LOG_APPEND_TIME)
            for record in decode_records(
                data,
                pos,
                min_offset=min_offset,
                max_decompressed_bytes=max_decompressed_bytes,
            ):
                timestamp = header.max_timestamp if log_append else record.timestamp
                out.append(_message(record.offset or 0, magic, log_append, timestamp, record))
        pos += header.size
    return b"".join(out)


def _message(offset: int, magic: int, log_append: bool, timestamp: int | None, r: Record) -> bytes:
    parts = [struct.pack(">Bb", magic, _LOG_APPEND_TIME if magic == 1 and log_append else 0)]
    if magic == 1:
        parts.append(_TIMESTAMP.pack(NO_TIMESTAMP if timestamp is None else timestamp))
    for field in (r.key, r.value):
        if field is None:
            parts.append(_LENGTH.pack(-1))
        else:
            parts.append(_LENGTH.pack(len(field)))
            parts.append(field)
    body = b"".join(parts)
    crc = zlib.crc32(body)
    return _ENTRY.pack(offset, 4 + len(body)) + struct.pack(">I", crc) + body
