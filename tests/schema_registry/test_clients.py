"""confluent-kafka's own SchemaRegistryClient and serializers, producing and consuming
through a real rustka broker whose registry is on (docs/schema-registry.md)."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from tests.conftest import within
from tests.kafka.real_clients import confluent_read
from tests.schema_registry.conftest import Registry, start_registry

pytestmark = pytest.mark.clients

AVRO_V1 = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
    }
)
AVRO_INCOMPATIBLE = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "item", "type": "string"},
            {"name": "price", "type": "double"},
        ],
    }
)
JSON_SCHEMA = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Reading",
        "type": "object",
        "properties": {"sensor": {"type": "string"}, "value": {"type": "number"}},
        "required": ["sensor", "value"],
    }
)


_opened: list[Any] = []


def closing(client: Any) -> Any:
    """Remember a registry client to close (its HTTP connections) once its test is done."""
    _opened.append(client)
    return client


@pytest.fixture(autouse=True)
def close_clients() -> Any:
    yield
    while _opened:
        _opened.pop().close()


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    errors: list[Any] = []
    for value in values:
        producer.produce(
            topic, value=value, partition=0, on_delivery=lambda e, m: e and errors.append(e)
        )
    assert producer.flush(30) == 0
    assert not errors, errors


def avro_round_trip(url: str, bootstrap: str) -> tuple[int, list[dict[str, Any]], str]:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.schema_registry.error import SchemaRegistryError
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = closing(SchemaRegistryClient({"url": url}))
    serializer = AvroSerializer(client, AVRO_V1)
    context = SerializationContext("orders", MessageField.VALUE)
    orders = [{"id": i, "item": f"widget-{i}"} for i in range(3)]
    produce(bootstrap, "orders", [serializer(o, context) for o in orders])
    got = confluent_read(bootstrap, "orders", 0, len(orders))
    deserializer = AvroDeserializer(closing(SchemaRegistryClient({"url": url})))
    decoded = [deserializer(value, context) for _, _, value in got]
    registered = client.get_latest_version("orders-value")
    try:
        from confluent_kafka.schema_registry import Schema

        client.register_schema("orders-value", Schema(AVRO_INCOMPATIBLE, "AVRO"))
        refusal = "accepted"
    except SchemaRegistryError as e:
        refusal = f"{e.http_status_code} {e.error_code}"
    return registered.schema_id, decoded, refusal


@pytest_twisted.ensureDeferred
async def test_avro_serializer_round_trip_and_refusal(registry: Registry) -> None:
    bootstrap = registry.running.address
    schema_id, decoded, refusal = await within(
        threads.deferToThread(avro_round_trip, registry.url, bootstrap), 90
    )
    assert decoded == [{"id": i, "item": f"widget-{i}"} for i in range(3)]
    assert refusal == "409 409"
    # what was stored carries the registry's id in Confluent's framing
    result = await registry.running.broker.read("orders", 0, 0, 1 << 20)
    from rustka.record.batch import decode_records

    data = b"".join(result.chunks)
    record = decode_records(data, 0)[0]
    assert record.value is not None
    assert struct.unpack(">bI", record.value[:5]) == (0, schema_id)
    assert registry.service.decode_value(record.value) == {
        "schema_id": schema_id,
        "schema_type": "AVRO",
        "subject": "orders-value",
        "value": {"id": 0, "item": "widget-0"},
    }
    assert registry.service.decode_value(b"plain text") is None


def json_round_trip(url: str, bootstrap: str) -> list[dict[str, Any]]:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = closing(SchemaRegistryClient({"url": url}))
    serializer = JSONSerializer(JSON_SCHEMA, client)
    context = SerializationContext("readings", MessageField.VALUE)
    readings = [{"sensor": "t1", "value": 20.5}, {"sensor": "t2", "value": 3}]
    produce(bootstrap, "readings", [serializer(r, context) for r in readings])
    got = confluent_read(bootstrap, "readings", 0, len(readings))
    deserializer = JSONDeserializer(
        None, schema_registry_client=closing(SchemaRegistryClient({"url": url}))
    )
    return [deserializer(value, context) for _, _, value in got]


@pytest_twisted.ensureDeferred
async def test_json_schema_serializer_round_trip(registry: Registry) -> None:
    decoded = await within(
        threads.deferToThread(json_round_trip, registry.url, registry.running.address), 90
    )
    assert decoded == [{"sensor": "t1", "value": 20.5}, {"sensor": "t2", "value": 3}]
    status, latest = await registry.call("GET", "/subjects/readings-value/versions/latest")
    assert status == 200 and latest["schemaType"] == "JSON"


def protobuf_round_trip(url: str, bootstrap: str) -> list[tuple[str, int]]:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import (
        ProtobufDeserializer,
        ProtobufSerializer,
    )
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message_factory import GetMessageClass

    proto = descriptor_pb2.FileDescriptorProto(
        name="shop/payment.proto", package="shop", syntax="proto3"
    )
    message = proto.message_type.add(name="Payment")
    message.field.add(name="account", number=1, type=9, label=1)
    message.field.add(name="cents", number=2, type=3, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    Payment = GetMessageClass(pool.FindMessageTypeByName("shop.Payment"))
    client = closing(SchemaRegistryClient({"url": url}))
    serializer = ProtobufSerializer(Payment, client, {"use.deprecated.format": False})
    context = SerializationContext("payments", MessageField.VALUE)
    payments = [Payment(account="a-1", cents=250), Payment(account="b-2", cents=99)]
    produce(bootstrap, "payments", [serializer(p, context) for p in payments])
    got = confluent_read(bootstrap, "payments", 0, len(payments))
    deserializer = ProtobufDeserializer(Payment, {"use.deprecated.format": False})
    out = [deserializer(value, context) for _, _, value in got]
    return [(p.account, p.cents) for p in out]


@pytest_twisted.ensureDeferred
async def test_protobuf_serializer_round_trip(registry: Registry) -> None:
    decoded = await within(
        threads.deferToThread(protobuf_round_trip, registry.url, registry.running.address), 90
    )
    assert decoded == [("a-1", 250), ("b-2", 99)]
    status, latest = await registry.call("GET", "/subjects/payments-value/versions/latest")
    assert status == 200 and latest["schemaType"] == "PROTOBUF"
    # the stored text parses again: the console decodes what the serializer wrote
    result = await registry.running.broker.read("payments", 0, 0, 1 << 20)
    from rustka.record.batch import decode_records

    value = decode_records(b"".join(result.chunks), 0)[0].value
    assert value is not None
    decoded = registry.service.decode_value(value)
    assert decoded is not None and decoded["schema_type"] == "PROTOBUF"
    assert decoded["subject"] == "payments-value"
    assert decoded["value"]["account"] == "a-1"
    status, serialized = await registry.call(
        "GET", f"/schemas/ids/{latest['id']}?format=serialized"
    )
    from google.protobuf import descriptor_pb2

    assert status == 200, serialized
    proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized["schema"]))
    assert [m.name for m in proto.message_type] == ["Payment"]


@pytest_twisted.ensureDeferred
async def test_ids_survive_a_restart_for_the_clients(data_dir: Path) -> None:
    first = await start_registry(data_dir)
    try:
        schema_id, _, _ = await within(
            threads.deferToThread(avro_round_trip, first.url, first.running.address), 90
        )
    finally:
        await first.running.stop()
    second = await start_registry(data_dir)
    try:
        status, body = await second.call("GET", f"/schemas/ids/{schema_id}")
        assert status == 200 and json.loads(body["schema"])["name"] == "Order"
        status, body = await second.call("POST", "/subjects/orders-value", {"schema": AVRO_V1})
        assert status == 200 and body["id"] == schema_id
    finally:
        await second.running.stop()


MONEY_PROTO = 'syntax = "proto3";\npackage common;\nmessage Money { int64 cents = 1; }\n'
PRICED_PROTO = (
    'syntax = "proto3";\npackage shop;\nimport "money.proto";\n'
    "message Priced { string item = 1; common.Money price = 2; }\n"
)


def protobuf_references_read(url: str) -> list[str]:
    """What confluent-kafka's Protobuf serdes do to read a schema and its references
    (with `use.latest.version`, or rules): each one with `format=serialized`, parsed as
    base64 FileDescriptorProtos into one pool."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry._sync.protobuf import _resolve_named_schema
    from confluent_kafka.schema_registry.common.protobuf import _str_to_proto
    from google.protobuf import descriptor_pool

    client = closing(SchemaRegistryClient({"url": url}))
    latest = client.get_latest_version("priced-value", "serialized")
    pool = descriptor_pool.DescriptorPool()
    _resolve_named_schema(latest.schema, client, pool)
    pool.Add(_str_to_proto("priced.proto", latest.schema.schema_str))
    priced = pool.FindMessageTypeByName("shop.Priced")
    return [f"{f.name}:{f.message_type.full_name if f.message_type else ''}" for f in priced.fields]


@pytest_twisted.ensureDeferred
async def test_protobuf_clients_read_stored_proto_text_as_serialized(registry: Registry) -> None:
    body = {"schemaType": "PROTOBUF", "schema": MONEY_PROTO}
    status, _ = await registry.call("POST", "/subjects/money/versions", body)
    assert status == 200
    references = [{"name": "money.proto", "subject": "money", "version": 1}]
    body = {"schemaType": "PROTOBUF", "schema": PRICED_PROTO, "references": references}
    status, made = await registry.call("POST", "/subjects/priced-value/versions", body)
    assert status == 200, made
    assert made["schema"].startswith('syntax = "proto3";')  # stored as .proto text
    fields = await within(threads.deferToThread(protobuf_references_read, registry.url), 60)
    assert fields == ["item:", "price:common.Money"]
    for path in ("/subjects/money/versions/1", "/subjects/money/versions/latest/schema"):
        status, shown = await registry.call("GET", path + "?format=serialized")
        text = shown["schema"] if isinstance(shown, dict) else shown
        assert status == 200 and "message" not in text, shown
    status, shown = await registry.call(
        "GET", f"/schemas/ids/{made['id']}/schema?format=serialized"
    )
    assert status == 200 and "syntax" not in shown, shown
