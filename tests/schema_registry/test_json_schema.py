"""JSON Schema schemas: canonical forms, metaschema checks (Draft 7 and 2020-12),
refusals, `$ref`s to referenced schemas by name, and records decoded."""

from __future__ import annotations

import json

import jsonschema
import pytest

from rustka.schema_registry.formats import SchemaError, compatibility_errors, decode, parse

ORDER = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "note": {"type": "string", "maxLength": 10}},
    "required": ["id"],
    "additionalProperties": False,
}


def test_one_schema_spelled_two_ways_has_one_canonical_form() -> None:
    again = (
        '{"additionalProperties": false, "required": ["id"],\n'
        '  "properties": {"note": {"maxLength": 10, "type": "string"},'
        ' "id": {"type": "integer"}}, "type": "object"}'
    )
    first, second = parse("JSON", json.dumps(ORDER)), parse("JSON", again)
    assert first.canonical() == second.canonical() == second.normalized()
    assert first.schema_type == "JSON"
    changed = dict(ORDER, required=["id", "note"])
    assert parse("JSON", json.dumps(changed)).canonical() != first.canonical()


def test_draft_2020_12_is_checked_against_its_own_metaschema() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "array",
        "prefixItems": [{"type": "string"}],
        "$defs": {"x": {"type": "integer"}},
    }
    parse("JSON", json.dumps(schema))
    with pytest.raises(SchemaError, match=r"prefixItems"):
        parse("JSON", json.dumps(dict(schema, prefixItems={"type": "string"})))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{nope", "not valid JSON"),
        ('{"type": "strin"}', r"at \$\.type: 'strin' is not valid"),
        ('{"properties": {"a": {"minimum": "1"}}}', r"at \$\.properties\.a\.minimum"),
        ('{"$schema": "http://example.com/my-draft"}', "unknown JSON Schema draft"),
        ('{"$ref": "missing.json"}', "'missing.json' does not resolve"),
        ('{"$ref": "#/definitions/nothing"}', "does not resolve"),
        ("[1, 2]", "an object or a boolean"),
        ('{"properties": ' * 70 + "{}" + "}" * 70, "nests deeper than 64 levels"),
        ("[" * 100_000 + "]" * 100_000, "nests deeper than 64 levels"),
    ],
)
def test_invalid_schemas_are_refused_with_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(SchemaError, match=says):
        parse("JSON", text)


ADDRESS = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "definitions": {"zip": {"type": "string", "maxLength": 5}},
}


def person(address_ref: str = "address.json") -> str:
    return json.dumps(
        {
            "type": "object",
            "properties": {
                "home": {"$ref": address_ref},
                "zip": {"$ref": "address.json#/definitions/zip"},
            },
        }
    )


def test_refs_to_a_referenced_schema_resolve_by_its_name() -> None:
    address = parse("JSON", json.dumps(ADDRESS))
    with pytest.raises(SchemaError, match=r"\$ref 'address\.json.*' does not resolve"):
        parse("JSON", person())
    parsed = parse("JSON", person(), [("address.json", address)])
    lookup = parsed.resolver.lookup("address.json#/definitions/zip")  # type: ignore[attr-defined]
    assert lookup.contents == {"type": "string", "maxLength": 5}


def test_compatibility_follows_refs_into_referenced_schemas() -> None:
    v1 = parse("JSON", person(), [("address.json", parse("JSON", json.dumps(ADDRESS)))])
    narrower = json.loads(json.dumps(ADDRESS))
    narrower["definitions"]["zip"]["maxLength"] = 4
    v2 = parse("JSON", person(), [("address.json", parse("JSON", json.dumps(narrower)))])
    (error,) = compatibility_errors(v2, [v1], "BACKWARD")
    assert error.startswith("MAX_LENGTH_DECREASED at #/properties/zip: maxLength 5 -> 4")
    assert compatibility_errors(v2, [v1], "FORWARD") == []


def test_local_refs_and_combinators() -> None:
    old = {
        "definitions": {"id": {"type": "integer"}},
        "type": "object",
        "properties": {"id": {"$ref": "#/definitions/id"}},
    }
    new = json.loads(json.dumps(old))
    new["definitions"]["id"] = {"oneOf": [{"type": "integer"}, {"type": "string"}]}
    v1, v2 = parse("JSON", json.dumps(old)), parse("JSON", json.dumps(new))
    assert compatibility_errors(v2, [v1], "BACKWARD") == []
    (error,) = compatibility_errors(v2, [v1], "FORWARD")
    assert error.startswith("TYPE_CHANGED at #/properties/id")


def test_records_decode_to_their_json_value() -> None:
    parsed = parse("JSON", json.dumps(ORDER))
    value = {"id": 3, "note": "hello"}
    jsonschema.validate(value, ORDER)
    assert decode(parsed, json.dumps(value).encode()) == value
    with pytest.raises(SchemaError, match="not JSON"):
        decode(parsed, b'{"id": ')
    with pytest.raises(SchemaError, match="not JSON"):
        decode(parsed, b"\xff\xfe")


def test_a_ref_under_a_nested_id_is_taken_as_any_document() -> None:
    """The check at parse skips refs whose base a nested `$id` changes; comparing such
    a schema still answers, counting what the ref names as anything."""
    schema = {"properties": {"n": {"$id": "http://example.com/n", "$ref": "elsewhere.json"}}}
    parsed = parse("JSON", json.dumps(schema))
    assert compatibility_errors(parsed, [parsed], "FULL") == []
    narrower = {"properties": {"n": {"type": "string"}}}
    (error,) = compatibility_errors(parse("JSON", json.dumps(narrower)), [parsed], "BACKWARD")
    assert error.startswith("TYPE_NARROWED at #/properties/n")


def kinds(new: dict[str, object], old: dict[str, object], level: str = "BACKWARD") -> list[str]:
    errors = compatibility_errors(
        parse("JSON", json.dumps(new)), [parse("JSON", json.dumps(old))], level
    )
    return [error.split(":")[0] for error in errors]


def test_partially_open_content_models() -> None:
    """`additionalProperties` as a schema: a property added or removed is fine when
    that schema reads it, and not when it does not."""
    strings = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "additionalProperties": {"type": "string"},
    }
    with_b = json.loads(json.dumps(strings))
    with_b["properties"]["b"] = {"type": "string"}
    with_int_b = json.loads(json.dumps(strings))
    with_int_b["properties"]["b"] = {"type": "integer"}
    assert kinds(with_b, strings) == []
    assert kinds(with_int_b, strings) == [
        "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL at #/properties/b"
    ]
    assert kinds(strings, with_b) == []
    assert kinds(strings, with_int_b) == [
        "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL at #/properties/b"
    ]
    closed = dict(strings, additionalProperties=False)
    assert kinds(closed, strings) == ["ADDITIONAL_PROPERTIES_REMOVED at #/additionalProperties"]


def test_nested_changes_carry_their_path() -> None:
    old = {
        "type": "object",
        "properties": {
            "o": {
                "type": "object",
                "properties": {"n": {"type": "array", "items": {"type": "integer", "minimum": 0}}},
            }
        },
    }
    new = json.loads(json.dumps(old))
    new["properties"]["o"]["properties"]["n"]["items"]["minimum"] = 1
    assert kinds(new, old) == ["MINIMUM_INCREASED at #/properties/o/properties/n/items"]
    assert kinds(new, old, "FORWARD") == []


def test_required_with_a_default_and_combined_types() -> None:
    old = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}
    new = dict(old, required=["a"])
    assert kinds(new, old) == ["REQUIRED_ATTRIBUTE_ADDED at #/required"]
    defaulted = json.loads(json.dumps(new))
    defaulted["properties"]["a"]["default"] = ""
    assert kinds(defaulted, old) == []
    # A union gaining a branch reads more; one losing a branch reads less.
    two = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    three = {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}
    assert kinds(three, two) == []
    assert kinds(two, three) == ["SUM_TYPE_NARROWED at #"]
    # allOf gaining a constraint reads less.
    assert kinds(
        {"allOf": [{"type": "string"}, {"maxLength": 3}]}, {"allOf": [{"type": "string"}]}
    ) == ["PRODUCT_TYPE_EXTENDED at #"]
