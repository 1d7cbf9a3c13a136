"""The schema formats' one entry point for the registry: parse a schema of any
format, check a new version against a subject's versions, decode a record's bytes
for the web console (docs/schema-registry.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rustka.schema_registry.avro import AvroSchema
from rustka.schema_registry.compatibility import COMPATIBILITY_LEVELS, compatibility_errors
from rustka.schema_registry.json_schema import JsonSchema
from rustka.schema_registry.parsed import MAX_SCHEMA_BYTES, ParsedSchema, SchemaError, check_size
from rustka.schema_registry.protobuf import ProtobufSchema

SCHEMA_TYPES = {"AVRO": AvroSchema, "JSON": JsonSchema, "PROTOBUF": ProtobufSchema}

__all__ = [
    "COMPATIBILITY_LEVELS",
    "MAX_SCHEMA_BYTES",
    "SCHEMA_TYPES",
    "ParsedSchema",
    "SchemaError",
    "compatibility_errors",
    "decode",
    "parse",
]


def parse(
    schema_type: str, text: str, references: Sequence[tuple[str, ParsedSchema]] = ()
) -> ParsedSchema:
    """A schema of `schema_type` ("AVRO" when a client names none); `references` are
    (the name the schema imports or names it by, the parsed schema), resolved
    transitively by the caller. Raises SchemaError with what is wrong."""
    kind = SCHEMA_TYPES.get(schema_type)
    if kind is None:
        raise SchemaError(f"unknown schema type {schema_type!r}: one of {', '.join(SCHEMA_TYPES)}")
    if not isinstance(text, str):
        raise SchemaError("the schema is not a string")
    check_size(text)
    return kind(text, references)


def decode(parsed: ParsedSchema, payload: bytes) -> Any:
    """A record's bytes after Confluent's 5-byte header (magic 0, schema id) as a
    JSON-able value; for Protobuf they start with the message-index list. Raises
    SchemaError on bytes that do not decode."""
    return parsed.decode(payload)
