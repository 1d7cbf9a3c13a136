"""Avro schemas: parsed and checked by fastavro, compared in a canonical form, and a
record's bytes decoded with fastavro's reader.

Two spellings of one schema share the canonical form: key order and whitespace do
not count, `{"type": "int"}` is `"int"`, and every named type carries its full name
(`name` and `namespace` both written). Docs, defaults, aliases and custom properties
stay: they are part of the schema (Confluent keeps them in its canonical text too)."""

from __future__ import annotations

import datetime
import decimal
import io
import uuid
from typing import Any

import fastavro

# The pure-Python reader, for records of recursive schemas (AvroSchema.decode).
import fastavro._read_py as fastavro_py

from rustka.schema_registry.parsed import (
    References,
    SchemaError,
    canonical_json,
    load_json_document,
)

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED_KINDS = frozenset({"record", "error", "enum", "fixed"})


class AvroSchema:
    """A parsed Avro schema. `tree` is the canonical structure: named types are
    written in full where they are defined and referred to by full name after;
    `named` maps every full name this schema can refer to (its own and its
    references') to its definition."""

    schema_type = "AVRO"

    def __init__(self, text: str, references: References = ()) -> None:
        self.text = text
        raw = load_json_document(text, "Avro schema")
        self.named: dict[str, dict[str, Any]] = {}
        fastavro_named: dict[str, Any] = {}
        for name, ref in references:
            if not isinstance(ref, AvroSchema):
                raise SchemaError(f"reference {name!r} is a {ref.schema_type} schema, not AVRO")
            self.named.update(ref.named)
            fastavro_named.update(ref.fastavro_named)
        try:
            self.parsed = fastavro.parse_schema(raw, named_schemas=fastavro_named)
        except (fastavro.schema.SchemaParseException, fastavro.schema.UnknownType) as exc:
            raise SchemaError(f"invalid Avro schema: {describe(exc)}") from None
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SchemaError(f"invalid Avro schema: {describe(exc)}") from None
        self.fastavro_named = fastavro_named
        try:
            self.tree = Canonicaliser(self.named).walk(raw, "")
        except (KeyError, TypeError, AttributeError) as exc:
            raise SchemaError(f"invalid Avro schema: cannot read {exc}") from None
        self._canonical = canonical_json(self.tree)
        shapes = Shapes(self.tree, self.named)
        self.recursive = shapes.recursive()
        self.empty_array_items = shapes.empty_array_items()

    def canonical(self) -> str:
        return self._canonical

    def normalized(self) -> str:
        return self._canonical

    def decode(self, payload: bytes) -> Any:
        """fastavro's compiled reader recurses in C: data of a recursive schema nested
        deeply enough (a few hundred kilobytes of it) overflows the stack and kills the
        process, so those schemas' records go through its pure-Python reader, whose
        recursion Python bounds. An array of items that take no bytes can claim any
        length in no bytes, so such records are not decoded at all."""
        if self.empty_array_items:
            raise SchemaError(
                "records of this schema are not decoded: it has an array of items that take"
                " no bytes (null or empty records), whose length the bytes cannot bound"
            )
        reader = fastavro_py.schemaless_reader if self.recursive else fastavro.schemaless_reader
        stream = io.BytesIO(payload)
        try:
            value = reader(stream, self.parsed, None)
        except Exception as exc:  # fastavro raises whatever the bytes trip over
            raise SchemaError(f"the bytes are not Avro of this schema: {describe(exc)}") from None
        if stream.tell() != len(payload):
            raise SchemaError(
                f"the bytes are not Avro of this schema: {len(payload) - stream.tell()} bytes"
                " are left after the value"
            )
        return jsonable(value)


def describe(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, fastavro.schema.UnknownType):
        return f"unknown type {text!r} (neither a primitive nor a named type defined before)"
    return text or type(exc).__name__


class Canonicaliser:
    """The canonical structure of a schema, collecting its named types on the way."""

    def __init__(self, named: dict[str, dict[str, Any]]) -> None:
        self.named = named

    def walk(self, schema: Any, namespace: str) -> Any:
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return schema
            return full_name(schema, namespace)
        if isinstance(schema, list):
            return [self.walk(branch, namespace) for branch in schema]
        kind = schema["type"]
        if not isinstance(kind, str) or kind not in NAMED_KINDS | {"array", "map"}:
            if set(schema) == {"type"}:
                return self.walk(kind, namespace)
            return {**schema, "type": self.walk(kind, namespace)}
        out = dict(schema)
        if kind in NAMED_KINDS:
            fullname = full_name(schema["name"], schema.get("namespace") or namespace)
            namespace, _, short = fullname.rpartition(".")
            out["name"] = short
            out["namespace"] = namespace
            if "aliases" in schema:
                out["aliases"] = [full_name(alias, namespace) for alias in schema["aliases"]]
            self.named[fullname] = out
        if kind in ("record", "error"):
            out["fields"] = [
                {**field, "type": self.walk(field["type"], namespace)} for field in schema["fields"]
            ]
        elif kind == "array":
            out["items"] = self.walk(schema["items"], namespace)
        elif kind == "map":
            out["values"] = self.walk(schema["values"], namespace)
        return out


class Shapes:
    """What the decoder must know of a schema's shape: whether a named type contains
    itself, and whether an array's items can take no bytes."""

    def __init__(self, tree: Any, named: dict[str, dict[str, Any]]) -> None:
        self.tree = tree
        self.named = named

    def inner(self, schema: Any) -> list[Any]:
        """The types a type is made of, one level down (names are not followed)."""
        if isinstance(schema, list):
            return schema
        if not isinstance(schema, dict):
            return []
        kind = schema["type"]
        if not isinstance(kind, str) or kind not in NAMED_KINDS | {"array", "map"}:
            return [kind]
        if kind in ("record", "error"):
            return [field["type"] for field in schema["fields"]]
        if kind == "array":
            return [schema["items"]]
        return [schema["values"]] if kind == "map" else []

    def names_used(self, schema: Any) -> set[str]:
        """The named types a type uses by name or defines, without entering them; the
        walk is as deep as the schema's JSON (MAX_NESTING)."""
        pending, used = list(self.inner(schema)), set()
        while pending:
            part = pending.pop()
            if isinstance(part, str):
                if part not in PRIMITIVES:
                    used.add(part)
            elif isinstance(part, dict) and str(part.get("type")) in NAMED_KINDS:
                used.add(full_name(part["name"], part["namespace"]))
            else:
                pending.extend(self.inner(part))
        return used

    def recursive(self) -> bool:
        """Whether the graph of named types (each to those it uses) has a cycle:
        Kahn's algorithm, without recursion."""
        uses = {
            name: self.names_used(schema) & set(self.named) for name, schema in self.named.items()
        }
        users = {name: 0 for name in uses}
        for used in uses.values():
            for name in used:
                users[name] += 1
        free = [name for name, count in users.items() if count == 0]
        removed = 0
        while free:
            name = free.pop()
            removed += 1
            for used in uses[name]:
                users[used] -= 1
                if users[used] == 0:
                    free.append(used)
        return removed != len(uses)

    def takes_no_bytes(self, schema: Any, seen: frozenset[str] = frozenset()) -> bool:
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return schema == "null"
            if schema in seen:
                return False
            seen, schema = seen | {schema}, self.named[schema]
        if not isinstance(schema, dict):
            return False  # a union writes its branch's index
        kind = schema["type"]
        if not isinstance(kind, str) or kind not in NAMED_KINDS | {"array", "map"}:
            return self.takes_no_bytes(kind, seen)
        if kind in ("record", "error"):
            return all(self.takes_no_bytes(f["type"], seen) for f in schema["fields"])
        return kind == "fixed" and schema["size"] == 0

    def empty_array_items(self) -> bool:
        pending = [self.tree, *self.named.values()]
        while pending:
            schema = pending.pop()
            if (
                isinstance(schema, dict)
                and schema.get("type") == "array"
                and self.takes_no_bytes(schema["items"])
            ):
                return True
            pending.extend(self.inner(schema) if not isinstance(schema, str) else [])
        return False


def full_name(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def jsonable(value: Any) -> Any:
    """fastavro's Python values as JSON: bytes as Avro's JSON encoding writes them (one
    code point per byte), decimals, times and UUIDs as strings."""
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, float) and value != value:
        return "NaN"
    return value
