"""The native wire codec: bytes in, immutable message values out, and back.

Pure functions with no I/O and no reactor, in the spirit of h11: the server,
the client, the CLI and the tests all share one definition of every message, so
a framing or field-order mistake cannot exist on one side only. A payload here
is one frame *without* its 4-byte length prefix (Int32StringReceiver strips and
adds that); ``request_frame``/``response_frame`` give the prefixed pieces.

**One declaration per message.** Each message is a class whose annotations name
its wire types in order (``topic: Str``, ``partition: UInt32``, ...) and whose
``OP`` or ``TAG`` is its code; ``@request``/``@response`` register it. Every
way of reading or writing it is derived from that declaration when this module
is imported:

- a checking reader, which names the field and position of any problem;
- a checking writer, which names the field of a value that does not fit;
- for messages without arrays, straight-line fast paths compiled from the
  field list (one ``struct`` call per run of fixed-size fields) for decoding,
  encoding and framing. They fall back to the checking paths on anything
  unusual, so errors are always reported the same way.

Adding an op is one class here plus its handler; no table needs editing.

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
from typing import Annotated, Any, ClassVar, TypeAlias, TypeVar, Union, get_type_hints

from rustka.errors import InvalidRequest, OffsetOutOfRange, RustkaError
from rustka.record.batch import value_class
from rustka.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    code_of,
)

PROTOCOL_VERSION = 2
"""Version 1 is the seed protocol (ops 1-4); version 2 adds the extensions (ops 5 and up)."""

MIN_PROTOCOL_VERSION = 1

Buffer: TypeAlias = bytes | bytearray | memoryview

_T = TypeVar("_T")

# --------------------------------------------------------------------------- wire types


class WireType:
    """One field encoding of docs/protocol.md section 2.

    ``fmt`` is the struct code of a fixed-size integer, empty for the
    length-prefixed types; ``min_size`` is the fewest bytes a value takes,
    which bounds how many array items a count may claim.
    """

    __slots__ = ("fmt", "max", "min_size", "name", "uncopied")

    def __init__(self, name: str, fmt: str, min_size: int, *, uncopied: bool = False) -> None:
        self.name = name
        self.fmt = fmt
        self.min_size = min_size
        self.max = (1 << (8 * min_size)) - 1 if fmt else 0
        self.uncopied = uncopied

    def __repr__(self) -> str:
        return self.name


U8 = WireType("u8", "B", 1)
U16 = WireType("u16", "H", 2)
U32 = WireType("u32", "I", 4)
U64 = WireType("u64", "Q", 8)
STR = WireType("str", "", 4)
BYTES = WireType("bytes", "", 4)
BATCHES = WireType("bytes", "", 4, uncopied=True)
"""Bytes on the wire like ``BYTES``; the encoders keep the value as its own piece so a
multi-MiB record batch goes to ``transport.writeSequence`` without being copied."""


class Array:
    """``T[]``: a u32 count, then the items back to back (``item`` is a type or a struct class)."""

    __slots__ = ("item",)

    def __init__(self, item: WireType | type) -> None:
        self.item = item

    def __repr__(self) -> str:
        return f"{self.item!r}[]"


# The annotations a message class uses; each is its Python type plus its wire type.
UInt8: TypeAlias = Annotated[int, U8]
UInt16: TypeAlias = Annotated[int, U16]
UInt32: TypeAlias = Annotated[int, U32]
UInt64: TypeAlias = Annotated[int, U64]
Str: TypeAlias = Annotated[str, STR]
Bytes: TypeAlias = Annotated[bytes, BYTES]
RecordBatches: TypeAlias = Annotated[Buffer, BATCHES]
StrArray: TypeAlias = Annotated[tuple[str, ...], Array(STR)]
OpCodes: TypeAlias = Annotated[tuple[int, ...], Array(U8)]

Field = tuple[str, "WireType | Array"]


def _wire_fields(cls: type) -> tuple[Field, ...]:
    """The (name, wire type) pairs of a value class, in declaration order."""
    hints = get_type_hints(cls, globalns=globals(), include_extras=True)
    fields: list[Field] = []
    for name in cls._fields:  # type: ignore[attr-defined]
        wire = [
            m for m in getattr(hints[name], "__metadata__", ()) if isinstance(m, (WireType, Array))
        ]
        if len(wire) != 1:
            raise TypeError(f"{cls.__name__}.{name} needs exactly one wire type, has {wire}")
        fields.append((name, wire[0]))
    return tuple(fields)


# --------------------------------------------------------------------------- reading


class _Reader:
    """A bounds-checked cursor that turns every shortfall into a precise InvalidRequest.

    The compiled fast paths never raise; when one of them sees anything unusual
    the payload is parsed again through this class purely to name the problem.
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

    def fixed(self, wire: WireType, field: str) -> int:
        pos = self.take(wire.min_size, field)
        value: int = struct.unpack_from(">" + wire.fmt, self.buf, pos)[0]
        return value

    def blob(self, field: str) -> bytes:
        size = self.fixed(U32, field)
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
        count = self.fixed(U32, field)
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


# The fast paths build messages with one ``tuple.__new__`` call (messages are tuple
# subclasses, see rustka.record.batch.value_class), skipping the Python-level
# ``__new__`` that keyword construction needs.
_new: Callable[..., Any] = tuple.__new__


def _min_size(wire: WireType | Array | type) -> int:
    if isinstance(wire, WireType):
        return wire.min_size
    if isinstance(wire, Array):
        return 4
    return sum(_min_size(sub) for _, sub in _STRUCT_FIELDS[wire])


def _read(r: _Reader, wire: WireType | Array | type, field: str) -> Any:
    """One value of ``wire`` from the reader (the checking path; see _Reader)."""
    if isinstance(wire, WireType):
        if wire.fmt:
            return r.fixed(wire, field)
        return r.text(field) if wire is STR else r.blob(field)
    if isinstance(wire, Array):
        count = r.count(field, _min_size(wire.item))
        if wire.item is U8:
            pos = r.take(count, field)
            return tuple(r.buf[pos : pos + count])
        return tuple(_read(r, wire.item, f"{field}[{i}]") for i in range(count))
    values = tuple(_read(r, sub, f"{field}.{name}") for name, sub in _STRUCT_FIELDS[wire])
    return _new(wire, values)


# --------------------------------------------------------------------------- writing


def _check_int(wire: WireType, value: Any, field: str) -> None:
    if not isinstance(value, int) or not 0 <= value <= wire.max:
        raise ValueError(f"field {field!r} must be an integer in 0..{wire.max}, got {value!r}")


def _write(out: list[bytes], wire: WireType | Array | type, value: Any, field: str) -> None:
    """Append the encoding of ``value`` to ``out`` (the checking path)."""
    if isinstance(wire, WireType):
        if wire.fmt:
            _check_int(wire, value, field)
            out.append(struct.pack(">" + wire.fmt, value))
            return
        if wire is STR:
            if type(value) is not str:
                raise TypeError(f"field {field!r} must be str, got {type(value).__name__}")
            value = value.encode("utf-8")
        elif type(value) is not bytes:
            if not isinstance(value, (bytearray, memoryview)):
                raise TypeError(f"field {field!r} must be bytes, got {type(value).__name__}")
            value = bytes(value)
        _check_int(U32, len(value), field)
        out.append(_pack_u32(len(value)))
        out.append(value)
        return
    if isinstance(wire, Array):
        _check_int(U32, len(value), field)
        out.append(_pack_u32(len(value)))
        if wire.item is U8:
            try:
                out.append(bytes(value))
            except (ValueError, TypeError):
                raise ValueError(
                    f"field {field!r} must hold integers in 0..{U8.max}, got {value!r}"
                ) from None
            return
        for i, item in enumerate(value):
            _write(out, wire.item, item, f"{field}[{i}]")
        return
    for (name, sub), item in zip(_STRUCT_FIELDS[wire], value, strict=True):
        _write(out, sub, item, f"{field}.{name}")


_pack_u32 = struct.Struct(">I").pack


# --------------------------------------------------------------------------- compiled paths


def _compile(source: str, name: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    code = compile(source, f"<rustka.native.codec {name}>", "exec")
    # The source is generated in this module from the declarations, never from input.
    exec(code, namespace)
    fn: Callable[..., Any] = namespace[name]
    return fn


def _fast_decoder(spec: _Spec) -> Callable[[bytes], Any] | None:
    """Straight-line decoding of a message without arrays; None on anything unusual.

    Each run of fixed-size fields, together with the length prefix of the
    variable field after it, is one ``unpack_from``; the result is checked to
    end exactly at the end of the payload before any str is decoded.
    """
    if any(isinstance(wire, Array) for _, wire in spec.fields):
        return None
    ns: dict[str, Any] = {"_new": _new, "_cls": spec.cls, "_error": struct.error}
    body: list[str] = []
    values: list[str] = []
    run: list[tuple[str, str]] = []
    base, offset = "", 1  # the position: base (a local name or "") + offset

    def at(extra: int = 0) -> str:
        if not base:
            return str(offset + extra)
        return f"{base} + {offset + extra}" if offset + extra else base

    def unpack() -> int:
        fmt = ">" + "".join(code for code, _ in run)
        name = f"_s{len(ns)}"
        ns[name] = struct.Struct(fmt)
        targets = ", ".join(target for _, target in run)
        body.append(f"({targets},) = {name}.unpack_from(p, {at()})")
        return ns[name].size

    for i, (_, wire) in enumerate(spec.fields):
        if wire.fmt:
            run.append((wire.fmt, f"v{i}"))
            values.append(f"v{i}")
            continue
        run.append(("I", f"n{i}"))
        start = at(unpack())
        body.append(f"e{i} = {start} + n{i}")
        values.append(f"p[{start}:e{i}]" + (".decode('utf-8')" if wire is STR else ""))
        run, base, offset = [], f"e{i}", 0
    if not base:
        # Only fixed-size fields: the length alone decides, and one unpack builds it.
        size = 1 + sum(struct.calcsize(">" + w.fmt) for _, w in spec.fields)
        fmt = ">" + "".join(w.fmt for _, w in spec.fields)
        ns["_all"] = struct.Struct(fmt)
        made = "_new(_cls, _all.unpack_from(p, 1))" if spec.fields else "_new(_cls, ())"
        source = f"def fast(p):\n    if len(p) == {size}:\n        return {made}\n    return None\n"
        return _compile(source, "fast", ns)
    end = at(unpack()) if run else at()
    lines = ["def fast(p):", "    try:"]
    lines += [f"        {line}" for line in body]
    lines += [
        f"        if {end} == len(p):",
        f"            return _new(_cls, ({', '.join(values)},))",
        "    except (_error, UnicodeDecodeError):",
        "        pass",
        "    return None",
    ]
    return _compile("\n".join(lines) + "\n", "fast", ns)


def _fast_encoder(spec: _Spec, framed: bool) -> Callable[[Any], list[bytes]]:
    """The final pieces of a message, packed with one struct call per run of fixed fields.

    ``framed`` puts the 4-byte length prefix in the first struct call. A trailing
    ``BATCHES`` field stays its own piece. Anything unusual (a wrong type, a value
    out of range) goes to the checking writer, which names the bad field.
    """
    slow = _slow_frame if framed else _slow_parts
    ns: dict[str, Any] = {"_error": struct.error, "_spec": spec, "_slow": slow}
    if any(isinstance(wire, Array) for _, wire in spec.fields):
        source = "def parts(m):\n    return _slow(_spec, m)\n"
        return _compile(source, "parts", ns)
    names = [f"f{i}" for i in range(len(spec.fields))]
    guards: list[str] = []
    raws: list[str] = []
    chunks: list[str] = []
    blobs: list[str] = []
    fmt, args = (">IB", ["_size", str(spec.code)]) if framed else (">B", [str(spec.code)])
    size = 1

    def close_run() -> None:
        nonlocal fmt, args
        if args:
            name = f"_s{len(ns)}"
            ns[name] = struct.Struct(fmt)
            chunks.append(f"{name}.pack({', '.join(args)})")
        fmt, args = ">", []

    for name, (_, wire) in zip(names, spec.fields, strict=True):
        if wire.fmt:
            fmt += wire.fmt
            args.append(name)
            size += wire.min_size
            continue
        if wire is STR:
            guards.append(f"type({name}) is str")
            raws.append(f"r{name} = {name}.encode('utf-8')")
            blob = f"r{name}"
        else:
            guards.append(f"type({name}) is bytes")
            blob = name
        fmt += "I"
        args.append(f"len({blob})")
        size += 4
        close_run()
        chunks.append(blob)
        blobs.append(blob)
    close_run()
    if spec.uncopied:
        head = chunks[:-1]
        joined = head[0] if len(head) == 1 else f"b''.join(({', '.join(head)},))"
        result = f"[{joined}, {chunks[-1]}]"
    else:
        result = f"[{chunks[0]}]" if len(chunks) == 1 else f"[b''.join(({', '.join(chunks)},))]"
    if not blobs:
        # Only fixed-size fields: one pack of the whole message, straight from the tuple.
        fixed = "".join(wire.fmt for _, wire in spec.fields)
        ns["_all"] = struct.Struct((">IB" if framed else ">B") + fixed)
        consts = f"{size}, {spec.code}" if framed else str(spec.code)
        packed = f"_all.pack({consts}, *m)"
        source = (
            f"def parts(m):\n    try:\n        return [{packed}]\n"
            "    except _error:\n        return _slow(_spec, m)\n"
        )
        return _compile(source, "parts", ns)
    lines = ["def parts(m):"]
    if names:
        lines.append(f"    ({', '.join(names)},) = m")
    indent = "    "
    if guards:
        lines.append(f"    if {' and '.join(guards)}:")
        indent = "        "
    lines += [f"{indent}{raw}" for raw in raws]
    if framed:
        lines.append(f"{indent}_size = {' + '.join([str(size), *(f'len({b})' for b in blobs)])}")
    lines += [
        f"{indent}try:",
        f"{indent}    return {result}",
        f"{indent}except _error:",
        f"{indent}    pass",
        "    return _slow(_spec, m)",
    ]
    return _compile("\n".join(lines) + "\n", "parts", ns)


# --------------------------------------------------------------------------- declarations


class _Spec:
    """Everything derived from one message declaration."""

    __slots__ = (
        "cls",
        "code",
        "decode_fast",
        "fields",
        "frame",
        "kind",
        "parts",
        "uncopied",
        "what",
    )

    def __init__(self, cls: type, code: int, kind: str) -> None:
        self.cls = cls
        self.code = code
        self.kind = kind
        self.fields = _wire_fields(cls)
        # A trailing batches field is written as its own piece, never copied.
        self.uncopied = bool(self.fields) and self.fields[-1][1] is BATCHES
        wire_name = cls.__dict__.get("WIRE_NAME", cls.__name__)
        self.what = f"{wire_name} {kind}"
        self.decode_fast = _fast_decoder(self)
        self.parts = _fast_encoder(self, framed=False)
        self.frame = _fast_encoder(self, framed=True)

    def decode_slow(self, payload: bytes) -> Any:
        reader = _Reader(payload, self.what)
        values = tuple(_read(reader, wire, name) for name, wire in self.fields)
        reader.finish()
        return _new(self.cls, values)

    def encode_slow(self, message: Any) -> list[bytes]:
        out = [bytes((self.code,))]
        for (name, wire), value in zip(self.fields, message, strict=True):
            _write(out, wire, value, name)
        return out


def _slow_parts(spec: _Spec, message: Any) -> list[bytes]:
    pieces = spec.encode_slow(message)
    if spec.uncopied:
        return [b"".join(pieces[:-1]), pieces[-1]]
    return [b"".join(pieces)]


def _slow_frame(spec: _Spec, message: Any) -> list[bytes]:
    parts = _slow_parts(spec, message)
    size = sum(len(part) for part in parts)
    _check_int(U32, size, "frame length")
    return [_pack_u32(size) + parts[0], *parts[1:]]


_STRUCT_FIELDS: dict[type, tuple[Field, ...]] = {}
_REQUESTS: dict[int, _Spec] = {}
_RESPONSES: dict[int, _Spec] = {}
_SPECS: dict[type, _Spec] = {}


def _register(cls: type, code: int, kind: str, table: dict[int, _Spec]) -> Any:
    made = value_class(cls)
    if code in table:
        raise TypeError(f"{kind} code {code} is declared twice")
    spec = _Spec(made, code, kind)
    table[code] = spec
    _SPECS[made] = spec
    return made


def request(cls: type[_T]) -> type[_T]:
    """Declare a request: ``OP`` is its op byte, the annotations its fields in wire order."""
    made: type[_T] = _register(cls, cls.__dict__["OP"], "request", _REQUESTS)
    return made


def response(cls: type[_T]) -> type[_T]:
    """Declare a response: ``TAG`` is its tag byte, the annotations its fields in wire order."""
    made: type[_T] = _register(cls, cls.__dict__["TAG"], "response", _RESPONSES)
    return made


def item(cls: type[_T]) -> type[_T]:
    """Declare a struct used as an array item (no code of its own)."""
    made: type[_T] = value_class(cls)
    _STRUCT_FIELDS[made] = _wire_fields(made)
    return made


# --------------------------------------------------------------------------- requests


@request
class Produce:
    """Op 1: append one record; the broker picks the partition from the key."""

    OP: ClassVar[int] = 1
    topic: Str
    key: Bytes
    value: Bytes


@request
class Fetch:
    """Op 2: read the single record at ``offset``."""

    OP: ClassVar[int] = 2
    topic: Str
    partition: UInt32
    offset: UInt64


@request
class Commit:
    """Op 3: remember ``offset`` as the next offset ``group`` will read."""

    OP: ClassVar[int] = 3
    group: Str
    topic: Str
    partition: UInt32
    offset: UInt64


@request
class OffsetFetch:
    """Op 4: ask for a group's committed offset."""

    OP: ClassVar[int] = 4
    group: Str
    topic: Str
    partition: UInt32


@request
class Hello:
    """Op 5: version handshake; optional, and it changes nothing about the connection."""

    OP: ClassVar[int] = 5
    version: UInt32
    client: Str


@request
class ProduceBatch:
    """Op 6: append client-built RecordBatch v2 bytes to one partition."""

    OP: ClassVar[int] = 6
    topic: Str
    partition: UInt32
    batches: RecordBatches


@request
class FetchBatch:
    """Op 7: read whole stored batches from ``offset``, long-polling at the end of the log."""

    OP: ClassVar[int] = 7
    topic: Str
    partition: UInt32
    offset: UInt64
    max_bytes: UInt32
    max_wait_ms: UInt32


@request
class Metadata:
    """Op 8: partition bounds of the named topics (all topics when ``topics`` is empty)."""

    OP: ClassVar[int] = 8
    topics: StrArray = ()


@request
class CreateTopic:
    """Op 9: create a topic with an explicit partition count."""

    OP: ClassVar[int] = 9
    topic: Str
    partitions: UInt32


@request
class AlterTopic:
    """Op 10: raise a topic's partition count (keys may move, as in Kafka)."""

    OP: ClassVar[int] = 10
    topic: Str
    partitions: UInt32


@request
class ListGroups:
    """Op 11: names of every group with at least one committed offset."""

    OP: ClassVar[int] = 11


@request
class DescribeGroup:
    """Op 12: a group's committed offsets next to the partition bounds, for lag."""

    OP: ClassVar[int] = 12
    group: Str


@request
class DeleteTopic:
    """Op 13: delete a topic with all its partitions and data (Kafka's DeleteTopics)."""

    OP: ClassVar[int] = 13
    topic: Str


@request
class DescribeLogs:
    """Op 14: each partition's log and what the log cleaner knows of it (all topics when
    ``topics`` is empty)."""

    OP: ClassVar[int] = 14
    topics: StrArray = ()


@item
class ConfigValue:
    """One topic config as a client sets it: a Kafka topic config name and its value."""

    name: Str
    value: Str


ConfigValues: TypeAlias = Annotated[tuple[ConfigValue, ...], Array(ConfigValue)]


@request
class CreateTopicWithConfigs:
    """Op 15: create a topic with configs of its own (Kafka topic configs)."""

    OP: ClassVar[int] = 15
    topic: Str
    partitions: UInt32
    configs: ConfigValues


@request
class AlterTopicConfigs:
    """Op 16: set and delete some of a topic's own configs, or (``validate_only`` 1) only
    check the change."""

    OP: ClassVar[int] = 16
    topic: Str
    set: ConfigValues
    delete: StrArray
    validate_only: UInt8


@request
class DescribeTopicConfigs:
    """Op 17: every config of a topic, with where its value comes from."""

    OP: ClassVar[int] = 17
    topic: Str


@request
class SaslAuthenticate:
    """Op 18: begin a SASL exchange (or a re-authentication) with its first message."""

    OP: ClassVar[int] = 18
    mechanism: Str
    token: Bytes


@request
class SaslContinue:
    """Op 19: the client's next message of the exchange op 18 began."""

    OP: ClassVar[int] = 19
    token: Bytes


@item
class AclEntry:
    """One ACL, with Kafka's codes (docs/security.md, "Authorization (ACLs)"):
    resource_type 2 topic, 3 group, 4 cluster, 5 transactional id; pattern_type 3
    literal, 4 prefixed; operation 2 all … 12 idempotent write; permission 2 deny,
    3 allow."""

    resource_type: UInt8
    resource_name: Str
    pattern_type: UInt8
    principal: Str
    host: Str
    operation: UInt8
    permission: UInt8


AclEntries: TypeAlias = Annotated[tuple[AclEntry, ...], Array(AclEntry)]


@request
class CreateAcls:
    """Op 24: add ACLs, all or none (an invalid one is code 2 and nothing is stored)."""

    OP: ClassVar[int] = 24
    acls: AclEntries


@request
class DescribeAcls:
    """Op 25: the ACLs a filter selects: codes 1 (any) and "" (any) match every
    value of a field; pattern_type 2 (match) selects every pattern that covers the name."""

    OP: ClassVar[int] = 25
    resource_type: UInt8
    resource_name: Str
    pattern_type: UInt8
    principal: Str
    host: Str
    operation: UInt8
    permission: UInt8


@request
class DeleteAcls:
    """Op 26: remove every ACL a filter (as DescribeAcls') selects."""

    OP: ClassVar[int] = 26
    resource_type: UInt8
    resource_name: Str
    pattern_type: UInt8
    principal: Str
    host: Str
    operation: UInt8
    permission: UInt8


HIGH_WATERMARK = 0xFFFF_FFFF_FFFF_FFFF
"""DeleteRecords' ``offset`` meaning the high watermark (Kafka's -1)."""


@request
class DeleteRecords:
    """Op 27: move a partition's log start up to ``offset`` (Kafka's DeleteRecords);
    `HIGH_WATERMARK` moves it to the high watermark."""

    OP: ClassVar[int] = 27
    topic: Str
    partition: UInt32
    offset: UInt64


# Transactions, the operator's view (docs/protocol.md 7.15): Kafka's ListTransactions,
# DescribeTransactions and kafka-transactions.sh abort, and each partition's last stable
# offset. Ops 20-23 stay free: they are the codec tests' example of an unknown op.

U64Array: TypeAlias = Annotated[tuple[int, ...], Array(U64)]


@request
class ListTransactions:
    """Op 28: every transactional id the coordinator knows, optionally only those in one
    of ``states`` (Kafka's state names) or of one of ``producer_ids`` (empty: any)."""

    OP: ClassVar[int] = 28
    states: StrArray = ()
    producer_ids: U64Array = ()


@request
class DescribeTransaction:
    """Op 29: one transactional id's state, producer, timeout, partitions and groups."""

    OP: ClassVar[int] = 29
    transactional_id: Str


@request
class AbortTransaction:
    """Op 30: abort the id's open transaction as its timeout would, fencing its producer."""

    OP: ClassVar[int] = 30
    transactional_id: Str


@request
class DescribeStableOffsets:
    """Op 31: each partition's last stable offset and the transactions open on it (all
    topics when ``topics`` is empty)."""

    OP: ClassVar[int] = 31
    topics: StrArray = ()


# --------------------------------------------------------------------------- responses


@response
class Produced:
    """Tag 1: where a Produce landed."""

    TAG: ClassVar[int] = 1
    partition: UInt32
    offset: UInt64


@response
class FetchedRecord:
    """Tag 2 (``Record`` in docs/protocol.md, section 5): the answer to a Fetch that found data."""

    TAG: ClassVar[int] = 2
    WIRE_NAME: ClassVar[str] = "Record"
    offset: UInt64
    key: Bytes
    value: Bytes


@response
class NotFound:
    """Tag 3: Fetch at/after the end, or OffsetFetch with no commit."""

    TAG: ClassVar[int] = 3


@response
class Error:
    """Tag 4: any failure of ops 1-4, and any frame that could not be parsed."""

    TAG: ClassVar[int] = 4
    message: Str


@response
class CommitOk:
    """Tag 5: the commit is durable."""

    TAG: ClassVar[int] = 5


@response
class Offset:
    """Tag 6: a group's committed offset."""

    TAG: ClassVar[int] = 6
    offset: UInt64


@response
class Welcome:
    """Tag 7: the broker's answer to Hello."""

    TAG: ClassVar[int] = 7
    version: UInt32
    broker: Str
    ops: OpCodes


@response
class BatchProduced:
    """Tag 8: the offsets a ProduceBatch was given (inclusive range)."""

    TAG: ClassVar[int] = 8
    partition: UInt32
    base_offset: UInt64
    last_offset: UInt64


@response
class Batches:
    """Tag 9: stored batches, byte for byte; may be empty at the high watermark."""

    TAG: ClassVar[int] = 9
    log_start: UInt64
    high_watermark: UInt64
    batches: RecordBatches


@item
class PartitionMetadata:
    """The bounds of one partition; its index is its position in ``TopicMetadata.partitions``."""

    log_start: UInt64
    high_watermark: UInt64


@item
class TopicMetadata:
    """One topic of a MetadataResult, its partitions in partition order."""

    name: Str
    partitions: Annotated[tuple[PartitionMetadata, ...], Array(PartitionMetadata)]


@response
class MetadataResult:
    """Tag 10: the answer to Metadata."""

    TAG: ClassVar[int] = 10
    topics: Annotated[tuple[TopicMetadata, ...], Array(TopicMetadata)]


@response
class TopicInfo:
    """Tag 11: a topic's partition count after CreateTopic or AlterTopic."""

    TAG: ClassVar[int] = 11
    topic: Str
    partitions: UInt32


@response
class Groups:
    """Tag 12: the answer to ListGroups."""

    TAG: ClassVar[int] = 12
    groups: StrArray


@item
class GroupOffset:
    """One committed offset with the partition's bounds, so lag needs no second request."""

    topic: Str
    partition: UInt32
    committed: UInt64
    log_start: UInt64
    high_watermark: UInt64

    @property
    def lag(self) -> int:
        """Records the group has yet to read; never negative even if the log was rewound."""
        return max(0, self.high_watermark - max(self.committed, self.log_start))


@response
class GroupOffsets:
    """Tag 13: the answer to DescribeGroup."""

    TAG: ClassVar[int] = 13
    group: Str
    offsets: Annotated[tuple[GroupOffset, ...], Array(GroupOffset)]


@response
class Failure:
    """Tag 14: a failed extension op, with the machine-readable code from rustka.errors."""

    TAG: ClassVar[int] = 14
    code: UInt16
    message: Str


@response
class OutOfRange:
    """Tag 15: FetchBatch outside [log_start, high_watermark]; the bounds allow a reset."""

    TAG: ClassVar[int] = 15
    offset: UInt64
    log_start: UInt64
    high_watermark: UInt64


@response
class TopicDeleted:
    """Tag 16: the answer to DeleteTopic; the topic and its data are gone."""

    TAG: ClassVar[int] = 16
    topic: Str


@item
class LogInfo:
    """One partition of a LogsDescribed topic, in partition order.

    ``dirty_ratio_ppm`` is the share of the log not cleaned yet, in parts per
    million, as the cleaner last measured it (0 on a log that does not
    compact); ``last_clean_ms`` is 0 until a round finished; ``uncleanable`` is
    why the cleaner gave up on the partition, "" when it has not.
    """

    log_start: UInt64
    high_watermark: UInt64
    size_bytes: UInt64
    segments: UInt32
    dirty_ratio_ppm: UInt32
    first_dirty: UInt64
    cleaner_bytes_read: UInt64
    cleaner_bytes_written: UInt64
    last_clean_ms: UInt64
    uncleanable: Str


@item
class TopicLogs:
    """One topic of a LogsDescribed: its cleanup.policy and its partitions' logs."""

    name: Str
    cleanup_policy: Str
    partitions: Annotated[tuple[LogInfo, ...], Array(LogInfo)]


@response
class LogsDescribed:
    """Tag 17: the answer to DescribeLogs."""

    TAG: ClassVar[int] = 17
    topics: Annotated[tuple[TopicLogs, ...], Array(TopicLogs)]


CONFIG_SOURCES: tuple[str, ...] = ("default", "broker", "topic")
"""``TopicConfig.source`` codes: Kafka's default, a broker setting, the topic's own config."""


@item
class TopicConfig:
    """One config of a TopicConfigs answer; ``source`` indexes CONFIG_SOURCES."""

    name: Str
    value: Str
    source: UInt8


@response
class TopicConfigs:
    """Tag 18: a topic's configs, by name (the answer to AlterTopicConfigs and
    DescribeTopicConfigs; after an alter, the configs as they now are)."""

    TAG: ClassVar[int] = 18
    topic: Str
    configs: Annotated[tuple[TopicConfig, ...], Array(TopicConfig)]


@response
class SaslToken:
    """Tag 19: the server's SASL message; ``complete`` 1 once the client is authenticated,
    with the session lifetime (0: none) after which it must authenticate again."""

    TAG: ClassVar[int] = 19
    token: Bytes
    complete: UInt8
    session_lifetime_ms: UInt64


@response
class Acls:
    """Tag 24: ACLs: those created, selected or deleted, in a stable order."""

    TAG: ClassVar[int] = 24
    acls: AclEntries


@response
class LogStart:
    """Tag 25: the answer to DeleteRecords: the partition's log start, now durable."""

    TAG: ClassVar[int] = 25
    topic: Str
    partition: UInt32
    log_start: UInt64


NO_TIME = 0
"""``start_ms`` of a transactional id with no transaction begun (Kafka's -1)."""


@item
class ListedTransaction:
    """One transactional id of a Transactions answer; ``start_ms`` is when its current
    (or last) transaction began, NO_TIME if none has."""

    transactional_id: Str
    producer_id: UInt64
    producer_epoch: UInt16
    state: Str
    timeout_ms: UInt32
    start_ms: UInt64


@response
class Transactions:
    """Tag 26: the answer to ListTransactions, by transactional id."""

    TAG: ClassVar[int] = 26
    transactions: Annotated[tuple[ListedTransaction, ...], Array(ListedTransaction)]


@item
class TxnPartition:
    """A partition of a transaction."""

    topic: Str
    partition: UInt32


TxnPartitions: TypeAlias = Annotated[tuple[TxnPartition, ...], Array(TxnPartition)]


@response
class TransactionDescribed:
    """Tag 27: the answer to DescribeTransaction; ``groups`` are those whose offsets the
    transaction commits (AddOffsetsToTxn)."""

    TAG: ClassVar[int] = 27
    transactional_id: Str
    state: Str
    producer_id: UInt64
    producer_epoch: UInt16
    timeout_ms: UInt32
    start_ms: UInt64
    last_update_ms: UInt64
    partitions: TxnPartitions
    groups: StrArray


@response
class TransactionAborted:
    """Tag 28: what AbortTransaction ended: the producer, the epoch its abort markers
    carry (which fences the producer), the state it ended in and its partitions."""

    TAG: ClassVar[int] = 28
    transactional_id: Str
    producer_id: UInt64
    producer_epoch: UInt16
    state: Str
    partitions: TxnPartitions


@item
class OpenTransaction:
    """A transaction a partition holds open: its producer and where its records begin."""

    producer_id: UInt64
    producer_epoch: UInt16
    first_offset: UInt64


@item
class StableOffset:
    """One partition of a StableOffsets topic, in partition order."""

    last_stable_offset: UInt64
    high_watermark: UInt64
    open: Annotated[tuple[OpenTransaction, ...], Array(OpenTransaction)]


@item
class TopicStableOffsets:
    """One topic of a StableOffsets answer."""

    name: Str
    partitions: Annotated[tuple[StableOffset, ...], Array(StableOffset)]


@response
class StableOffsets:
    """Tag 29: the answer to DescribeStableOffsets."""

    TAG: ClassVar[int] = 29
    topics: Annotated[tuple[TopicStableOffsets, ...], Array(TopicStableOffsets)]


# --------------------------------------------------------------------------- ACL entries
# Between the wire's AclEntry and rustka.security.acl's bindings, for the server and
# the client library alike.


def acl_binding(e: AclEntry) -> AclBinding:
    return AclBinding(
        code_of(ResourceType, e.resource_type),
        e.resource_name,
        code_of(PatternType, e.pattern_type),
        e.principal,
        e.host,
        code_of(Operation, e.operation),
        code_of(Permission, e.permission),
    )


def acl_entry(a: AclBinding) -> AclEntry:
    return AclEntry(
        int(a.resource_type),
        a.resource_name,
        int(a.pattern_type),
        a.principal,
        a.host,
        int(a.operation),
        int(a.permission),
    )


def acl_selector(req: DescribeAcls | DeleteAcls) -> AclBindingFilter:
    """The filter of a DescribeAcls or DeleteAcls: "" matches any name, principal or
    host; InvalidRequest if a code matches nothing."""
    selector = AclBindingFilter(
        code_of(ResourceType, req.resource_type),
        req.resource_name or None,
        code_of(PatternType, req.pattern_type),
        req.principal or None,
        req.host or None,
        code_of(Operation, req.operation),
        code_of(Permission, req.permission),
    )
    try:
        selector.validate()
    except AclError as e:
        raise InvalidRequest(str(e)) from None
    return selector


# --------------------------------------------------------------------------- derived tables

SEED_OPS: tuple[int, ...] = (1, 2, 3, 4)
EXTENSION_OPS: tuple[int, ...] = tuple(sorted(set(_REQUESTS) - set(SEED_OPS)))

# Every declared request or response class; the unions follow the declarations above.
Request: TypeAlias = Union[tuple(spec.cls for spec in _REQUESTS.values())]  # type: ignore[valid-type]  # noqa: UP007
Response: TypeAlias = Union[tuple(spec.cls for spec in _RESPONSES.values())]  # type: ignore[valid-type]  # noqa: UP007

_Fast = Callable[[bytes], Any]
_Encoder = Callable[[Any], list[bytes]]

_FAST_REQUESTS: dict[int, _Fast] = {
    code: spec.decode_fast for code, spec in _REQUESTS.items() if spec.decode_fast is not None
}
_FAST_RESPONSES: dict[int, _Fast] = {
    code: spec.decode_fast for code, spec in _RESPONSES.items() if spec.decode_fast is not None
}
_REQUEST_PARTS: dict[type, _Encoder] = {s.cls: s.parts for s in _REQUESTS.values()}
_RESPONSE_PARTS: dict[type, _Encoder] = {s.cls: s.parts for s in _RESPONSES.values()}
_REQUEST_FRAMES: dict[type, _Encoder] = {s.cls: s.frame for s in _REQUESTS.values()}
_RESPONSE_FRAMES: dict[type, _Encoder] = {s.cls: s.frame for s in _RESPONSES.values()}
RESPONSE_FRAMERS: dict[type, _Encoder] = _RESPONSE_FRAMES
"""Response class -> its compiled framer, for a server's write loop (one lookup, one call);
treat it as read-only. ``response_frame`` is the same with a check of the type."""

MESSAGES: tuple[_Spec, ...] = (*_REQUESTS.values(), *_RESPONSES.values())
"""The declaration behind every message, for tests that drive each one through every path."""


# --------------------------------------------------------------------------- entry points


def _decode_slow(payload: bytes, table: dict[int, _Spec], kind: str) -> Any:
    """Everything but a fast path's success: empty frames, unknown codes, precise errors."""
    code_name = "op" if kind == "request" else "tag"
    if not payload:
        raise InvalidRequest(f"empty frame: a {kind} needs at least its {code_name} byte")
    spec = table.get(payload[0])
    if spec is None:
        raise InvalidRequest(f"unknown {code_name} {payload[0]}")
    return spec.decode_slow(payload)


def decode_request(payload: Buffer) -> Request:
    """Parse one request frame payload (op byte first), or raise InvalidRequest saying why."""
    if type(payload) is not bytes:
        payload = bytes(payload)
    if payload:
        fast = _FAST_REQUESTS.get(payload[0])
        if fast is not None:
            message = fast(payload)
            if message is not None:
                return message  # type: ignore[no-any-return]
    return _decode_slow(payload, _REQUESTS, "request")  # type: ignore[no-any-return]


def decode_response(payload: Buffer) -> Response:
    """Parse one response frame payload (tag byte first), or raise InvalidRequest saying why."""
    if type(payload) is not bytes:
        payload = bytes(payload)
    if payload:
        fast = _FAST_RESPONSES.get(payload[0])
        if fast is not None:
            message = fast(payload)
            if message is not None:
                return message  # type: ignore[no-any-return]
    return _decode_slow(payload, _RESPONSES, "response")  # type: ignore[no-any-return]


def _encoder(table: dict[type, _Encoder], message: object, kind: str) -> _Encoder:
    encoder = table.get(type(message))
    if encoder is None:
        raise TypeError(f"not a rustka {kind}: {type(message).__name__}")
    return encoder


def encode_request(req: Request) -> bytes:
    """The frame payload of ``req`` (without the 4-byte length prefix)."""
    parts = _encoder(_REQUEST_PARTS, req, "request")(req)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def encode_response(resp: Response) -> bytes:
    """The frame payload of ``resp`` (without the 4-byte length prefix)."""
    parts = _encoder(_RESPONSE_PARTS, resp, "response")(resp)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def request_parts(req: Request) -> list[bytes]:
    """Like encode_request, but a ProduceBatch's data stays a separate piece.

    ``b"".join(request_parts(req)) == encode_request(req)``; the pieces suit
    ``transport.writeSequence`` so a large batch is not copied into a new frame.
    """
    return _encoder(_REQUEST_PARTS, req, "request")(req)


def response_parts(resp: Response) -> list[bytes]:
    """Like encode_response, but a Batches response's data stays a separate piece.

    ``b"".join(response_parts(resp)) == encode_response(resp)``.
    """
    return _encoder(_RESPONSE_PARTS, resp, "response")(resp)


def request_frame(req: Request) -> list[bytes]:
    """The whole frame of ``req``, length prefix included, as pieces for writeSequence."""
    return _encoder(_REQUEST_FRAMES, req, "request")(req)


def response_frame(resp: Response) -> list[bytes]:
    """The whole frame of ``resp``, length prefix included, as pieces for writeSequence.

    The server writes every response through this; a fixed-size response (a
    seed ``Produced``) is a single struct call, prefix and all.
    """
    return _encoder(_RESPONSE_FRAMES, resp, "response")(resp)


# --------------------------------------------------------------------------- errors


_SEED_REQUEST_TYPES = tuple(_REQUESTS[op].cls for op in SEED_OPS)


def error_response(request: Request | None, exc: RustkaError) -> Response:
    """The response that reports ``exc`` for ``request`` (None: the frame did not parse).

    Seed ops and unparseable frames get tag 4 ``Error`` so seed clients never see
    a tag they do not know; extension ops get tag 14 ``Failure`` with the error's
    code, except an out-of-range FetchBatch or DeleteRecords, which gets tag 15 with
    the bounds.
    """
    message = str(exc) or type(exc).__name__
    if request is None or isinstance(request, _SEED_REQUEST_TYPES):
        return Error(message)
    if isinstance(exc, OffsetOutOfRange) and isinstance(request, (FetchBatch, DeleteRecords)):
        return OutOfRange(exc.offset, exc.log_start, exc.end)
    code = getattr(exc, "code", RustkaError.code)
    if not isinstance(code, int) or not 0 <= code <= U16.max:
        code = RustkaError.code
    return Failure(code, message)


__all__ = [
    "acl_binding",
    "acl_entry",
    "acl_selector",
    "BATCHES",
    "BYTES",
    "CONFIG_SOURCES",
    "EXTENSION_OPS",
    "HIGH_WATERMARK",
    "MESSAGES",
    "MIN_PROTOCOL_VERSION",
    "NO_TIME",
    "PROTOCOL_VERSION",
    "RESPONSE_FRAMERS",
    "SEED_OPS",
    "STR",
    "U16",
    "U32",
    "U64",
    "U8",
    "Array",
    "Request",
    "Response",
    "WireType",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "error_response",
    "item",
    "request",
    "request_frame",
    "request_parts",
    "response",
    "response_frame",
    "response_parts",
    *(spec.cls.__name__ for spec in MESSAGES),
    *(cls.__name__ for cls in _STRUCT_FIELDS),
]
