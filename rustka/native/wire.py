"""The native wire engine: frame pieces, wire types, and codecs derived from declarations.

A message is declared (rustka/native/messages.py) as a class whose annotations name its
wire types in order and whose ``OP`` or ``TAG`` is its code; ``@request``/``@response``
register it here, and every way of reading or writing it is derived from that
declaration when it is registered:

- a checking reader, which names the field and position of any problem;
- a checking writer, which names the field of a value that does not fit;
- for messages without arrays, straight-line fast paths compiled from the
  field list (one ``struct`` call per run of fixed-size fields) for decoding,
  encoding and framing. They fall back to the checking paths on anything
  unusual, so errors are always reported the same way.

Every length and count read from the wire is checked against the bytes that
remain *before* anything is allocated, so a hostile frame costs at most its own
size. Malformed input always raises :class:`~rustka.errors.InvalidRequest` with
a message naming the problem; values that do not fit their wire type raise
``ValueError`` on encode, because that is a programming error, not bad input.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeAlias, TypeVar, get_type_hints

from rustka.errors import InvalidRequest
from rustka.record.batch import value_class

_T = TypeVar("_T")

Buffer: TypeAlias = bytes | bytearray | memoryview


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
    """The (name, wire type) pairs of a value class, in declaration order.

    Annotations are read in the declaring module (rustka/native/messages.py for the
    protocol's own), with this module's wire types as a fallback.
    """
    namespace = {**globals(), **vars(sys.modules[cls.__module__])}
    hints = get_type_hints(cls, globalns=namespace, include_extras=True)
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
