"""Whether a reader Avro schema can read what a writer schema wrote: Avro's schema
resolution rules (the Avro specification, "Schema Resolution"), as Confluent's
registry applies them, with its error names and the path to the place that broke.

BACKWARD asks it with the new schema as the reader, FORWARD with the old one."""

from __future__ import annotations

from typing import Any

from rustka.schema_registry.avro import NAMED_KINDS, PRIMITIVES, AvroSchema

COMPLEX_KINDS = PRIMITIVES | NAMED_KINDS | {"array", "map"}

# What a writer's primitive may be read as, besides itself.
PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


def reader_errors(reader: AvroSchema, writer: AvroSchema) -> list[str]:
    return Resolution(reader.named, writer.named).check(reader.tree, writer.tree, "")


class Resolution:
    def __init__(self, reader_named: dict[str, Any], writer_named: dict[str, Any]) -> None:
        self.reader_named = reader_named
        self.writer_named = writer_named
        # Recursive types: a pair of named types being checked is assumed to match while
        # its own fields are checked.
        self.in_progress: set[tuple[str, str]] = set()

    def check(self, reader: Any, writer: Any, path: str) -> list[str]:
        reader = resolve(reader, self.reader_named)
        writer = resolve(writer, self.writer_named)
        reader_kind, writer_kind = kind(reader), kind(writer)
        if writer_kind == "union":
            errors = []
            for index, branch in enumerate(writer):
                errors += self.check(reader, branch, f"{path}/{index}")
            return errors
        if reader_kind == "union":
            for branch in reader:
                if not self.check(branch, writer, path):
                    return []
            return [
                f"MISSING_UNION_BRANCH at {path or '/'}: the reader's union has no branch"
                f" that reads the writer's {describe(writer)}"
            ]
        if reader_kind != writer_kind:
            if reader_kind in PROMOTIONS.get(writer_kind, ()):
                return []
            return [
                f"TYPE_MISMATCH at {path or '/'}: reader type {describe(reader)} cannot read"
                f" writer type {describe(writer)}"
            ]
        if reader_kind in NAMED_KINDS:
            if not names_match(reader, writer):
                return [
                    f"NAME_MISMATCH at {path}/name: the reader's {full(reader)} is not the"
                    f" writer's {full(writer)} (nor one of its aliases)"
                ]
            key = (full(reader), full(writer))
            if key in self.in_progress:
                return []
            self.in_progress.add(key)
            try:
                return self.check_named(reader, writer, path)
            finally:
                self.in_progress.discard(key)
        if reader_kind == "array":
            return self.check(reader["items"], writer["items"], f"{path}/items")
        if reader_kind == "map":
            return self.check(reader["values"], writer["values"], f"{path}/values")
        return []

    def check_named(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
        if reader["type"] == "fixed":
            if reader["size"] != writer["size"]:
                return [
                    f"FIXED_SIZE_MISMATCH at {path}/size: the reader's {full(reader)} holds"
                    f" {reader['size']} bytes, the writer's {writer['size']}"
                ]
            return []
        if reader["type"] == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and "default" not in reader:
                return [
                    f"MISSING_ENUM_SYMBOLS at {path}/symbols: the reader's {full(reader)} lacks"
                    f" {missing} and has no default symbol"
                ]
            return []
        errors = []
        writer_fields = {field["name"]: field for field in writer["fields"]}
        for index, field in enumerate(reader["fields"]):
            names = [field["name"], *field.get("aliases", ())]
            written = next((writer_fields[n] for n in names if n in writer_fields), None)
            if written is not None:
                errors += self.check(field["type"], written["type"], f"{path}/fields/{index}/type")
            elif "default" not in field:
                errors.append(
                    f"READER_FIELD_MISSING_DEFAULT_VALUE at {path}/fields/{index}: the reader's"
                    f" field {field['name']!r} has no default value and the writer has no such"
                    " field"
                )
        return errors


def resolve(schema: Any, named: dict[str, Any]) -> Any:
    """The schema a name or a wrapper (`{"type": {...}}`, `{"type": "com.acme.T", ...}`)
    stands for; primitives, unions and complex types stand for themselves."""
    while True:
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return schema
            schema = named[schema]  # a named type's definition: a dict of a named kind
        elif isinstance(schema, dict) and not (
            isinstance(schema["type"], str) and schema["type"] in COMPLEX_KINDS
        ):
            schema = schema["type"]
        else:
            return schema


def kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, str):
        return schema
    # resolve() leaves only dicts whose type is a primitive or a complex kind.
    return "record" if schema["type"] == "error" else str(schema["type"])


def full(schema: dict[str, Any]) -> str:
    namespace = schema.get("namespace")
    return f"{namespace}.{schema['name']}" if namespace else schema["name"]


def names_match(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    return reader["name"] == writer["name"] or full(writer) in reader.get("aliases", ())


def describe(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, str):
        return schema
    if schema["type"] in NAMED_KINDS:
        return f"{schema['type']} {full(schema)}"
    return schema["type"]
