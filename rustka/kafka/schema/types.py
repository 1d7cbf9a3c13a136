"""The declaration vocabulary of the Kafka codec: primitive types, `Field`, `Struct`.

A message is declared once as a tree of these (rustka/kafka/messages/); Kafka's version
notation ("3+", "2-4") is parsed here so declarations read like Kafka's JSON schemas.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final


class KafkaCodecError(ValueError):
    """Malformed, truncated or unencodable Kafka data.

    A ValueError subclass so callers that already treat bad input as ValueError keep
    working; the front-end catches exactly this type to answer or drop a connection.
    """


MAX_VERSION: Final = 0x7FFF
"""Upper bound used for open ranges such as "3+" (api versions are int16)."""


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
        if self.null_range is not None and isinstance(type_, Fixed):
            raise ValueError(f"field {name!r}: only strings, bytes, arrays and structs can be null")
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
