"""JSON Schema schemas: checked against their draft's metaschema by jsonschema
(Draft 7 unless `$schema` names another draft it knows, 2020-12 among them), with
`$ref`s resolved against the schema itself and the schemas it references by name."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.validators import validator_for

from rustka.schema_registry.parsed import (
    References,
    SchemaError,
    canonical_json,
    load_json_document,
)

UNKNOWN_DRAFT = object()


class JsonSchema:
    """A parsed JSON Schema; `resolver` finds what its `$ref`s point at."""

    schema_type = "JSON"

    def __init__(self, text: str, references: References = ()) -> None:
        self.text = text
        self.document: Any = load_json_document(text, "JSON schema")
        if not isinstance(self.document, dict | bool):
            raise SchemaError("a JSON schema is an object or a boolean")
        validator: Any = jsonschema.Draft7Validator
        if isinstance(self.document, dict) and "$schema" in self.document:
            validator = validator_for(self.document, default=UNKNOWN_DRAFT)
        if validator is UNKNOWN_DRAFT:
            raise SchemaError(f"unknown JSON Schema draft: $schema {self.document['$schema']!r}")
        try:
            validator.check_schema(self.document)
        except jsonschema.SchemaError as exc:
            where = exc.json_path if exc.path else "the schema's root"
            raise SchemaError(f"invalid JSON schema at {where}: {exc.message}") from None
        self.specification = referencing.jsonschema.specification_with(
            validator.META_SCHEMA["$schema"]
        )
        registry: referencing.Registry[Any] = referencing.Registry()
        for name, ref in references:
            if not isinstance(ref, JsonSchema):
                raise SchemaError(f"reference {name!r} is a {ref.schema_type} schema, not JSON")
            registry = registry.with_resources(ref.registry.items())
            registry = registry.with_resource(name, ref.resource)
        self.resource = self.specification.create_resource(self.document)
        self.registry = registry
        self.resolver = registry.resolver_with_root(self.resource)
        self.check_references()
        self._canonical = canonical_json(self.document)

    def check_references(self) -> None:
        """Every `$ref` resolves now, so a missing reference is found at registration
        rather than by a consumer."""
        pending = [self.document]
        while pending:
            node = pending.pop()
            if isinstance(node, list):
                pending.extend(node)
            elif isinstance(node, dict):
                if "$id" in node and node is not self.document:
                    continue  # a nested base URI; its refs resolve against it
                ref = node.get("$ref")
                if isinstance(ref, str):
                    try:
                        self.resolver.lookup(ref)
                    except referencing.exceptions.Unresolvable:
                        raise SchemaError(
                            f"$ref {ref!r} does not resolve: neither a place in this schema"
                            " nor a referenced schema's name"
                        ) from None
                pending.extend(node.values())

    def canonical(self) -> str:
        return self._canonical

    def normalized(self) -> str:
        return self._canonical

    def decode(self, payload: bytes) -> Any:
        """The JSON value; it is not validated against the schema, so a record that no
        longer fits is still shown as it is."""
        try:
            return json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise SchemaError(f"the bytes are not JSON: {exc}") from None
