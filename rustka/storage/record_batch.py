"""Kafka RecordBatch v2 (magic 2): the on-disk and on-wire unit of storage.

Segments store batches exactly as Kafka does so a later Kafka-protocol front end
can store and serve client batches untouched, rewriting only the base offset.
One CRC-32C per batch covers every record in it, which keeps the broker's
per-message Python work per *batch*: appending, scanning and validating never
look inside the records; only ``decode_records`` (clients, seed Fetch) does.

Batch layout, big-endian, 61-byte header then the records::

    offset size field
         0    8 baseOffset            int64   not covered by the CRC
         8    4 batchLength           int32   bytes after this field (size - 12)
        12    4 partitionLeaderEpoch  int32   not covered by the CRC
        16    1 magic                 int8    always 2
        17    4 crc                   uint32  CRC-32C of bytes [21, 12 + batchLength)
        21    2 attributes            int16   bits 0-2 compression, 3 timestamp type,
                                              4 transactional, 5 control
        23    4 lastOffsetDelta       int32
        27    8 baseTimestamp         int64
        35    8 maxTimestamp          int64
        43    8 producerId            int64
        51    2 producerEpoch         int16
        53    4 baseSequence          int32
        57    4 recordCount           int32
        61      records

Each record (varints are zig-zag encoded, like protobuf ``sint32``/``sint64``)::

    length varint (bytes after this field), attributes int8, timestampDelta varlong,
    offsetDelta varint, keyLength varint (-1 = null), key,
    valueLength varint (-1 = null), value, headerCount varint,
    headers: keyLength varint, key (UTF-8), valueLength varint (-1 = null), value
"""

from __future__ import annotations

import struct
import time
from collections import namedtuple
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar, dataclass_transform, get_origin

from crc32c import crc32c

from rustka.errors import CorruptBatch, InvalidBatch

__all__ = [
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "BatchHeader",
    "Record",
    "crc_ok",
    "decode_records",
    "decode_varint",
    "decode_varlong",
    "encode_batch",
    "encode_varint",
    "encode_varlong",
    "parse_header",
    "scan_batches",
    "set_base_offset",
    "validate_batches",
]

HEADER_SIZE = 61
LOG_OVERHEAD = 12
MAGIC = 2

# Offsets of the fields the module touches individually.
_MAGIC_POS = 16
_CRC_POS = 17
_ATTRIBUTES_POS = 21
# batchLength counts the bytes after itself, so a record-less header is 61 - 12 bytes.
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_COMPRESSION_MASK = 0x07

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_LENGTH = struct.Struct(">qi")
_BASE_OFFSET = struct.Struct(">q")
# The CRC-covered part of the header (attributes .. recordCount), and the prefix
# before it, packed separately because the CRC is known only once the covered bytes are.
_COVERED_HEADER = struct.Struct(">hiqqqhii")
_PREFIX_CRC = struct.Struct(">qiibI")

assert _HEADER.size == HEADER_SIZE
assert _OFFSET_LENGTH.size == LOG_OVERHEAD
assert _PREFIX_CRC.size == _ATTRIBUTES_POS
assert _ATTRIBUTES_POS + _COVERED_HEADER.size == HEADER_SIZE

_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

_NO_PRODUCER_ID = -1
_NO_PRODUCER_EPOCH = -1
_NO_SEQUENCE = -1
_NO_LEADER_EPOCH = -1

Buffer = bytes | bytearray | memoryview


# --------------------------------------------------------------------------- value classes

_T = TypeVar("_T")

# Names a plain class body always has, which must not be copied onto the tuple class.
_CLASS_BOOKKEEPING = frozenset(
    {"__annotations__", "__dict__", "__doc__", "__module__", "__qualname__", "__weakref__"}
)


def _is_class_var(hint: object) -> bool:
    if isinstance(hint, str):
        return hint.startswith(("ClassVar", "typing.ClassVar"))
    return hint is ClassVar or get_origin(hint) is ClassVar


def _same_class_eq(self: tuple[Any, ...], other: object) -> bool:
    if other.__class__ is self.__class__:
        return tuple.__eq__(self, other)  # type: ignore[arg-type]
    # Any other tuple would answer the reflected call by comparing items.
    return False if isinstance(other, tuple) else NotImplemented


def _same_class_ne(self: tuple[Any, ...], other: object) -> bool:
    if other.__class__ is self.__class__:
        return tuple.__ne__(self, other)  # type: ignore[arg-type]
    return True if isinstance(other, tuple) else NotImplemented


def _unordered(symbol: str) -> Callable[[object, object], bool]:
    """Refuse ordering outright; NotImplemented would let tuple's own ordering answer."""

    def refuse(self: object, other: object) -> bool:
        raise TypeError(
            f"{symbol!r} not supported between instances of "
            f"{type(self).__name__!r} and {type(other).__name__!r}"
        )

    return refuse


def _always_true(self: object) -> bool:
    return True


@dataclass_transform()
def value_class(cls: type[_T]) -> type[_T]:
    """Turn an annotated class body into an immutable tuple subclass with dataclass semantics.

    Records and protocol messages are built once per message on the hottest paths, and a
    frozen dataclass pays one ``object.__setattr__`` per field in ``__init__``. A tuple
    subclass is built by one C call (``tuple.__new__(cls, fields)`` on the decoders' fast
    paths) and is immutable for real, since it has no instance attributes at all. What a
    frozen dataclass gave is kept: keyword construction with defaults, the same repr,
    equality and hash only between instances of the same class, no ordering, and
    instances that are always true (a field-less tuple would otherwise be false).
    ``ClassVar`` annotations stay class attributes; methods and properties are kept.
    Shared with rustka.native.codec, whose messages are built the same way.
    """
    namespace = cls.__dict__
    hints = namespace.get("__annotations__", {})
    fields = [name for name, hint in hints.items() if not _is_class_var(hint)]
    defaults = [namespace[name] for name in fields if name in namespace]
    made: Any = namedtuple(cls.__name__, fields, defaults=defaults or None, module=cls.__module__)
    for name, attr in namespace.items():
        if name not in _CLASS_BOOKKEEPING and name not in fields:
            setattr(made, name, attr)
    made.__qualname__ = cls.__qualname__
    made.__doc__ = cls.__doc__
    made.__annotations__ = dict(hints)
    made.__eq__ = _same_class_eq
    made.__ne__ = _same_class_ne
    made.__hash__ = tuple.__hash__
    made.__lt__ = _unordered("<")
    made.__le__ = _unordered("<=")
    made.__gt__ = _unordered(">")
    made.__ge__ = _unordered(">=")
    if not fields:
        made.__bool__ = _always_true
    result: type[_T] = made
    return result


_new_tuple: Callable[..., Any] = tuple.__new__


@value_class
class Record:
    """One message; ``offset`` is filled in only by decoding because the broker assigns it."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None
    offset: int | None = None


@value_class
class BatchHeader:
    """The fixed 61-byte prefix: enough to store, index and serve a batch without its records."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def size(self) -> int:
        """Whole batch size in bytes, because batchLength excludes its own 12-byte prefix."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


# --------------------------------------------------------------------------- varints

# Most varints in a batch (lengths, small deltas, header counts) fit in one or two
# bytes; a lookup table turns their encoding into an index instead of a loop.
_SMALL_VARINT_LIMIT = 1 << 13


def _encode_zigzag_slow(value: int) -> bytes:
    """Encode an already zig-zagged non-negative value as a base-128 varint."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _zigzag64(value: int) -> int:
    return (value << 1) ^ (value >> 63)


_SMALL_VARINTS: list[bytes] = [
    _encode_zigzag_slow(_zigzag64(v)) for v in range(-_SMALL_VARINT_LIMIT, _SMALL_VARINT_LIMIT)
]


def encode_varint(value: int) -> bytes:
    """Zig-zag varint for a 32-bit signed value; out-of-range values are a caller bug."""
    if -_SMALL_VARINT_LIMIT <= value < _SMALL_VARINT_LIMIT:
        return _SMALL_VARINTS[value + _SMALL_VARINT_LIMIT]
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise InvalidBatch(f"value {value} does not fit in a 32-bit varint")
    return _encode_zigzag_slow(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """Zig-zag varlong for a 64-bit signed value (timestamp deltas)."""
    if -_SMALL_VARINT_LIMIT <= value < _SMALL_VARINT_LIMIT:
        return _SMALL_VARINTS[value + _SMALL_VARINT_LIMIT]
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise InvalidBatch(f"value {value} does not fit in a 64-bit varlong")
    return _encode_zigzag_slow(_zigzag64(value) & 0xFFFFFFFFFFFFFFFF)


def _read_varint_slow(data: bytes, i: int, end: int, max_bytes: int) -> tuple[int, int]:
    """Decode a multi-byte varint, refusing to run past ``end`` or past ``max_bytes`` bytes.

    Both limits matter: a corrupt continuation bit must not walk into the next
    record, and an unbounded varint would let garbage produce huge integers.
    """
    result = 0
    shift = 0
    for _ in range(max_bytes):
        if i >= end:
            raise CorruptBatch("varint runs past the end of the batch")
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), i
        shift += 7
    raise CorruptBatch(f"varint longer than {max_bytes} bytes")


def decode_varint(data: bytes, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """Decode a zig-zag varint (at most 5 bytes) at ``pos``; returns (value, next position)."""
    return _read_varint_slow(data, pos, len(data) if end is None else end, 5)


def decode_varlong(data: bytes, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """Decode a zig-zag varlong (at most 10 bytes) at ``pos``; returns (value, next position)."""
    return _read_varint_slow(data, pos, len(data) if end is None else end, 10)


# --------------------------------------------------------------------------- encoding


_NULL_LENGTH = _SMALL_VARINTS[_SMALL_VARINT_LIMIT - 1]
_NO_HEADERS = _SMALL_VARINTS[_SMALL_VARINT_LIMIT]

# A record stamped with the batch timestamp (the usual case) starts with attributes 0,
# timestampDelta 0 and its offsetDelta: one lookup instead of three pieces.
_RECORD_LEADS: list[bytes] = [
    b"\x00\x00" + varint for varint in _SMALL_VARINTS[_SMALL_VARINT_LIMIT:]
]


def _encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """Headers are rare, so they take the simple path; the result starts with their count."""
    parts: list[bytes] = [encode_varint(len(headers))]
    for hkey, hvalue in headers:
        hkey_bytes = hkey.encode("utf-8")
        parts.append(encode_varint(len(hkey_bytes)))
        parts.append(hkey_bytes)
        if hvalue is None:
            parts.append(_NULL_LENGTH)
        else:
            parts.append(encode_varint(len(hvalue)))
            parts.append(hvalue)
    return b"".join(parts)


def encode_batch(
    records: Sequence[Record], base_offset: int = 0, timestamp: int | None = None
) -> bytes:
    """Build one uncompressed batch; the broker rewrites ``base_offset`` on append.

    Records without a timestamp get ``timestamp`` (or the current time), so a
    producer can stamp a whole batch once. As in Kafka, the first record's
    timestamp is the base and the others are stored as (possibly negative) deltas.

    Every record is a handful of table lookups and one ``extend`` of its pieces
    into a single list joined once; each record's length is summed from its pieces
    rather than measured after joining them, so no per-record bytes are built.
    """
    count = len(records)
    if count < 1:
        raise InvalidBatch("a batch needs at least one record")
    default_ts = time.time_ns() // 1_000_000 if timestamp is None else timestamp
    first_ts = records[0].timestamp
    base_ts = default_ts if first_ts is None else first_ts
    max_ts = base_ts
    default_delta = default_ts - base_ts
    defaulted = False
    small = _SMALL_VARINTS
    limit = _SMALL_VARINT_LIMIT
    leads = _RECORD_LEADS
    # Slot 0 is the CRC-covered part of the header, filled in once max_ts is known, so
    # one join and one CRC call cover the header and the records together.
    parts: list[bytes] = [b""]
    extend = parts.extend
    for delta, (key, value, headers, ts, _) in enumerate(records):
        if ts is None:
            ts = default_delta
            defaulted = True
        else:
            if ts > max_ts:
                max_ts = ts
            ts -= base_ts
        if ts == 0 and delta < limit:
            lead = leads[delta]
        else:
            lead = b"\x00" + encode_varlong(ts) + encode_varint(delta)
        if key is None:
            key = b""
            key_length = _NULL_LENGTH
            size = len(lead) + 1
        else:
            size = len(key)
            key_length = small[size + limit] if size < limit else encode_varint(size)
            size += len(lead) + len(key_length)
        if value is None:
            value = b""
            value_length = _NULL_LENGTH
            size += 1
        else:
            vsize = len(value)
            value_length = small[vsize + limit] if vsize < limit else encode_varint(vsize)
            size += vsize + len(value_length)
        if headers:
            tail = _encode_headers(headers)
            size += len(tail)
        else:
            tail = _NO_HEADERS
            size += 1
        extend(
            (
                small[size + limit] if size < limit else encode_varint(size),
                lead,
                key_length,
                key,
                value_length,
                value,
                tail,
            )
        )
    if defaulted and default_ts > max_ts:
        max_ts = default_ts
    try:
        parts[0] = _COVERED_HEADER.pack(
            0,
            count - 1,
            base_ts,
            max_ts,
            _NO_PRODUCER_ID,
            _NO_PRODUCER_EPOCH,
            _NO_SEQUENCE,
            count,
        )
    except struct.error as exc:
        raise InvalidBatch(f"batch field out of range (offset or timestamp): {exc}") from None
    covered = b"".join(parts)
    # batchLength counts everything after itself: the rest of the prefix, then `covered`.
    batch_length = _ATTRIBUTES_POS - LOG_OVERHEAD + len(covered)
    if batch_length > _INT32_MAX:
        raise InvalidBatch(f"batch of {batch_length} bytes exceeds the 2 GiB format limit")
    try:
        prefix = _PREFIX_CRC.pack(
            base_offset, batch_length, _NO_LEADER_EPOCH, MAGIC, crc32c(covered)
        )
    except struct.error as exc:
        raise InvalidBatch(f"batch field out of range (offset or timestamp): {exc}") from None
    return prefix + covered


# --------------------------------------------------------------------------- headers


def parse_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Read the fixed header without touching the records or checking the CRC.

    Catches what can be judged from 61 bytes alone (short buffer, wrong magic,
    impossible length) so callers can decide how much more to read.
    """
    if pos < 0 or len(buf) - pos < HEADER_SIZE:
        raise InvalidBatch(
            f"batch at position {pos}: need {HEADER_SIZE} header bytes, "
            f"only {max(0, len(buf) - pos)} available"
        )
    fields = _HEADER.unpack_from(buf, pos)
    if fields[3] != MAGIC:
        raise InvalidBatch(
            f"batch at position {pos}: magic byte is {fields[3]}, only magic {MAGIC} is supported"
        )
    if fields[1] < _MIN_BATCH_LENGTH:
        raise InvalidBatch(
            f"batch at position {pos}: batch length {fields[1]} is below the minimum "
            f"{_MIN_BATCH_LENGTH}"
        )
    header: BatchHeader = _new_tuple(BatchHeader, fields)
    return header


def crc_ok(buf: Buffer, pos: int, header: BatchHeader) -> bool:
    """Check the batch's CRC-32C; the caller must know the whole batch is in ``buf``."""
    end = pos + header.size
    if len(buf) < end:
        return False
    view = memoryview(buf)
    try:
        return crc32c(view[pos + _ATTRIBUTES_POS : end]) == header.crc
    finally:
        view.release()


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Assign final offsets in place; safe because the CRC does not cover baseOffset."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


# --------------------------------------------------------------------------- validation


def validate_batches(buf: Buffer) -> list[tuple[int, BatchHeader]]:
    """Vet a client-supplied produce payload before any of it reaches the log.

    All-or-nothing: one bad batch rejects the whole payload so that a partial
    write can never happen. Work is per batch (header parse + one CRC).
    """
    total = len(buf)
    if total == 0:
        raise InvalidBatch("empty payload: at least one record batch is required")
    result: list[tuple[int, BatchHeader]] = []
    pos = 0
    view = memoryview(buf)
    try:
        while pos < total:
            index = len(result)
            where = f"batch {index} at position {pos}"
            if total - pos < HEADER_SIZE:
                if index:
                    raise InvalidBatch(
                        f"{total - pos} trailing bytes after {index} batches at position {pos}"
                    )
                raise InvalidBatch(
                    f"{where}: payload of {total - pos} bytes is shorter than the "
                    f"{HEADER_SIZE}-byte batch header"
                )
            try:
                header = parse_header(view, pos)
            except InvalidBatch as exc:
                raise InvalidBatch(f"{where}: {_strip_position(exc)}") from None
            end = pos + header.size
            if end > total:
                raise InvalidBatch(
                    f"{where}: batch length {header.batch_length} runs {end - total} bytes "
                    f"past the end of the payload"
                )
            if header.attributes & _COMPRESSION_MASK:
                raise InvalidBatch(f"{where}: compressed batches are not supported")
            if header.record_count < 1:
                raise InvalidBatch(f"{where}: record count {header.record_count} is below 1")
            if header.record_count != header.last_offset_delta + 1:
                raise InvalidBatch(
                    f"{where}: record count {header.record_count} does not match "
                    f"last offset delta {header.last_offset_delta} + 1"
                )
            if crc32c(view[pos + _ATTRIBUTES_POS : end]) != header.crc:
                raise InvalidBatch(f"{where}: CRC-32C mismatch")
            result.append((pos, header))
            pos = end
    finally:
        view.release()
    return result


def _strip_position(exc: InvalidBatch) -> str:
    """Drop parse_header's own position prefix so validate_batches names it once."""
    text = str(exc)
    _, sep, rest = text.partition(": ")
    return rest if sep else text


def scan_batches(buf: Buffer, pos: int = 0) -> tuple[list[tuple[int, BatchHeader]], int]:
    """Find the longest valid prefix of a log, for crash recovery.

    Never raises on bad data: a torn or corrupt batch just ends the scan, and the
    returned end position tells the caller where to truncate.
    """
    total = len(buf)
    result: list[tuple[int, BatchHeader]] = []
    view = memoryview(buf)
    try:
        while total - pos >= HEADER_SIZE:
            fields = _HEADER.unpack_from(view, pos)
            if fields[3] != MAGIC or fields[1] < _MIN_BATCH_LENGTH:
                break
            end = pos + fields[1] + LOG_OVERHEAD
            if end > total:
                break
            if crc32c(view[pos + _ATTRIBUTES_POS : end]) != fields[4]:
                break
            result.append((pos, _new_tuple(BatchHeader, fields)))
            pos = end
    finally:
        view.release()
    return result, pos


# --------------------------------------------------------------------------- decoding


def decode_records(
    buf: Buffer, pos: int = 0, *, verify: bool = True, min_offset: int = 0
) -> list[Record]:
    """Unpack the records of the batch at ``pos``.

    Records below ``min_offset`` are skipped without building their key/value,
    because consumers often fetch from the middle of a batch. Any structural
    inconsistency is CorruptBatch: a record must fill exactly its stated length
    and the records must fill exactly the batch.
    """
    try:
        header = parse_header(buf, pos)
    except InvalidBatch as exc:
        raise CorruptBatch(str(exc)) from None
    end_in_buf = pos + header.batch_length + LOG_OVERHEAD
    if end_in_buf > len(buf):
        raise CorruptBatch(
            f"batch at position {pos}: batch length {header.batch_length} runs past the "
            f"end of the buffer"
        )
    # One copy serves both the CRC and the records, whose keys and values are then
    # slices of plain bytes.
    covered = buf[pos + _ATTRIBUTES_POS : end_in_buf]
    if type(covered) is not bytes:
        covered = bytes(covered)
    if verify and crc32c(covered) != header.crc:
        raise CorruptBatch(
            f"batch at position {pos} (offset {header.base_offset}): CRC-32C mismatch"
        )
    # After the CRC check, so damaged attribute bits read as corruption, not as compression.
    if header.attributes & _COMPRESSION_MASK:
        raise InvalidBatch(f"batch at position {pos}: compressed batches are not supported")
    count = header.record_count
    if count < 0:
        raise CorruptBatch(f"batch at position {pos}: negative record count {count}")
    try:
        return _decode_body(covered, _RECORDS_IN_COVERED, header, min_offset)
    except IndexError:
        raise CorruptBatch(
            f"batch at position {pos}: a record runs past the end of the batch"
        ) from None


# Where the records start in the CRC-covered part of a batch.
_RECORDS_IN_COVERED = HEADER_SIZE - _ATTRIBUTES_POS


def _decode_body(data: bytes, i: int, header: BatchHeader, min_offset: int) -> list[Record]:
    """Hot loop: inline one- and two-byte varint fast paths, bounded slow decoding beyond.

    The records start at ``i`` and end with ``data``. Two bytes cover zig-zag
    values up to 8191, so record lengths, key and value lengths and offset deltas
    of ordinary records never leave the loop, and each record is built by one
    ``tuple.__new__`` call. IndexError from indexing past ``data`` is converted
    by the caller; explicit checks cover slices, which would otherwise silently
    truncate.
    """
    end = len(data)
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    skip_below = min_offset - base_offset
    # Deltas must climb strictly within [0, lastOffsetDelta]: otherwise offsets could
    # repeat or escape the range the header (and the segment index) promises.
    last_delta = header.last_offset_delta
    previous_delta = -1
    out: list[Record] = []
    append = out.append
    slow = _read_varint_slow
    new = _new_tuple
    record_class = Record
    no_headers: tuple[tuple[str, bytes | None], ...] = ()
    for _ in range(header.record_count):
        b = data[i]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            i += 1
        else:
            c = data[i + 1]
            if c < 0x80:
                length = (b & 0x7F) | (c << 7)
                length = (length >> 1) ^ -(length & 1)
                i += 2
            else:
                length, i = slow(data, i, end, 5)
        record_end = i + length
        if length < 0 or record_end > end:
            raise CorruptBatch(f"record length {length} runs past the end of the batch")
        # Skip the attributes byte: unused in v2.
        b = data[i + 1]
        if b < 0x80:
            ts_delta = (b >> 1) ^ -(b & 1)
            i += 2
        else:
            ts_delta, i = slow(data, i + 1, record_end, 10)
        b = data[i]
        if b < 0x80:
            offset_delta = (b >> 1) ^ -(b & 1)
            i += 1
        else:
            c = data[i + 1]
            if c < 0x80:
                offset_delta = (b & 0x7F) | (c << 7)
                offset_delta = (offset_delta >> 1) ^ -(offset_delta & 1)
                i += 2
            else:
                offset_delta, i = slow(data, i, record_end, 5)
        if not previous_delta < offset_delta <= last_delta:
            raise CorruptBatch(
                f"offset delta {offset_delta} is out of order (previous {previous_delta}, "
                f"last {last_delta})"
            )
        previous_delta = offset_delta
        if offset_delta < skip_below:
            if i > record_end:
                raise CorruptBatch(f"record at offset delta {offset_delta} overruns its length")
            i = record_end
            continue
        b = data[i]
        if b < 0x80:
            klen = (b >> 1) ^ -(b & 1)
            i += 1
        else:
            c = data[i + 1]
            if c < 0x80:
                klen = (b & 0x7F) | (c << 7)
                klen = (klen >> 1) ^ -(klen & 1)
                i += 2
            else:
                klen, i = slow(data, i, record_end, 5)
        if klen < 0:
            if klen != -1:
                raise CorruptBatch(f"negative key length {klen}")
            key = None
        else:
            if i + klen > record_end:
                raise CorruptBatch(f"key length {klen} runs past the end of the record")
            key = data[i : i + klen]
            i += klen
        b = data[i]
        if b < 0x80:
            vlen = (b >> 1) ^ -(b & 1)
            i += 1
        else:
            c = data[i + 1]
            if c < 0x80:
                vlen = (b & 0x7F) | (c << 7)
                vlen = (vlen >> 1) ^ -(vlen & 1)
                i += 2
            else:
                vlen, i = slow(data, i, record_end, 5)
        if vlen < 0:
            if vlen != -1:
                raise CorruptBatch(f"negative value length {vlen}")
            value = None
        else:
            if i + vlen > record_end:
                raise CorruptBatch(f"value length {vlen} runs past the end of the record")
            value = data[i : i + vlen]
            i += vlen
        if data[i] == 0:
            headers = no_headers
            i += 1
        else:
            hcount, i = slow(data, i, record_end, 5)
            i, headers = _decode_headers(data, i, record_end, hcount)
        if i != record_end:
            raise CorruptBatch(_misfit(offset_delta, record_end - i))
        append(
            new(record_class, (key, value, headers, base_ts + ts_delta, base_offset + offset_delta))
        )
    if i != end:
        raise CorruptBatch(f"{end - i} bytes left over after {header.record_count} records")
    return out


def _misfit(offset_delta: int, left: int) -> str:
    if left > 0:
        return f"record at offset delta {offset_delta} has {left} bytes left over after its fields"
    return f"record at offset delta {offset_delta} overruns its length by {-left} bytes"


def _decode_headers(
    data: bytes, i: int, record_end: int, count: int
) -> tuple[int, tuple[tuple[str, bytes | None], ...]]:
    """Headers are rare, so they take the simple bounded path."""
    if count < 0:
        raise CorruptBatch(f"negative header count {count}")
    # Each header needs at least two bytes, which bounds allocation by the record size.
    if count > (record_end - i) // 2:
        raise CorruptBatch(f"header count {count} cannot fit in the record")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        klen, i = _read_varint_slow(data, i, record_end, 5)
        if klen < 0 or i + klen > record_end:
            raise CorruptBatch(f"header key length {klen} is invalid")
        try:
            hkey = data[i : i + klen].decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptBatch("header key is not valid UTF-8") from None
        i += klen
        vlen, i = _read_varint_slow(data, i, record_end, 5)
        if vlen < 0:
            if vlen != -1:
                raise CorruptBatch(f"negative header value length {vlen}")
            hvalue = None
        else:
            if i + vlen > record_end:
                raise CorruptBatch(f"header value length {vlen} runs past the end of the record")
            hvalue = data[i : i + vlen]
            i += vlen
        headers.append((hkey, hvalue))
    return i, tuple(headers)
