"""What every format's parsed schema shares: the protocol the registry calls, the one
error it answers 422 with, and the bounds checked before any parser sees the text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

# A schema is a document a person wrote; one over a mebibyte is a mistake or an attack,
# and is refused before a parser spends time on it.
MAX_SCHEMA_BYTES = 1 << 20

# Avro and JSON Schema documents are walked recursively (the parsers, the compatibility
# rules); bounding the nesting keeps a hostile document from exhausting the stack.
MAX_NESTING = 64


class SchemaError(ValueError):
    """Invalid schema (the registry answers 422, error_code 42201)."""


class ParsedSchema(Protocol):
    """A schema the registry accepted: its format and its forms for comparison."""

    schema_type: str

    def canonical(self) -> str:
        """The same text for two registrations of the same schema, however spelled."""
        ...

    def normalized(self) -> str:
        """The form `?normalize=true` compares (may equal the canonical one)."""
        ...

    def decode(self, payload: bytes) -> Any:
        """A record's bytes after Confluent's 5-byte header, as a JSON-able value."""
        ...


References = Sequence[tuple[str, ParsedSchema]]


def check_size(text: str) -> None:
    if len(text) > MAX_SCHEMA_BYTES or len(text.encode("utf-8")) > MAX_SCHEMA_BYTES:
        raise SchemaError(f"the schema is over {MAX_SCHEMA_BYTES} bytes")


def nesting_depth(text: str) -> int:
    """How deep JSON text nests its brackets, counted without parsing it (so without
    recursion); brackets inside strings are skipped."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def load_json_document(text: str, what: str) -> Any:
    """A JSON schema document (Avro's or JSON Schema's), bounded in size and nesting."""
    check_size(text)
    if nesting_depth(text) > MAX_NESTING:
        raise SchemaError(f"the {what} nests deeper than {MAX_NESTING} levels")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise SchemaError(f"the {what} is not valid JSON: {exc}") from None


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys: key order and whitespace do not count."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
