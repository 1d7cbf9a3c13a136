"""Two brokers sharing one catalog and one bucket, with real Kafka clients: Metadata
from either names both, diskless partitions are led by both, a local topic is led by
the broker that holds it, and a consumer group whose members reach different brokers
has one coordinator and goes on from its commits when that broker leaves
(docs/diskless.md, "A cluster of brokers")."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from rustka.errors import HeldElsewhere
from tests.conftest import RunningBroker, reactor_turns, start_broker, within
from tests.diskless.test_diskless_clients import create_topic, diskless_settings
from tests.kafka import real_clients as rc
from tests.services.seaweed import S3Place

pytestmark = pytest.mark.clients

LEASE_MS = 2000


async def cluster_of_two(tmp_path: Path, dsn: str, place: S3Place) -> list[RunningBroker]:
    settings = diskless_settings(dsn, place, cluster_lease_ms=LEASE_MS)
    brokers = [await start_broker(tmp_path / f"b{i}", **settings, broker_id=i) for i in (1, 2)]
    await all_live(brokers, (1, 2))
    return brokers


async def all_live(brokers: list[RunningBroker], ids: tuple[int, ...]) -> None:
    """Wait until every broker's last heartbeat saw exactly ``ids`` live."""
    await reactor_turns(
        lambda: all(
            b.broker.cluster is not None
            and b.broker.cluster.view is not None
            and b.broker.cluster.view.live_ids == ids
            for b in brokers
        ),
        30,
    )


def cluster_metadata(bootstrap: str) -> tuple[dict[int, int], dict[str, list[int]]]:
    """(broker id -> port, topic -> partition leaders) as confluent-kafka's admin sees them."""
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    brokers = {b.id: b.port for b in meta.brokers.values()}
    topics = {
        name: [t.partitions[p].leader for p in sorted(t.partitions)]
        for name, t in meta.topics.items()
    }
    return brokers, topics


@pytest_twisted.ensureDeferred
async def test_metadata_from_either_broker_names_both_and_who_leads_what(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    one, two = await cluster_of_two(tmp_path, postgres_dsn, s3_bucket)
    try:
        made = await threads.deferToThread(
            create_topic, two.address, "spread", 6, {"diskless.enable": "true"}
        )
        assert made is None
        assert await threads.deferToThread(create_topic, one.address, "kept", 2, {}) is None
        # The local topic's name is broker 1's: broker 2 cannot create it again.
        again = await threads.deferToThread(create_topic, two.address, "kept", 1, {})
        assert again is not None and "already exists" in again
        # Each broker learns of the other's topics on its next refresh and heartbeat.
        await reactor_turns(
            lambda: (
                "spread" in one.broker.topics
                and "kept"
                in (two.broker.cluster.view.local_topics if two.broker.cluster.view else {})
            ),
            30,
        )
        ports = {1: one.port, 2: two.port}
        for broker in (one, two):
            brokers, topics = await threads.deferToThread(cluster_metadata, broker.address)
            assert brokers == ports
            assert sorted(set(topics["spread"])) == [1, 2]
            assert topics["kept"] == [1, 1]
        # Producing through broker 2 only; reading through broker 1 only.
        records = [(b"k%d" % i, b"v%d" % i) for i in range(60)]
        delivered = await within(
            threads.deferToThread(rc.confluent_produce, two.address, "spread", records, spread=6),
            60,
        )
        assert len(delivered) == 60
        read = await within(
            threads.deferToThread(rc.confluent_read_all, one.address, "spread", 6, 60), 90
        )
        assert sorted(v for _, _, _, v in read) == sorted(v for _, v in records)
        # Broker 1's local topic is written through broker 1 even when the client
        # bootstraps from broker 2: Metadata sends it there.
        local = await within(
            threads.deferToThread(rc.confluent_produce, two.address, "kept", records[:5]), 60
        )
        assert local == [(0, i) for i in range(5)]
        assert one.broker.topics["kept"].partitions[0].end_offset == 5
        assert "kept" not in two.broker.topics
        # Asked directly, broker 2 sends a client of "kept" elsewhere, never creates it.
        with pytest.raises(HeldElsewhere, match="local topic of broker 1"):
            two.broker.topic("kept")
        with pytest.raises(HeldElsewhere):
            two.broker.auto_create_topic("kept")
        # The console's broker view and the metrics say the same from broker 2.
        rows = await console_brokers(two)
        assert [(r["node_id"], r["address"], r["this"]) for r in rows] == [
            (1, one.address, False),
            (2, two.address, True),
        ]
        assert sum(r["coordinator"] for r in rows) == 1
        assert sum(r["leads"] for r in rows) == 6 + 2 and rows[0]["leads"] >= 2
        metrics = cluster_metrics(two)
        assert metrics["rustka_cluster_live_brokers"] == 2
        assert (
            metrics["rustka_cluster_group_coordinator"]
            + cluster_metrics(one)["rustka_cluster_group_coordinator"]
            == 1
        )
    finally:
        await two.stop()
        await one.stop()


async def console_brokers(running: RunningBroker) -> list[dict[str, Any]]:
    from twisted.internet import reactor

    from rustka.ops.console.api import ReadApi
    from rustka.ops.console.rates import RateSampler

    top = running.top
    api = ReadApi(top.broker, top.factory, top.kafka_factory, RateSampler(top.broker, reactor), 0.0)
    return (await api.overview())["brokers"]


def cluster_metrics(running: RunningBroker) -> dict[str, float]:
    from rustka.ops.metrics import BrokerCollector

    top = running.top
    collector = BrokerCollector(top.broker, top.factory, top.broker_service.io, top.kafka_factory)
    return {
        family.name: family.samples[0].value
        for family in collector.collect()
        if family.name.startswith("rustka_cluster_") and family.samples
    }


class GroupMember:
    """A confluent-kafka consumer of a group in a thread: records what it consumed
    and commits each record synchronously before taking the next (at least once)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.consumed: list[tuple[int, int, bytes]] = []
        self.assigned: set[int] = set()
        self.errors: list[str] = []
        self.commit_errors: list[str] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def seen(self) -> int:
        with self.lock:
            return len(self.consumed)

    def run(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )

        def on_assign(_: Any, parts: list[Any]) -> None:
            with self.lock:
                self.assigned = {p.partition for p in parts}

        consumer.subscribe([self.topic], on_assign=on_assign)
        try:
            while not self.stopping.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    self.errors.append(str(msg.error()))
                    continue
                try:
                    consumer.commit(message=msg, asynchronous=False)
                except Exception as e:
                    # A commit refused while the group rebalances (or its coordinator
                    # moves) is not retried: polling is what lets the member rejoin, and
                    # the record comes again to whoever owns the partition next.
                    with self.lock:
                        self.commit_errors.append(str(e))
                with self.lock:
                    self.consumed.append((msg.partition(), msg.offset(), msg.value()))
        finally:
            consumer.close()


@pytest_twisted.ensureDeferred
async def test_a_group_across_brokers_has_one_coordinator_and_outlives_it(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    one, two = await cluster_of_two(tmp_path, postgres_dsn, s3_bucket)
    brokers = {1: one, 2: two}
    stopped: list[RunningBroker] = []
    members: list[GroupMember] = []
    runs: list[Any] = []
    try:
        assert (
            await threads.deferToThread(
                create_topic, one.address, "work", 4, {"diskless.enable": "true"}
            )
            is None
        )
        holder = next(b for b in (one, two) if b.broker.coordinates_groups())
        survivor = two if holder is one else one
        assert not survivor.broker.coordinates_groups()
        members = [GroupMember(b.address, "crew", "work") for b in (one, two)]
        runs = [threads.deferToThread(m.run) for m in members]
        await reactor_turns(lambda: all(len(m.assigned) == 2 for m in members), 60)
        assert members[0].assigned | members[1].assigned == {0, 1, 2, 3}
        first = [(b"a", b"first-%d" % i) for i in range(40)]
        await within(
            threads.deferToThread(rc.confluent_produce, survivor.address, "work", first, spread=4),
            60,
        )
        await reactor_turns(lambda: sum(m.seen() for m in members) >= 40, 60)
        for m in members:
            m.stopping.set()
        await within(defer_all(runs), 60)
        runs = []
        assert sorted(v for m in members for _, _, v in m.consumed) == sorted(v for _, v in first)
        # The coordinator's broker leaves; the role passes and the commits are there.
        await holder.stop()
        stopped.append(holder)
        await reactor_turns(lambda: survivor.broker.coordinates_groups(), 30)
        committed = await within(
            threads.deferToThread(rc.confluent_committed, survivor.address, "crew", "work", 4), 60
        )
        assert committed == [10, 10, 10, 10]
        second = [(b"b", b"second-%d" % i) for i in range(20)]
        await within(
            threads.deferToThread(rc.confluent_produce, survivor.address, "work", second, spread=4),
            60,
        )
        again = GroupMember(survivor.address, "crew", "work")
        members.append(again)
        runs = [threads.deferToThread(again.run)]
        await reactor_turns(lambda: again.seen() >= 20, 60)
        again.stopping.set()
        await within(defer_all(runs), 60)
        runs = []
        # Only what came after the commits: nothing of the first round again.
        assert sorted(v for _, _, v in again.consumed) == sorted(v for _, v in second)
        assert [b.broker.node_id for b in brokers.values() if b not in stopped] == [
            survivor.broker.node_id
        ]
    finally:
        for m in members:
            m.stopping.set()
        if runs:
            await within(defer_all(runs), 60)
        for b in (one, two):
            if b not in stopped:
                await b.stop()


def defer_all(ds: list[Any]) -> Any:
    from twisted.internet import defer

    return defer.gatherResults(ds, consumeErrors=True)
