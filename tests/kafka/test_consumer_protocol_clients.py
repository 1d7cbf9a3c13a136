"""Kafka 4's consumer group protocol (KIP-848) with confluent-kafka against rustka.

Every consumer here sets ``group.protocol=consumer``: librdkafka then heartbeats with
ConsumerGroupHeartbeat and the broker assigns (docs/kafka.md, "Consumer groups
(KIP-848)"). Clients run in reactor pool threads while the reactor serves the broker
in the test's thread; every wait polls with a deadline. The broker's session timeout
and heartbeat interval are short so rebalances happen within a second or two.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, threads

from tests.conftest import RunningBroker, start_broker, within

pytestmark = pytest.mark.clients

SETTINGS = {
    "group_consumer_session_timeout_ms": 3000,
    "group_consumer_heartbeat_interval_ms": 200,
}


@pytest_twisted.async_yield_fixture
async def broker(data_dir: Path) -> AsyncIterator[RunningBroker]:
    running = await start_broker(data_dir, **SETTINGS)
    try:
        yield running
    finally:
        await running.stop()


def in_thread(f: Callable[..., Any], *args: Any, timeout: float = 90) -> Any:
    return within(threads.deferToThread(f, *args), timeout)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)


def produce(bootstrap: str, topic: str, values: list[str], partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=i % partitions)
    assert producer.flush(30) == 0


class Consumer:
    """One ``group.protocol=consumer`` member that commits synchronously on revoke."""

    def __init__(self, bootstrap: str, group: str, **conf: Any) -> None:
        from confluent_kafka import Consumer as Kafka

        self.kafka = Kafka(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **conf,
            }
        )
        self.values: list[str] = []
        self.assigned: set[tuple[str, int]] = set()

    def subscribe(self, topics: list[str]) -> None:
        def assigned(consumer: Any, partitions: list[Any]) -> None:
            self.assigned |= {(p.topic, p.partition) for p in partitions}

        def revoked(consumer: Any, partitions: list[Any]) -> None:
            # Commit what was read before the partitions go (no duplicates after).
            if self.values:
                # Nothing consumed since the last commit raises: nothing to do then.
                with contextlib.suppress(Exception):
                    consumer.commit(asynchronous=False)
            self.assigned -= {(p.topic, p.partition) for p in partitions}

        self.kafka.subscribe(topics, on_assign=assigned, on_revoke=revoked, on_lost=revoked)

    def poll_until(self, done: Callable[[], bool], seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while not done():
            assert time.monotonic() < deadline, (
                f"gave up: {len(self.values)} read, assigned {sorted(self.assigned)}"
            )
            message = self.kafka.poll(0.1)
            if message is not None and message.error() is None:
                self.values.append(message.value().decode())
                self.kafka.commit(message=message, asynchronous=False)

    def close(self) -> None:
        self.kafka.close()


@pytest_twisted.ensureDeferred
async def test_one_member_reads_everything_and_a_new_run_resumes(broker: RunningBroker) -> None:
    bootstrap = broker.address
    await in_thread(create_topic, bootstrap, "t1", 6)
    await in_thread(produce, bootstrap, "t1", [f"v{i}" for i in range(60)], 6)

    def first() -> list[str]:
        c = Consumer(bootstrap, "g1")
        c.subscribe(["t1"])
        c.poll_until(lambda: len(c.values) >= 60)
        c.close()
        return c.values

    values = await in_thread(first)
    assert sorted(values) == sorted(f"v{i}" for i in range(60))
    await in_thread(produce, bootstrap, "t1", [f"w{i}" for i in range(12)], 6)

    def second() -> list[str]:
        c = Consumer(bootstrap, "g1")
        c.subscribe(["t1"])
        c.poll_until(lambda: len(c.values) >= 12)
        c.close()
        return c.values

    assert sorted(await in_thread(second)) == sorted(f"w{i}" for i in range(12))


@pytest_twisted.ensureDeferred
async def test_three_members_share_six_partitions_and_read_each_record_once(
    broker: RunningBroker,
) -> None:
    bootstrap = broker.address
    await in_thread(create_topic, bootstrap, "t3", 6)
    await in_thread(produce, bootstrap, "t3", [f"v{i}" for i in range(300)], 6)
    members = [Consumer(bootstrap, "g3") for _ in range(3)]

    def run(c: Consumer) -> None:
        c.subscribe(["t3"])
        c.poll_until(lambda: sum(len(m.values) for m in members) >= 300)
        c.close()

    await within(
        defer.gatherResults([threads.deferToThread(run, c) for c in members], consumeErrors=True),
        120,
    )
    values = [v for m in members for v in m.values]
    assert len(values) == 300 and sorted(set(values)) == sorted(f"v{i}" for i in range(300))
