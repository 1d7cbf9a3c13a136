"""Protobuf schemas in both forms clients register them (.proto text, base64 of a
FileDescriptorProto as confluent-kafka's serializer sends it), imports of referenced
schemas, refusals, and records decoded after Confluent's message-index list."""

from __future__ import annotations

import base64
import importlib.util
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, message_factory

from rustka.schema_registry.formats import SchemaError, decode, parse
from rustka.schema_registry.protobuf import ProtobufSchema

ORDER = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

// An order, as the shop writes it.
message Order {
  int64 id = 1;
  string item = 2;
  google.protobuf.Timestamp at = 3;
  message Line { int32 count = 1; string sku_code = 2; }
  repeated Line lines = 4;
  map<string, int32> tallies = 5;
  oneof payment { string card = 6; string cash = 7; }
}

message Refund { int64 order_id = 1; }
"""


def message_class(schema: Any, name: str) -> Any:
    return message_factory.GetMessageClass(schema.pool.FindMessageTypeByName(name))


def test_proto_text_spelled_two_ways_has_one_canonical_form() -> None:
    again = " ".join(line.split("//")[0] for line in ORDER.splitlines())
    first, second = parse("PROTOBUF", ORDER), parse("PROTOBUF", again)
    assert first.canonical() == second.canonical() == second.normalized()
    assert first.schema_type == "PROTOBUF"
    assert first.text == ORDER  # type: ignore[attr-defined]
    other = parse("PROTOBUF", ORDER.replace("int64 id = 1", "int64 id = 9"))
    assert other.canonical() != first.canonical()


def test_the_serialized_form_parses_to_the_same_canonical_as_the_text() -> None:
    text = parse("PROTOBUF", ORDER)
    # What confluent-kafka's ProtobufSerializer registers: base64 of the message
    # class's file descriptor (common/protobuf.py's _schema_to_str).
    order = message_class(text, "shop.Order")
    registered = base64.standard_b64encode(order.DESCRIPTOR.file.serialized_pb).decode()
    serialized = parse("PROTOBUF", registered)
    assert serialized.canonical() == text.canonical()
    # ?format=serialized gives a base64 FileDescriptorProto that parses back alike.
    again = parse("PROTOBUF", text.serialized())  # type: ignore[attr-defined]
    assert again.canonical() == text.canonical()
    file = descriptor_pb2.FileDescriptorProto.FromString(
        base64.b64decode(text.serialized())  # type: ignore[attr-defined]
    )
    assert [m.name for m in file.message_type] == ["Order", "Refund"]


def test_confluent_kafkas_own_serializer_registers_a_schema_that_parses_and_decodes() -> None:
    with warnings.catch_warnings():
        # The client imports authlib, which turns its own deprecation warnings on
        # ("always") as it loads; they are put back off here, inside this block only.
        import authlib.deprecate  # noqa: F401

        warnings.simplefilter("ignore")
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

    text = parse("PROTOBUF", ORDER)
    order_class = message_class(text, "shop.Order")
    refund_class = message_class(text, "shop.Refund")
    client = SchemaRegistryClient.new_client({"url": "mock://formats-test"})
    context = SerializationContext("orders", MessageField.VALUE)
    order = order_class(id=5, item="pen", card="visa")
    order.lines.add(count=2, sku_code="P-1")
    order.at.seconds = 100
    order.tallies["x"] = 3
    payload = ProtobufSerializer(order_class, client, {"use.deprecated.format": False})(
        order, context
    )
    registered = client.get_latest_version("orders-value").schema
    parsed = parse("PROTOBUF", registered.schema_str)
    assert parsed.canonical() == text.canonical()
    assert payload[:1] == b"\x00" and payload[5:6] == b"\x00"  # the message-index list [0]
    assert decode(parsed, payload[5:]) == {
        "id": "5",
        "item": "pen",
        "at": "1970-01-01T00:01:40Z",
        "lines": [{"count": 2, "sku_code": "P-1"}],
        "tallies": {"x": 3},
        "card": "visa",
    }
    # The second message of the file: index list [1] (count 1, index 1, zigzag).
    refund_payload = ProtobufSerializer(refund_class, client, {"use.deprecated.format": False})(
        refund_class(order_id=5), SerializationContext("refunds", MessageField.VALUE)
    )
    assert refund_payload[5:7] == b"\x02\x02"
    assert decode(parsed, refund_payload[5:]) == {"order_id": "5"}


def test_a_nested_message_is_named_by_its_index_path() -> None:
    parsed = parse("PROTOBUF", ORDER)
    line = message_class(parsed, "shop.Order.Line")(count=4)
    # count 2, indexes 0 (Order) and 0 (its first nested message, Line), zigzag-encoded.
    assert decode(parsed, b"\x04\x00\x00" + line.SerializeToString()) == {"count": 4}
    with pytest.raises(SchemaError, match=r"message index \[5\] names no message"):
        decode(parsed, b"\x02\x0a")
    with pytest.raises(SchemaError, match="cut short"):
        decode(parsed, b"\x04\x00")
    with pytest.raises(SchemaError, match=r"not a shop\.Order"):
        decode(parsed, b"\x00\x0a\xff")


OTHER = (
    'syntax = "proto3";\npackage common;\nmessage Money { int64 cents = 1; string currency = 2; }\n'
)
PRICED = (
    'syntax = "proto3";\npackage shop;\nimport "other.proto";\n'
    "message Priced { string item = 1; common.Money price = 2; }\n"
)


@pytest.mark.parametrize("form", ["text", "serialized"])
def test_imports_resolve_to_references_by_their_import_path(form: str) -> None:
    other = parse("PROTOBUF", OTHER)
    if form == "serialized":
        other = parse("PROTOBUF", other.serialized())  # type: ignore[attr-defined]
    with pytest.raises(SchemaError, match=r"other\.proto"):
        parse("PROTOBUF", PRICED)
    priced = parse("PROTOBUF", PRICED, [("other.proto", other)])
    value = message_class(priced, "shop.Priced")(item="pen")
    value.price.cents = 250
    assert decode(priced, b"\x00" + value.SerializeToString()) == {
        "item": "pen",
        "price": {"cents": "250"},
    }
    # The serialized form names its import too, and parses with the same reference.
    again = parse("PROTOBUF", priced.serialized(), [("other.proto", other)])  # type: ignore[attr-defined]
    assert again.canonical() == priced.canonical()


def test_a_change_inside_a_referenced_message_is_seen() -> None:
    from rustka.schema_registry.formats import compatibility_errors

    old = parse("PROTOBUF", PRICED, [("other.proto", parse("PROTOBUF", OTHER))])
    changed = OTHER.replace("int64 cents = 1", "string cents = 1")
    new = parse("PROTOBUF", PRICED, [("other.proto", parse("PROTOBUF", changed))])
    errors = compatibility_errors(new, [old], "BACKWARD")
    assert [e.split(":")[0] for e in errors] == [
        "FIELD_SCALAR_KIND_CHANGED at #/Money/1",
        "FIELD_NAMED_TYPE_CHANGED at #/Priced/2",
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('syntax = "proto3";\nmessage M { strin s = 1; }', r'2:13: "strin" is not defined'),
        ('syntax = "proto3";\nmessage M { string s = 1; int32 t = 1; }', "has already been used"),
        ('syntax = "proto9";', "proto9"),
        ("Zm9vYmFy", "no serialized FileDescriptorProto"),
        ("CgA=", "no serialized FileDescriptorProto: it declares nothing"),
        ('syntax = "proto3";\nimport "nowhere.proto";', "nowhere.proto"),
    ],
)
def test_invalid_schemas_are_refused_with_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(SchemaError, match=says) as refused:
        parse("PROTOBUF", text)
    assert "rustka-proto-" not in str(refused.value)  # no temp paths in the message


def test_schema_text_over_the_bound_is_refused_before_protoc_runs() -> None:
    with pytest.raises(SchemaError, match="over 1048576 bytes"):
        ProtobufSchema('syntax = "proto3";\n' + "// x\n" * (1 << 19))


GENERATED = {
    "rustka_formats_test_order.proto": """
syntax = "proto3";
package generated.shop;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  string item_name = 2;
  google.protobuf.Timestamp at = 3;
  message Line { int32 count = 1; string sku_code = 2 [json_name = "SKU"]; }
  repeated Line lines = 4;
  map<string, int32> tallies = 5;
  oneof payment { string card = 6; string cash = 7; }
  optional int32 maybe = 8;
}
""",
    "rustka_formats_test_legacy.proto": """
syntax = "proto2";
package generated.old;
message Legacy {
  required int32 a = 1;
  optional string b = 2 [default = "x"];
  enum K { ONE = 1; }
  optional K k = 3;
}
""",
}


@pytest.mark.parametrize("file_name", sorted(GENERATED))
def test_a_protoc_generated_modules_descriptor_matches_its_proto_text(
    tmp_path: Path, file_name: str
) -> None:
    """What an application's ProtobufSerializer registers is its generated `_pb2`
    module's descriptor (protoc's Python output, which leaves out what
    --descriptor_set_out keeps, JSON names among them): it parses to the canonical
    form of the .proto text it was generated from."""
    (tmp_path / file_name).write_text(GENERATED[file_name])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{tmp_path}",
            f"--python_out={tmp_path}",
            file_name,
        ],
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    module_path = tmp_path / file_name.replace(".proto", "_pb2.py")
    spec = importlib.util.spec_from_file_location(module_path.stem, module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    registered = base64.standard_b64encode(module.DESCRIPTOR.serialized_pb).decode()
    assert (
        parse("PROTOBUF", registered).canonical()
        == parse("PROTOBUF", GENERATED[file_name]).canonical()
    )
