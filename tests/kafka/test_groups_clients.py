"""Consumer groups with unmodified Kafka clients against a real rustka broker (issue 12).

Each client runs in a reactor pool thread (``threads.deferToThread``) while the
reactor serves the broker in the test's own thread; two members of one group
poll in two threads at once, so neither can block the other's rebalance. Every
wait is a poll loop with a deadline inside the client's thread, and every
Deferred the test awaits is bounded by `within`. Session timeouts are short
(the broker's ``group_min_session_timeout_ms`` is lowered to allow them) so a
rebalance is noticed within a heartbeat of a few hundred milliseconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
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

from rustka.errors import RustkaError
from rustka.ops.assignments import consumer_assignment
from rustka.ops.manhole import admin_namespace, kafka_group_rows
from tests.conftest import LogWatcher, RunningBroker, start_broker, within

pytestmark = pytest.mark.clients

RUSTKA = str(Path(sys.executable).parent / "rustka")
SESSION_MS = 3000
HEARTBEAT_MS = 300
REBALANCE_MS = 10000
PARTITIONS = 4

Read = tuple[int, int, str]
"""(partition, offset, value) as a consumer saw it."""


def in_thread(f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return within(threads.deferToThread(f, *args, **kwargs), 60)


async def both(*calls: Any) -> list[Any]:
    """Run blocking calls in parallel pool threads; fail with the first error."""
    results = await within(
        defer.gatherResults([threads.deferToThread(*c) for c in calls], consumeErrors=True), 60
    )
    return list(results)


#: Short session timeouts, and a first-join delay like Kafka's
#: ``group.initial.rebalance.delay.ms`` (3 s there): kafka-python's leader assigns
#: from the metadata it has when the join completes, and without a delay a join
#: can complete before its first Metadata answer, leaving the member with nothing.
GROUP_SETTINGS = {"group_min_session_timeout_ms": 1000, "group_initial_rebalance_delay_ms": 500}


@pytest_twisted.async_yield_fixture
async def broker(data_dir: Path) -> AsyncIterator[RunningBroker]:
    """A broker that accepts the suite's short session timeouts."""
    running = await start_broker(data_dir, **GROUP_SETTINGS)
    try:
        yield running
    finally:
        await running.stop()


# -- clients ----------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, values: list[str], partitions: int = PARTITIONS) -> None:
    """Value i goes to partition i % partitions, so each partition holds a known run."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
    failures: list[str] = []
    for i, value in enumerate(values):
        producer.produce(
            topic,
            value=value.encode(),
            partition=i % partitions,
            on_delivery=lambda err, _m: failures.append(str(err)) if err else None,
        )
    left = producer.flush(30)
    assert left == 0 and not failures, (left, failures)


class Member:
    """One group member of some client library, driven from whichever thread calls it.

    Calls are never concurrent for one member (each test step hands a member to one
    thread), which is all the client libraries ask for.
    """

    name = ""

    def __init__(self) -> None:
        self.reads: list[Read] = []
        self.assigned: frozenset[int] = frozenset()

    def poll(self, seconds: float) -> list[Read]:
        raise NotImplementedError

    def commit(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def poll_until(self, done: Callable[[], bool], seconds: float = 20) -> None:
        """Poll, recording reads and the assignment, until ``done()`` or the deadline."""
        deadline = time.monotonic() + seconds
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.name}: gave up after {seconds}s with {len(self.reads)} reads, "
                    f"assignment {sorted(self.assigned)}"
                )
            self.reads.extend(self.poll(0.1))

    def read(self, count: int, seconds: float = 20) -> list[Read]:
        """Exactly the next ``count`` records this member gets, then a synchronous commit."""
        start = len(self.reads)
        self.poll_until(lambda: len(self.reads) - start >= count, seconds)
        self.commit()
        return self.reads[start:]


class ConfluentMember(Member):
    name = "confluent-kafka"

    def __init__(self, bootstrap: str, group: str, topic: str, **conf: Any) -> None:
        from confluent_kafka import Consumer

        super().__init__()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": "rdkafka-member",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
                "max.poll.interval.ms": REBALANCE_MS,
                "reconnect.backoff.max.ms": 500,
                "socket.timeout.ms": 10000,
                **conf,
            }
        )
        self.consumer.subscribe([topic])

    def poll(self, seconds: float) -> list[Read]:
        msg = self.consumer.poll(seconds)
        self.assigned = frozenset(tp.partition for tp in self.consumer.assignment())
        if msg is None:
            return []
        if msg.error():
            if msg.error().code() == -191:  # _PARTITION_EOF is informational
                return []
            raise AssertionError(f"confluent-kafka: {msg.error()}")
        return [(msg.partition(), msg.offset(), msg.value().decode())]

    def commit(self) -> None:
        from confluent_kafka import KafkaException

        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as e:
            if "NO_OFFSET" not in str(e):  # nothing consumed since the last commit
                raise

    def close(self) -> None:
        self.consumer.close()


class KafkaPythonMember(Member):
    name = "kafka-python"

    def __init__(self, bootstrap: str, group: str, topic: str, **conf: Any) -> None:
        from kafka import KafkaConsumer

        super().__init__()
        self.consumer = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id="kafka-python-member",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            max_poll_interval_ms=REBALANCE_MS,
            reconnect_backoff_max_ms=500,
            **conf,
        )

    def poll(self, seconds: float) -> list[Read]:
        got = self.consumer.poll(timeout_ms=int(seconds * 1000))
        self.assigned = frozenset(tp.partition for tp in self.consumer.assignment())
        return [(m.partition, m.offset, m.value.decode()) for batch in got.values() for m in batch]

    def commit(self) -> None:
        self.consumer.commit()

    def close(self) -> None:
        self.consumer.close()


class AioKafkaMember(Member):
    """aiokafka on a private event loop, so the blocking interface matches the others."""

    name = "aiokafka"

    def __init__(self, bootstrap: str, group: str, topic: str, **conf: Any) -> None:
        from aiokafka import AIOKafkaConsumer

        super().__init__()
        self.loop = asyncio.new_event_loop()

        async def make() -> Any:
            consumer = AIOKafkaConsumer(
                topic,
                bootstrap_servers=bootstrap,
                group_id=group,
                client_id="aiokafka-member",
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=SESSION_MS,
                heartbeat_interval_ms=HEARTBEAT_MS,
                max_poll_interval_ms=REBALANCE_MS,
                **conf,
            )
            await consumer.start()
            return consumer

        self.consumer = self.loop.run_until_complete(make())

    def poll(self, seconds: float) -> list[Read]:
        got = self.loop.run_until_complete(self.consumer.getmany(timeout_ms=int(seconds * 1000)))
        self.assigned = frozenset(tp.partition for tp in self.consumer.assignment())
        return [(m.partition, m.offset, m.value.decode()) for batch in got.values() for m in batch]

    def commit(self) -> None:
        self.loop.run_until_complete(self.consumer.commit())

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.consumer.stop())
        finally:
            self.loop.close()


MEMBERS: dict[str, type[Member]] = {
    "confluent-kafka": ConfluentMember,
    "kafka-python": KafkaPythonMember,
    "aiokafka": AioKafkaMember,
}


def run_member(kind: str, bootstrap: str, group: str, topic: str, count: int) -> list[Read]:
    """Subscribe, read ``count`` records, commit synchronously and close (leaving the group)."""
    member = MEMBERS[kind](bootstrap, group, topic)
    try:
        return member.read(count)
    finally:
        member.close()


def run_kcat(bootstrap: str, group: str, topic: str, count: int) -> list[Read]:
    """``kcat -G``: read ``count`` lines, then SIGTERM, on which kcat commits and leaves.

    kcat's balanced consumer has no exit-at-end option; it stores each offset as it
    prints the record and commits the stored offsets when it closes the consumer.
    """
    settings = {
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": HEARTBEAT_MS,
    }
    options = [arg for key, value in settings.items() for arg in ("-X", f"{key}={value}")]
    proc = subprocess.Popen(
        ["kcat", "-b", bootstrap, "-G", group, "-u", "-q", "-f", "%p %o %s\\n", *options, topic],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(30, proc.kill)
    watchdog.start()
    reads: list[Read] = []
    try:
        assert proc.stdout is not None
        while len(reads) < count:
            line = proc.stdout.readline()
            if not line:
                break
            partition, offset, value = line.rstrip("\n").split(" ", 2)
            reads.append((int(partition), int(offset), value))
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(reads) == count, f"kcat read {len(reads)} of {count}: {err}"
    assert proc.returncode == 0, f"kcat exited {proc.returncode}: {err}"
    return reads


def values(reads: list[Read]) -> list[str]:
    return sorted(v for _, _, v in reads)


async def make_topic(running: RunningBroker, topic: str, partitions: int = PARTITIONS) -> None:
    c = await running.client()
    try:
        await within(c.create_topic(topic, partitions))
    finally:
        await c.close()


async def rustka_cli(running: RunningBroker, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [RUSTKA, args[0], "--broker", running.address, *args[1:]]
    result: subprocess.CompletedProcess[str] = await in_thread(
        subprocess.run, argv, capture_output=True, text=True, timeout=60
    )
    return result


# -- single client ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["confluent-kafka", "kafka-python", "aiokafka", "kcat"])
@pytest_twisted.ensureDeferred
async def test_one_client_subscribes_commits_and_a_second_run_resumes(
    broker: RunningBroker, kind: str
) -> None:
    topic, group = f"single-{kind}", f"g-{kind}"
    await make_topic(broker, topic, 2)
    first = [f"a{i}" for i in range(10)]
    await in_thread(produce, broker.address, topic, first, 2)

    def run(count: int) -> list[Read]:
        if kind == "kcat":
            return run_kcat(broker.address, group, topic, count)
        return run_member(kind, broker.address, group, topic, count)

    assert values(await in_thread(run, 10)) == sorted(first)
    assert broker.broker.committed_offsets(group) == {(topic, 0): 5, (topic, 1): 5}
    # The client left the group on close: no member is left, the commits stay.
    described = broker.broker.groups.describe(group)
    assert (described.state, described.members) == ("Empty", ())

    second = [f"b{i}" for i in range(6)]
    await in_thread(produce, broker.address, topic, second, 2)
    again = await in_thread(run, 6)
    assert values(again) == sorted(second)
    assert sorted((p, o) for p, o, _ in again) == [(p, o) for p in (0, 1) for o in (5, 6, 7)]
    assert broker.broker.committed_offsets(group) == {(topic, 0): 8, (topic, 1): 8}


# -- two members -------------------------------------------------------------------------


def split_evenly(a: Member, b: Member) -> Callable[[], bool]:
    """True once both members hold a share and the shares are disjoint and cover the topic."""

    def done() -> bool:
        return (
            bool(a.assigned)
            and bool(b.assigned)
            and not a.assigned & b.assigned
            and a.assigned | b.assigned == set(range(PARTITIONS))
        )

    return done


async def second_member_joins(
    running: RunningBroker, make_a: Callable[[], Member], make_b: Callable[[], Member], topic: str
) -> tuple[Member, Member]:
    """A reads and commits everything, B joins, both settle on disjoint shares."""
    first = [f"one-{i}" for i in range(20)]
    await in_thread(produce, running.address, topic, first)
    a = await in_thread(make_a)
    assert values(await in_thread(a.read, 20)) == sorted(first)
    assert a.assigned == set(range(PARTITIONS))
    b = await in_thread(make_b)
    done = split_evenly(a, b)
    await both((a.poll_until, done), (b.poll_until, done))
    # Nothing new was produced and A committed all it read: B starts at A's commits.
    assert len(a.reads) == 20 and b.reads == []
    return a, b


async def both_read_the_rest(running: RunningBroker, a: Member, b: Member, topic: str) -> None:
    """Records produced now are read once, by the member owning their partition."""
    second = [f"two-{i}" for i in range(40)]
    a_start, b_start = len(a.reads), len(b.reads)
    await in_thread(produce, running.address, topic, second)

    def together() -> bool:
        return len(a.reads) - a_start + len(b.reads) - b_start >= len(second)

    await both((a.poll_until, together), (b.poll_until, together))
    await both((a.commit,), (b.commit,))
    got_a, got_b = a.reads[a_start:], b.reads[b_start:]
    assert {p for p, _, _ in got_a} <= a.assigned and {p for p, _, _ in got_b} <= b.assigned
    assert not set(values(got_a)) & set(values(got_b))
    assert sorted(values(got_a) + values(got_b)) == sorted(second)
    # 60 records over 4 partitions: every partition committed up to its end.
    committed = running.broker.committed_offsets(a_group(running, topic))
    assert committed == {(topic, p): 15 for p in range(PARTITIONS)}


def a_group(running: RunningBroker, topic: str) -> str:
    return f"g-{topic}"


@pytest.mark.parametrize("kind", ["confluent-kafka", "kafka-python"])
@pytest_twisted.ensureDeferred
async def test_two_members_split_the_partitions_and_read_each_record_once(
    broker: RunningBroker, kind: str
) -> None:
    topic = f"two-{kind}"
    group = a_group(broker, topic)
    await make_topic(broker, topic)
    cls = MEMBERS[kind]
    a, b = await second_member_joins(
        broker,
        lambda: cls(broker.address, group, topic),
        lambda: cls(broker.address, group, topic),
        topic,
    )
    try:
        described = broker.broker.groups.describe(group)
        assert described.state == "Stable" and len(described.members) == 2
        shares = {m.member_id: consumer_assignment(m.assignment)[topic] for m in described.members}
        assert sorted(p for share in shares.values() for p in share) == list(range(PARTITIONS))
        await both_read_the_rest(broker, a, b, topic)
    finally:
        await both((a.close,), (b.close,))


@pytest_twisted.ensureDeferred
async def test_librdkafka_and_kafka_python_share_a_group_with_the_range_assignor(
    broker: RunningBroker,
) -> None:
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    topic = "mixed"
    group = a_group(broker, topic)
    await make_topic(broker, topic)
    a, b = await second_member_joins(
        broker,
        lambda: ConfluentMember(
            broker.address, group, topic, **{"partition.assignment.strategy": "range"}
        ),
        lambda: KafkaPythonMember(
            broker.address,
            group,
            topic,
            partition_assignment_strategy=(RangePartitionAssignor,),
        ),
        topic,
    )
    try:
        described = broker.broker.groups.describe(group)
        assert described.protocol == "range"
        assert {m.client_id for m in described.members} == {
            "rdkafka-member",
            "kafka-python-member",
        }
        # The range assignor hands each member a contiguous run of partitions.
        for share in (a.assigned, b.assigned):
            assert sorted(share) == list(range(min(share), max(share) + 1))
        await both_read_the_rest(broker, a, b, topic)
    finally:
        await both((a.close,), (b.close,))


# -- a member dies ---------------------------------------------------------------------

_DOOMED = """
import sys
from confluent_kafka import Consumer
c = Consumer({
    "bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "client.id": "doomed",
    "auto.offset.reset": "earliest", "enable.auto.commit": False,
    "session.timeout.ms": int(sys.argv[4]), "heartbeat.interval.ms": int(sys.argv[5]),
})
c.subscribe([sys.argv[3]])
shown = None
while True:
    c.poll(0.1)
    now = sorted(tp.partition for tp in c.assignment())
    if now != shown:
        shown = now
        print("assigned", *now, flush=True)
"""


@pytest_twisted.ensureDeferred
async def test_a_killed_member_is_expelled_after_its_session_timeout(
    broker: RunningBroker, log_watcher: LogWatcher
) -> None:
    topic = "dead"
    group = a_group(broker, topic)
    await make_topic(broker, topic)
    a = await in_thread(ConfluentMember, broker.address, group, topic)
    doomed = subprocess.Popen(
        [sys.executable, "-c", _DOOMED, broker.address, group, topic, str(SESSION_MS), "300"],
        stdout=subprocess.PIPE,
        text=True,
    )
    doomed_share: list[frozenset[int]] = [frozenset()]

    def watch_doomed() -> None:
        """Read the subprocess's assignment lines until the split is complete."""
        assert doomed.stdout is not None
        watchdog = threading.Timer(20, doomed.kill)
        watchdog.start()
        try:
            while True:
                line = doomed.stdout.readline()
                if not line:
                    raise AssertionError("the doomed member exited (or was killed) unassigned")
                doomed_share[0] = frozenset(int(p) for p in line.split()[1:])
                if doomed_share[0]:
                    return
        finally:
            watchdog.cancel()

    def a_has_complement() -> bool:
        share = doomed_share[0]
        return bool(share) and a.assigned == set(range(PARTITIONS)) - share

    try:
        await both((a.poll_until, a_has_complement), (watch_doomed,))
        share = doomed_share[0]
        assert a.assigned and share
        # Produced after the split: A reads its own partitions; the doomed member may
        # read its share, but commits nothing.
        first = [f"one-{i}" for i in range(20)]
        await in_thread(produce, broker.address, topic, first)
        mine = await in_thread(a.read, 5 * len(a.assigned))
        assert {p for p, _, _ in mine} == a.assigned
        # kill -9: no LeaveGroup, no commit; only the session timeout can tell.
        os.kill(doomed.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        await in_thread(doomed.wait, 10)
        await in_thread(a.poll_until, lambda: a.assigned == set(range(PARTITIONS)), 20)
        took = time.monotonic() - killed_at
        assert took >= SESSION_MS / 1000 * 0.8, took
        assert log_watcher.messages("missed its session timeout")
        # The survivor reads the dead member's partitions from the start (no commits).
        got = await in_thread(a.read, 5 * len(share))
        assert {p for p, _, _ in got} == share
        assert values(mine + got) == sorted(first)
        described = broker.broker.groups.describe(group)
        assert [m.client_id for m in described.members] == ["rdkafka-member"]
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait()
        assert doomed.stdout is not None
        doomed.stdout.close()
        await in_thread(a.close)


# -- broker restart --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest_twisted.ensureDeferred
async def test_members_rejoin_a_restarted_broker_and_resume_from_their_commits(
    data_dir: Path,
) -> None:
    settings = {**GROUP_SETTINGS, "listen": [f"tcp:{free_port()}:interface=127.0.0.1"]}
    running = await start_broker(data_dir, **settings)
    topic, group = "restart", "g-restart"
    a: Member | None = None
    b: Member | None = None
    try:
        await make_topic(running, topic)
        first = [f"one-{i}" for i in range(20)]
        a = await in_thread(ConfluentMember, running.address, group, topic)
        # Two librdkafka members: kafka-python leaves the sockets of the connection
        # attempts the stopped broker refused unclosed (a ResourceWarning at exit).
        b = await in_thread(ConfluentMember, running.address, group, topic)
        done = split_evenly(a, b)
        # Settle first, so that no record is read by a member that then loses its partition.
        await both((a.poll_until, done), (b.poll_until, done))
        await in_thread(produce, running.address, topic, first)

        def all_read() -> bool:
            return len(a.reads) + len(b.reads) >= 20

        await both((a.poll_until, all_read), (b.poll_until, all_read))
        await both((a.commit,), (b.commit,))
        assert values(a.reads + b.reads) == sorted(first)
        before = running.broker.groups.describe(group).generation_id

        await running.stop()
        running = await start_broker(data_dir, **settings)
        # Membership did not survive; the commits did.
        assert running.broker.groups.describe(group).members == ()
        assert running.broker.committed_offsets(group) == {(topic, p): 5 for p in range(4)}

        restarted = running

        def rejoined() -> bool:
            """Both members are in the new coordinator's group and hold disjoint shares."""
            from twisted.internet import reactor

            now = threads.blockingCallFromThread(reactor, restarted.broker.groups.describe, group)
            return now.state == "Stable" and len(now.members) == 2 and done()

        await both((a.poll_until, rejoined, 30), (b.poll_until, rejoined, 30))
        assert values(a.reads + b.reads) == sorted(first)
        second = [f"two-{i}" for i in range(20)]
        await in_thread(produce, running.address, topic, second)
        a_start, b_start = len(a.reads), len(b.reads)

        def rest_read() -> bool:
            return len(a.reads) - a_start + len(b.reads) - b_start >= 20

        await both((a.poll_until, rest_read), (b.poll_until, rest_read))
        await both((a.commit,), (b.commit,))
        assert values(a.reads[a_start:] + b.reads[b_start:]) == sorted(second)
        after = running.broker.groups.describe(group)
        assert after.state == "Stable" and len(after.members) == 2
        assert after.generation_id >= 1 and before >= 1
        assert running.broker.committed_offsets(group) == {(topic, p): 10 for p in range(4)}
    finally:
        closing = [(m.close,) for m in (a, b) if m is not None]
        if closing:
            await both(*closing)
        await running.stop()


# -- both protocols ----------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_native_and_kafka_share_one_offsets_store_and_refuse_each_other(
    broker: RunningBroker,
) -> None:
    topic, group = "shared", "g-shared"
    await make_topic(broker, topic, 2)
    await in_thread(produce, broker.address, topic, [f"v{i}" for i in range(10)], 2)
    native = await broker.client()
    try:
        # A native commit is where a Kafka member of the same group starts.
        await within(native.commit(group, topic, 0, 2))
        member = await in_thread(ConfluentMember, broker.address, group, topic)
        try:
            got = await in_thread(member.read, 8)
            assert sorted((p, o) for p, o, _ in got) == [(0, o) for o in range(2, 5)] + [
                (1, o) for o in range(5)
            ]
            # While the Kafka member is active, native offsets of its group are refused ...
            for call in (
                lambda: native.commit(group, topic, 0, 0),
                lambda: native.committed(group, topic, 0),
            ):
                with pytest.raises(RustkaError, match="active Kafka consumer") as refused:
                    await within(call())
                assert "g-shared" in str(refused.value)
            # ... and so is a reset, which names the members it is waiting for.
            reset = await rustka_cli(broker, "groups", "reset", group, topic, "--to", "earliest")
            assert reset.returncode == 1 and "active Kafka consumer" in reset.stderr
            shown = json.loads(
                (await rustka_cli(broker, "groups", "describe", group, "--json")).stdout
            )
            assert shown["state"] == "Stable" and shown["protocol"] in ("range", "roundrobin")
            [m] = shown["members"]
            assert m["client_id"] == "rdkafka-member" and m["client_host"] == "/127.0.0.1"
            assert sorted(m["assignment"][topic]) == [0, 1]
            table = (await rustka_cli(broker, "groups", "describe", group)).stdout.splitlines()
            assert table[0].startswith(f"group {group}: state Stable, protocol consumer/")
            assert table[2].startswith(f"rdkafka-member\t/127.0.0.1\t{topic}[0,1]\t")
            assert f"{topic}\t1\t5\t5\t0\trdkafka-member\t/127.0.0.1" in table
            assert group in (await rustka_cli(broker, "groups", "list")).stdout.split()
        finally:
            await in_thread(member.close)
        # The Kafka commits are the native ones: native reads them, lag shows them.
        assert await within(native.committed(group, topic, 0)) == 5
        await in_thread(produce, broker.address, topic, ["late"] * 3, 1)
        text = await rustka_cli(broker, "groups", "describe", group)
        assert text.returncode == 0, text.stderr
        assert f"{topic}\t0\t5\t8\t3" in text.stdout
        shown = json.loads((await rustka_cli(broker, "groups", "describe", group, "--json")).stdout)
        assert (shown["state"], shown["members"]) == ("Empty", [])
        assert {"topic": topic, "partition": 0, "committed": 5, "end": 8, "lag": 3} in shown[
            "offsets"
        ]
        reset = await rustka_cli(broker, "groups", "reset", group, topic, "--to", "earliest")
        assert reset.returncode == 0, reset.stderr
        assert broker.broker.committed_offsets(group) == {(topic, 0): 0, (topic, 1): 0}
    finally:
        await native.close()


def admin_views(bootstrap: str, group: str) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(30)
    described = admin.describe_consumer_groups([group])[group].result(30)
    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        kp_listed = kp.list_groups()
        kp_described = kp.describe_groups([group])[group]
        kp_offsets = kp.list_group_offsets(group)[group]
    finally:
        kp.close()
    return {
        "listed": {g.group_id for g in listed.valid},
        "state": described.state.name,
        "members": len(described.members),
        "kp_listed": {g["group_id"] for g in kp_listed},
        "kp_state": kp_described["group_state"],
        "kp_offsets": {(tp.topic, tp.partition): m.offset for tp, m in kp_offsets.items()},
    }


@pytest_twisted.ensureDeferred
async def test_a_native_only_group_is_visible_to_kafka_admin_clients(
    broker: RunningBroker,
) -> None:
    await make_topic(broker, "plain", 2)
    native = await broker.client()
    try:
        await within(native.commit("native-only", "plain", 1, 0))
    finally:
        await native.close()
    seen = await in_thread(admin_views, broker.address, "native-only")
    assert "native-only" in seen["listed"] and "native-only" in seen["kp_listed"]
    assert (seen["state"], seen["members"], seen["kp_state"]) == ("EMPTY", 0, "Empty")
    assert seen["kp_offsets"] == {("plain", 1): 0}


@pytest_twisted.ensureDeferred
async def test_metrics_and_manhole_show_members_assignment_and_lag(
    broker: RunningBroker,
) -> None:
    from rustka.ops.metrics import metrics_registry

    topic, group = "watched", "g-watched"
    await make_topic(broker, topic, 2)
    await in_thread(produce, broker.address, topic, [f"v{i}" for i in range(6)], 2)
    member = await in_thread(ConfluentMember, broker.address, group, topic)
    try:
        await in_thread(member.read, 4)
        # Two records are left unread (one per partition after four reads of six).
        [row] = [r for r in kafka_group_rows(broker.broker) if r[0] == group]
        state, generation, client_id, host, assignment, _member_id, lag = row[1:]
        assert (state, client_id, host) == ("Stable", "rdkafka-member", "/127.0.0.1")
        assert generation >= 1 and assignment == f"{topic}[0,1]" and lag == 2

        io = broker.broker.io
        ns = admin_namespace(broker.broker, broker.factory, io)
        text = capture(ns["kafka_groups"])
        assert "rdkafka-member" in text and "Stable" in text and f"{topic}[0,1]" in text

        registry = metrics_registry(broker.broker, broker.factory, io)
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect()
            for s in family.samples
        }
        assert samples[("rustka_group_members", (("group", group), ("state", "Stable")))] == 1
        assert samples[("rustka_group_generation", (("group", group),))] == generation
        lags = [
            value
            for (name, labels), value in samples.items()
            if name == "rustka_group_lag" and ("group", group) in labels
        ]
        assert sum(lags) == 2
    finally:
        await in_thread(member.close)


def capture(helper: Callable[[], None]) -> str:
    """What a manhole helper prints (it writes to stdout in a manhole session)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        helper()
    return out.getvalue()
