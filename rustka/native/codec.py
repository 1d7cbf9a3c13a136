"""The native wire codec: bytes in, immutable message values out, and back.

Pure functions with no I/O and no reactor, in the spirit of h11: the server,
the client, the CLI and the tests all share one definition of every message, so
a framing or field-order mistake cannot exist on one side only. A payload here
is one frame *without* its 4-byte length prefix (Int32StringReceiver strips and
adds that).

Every length and count read from the wire is checked against the bytes that
remain *before* anything is allocated, so a hostile frame costs at most its own
size. Malformed input always raises :class:`~rustka.errors.InvalidRequest` with
a message naming the problem; values that do not fit their wire type raise
``ValueError`` on encode, because that is a programming error, not bad input.

The byte layout is specified in ``docs/protocol.md``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, ClassVar, TypeAlias

from rustka.errors import InvalidRequest, OffsetOutOfRange, RustkaError
from rustka.storage.record_batch import value_class

__all__ = [
    "EXTENSION_OPS",
    "MIN_PROTOCOL_VERSION",
    "PROTOCOL_VERSION",
    "SEED_OPS",
    "AlterTopic",
    "BatchProduced",
    "Batches",
    "Commit",
    "CommitOk",
    "CreateTopic",
    "DescribeGroup",
    "Error",
    "Failure",
    "Fetch",
    "FetchBatch",
    "FetchedRecord",
    "GroupOffset",
    "GroupOffsets",
    "Groups",
    "Hello",
    "ListGroups",
    "Metadata",
    "MetadataResult",
    "NotFound",
    "Offset",
    "OffsetFetch",
    "OutOfRange",
    "PartitionMetadata",
    "Produce",
    "ProduceBatch",
    "Produced",
    "Request",
    "Response",
    "TopicInfo",
    "TopicMetadata",
    "Welcome",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "error_response",
    "request_parts",
    "response_parts",
]

PROTOCOL_VERSION = 2
"""Version 1 is the seed protocol (ops 1-4); version 2 adds the extensions (ops 5-12)."""

MIN_PROTOCOL_VERSION = 1

SEED_OPS: tuple[int, ...] = (1, 2, 3, 4)
EXTENSION_OPS: tuple[int, ...] = (5, 6, 7, 8, 9, 10, 11, 12)

Buffer: TypeAlias = bytes | bytearray | memoryview

_U8_MAX = 0xFF
_U16_MAX = 0xFFFF
_U32_MAX = 0xFFFF_FFFF
_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_U32_U64 = struct.Struct(">IQ")
_U64_U64 = struct.Struct(">QQ")
_U32_U64_U64 = struct.Struct(">IQQ")
_U64_U64_U64 = struct.Struct(">QQQ")
_U32_U32 = struct.Struct(">II")

_u32_from = _U32.unpack_from
_u64_from = _U64.unpack_from
_u32_u64_from = _U32_U64.unpack_from


# --------------------------------------------------------------------------- requests


@value_class
class Produce:
    """Op 1: append one record; the broker picks the partition from the key."""

    OP: ClassVar[int] = 1
    topic: str
    key: bytes
    value: bytes


@value_class
class Fetch:
    """Op 2: read the single record at ``offset``."""

    OP: ClassVar[int] = 2
    topic: str
    partition: int
    offset: int


@value_class
class Commit:
    """Op 3: remember ``offset`` as the next offset ``group`` will read."""

    OP: ClassVar[int] = 3
    group: str
    topic: str
    partition: int
    offset: int


@value_class
class OffsetFetch:
    """Op 4: ask for a group's committed offset."""

    OP: ClassVar[int] = 4
    group: str
    topic: str
    partition: int


@value_class
class Hello:
    """Op 5: version handshake; optional, and it changes nothing about the connection."""

    OP: ClassVar[int] = 5
    version: int
    client: str


@value_class
class ProduceBatch:
    """Op 6: append client-built RecordBatch v2 bytes to one partition."""

    OP: ClassVar[int] = 6
    topic: str
    partition: int
    batches: Buffer


@value_class
class FetchBatch:
    """Op 7: read whole stored batches from ``offset``, long-polling at the end of the log."""

    OP: ClassVar[int] = 7
    topic: str
    partition: int
    offset: int
    max_bytes: int
    max_wait_ms: int


@value_class
class Metadata:
    """Op 8: partition bounds of the named topics (all topics when ``topics`` is empty)."""

    OP: ClassVar[int] = 8
    topics: tuple[str, ...] = ()


@value_class
class CreateTopic:
    """Op 9: create a topic with an explicit partition count."""

    OP: ClassVar[int] = 9
    topic: str
    partitions: int


@value_class
class AlterTopic:
    """Op 10: raise a topic's partition count (keys may move, as in Kafka)."""

    OP: ClassVar[int] = 10
    topic: str
    partitions: int


@value_class
class ListGroups:
    """Op 11: names of every group with at least one committed offset."""

    OP: ClassVar[int] = 11


@value_class
class DescribeGroup:
    """Op 12: a group's committed offsets next to the partition bounds, for lag."""

    OP: ClassVar[int] = 12
    group: str


Request: TypeAlias = (
    Produce
    | Fetch
    | Commit
    | OffsetFetch
    | Hello
    | ProduceBatch
    | FetchBatch
    | Metadata
    | CreateTopic
    | AlterTopic
    | ListGroups
    | DescribeGroup
)


# --------------------------------------------------------------------------- responses


@value_class
class Produced:
    """Tag 1: where a Produce landed."""

    TAG: ClassVar[int] = 1
    partition: int
    offset: int


@value_class
class FetchedRecord:
    """Tag 2 (``Record`` in PROTOCOL.md): the answer to a Fetch that found data."""

    TAG: ClassVar[int] = 2
    offset: int
    key: bytes
    value: bytes


@value_class
class NotFound:
    """Tag 3: Fetch at/after the end, or OffsetFetch with no commit."""

    TAG: ClassVar[int] = 3


@value_class
class Error:
    """Tag 4: any failure of ops 1-4, and any frame that could not be parsed."""

    TAG: ClassVar[int] = 4
    message: str


@value_class
class CommitOk:
    """Tag 5: the commit is durable."""

    TAG: ClassVar[int] = 5


@value_class
class Offset:
    """Tag 6: a group's committed offset."""

    TAG: ClassVar[int] = 6
    offset: int


@value_class
class Welcome:
    """Tag 7: the broker's answer to Hello."""

    TAG: ClassVar[int] = 7
    version: int
    broker: str
    ops: tuple[int, ...]


@value_class
class BatchProduced:
    """Tag 8: the offsets a ProduceBatch was given (inclusive range)."""

    TAG: ClassVar[int] = 8
    partition: int
    base_offset: int
    last_offset: int


@value_class
class Batches:
    """Tag 9: stored batches, byte for byte; may be empty at the high watermark."""

    TAG: ClassVar[int] = 9
    log_start: int
    high_watermark: int
    batches: Buffer


@value_class
class PartitionMetadata:
    """The bounds of one partition; its index is its position in ``TopicMetadata.partitions``."""

    log_start: int
    high_watermark: int


@value_class
class TopicMetadata:
    name: str
    partitions: tuple[PartitionMetadata, ...]


@value_class
class MetadataResult:
    """Tag 10: the answer to Metadata."""

    TAG: ClassVar[int] = 10
    topics: tuple[TopicMetadata, ...]


@value_class
class TopicInfo:
    """Tag 11: a topic's partition count after CreateTopic or AlterTopic."""

    TAG: ClassVar[int] = 11
    topic: str
    partitions: int


@value_class
class Groups:
    """Tag 12: the answer to ListGroups."""

    TAG: ClassVar[int] = 12
    groups: tuple[str, ...]


@value_class
class GroupOffset:
    """One committed offset with the partition's bounds, so lag needs no second request."""

    topic: str
    partition: int
    committed: int
    log_start: int
    high_watermark: int

    @property
    def lag(self) -> int:
        """Records the group has yet to read; never negative even if the log was rewound."""
        return max(0, self.high_watermark - max(self.committed, self.log_start))


@value_class
class GroupOffsets:
    """Tag 13: the answer to DescribeGroup."""

    TAG: ClassVar[int] = 13
    group: str
    offsets: tuple[GroupOffset, ...]


@value_class
class Failure:
    """Tag 14: a failed extension op, with the machine-readable code from rustka.errors."""

    TAG: ClassVar[int] = 14
    code: int
    message: str


@value_class
class OutOfRange:
    """Tag 15: FetchBatch outside [log_start, high_watermark]; the bounds allow a reset."""

    TAG: ClassVar[int] = 15
    offset: int
    log_start: int
    high_watermark: int


Response: TypeAlias = (
    Produced
    | FetchedRecord
    | NotFound
    | Error
    | CommitOk
    | Offset
    | Welcome
    | BatchProduced
    | Batches
    | MetadataResult
    | TopicInfo
    | Groups
    | GroupOffsets
    | Failure
    | OutOfRange
)


# --------------------------------------------------------------------------- decoding


class _Reader:
    """A bounds-checked cursor that turns every shortfall into a precise InvalidRequest.

    Hot messages have straight-line fast paths; when one of those sees anything
    unusual it re-parses through this class purely to produce the right error.
    """

    __slots__ = ("buf", "end", "pos", "what")

    def __init__(self, buf: bytes, what: str) -> None:
        self.buf = buf
        self.pos = 1
        self.end = len(buf)
        self.what = what

    def take(self, size: int, field: str) -> int:
        pos = self.pos
        if size > self.end - pos:
            raise InvalidRequest(
                f"truncated field {field!r} in {self.what}: needs {size} bytes at "
                f"position {pos}, only {self.end - pos} remain"
            )
        self.pos = pos + size
        return pos

    def u16(self, field: str) -> int:
        value: int = _U16.unpack_from(self.buf, self.take(2, field))[0]
        return value

    def u32(self, field: str) -> int:
        value: int = _u32_from(self.buf, self.take(4, field))[0]
        return value

    def u64(self, field: str) -> int:
        value: int = _u64_from(self.buf, self.take(8, field))[0]
        return value

    def blob(self, field: str) -> bytes:
        size = self.u32(field)
        pos = self.take(size, field)
        return self.buf[pos : pos + size]

    def text(self, field: str) -> str:
        raw = self.blob(field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidRequest(
                f"invalid UTF-8 in field {field!r} of {self.what} at byte "
                f"{self.pos - len(raw) + exc.start}"
            ) from None

    def count(self, field: str, min_item_size: int) -> int:
        """Read a u32 count, refusing it unless the smallest possible items could fit."""
        count = self.u32(field)
        remaining = self.end - self.pos
        if count * min_item_size > remaining:
            raise InvalidRequest(
                f"count too large in field {field!r} of {self.what}: {count} entries need "
                f"at least {count * min_item_size} bytes, only {remaining} remain"
            )
        return count

    def finish(self) -> None:
        trailing = self.end - self.pos
        if trailing:
            noun = "byte" if trailing == 1 else "bytes"
            raise InvalidRequest(f"{self.what} has {trailing} trailing {noun} after its last field")


def _read_produce(r: _Reader) -> Produce:
    return Produce(r.text("topic"), r.blob("key"), r.blob("value"))


def _read_fetch(r: _Reader) -> Fetch:
    return Fetch(r.text("topic"), r.u32("partition"), r.u64("offset"))


def _read_commit(r: _Reader) -> Commit:
    return Commit(r.text("group"), r.text("topic"), r.u32("partition"), r.u64("offset"))


def _read_offset_fetch(r: _Reader) -> OffsetFetch:
    return OffsetFetch(r.text("group"), r.text("topic"), r.u32("partition"))


def _read_hello(r: _Reader) -> Hello:
    return Hello(r.u32("version"), r.text("client"))


def _read_produce_batch(r: _Reader) -> ProduceBatch:
    return ProduceBatch(r.text("topic"), r.u32("partition"), r.blob("batches"))


def _read_fetch_batch(r: _Reader) -> FetchBatch:
    return FetchBatch(
        r.text("topic"),
        r.u32("partition"),
        r.u64("offset"),
        r.u32("max_bytes"),
        r.u32("max_wait_ms"),
    )


def _read_metadata(r: _Reader) -> Metadata:
    count = r.count("topics", 4)
    return Metadata(tuple(r.text(f"topics[{i}]") for i in range(count)))


def _read_create_topic(r: _Reader) -> CreateTopic:
    return CreateTopic(r.text("topic"), r.u32("partitions"))


def _read_alter_topic(r: _Reader) -> AlterTopic:
    return AlterTopic(r.text("topic"), r.u32("partitions"))


def _read_list_groups(r: _Reader) -> ListGroups:
    return ListGroups()


def _read_describe_group(r: _Reader) -> DescribeGroup:
    return DescribeGroup(r.text("group"))


def _read_produced(r: _Reader) -> Produced:
    return Produced(r.u32("partition"), r.u64("offset"))


def _read_fetched_record(r: _Reader) -> FetchedRecord:
    return FetchedRecord(r.u64("offset"), r.blob("key"), r.blob("value"))


def _read_not_found(r: _Reader) -> NotFound:
    return NotFound()


def _read_error(r: _Reader) -> Error:
    return Error(r.text("message"))


def _read_commit_ok(r: _Reader) -> CommitOk:
    return CommitOk()


def _read_offset(r: _Reader) -> Offset:
    return Offset(r.u64("offset"))


def _read_welcome(r: _Reader) -> Welcome:
    version = r.u32("version")
    broker = r.text("broker")
    count = r.count("ops", 1)
    pos = r.take(count, "ops")
    return Welcome(version, broker, tuple(r.buf[pos : pos + count]))


def _read_batch_produced(r: _Reader) -> BatchProduced:
    return BatchProduced(r.u32("partition"), r.u64("base_offset"), r.u64("last_offset"))


def _read_batches(r: _Reader) -> Batches:
    return Batches(r.u64("log_start"), r.u64("high_watermark"), r.blob("batches"))


def _read_metadata_result(r: _Reader) -> MetadataResult:
    topics: list[TopicMetadata] = []
    # The smallest topic entry is an empty name plus a zero partition count.
    for i in range(r.count("topics", 8)):
        name = r.text(f"topics[{i}].name")
        count = r.count(f"topics[{i}].partitions", 16)
        parts = tuple(
            PartitionMetadata(*_U64_U64.unpack_from(r.buf, r.take(16, f"topics[{i}].partitions")))
            for _ in range(count)
        )
        topics.append(TopicMetadata(name, parts))
    return MetadataResult(tuple(topics))


def _read_topic_info(r: _Reader) -> TopicInfo:
    return TopicInfo(r.text("topic"), r.u32("partitions"))


def _read_groups(r: _Reader) -> Groups:
    count = r.count("groups", 4)
    return Groups(tuple(r.text(f"groups[{i}]") for i in range(count)))


def _read_group_offsets(r: _Reader) -> GroupOffsets:
    group = r.text("group")
    # topic length prefix + partition + three u64s.
    count = r.count("offsets", 4 + 4 + 24)
    entries: list[GroupOffset] = []
    for i in range(count):
        topic = r.text(f"offsets[{i}].topic")
        values = _U32_U64_U64.unpack_from(r.buf, r.take(20, f"offsets[{i}].partition"))
        high_watermark = r.u64(f"offsets[{i}].high_watermark")
        entries.append(GroupOffset(topic, values[0], values[1], values[2], high_watermark))
    return GroupOffsets(group, tuple(entries))


def _read_failure(r: _Reader) -> Failure:
    return Failure(r.u16("code"), r.text("message"))


def _read_out_of_range(r: _Reader) -> OutOfRange:
    return OutOfRange(r.u64("offset"), r.u64("log_start"), r.u64("high_watermark"))


def _slow(payload: bytes, what: str, read: Callable[[_Reader], object]) -> object:
    reader = _Reader(payload, what)
    message = read(reader)
    reader.finish()
    return message


# The fast paths below build messages with one ``tuple.__new__`` call (messages are
# tuple subclasses, see rustka.storage.record_batch.value_class), skipping the Python-level
# ``__new__`` that keyword construction needs.
_new: Callable[..., Any] = tuple.__new__


def _fast_produce(p: bytes) -> Produce | None:
    """Three unpacks and three slices; None sends the caller to the error-reporting path."""
    try:
        (size,) = _u32_from(p, 1)
        a = 5 + size
        (size,) = _u32_from(p, a)
        b = a + 4 + size
        (size,) = _u32_from(p, b)
        c = b + 4 + size
        if c == len(p):
            message: Produce = _new(Produce, (p[5:a].decode("utf-8"), p[a + 4 : b], p[b + 4 : c]))
            return message
    except (struct.error, UnicodeDecodeError):
        pass
    return None


def _fast_fetch(p: bytes) -> Fetch | None:
    try:
        (size,) = _u32_from(p, 1)
        a = 5 + size
        partition, offset = _u32_u64_from(p, a)
        if a + 12 == len(p):
            message: Fetch = _new(Fetch, (p[5:a].decode("utf-8"), partition, offset))
            return message
    except (struct.error, UnicodeDecodeError):
        pass
    return None


def _fast_produce_batch(p: bytes) -> ProduceBatch | None:
    try:
        (size,) = _u32_from(p, 1)
        a = 5 + size
        partition, size = _U32_U32.unpack_from(p, a)
        if a + 8 + size == len(p):
            message: ProduceBatch = _new(
                ProduceBatch, (p[5:a].decode("utf-8"), partition, p[a + 8 :])
            )
            return message
    except (struct.error, UnicodeDecodeError):
        pass
    return None


def _fast_fetch_batch(p: bytes) -> FetchBatch | None:
    try:
        (size,) = _u32_from(p, 1)
        a = 5 + size
        fields = _FETCH_BATCH_TAIL.unpack_from(p, a)
        if a + _FETCH_BATCH_TAIL.size == len(p):
            message: FetchBatch = _new(FetchBatch, (p[5:a].decode("utf-8"), *fields))
            return message
    except (struct.error, UnicodeDecodeError):
        pass
    return None


def _fast_produced(p: bytes) -> Produced | None:
    if len(p) == 13:
        message: Produced = _new(Produced, _u32_u64_from(p, 1))
        return message
    return None


def _fast_fetched_record(p: bytes) -> FetchedRecord | None:
    try:
        offset, size = _U64_U32.unpack_from(p, 1)
        a = 13 + size
        (size,) = _u32_from(p, a)
        b = a + 4 + size
        if b == len(p):
            message: FetchedRecord = _new(FetchedRecord, (offset, p[13:a], p[a + 4 : b]))
            return message
    except struct.error:
        pass
    return None


def _fast_batch_produced(p: bytes) -> BatchProduced | None:
    if len(p) == 21:
        message: BatchProduced = _new(BatchProduced, _U32_U64_U64.unpack_from(p, 1))
        return message
    return None


def _fast_batches(p: bytes) -> Batches | None:
    try:
        log_start, high_watermark, size = _U64_U64_U32.unpack_from(p, 1)
        if 21 + size == len(p):
            message: Batches = _new(Batches, (log_start, high_watermark, p[21:]))
            return message
    except struct.error:
        pass
    return None


_FETCH_BATCH_TAIL = struct.Struct(">IQII")
_U64_U32 = struct.Struct(">QI")
_U64_U64_U32 = struct.Struct(">QQI")

_Fast = Callable[[bytes], object]

_REQUESTS: dict[int, tuple[str, Callable[[_Reader], object], _Fast | None]] = {
    1: ("Produce request", _read_produce, _fast_produce),
    2: ("Fetch request", _read_fetch, _fast_fetch),
    3: ("Commit request", _read_commit, None),
    4: ("OffsetFetch request", _read_offset_fetch, None),
    5: ("Hello request", _read_hello, None),
    6: ("ProduceBatch request", _read_produce_batch, _fast_produce_batch),
    7: ("FetchBatch request", _read_fetch_batch, _fast_fetch_batch),
    8: ("Metadata request", _read_metadata, None),
    9: ("CreateTopic request", _read_create_topic, None),
    10: ("AlterTopic request", _read_alter_topic, None),
    11: ("ListGroups request", _read_list_groups, None),
    12: ("DescribeGroup request", _read_describe_group, None),
}

_RESPONSES: dict[int, tuple[str, Callable[[_Reader], object], _Fast | None]] = {
    1: ("Produced response", _read_produced, _fast_produced),
    2: ("Record response", _read_fetched_record, _fast_fetched_record),
    3: ("NotFound response", _read_not_found, None),
    4: ("Error response", _read_error, None),
    5: ("CommitOk response", _read_commit_ok, None),
    6: ("Offset response", _read_offset, None),
    7: ("Welcome response", _read_welcome, None),
    8: ("BatchProduced response", _read_batch_produced, _fast_batch_produced),
    9: ("Batches response", _read_batches, _fast_batches),
    10: ("MetadataResult response", _read_metadata_result, None),
    11: ("TopicInfo response", _read_topic_info, None),
    12: ("Groups response", _read_groups, None),
    13: ("GroupOffsets response", _read_group_offsets, None),
    14: ("Failure response", _read_failure, None),
    15: ("OutOfRange response", _read_out_of_range, None),
}


def _decode_slow(
    payload: bytes,
    table: dict[int, tuple[str, Callable[[_Reader], object], _Fast | None]],
    kind: str,
) -> object:
    """Everything but a fast path's success: empty frames, unknown codes, the reader."""
    if not payload:
        raise InvalidRequest(f"empty frame: a {kind} needs at least its {_CODE_NAME[kind]} byte")
    code = payload[0]
    entry = table.get(code)
    if entry is None:
        raise InvalidRequest(f"unknown {_CODE_NAME[kind]} {code}")
    what, read, _ = entry
    return _slow(payload, what, read)


_CODE_NAME = {"request": "op", "response": "tag"}

# Code -> fast path, for the messages that have one; decode_request and decode_response
# try it before anything else, and fall back to _decode_slow for errors and the rest.
_FAST_REQUESTS: dict[int, _Fast] = {
    code: fast for code, (_, _, fast) in _REQUESTS.items() if fast is not None
}
_FAST_RESPONSES: dict[int, _Fast] = {
    code: fast for code, (_, _, fast) in _RESPONSES.items() if fast is not None
}


def decode_request(payload: Buffer) -> Request:
    """Parse one request frame payload (op byte first), or raise InvalidRequest saying why."""
    if type(payload) is not bytes:
        payload = bytes(payload)
    if payload:
        fast = _FAST_REQUESTS.get(payload[0])
        if fast is not None:
            message = fast(payload)
            if message is not None:
                return message  # type: ignore[return-value]
    return _decode_slow(payload, _REQUESTS, "request")  # type: ignore[return-value]


def decode_response(payload: Buffer) -> Response:
    """Parse one response frame payload (tag byte first), or raise InvalidRequest saying why."""
    if type(payload) is not bytes:
        payload = bytes(payload)
    if payload:
        fast = _FAST_RESPONSES.get(payload[0])
        if fast is not None:
            message = fast(payload)
            if message is not None:
                return message  # type: ignore[return-value]
    return _decode_slow(payload, _RESPONSES, "response")  # type: ignore[return-value]


# --------------------------------------------------------------------------- encoding


def _u16(value: int, field: str) -> bytes:
    try:
        return _U16.pack(value)
    except struct.error:
        raise ValueError(
            f"field {field!r} must be an integer in 0..{_U16_MAX}, got {value!r}"
        ) from None


def _u32(value: int, field: str) -> bytes:
    try:
        return _U32.pack(value)
    except struct.error:
        raise ValueError(
            f"field {field!r} must be an integer in 0..{_U32_MAX}, got {value!r}"
        ) from None


def _u64(value: int, field: str) -> bytes:
    try:
        return _U64.pack(value)
    except struct.error:
        raise ValueError(
            f"field {field!r} must be an integer in 0..{_U64_MAX}, got {value!r}"
        ) from None


def _blob(out: list[bytes], data: Buffer, field: str) -> None:
    if type(data) is not bytes:
        if not isinstance(data, (bytearray, memoryview)):
            raise TypeError(f"field {field!r} must be bytes, got {type(data).__name__}")
        data = bytes(data)
    out.append(_u32(len(data), field))
    out.append(data)


def _text(out: list[bytes], value: str, field: str) -> None:
    if type(value) is not str:
        raise TypeError(f"field {field!r} must be str, got {type(value).__name__}")
    raw = value.encode("utf-8")
    out.append(_u32(len(raw), field))
    out.append(raw)


def _enc_produce(m: Produce) -> list[bytes]:
    out = [b"\x01"]
    _text(out, m.topic, "topic")
    _blob(out, m.key, "key")
    _blob(out, m.value, "value")
    return out


def _enc_fetch(m: Fetch) -> list[bytes]:
    out = [b"\x02"]
    _text(out, m.topic, "topic")
    out.append(_u32(m.partition, "partition"))
    out.append(_u64(m.offset, "offset"))
    return out


def _enc_commit(m: Commit) -> list[bytes]:
    out = [b"\x03"]
    _text(out, m.group, "group")
    _text(out, m.topic, "topic")
    out.append(_u32(m.partition, "partition"))
    out.append(_u64(m.offset, "offset"))
    return out


def _enc_offset_fetch(m: OffsetFetch) -> list[bytes]:
    out = [b"\x04"]
    _text(out, m.group, "group")
    _text(out, m.topic, "topic")
    out.append(_u32(m.partition, "partition"))
    return out


def _enc_hello(m: Hello) -> list[bytes]:
    out = [b"\x05", _u32(m.version, "version")]
    _text(out, m.client, "client")
    return out


def _enc_produce_batch(m: ProduceBatch) -> list[bytes]:
    out = [b"\x06"]
    _text(out, m.topic, "topic")
    out.append(_u32(m.partition, "partition"))
    _blob(out, m.batches, "batches")
    return out


def _enc_fetch_batch(m: FetchBatch) -> list[bytes]:
    out = [b"\x07"]
    _text(out, m.topic, "topic")
    out.append(_u32(m.partition, "partition"))
    out.append(_u64(m.offset, "offset"))
    out.append(_u32(m.max_bytes, "max_bytes"))
    out.append(_u32(m.max_wait_ms, "max_wait_ms"))
    return out


def _enc_metadata(m: Metadata) -> list[bytes]:
    out = [b"\x08", _u32(len(m.topics), "topics")]
    for i, topic in enumerate(m.topics):
        _text(out, topic, f"topics[{i}]")
    return out


def _enc_create_topic(m: CreateTopic) -> list[bytes]:
    out = [b"\x09"]
    _text(out, m.topic, "topic")
    out.append(_u32(m.partitions, "partitions"))
    return out


def _enc_alter_topic(m: AlterTopic) -> list[bytes]:
    out = [b"\x0a"]
    _text(out, m.topic, "topic")
    out.append(_u32(m.partitions, "partitions"))
    return out


def _enc_list_groups(m: ListGroups) -> list[bytes]:
    return [b"\x0b"]


def _enc_describe_group(m: DescribeGroup) -> list[bytes]:
    out = [b"\x0c"]
    _text(out, m.group, "group")
    return out


def _enc_produced(m: Produced) -> list[bytes]:
    return [b"\x01", _u32(m.partition, "partition"), _u64(m.offset, "offset")]


def _enc_fetched_record(m: FetchedRecord) -> list[bytes]:
    out = [b"\x02", _u64(m.offset, "offset")]
    _blob(out, m.key, "key")
    _blob(out, m.value, "value")
    return out


def _enc_not_found(m: NotFound) -> list[bytes]:
    return [b"\x03"]


def _enc_error(m: Error) -> list[bytes]:
    out = [b"\x04"]
    _text(out, m.message, "message")
    return out


def _enc_commit_ok(m: CommitOk) -> list[bytes]:
    return [b"\x05"]


def _enc_offset(m: Offset) -> list[bytes]:
    return [b"\x06", _u64(m.offset, "offset")]


def _enc_welcome(m: Welcome) -> list[bytes]:
    out = [b"\x07", _u32(m.version, "version")]
    _text(out, m.broker, "broker")
    out.append(_u32(len(m.ops), "ops"))
    try:
        out.append(bytes(m.ops))
    except (ValueError, TypeError):
        raise ValueError(f"field 'ops' must hold integers in 0..{_U8_MAX}, got {m.ops!r}") from None
    return out


def _enc_batch_produced(m: BatchProduced) -> list[bytes]:
    return [
        b"\x08",
        _u32(m.partition, "partition"),
        _u64(m.base_offset, "base_offset"),
        _u64(m.last_offset, "last_offset"),
    ]


def _enc_batches(m: Batches) -> list[bytes]:
    out = [b"\x09", _u64(m.log_start, "log_start"), _u64(m.high_watermark, "high_watermark")]
    _blob(out, m.batches, "batches")
    return out


def _enc_metadata_result(m: MetadataResult) -> list[bytes]:
    out = [b"\x0a", _u32(len(m.topics), "topics")]
    for i, topic in enumerate(m.topics):
        _text(out, topic.name, f"topics[{i}].name")
        out.append(_u32(len(topic.partitions), f"topics[{i}].partitions"))
        for j, part in enumerate(topic.partitions):
            out.append(_u64(part.log_start, f"topics[{i}].partitions[{j}].log_start"))
            out.append(_u64(part.high_watermark, f"topics[{i}].partitions[{j}].high_watermark"))
    return out


def _enc_topic_info(m: TopicInfo) -> list[bytes]:
    out = [b"\x0b"]
    _text(out, m.topic, "topic")
    out.append(_u32(m.partitions, "partitions"))
    return out


def _enc_groups(m: Groups) -> list[bytes]:
    out = [b"\x0c", _u32(len(m.groups), "groups")]
    for i, group in enumerate(m.groups):
        _text(out, group, f"groups[{i}]")
    return out


def _enc_group_offsets(m: GroupOffsets) -> list[bytes]:
    out = [b"\x0d"]
    _text(out, m.group, "group")
    out.append(_u32(len(m.offsets), "offsets"))
    for i, entry in enumerate(m.offsets):
        where = f"offsets[{i}]"
        _text(out, entry.topic, f"{where}.topic")
        out.append(_u32(entry.partition, f"{where}.partition"))
        out.append(_u64(entry.committed, f"{where}.committed"))
        out.append(_u64(entry.log_start, f"{where}.log_start"))
        out.append(_u64(entry.high_watermark, f"{where}.high_watermark"))
    return out


def _enc_failure(m: Failure) -> list[bytes]:
    out = [b"\x0e", _u16(m.code, "code")]
    _text(out, m.message, "message")
    return out


def _enc_out_of_range(m: OutOfRange) -> list[bytes]:
    return [
        b"\x0f",
        _u64(m.offset, "offset"),
        _u64(m.log_start, "log_start"),
        _u64(m.high_watermark, "high_watermark"),
    ]


_REQUEST_ENCODERS: dict[type, Callable[..., list[bytes]]] = {
    Produce: _enc_produce,
    Fetch: _enc_fetch,
    Commit: _enc_commit,
    OffsetFetch: _enc_offset_fetch,
    Hello: _enc_hello,
    ProduceBatch: _enc_produce_batch,
    FetchBatch: _enc_fetch_batch,
    Metadata: _enc_metadata,
    CreateTopic: _enc_create_topic,
    AlterTopic: _enc_alter_topic,
    ListGroups: _enc_list_groups,
    DescribeGroup: _enc_describe_group,
}

_RESPONSE_ENCODERS: dict[type, Callable[..., list[bytes]]] = {
    Produced: _enc_produced,
    FetchedRecord: _enc_fetched_record,
    NotFound: _enc_not_found,
    Error: _enc_error,
    CommitOk: _enc_commit_ok,
    Offset: _enc_offset,
    Welcome: _enc_welcome,
    BatchProduced: _enc_batch_produced,
    Batches: _enc_batches,
    MetadataResult: _enc_metadata_result,
    TopicInfo: _enc_topic_info,
    Groups: _enc_groups,
    GroupOffsets: _enc_group_offsets,
    Failure: _enc_failure,
    OutOfRange: _enc_out_of_range,
}


# The hot messages below get a second encoder that packs the whole frame head in one
# struct call and returns its final pieces. Anything unusual (a wrong type, a value out
# of range) falls back to the field-by-field encoder above, which names the bad field.

_OP_LEN = struct.Struct(">BI")
_PRODUCED = struct.Struct(">BIQ")
_FETCHED_RECORD_HEAD = struct.Struct(">BQI")
_BATCH_PRODUCED = struct.Struct(">BIQQ")
_BATCHES_HEAD = struct.Struct(">BQQI")
_FETCH_BATCH_REST = struct.Struct(">IQII")
_pack_u32 = _U32.pack


def _parts_produce(m: Produce) -> list[bytes]:
    topic, key, value = m
    if type(topic) is str and type(key) is bytes and type(value) is bytes:
        raw = topic.encode("utf-8")
        try:
            return [
                b"".join(
                    (
                        _OP_LEN.pack(1, len(raw)),
                        raw,
                        _pack_u32(len(key)),
                        key,
                        _pack_u32(len(value)),
                        value,
                    )
                )
            ]
        except struct.error:
            pass
    return [b"".join(_enc_produce(m))]


def _parts_fetch(m: Fetch) -> list[bytes]:
    topic, partition, offset = m
    if type(topic) is str:
        raw = topic.encode("utf-8")
        try:
            return [_OP_LEN.pack(2, len(raw)) + raw + _U32_U64.pack(partition, offset)]
        except struct.error:
            pass
    return [b"".join(_enc_fetch(m))]


def _parts_produce_batch(m: ProduceBatch) -> list[bytes]:
    topic, partition, batches = m
    if type(topic) is str and type(batches) is bytes:
        raw = topic.encode("utf-8")
        try:
            return [
                _OP_LEN.pack(6, len(raw)) + raw + _U32_U32.pack(partition, len(batches)),
                batches,
            ]
        except struct.error:
            pass
    return _split_last(_enc_produce_batch(m))


def _parts_fetch_batch(m: FetchBatch) -> list[bytes]:
    topic = m.topic
    if type(topic) is str:
        raw = topic.encode("utf-8")
        try:
            return [_OP_LEN.pack(7, len(raw)) + raw + _FETCH_BATCH_REST.pack(*m[1:])]
        except struct.error:
            pass
    return [b"".join(_enc_fetch_batch(m))]


def _parts_produced(m: Produced) -> list[bytes]:
    try:
        return [_PRODUCED.pack(1, *m)]
    except struct.error:
        return [b"".join(_enc_produced(m))]


def _parts_fetched_record(m: FetchedRecord) -> list[bytes]:
    offset, key, value = m
    if type(key) is bytes and type(value) is bytes:
        try:
            return [
                b"".join(
                    (
                        _FETCHED_RECORD_HEAD.pack(2, offset, len(key)),
                        key,
                        _pack_u32(len(value)),
                        value,
                    )
                )
            ]
        except struct.error:
            pass
    return [b"".join(_enc_fetched_record(m))]


def _parts_batch_produced(m: BatchProduced) -> list[bytes]:
    try:
        return [_BATCH_PRODUCED.pack(8, *m)]
    except struct.error:
        return [b"".join(_enc_batch_produced(m))]


def _parts_batches(m: Batches) -> list[bytes]:
    log_start, high_watermark, batches = m
    if type(batches) is bytes:
        try:
            return [_BATCHES_HEAD.pack(9, log_start, high_watermark, len(batches)), batches]
        except struct.error:
            pass
    return _split_last(_enc_batches(m))


def _split_last(pieces: list[bytes]) -> list[bytes]:
    """Join the small head and keep the trailing blob separate so it is never copied."""
    return [b"".join(pieces[:-1]), pieces[-1]]


def _joined(encoder: Callable[..., list[bytes]]) -> Callable[..., list[bytes]]:
    def parts(message: object) -> list[bytes]:
        return [b"".join(encoder(message))]

    return parts


# Message type -> its final pieces: one for most, two (head, uncopied blob) for the
# messages that carry batches.
_REQUEST_PARTS: dict[type, Callable[..., list[bytes]]] = {
    kind: _joined(encoder) for kind, encoder in _REQUEST_ENCODERS.items()
}
_REQUEST_PARTS.update(
    {
        Produce: _parts_produce,
        Fetch: _parts_fetch,
        ProduceBatch: _parts_produce_batch,
        FetchBatch: _parts_fetch_batch,
    }
)

_RESPONSE_PARTS: dict[type, Callable[..., list[bytes]]] = {
    kind: _joined(encoder) for kind, encoder in _RESPONSE_ENCODERS.items()
}
_RESPONSE_PARTS.update(
    {
        Produced: _parts_produced,
        FetchedRecord: _parts_fetched_record,
        BatchProduced: _parts_batch_produced,
        Batches: _parts_batches,
    }
)


def encode_request(req: Request) -> bytes:
    """The frame payload of ``req`` (without the 4-byte length prefix)."""
    encoder = _REQUEST_PARTS.get(type(req))
    if encoder is None:
        raise TypeError(f"not a rustka request: {type(req).__name__}")
    parts = encoder(req)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def encode_response(resp: Response) -> bytes:
    """The frame payload of ``resp`` (without the 4-byte length prefix)."""
    encoder = _RESPONSE_PARTS.get(type(resp))
    if encoder is None:
        raise TypeError(f"not a rustka response: {type(resp).__name__}")
    parts = encoder(resp)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def request_parts(req: Request) -> list[bytes]:
    """Like encode_request, but a ProduceBatch's data stays a separate piece.

    ``b"".join(request_parts(req)) == encode_request(req)``; the pieces suit
    ``transport.writeSequence`` so a large batch is not copied into a new frame.
    """
    encoder = _REQUEST_PARTS.get(type(req))
    if encoder is None:
        raise TypeError(f"not a rustka request: {type(req).__name__}")
    return encoder(req)


def response_parts(resp: Response) -> list[bytes]:
    """Like encode_response, but a Batches response's data stays a separate piece.

    ``b"".join(response_parts(resp)) == encode_response(resp)``.
    """
    encoder = _RESPONSE_PARTS.get(type(resp))
    if encoder is None:
        raise TypeError(f"not a rustka response: {type(resp).__name__}")
    return encoder(resp)


# --------------------------------------------------------------------------- errors


_SEED_REQUEST_TYPES = (Produce, Fetch, Commit, OffsetFetch)


def error_response(request: Request | None, exc: RustkaError) -> Response:
    """The response that reports ``exc`` for ``request`` (None: the frame did not parse).

    Seed ops and unparseable frames get tag 4 ``Error`` so seed clients never see
    a tag they do not know; extension ops get tag 14 ``Failure`` with the error's
    code, except an out-of-range FetchBatch, which gets tag 15 with the bounds.
    """
    message = str(exc) or type(exc).__name__
    if request is None or isinstance(request, _SEED_REQUEST_TYPES):
        return Error(message)
    if isinstance(exc, OffsetOutOfRange) and isinstance(request, FetchBatch):
        return OutOfRange(exc.offset, exc.log_start, exc.end)
    code = getattr(exc, "code", RustkaError.code)
    if not isinstance(code, int) or not 0 <= code <= _U16_MAX:
        code = RustkaError.code
    return Failure(code, message)
