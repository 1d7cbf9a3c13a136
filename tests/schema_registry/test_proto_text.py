"""Protobuf schemas' canonical form is `.proto` text (rustka/schema_registry/proto_text.py):
it compiles back to the same descriptor, the `.proto` and base64 registrations of one
schema share it (and so one id), and the registry shows it, with the base64 form on
`?format=serialized` (docs/schema-registry.md, "Protobuf schemas")."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import pytest_twisted
from google.protobuf import descriptor_pb2

from rustka.schema_registry import formats, protobuf
from rustka.schema_registry.formats import parse
from rustka.schema_registry.model import Registry as Model
from rustka.schema_registry.proto_text import Unprintable, default_json_name, proto_text
from rustka.schema_registry.protobuf import ProtobufSchema
from tests.schema_registry.conftest import Registry

FDP_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED

MONEY = """
syntax = "proto3";
package common;
message Money { int64 cents = 1; string currency = 2; }
"""

CORPUS = {
    "proto3": r"""
syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
import "money.proto";
option java_package = "com.example.shop";
option java_multiple_files = true;
option go_package = "example.com/shop";

message Order {
  enum Status {
    option allow_alias = true;
    UNKNOWN = 0;
    OPEN = 1;
    STARTED = 1;
    CLOSED = 2 [deprecated = true];
    reserved 5, 7 to 9, 100 to max;
    reserved "GONE";
  }
  message Line {
    int32 count = 1;
    string sku_code = 2 [json_name = "SKU"];
    common.Money price = 3;
    message Note { string text = 1; }
    repeated Note notes = 4;
  }
  int64 id = 1;
  map<string, Line> lines_by_sku = 2;
  message Between { bool flag = 1; }
  map<int64, Status> history = 3;
  oneof payment {
    string card = 4;
    common.Money cash = 5;
    Between other = 6;
  }
  optional string coupon = 7;
  repeated int32 counts = 8 [packed = false];
  repeated double weights = 9;
  google.protobuf.Timestamp at = 10 [deprecated = true];
  Status status = 11;
  bytes blob = 12;
  reserved 13, 15 to 20, 1000 to max;
  reserved "old_name", "older";
  oneof contact { string email = 14; string phone = 21; }
  map<string, string> labels = 22;
}

enum Top { TOP_ZERO = 0; TOP_ONE = 1; }

service Orders {
  rpc Get(Order) returns (Order);
  rpc Watch(stream Order.Line) returns (stream Order) { option deprecated = true; }
}
""",
    "proto2": r"""
syntax = "proto2";
package legacy;
import "google/protobuf/timestamp.proto";
option optimize_for = SPEED;

message Legacy {
  enum Kind { ONE = 1; TWO = 2; }
  required int32 a = 1;
  optional string b = 2 [default = "say \"hi\"\n\tthere \\ é"];
  optional bytes c = 3 [default = "\001\377ab\"c"];
  optional Kind k = 4 [default = TWO];
  optional float f = 5 [default = inf];
  optional double d = 6 [default = -1.5e-10];
  optional double n = 7 [default = nan];
  optional bool flag = 8 [default = true];
  optional sint64 s = 9 [default = -42];
  optional uint64 u = 10 [default = 18446744073709551615];
  repeated int32 packed_ints = 11 [packed = true];
  repeated string names = 12;
  optional google.protobuf.Timestamp at = 13;
  oneof choice { int32 x = 14; string y = 15; }
  map<string, int32> counts = 16;
  optional int32 with_json = 17 [json_name = "renamed", deprecated = true];
  extensions 100 to 199, 500 to max;
  reserved 30 to 40;
  message Inner {
    optional int32 depth = 1 [default = 3];
    extend Legacy { optional string inner_note = 101; }
  }
}

extend Legacy { optional int32 extra = 100; repeated string tags = 102; }
""",
    "well_known": r"""
syntax = "proto3";
import "google/protobuf/any.proto";
import public "google/protobuf/struct.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/empty.proto";
import "google/protobuf/descriptor.proto";

extend google.protobuf.FieldOptions { int32 weight = 50001; }

message Nothing {}
message Envelope {
  google.protobuf.Any body = 1;
  google.protobuf.Struct meta = 2;
  google.protobuf.Int64Value maybe_count = 3;
  google.protobuf.Duration ttl = 4;
  google.protobuf.Empty none = 5;
  message Deep {
    message Deeper {
      map<string, Deeper> children = 1;
      message AfterMap { string note = 1; }
      map<sint32, bytes> blobs = 2;
    }
    repeated Deeper deepers = 1;
    oneof kind { Nothing nothing = 2; google.protobuf.Value value = 3; }
  }
  Deep deep = 6;
  repeated Envelope nested = 7;
  map<uint64, google.protobuf.ListValue> lists = 8;
  optional bool flag = 9;
  optional Deep.Deeper.AfterMap after = 10;
}
enum Alone { ALONE_ZERO = 0; reserved 3 to 5; }
service Empty { }
""",
}


def references(name: str) -> list[tuple[str, Any]]:
    return [("money.proto", parse("PROTOBUF", MONEY))] if name == "proto3" else []


def comparable(file: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """The descriptor without what `.proto` text does not carry: the file's name,
    source info, protoc's own JSON names, and an implicit proto2 syntax."""
    copy = descriptor_pb2.FileDescriptorProto()
    copy.CopyFrom(file)
    copy.ClearField("name")
    copy.ClearField("source_code_info")
    if copy.syntax == "proto2":
        copy.ClearField("syntax")
    pending = list(copy.message_type)
    fields = list(copy.extension)
    while pending:
        message = pending.pop()
        pending.extend(message.nested_type)
        fields += [*message.field, *message.extension]
    for field in fields:
        if field.json_name == default_json_name(field.name):
            field.ClearField("json_name")
    return copy


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_the_canonical_text_compiles_back_to_the_same_descriptor(name: str) -> None:
    refs = references(name)
    first = parse("PROTOBUF", CORPUS[name], refs)
    canonical = first.canonical()
    assert canonical.startswith('syntax = "proto')
    again = parse("PROTOBUF", canonical, refs)
    assert again.canonical() == canonical == first.normalized()
    assert comparable(again.file) == comparable(first.file)  # type: ignore[attr-defined]
    # The base64 FileDescriptorProto of the same schema has the same canonical form.
    serialized = parse("PROTOBUF", first.serialized(), refs)  # type: ignore[attr-defined]
    assert serialized.canonical() == canonical


def test_nested_messages_keep_their_order_around_map_entries() -> None:
    """Confluent's message-index list counts nested messages, map entries among them:
    the canonical text must put them back in the same order."""
    first = parse("PROTOBUF", CORPUS["proto3"], references("proto3"))
    order = first.file.message_type[0]  # type: ignore[attr-defined]
    names = [n.name for n in order.nested_type]
    assert names == ["Line", "LinesBySkuEntry", "Between", "HistoryEntry", "LabelsEntry"]
    again = parse("PROTOBUF", first.canonical(), references("proto3"))
    assert [n.name for n in again.file.message_type[0].nested_type] == names  # type: ignore[attr-defined]


def test_the_canonical_text_reads_as_proto_source() -> None:
    text = parse("PROTOBUF", CORPUS["proto3"], references("proto3")).canonical()
    for line in [
        'import "money.proto";',
        'option java_package = "com.example.shop";',
        "  map<string, .shop.v1.Order.Line> lines_by_sku = 2;",
        "  map<int64, .shop.v1.Order.Status> history = 3;",
        "  optional string coupon = 7;",
        "  repeated int32 counts = 8 [packed = false];",
        '    string sku_code = 2 [json_name = "SKU"];',
        "  reserved 13, 15 to 20, 1000 to max;",
        '  reserved "old_name", "older";',
        "    reserved 5, 7 to 9, 100 to max;",
        "  rpc Watch(stream .shop.v1.Order.Line) returns (stream .shop.v1.Order) {",
    ]:
        assert line in text.splitlines(), line
    legacy = parse("PROTOBUF", CORPUS["proto2"]).canonical().splitlines()
    for line in [
        r'  optional string b = 2 [default = "say \"hi\"\n\tthere \\ é"];',
        r'  optional bytes c = 3 [default = "\001\377ab\"c"];',
        "  optional .legacy.Legacy.Kind k = 4 [default = TWO];",
        "  optional float f = 5 [default = inf];",
        "  extensions 100 to 199, 500 to max;",
        "    extend .legacy.Legacy {",
    ]:
        assert line in legacy, line
    # Extensions of one message in a row share one block.
    assert legacy[-4:] == [
        "extend .legacy.Legacy {",
        "  optional int32 extra = 100;",
        "  repeated string tags = 102;",
        "}",
    ]


CUSTOM_OPTION = """
syntax = "proto3";
package opts;
import "google/protobuf/descriptor.proto";
extend google.protobuf.FieldOptions { int32 weight = 50001; }
message M { string s = 1 [(weight) = 3]; }
"""


def test_a_schema_with_custom_options_keeps_a_descriptor_canonical_form() -> None:
    """Custom options reach this process as fields the option messages do not know:
    proto_text refuses them rather than drop them, and the canonical form is the
    descriptor's text format (which the registry does not store; see below)."""
    parsed = parse("PROTOBUF", CUSTOM_OPTION)
    assert parsed.canonical().startswith('package: "opts"')
    assert parse("PROTOBUF", parsed.serialized()).canonical() == parsed.canonical()  # type: ignore[attr-defined]


def test_a_group_is_unprintable() -> None:
    group = 'syntax = "proto2";\nmessage M { optional group G = 1 { optional int32 a = 2; } }\n'
    parsed = parse("PROTOBUF", group)
    assert parsed.canonical().startswith("message_type {")


def test_a_hostile_descriptor_name_is_not_printed_into_the_text() -> None:
    file = descriptor_pb2.FileDescriptorProto(name="x.proto", syntax="proto3")
    file.message_type.add(name="M { } message N")
    with pytest.raises(ValueError, match="no identifier"):
        proto_text(file)


ORDER = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  google.protobuf.Timestamp at = 2;
  map<string, int32> tallies = 3;
}
"""


@pytest_twisted.ensureDeferred
async def test_text_and_base64_registrations_share_one_id(registry: Registry) -> None:
    serialized = ProtobufSchema(ORDER).serialized()
    status, text_made = await registry.call(
        "POST", "/subjects/orders-value/versions", {"schemaType": "PROTOBUF", "schema": ORDER}
    )
    assert status == 200, text_made
    status, base64_made = await registry.call(
        "POST", "/subjects/orders-b64/versions", {"schemaType": "PROTOBUF", "schema": serialized}
    )
    assert status == 200, base64_made
    assert base64_made["id"] == text_made["id"]
    # Registered again as base64 under the first subject: the same version, no new one.
    status, same = await registry.call(
        "POST", "/subjects/orders-value/versions", {"schemaType": "PROTOBUF", "schema": serialized}
    )
    assert status == 200 and same["id"] == text_made["id"], same
    status, versions = await registry.call("GET", "/subjects/orders-value/versions")
    assert versions == [1]
    # Looked up by its base64 form too.
    status, found = await registry.call(
        "POST", "/subjects/orders-value", {"schemaType": "PROTOBUF", "schema": serialized}
    )
    assert status == 200 and found["version"] == 1, found
    # Shown as .proto text; as base64 with ?format=serialized.
    status, shown = await registry.call("GET", f"/schemas/ids/{text_made['id']}")
    assert shown["schemaType"] == "PROTOBUF"
    assert shown["schema"] == ProtobufSchema(ORDER).canonical()
    assert shown["schema"].startswith('syntax = "proto3";\npackage shop;\n')
    status, raw = await registry.call("GET", f"/schemas/ids/{text_made['id']}?format=serialized")
    file = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(raw["schema"]))
    assert [m.name for m in file.message_type] == ["Order"]
    assert list(file.dependency) == ["google/protobuf/timestamp.proto"]
    status, version = await registry.call("GET", "/subjects/orders-b64/versions/1/schema")
    assert version == shown["schema"]


@pytest_twisted.ensureDeferred
async def test_a_schema_that_cannot_be_printed_is_kept_as_registered(registry: Registry) -> None:
    status, made = await registry.call(
        "POST", "/subjects/opts-value/versions", {"schemaType": "PROTOBUF", "schema": CUSTOM_OPTION}
    )
    assert status == 200, made
    status, shown = await registry.call("GET", f"/schemas/ids/{made['id']}")
    assert shown["schema"] == CUSTOM_OPTION
    status, raw = await registry.call("GET", f"/schemas/ids/{made['id']}?format=serialized")
    file = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(raw["schema"]))
    assert [m.name for m in file.message_type] == ["M"]


def test_a_version_stored_as_registered_is_found_when_registered_again() -> None:
    """A `_schemas` record a Confluent registry wrote holds the Protobuf schema as its
    client sent it (here base64), not rustka's canonical text: registering that text
    again is the same version, not a new one."""
    registry = Model()
    serialized = ProtobufSchema(ORDER).serialized()
    key = {"keytype": "SCHEMA", "subject": "o-value", "version": 1, "magic": 1}
    value = {"subject": "o-value", "version": 1, "id": 7, "schemaType": "PROTOBUF"}
    value |= {"schema": serialized, "deleted": False}
    assert registry.apply(json.dumps(key).encode(), json.dumps(value).encode())
    made, records = registry.register(
        "o-value", "PROTOBUF", serialized, (), formats.parse, formats.compatibility_errors
    )
    assert (made.id, made.version, records) == (7, 1, [])
    # The .proto text of it is stored as canonical text, a new version.
    made, records = registry.register(
        "o-value", "PROTOBUF", ORDER, (), formats.parse, formats.compatibility_errors
    )
    assert (made.id, made.version) == (8, 2)
    assert made.schema.text == ProtobufSchema(ORDER).canonical()


def test_protoc_runs_once_per_text_and_imports() -> None:
    """Stored versions are `.proto` text parsed again on every compatibility check:
    protoc's descriptor is remembered by the text and what the imports are."""
    text = MONEY.replace("currency = 2", "currency = 2; int32 memo_test = 3")
    protobuf.COMPILED.clear()
    first = parse("PROTOBUF", text)
    assert len(protobuf.COMPILED) == 1
    again = parse("PROTOBUF", text)
    assert len(protobuf.COMPILED) == 1
    assert again.canonical() == first.canonical()
    # The same text with other imports is compiled again.
    priced = 'syntax = "proto3";\nimport "m.proto";\nmessage P { common.Money m = 1; }\n'
    parse("PROTOBUF", priced, [("m.proto", first)])
    parse("PROTOBUF", priced, [("m.proto", parse("PROTOBUF", MONEY))])
    assert len(protobuf.COMPILED) == 4


def test_a_map_entry_no_field_uses_is_unprintable() -> None:
    """Dropping it would move the nested messages after it, which the message-index
    list counts."""
    file = ProtobufSchema(ORDER).file
    assert proto_text(file)
    order = file.message_type[0]
    (tallies,) = [f for f in order.field if f.name == "tallies"]
    order.field.remove(tallies)
    with pytest.raises(ValueError, match=r"map entries of \.shop\.Order"):
        proto_text(file)


@pytest.mark.parametrize("module", protobuf.WELL_KNOWN, ids=lambda m: m.DESCRIPTOR.name)
def test_the_well_known_files_print_as_text_protoc_compiles_to_them(module: Any) -> None:
    """Real files, with their options (java_package, csharp_namespace, cc_enable_arenas
    ...), maps, oneofs, enums and nested types; descriptor.proto itself uses editions-era
    message-valued options, which are refused, not dropped."""
    file = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
    if file.name == "google/protobuf/descriptor.proto":
        with pytest.raises(Unprintable):
            proto_text(file)
        return
    text = proto_text(file)
    assert comparable(protobuf.run_protoc(text, {})) == comparable(file)


def test_a_hand_built_descriptor_is_printed_with_its_types_resolved() -> None:
    """A client may build its descriptor by hand, naming types relative to their scope
    and leaving a field's type out where type_name says it: the pool resolves both,
    and the text names them in full, so it compiles back to the same text."""
    file = descriptor_pb2.FileDescriptorProto(name="hand.proto", package="p", syntax="proto3")
    message = file.message_type.add(name="A")
    message.field.add(name="b", number=1, type_name=".p.B")
    message.field.add(name="e", number=2, type_name="E", label=FDP_REPEATED)
    file.message_type.add(name="B")
    file.enum_type.add(name="E").value.add(name="Z", number=0)
    parsed = parse("PROTOBUF", base64.b64encode(file.SerializeToString()).decode())
    assert "  .p.B b = 1;\n  repeated .p.E e = 2;\n" in parsed.canonical()
    assert parse("PROTOBUF", parsed.canonical()).canonical() == parsed.canonical()
