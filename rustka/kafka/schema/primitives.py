"""Run-time primitives the generated codecs call: varints, strings, bytes, records.

Every length is checked against the bytes that remain before anything is allocated, so a
hostile frame costs at most its own size (rustka/kafka/schema/__init__.py).
"""

from __future__ import annotations

import struct
from typing import Any, Final

from .types import KafkaCodecError

#: A record chunk at least this large is handed to the transport as its own part instead
#: of being copied into the response buffer (see `encode_response_parts`).
BIG_CHUNK: Final = 4096


_unpack_h = struct.Struct(">h").unpack_from
_unpack_i = struct.Struct(">i").unpack_from
_unpack_hhi = struct.Struct(">hhi").unpack_from
_pack_h = struct.Struct(">h").pack
_pack_i = struct.Struct(">i").pack
_pack_hhi = struct.Struct(">hhi").pack
_NULL16: Final = b"\xff\xff"
_NULL32: Final = b"\xff\xff\xff\xff"


def read_uvarint(buf: memoryview | bytes, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 as used by flexible versions (at most 5 bytes, 35 bits).

    Longer encodings are refused rather than accumulated: no legitimate length needs them.
    """
    b = buf[pos]
    pos += 1
    if b < 0x80:
        return b, pos
    result = b & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise KafkaCodecError("unsigned varint longer than 5 bytes")


def write_uvarint(w: bytearray, n: int) -> None:
    """Append `n` as unsigned LEB128."""
    if n < 0:
        raise KafkaCodecError(f"cannot encode negative unsigned varint {n}")
    while n >= 0x80:
        w.append((n & 0x7F) | 0x80)
        n >>= 7
    w.append(n)


def skip_tagged_fields(buf: memoryview, pos: int) -> int:
    """Skip a tagged-field section whose tags are all unknown here; return the new offset."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise KafkaCodecError("tagged field overruns the buffer")
    return pos


def _take(buf: memoryview, pos: int, n: int, what: str) -> int:
    end = pos + n
    if end > len(buf):
        raise KafkaCodecError(f"{what} of {n} bytes exceeds the {len(buf) - pos} remaining")
    return end


def _r_str(buf: memoryview, pos: int, nullable: bool) -> tuple[str | None, int]:
    (n,) = _unpack_h(buf, pos)
    pos += 2
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise KafkaCodecError(f"invalid string length {n}")
    end = _take(buf, pos, n, "string")
    return str(buf[pos:end], "utf-8"), end


def _r_cstr(buf: memoryview, pos: int, nullable: bool) -> tuple[str | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        if nullable:
            return None, pos
        raise KafkaCodecError("null for a non-nullable compact string")
    end = _take(buf, pos, n - 1, "compact string")
    return str(buf[pos:end], "utf-8"), end


def _r_bytes(buf: memoryview, pos: int, nullable: bool) -> tuple[bytes | None, int]:
    (n,) = _unpack_i(buf, pos)
    pos += 4
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise KafkaCodecError(f"invalid bytes length {n}")
    end = _take(buf, pos, n, "bytes")
    return bytes(buf[pos:end]), end


def _r_cbytes(buf: memoryview, pos: int, nullable: bool) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        if nullable:
            return None, pos
        raise KafkaCodecError("null for non-nullable compact bytes")
    end = _take(buf, pos, n - 1, "compact bytes")
    return bytes(buf[pos:end]), end


def _r_rec(buf: memoryview, pos: int, nullable: bool) -> tuple[memoryview | None, int]:
    (n,) = _unpack_i(buf, pos)
    pos += 4
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise KafkaCodecError(f"invalid records length {n}")
    end = _take(buf, pos, n, "records")
    return buf[pos:end], end


def _r_crec(buf: memoryview, pos: int, nullable: bool) -> tuple[memoryview | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        if nullable:
            return None, pos
        raise KafkaCodecError("null for non-nullable compact records")
    end = _take(buf, pos, n - 1, "compact records")
    return buf[pos:end], end


def _r_len(buf: memoryview, pos: int, nullable: bool, minsize: int) -> tuple[int, int]:
    """Classic int32 array count, -1 for null; refuses counts the buffer cannot hold."""
    (n,) = _unpack_i(buf, pos)
    pos += 4
    if n < 0:
        if n == -1 and nullable:
            return -1, pos
        raise KafkaCodecError(f"invalid array length {n}")
    if n * minsize > len(buf) - pos:
        raise KafkaCodecError(f"array of {n} elements exceeds the {len(buf) - pos} remaining bytes")
    return n, pos


def _r_clen(buf: memoryview, pos: int, nullable: bool, minsize: int) -> tuple[int, int]:
    """Compact array count (uvarint count+1, 0 for null), same allocation guard."""
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        if nullable:
            return -1, pos
        raise KafkaCodecError("null for a non-nullable compact array")
    n -= 1
    if n * minsize > len(buf) - pos:
        raise KafkaCodecError(f"array of {n} elements exceeds the {len(buf) - pos} remaining bytes")
    return n, pos


def _w_str(w: bytearray, s: str | None, nullable: bool, label: str) -> None:
    if s is None:
        if not nullable:
            raise KafkaCodecError(f"{label} is not nullable")
        w += _NULL16
        return
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise KafkaCodecError(f"{label} is longer than 32767 bytes")
    w += _pack_h(len(b))
    w += b


def _w_cstr(w: bytearray, s: str | None, nullable: bool, label: str) -> None:
    if s is None:
        if not nullable:
            raise KafkaCodecError(f"{label} is not nullable")
        w.append(0)
        return
    b = s.encode("utf-8")
    write_uvarint(w, len(b) + 1)
    w += b


def _w_bytes(w: bytearray, b: Any, nullable: bool, label: str) -> None:
    if b is None:
        if not nullable:
            raise KafkaCodecError(f"{label} is not nullable")
        w += _NULL32
        return
    w += _pack_i(len(b))
    w += b


def _w_cbytes(w: bytearray, b: Any, nullable: bool, label: str) -> None:
    if b is None:
        if not nullable:
            raise KafkaCodecError(f"{label} is not nullable")
        w.append(0)
        return
    write_uvarint(w, len(b) + 1)
    w += b


def _nbytes(chunk: Any) -> int:
    return chunk.nbytes if type(chunk) is memoryview else len(chunk)


def _w_records(
    w: bytearray, parts: list[Any], val: Any, nullable: bool, label: str, compact: bool
) -> None:
    """Write a records field; big chunks become separate parts instead of being copied."""
    if val is None:
        if not nullable:
            raise KafkaCodecError(f"{label} is not nullable")
        if compact:
            w.append(0)
        else:
            w += _NULL32
        return
    if isinstance(val, bytes | bytearray | memoryview):  # the common single-buffer case
        size = _nbytes(val)
        if compact:
            write_uvarint(w, size + 1)
        else:
            w += _pack_i(size)
        if size >= BIG_CHUNK:
            if w:
                parts.append(bytes(w))
                del w[:]
            parts.append(val)
        else:
            w += val
        return
    total = 0
    for chunk in val:
        total += _nbytes(chunk)
    if compact:
        write_uvarint(w, total + 1)
    else:
        w += _pack_i(total)
    for chunk in val:
        if _nbytes(chunk) >= BIG_CHUNK:
            if w:
                parts.append(bytes(w))
                del w[:]
            parts.append(chunk)
        else:
            w += chunk
