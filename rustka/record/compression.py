"""Kafka batch compression: the records block of a RecordBatch v2, per codec, via cramjam.

Kafka compresses the whole records area of a batch (everything after the 61-byte
header) with the codec named by attribute bits 0-2; the header itself stays
plain, so offsets, counts and the CRC are readable without decompressing
(docs/kafka.md, "Compression"). The broker stores such batches exactly as the
client sent them and decompresses only to validate a produce and to hand
records to a reader (native Fetch, the client library, ``rustka dump``).

Formats, as the clients write them:

- gzip (1): one gzip stream.
- snappy (2): either a raw snappy block (librdkafka) or the xerial framing the
  Java client and kafka-python/aiokafka write: a 16-byte header
  (``\\x82SNAPPY\\x00``, int32 version, int32 compatible version) followed by
  blocks of ``int32 length`` + raw snappy.
- lz4 (3): the LZ4 frame format.
- zstd (4): a zstd frame.

Every decompression is bounded: output goes into a buffer that grows
geometrically up to ``limit`` bytes and never past it, so a small payload that
expands to gigabytes (a zip bomb) costs at most ``limit`` bytes and the work
to fill them, then fails as InvalidBatch.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import cramjam

from rustka.errors import InvalidBatch

__all__ = [
    "CODEC_GZIP",
    "CODEC_LZ4",
    "CODEC_NAMES",
    "CODEC_NONE",
    "CODEC_SNAPPY",
    "CODEC_ZSTD",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "codec_name",
    "codec_of",
    "compress",
    "decompress",
]

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
CODEC_NAMES: dict[int, str] = {
    CODEC_NONE: "none",
    CODEC_GZIP: "gzip",
    CODEC_SNAPPY: "snappy",
    CODEC_LZ4: "lz4",
    CODEC_ZSTD: "zstd",
}
_CODECS_BY_NAME = {name: code for code, name in CODEC_NAMES.items()}

# Decompressed records of one batch may not exceed this unless a caller says otherwise:
# four times the broker's default largest frame (docs/operations.md, max_frame_bytes) leaves
# room for ordinary compression ratios while bounding what one batch can make us allocate.
DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024

# The xerial snappy-java stream header: magic, then version 1 and compatible version 1.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")
# First guess for a stream codec's output, as a multiple of its input; grown by x4.
_FIRST_GUESS_RATIO = 8
_MIN_GUESS = 64 * 1024
# cramjam's message when the output buffer is full: the only error worth a bigger retry.
_BUFFER_FULL = "failed to write whole buffer"

Buffer = bytes | bytearray | memoryview


def codec_name(code: int) -> str:
    """Human name of a codec number, for errors and ``rustka dump``."""
    return CODEC_NAMES.get(code, f"unknown({code})")


def codec_of(name: str) -> int:
    """Codec number of a name (``none``, ``gzip``, ``snappy``, ``lz4``, ``zstd``)."""
    try:
        return _CODECS_BY_NAME[name]
    except KeyError:
        raise ValueError(
            f"unknown compression {name!r}: expected one of {', '.join(_CODECS_BY_NAME)}"
        ) from None


def compress(codec: int, data: Buffer) -> bytes:
    """Compress a records block the way Kafka clients do (snappy with xerial framing)."""
    if codec == CODEC_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == CODEC_SNAPPY:
        parts = [_XERIAL_HEADER]
        view = memoryview(data)
        for start in range(0, len(view), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
            parts.append(_INT32.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == CODEC_LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"cannot compress with codec {codec_name(codec)}")


def decompress(codec: int, data: Buffer, limit: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """The records block of a compressed batch; InvalidBatch if corrupt or above ``limit``.

    Any failure of the codec library is turned into InvalidBatch, so a client's
    garbage can never surface as an unexpected exception.
    """
    if codec == CODEC_SNAPPY:
        return _snappy(data, limit)
    if codec == CODEC_GZIP:
        return _bounded(cramjam.gzip.decompress_into, data, limit, "gzip")
    if codec == CODEC_LZ4:
        return _bounded(cramjam.lz4.decompress_into, data, limit, "lz4")
    if codec == CODEC_ZSTD:
        return _bounded(cramjam.zstd.decompress_into, data, limit, "zstd")
    raise InvalidBatch(f"unknown compression codec {codec}")


def _bounded(
    into: Callable[[Buffer, bytearray], int], data: Buffer, limit: int, name: str
) -> bytes:
    """Decompress into a buffer of at most ``limit`` + 1 bytes, growing it while it fills.

    The extra byte tells "exactly ``limit``" from "more than ``limit``". cramjam
    stops writing when the buffer is full, so a bomb costs the buffer, not its
    full expansion.
    """
    cap = limit + 1
    size = min(cap, max(_MIN_GUESS, len(data) * _FIRST_GUESS_RATIO))
    while True:
        out = bytearray(size)
        try:
            n = into(data, out)
        except Exception as exc:  # cramjam raises its own error types for bad input
            if _BUFFER_FULL in str(exc) and size < cap:
                size = min(cap, size * 4)
                continue
            if _BUFFER_FULL in str(exc):
                raise InvalidBatch(
                    f"{name} records decompress to more than the {limit}-byte limit"
                ) from None
            raise InvalidBatch(f"{name} records cannot be decompressed: {exc}") from None
        if n > limit:
            raise InvalidBatch(f"{name} records decompress to more than the {limit}-byte limit")
        if n == size and size < cap:
            # A full buffer may mean the output was cut short: retry bigger to be sure.
            size = min(cap, size * 4)
            continue
        del out[n:]
        return bytes(out)


def _snappy(data: Buffer, limit: int) -> bytes:
    """Raw snappy (librdkafka) or xerial-framed snappy (Java, kafka-python, aiokafka)."""
    view = memoryview(data)
    if view[: len(_XERIAL_MAGIC)] != _XERIAL_MAGIC:
        return _snappy_block(view, limit, limit)
    if len(view) < len(_XERIAL_HEADER):
        raise InvalidBatch("snappy records: truncated xerial header")
    blocks: list[bytes] = []
    total = 0
    pos = len(_XERIAL_HEADER)
    while pos < len(view):
        if len(view) - pos < 4:
            raise InvalidBatch(f"snappy records: truncated xerial block length at byte {pos}")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > len(view):
            raise InvalidBatch(
                f"snappy records: xerial block of {length} bytes at byte {pos - 4} "
                f"does not fit in the {len(view)}-byte payload"
            )
        block = _snappy_block(view[pos : pos + length], limit - total, limit)
        total += len(block)
        blocks.append(block)
        pos += length
    return b"".join(blocks)


def _snappy_block(data: Buffer, room: int, limit: int) -> bytes:
    """One raw snappy block of at most ``room`` bytes (of the ``limit`` for the whole batch);
    its preamble states the output size, which is checked before any work."""
    name = "snappy"
    try:
        size = int(cramjam.snappy.decompress_raw_len(data))
    except Exception as exc:  # cramjam raises its own error types for bad input
        raise InvalidBatch(f"{name} records cannot be decompressed: {exc}") from None
    if size > room:
        raise InvalidBatch(f"{name} records decompress to more than the {limit}-byte limit")
    out = bytearray(size)
    try:
        n = cramjam.snappy.decompress_raw_into(data, out)
    except Exception as exc:  # cramjam raises its own error types for bad input
        raise InvalidBatch(f"{name} records cannot be decompressed: {exc}") from None
    if n != size:
        raise InvalidBatch(f"{name} records: block holds {n} bytes, its preamble says {size}")
    return bytes(out)
