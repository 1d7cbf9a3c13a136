"""Avro schemas: canonical forms, refusals, references to other subjects' named types,
and records decoded for the web console."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest

from rustka.schema_registry.formats import (
    MAX_SCHEMA_BYTES,
    SchemaError,
    compatibility_errors,
    decode,
    parse,
)

USER = {
    "type": "record",
    "name": "User",
    "namespace": "com.acme",
    "doc": "a user",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": {"type": "string"}, "default": ""},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}


def test_one_schema_spelled_two_ways_has_one_canonical_form() -> None:
    spelled_again = (
        '{ "fields" : [ {"type":"long","name":"id"},'
        ' {"default":"", "type":"string", "name":"name"},'
        ' {"name":"tags","type":{"items":{"type":"string"},"type":"array"}}],'
        '  "doc":"a user", "name":"com.acme.User", "type":"record" }'
    )
    first, second = parse("AVRO", json.dumps(USER, indent=2)), parse("AVRO", spelled_again)
    assert first.canonical() == second.canonical()
    assert first.normalized() == second.normalized()
    assert first.schema_type == "AVRO"
    # The canonical form is itself the schema.
    assert parse("AVRO", first.canonical()).canonical() == first.canonical()


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s.update(doc="another user"),
        lambda s: s["fields"][1].update(default="nobody"),
        lambda s: s["fields"].reverse(),
        lambda s: s.update(namespace="org.acme"),
        lambda s: s["fields"][0].update(type="int"),
    ],
)
def test_different_schemas_have_different_canonical_forms(change: Any) -> None:
    other = json.loads(json.dumps(USER))
    change(other)
    assert (
        parse("AVRO", json.dumps(other)).canonical() != parse("AVRO", json.dumps(USER)).canonical()
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "not valid JSON"),
        ('"strin"', "unknown type 'strin'"),
        ('{"type":"record","name":"R","fields":[{"name":"a","type":"Missing"}]}', "Missing"),
        ('{"type":"enum","name":"E","symbols":["A","A"]}', "unique"),
        (
            '{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":"x"}]}',
            "Default",
        ),
        ('{"type":"fixed","name":"F"}', "size"),
        ("[" * 200 + "]" * 200, "nests deeper than"),
    ],
)
def test_invalid_schemas_are_refused_with_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(SchemaError, match=says):
        parse("AVRO", text)


def test_schema_text_over_the_bound_is_refused_before_parsing() -> None:
    huge = json.dumps({"type": "record", "name": "R", "doc": "x" * MAX_SCHEMA_BYTES, "fields": []})
    with pytest.raises(SchemaError, match="over 1048576 bytes"):
        parse("AVRO", huge)


def test_unknown_schema_types_are_refused() -> None:
    with pytest.raises(SchemaError, match="unknown schema type 'XML'"):
        parse("XML", "<a/>")


ADDRESS = {
    "type": "record",
    "name": "Address",
    "namespace": "com.acme",
    "fields": [{"name": "city", "type": "string"}],
}
CUSTOMER = {
    "type": "record",
    "name": "Customer",
    "namespace": "com.acme",
    "fields": [{"name": "home", "type": "com.acme.Address"}, {"name": "work", "type": "Address"}],
}


def test_a_named_type_from_another_subject_is_used_through_its_reference() -> None:
    address = parse("AVRO", json.dumps(ADDRESS))
    with pytest.raises(SchemaError, match=r"com\.acme\.Address"):
        parse("AVRO", json.dumps(CUSTOMER))
    customer = parse("AVRO", json.dumps(CUSTOMER), [("com.acme.Address", address)])
    value = {"home": {"city": "Oslo"}, "work": {"city": "Bergen"}}
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, customer.parsed, value)  # type: ignore[attr-defined]
    assert decode(customer, buffer.getvalue()) == value
    # Compatibility reaches into the referenced type: a field the reader adds to it
    # without a default breaks BACKWARD, at both fields of that type.
    wider = dict(ADDRESS, fields=[*ADDRESS["fields"], {"name": "zip", "type": "string"}])
    customer2 = parse(
        "AVRO", json.dumps(CUSTOMER), [("com.acme.Address", parse("AVRO", json.dumps(wider)))]
    )
    errors = compatibility_errors(customer2, [customer], "BACKWARD")
    assert [e.split(":")[0] for e in errors] == [
        "READER_FIELD_MISSING_DEFAULT_VALUE at /fields/0/type/fields/1",
        "READER_FIELD_MISSING_DEFAULT_VALUE at /fields/1/type/fields/1",
    ]


def test_a_reference_of_another_format_is_refused() -> None:
    with pytest.raises(SchemaError, match="JSON schema, not AVRO"):
        parse("AVRO", json.dumps(CUSTOMER), [("com.acme.Address", parse("JSON", "{}"))])


def encode(schema: Any, value: Any) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), value)
    return buffer.getvalue()


def test_records_decode_to_json_values() -> None:
    schema = {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "raw", "type": "bytes"},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
            {"name": "maybe", "type": ["null", "double"]},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "counts", "type": {"type": "map", "values": "int"}},
        ],
    }
    parsed = parse("AVRO", json.dumps(schema))
    value = {
        "id": 7,
        "raw": b"\x00\xff",
        "kind": "B",
        "maybe": 1.5,
        "at": 1_700_000_000_000,
        "counts": {"x": 1},
    }
    decoded = decode(parsed, encode(schema, value))
    assert decoded == {
        "id": 7,
        "raw": "\x00\xff",
        "kind": "B",
        "maybe": 1.5,
        "at": "2023-11-14T22:13:20+00:00",
        "counts": {"x": 1},
    }
    json.dumps(decoded)


def test_bytes_that_are_not_the_schemas_record_are_refused() -> None:
    parsed = parse("AVRO", json.dumps(USER))
    good = encode(USER, {"id": 1, "name": "a", "tags": ["x"]})
    assert decode(parsed, good) == {"id": 1, "name": "a", "tags": ["x"]}
    with pytest.raises(SchemaError, match="not Avro"):
        decode(parsed, good[:-2])
    with pytest.raises(SchemaError, match="1 bytes are left"):
        decode(parsed, good + b"\x00")


NODE = {
    "type": "record",
    "name": "Node",
    "fields": [{"name": "v", "type": "int"}, {"name": "next", "type": ["null", "Node"]}],
}


def test_deeply_nested_data_of_a_recursive_schema_is_refused_not_a_crash() -> None:
    """fastavro's compiled reader overflows the C stack on such data (the process dies
    of a segfault); the schema's records go through the pure-Python reader instead."""
    parsed = parse("AVRO", json.dumps(NODE))
    assert parsed.recursive  # type: ignore[attr-defined]
    assert not parse("AVRO", json.dumps(USER)).recursive  # type: ignore[attr-defined]
    short = encode(NODE, {"v": 1, "next": {"v": 2, "next": None}})
    assert decode(parsed, short) == {"v": 1, "next": {"v": 2, "next": None}}
    deep = b"\x00\x02" * 300_000 + b"\x00\x00"
    with pytest.raises(SchemaError, match="not Avro"):
        decode(parsed, deep)


def test_mutually_recursive_types_through_a_reference_are_found() -> None:
    tree = {
        "type": "record",
        "name": "Tree",
        "fields": [
            {
                "name": "kids",
                "type": {
                    "type": "map",
                    "values": {
                        "type": "record",
                        "name": "Branch",
                        "fields": [{"name": "t", "type": "Tree"}],
                    },
                },
            }
        ],
    }
    assert parse("AVRO", json.dumps(tree)).recursive  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "items",
    [
        "null",
        {"type": "record", "name": "Empty", "fields": []},
        {"type": "fixed", "name": "Nothing", "size": 0},
    ],
)
def test_arrays_of_items_that_take_no_bytes_are_not_decoded(items: Any) -> None:
    """A block count of 2**62 nulls is two bytes long; decoding it would never end."""
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": {"type": "array", "items": items}}],
    }
    parsed = parse("AVRO", json.dumps(schema))
    with pytest.raises(SchemaError, match="not decoded"):
        decode(parsed, b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f\x00")
    compatibility_errors(parsed, [parsed], "FULL")  # still a schema the registry holds
