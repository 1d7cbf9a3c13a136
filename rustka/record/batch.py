"""Kafka RecordBatch v2 (magic 2): the on-disk and on-wire unit of storage.

Segments store batches exactly as Kafka does so a later Kafka-protocol front end
can store and serve client batches untouched, rewriting only the base offset.
One CRC-32C per batch covers every record in it, which keeps the broker's
per-message Python work per *batch*: appending, scanning and validating never
look inside the records; only ``decode_records`` (clients, seed Fetch) does.

The header's layout and attribute bits are `rustka.record.header`'s.

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

from rustka.errors import CorruptBatch, InvalidBatch, RecordTooLarge
from rustka.record.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    codec_name,
    codec_of,
    compress,
    decompress,
)
from rustka.record.header import (
    ATTRIBUTES_AT,
    CODEC_MASK,
    CONTROL_BIT,
    COVERED_HEADER,
    CRC_AT,
    DELETE_HORIZON_BIT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAX_TIMESTAMP_AT,
    MIN_BATCH_LENGTH,
    NO_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    PREFIX_CRC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
)

__all__ = [
    "DELETE_HORIZON_BIT",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "BatchHeader",
    "CorruptMessage",
    "InvalidTimestamp",
    "Record",
    "accept_batches",
    "compress_batch",
    "crc_ok",
    "decode_records",
    "decode_varint",
    "decode_varlong",
    "delete_horizon",
    "empty_batch",
    "encode_batch",
    "encode_varint",
    "encode_varlong",
    "ms_now",
    "parse_header",
    "restamp_batches",
    "rewrite_batch",
    "scan_batches",
    "set_base_offset",
    "validate_batches",
]


def ms_now() -> int:
    """Wall-clock milliseconds, the unit of every record and batch timestamp.

    The one clock of storage and the broker core: batch timestamps, commit
    times, segment rolling and retention all read it.
    """
    return time.time_ns() // 1_000_000


_BASE_OFFSET = struct.Struct(">q")
_MAX_TS = struct.Struct(">q")
_CRC = struct.Struct(">I")

_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


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
    default_ts = ms_now() if timestamp is None else timestamp
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
        parts[0] = COVERED_HEADER.pack(
            0,
            count - 1,
            base_ts,
            max_ts,
            NO_PRODUCER_ID,
            NO_PRODUCER_EPOCH,
            NO_SEQUENCE,
            count,
        )
    except struct.error as exc:
        raise InvalidBatch(f"batch field out of range (offset or timestamp): {exc}") from None
    covered = b"".join(parts)
    # batchLength counts everything after itself: the rest of the prefix, then `covered`.
    batch_length = ATTRIBUTES_AT - LOG_OVERHEAD + len(covered)
    if batch_length > _INT32_MAX:
        raise InvalidBatch(f"batch of {batch_length} bytes exceeds the 2 GiB format limit")
    try:
        prefix = PREFIX_CRC.pack(base_offset, batch_length, NO_LEADER_EPOCH, MAGIC, crc32c(covered))
    except struct.error as exc:
        raise InvalidBatch(f"batch field out of range (offset or timestamp): {exc}") from None
    return prefix + covered


def compress_batch(batch: Buffer, codec: int | str) -> bytes:
    """Re-encode an uncompressed batch with ``codec`` (number or name), as a Kafka client would.

    Only the records area is compressed; the header keeps its fields, gains the
    codec bits and a new length and CRC. Used by the client library's optional
    compression, the tests and bench/validate.py.
    """
    code = codec_of(codec) if isinstance(codec, str) else codec
    header = parse_header(batch, 0)
    if header.attributes & CODEC_MASK:
        raise InvalidBatch("batch is already compressed")
    if header.size != len(batch):
        raise InvalidBatch(f"expected one batch of {header.size} bytes, got {len(batch)} bytes")
    if code == 0:
        return bytes(batch)
    records = compress(code, memoryview(batch)[HEADER_SIZE:])
    covered = bytearray(batch[ATTRIBUTES_AT:HEADER_SIZE])
    struct.pack_into(">h", covered, 0, (header.attributes & ~CODEC_MASK) | code)
    covered += records
    prefix = PREFIX_CRC.pack(
        header.base_offset,
        ATTRIBUTES_AT - LOG_OVERHEAD + len(covered),
        header.partition_leader_epoch,
        MAGIC,
        crc32c(covered),
    )
    return prefix + bytes(covered)


# --------------------------------------------------------------------------- rewriting


def delete_horizon(header: BatchHeader) -> int | None:
    """When the cleaner may drop this batch's tombstones, if a clean has set that time."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_BIT else None


def _record_bytes(offset_delta: int, ts_delta: int, record: Record) -> bytes:
    key, value, headers = record.key, record.value, record.headers
    parts = [b"\x00", encode_varlong(ts_delta), encode_varint(offset_delta)]
    if key is None:
        parts.append(_NULL_LENGTH)
    else:
        parts.append(encode_varint(len(key)))
        parts.append(key)
    if value is None:
        parts.append(_NULL_LENGTH)
    else:
        parts.append(encode_varint(len(value)))
        parts.append(value)
    parts.append(_encode_headers(headers) if headers else _NO_HEADERS)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def rewrite_batch(
    header: BatchHeader, records: Sequence[Record], *, horizon: int | None = None
) -> bytes:
    """The stored batch ``header`` with only ``records`` (decoded from it) left in it.

    What Kafka's cleaner writes for a batch it keeps part of
    (``MemoryRecords.buildRetainedRecordsInto``): the base offset, the last
    offset delta (so the producer's last sequence still follows from the
    header), the producer id, epoch and base sequence, the partition leader
    epoch, the timestamp type and the codec stay; each record keeps its offset
    and its timestamp. The base timestamp is the first kept record's, or
    ``horizon`` with the delete-horizon bit set (KIP-534), which is how the
    batch remembers when its tombstones may go. maxTimestamp is the kept
    records' largest timestamp, as Kafka's validator would compute it, except
    for a LogAppendTime batch, whose stamp is kept.
    """
    if not records:
        raise InvalidBatch("a rewritten batch keeps at least one record; use empty_batch")
    base_offset = header.base_offset
    base_ts = records[0].timestamp if horizon is None else horizon
    if base_ts is None:
        raise InvalidBatch("records to rewrite must carry their decoded timestamps")
    parts: list[bytes] = []
    max_ts = _NO_TIMESTAMP
    previous = -1
    for record in records:
        offset, ts = record.offset, record.timestamp
        if offset is None or ts is None:
            raise InvalidBatch("records to rewrite must carry their decoded offsets and timestamps")
        delta = offset - base_offset
        if not previous < delta <= header.last_offset_delta:
            raise InvalidBatch(
                f"offset {offset} is outside the batch {base_offset}..{header.last_offset} "
                f"or out of order"
            )
        previous = delta
        if ts > max_ts:
            max_ts = ts
        parts.append(_record_bytes(delta, ts - base_ts, record))
    body = b"".join(parts)
    codec = header.attributes & CODEC_MASK
    if codec:
        body = compress(codec, body)
    attributes = header.attributes & ~DELETE_HORIZON_BIT
    if horizon is not None:
        attributes |= DELETE_HORIZON_BIT
    if attributes & TIMESTAMP_TYPE_BIT:
        max_ts = header.max_timestamp
    covered = (
        COVERED_HEADER.pack(
            attributes,
            header.last_offset_delta,
            base_ts,
            max_ts,
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            len(records),
        )
        + body
    )
    prefix = PREFIX_CRC.pack(
        base_offset,
        ATTRIBUTES_AT - LOG_OVERHEAD + len(covered),
        header.partition_leader_epoch,
        MAGIC,
        crc32c(covered),
    )
    return prefix + covered


def empty_batch(header: BatchHeader) -> bytes:
    """A header-only batch standing for ``header`` once the cleaner removed all its records.

    Kafka keeps one (``DefaultRecordBatch.writeEmptyHeader``) where the batch
    must still be seen: the last batch of an idempotent producer (its epoch and
    last sequence, which the producer state is rebuilt from) and the last batch
    of a cleaning round (the offset the round ended at). No records, no codec,
    base timestamp -1, and the original offsets, maxTimestamp, producer fields,
    leader epoch and timestamp type.
    """
    attributes = header.attributes & (TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | CONTROL_BIT)
    covered = COVERED_HEADER.pack(
        attributes,
        header.last_offset_delta,
        _NO_TIMESTAMP,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        0,
    )
    prefix = PREFIX_CRC.pack(
        header.base_offset,
        MIN_BATCH_LENGTH,
        header.partition_leader_epoch,
        MAGIC,
        crc32c(covered),
    )
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
    fields = HEADER.unpack_from(buf, pos)
    if fields[3] != MAGIC:
        raise InvalidBatch(
            f"batch at position {pos}: magic byte is {fields[3]}, only magic {MAGIC} is supported"
        )
    if fields[1] < MIN_BATCH_LENGTH:
        raise InvalidBatch(
            f"batch at position {pos}: batch length {fields[1]} is below the minimum "
            f"{MIN_BATCH_LENGTH}"
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
        return crc32c(view[pos + ATTRIBUTES_AT : end]) == header.crc
    finally:
        view.release()


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Assign final offsets in place; safe because the CRC does not cover baseOffset."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


# --------------------------------------------------------------------------- validation

# Attribute bits a client may not set (docs/kafka.md, "Produce validation, rule by
# rule"): control batches and the delete horizon are written only by a broker,
# and the log-append-time type is the broker's to stamp.
_MAX_CODEC = 4
_UINT32_LIMIT = 1 << 32
_UINT64_LIMIT = 1 << 64
# Kafka's "no timestamp". A batch's maxTimestamp is never below it: Kafka's validator
# starts its running maximum there, so records without a timestamp leave it at -1.
_NO_TIMESTAMP = -1
# A record needs attributes, timestampDelta, offsetDelta, key and value lengths and a
# header count: six bytes at least.
_MIN_RECORD_BODY = 6
# Runs shorter than this are cheaper to parse one record at a time.
_MIN_RUN = 4


class CorruptMessage(InvalidBatch):
    """A client batch whose CRC-32C does not match its bytes, or too short to be a batch.

    Distinct from other malformed input because Kafka answers it with
    CORRUPT_MESSAGE rather than INVALID_RECORD (docs/kafka.md, error mapping). It
    is deliberately *not* a CorruptBatch: that error means the broker's own stored
    bytes are damaged and is counted and logged as storage corruption, while this
    one is the client's fault and leaves the log untouched.
    """


class InvalidTimestamp(InvalidBatch):
    """A client batch typed LogAppendTime: Kafka's INVALID_TIMESTAMP, not INVALID_RECORD."""


class _Bad(Exception):
    """A malformed record field; the caller adds which batch and record it was."""


def validate_batches(
    buf: Buffer, *, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> list[tuple[int, BatchHeader]]:
    """Vet batches that are to be stored exactly as given, record by record.

    All-or-nothing: one bad batch rejects the whole payload so that a partial
    write can never happen, and nothing stored can later fail to decode for a
    reader. Checks, in the order Kafka's log validator applies them: magic 2,
    length against the payload, CRC-32C (CorruptMessage, as is a batch too
    short for its header), attributes, record count = lastOffsetDelta + 1 >= 1,
    producer sequence, then every record: its length varint matches its bytes,
    offset deltas are exactly 0..n-1, key, value and header lengths are -1
    (where null is allowed) or fit, no varint is overlong, header keys are
    non-null UTF-8, timestamps fit in int64, and the records end exactly at the
    batch end. Compressed batches are decompressed, within
    ``max_decompressed_bytes``, to be checked, and stored compressed.

    maxTimestamp must be what Kafka's validator computes, the largest record
    timestamp and at least -1, because the time index and retention trust it.
    Client batches whose header says otherwise go through `accept_batches`,
    which rewrites it as Kafka does; this strict form is for bytes that are
    stored as they are.

    Runs of records with the same layout are checked with strided slices, which
    keeps a batch of many similar records close to C speed; any record that
    breaks the layout is parsed one field at a time. InvalidBatch names the
    batch, the record and the byte position.
    """
    data = buf if type(buf) is bytes else bytes(buf)
    return _validate(data, max_decompressed_bytes, None, None)


def accept_batches(
    buf: Buffer,
    *,
    max_batch_bytes: int | None = None,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    require_keys: bool = False,
    now: int | None = None,
    log_append_time: bool = False,
    before_max_ms: int | None = None,
    after_max_ms: int | None = None,
    codec: int | None = None,
) -> tuple[bytes, list[tuple[int, BatchHeader]]]:
    """A client's produce payload as the broker stores it: checked, maxTimestamp made true.

    Every check of `validate_batches`, plus each batch's size against
    ``max_batch_bytes`` (RecordTooLarge, before its CRC is looked at, as Kafka
    orders it). Where a batch's maxTimestamp is not its records' largest
    timestamp (at least -1), it is rewritten and the CRC recomputed, which is
    what Kafka's log validator does for a CreateTime batch: Go clients send -1
    there, and librdkafka sends 0 for records it gives no timestamp (-1).
    Returns the bytes to store (``buf`` itself unless a header changed) and the
    headers of those bytes.

    ``require_keys`` is for a compacted topic: a record without a key could
    never be compacted, so it is InvalidBatch (Kafka's LogValidator: "Compacted
    topic cannot accept message without key", INVALID_RECORD).

    The topic's other rules, as Kafka's LogValidator applies them (docs/kafka.md,
    "Topic configs"): with ``log_append_time`` every batch is stamped with the
    broker's clock ``now`` (`restamp_batches`); otherwise a record timestamp more
    than ``before_max_ms`` behind ``now`` or ``after_max_ms`` ahead of it is
    InvalidTimestamp (records without one, -1, pass). ``codec`` (a topic's
    compression.type other than producer) is the codec every batch is stored in.
    """
    data = buf if type(buf) is bytes else bytes(buf)
    stamps: list[tuple[int, int]] = []
    window = None
    if not log_append_time and (before_max_ms is not None or after_max_ms is not None):
        window = (ms_now() if now is None else now, before_max_ms, after_max_ms)
    validated = _validate(
        data, max_decompressed_bytes, max_batch_bytes, stamps, require_keys, window
    )
    recode = codec is not None and any(h.attributes & CODEC_MASK != codec for _, h in validated)
    if not stamps and not recode and not log_append_time:
        return data, validated
    if not stamps:
        stamp = (ms_now() if now is None else now) if log_append_time else None
        return restamp_batches(data, validated, codec=codec, log_append_time=stamp)
    out = bytearray(data)
    for index, max_timestamp in stamps:
        pos, header = validated[index]
        _MAX_TS.pack_into(out, pos + MAX_TIMESTAMP_AT, max_timestamp)
        end = pos + header.size
        _CRC.pack_into(out, pos + CRC_AT, crc32c(memoryview(out)[pos + ATTRIBUTES_AT : end]))
        validated[index] = (pos, _new_tuple(BatchHeader, HEADER.unpack_from(out, pos)))
    if recode or log_append_time:
        stamp = (ms_now() if now is None else now) if log_append_time else None
        return restamp_batches(bytes(out), validated, codec=codec, log_append_time=stamp)
    return bytes(out), validated


def restamp_batches(
    data: bytes,
    batches: Sequence[tuple[int, BatchHeader]],
    *,
    codec: int | None = None,
    log_append_time: int | None = None,
) -> tuple[bytes, list[tuple[int, BatchHeader]]]:
    """Validated batches as a topic stores them: in ``codec``, stamped ``log_append_time``.

    What Kafka's LogValidator does for a topic whose message.timestamp.type is
    LogAppendTime: the timestamp-type attribute bit set and maxTimestamp the
    broker's time, so every record reads as that time, with the CRC recomputed
    (the record timestamps stay as sent, as in Kafka). A ``codec`` other than a
    batch's own (a topic's compression.type) rebuilds its records area in that
    codec (0: uncompressed) and its length. Returns the bytes and their headers.
    """
    out = bytearray()
    headers: list[tuple[int, BatchHeader]] = []
    for pos, header in batches:
        end = pos + header.size
        attributes = header.attributes
        own = attributes & CODEC_MASK
        covered = bytearray(data[pos + ATTRIBUTES_AT : end])
        if codec is not None and codec != own:
            records = data[pos + HEADER_SIZE : end]
            if own:
                records = decompress(own, records, _INT32_MAX)
            body = compress(codec, records) if codec else bytes(records)
            attributes = (attributes & ~CODEC_MASK) | codec
            covered[_RECORDS_IN_COVERED:] = body
        if log_append_time is not None:
            attributes |= TIMESTAMP_TYPE_BIT
            _MAX_TS.pack_into(covered, MAX_TIMESTAMP_AT - ATTRIBUTES_AT, log_append_time)
        struct.pack_into(">h", covered, 0, attributes)
        at = len(out)
        out += PREFIX_CRC.pack(
            header.base_offset,
            ATTRIBUTES_AT - LOG_OVERHEAD + len(covered),
            header.partition_leader_epoch,
            MAGIC,
            crc32c(covered),
        )
        out += covered
        headers.append((at, _new_tuple(BatchHeader, HEADER.unpack_from(out, at))))
    return bytes(out), headers


def _validate(
    data: bytes,
    max_decompressed_bytes: int,
    max_batch_bytes: int | None,
    stamps: list[tuple[int, int]] | None,
    require_keys: bool = False,
    window: tuple[int, int | None, int | None] | None = None,
) -> list[tuple[int, BatchHeader]]:
    """The checks of `validate_batches`; a wrong maxTimestamp goes to ``stamps`` if given.

    ``stamps`` collects (batch index, true maxTimestamp) for `accept_batches`;
    without it a wrong maxTimestamp is InvalidBatch. ``window`` is (now, most
    ms before it, most ms after it) for the record timestamps.
    """
    total = len(data)
    if total == 0:
        raise InvalidBatch("empty payload: at least one record batch is required")
    result: list[tuple[int, BatchHeader]] = []
    pos = 0
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
        fields = HEADER.unpack_from(data, pos)
        if fields[3] != MAGIC:
            raise InvalidBatch(
                f"{where}: magic byte is {fields[3]}, only magic {MAGIC} is supported"
            )
        if fields[1] < MIN_BATCH_LENGTH:
            raise CorruptMessage(
                f"{where}: batch length {fields[1]} is below the minimum {MIN_BATCH_LENGTH}"
            )
        header: BatchHeader = _new_tuple(BatchHeader, fields)
        end = pos + header.size
        if end > total:
            raise InvalidBatch(
                f"{where}: batch length {header.batch_length} runs {end - total} bytes "
                f"past the end of the payload"
            )
        if max_batch_bytes is not None and header.size > max_batch_bytes:
            raise RecordTooLarge(
                f"{where} is {header.size} bytes, above the broker's limit of "
                f"{max_batch_bytes} bytes"
            )
        if crc32c(memoryview(data)[pos + ATTRIBUTES_AT : end]) != header.crc:
            raise CorruptMessage(f"{where}: CRC-32C mismatch")
        _check_header(header, where)
        codec = header.attributes & CODEC_MASK
        if codec:
            try:
                records = decompress(codec, data[pos + HEADER_SIZE : end], max_decompressed_bytes)
            except InvalidBatch as exc:
                raise InvalidBatch(f"{where}: {exc}") from None
            low, high = _check_records(
                records, 0, len(records), header.record_count, where, require_keys
            )
        else:
            low, high = _check_records(
                data, pos + HEADER_SIZE, end, header.record_count, where, require_keys
            )
        base_ts = header.base_timestamp
        if not (base_ts + low >= _INT64_MIN and base_ts + high <= _INT64_MAX):
            raise InvalidBatch(
                f"{where}: record timestamps {base_ts}{low:+d}..{base_ts}{high:+d} "
                f"do not fit in int64"
            )
        top = base_ts + high
        if window is not None:
            _check_window(data, pos, end, codec, base_ts + low, top, window, where)
        if top < _NO_TIMESTAMP:
            top = _NO_TIMESTAMP
        if header.max_timestamp != top:
            if stamps is None:
                raise InvalidBatch(
                    f"{where}: maxTimestamp {header.max_timestamp} is not the largest record "
                    f"timestamp {top}"
                )
            stamps.append((index, top))
        result.append((pos, header))
        pos = end
    return result


def _check_window(
    data: bytes,
    pos: int,
    end: int,
    codec: int,
    lowest: int,
    highest: int,
    window: tuple[int, int | None, int | None],
    where: str,
) -> None:
    """Kafka's validateTimestamp for a CreateTime batch, from its records' extreme timestamps.

    The lowest may belong to a record without a timestamp (-1), which passes; only
    then are the records decoded to find the lowest real one.
    """
    now, before, after = window
    low = now - before if before is not None else None
    high = now + after if after is not None else None
    if low is not None and lowest < low and lowest == _NO_TIMESTAMP:
        batch = data[pos:end]
        real = [r.timestamp for r in decode_records(batch, verify=False) if r.timestamp != -1]
        lowest = min(real, default=_NO_TIMESTAMP)
    bad = None
    if low is not None and lowest != _NO_TIMESTAMP and lowest < low:
        bad = lowest
    elif high is not None and highest > high:
        bad = highest
    if bad is not None:
        bounds = f"[{'-inf' if low is None else low}, {'inf' if high is None else high}]"
        raise InvalidTimestamp(
            f"{where}: timestamp {bad} is out of range; the topic takes timestamps within "
            f"{bounds} (message.timestamp.before.max.ms/after.max.ms)"
        )


def _check_header(header: BatchHeader, where: str) -> None:
    """The header checks Kafka applies to a client batch before looking at records."""
    attributes = header.attributes
    if attributes & TRANSACTIONAL_BIT and header.producer_id < 0:
        raise InvalidBatch(f"{where}: a transactional batch needs a producer id")
    if attributes & CONTROL_BIT:
        raise InvalidBatch(f"{where}: clients may not write control batches")
    if attributes & DELETE_HORIZON_BIT:
        raise InvalidBatch(f"{where}: the delete-horizon flag is set only by a broker")
    if attributes & TIMESTAMP_TYPE_BIT:
        raise InvalidTimestamp(
            f"{where}: timestamp type LogAppendTime is set only by a broker; "
            f"clients send CreateTime"
        )
    if attributes & CODEC_MASK > _MAX_CODEC:
        raise InvalidBatch(f"{where}: unknown compression codec {attributes & CODEC_MASK}")
    if header.record_count < 1:
        raise InvalidBatch(f"{where}: record count {header.record_count} is below 1")
    if header.record_count != header.last_offset_delta + 1:
        raise InvalidBatch(
            f"{where}: record count {header.record_count} does not match "
            f"last offset delta {header.last_offset_delta} + 1"
        )
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidBatch(
            f"{where}: producer id {header.producer_id} with invalid sequence "
            f"{header.base_sequence}"
        )


def _check_records(
    data: bytes, i: int, end: int, count: int, where: str, require_keys: bool = False
) -> tuple[int, int]:
    """Check ``count`` records filling ``data[i:end]``; returns (min, max) timestamp delta.

    Records in a run share the first one's key length bytes (``_run``), so
    ``require_keys`` needs checking only where a record is parsed singly.
    """
    records_start = i
    index = 0
    low = _INT64_MAX
    high = _INT64_MIN
    try:
        while index < count:
            at = i
            i, ts_delta, layout = _parse_record(data, i, end, index, require_keys)
            if ts_delta < low:
                low = ts_delta
            if ts_delta > high:
                high = ts_delta
            index += 1
            if layout is None or count - index < _MIN_RUN:
                continue
            n, run_low, run_high = _run(data, i, end, layout, index, count)
            if n:
                i += n * layout[0]
                index += n
                if run_low < low:
                    low = run_low
                if run_high > high:
                    high = run_high
    except _Bad as exc:
        raise InvalidBatch(
            f"{where}: record {index} (byte {at - records_start} of the records): {exc}"
        ) from None
    if i != end:
        raise InvalidBatch(
            f"{where}: {end - i} bytes left over after {count} records "
            f"(byte {i - records_start} of the records)"
        )
    return low, high


def _varint(data: bytes, i: int, end: int, max_bytes: int, limit: int) -> tuple[int, int]:
    """A zig-zag varint of at most ``max_bytes`` bytes whose raw value stays below ``limit``."""
    result = 0
    shift = 0
    for _ in range(max_bytes):
        if i >= end:
            raise _Bad("a varint runs past the end of the record")
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result >= limit:
                raise _Bad(f"a varint overflows {limit.bit_length() - 1} bits")
            return (result >> 1) ^ -(result & 1), i
        shift += 7
    raise _Bad(f"a varint is longer than {max_bytes} bytes")


def _parse_record(
    data: bytes, i: int, end: int, expected_delta: int, require_keys: bool = False
) -> tuple[int, int, tuple[int, ...] | None]:
    """Check one record field by field; returns (next position, timestamp delta, layout).

    The layout (record size, then the positions and widths of its varints) lets
    ``_run`` check the following records in bulk; None when the record has
    headers, whose layout is not worth matching.
    """
    start = i
    length, i = _varint(data, i, end, 5, _UINT32_LIMIT)
    if length < _MIN_RECORD_BODY:
        raise _Bad(f"record length {length} is below the minimum {_MIN_RECORD_BODY}")
    record_end = i + length
    if record_end > end:
        raise _Bad(f"record length {length} runs {record_end - end} bytes past the batch end")
    length_width = i - start
    i += 1  # attributes: unused in v2, and Kafka ignores them
    ts_at = i
    ts_delta, i = _varint(data, i, record_end, 10, _UINT64_LIMIT)
    od_at = i
    offset_delta, i = _varint(data, i, record_end, 5, _UINT32_LIMIT)
    if offset_delta != expected_delta:
        raise _Bad(f"offset delta {offset_delta}, expected {expected_delta}")
    key_at = i
    klen, i = _varint(data, i, record_end, 5, _UINT32_LIMIT)
    key_width = i - key_at
    if klen < -1:
        raise _Bad(f"key length {klen} is negative")
    if klen == -1 and require_keys:
        raise _Bad("a compacted topic cannot accept a record without a key")
    if klen > 0:
        if klen > record_end - i:
            raise _Bad(f"key length {klen} runs past the end of the record")
        i += klen
    value_at = i
    vlen, i = _varint(data, i, record_end, 5, _UINT32_LIMIT)
    value_width = i - value_at
    if vlen < -1:
        raise _Bad(f"value length {vlen} is negative")
    if vlen > 0:
        if vlen > record_end - i:
            raise _Bad(f"value length {vlen} runs past the end of the record")
        i += vlen
    headers_at = i
    hcount, i = _varint(data, i, record_end, 5, _UINT32_LIMIT)
    if hcount < 0:
        raise _Bad(f"header count {hcount} is negative")
    # Each header takes at least two bytes (two lengths), which bounds the count.
    if hcount > (record_end - i) // 2:
        raise _Bad(f"header count {hcount} cannot fit in the record")
    for h in range(hcount):
        hklen, i = _varint(data, i, record_end, 5, _UINT32_LIMIT)
        if hklen < 0:
            raise _Bad(f"header {h} key length {hklen}: header keys may not be null")
        if hklen > record_end - i:
            raise _Bad(f"header {h} key length {hklen} runs past the end of the record")
        try:
            data[i : i + hklen].decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(f"header {h} key is not valid UTF-8") from None
        i += hklen
        hvlen, i = _varint(data, i, record_end, 5, _UINT32_LIMIT)
        if hvlen < -1:
            raise _Bad(f"header {h} value length {hvlen} is negative")
        if hvlen > 0:
            if hvlen > record_end - i:
                raise _Bad(f"header {h} value length {hvlen} runs past the end of the record")
            i += hvlen
    if i != record_end:
        raise _Bad(
            f"record length {length} does not match its fields, which end "
            f"{i - record_end:+d} bytes from there"
        )
    if hcount:
        return i, ts_delta, None
    layout = (
        record_end - start,
        length_width,
        ts_at - start,
        od_at - ts_at,
        od_at - start,
        key_at - od_at,
        key_at - start,
        key_width,
        value_at - start,
        value_width,
        headers_at - start,
    )
    return i, ts_delta, layout


# A byte's zig-zag value plus 64, for one-byte varints: ranks them so min/max run in C.
_ZIGZAG_RANK = bytes(((b >> 1) ^ -(b & 1)) + 64 if b < 0x80 else 0 for b in range(256))
# 0 where a byte ends a varint (high bit clear) / continues one (high bit set), else 1.
_ENDS = bytes(0 if b < 0x80 else 1 for b in range(256))
_CONTINUES = bytes(1 if b < 0x80 else 0 for b in range(256))
# Encoded offset deltas, column by column, for the offset-delta widths of most batches.
_DELTA_COLUMNS: dict[tuple[int, int], bytes] = {}
_WIDTH_START = [0, 0, 64, 8192, 1 << 20, 1 << 27]


def _delta_column(width: int, column: int, first: int, stop: int) -> bytes:
    """Byte ``column`` of the ``width``-byte varint encodings of offset deltas first..stop-1.

    Cached per (width, column) from the first delta of that width, grown by
    doubling, so a big batch pays for its encodings once per process.
    """
    lo = _WIDTH_START[width]
    cached = _DELTA_COLUMNS.get((width, column), b"")
    if lo + len(cached) < stop:
        grown = min(_WIDTH_START[width + 1], max(stop, lo + 2 * len(cached), lo + 4096))
        cached = _delta_bytes(width, column, lo, grown)
        _DELTA_COLUMNS[(width, column)] = cached
    return cached[first - lo : stop - lo]


def _delta_bytes(width: int, column: int, first: int, stop: int) -> bytes:
    shift = 7 * column
    more = 0x80 if column < width - 1 else 0
    return bytes((((2 * d) >> shift) & 0x7F) | more for d in range(first, stop))


#: Up to this many bytes, min() and max() beat the searches below, whose cost is
#: about 200 membership tests whatever the length (~85 us: most of the broker's CPU
#: for a batch of a few dozen records).
_RANK_SCAN_MAX = 1024


def _rank_range(ranks: bytes) -> tuple[int, int]:
    """(min, max) of a bytes object's values using C-speed searches, not a Python loop."""
    if len(ranks) <= _RANK_SCAN_MAX:
        return min(ranks), max(ranks)
    first = ranks[0]
    if not ranks.lstrip(ranks[:1]):
        return first, first
    low = next(r for r in range(first + 1) if bytes((r,)) in ranks)
    high = next(r for r in range(255, first - 1, -1) if bytes((r,)) in ranks)
    return low, high


def _leading(column: bytes, expected: bytes) -> int:
    """How many leading bytes of ``column`` equal ``expected`` (same length)."""
    if column == expected:
        return len(column)
    diff = int.from_bytes(column, "big") ^ int.from_bytes(expected, "big")
    return len(column) - (diff.bit_length() + 7) // 8


def _leading_zeros(column: bytes) -> int:
    return len(column) - len(column.lstrip(b"\x00"))


def _run(
    data: bytes, i: int, end: int, layout: tuple[int, ...], index: int, count: int
) -> tuple[int, int, int]:
    """How many records from ``i`` share ``layout`` exactly; with their timestamp deltas' range.

    Records of one layout have the same size and the same varint widths, so
    byte k of every record sits ``size`` bytes apart: one strided slice per
    structural byte checks them all. Equal length, key-length, value-length and
    header-count bytes mean equal values, which the first record proved valid;
    offset deltas are compared with their expected encodings; timestamp deltas
    only need the right continuation bits. Keys and values are opaque.
    """
    (size, lw, ts_at, tw, od_at, ow, key_at, kw, value_at, vw, headers_at) = layout
    if ow >= len(_WIDTH_START) - 1 or index < _WIDTH_START[ow]:
        # Five-byte offset deltas, or a non-canonical (padded) encoding: parse singly.
        return 0, 0, 0
    n = min(count - index, (end - i) // size, _WIDTH_START[ow + 1] - index)
    if n < _MIN_RUN:
        return 0, 0, 0
    fixed = [*range(lw), *range(key_at, key_at + kw), *range(value_at, value_at + vw), headers_at]
    for p in fixed:
        stop = i + n * size
        column = data[i + p : stop : size]
        want = data[i - size + p]
        n = len(column) - len(column.lstrip(bytes((want,))))
        if n < _MIN_RUN:
            return 0, 0, 0
    for k in range(ow):
        stop = i + n * size
        column = data[i + od_at + k : stop : size]
        n = _leading(column, _delta_column(ow, k, index, index + len(column)))
        if n < _MIN_RUN:
            return 0, 0, 0
    for k in range(tw):
        stop = i + n * size
        column = data[i + ts_at + k : stop : size].translate(_ENDS if k == tw - 1 else _CONTINUES)
        n = _leading_zeros(column)
        if n < _MIN_RUN:
            return 0, 0, 0
    stop = i + n * size
    if tw == 1:
        low, high = _rank_range(data[i + ts_at : stop : size].translate(_ZIGZAG_RANK))
        return n, low - 64, high - 64
    columns = [data[i + ts_at + k : stop : size] for k in range(tw)]
    deltas = []
    for parts in zip(*columns, strict=True):
        raw = 0
        for k, b in enumerate(parts):
            raw |= (b & 0x7F) << (7 * k)
        if raw >= _UINT64_LIMIT:
            return 0, 0, 0
        deltas.append((raw >> 1) ^ -(raw & 1))
    return n, min(deltas), max(deltas)


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
            fields = HEADER.unpack_from(view, pos)
            if fields[3] != MAGIC or fields[1] < MIN_BATCH_LENGTH:
                break
            end = pos + fields[1] + LOG_OVERHEAD
            if end > total:
                break
            if crc32c(view[pos + ATTRIBUTES_AT : end]) != fields[4]:
                break
            result.append((pos, _new_tuple(BatchHeader, fields)))
            pos = end
    finally:
        view.release()
    return result, pos


# --------------------------------------------------------------------------- decoding


def decode_records(
    buf: Buffer,
    pos: int = 0,
    *,
    verify: bool = True,
    min_offset: int = 0,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[Record]:
    """Unpack the records of the batch at ``pos``, decompressing them if the client did.

    Records below ``min_offset`` are skipped without building their key/value,
    because consumers often fetch from the middle of a batch. Any structural
    inconsistency is CorruptBatch: a record must fill exactly its stated length
    and the records must fill exactly the batch; so is a compressed block that
    cannot be decompressed within ``max_decompressed_bytes`` (stored batches
    passed ``validate_batches``, so this means damage).
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
    covered = buf[pos + ATTRIBUTES_AT : end_in_buf]
    if type(covered) is not bytes:
        covered = bytes(covered)
    if verify and crc32c(covered) != header.crc:
        raise CorruptBatch(
            f"batch at position {pos} (offset {header.base_offset}): CRC-32C mismatch"
        )
    count = header.record_count
    if count < 0:
        raise CorruptBatch(f"batch at position {pos}: negative record count {count}")
    # After the CRC check, so damaged attribute bits read as corruption, not as compression.
    codec = header.attributes & CODEC_MASK
    try:
        if codec:
            try:
                records = decompress(codec, covered[_RECORDS_IN_COVERED:], max_decompressed_bytes)
            except InvalidBatch as exc:
                raise CorruptBatch(
                    f"batch at position {pos} ({codec_name(codec)}): {exc}"
                ) from None
            return _decode_body(records, 0, header, min_offset)
        return _decode_body(covered, _RECORDS_IN_COVERED, header, min_offset)
    except IndexError:
        raise CorruptBatch(
            f"batch at position {pos}: a record runs past the end of the batch"
        ) from None


# Where the records start in the CRC-covered part of a batch.
_RECORDS_IN_COVERED = HEADER_SIZE - ATTRIBUTES_AT


def record_prefixes(
    buf: Buffer,
    pos: int,
    header: BatchHeader,
    width: int,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of each record of an accepted batch, each cut to its first ``width``
    bytes (None when null): what a check of a record's framing reads, without building
    the records. Only for batches `accept_batches` passed: lengths are trusted."""
    end_in_buf = pos + header.batch_length + LOG_OVERHEAD
    data = buf[pos + HEADER_SIZE : end_in_buf]
    if type(data) is not bytes:
        data = bytes(data)
    codec = header.attributes & CODEC_MASK
    if codec:
        data = decompress(codec, data, max_decompressed_bytes)
    out: list[tuple[bytes | None, bytes | None]] = []
    append = out.append
    slow = _read_varint_slow
    end = len(data)
    i = 0
    for _ in range(header.record_count):
        b = data[i]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            i += 1
        else:
            length, i = slow(data, i, end, 5)
        record_end = i + length
        i += 1  # the attributes byte
        while data[i] >= 0x80:  # the timestamp and offset deltas, skipped unread
            i += 1
        i += 1
        while data[i] >= 0x80:
            i += 1
        i += 1
        b = data[i]
        if b < 0x80:
            klen = (b >> 1) ^ -(b & 1)
            i += 1
        else:
            klen, i = slow(data, i, record_end, 5)
        key = None if klen < 0 else data[i : i + (klen if klen < width else width)]
        if klen > 0:
            i += klen
        b = data[i]
        if b < 0x80:
            vlen = (b >> 1) ^ -(b & 1)
            i += 1
        else:
            vlen, i = slow(data, i, record_end, 5)
        append((key, None if vlen < 0 else data[i : i + (vlen if vlen < width else width)]))
        i = record_end
    return out


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
