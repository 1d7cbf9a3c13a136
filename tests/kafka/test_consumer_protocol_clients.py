"""Kafka 4's consumer group protocol (KIP-848) with confluent-kafka against rustka.

Every consumer here sets ``group.protocol=consumer``: librdkafka then heartbeats with
ConsumerGroupHeartbeat and the broker assigns (docs/kafka.md, "Consumer groups
(KIP-848)"). Clients run in reactor pool threads while the reactor serves the broker
in the test's thread; every wait polls with a deadline. The broker's session timeout
and heartbeat interval are short so rebalances happen within a second or two.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
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
    """One member (``group.protocol=consumer`` unless told otherwise) that commits every
    record synchronously before it polls again, so a revoked partition's reads are all
    committed before another member takes it."""

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
        self.seen: Callable[[], None] = lambda: None

    def subscribe(self, topics: list[str]) -> None:
        self.kafka.subscribe(topics)

    def assignment(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.kafka.assignment()}

    def _commit(self, message: Any) -> None:
        """A STALE_MEMBER_EPOCH answer (the epoch moved while the commit was on its way)
        is retried: librdkafka does not retry manual commits itself."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        offsets = [TopicPartition(message.topic(), message.partition(), message.offset() + 1)]
        deadline = time.monotonic() + 30
        while True:
            try:
                done = self.kafka.commit(offsets=offsets, asynchronous=False)
                errors = [tp.error for tp in done or () if tp.error is not None]
                if not errors:
                    return
                raise KafkaException(errors[0])
            except KafkaException as exc:
                code = exc.args[0].code()
                if code != KafkaError.STALE_MEMBER_EPOCH or time.monotonic() > deadline:
                    raise

    def poll_until(self, done: Callable[[], bool], seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while not done():
            assert time.monotonic() < deadline, (
                f"gave up: {len(self.values)} read, assigned {sorted(self.assignment())}"
            )
            message = self.kafka.poll(0.05)
            if message is not None and message.error() is None:
                self.values.append(message.value().decode())
                self._commit(message)
                self.seen()

    def close(self) -> None:
        self.kafka.close()


def commit_start(bootstrap: str, group: str, topic: str, partitions: int) -> None:
    """Commit offset 0 of every partition for a group that has no members yet (a
    commit with member epoch -1, as Kafka accepts while the group is empty)."""
    from confluent_kafka import Consumer as Kafka
    from confluent_kafka import TopicPartition

    kafka = Kafka({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        done = kafka.commit(
            offsets=[TopicPartition(topic, p, 0) for p in range(partitions)], asynchronous=False
        )
        assert all(tp.error is None for tp in done), done
    finally:
        kafka.close()


def read_all(
    bootstrap: str, group: str, topics: list[str], count: int, conf: dict[str, Any] | None = None
) -> list[str]:
    """A fresh member reads ``count`` records, then leaves."""
    c = Consumer(bootstrap, group, **(conf or {}))
    c.subscribe(topics)
    try:
        c.poll_until(lambda: len(c.values) >= count)
    finally:
        c.close()
    return c.values


@pytest_twisted.ensureDeferred
async def test_one_member_reads_everything_and_a_new_run_resumes(broker: RunningBroker) -> None:
    bootstrap = broker.address
    await in_thread(create_topic, bootstrap, "t1", 6)
    await in_thread(produce, bootstrap, "t1", [f"v{i}" for i in range(60)], 6)
    values = await in_thread(read_all, bootstrap, "g1", ["t1"], 60)
    assert sorted(values) == sorted(f"v{i}" for i in range(60))
    await in_thread(produce, bootstrap, "t1", [f"w{i}" for i in range(12)], 6)
    again = await in_thread(read_all, bootstrap, "g1", ["t1"], 12)
    assert sorted(again) == sorted(f"w{i}" for i in range(12))
    group = broker.broker.groups.consumer_group("g1")
    assert group is not None and not group.members  # both runs left (epoch -1)


TOTAL = 3000


@pytest_twisted.ensureDeferred
async def test_members_joining_and_leaving_under_load_read_each_record_once(
    broker: RunningBroker,
) -> None:
    """Four members over time on six partitions while a producer writes: each of
    3000 records is read exactly once, and a later run resumes from the commits."""
    bootstrap = broker.address
    await in_thread(create_topic, bootstrap, "load", 6)
    # Every partition starts from a committed offset 0. Without one, librdkafka 2.16
    # resets to the earliest offset with a ListOffsets; when a rebalance pauses the
    # partition while that answer is queued behind a long-poll Fetch, a stale offset
    # query timer later resets the partition to the earliest offset again, after it
    # has been read and committed (librdkafka's debug log: "timed offset query for
    # offset BEGINNING in state active"), and re-reads what it had read.
    await in_thread(commit_start, bootstrap, "g-load", "load", 6)
    members = [Consumer(bootstrap, "g-load") for _ in range(4)]
    changed = threading.Condition()

    def total() -> int:
        return sum(len(m.values) for m in members)

    def notify() -> None:
        with changed:
            changed.notify_all()

    for m in members:
        m.seen = notify

    def producer() -> None:
        for start in range(0, TOTAL, 100):
            produce(bootstrap, "load", [f"v{i}" for i in range(start, start + 100)], 6)

    def member(m: Consumer, start_at: int, stop_at: int) -> None:
        with changed:
            assert changed.wait_for(lambda: total() >= start_at, 60)
        m.subscribe(["load"])
        try:
            m.poll_until(lambda: total() >= stop_at, 90)
        finally:
            m.close()
            notify()

    plan = [(members[0], 0, 1500), (members[1], 300, TOTAL), (members[2], 900, TOTAL)]
    plan.append((members[3], 1800, TOTAL))
    await within(
        defer.gatherResults(
            [threads.deferToThread(producer)]
            + [threads.deferToThread(member, *step) for step in plan],
            consumeErrors=True,
        ),
        180,
    )
    values = [v for m in members for v in m.values]
    assert len(values) == TOTAL
    assert sorted(set(values)) == sorted(f"v{i}" for i in range(TOTAL))
    assert all(m.values for m in members[:3])  # the first three each had partitions
    await in_thread(produce, bootstrap, "load", [f"late{i}" for i in range(30)], 6)
    again = await in_thread(read_all, bootstrap, "g-load", ["load"], 30)
    assert sorted(again) == sorted(f"late{i}" for i in range(30))


def wait_split(members: list[Consumer], partitions: int, seconds: float = 30) -> None:
    """Poll every member (from one thread) until their assignments cover the topic
    without overlap and each has some."""
    deadline = time.monotonic() + seconds
    while True:
        shares = [m.assignment() for m in members]
        union = set().union(*shares)
        if all(shares) and len(union) == partitions and sum(map(len, shares)) == partitions:
            return
        assert time.monotonic() < deadline, shares
        for m in members:
            assert m.kafka.poll(0.05) is None  # the topics stay empty


@pytest.mark.parametrize("assignor", ["uniform", "range"])
@pytest_twisted.ensureDeferred
async def test_both_server_assignors(broker: RunningBroker, assignor: str) -> None:
    bootstrap = broker.address
    await in_thread(create_topic, bootstrap, "ta", 3)
    await in_thread(create_topic, bootstrap, "tb", 3)
    group = f"g-{assignor}"

    def run() -> list[set[tuple[str, int]]]:
        members = [Consumer(bootstrap, group, **{"group.remote.assignor": assignor})]
        members.append(Consumer(bootstrap, group, **{"group.remote.assignor": assignor}))
        for m in members:
            m.subscribe(["ta", "tb"])
        try:
            wait_split(members, 6)
            return [m.assignment() for m in members]
        finally:
            for m in members:
                m.close()

    shares = await in_thread(run)
    assert sorted(len(s) for s in shares) == ([2, 4] if assignor == "range" else [3, 3])
    if assignor == "range":
        # Co-partitioned: each member has the same partition numbers of both topics.
        for share in shares:
            assert {p for t, p in share if t == "ta"} == {p for t, p in share if t == "tb"}
    cgroup = broker.broker.groups.consumer_group(group)
    assert cgroup is not None and cgroup.assignor_name == assignor


@pytest_twisted.ensureDeferred
async def test_a_regex_subscription_picks_up_a_topic_created_later(
    broker: RunningBroker,
) -> None:
    bootstrap = broker.address
    await in_thread(create_topic, bootstrap, "pre-one", 2)
    await in_thread(create_topic, bootstrap, "other", 2)
    await in_thread(produce, bootstrap, "pre-one", ["a0", "a1"], 2)
    await in_thread(produce, bootstrap, "other", ["x0", "x1"], 2)
    c = Consumer(bootstrap, "g-regex")

    def first() -> None:
        c.subscribe(["^pre-.*"])
        c.poll_until(lambda: len(c.values) >= 2)

    try:
        await in_thread(first)
        await in_thread(create_topic, bootstrap, "pre-two", 3)
        await in_thread(produce, bootstrap, "pre-two", ["b0", "b1", "b2"], 3)
        await in_thread(c.poll_until, lambda: len(c.values) >= 5)
        assert sorted(c.values) == ["a0", "a1", "b0", "b1", "b2"]
        assert {t for t, _ in c.assignment()} == {"pre-one", "pre-two"}
    finally:
        await in_thread(c.close)


@pytest_twisted.ensureDeferred
async def test_a_static_member_restarting_keeps_its_partitions(broker: RunningBroker) -> None:
    bootstrap = broker.address
    await in_thread(create_topic, bootstrap, "st", 4)

    def run() -> tuple[set[Any], set[Any], set[Any], int]:
        a = Consumer(bootstrap, "g-static", **{"group.instance.id": "a"})
        b = Consumer(bootstrap, "g-static", **{"group.instance.id": "b"})
        a.subscribe(["st"])
        b.subscribe(["st"])
        wait_split([a, b], 4)
        before_a, before_b = a.assignment(), b.assignment()
        epoch = broker.broker.groups.consumer_group("g-static").group_epoch  # type: ignore[union-attr]
        a.close()  # a static member leaves with epoch -2: its partitions wait for it
        again = Consumer(bootstrap, "g-static", **{"group.instance.id": "a"})
        again.subscribe(["st"])
        try:
            wait_split([again, b], 4)
            assert b.assignment() == before_b
            after = broker.broker.groups.consumer_group("g-static").group_epoch  # type: ignore[union-attr]
            return before_a, again.assignment(), before_b, after - epoch
        finally:
            again.close()
            b.close()

    before_a, after_a, _, bumps = await in_thread(run)
    assert after_a == before_a
    assert bumps == 0  # no rebalance: the instance took its assignment back


_DOOMED = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "group.protocol": "consumer", "auto.offset.reset": "earliest"})
c.subscribe([sys.argv[3]])
shown = None
while True:
    c.poll(0.05)
    now = sorted(tp.partition for tp in c.assignment())
    if now != shown:
        shown = now
        print("assigned", *now, flush=True)
"""


@pytest_twisted.ensureDeferred
async def test_a_killed_member_s_partitions_move_after_the_session_timeout(
    broker: RunningBroker,
) -> None:
    bootstrap = broker.address
    await in_thread(create_topic, bootstrap, "dead", 4)
    survivor = Consumer(bootstrap, "g-dead")
    doomed = subprocess.Popen(
        [sys.executable, "-c", _DOOMED, bootstrap, "g-dead", "dead"],
        stdout=subprocess.PIPE,
        text=True,
    )

    latest: list[set[int]] = [set()]

    def follow() -> None:
        """The doomed member's assignment lines, as they come, until it dies."""
        assert doomed.stdout is not None
        for line in doomed.stdout:
            latest[0] = {int(p) for p in line.split()[1:]}

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()

    def split() -> set[int]:
        # The survivor keeps polling (it must, to give partitions up) until the two
        # hold complementary, non-empty shares.
        survivor.subscribe(["dead"])
        seen: list[set[int]] = []

        def complementary() -> bool:
            theirs, mine = latest[0], {p for _, p in survivor.assignment()}
            seen[:] = [theirs]
            return bool(theirs) and bool(mine) and mine == set(range(4)) - theirs

        survivor.poll_until(complementary, 60)
        return seen[0]

    try:
        share = await in_thread(split)
        assert share and len(share) < 4
        os.kill(doomed.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        await in_thread(doomed.wait, 10)
        await in_thread(
            survivor.poll_until, lambda: {p for _, p in survivor.assignment()} == set(range(4))
        )
        took = time.monotonic() - killed_at
        assert took >= SETTINGS["group_consumer_session_timeout_ms"] / 1000 * 0.8, took
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait()
        reader.join(10)
        assert doomed.stdout is not None
        doomed.stdout.close()
        await in_thread(survivor.close)


@pytest_twisted.ensureDeferred
async def test_classic_and_consumer_members_in_turn_share_the_commits(
    broker: RunningBroker,
) -> None:
    bootstrap = broker.address
    await in_thread(create_topic, bootstrap, "turns", 3)
    classic = {"group.protocol": "classic", "session.timeout.ms": 6000}
    await in_thread(produce, bootstrap, "turns", [f"a{i}" for i in range(9)], 3)
    assert sorted(await in_thread(read_all, bootstrap, "g-turns", ["turns"], 9, classic)) == (
        sorted(f"a{i}" for i in range(9))
    )
    await in_thread(produce, bootstrap, "turns", [f"b{i}" for i in range(9)], 3)
    assert sorted(await in_thread(read_all, bootstrap, "g-turns", ["turns"], 9)) == sorted(
        f"b{i}" for i in range(9)
    )
    assert broker.broker.groups.consumer_group("g-turns") is not None
    await in_thread(produce, bootstrap, "turns", [f"c{i}" for i in range(9)], 3)
    assert sorted(await in_thread(read_all, bootstrap, "g-turns", ["turns"], 9, classic)) == (
        sorted(f"c{i}" for i in range(9))
    )
    assert broker.broker.groups.consumer_group("g-turns") is None


@pytest_twisted.ensureDeferred
async def test_the_admin_client_describes_and_lists_a_consumer_group(
    broker: RunningBroker,
) -> None:
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    bootstrap = broker.address
    await in_thread(create_topic, bootstrap, "adm", 2)
    c = Consumer(bootstrap, "g-admin", **{"client.id": "described"})

    def describe() -> tuple[Any, Any]:
        c.subscribe(["adm"])
        c.poll_until(lambda: len(c.assignment()) == 2, 30)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        desc = admin.describe_consumer_groups(["g-admin"])["g-admin"].result(30)
        listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(30)
        return desc, listed

    try:
        desc, listed = await in_thread(describe)
    finally:
        await in_thread(c.close)
    assert desc.type == ConsumerGroupType.CONSUMER
    assert desc.partition_assignor == "uniform"
    assert [m.client_id for m in desc.members] == ["described"]
    member = desc.members[0]
    assert {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions} == {
        ("adm", 0),
        ("adm", 1),
    }
    assert [(g.group_id, g.type) for g in listed.valid] == [("g-admin", ConsumerGroupType.CONSUMER)]


@pytest_twisted.ensureDeferred
async def test_members_rejoin_a_restarted_broker_and_resume_from_their_commits(
    data_dir: Path,
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = {**SETTINGS, "listen": [f"tcp:{port}:interface=127.0.0.1"]}
    running = await start_broker(data_dir, **settings)
    bootstrap = running.address
    c = Consumer(bootstrap, "g-restart", **{"reconnect.backoff.max.ms": 200})
    try:
        await in_thread(create_topic, bootstrap, "rs", 2)
        await in_thread(produce, bootstrap, "rs", [f"a{i}" for i in range(10)], 2)
        c.subscribe(["rs"])
        await in_thread(c.poll_until, lambda: len(c.values) >= 10)
        await running.stop()
        running = await start_broker(data_dir, **settings)
        await in_thread(produce, bootstrap, "rs", [f"b{i}" for i in range(10)], 2)
        await in_thread(c.poll_until, lambda: len(c.values) >= 20)
        assert sorted(c.values) == sorted(
            [f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)]
        )
        group = running.broker.groups.consumer_group("g-restart")
        assert group is not None and len(group.members) == 1
    finally:
        await in_thread(c.close)
        await running.stop()
