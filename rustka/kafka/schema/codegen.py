"""Derivation of decoders, encoders and error counters from `Struct` declarations.

Python source is generated per (struct, version, flexible) the first time it is needed and
cached, so neighbouring fixed-width fields collapse into one `struct` call and nothing is
interpreted per field at run time (rustka/kafka/schema/__init__.py says why).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias

from . import primitives
from .primitives import (
    _NULL32,
    _pack_i,
    _r_clen,
    _r_len,
    read_uvarint,
    skip_tagged_fields,
    write_uvarint,
)
from .types import _MISSING, RECORDS, STRING, Array, Field, Fixed, KafkaCodecError, Struct, Var

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
            self.ns[name] = getattr(primitives, name)
        self._count = 0
        self._cache: dict[tuple[Any, ...], str] = {}

    def _fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def _define(self, name: str, header: str, body: list[str]) -> None:
        src = header + "\n" + "\n".join(_indent(body or ["pass"])) + "\n"
        exec(compile(src, f"<kafka codec {name}>", "exec"), self.ns)

    def _claim(self, prefix: str, *key: Any) -> tuple[str, bool]:
        """The generated function's name for ``key``, and whether it is still to write.

        The name is recorded before its body is generated, so a struct nested in
        itself, or met again while its body is being written, refers to it by name.
        """
        name = self._cache.get(key)
        if name is not None:
            return name, False
        name = self._cache[key] = self._fresh(prefix)
        return name, True

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
        name, new = self._claim("_dfl", "defaults", st, v, flex)
        if new:
            items = ", ".join(
                f"{fld.name!r}: {self.decode_default(fld, v, flex)}" for fld in st.fields
            )
            self._define(name, f"def {name}():", [f"return {{{items}}}"])
        return name

    # -- decoding ------------------------------------------------------------------------

    def decoder(self, st: Struct, v: int, flex: bool) -> str:
        name, new = self._claim("_dec", "dec", st, v, flex)
        if not new:
            return name
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
            read = [f"{var}, pos = {self.decoder(t, v, flex)}(buf, pos)"]
            if not nullable:
                return read
            # A nullable struct (KIP-848's Assignment): int8 -1 for null, 1 before it.
            return [
                "if pos >= len(buf):",
                "    raise _Err('nullable struct marker overruns the buffer')",
                "if buf[pos] == 0xFF:",
                f"    {var} = None",
                "    pos += 1",
                "else:",
                "    pos += 1",
                *_indent(read, "    "),
            ]
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
        name, new = self._claim("_enc", "enc", st, v, flex)
        if not new:
            return name
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
            write = f"{self.encoder(t, v, flex)}(w, parts, {expr})"
            if not nullable:
                return [write]
            return [
                f"if {expr} is None:",
                "    w.append(0xFF)",
                "else:",
                "    w.append(1)",
                f"    {write}",
            ]
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
