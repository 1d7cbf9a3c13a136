"""The compatibility rules against docs/schema-registry.md's table: every row is a
case here and every case a row, so the document and the code cannot drift apart."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from rustka.schema_registry.formats import COMPATIBILITY_LEVELS, compatibility_errors, parse

DOC = Path(__file__).resolve().parents[2] / "docs" / "schema-registry.md"
FORMATS = {"Avro": "AVRO", "JSON": "JSON", "Protobuf": "PROTOBUF"}


def table() -> list[tuple[str, str, dict[str, bool]]]:
    section = DOC.read_text().split("## Compatibility rules", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] in ("format", "---"):
            continue
        fmt, change, *results = cells
        assert set(results) <= {"yes", "no"}, line
        levels = dict(
            zip(("BACKWARD", "FORWARD", "FULL"), (r == "yes" for r in results), strict=True)
        )
        rows.append((fmt, change, levels))
    return rows


def record(*fields: Any, name: str = "R", **extra: Any) -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields), **extra})


def field(name: str, kind: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, **extra}


def enum(symbols: list[str], **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": "E", "symbols": symbols, **extra}


def obj(properties: dict[str, Any], *, closed: bool = False, **extra: Any) -> str:
    schema: dict[str, Any] = {"type": "object", "properties": properties, **extra}
    if closed:
        schema["additionalProperties"] = False
    return json.dumps(schema)


def proto(body: str, package: str = "p", syntax: str = "proto3") -> str:
    return f'syntax = "{syntax}";\npackage {package};\n{body}\n'


A = field("a", "int")
STR = {"type": "string"}
INT = {"type": "integer"}

CASES: dict[tuple[str, str], tuple[str, str]] = {
    ("Avro", "field added with a default"): (record(A), record(A, field("b", "int", default=0))),
    ("Avro", "field added without a default"): (record(A), record(A, field("b", "int"))),
    ("Avro", "field with a default removed"): (record(A, field("b", "int", default=0)), record(A)),
    ("Avro", "field without a default removed"): (record(A, field("b", "int")), record(A)),
    ("Avro", "int widened to long"): (record(A), record(field("a", "long"))),
    ("Avro", "long narrowed to int"): (record(field("a", "long")), record(A)),
    ("Avro", "float widened to double"): (
        record(field("a", "float")),
        record(field("a", "double")),
    ),
    ("Avro", "string changed to bytes"): (
        record(field("a", "string")),
        record(field("a", "bytes")),
    ),
    ("Avro", "string changed to int"): (record(field("a", "string")), record(A)),
    ("Avro", "enum symbol added"): (
        record(field("e", enum(["A", "B"]))),
        record(field("e", enum(["A", "B", "C"]))),
    ),
    ("Avro", "enum symbol removed"): (
        record(field("e", enum(["A", "B", "C"]))),
        record(field("e", enum(["A", "B"]))),
    ),
    ("Avro", "enum symbol added to an enum with a default symbol"): (
        record(field("e", enum(["A", "B"], default="A"))),
        record(field("e", enum(["A", "B", "C"], default="A"))),
    ),
    ("Avro", "field made nullable (union with null)"): (
        record(field("a", "string")),
        record(field("a", ["null", "string"], default=None)),
    ),
    ("Avro", "union branch removed"): (
        record(field("a", ["null", "string", "int"])),
        record(field("a", ["null", "string"])),
    ),
    ("Avro", "record renamed"): (record(A), record(A, name="Q")),
    ("Avro", "record renamed with the old name as an alias"): (
        record(A),
        record(A, name="Q", aliases=["R"]),
    ),
    ("Avro", "field renamed with the old name as an alias"): (
        record(A),
        record(field("b", "int", aliases=["a"])),
    ),
    ("Avro", "fixed size changed"): (
        record(field("f", {"type": "fixed", "name": "F", "size": 4})),
        record(field("f", {"type": "fixed", "name": "F", "size": 8})),
    ),
    ("Avro", "doc changed"): (record(A, doc="one"), record(A, doc="two")),
    ("Avro", "array items widened from int to long"): (
        record(field("a", {"type": "array", "items": "int"})),
        record(field("a", {"type": "array", "items": "long"})),
    ),
    ("JSON", "optional property added to an open content model"): (
        obj({"a": STR}),
        obj({"a": STR, "b": STR}),
    ),
    ("JSON", "optional property added to a closed content model"): (
        obj({"a": STR}, closed=True),
        obj({"a": STR, "b": STR}, closed=True),
    ),
    ("JSON", "property removed from an open content model"): (
        obj({"a": STR, "b": STR}),
        obj({"a": STR}),
    ),
    ("JSON", "property removed from a closed content model"): (
        obj({"a": STR, "b": STR}, closed=True),
        obj({"a": STR}, closed=True),
    ),
    ("JSON", "required property added"): (
        obj({"a": STR, "b": STR}, closed=True),
        obj({"a": STR, "b": STR}, closed=True, required=["b"]),
    ),
    ("JSON", "required property removed"): (
        obj({"a": STR, "b": STR}, closed=True, required=["b"]),
        obj({"a": STR, "b": STR}, closed=True),
    ),
    ("JSON", "type widened from integer to number"): (
        obj({"a": INT}),
        obj({"a": {"type": "number"}}),
    ),
    ("JSON", "type changed from string to integer"): (obj({"a": STR}), obj({"a": INT})),
    ("JSON", "type widened from string to string or null"): (
        obj({"a": STR}),
        obj({"a": {"type": ["string", "null"]}}),
    ),
    ("JSON", "enum value added"): (
        obj({"a": {"enum": ["x", "y"]}}),
        obj({"a": {"enum": ["x", "y", "z"]}}),
    ),
    ("JSON", "enum value removed"): (
        obj({"a": {"enum": ["x", "y", "z"]}}),
        obj({"a": {"enum": ["x", "y"]}}),
    ),
    ("JSON", "maximum lowered"): (
        obj({"a": {"type": "integer", "maximum": 10}}),
        obj({"a": {"type": "integer", "maximum": 5}}),
    ),
    ("JSON", "maxLength raised"): (
        obj({"a": {"type": "string", "maxLength": 5}}),
        obj({"a": {"type": "string", "maxLength": 10}}),
    ),
    ("JSON", "minLength added"): (obj({"a": STR}), obj({"a": {"type": "string", "minLength": 1}})),
    ("JSON", "array items widened from integer to number"): (
        obj({"a": {"type": "array", "items": INT}}),
        obj({"a": {"type": "array", "items": {"type": "number"}}}),
    ),
    ("JSON", "content model opened (additionalProperties false removed)"): (
        obj({"a": STR}, closed=True),
        obj({"a": STR}),
    ),
    ("JSON", "description changed"): (
        obj({"a": STR}, description="one"),
        obj({"a": STR}, description="two"),
    ),
    ("Protobuf", "field added"): (
        proto("message M { int32 a = 1; }"),
        proto("message M { int32 a = 1; string b = 2; }"),
    ),
    ("Protobuf", "field removed"): (
        proto("message M { int32 a = 1; string b = 2; }"),
        proto("message M { int32 a = 1; }"),
    ),
    ("Protobuf", "field renamed, same number"): (
        proto("message M { int32 a = 1; }"),
        proto("message M { int32 renamed = 1; }"),
    ),
    ("Protobuf", "field number changed"): (
        proto("message M { int32 a = 1; }"),
        proto("message M { int32 a = 2; }"),
    ),
    ("Protobuf", "int32 changed to int64"): (
        proto("message M { int32 a = 1; }"),
        proto("message M { int64 a = 1; }"),
    ),
    ("Protobuf", "int32 changed to sint32"): (
        proto("message M { int32 a = 1; }"),
        proto("message M { sint32 a = 1; }"),
    ),
    ("Protobuf", "string changed to bytes"): (
        proto("message M { string a = 1; }"),
        proto("message M { bytes a = 1; }"),
    ),
    ("Protobuf", "fixed32 changed to sfixed32"): (
        proto("message M { fixed32 a = 1; }"),
        proto("message M { sfixed32 a = 1; }"),
    ),
    ("Protobuf", "int32 changed to string"): (
        proto("message M { int32 a = 1; }"),
        proto("message M { string a = 1; }"),
    ),
    ("Protobuf", "scalar field changed to a message"): (
        proto("message N { int32 x = 1; } message M { int32 a = 1; }"),
        proto("message N { int32 x = 1; } message M { N a = 1; }"),
    ),
    ("Protobuf", "int32 field made repeated"): (
        proto("message M { int32 a = 1; }"),
        proto("message M { repeated int32 a = 1; }"),
    ),
    ("Protobuf", "string field made repeated"): (
        proto("message M { string a = 1; }"),
        proto("message M { repeated string a = 1; }"),
    ),
    ("Protobuf", "message removed"): (
        proto("message M { int32 a = 1; } message N { int32 x = 1; }"),
        proto("message M { int32 a = 1; }"),
    ),
    ("Protobuf", "message added"): (
        proto("message M { int32 a = 1; }"),
        proto("message M { int32 a = 1; } message N { int32 x = 1; }"),
    ),
    ("Protobuf", "package changed"): (
        proto("message M { int32 a = 1; }"),
        proto("message M { int32 a = 1; }", package="q"),
    ),
    ("Protobuf", "one field moved into a new oneof"): (
        proto("message M { int32 a = 1; string b = 2; }"),
        proto("message M { string b = 2; oneof o { int32 a = 1; } }"),
    ),
    ("Protobuf", "two fields moved into one new oneof"): (
        proto("message M { int32 a = 1; string b = 2; }"),
        proto("message M { oneof o { int32 a = 1; string b = 2; } }"),
    ),
    ("Protobuf", "field removed from a oneof"): (
        proto("message M { oneof o { int32 a = 1; string b = 2; } }"),
        proto("message M { oneof o { int32 a = 1; } }"),
    ),
    ("Protobuf", "enum value added"): (
        proto("enum E { E_UNSPECIFIED = 0; E_A = 1; } message M { E e = 1; }"),
        proto("enum E { E_UNSPECIFIED = 0; E_A = 1; E_B = 2; } message M { E e = 1; }"),
    ),
    ("Protobuf", "proto2 required field added"): (
        proto("message M { optional int32 a = 1; }", syntax="proto2"),
        proto("message M { optional int32 a = 1; required int32 b = 2; }", syntax="proto2"),
    ),
}

ROWS = table()


def test_the_table_has_the_rows_the_task_asks_for_and_every_case_is_a_row() -> None:
    counts = {fmt: sum(1 for f, _, _ in ROWS if f == fmt) for fmt in FORMATS}
    assert counts["Avro"] >= 12 and counts["JSON"] >= 10 and counts["Protobuf"] >= 8
    assert {(fmt, change) for fmt, change, _ in ROWS} == set(CASES)


@pytest.mark.parametrize(("fmt", "change", "levels"), ROWS, ids=[f"{f}: {c}" for f, c, _ in ROWS])
def test_each_row_of_the_documented_table(fmt: str, change: str, levels: dict[str, bool]) -> None:
    old_text, new_text = CASES[(fmt, change)]
    old, new = parse(FORMATS[fmt], old_text), parse(FORMATS[fmt], new_text)
    for level, compatible in levels.items():
        errors = compatibility_errors(new, [old], level)
        assert (errors == []) == compatible, f"{level}: {errors}"
        # The transitive level says the same with one version, and NONE accepts all.
        assert (compatibility_errors(new, [old], f"{level}_TRANSITIVE") == []) == compatible
    assert compatibility_errors(new, [old], "NONE") == []


def test_errors_name_what_broke_and_where() -> None:
    old = parse("AVRO", record(A))
    new = parse("AVRO", record(A, field("b", "int")))
    (error,) = compatibility_errors(new, [old], "BACKWARD")
    assert error.startswith("READER_FIELD_MISSING_DEFAULT_VALUE at /fields/1")
    assert "'b'" in error
    (error,) = compatibility_errors(
        parse("AVRO", record(field("e", enum(["A"])))),
        [parse("AVRO", record(field("e", enum(["A", "B"]))))],
        "BACKWARD",
    )
    assert re.match(r"MISSING_ENUM_SYMBOLS at /fields/0/type/symbols: .*\['B'\]", error)
    (error,) = compatibility_errors(
        parse("JSON", obj({"a": STR}, closed=True)),
        [parse("JSON", obj({"a": STR, "b": STR}, closed=True))],
        "BACKWARD",
    )
    assert error.startswith("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at #/properties/b")
    (error,) = compatibility_errors(
        parse("PROTOBUF", proto("message M { string a = 1; }")),
        [parse("PROTOBUF", proto("message M { int32 a = 1; }"))],
        "BACKWARD",
    )
    assert error.startswith("FIELD_SCALAR_KIND_CHANGED at #/M/1")


def test_transitive_levels_check_every_version_the_plain_ones_only_the_latest() -> None:
    """v1 has no b, v2 adds b with a default, v3 drops b's default: v3 reads v2's data
    (b is there), not v1's (b is missing and has no default)."""
    v1 = parse("AVRO", record(A))
    v2 = parse("AVRO", record(A, field("b", "int", default=0)))
    v3 = parse("AVRO", record(A, field("b", "int")))
    assert compatibility_errors(v3, [v1, v2], "BACKWARD") == []
    errors = compatibility_errors(v3, [v1, v2], "BACKWARD_TRANSITIVE")
    assert len(errors) == 1
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in errors[0]
    assert "existing version 1 of 2" in errors[0]
    assert compatibility_errors(v3, [v1, v2], "FULL") == []
    assert compatibility_errors(v3, [v1, v2], "FULL_TRANSITIVE") != []


def test_transitive_forward_and_the_other_formats() -> None:
    # JSON: enum [x, y] -> [x, y, z] -> [x, z]; the latest step is FORWARD (old reads
    # new's x and z) but v1 cannot read z.
    v1 = parse("JSON", obj({"a": {"enum": ["x", "y"]}}))
    v2 = parse("JSON", obj({"a": {"enum": ["x", "y", "z"]}}))
    v3 = parse("JSON", obj({"a": {"enum": ["x", "z"]}}))
    assert compatibility_errors(v3, [v1, v2], "FORWARD") == []
    assert compatibility_errors(v3, [v1, v2], "FORWARD_TRANSITIVE") != []
    # Protobuf: a message removed in v2 and brought back in v3 does not hide the
    # oneof change against v1.
    p1 = parse("PROTOBUF", proto("message M { oneof o { int32 a = 1; string b = 2; } }"))
    p2 = parse("PROTOBUF", proto("message M { oneof o { int32 a = 1; } }"))
    p3 = parse("PROTOBUF", proto("message M { oneof o { int32 a = 1; } int64 c = 3; }"))
    assert compatibility_errors(p3, [p1, p2], "BACKWARD") == []
    (error,) = compatibility_errors(p3, [p1, p2], "BACKWARD_TRANSITIVE")
    assert error.startswith("ONEOF_FIELD_REMOVED at #/M/o")


def test_levels_and_mixed_formats() -> None:
    assert COMPATIBILITY_LEVELS == (
        "NONE",
        "BACKWARD",
        "BACKWARD_TRANSITIVE",
        "FORWARD",
        "FORWARD_TRANSITIVE",
        "FULL",
        "FULL_TRANSITIVE",
    )
    avro = parse("AVRO", record(A))
    json_schema = parse("JSON", obj({"a": STR}))
    assert compatibility_errors(avro, [], "FULL_TRANSITIVE") == []
    (error,) = compatibility_errors(json_schema, [avro], "BACKWARD")
    assert error.startswith("SCHEMA_TYPE_CHANGED")
    with pytest.raises(ValueError, match="unknown compatibility level"):
        compatibility_errors(avro, [avro], "SIDEWAYS")


def test_recursive_schemas_terminate() -> None:
    node = {
        "type": "record",
        "name": "Node",
        "fields": [field("v", "int"), field("next", ["null", "Node"], default=None)],
    }
    wider = json.loads(json.dumps(node))
    wider["fields"][0]["type"] = "long"
    assert (
        compatibility_errors(
            parse("AVRO", json.dumps(wider)), [parse("AVRO", json.dumps(node))], "BACKWARD"
        )
        == []
    )
    assert compatibility_errors(
        parse("AVRO", json.dumps(node)), [parse("AVRO", json.dumps(wider))], "BACKWARD"
    )
    tree = {
        "$ref": "#/definitions/t",
        "definitions": {
            "t": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/definitions/t"}}},
            }
        },
    }
    assert (
        compatibility_errors(
            parse("JSON", json.dumps(tree)), [parse("JSON", json.dumps(tree))], "FULL"
        )
        == []
    )
