"""The share consumer (rustka/client/share_consumer.py) over the native share ops
(docs/protocol.md 7.16), against a real broker on 127.0.0.1."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer

from rustka.client.share_consumer import ShareConsumer, ShareRecord
from rustka.errors import InvalidRecordState, InvalidRequest, UnknownTopic
from tests.conftest import RunningBroker, within


async def produce(broker: RunningBroker, topic: str, partitions: int, count: int) -> None:
    c = await broker.client()
    try:
        await within(c.create_topic(topic, partitions))
        for i in range(count):
            await within(c.produce(topic, b"k%d" % i, b"v%d" % i))
    finally:
        await within(c.close())


def values(records: list[ShareRecord]) -> list[bytes]:
    return sorted(r.record.value or b"" for r in records)


async def workers(broker: RunningBroker, n: int, topic: str, group: str = "g") -> list[Any]:
    out = []
    for i in range(n):
        client = await broker.client()
        out.append(ShareConsumer(client, group, topic, member=f"w{i}", start="earliest"))
    return out


async def close(*consumers: ShareConsumer) -> None:
    for c in consumers:
        await within(c.client.close())


@pytest_twisted.ensureDeferred
async def test_two_workers_take_different_records_and_together_all(broker: RunningBroker) -> None:
    await produce(broker, "jobs", 3, 30)
    a, b = await workers(broker, 2, "jobs")
    try:
        first = await within(a.poll(12))
        second = await within(b.poll(100))
        assert len(first) == 12 and len(second) == 18
        assert not {(r.partition, r.record.offset) for r in first} & {
            (r.partition, r.record.offset) for r in second
        }
        assert values(first + second) == sorted(b"v%d" % i for i in range(30))
        assert {r.delivery_count for r in first + second} == {1}
        # Every record is locked: nothing is left for either until acknowledged.
        assert await within(a.poll(10)) == []
        await within(a.acknowledge(first))
        await within(b.acknowledge(second))
        assert await within(b.poll(10)) == []
    finally:
        await close(a, b)


@pytest_twisted.ensureDeferred
async def test_release_redelivers_reject_archives(broker: RunningBroker) -> None:
    await produce(broker, "q", 1, 4)
    a, b = await workers(broker, 2, "q")
    try:
        taken = await within(a.poll(4))
        assert [r.record.offset for r in taken] == [0, 1, 2, 3]
        await within(a.acknowledge(taken[:1], "accept"))
        await within(a.acknowledge(taken[1:2], "release"))
        await within(a.acknowledge(taken[2:3], "reject"))
        again = await within(b.poll(10))
        # Only the released record comes back, to the other member, a second delivery.
        assert [(r.record.offset, r.delivery_count) for r in again] == [(1, 2)]
        # Acknowledging what another member holds, or twice, is refused.
        with pytest.raises(InvalidRecordState):
            await within(a.acknowledge(again))
        with pytest.raises(InvalidRecordState):
            await within(a.acknowledge(taken[:1]))
        await within(b.acknowledge(again))
        # a still holds offset 3; leaving gives it to b at once.
        await within(a.stop())
        left = await within(b.poll(10))
        assert [(r.record.offset, r.delivery_count) for r in left] == [(3, 2)]
    finally:
        await close(a, b)


@pytest_twisted.ensureDeferred
async def test_a_waiting_poll_gets_a_record_produced_meanwhile(broker: RunningBroker) -> None:
    await produce(broker, "later", 2, 0)
    [a] = await workers(broker, 1, "later")
    a.max_wait_ms = 30_000
    try:
        waiting = a.poll(5)
        c = await broker.client()
        try:
            await within(c.produce("later", b"k", b"late"))
        finally:
            await within(c.close())
        got = await within(waiting)
        assert [r.record.value for r in got] == [b"late"]
    finally:
        await close(a)


@pytest_twisted.ensureDeferred
async def test_a_waiting_poll_gets_a_record_another_member_releases(broker: RunningBroker) -> None:
    """A release wakes a waiting poll as an append does (no new record is produced)."""
    await produce(broker, "handover", 1, 1)
    a, b = await workers(broker, 2, "handover")
    b.max_wait_ms = 30_000
    try:
        [held] = await within(a.poll(1))
        waiting = b.poll(1)
        await within(a.acknowledge([held], "release"))
        [got] = await within(waiting)
        assert (got.record.offset, got.delivery_count) == (0, 2)
    finally:
        await close(a, b)


@pytest_twisted.ensureDeferred
async def test_run_accepts_what_the_callback_took_and_releases_what_it_failed(
    broker: RunningBroker,
) -> None:
    await produce(broker, "work", 1, 5)
    a, b = await workers(broker, 2, "work")
    a.max_wait_ms = b.max_wait_ms = 100
    seen: list[bytes] = []
    try:

        def fail(records: list[ShareRecord]) -> None:
            raise RuntimeError("worker crashed")

        with pytest.raises(RuntimeError, match="worker crashed"):
            await within(a.run(fail, max_records=2))
        done: defer.Deferred[None] = defer.Deferred()

        def work(records: list[ShareRecord]) -> None:
            seen.extend(values(records))
            if len(seen) == 5 and not done.called:
                done.callback(None)

        running = b.run(work)
        await within(done)
        await within(b.stop())
        await within(running)
        assert sorted(seen) == sorted(b"v%d" % i for i in range(5))
        # a's two released records went to b as second deliveries; all are accepted.
        assert await within(a.poll(10)) == []
    finally:
        await close(a, b)


@pytest_twisted.ensureDeferred
async def test_bad_share_requests_are_refused_and_the_connection_goes_on(
    broker: RunningBroker,
) -> None:
    c = await broker.client()
    try:
        with pytest.raises(UnknownTopic):
            await within(c.share_fetch("g", "m", "nope", 1))
        with pytest.raises(InvalidRequest, match="member id"):
            await within(c.share_fetch("g", "", "nope", 1))
        with pytest.raises(InvalidRequest, match="start"):
            await within(c.share_fetch("g", "m", "nope", 1, 0, 7))
        with pytest.raises(InvalidRequest, match="kind"):
            await within(c.share_acknowledge("g", "m", "nope", [(0, 0, 9)]))
        assert await within(c.metadata()) is not None
    finally:
        await within(c.close())
