"""Client telemetry (KIP-714) with confluent-kafka, unmodified, against rustka.

librdkafka 2.5+ asks a broker that advertises GetTelemetrySubscriptions for its
subscription, then pushes its metrics every push interval. The broker here asks for
everything every 500 ms, so a producer's first pushes arrive within a second or two;
every wait polls the broker's state or its metrics page with a deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import reactor, task, threads
from twisted.web.client import Agent, readBody

from rustka.ops.client_metrics import clients_json
from tests.conftest import RunningBroker, start_broker, within

pytestmark = pytest.mark.clients


@pytest_twisted.async_yield_fixture
async def broker(data_dir: Path) -> AsyncIterator[RunningBroker]:
    running = await start_broker(
        data_dir,
        client_telemetry_metrics="org.apache.kafka.producer.",
        client_telemetry_interval_ms=500,
        metrics="tcp:0:interface=127.0.0.1",
    )
    try:
        yield running
    finally:
        await running.stop()


async def until(condition: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await task.deferLater(reactor, 0.05, lambda: None)


async def scrape(running: RunningBroker) -> dict[str, list[Any]]:
    await running.top.metrics.listening
    port = running.top.metrics.port.getHost().port
    response = await within(
        Agent(reactor).request(b"GET", f"http://127.0.0.1:{port}/metrics".encode())
    )
    body = await within(readBody(response))
    return {family.name: family.samples for family in text_string_to_metric_families(body.decode())}


def produce_until(bootstrap: str, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "telemetry-producer"})
    try:
        while not stop.is_set():
            producer.produce("telemetry-topic", value=b"v")
            producer.poll(0.05)
        assert producer.flush(30) == 0
    finally:
        del producer


@pytest_twisted.ensureDeferred
async def test_a_producer_pushes_its_metrics_which_show_per_client_until_it_goes(
    broker: RunningBroker,
) -> None:
    telemetry = broker.broker.client_telemetry
    assert telemetry is not None
    await within(broker.broker.create_topic("telemetry-topic", 1))
    stop = threading.Event()
    running = threads.deferToThread(produce_until, broker.address, stop)
    try:
        await until(
            lambda: any(
                name == "org.apache.kafka.producer.record.queue.time.avg"
                for state in telemetry.clients.values()
                for name, _ in state.series
            ),
            "the producer's pushed record queue time",
        )
        now_ms = int(reactor.seconds() * 1000)
        (client,) = clients_json(telemetry, now_ms)["clients"]
        assert client["client_id"] == "telemetry-producer"
        assert client["software_name"] == "confluent-kafka-python"
        assert client["principal"] == "User:ANONYMOUS"
        names = {m["name"] for m in client["metrics"]}
        assert names <= {n for n in names if n.startswith("org.apache.kafka.producer.")}
        assert "org.apache.kafka.producer.connection.creation.total" in names
        families = await scrape(broker)
        (queue,) = families["rustka_client_producer_record_queue_time_avg"]
        assert queue.labels == {
            "client_id": "telemetry-producer",
            "client_instance_id": client["client_instance_id"],
        }
        created = families["rustka_client_producer_connection_creation"]
        assert any(s.name.endswith("_total") and s.value >= 1 for s in created)
        latency = families["rustka_client_producer_node_request_latency_avg"]
        assert {s.labels["node_id"] for s in latency} == {"0"}
        assert families["rustka_client_telemetry_clients"][0].value == 1
    finally:
        stop.set()
        await within(running, 60)
    # Gone with its connection (or its terminating push): dropped from the next scrape.
    await until(lambda: not telemetry.clients, "the closed producer to be forgotten")
    families = await scrape(broker)
    assert "rustka_client_producer_record_queue_time_avg" not in families
    accepted = [
        s for s in families["rustka_client_telemetry_pushes"] if s.labels["result"] == "accepted"
    ]
    assert accepted and accepted[0].value >= 1


@pytest_twisted.ensureDeferred
async def test_without_a_subscription_configured_the_apis_are_not_offered(
    data_dir: Path,
) -> None:
    running = await start_broker(data_dir)
    try:
        assert running.broker.client_telemetry is None
        advertised = {key for key, _lo, _hi in running.top.kafka_factory.advertised_versions()}
        assert 71 not in advertised and 72 not in advertised
    finally:
        await running.stop()
