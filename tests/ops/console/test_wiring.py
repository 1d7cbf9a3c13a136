"""The console as `rustka.ops.tap` builds it, beside the schema registry and client
telemetry: values framed with a registered schema id are shown decoded, and the Clients
page lists the Kafka clients that pushed their metrics (docs/console.md)."""

from __future__ import annotations

import io
import json
import struct
import threading
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from tests.conftest import within
from tests.ops.console.conftest import Console, get_json, until
from tests.schema_registry.conftest import Registry, start_registry

pytestmark = pytest.mark.clients

ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "int"}, {"name": "item", "type": "string"}],
}


def framed(schema_id: int, value: dict[str, Any]) -> bytes:
    """Confluent's framing: magic 0, the schema id, then the Avro body (fastavro writes it)."""
    from fastavro import parse_schema, schemaless_writer

    body = io.BytesIO()
    schemaless_writer(body, parse_schema(ORDER), value)
    return b"\x00" + struct.pack(">i", schema_id) + body.getvalue()


def produce_until(bootstrap: str, values: list[bytes], stop: threading.Event) -> None:
    """A producer that stays connected (pushing its metrics) until told to stop."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "orders-api"})
    for value in values:
        producer.produce("orders", value=value, partition=0)
    assert producer.flush(30) == 0
    while not stop.is_set():
        producer.poll(0.05)


@pytest_twisted.ensureDeferred
async def test_the_console_decodes_registered_values_and_lists_pushing_clients(
    data_dir: Path,
) -> None:
    registry: Registry = await start_registry(
        data_dir,
        console_listen="tcp:0:interface=127.0.0.1",
        client_telemetry_metrics="org.apache.kafka.producer.",
        client_telemetry_interval_ms=500,
    )
    running = registry.running
    console = Console(running, running.top.console)
    stop = threading.Event()
    producing = None
    try:
        await within(console.console.listening)
        status, body = await registry.call(
            "POST", "/subjects/orders-value/versions", {"schema": json.dumps(ORDER)}
        )
        assert status == 200, body
        schema_id = body["id"]
        await within(running.broker.create_topic("orders", 1))
        values = [framed(schema_id, {"id": 7, "item": "widget"}), b"plain text"]
        producing = threads.deferToThread(produce_until, running.address, values, stop)
        path = "/api/topics/orders/partitions/0/messages?offset=0&limit=10"

        async def two() -> Any:
            page = await get_json(console, path)
            return page if len(page["records"]) == 2 else None

        page = await until(two, "both records")
        first, second = page["records"]
        assert first["decoded"] == {
            "schema_id": schema_id,
            "schema_type": "AVRO",
            "subject": "orders-value",
            "value": {"id": 7, "item": "widget"},
        }
        assert "decoded" not in second or second["decoded"] is None

        async def pushed() -> Any:
            answer = await get_json(console, "/api/clients")
            found = [c for c in answer["clients"] if c["client_id"] == "orders-api"]
            return found if found and found[0]["metrics"] else None

        (client,) = await until(pushed, "the producer's pushed metrics", attempts=300)
        assert client["software_name"] == "confluent-kafka-python"
        assert {m["name"] for m in client["metrics"]} >= {
            "org.apache.kafka.producer.connection.creation.total"
        }
        assert all(m["name"].startswith("org.apache.kafka.producer.") for m in client["metrics"])
    finally:
        stop.set()
        if producing is not None:
            await within(producing, 60)
        await running.stop()
