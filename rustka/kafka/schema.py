"""Kafka wire primitives, the field-declaration machinery and the derived codecs.

Why this shape: every message of every API version is described exactly once, as a tree of
`Field` objects (see `messages.py`). Both directions of the codec are *derived* from that
tree, so a version difference is one edit in one place and the encoder can never disagree
with the decoder. Derivation generates Python source per (struct, version, flexible) the
first time it is needed and caches the resulting function: neighbouring fixed-width fields
collapse into one `struct` call and there is no per-field interpretation at run time, which
keeps the hot Produce-decode and Fetch-encode paths cheap.

Decoders only ever raise `KafkaCodecError` on hostile input: every length is checked against
the bytes that remain *before* anything is allocated, and the public entry points translate
the few low-level errors (`struct.error`, `IndexError`, `UnicodeDecodeError`) they can hit.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, TypeAlias

__all__ = [
    "BIG_CHUNK",
    "BOOL",
    "BYTES",
    "FLOAT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "MAX_VERSION",
    "RECORDS",
    "STRING",
    "UINT16",
    "UUID",
    "ApiSpec",
    "Array",
    "Field",
    "Fixed",
    "KafkaCodecError",
    "RequestHeader",
    "Struct",
    "Var",
    "as_view",
    "compile_decoder",
    "compile_encoder",
    "compile_error_counter",
    "decode_struct",
    "encode_struct",
    "parse_versions",
    "read_request_header",
    "read_uvarint",
    "skip_tagged_fields",
    "write_uvarint",
]


class KafkaCodecError(ValueError):
    """Malformed, truncated or unencodable Kafka data.

    A ValueError subclass so callers that already treat bad input as ValueError keep
    working; the front-end catches exactly this type to answer or drop a connection.
    """


MAX_VERSION: Final = 0x7FFF
"""Upper bound used for open ranges such as "3+" (api versions are int16)."""

#: A record chunk at least this large is handed to the transport as its own part instead
#: of being copied into the response buffer (see `encode_response_parts`).
BIG_CHUNK: Final = 4096


def parse_versions(spec: str) -> tuple[int, int] | None:
    """Parse Kafka's version-range notation: "3+", "2-4", "5" or "none".

    Declarations use the same notation as Kafka's JSON schemas so that checking one against
    the other is a matter of reading, not translating.
    """
    text = spec.strip()
    if text == "none":
        return None
    try:
        if text.endswith("+"):
            lo, hi = int(text[:-1]), MAX_VERSION
        elif "-" in text:
            a, b = text.split("-", 1)
            lo, hi = int(a), int(b)
        else:
            lo = hi = int(text)
    except ValueError:
        raise ValueError(f"bad version range {spec!r}") from None
    if not 0 <= lo <= hi <= MAX_VERSION:
        raise ValueError(f"bad version range {spec!r}")
    return lo, hi


# ---------------------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Fixed:
    """A fixed-width big-endian primitive; `fmt` is its `struct` format character(s)."""

    name: str
    fmt: str
    size: int
    zero: Any

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False)
class Var:
    """A length-prefixed primitive: "string", "bytes" or "records"."""

    name: str
    zero: Any

    def __repr__(self) -> str:
        return self.name


INT8: Final = Fixed("int8", "b", 1, 0)
INT16: Final = Fixed("int16", "h", 2, 0)
UINT16: Final = Fixed("uint16", "H", 2, 0)
INT32: Final = Fixed("int32", "i", 4, 0)
INT64: Final = Fixed("int64", "q", 8, 0)
FLOAT64: Final = Fixed("float64", "d", 8, 0.0)
BOOL: Final = Fixed("bool", "?", 1, False)
UUID: Final = Fixed("uuid", "16s", 16, bytes(16))
STRING: Final = Var("string", "")
BYTES: Final = Var("bytes", b"")
#: Record batches: decoded as a zero-copy memoryview slice of the input; encoded from
#: bytes-like data or a list of bytes-like chunks (kept apart for writeSequence).
RECORDS: Final = Var("records", b"")


@dataclass(frozen=True, eq=False)
class Array:
    """An array of a primitive or of a nested struct."""

    item: Fixed | Var | Struct

    def __post_init__(self) -> None:
        if isinstance(self.item, Var) and self.item is RECORDS:
            raise ValueError("arrays of records are not a Kafka type")
        if not isinstance(self.item, Fixed | Var | Struct):
            raise ValueError(f"unsupported array item {self.item!r}")


_MISSING: Final[Any] = object()


class Field:
    """One field of a struct, as in Kafka's JSON schemas.

    `versions`, `nullable` and `tagged_versions` use Kafka's range notation. A `type_` given
    as a list of fields means "array of this nested struct", the most common shape. The
    default, when not given, follows Kafka: null where nullable, else zero/empty.
    """

    __slots__ = ("default", "name", "null_range", "range", "tag", "tag_range", "type")

    def __init__(
        self,
        name: str,
        type_: Fixed | Var | Array | Struct | list[Field],
        versions: str = "0+",
        *,
        nullable: str | None = None,
        default: Any = _MISSING,
        tag: int | None = None,
        tagged_versions: str | None = None,
    ) -> None:
        if not name.isidentifier() or name != name.lower():
            raise ValueError(f"field name {name!r} must be a snake_case identifier")
        if isinstance(type_, list):
            type_ = Array(Struct(type_, name))
        if not isinstance(type_, Fixed | Var | Array | Struct):
            raise ValueError(f"field {name!r}: unsupported type {type_!r}")
        rng = parse_versions(versions)
        if rng is None:
            raise ValueError(f"field {name!r} exists in no version")
        self.name = name
        self.type: Fixed | Var | Array | Struct = type_
        self.range: tuple[int, int] = rng
        self.null_range = parse_versions(nullable) if nullable is not None else None
        if self.null_range is not None and isinstance(type_, Fixed | Struct):
            raise ValueError(f"field {name!r}: only strings, bytes and arrays can be null")
        self.default = default
        self.tag = tag
        if tag is None:
            if tagged_versions is not None:
                raise ValueError(f"field {name!r}: tagged_versions without a tag")
            self.tag_range: tuple[int, int] | None = None
        else:
            if tag < 0:
                raise ValueError(f"field {name!r}: negative tag")
            self.tag_range = parse_versions(tagged_versions or versions)

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.type!r}, {self.range})"

    def present(self, version: int) -> bool:
        lo, hi = self.range
        return lo <= version <= hi

    def nullable_in(self, version: int) -> bool:
        rng = self.null_range
        return rng is not None and rng[0] <= version <= rng[1]

    def mode(self, version: int, flexible: bool) -> str:
        """Classify the field for one version: "absent", "regular" or "tagged".

        A tagged field can only travel in a tagged-field section, so in a non-flexible
        version it is absent even if its version range covers it.
        """
        if not self.present(version):
            return "absent"
        rng = self.tag_range
        if rng is not None and rng[0] <= version <= rng[1]:
            return "tagged" if flexible else "absent"
        return "regular"


class Struct:
    """An ordered list of fields: a message body, an array element or a nested struct."""

    __slots__ = ("fields", "name")

    def __init__(self, fields: Sequence[Field], name: str = "") -> None:
        self.fields: tuple[Field, ...] = tuple(fields)
        self.name = name
        names = [f.name for f in self.fields]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"struct {name!r}: duplicate field names {sorted(dupes)}")
        tags = [f.tag for f in self.fields if f.tag is not None]
        if len(tags) != len(set(tags)):
            raise ValueError(f"struct {name!r}: duplicate tags")

    def __repr__(self) -> str:
        return f"Struct({self.name!r})"


# ---------------------------------------------------------------------------------------
# Run-time primitives used by the generated code
# ---------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------
# Code generation
# ---------------------------------------------------------------------------------------

_READERS: Final = {
    ("string", False): "_r_str",
    ("string", True): "_r_cstr",
    ("bytes", False): "_r_bytes",
    ("bytes", True): "_r_cbytes",
    ("records", False): "_r_rec",
    ("records", True): "_r_crec",
}
_WRITERS: Final = {
    ("string", False): "_w_str",
    ("string", True): "_w_cstr",
    ("bytes", False): "_w_bytes",
    ("bytes", True): "_w_cbytes",
    ("records", False): "_w_records",
    ("records", True): "_w_records",
}

Decoder: TypeAlias = Callable[[memoryview, int], tuple[dict[str, Any], int]]
Encoder: TypeAlias = Callable[[bytearray, list[Any], Mapping[str, Any]], None]
ErrorCounter: TypeAlias = Callable[[Mapping[str, Any], dict[int, int]], None]


def _indent(lines: list[str], prefix: str = "    ") -> list[str]:
    return [prefix + line for line in lines]


class _Codegen:
    """Generates and caches one Python function per (struct, version, flexible, direction).

    All generated functions share one namespace so they can call each other by name.
    """

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {
            "_Err": KafkaCodecError,
            "_EMPTY": {},
            "_unpack_from": struct.unpack_from,
            "_pack": struct.pack,
            "_pack_i": _pack_i,
            "_NULL32": _NULL32,
            "_r_uv": read_uvarint,
            "_w_uv": write_uvarint,
            "_skip_tags": skip_tagged_fields,
            "_r_len": _r_len,
            "_r_clen": _r_clen,
        }
        for name in (*_READERS.values(), *_WRITERS.values()):
            self.ns[name] = globals()[name]
        self._count = 0
        self._cache: dict[tuple[Any, ...], str] = {}

    def _fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def _define(self, name: str, header: str, body: list[str]) -> None:
        src = header + "\n" + "\n".join(_indent(body or ["pass"])) + "\n"
        exec(compile(src, f"<kafka codec {name}>", "exec"), self.ns)

    def _struct_fn(self, fmt: str, kind: str) -> str:
        key = (kind, fmt)
        name = self._cache.get(key)
        if name is None:
            name = self._fresh("_" + kind)
            s = struct.Struct(fmt)
            self.ns[name] = s.unpack_from if kind == "unpack" else s.pack
            self._cache[key] = name
        return name

    # -- sizes and defaults --------------------------------------------------------------

    def min_size(self, t: Fixed | Var | Array | Struct, v: int, flex: bool) -> int:
        """The fewest bytes one value of `t` can occupy: the allocation guard's unit."""
        if isinstance(t, Fixed):
            return t.size
        if isinstance(t, Var):
            return 1 if flex else (2 if t is STRING else 4)
        if isinstance(t, Array):
            return 1 if flex else 4
        total = 1 if flex else 0
        for fld in t.fields:
            if fld.mode(v, flex) == "regular":
                total += self.min_size(fld.type, v, flex)
        return total

    def decode_default(self, fld: Field, v: int, flex: bool) -> str:
        """Source for a fresh default value (lists and dicts must not be shared)."""
        if fld.default is not _MISSING:
            return repr(fld.default)
        if fld.nullable_in(v):
            return "None"
        t = fld.type
        if isinstance(t, Array):
            return "[]"
        if isinstance(t, Struct):
            return self.defaults(t, v, flex) + "()"
        return repr(t.zero)

    def encode_default(self, fld: Field, v: int) -> str:
        if fld.default is not _MISSING:
            return repr(fld.default)
        if fld.nullable_in(v):
            return "None"
        t = fld.type
        if isinstance(t, Array):
            return "()"
        if isinstance(t, Struct):
            return "_EMPTY"
        return repr(t.zero)

    def defaults(self, st: Struct, v: int, flex: bool) -> str:
        key = ("defaults", st, v, flex)
        name = self._cache.get(key)
        if name is None:
            name = self._fresh("_dfl")
            self._cache[key] = name
            items = ", ".join(
                f"{fld.name!r}: {self.decode_default(fld, v, flex)}" for fld in st.fields
            )
            self._define(name, f"def {name}():", [f"return {{{items}}}"])
        return name

    # -- decoding ------------------------------------------------------------------------

    def decoder(self, st: Struct, v: int, flex: bool) -> str:
        key = ("dec", st, v, flex)
        name = self._cache.get(key)
        if name is not None:
            return name
        name = self._fresh("_dec")
        self._cache[key] = name
        body: list[str] = []
        values: list[tuple[str, str]] = []
        pending: list[tuple[str, Fixed]] = []
        tagged: list[tuple[Field, str]] = []
        for i, fld in enumerate(st.fields):
            var = f"v{i}"
            mode = fld.mode(v, flex)
            if mode == "absent":
                values.append((fld.name, self.decode_default(fld, v, flex)))
                continue
            values.append((fld.name, var))
            if mode == "tagged":
                tagged.append((fld, var))
            elif isinstance(fld.type, Fixed):
                pending.append((var, fld.type))
            else:
                self._flush_unpack(body, pending)
                body += self._read(fld.type, fld.nullable_in(v), v, flex, var)
        self._flush_unpack(body, pending)
        if flex:
            body += self._read_tags(tagged, v, flex)
        items = ", ".join(f"{n!r}: {e}" for n, e in values)
        body.append(f"return {{{items}}}, pos")
        self._define(name, f"def {name}(buf, pos):", body)
        return name

    def _flush_unpack(self, body: list[str], pending: list[tuple[str, Fixed]]) -> None:
        if not pending:
            return
        fmt = ">" + "".join(t.fmt for _, t in pending)
        fn = self._struct_fn(fmt, "unpack")
        targets = ", ".join(var for var, _ in pending)
        body.append(f"{targets}, = {fn}(buf, pos)")
        body.append(f"pos += {struct.calcsize(fmt)}")
        pending.clear()

    def _read(self, t: Any, nullable: bool, v: int, flex: bool, var: str) -> list[str]:
        if isinstance(t, Fixed):
            fn = self._struct_fn(">" + t.fmt, "unpack")
            return [f"{var}, = {fn}(buf, pos)", f"pos += {t.size}"]
        if isinstance(t, Var):
            return [f"{var}, pos = {_READERS[t.name, flex]}(buf, pos, {nullable})"]
        if isinstance(t, Struct):
            return [f"{var}, pos = {self.decoder(t, v, flex)}(buf, pos)"]
        item = t.item
        minsize = max(1, self.min_size(item, v, flex))
        lines = [
            f"n, pos = {'_r_clen' if flex else '_r_len'}(buf, pos, {nullable}, {minsize})",
            "if n < 0:",
            f"    {var} = None",
            "else:",
        ]
        if isinstance(item, Fixed) and len(item.fmt) == 1:
            lines += [
                f"    {var} = list(_unpack_from('>%d{item.fmt}' % n, buf, pos))",
                f"    pos += n * {item.size}",
            ]
        else:
            lines += [f"    {var} = []", "    for _ in range(n):"]
            lines += _indent(self._read(item, False, v, flex, "x"), "        ")
            lines.append(f"        {var}.append(x)")
        return lines

    def _read_tags(self, tagged: list[tuple[Field, str]], v: int, flex: bool) -> list[str]:
        if not tagged:
            return ["pos = _skip_tags(buf, pos)"]
        lines = [f"{var} = {self.decode_default(fld, v, flex)}" for fld, var in tagged]
        lines += [
            "nt, pos = _r_uv(buf, pos)",
            "for _ in range(nt):",
            "    tag, pos = _r_uv(buf, pos)",
            "    sz, pos = _r_uv(buf, pos)",
            "    e = pos + sz",
            "    if e > len(buf):",
            "        raise _Err('tagged field overruns the buffer')",
        ]
        keyword = "if"
        for fld, var in sorted(tagged, key=lambda fv: fv[0].tag or 0):
            fn = self._tag_reader(fld, v, flex)
            lines += [f"    {keyword} tag == {fld.tag}:", f"        {var} = {fn}(buf[pos:e])"]
            keyword = "elif"
        lines.append("    pos = e")
        return lines

    def _tag_reader(self, fld: Field, v: int, flex: bool) -> str:
        name = self._fresh("_tagr")
        body = ["pos = 0"]
        body += self._read(fld.type, fld.nullable_in(v), v, flex, "val")
        body += [
            "if pos != len(buf):",
            f"    raise _Err('tagged field {fld.name} has a wrong length')",
            "return val",
        ]
        self._define(name, f"def {name}(buf):", body)
        return name

    # -- encoding ------------------------------------------------------------------------

    def encoder(self, st: Struct, v: int, flex: bool) -> str:
        key = ("enc", st, v, flex)
        name = self._cache.get(key)
        if name is not None:
            return name
        name = self._fresh("_enc")
        self._cache[key] = name
        body = ["g = d.get"]
        pending: list[tuple[str, Fixed]] = []
        tagged: list[Field] = []
        for fld in st.fields:
            mode = fld.mode(v, flex)
            if mode == "absent":
                continue
            if mode == "tagged":
                tagged.append(fld)
                continue
            expr = f"g({fld.name!r}, {self.encode_default(fld, v)})"
            if isinstance(fld.type, Fixed):
                pending.append((expr, fld.type))
            else:
                self._flush_pack(body, pending)
                body += self._write(fld.type, fld.nullable_in(v), v, flex, expr, fld.name)
        self._flush_pack(body, pending)
        if flex:
            body += self._write_tags(tagged, v, flex)
        self._define(name, f"def {name}(w, parts, d):", body)
        return name

    def _flush_pack(self, body: list[str], pending: list[tuple[str, Fixed]]) -> None:
        if not pending:
            return
        fn = self._struct_fn(">" + "".join(t.fmt for _, t in pending), "pack")
        body.append(f"w += {fn}({', '.join(expr for expr, _ in pending)})")
        pending.clear()

    def _write(
        self, t: Any, nullable: bool, v: int, flex: bool, expr: str, label: str
    ) -> list[str]:
        if isinstance(t, Fixed):
            return [f"w += {self._struct_fn('>' + t.fmt, 'pack')}({expr})"]
        if isinstance(t, Var):
            fn = _WRITERS[t.name, flex]
            if t is RECORDS:
                return [f"{fn}(w, parts, {expr}, {nullable}, {label!r}, {flex})"]
            return [f"{fn}(w, {expr}, {nullable}, {label!r})"]
        if isinstance(t, Struct):
            return [f"{self.encoder(t, v, flex)}(w, parts, {expr})"]
        lines = [f"x = {expr}", "if x is None:"]
        if nullable:
            lines.append("    w.append(0)" if flex else "    w += _NULL32")
        else:
            lines.append(f"    raise _Err('{label} is not nullable in this version')")
        lines.append("else:")
        lines.append("    _w_uv(w, len(x) + 1)" if flex else "    w += _pack_i(len(x))")
        item = t.item
        if isinstance(item, Fixed) and len(item.fmt) == 1:
            lines.append(f"    w += _pack('>%d{item.fmt}' % len(x), *x)")
        else:
            lines.append("    for y in x:")
            lines += _indent(self._write(item, False, v, flex, "y", label + "[]"), "        ")
        return lines

    def _write_tags(self, tagged: list[Field], v: int, flex: bool) -> list[str]:
        if not tagged:
            return ["w.append(0)"]
        lines = ["tg = []"]
        for fld in sorted(tagged, key=lambda f: f.tag or 0):
            dflt = self.encode_default(fld, v)
            t = fld.type
            if isinstance(t, Array):
                cond = "x is not None" if fld.nullable_in(v) else "x"
            elif isinstance(t, Struct):
                cond = "x"
            else:
                cond = f"x != {dflt}"
            lines += [
                f"x = g({fld.name!r}, {dflt})",
                f"if {cond}:",
                f"    tg.append(({fld.tag}, {self._tag_writer(fld, v, flex)}(x)))",
            ]
        lines += [
            "_w_uv(w, len(tg))",
            "for t, b in tg:",
            "    _w_uv(w, t)",
            "    _w_uv(w, len(b))",
            "    w += b",
        ]
        return lines

    def _tag_writer(self, fld: Field, v: int, flex: bool) -> str:
        name = self._fresh("_tagw")
        body = ["w = bytearray()", "parts = []"]
        body += self._write(fld.type, fld.nullable_in(v), v, flex, "x", fld.name)
        body += [
            "if parts:",
            "    parts.append(bytes(w))",
            "    return b''.join(parts)",
            "return bytes(w)",
        ]
        self._define(name, f"def {name}(x):", body)
        return name


_CODEGEN: Final = _Codegen()


def compile_decoder(st: Struct, version: int, flexible: bool) -> Decoder:
    """The derived decoder `(buf: memoryview, pos) -> (dict, new_pos)` for one version.

    The buffer must end where the message ends: fixed-width reads rely on it for bounds.
    """
    return _CODEGEN.ns[_CODEGEN.decoder(st, version, flexible)]  # type: ignore[no-any-return]


def compile_encoder(st: Struct, version: int, flexible: bool) -> Encoder:
    """The derived encoder `(w: bytearray, parts: list, body) -> None` for one version.

    It appends to `w`; a big records chunk flushes `w` into `parts` and is appended to
    `parts` itself, so the caller finishes with `_finish(w, parts)`.
    """
    return _CODEGEN.ns[_CODEGEN.encoder(st, version, flexible)]  # type: ignore[no-any-return]


_DECODE_ERRORS: Final = (struct.error, IndexError, ValueError)
_ENCODE_ERRORS: Final = (struct.error, TypeError, AttributeError, ValueError, OverflowError)


def as_view(buf: bytes | bytearray | memoryview) -> memoryview:
    """A flat byte view, so slices (records) never copy and indexing yields ints."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def _finish(w: bytearray, parts: list[Any]) -> list[Any]:
    if not parts:
        return [bytes(w)]
    if w:
        parts.append(bytes(w))
    return parts


def decode_struct(
    st: Struct, version: int, flexible: bool, buf: bytes | memoryview, pos: int = 0
) -> tuple[dict[str, Any], int]:
    """Decode one struct at `pos`; returns the dict and the offset just past it."""
    mv = as_view(buf)
    try:
        return compile_decoder(st, version, flexible)(mv, pos)
    except KafkaCodecError:
        raise
    except _DECODE_ERRORS as exc:
        raise KafkaCodecError(f"malformed {st.name or 'struct'} v{version}: {exc}") from exc


def encode_struct(st: Struct, version: int, flexible: bool, body: Mapping[str, Any]) -> list[Any]:
    """Encode one struct into a list of bytes-like parts (see `compile_encoder`)."""
    w = bytearray()
    parts: list[Any] = []
    try:
        compile_encoder(st, version, flexible)(w, parts, body)
    except KafkaCodecError:
        raise
    except _ENCODE_ERRORS as exc:
        raise KafkaCodecError(f"cannot encode {st.name or 'struct'} v{version}: {exc}") from exc
    return _finish(w, parts)


# The steps from a struct to its error codes: (field name, None) for an ``error_code``
# field, (field name, (is_array, steps)) for a nested struct or array of structs that
# holds one somewhere; fields on no such way are not in the plan.
_ErrorSteps: TypeAlias = tuple[tuple[str, "tuple[bool, _ErrorSteps] | None"], ...]


def _error_steps(st: Struct, version: int, flexible: bool) -> _ErrorSteps:
    steps: list[tuple[str, tuple[bool, _ErrorSteps] | None]] = []
    for fld in st.fields:
        if fld.mode(version, flexible) == "absent":
            continue
        t = fld.type
        if fld.name == "error_code" and isinstance(t, Fixed):
            steps.append((fld.name, None))
            continue
        inner = t.item if isinstance(t, Array) else t
        if isinstance(inner, Struct):
            sub = _error_steps(inner, version, flexible)
            if sub:
                steps.append((fld.name, (isinstance(t, Array), sub)))
    return tuple(steps)


def _count_errors(steps: _ErrorSteps, body: Mapping[str, Any], out: dict[int, int]) -> None:
    for name, sub in steps:
        value = body.get(name)
        if not value:
            continue
        if sub is None:
            out[value] = out.get(value, 0) + 1
        elif sub[0]:
            for item in value:
                _count_errors(sub[1], item, out)
        else:
            _count_errors(sub[1], value, out)


def compile_error_counter(st: Struct, version: int, flexible: bool) -> ErrorCounter:
    """``count(body, out)``: add each non-zero ``error_code`` a body carries in this
    version to ``out`` (code -> times), as the encoder would send them.

    Derived from the declaration like the codecs: only the fields on the way to an
    error code are looked at, so counting a Produce answer for the per-API
    statistics reads its partitions' codes and nothing else, where a walk of every
    value of the body visited all of it on every request.
    """
    return functools.partial(_count_errors, _error_steps(st, version, flexible))


# ---------------------------------------------------------------------------------------
# APIs and headers
# ---------------------------------------------------------------------------------------


class RequestHeader(NamedTuple):
    """Request header v1/v2 fields (v2 only adds a tagged-field section, skipped here)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, eq=False)
class ApiSpec:
    """One API: what we advertise and how each of its versions is laid out.

    `flexible_from` is the first flexible version according to Kafka's schema even when it
    lies above `max_version`: it decides the request header version of a request the
    client sent at a version we do not support, so the header can still be parsed.
    """

    key: int
    name: str
    min_version: int
    max_version: int
    flexible_from: int | None
    request: Struct
    response: Struct
    #: ApiVersions answers with header v0 even for flexible versions: the client parses it
    #: before it knows anything about the broker.
    response_header_v0_always: bool = False
    #: The lowest version ApiVersions lists, when it is below `min_version`: Produce is
    #: listed from v0, as Kafka 4.0 lists it (KAFKA-18659), because librdkafka up to
    #: 2.11 compresses only for brokers that list Produce v0. Versions below
    #: `min_version` are still refused when sent.
    advertised_min_version: int | None = None
    _compiled: dict[tuple[int, bool], tuple[Decoder, Encoder]] = field(
        default_factory=dict, init=False, repr=False
    )
    _error_counters: dict[int, ErrorCounter] = field(default_factory=dict, init=False, repr=False)

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    @property
    def advertised_min(self) -> int:
        """The min version ApiVersions lists (see `advertised_min_version`)."""
        lowest = self.advertised_min_version
        return self.min_version if lowest is None else lowest

    def is_flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from

    def request_header_version(self, version: int) -> int:
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        if self.response_header_v0_always or not self.is_flexible(version):
            return 0
        return 1

    def codec(self, version: int, is_request: bool) -> tuple[Decoder, Encoder]:
        """The compiled (decoder, encoder) pair for one version and direction, cached."""
        key = (version, is_request)
        pair = self._compiled.get(key)
        if pair is None:
            if not self.supports(version):
                raise KafkaCodecError(f"{self.name} v{version} is not supported")
            st = self.request if is_request else self.response
            flex = self.is_flexible(version)
            pair = (compile_decoder(st, version, flex), compile_encoder(st, version, flex))
            self._compiled[key] = pair
        return pair

    def response_error_counter(self, version: int) -> ErrorCounter:
        """`compile_error_counter` of this version's response, cached."""
        counter = self._error_counters.get(version)
        if counter is None:
            if not self.supports(version):
                raise KafkaCodecError(f"{self.name} v{version} is not supported")
            counter = compile_error_counter(self.response, version, self.is_flexible(version))
            self._error_counters[version] = counter
        return counter

    def _decode(self, version: int, is_request: bool, mv: memoryview, pos: int) -> dict[str, Any]:
        dec = self.codec(version, is_request)[0]
        try:
            return dec(mv, pos)[0]
        except KafkaCodecError:
            raise
        except _DECODE_ERRORS as exc:
            kind = "request" if is_request else "response"
            raise KafkaCodecError(f"malformed {self.name} v{version} {kind}: {exc}") from exc

    def _encode(
        self, version: int, is_request: bool, w: bytearray, body: Mapping[str, Any]
    ) -> list[Any]:
        enc = self.codec(version, is_request)[1]
        parts: list[Any] = []
        try:
            enc(w, parts, body)
        except KafkaCodecError:
            raise
        except _ENCODE_ERRORS as exc:
            kind = "request" if is_request else "response"
            raise KafkaCodecError(f"cannot encode {self.name} v{version} {kind}: {exc}") from exc
        return _finish(w, parts)

    def decode_request(self, version: int, buf: bytes | memoryview, pos: int) -> dict[str, Any]:
        return self._decode(version, True, as_view(buf), pos)

    def encode_request(
        self, version: int, correlation_id: int, client_id: str | None, body: Mapping[str, Any]
    ) -> bytes:
        self.codec(version, True)  # refuse unsupported versions before building a header
        w = bytearray()
        try:
            w += _pack_hhi(self.key, version, correlation_id)
            _w_str(w, client_id, True, "client_id")
        except (struct.error, AttributeError) as exc:
            raise KafkaCodecError(f"cannot encode request header: {exc}") from exc
        if self.request_header_version(version) == 2:
            w.append(0)
        return b"".join(self._encode(version, True, w, body))

    def encode_response_parts(
        self, version: int, correlation_id: int, body: Mapping[str, Any]
    ) -> list[Any]:
        self.codec(version, False)
        try:
            w = bytearray(_pack_i(correlation_id))
        except struct.error as exc:
            raise KafkaCodecError(f"cannot encode correlation id: {exc}") from exc
        if self.response_header_version(version) == 1:
            w.append(0)
        return self._encode(version, False, w, body)

    def encode_response(self, version: int, correlation_id: int, body: Mapping[str, Any]) -> bytes:
        parts = self.encode_response_parts(version, correlation_id, body)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def decode_response(self, version: int, buf: bytes | memoryview) -> tuple[int, dict[str, Any]]:
        self.codec(version, False)
        mv = as_view(buf)
        try:
            (correlation_id,) = _unpack_i(mv, 0)
            pos = 4
            if self.response_header_version(version) == 1:
                pos = skip_tagged_fields(mv, pos)
        except KafkaCodecError:
            raise
        except _DECODE_ERRORS as exc:
            raise KafkaCodecError(f"malformed response header: {exc}") from exc
        return correlation_id, self._decode(version, False, mv, pos)


def read_request_header(
    buf: bytes | memoryview, apis: Mapping[int, ApiSpec]
) -> tuple[RequestHeader, int]:
    """Parse a request header; returns it and the offset where the body starts.

    Header v2 (flexible request versions) keeps client_id as a classic int16 string and adds
    a tagged-field section. Flexibility is judged from Kafka's threshold even for versions
    we do not support; an unknown api key is read as header v1.
    """
    mv = as_view(buf)
    try:
        key, version, correlation_id = _unpack_hhi(mv, 0)
        client_id, pos = _r_str(mv, 8, True)
        spec = apis.get(key)
        if spec is not None and spec.is_flexible(version):
            pos = skip_tagged_fields(mv, pos)
    except KafkaCodecError:
        raise
    except _DECODE_ERRORS as exc:
        raise KafkaCodecError(f"malformed request header: {exc}") from exc
    return RequestHeader(key, version, correlation_id, client_id), pos
