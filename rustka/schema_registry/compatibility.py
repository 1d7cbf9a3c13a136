"""The compatibility levels of a subject and which versions a new schema is checked
against (docs/schema-registry.md, "Compatibility rules"); each format's own rules
answer one question, whether a reader schema reads what a writer schema wrote."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rustka.schema_registry import (
    avro_compatibility,
    json_schema_compatibility,
    protobuf_compatibility,
)
from rustka.schema_registry.parsed import ParsedSchema

COMPATIBILITY_LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)

ReaderErrors = Callable[[Any, Any], list[str]]
RULES: dict[str, ReaderErrors] = {
    "AVRO": avro_compatibility.reader_errors,
    "JSON": json_schema_compatibility.reader_errors,
    "PROTOBUF": protobuf_compatibility.reader_errors,
}


def compatibility_errors(
    new: ParsedSchema, existing: Sequence[ParsedSchema], level: str
) -> list[str]:
    """What stops `new` from joining a subject whose live versions are `existing`
    (oldest first) at `level`; empty when nothing does. BACKWARD: the new schema
    reads data written with the old; FORWARD: the old reads data written with the
    new; FULL: both. The plain levels look at the latest version, the TRANSITIVE
    ones at every version."""
    if level not in COMPATIBILITY_LEVELS:
        raise ValueError(f"unknown compatibility level {level!r}")
    if level == "NONE" or not existing:
        return []
    against = list(existing) if level.endswith("_TRANSITIVE") else [existing[-1]]
    backward = level.startswith(("BACKWARD", "FULL"))
    forward = level.startswith(("FORWARD", "FULL"))
    errors: list[str] = []
    for position, old in reversed(list(enumerate(against))):
        if old.schema_type != new.schema_type:
            errors.append(
                f"SCHEMA_TYPE_CHANGED: the new schema is {new.schema_type},"
                f" an existing version is {old.schema_type}"
            )
            continue
        reader_errors = RULES[new.schema_type]
        found = []
        if backward:
            found += [
                f"{e} (the new schema reading data of the old)" for e in reader_errors(new, old)
            ]
        if forward:
            found += [
                f"{e} (the old schema reading data of the new)" for e in reader_errors(old, new)
            ]
        if len(against) > 1:
            found = [
                f"{e}, against existing version {position + 1} of {len(against)}" for e in found
            ]
        errors += [e for e in found if e not in errors]
    return errors
