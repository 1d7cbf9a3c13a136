"""The prefetching consumer against a real in-process broker on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer

from rustka.client.consumer import Consumer
from rustka.client.protocol import RustkaClientProtocol
from rustka.errors import InvalidRequest, OffsetOutOfRange, UnknownPartition
from rustka.record.batch import Record
from tests.conftest import RunningBroker, within


async def fill(client: RustkaClientProtocol, topic: str, count: int, per_batch: int = 10) -> None:
    """Write ``count`` records value-0..value-N to partition 0 in batches."""
    for start in range(0, count, per_batch):
        records = [
            Record(f"k{i}".encode(), f"value-{i}".encode())
            for i in range(start, min(count, start + per_batch))
        ]
        await within(client.produce_batch(topic, 0, records))


def collector() -> tuple[list[Record], Callable[[list[Record]], None]]:
    seen: list[Record] = []
    return seen, seen.extend


@pytest_twisted.ensureDeferred
async def test_every_record_once_in_order_across_stop_and_resume(
    client: RustkaClientProtocol,
) -> None:
    """Stopping mid-way and resuming in a new consumer neither skips nor repeats a record."""
    await within(client.create_topic("orders", 1))
    await fill(client, "orders", 200)
    seen: list[Record] = []
    first = Consumer(client, "g", "orders", 0, max_bytes=300)

    def take(records: list[Record]) -> None:
        seen.extend(records)
        if len(seen) >= 70:
            first.stop()

    await within(first.start(take))
    assert await within(client.committed("g", "orders", 0)) == len(seen)
    second = Consumer(client, "g", "orders", 0, until_end=True, max_bytes=300)
    await within(second.start(seen.extend))
    assert [r.offset for r in seen] == list(range(200))
    assert [r.value for r in seen] == [f"value-{i}".encode() for i in range(200)]
    assert second.start_offset == first.position
    assert await within(client.committed("g", "orders", 0)) == 200


@pytest_twisted.ensureDeferred
async def test_prefetch_keeps_a_fetch_in_flight_during_the_callback(
    client: RustkaClientProtocol,
) -> None:
    """While the callback runs, the next FetchBatch is already on the wire."""
    await within(client.create_topic("prefetch", 1))
    await fill(client, "prefetch", 100)
    pending_during_callback: list[int] = []

    def take(records: list[Record]) -> None:
        pending_during_callback.append(client.pending)

    consumer = Consumer(client, "g", "prefetch", 0, max_bytes=200, until_end=True)
    await within(consumer.start(take))
    assert len(pending_during_callback) > 3
    # Every callback but the last (after which the log has ended) overlaps a fetch.
    assert all(n == 1 for n in pending_during_callback[:-1])
    assert consumer.delivered == 100


@pytest_twisted.ensureDeferred
async def test_an_awaitable_callback_holds_back_the_next_batch(
    client: RustkaClientProtocol,
) -> None:
    """A callback returning a Deferred gets no new batch until it fires."""
    from twisted.internet import reactor

    await within(client.create_topic("slow", 1))
    await fill(client, "slow", 30)
    active = [0]
    overlaps: list[int] = []

    def take(records: list[Record]) -> defer.Deferred[None]:
        overlaps.append(active[0])
        active[0] += 1
        d: defer.Deferred[None] = defer.Deferred()

        def finish() -> None:
            active[0] -= 1
            d.callback(None)

        reactor.callLater(0, finish)
        return d

    consumer = Consumer(client, "g", "slow", 0, max_bytes=100, until_end=True)
    await within(consumer.start(take))
    assert len(overlaps) > 2 and set(overlaps) == {0}
    assert consumer.delivered == 30


@pytest_twisted.ensureDeferred
async def test_commit_every_n_records(client: RustkaClientProtocol) -> None:
    """With commit_every_records, the committed offset trails by fewer than N records."""
    await within(client.create_topic("every", 1))
    await fill(client, "every", 100, per_batch=5)
    observed: list[tuple[int, int | None]] = []
    consumer = Consumer(
        client, "g", "every", 0, commit_every_records=20, max_bytes=100, until_end=True
    )

    def take(records: list[Record]) -> None:
        observed.append((records[0].offset or 0, consumer.committed))

    await within(consumer.start(take))
    later = [(offset, committed) for offset, committed in observed if offset >= 40]
    assert later and all(c is not None and offset - c <= 25 for offset, c in later)
    assert await within(client.committed("g", "every", 0)) == 100


@pytest_twisted.ensureDeferred
async def test_commit_interval_commits_while_idle(client: RustkaClientProtocol) -> None:
    """With commit_interval_ms, a follower waiting for data still commits its position."""
    await within(client.create_topic("interval", 1))
    await fill(client, "interval", 10)
    consumer = Consumer(client, "g", "interval", 0, commit_interval_ms=20, max_wait_ms=50)
    done = consumer.start(lambda records: None)
    while consumer.committed != 10:
        await within(client.fetch_batch("interval", 0, 10, max_wait_ms=30))
    assert await within(client.committed("g", "interval", 0)) == 10
    await within(consumer.stop())
    await within(done)


@pytest_twisted.ensureDeferred
async def test_manual_policy_commits_only_when_asked(broker: RunningBroker) -> None:
    """Without a policy nothing is committed until commit() (or stop())."""
    client = await within(defer.ensureDeferred(broker.client()))
    observer = await within(defer.ensureDeferred(broker.client()))
    try:
        await within(client.create_topic("manual", 1))
        await fill(client, "manual", 40)
        consumer = Consumer(client, "g", "manual", 0, max_bytes=100)
        progress: list[int | None] = []

        async def take(records: list[Record]) -> None:
            progress.append(await within(observer.committed("g", "manual", 0)))
            if (records[-1].offset or 0) >= 20 and consumer.committed is None:
                await within(consumer.commit())
            if (records[-1].offset or 0) >= 39:
                consumer.stop(commit=False)

        await within(consumer.start(take))
        assert progress[0] is None
        committed = await within(observer.committed("g", "manual", 0))
        assert committed is not None and 20 <= committed < 40
    finally:
        await within(client.close())
        await within(observer.close())


@pytest_twisted.ensureDeferred
async def test_stop_during_a_long_poll_commits(client: RustkaClientProtocol) -> None:
    """stop() while a long-poll fetch is outstanding ends the run and commits the position."""
    await within(client.create_topic("idle", 1))
    await fill(client, "idle", 3)
    seen, take = collector()
    consumer = Consumer(client, "g", "idle", 0, max_wait_ms=300)
    done = consumer.start(take)
    while len(seen) < 3:
        await within(client.metadata(["idle"]))
    await within(consumer.stop(), 5)
    await within(done, 5)
    assert consumer.position == 3
    assert await within(client.committed("g", "idle", 0)) == 3


@pytest_twisted.ensureDeferred
async def test_max_records_stops_inside_a_batch(client: RustkaClientProtocol) -> None:
    """max_records delivers exactly that many and commits right after the last one."""
    await within(client.create_topic("capped", 1))
    await fill(client, "capped", 50, per_batch=50)
    seen, take = collector()
    consumer = Consumer(client, "g", "capped", 0, max_records=7)
    await within(consumer.start(take))
    assert [r.offset for r in seen] == list(range(7))
    assert await within(client.committed("g", "capped", 0)) == 7


@pytest_twisted.ensureDeferred
async def test_a_failing_callback_keeps_its_batch_uncommitted(
    client: RustkaClientProtocol,
) -> None:
    """The callback's exception fails start(); only earlier batches are committed."""
    await within(client.create_topic("boom", 1))
    await fill(client, "boom", 30)
    calls = [0]

    def take(records: list[Record]) -> None:
        calls[0] += 1
        if calls[0] == 2:
            raise RuntimeError("application failure")

    consumer = Consumer(client, "g", "boom", 0, max_bytes=100)
    with pytest.raises(RuntimeError, match="application failure"):
        await within(consumer.start(take))
    committed = await within(client.committed("g", "boom", 0))
    assert committed == consumer.position and 0 < committed < 30


@pytest_twisted.ensureDeferred
async def test_reset_after_retention(broker_factory: Callable[..., Any]) -> None:
    """A committed offset deleted by retention resumes at the log start and counts the gap."""
    running = await broker_factory(segment_bytes=1024, retention_bytes=2048)
    client = await within(defer.ensureDeferred(running.client()))
    try:
        await within(client.create_topic("short", 1))
        await within(client.commit("g", "short", 0, 0))
        for i in range(60):
            await within(client.produce_batch("short", 0, [Record(b"k", b"x" * 90 + b"%02d" % i)]))
        await within(running.broker.enforce_retention())
        meta = await within(client.metadata(["short"]))
        log_start = meta[0].partitions[0].log_start
        assert log_start > 0
        resets: list[tuple[int, int]] = []
        seen, take = collector()
        consumer = Consumer(
            client, "g", "short", 0, until_end=True, on_reset=lambda a, b: resets.append((a, b))
        )
        await within(consumer.start(take))
        assert resets == [(0, log_start)]
        assert consumer.skipped_offsets == log_start
        assert [r.offset for r in seen] == list(range(log_start, 60))

        await within(client.commit("g", "short", 0, 0))
        latest = Consumer(client, "g", "short", 0, until_end=True, reset="latest")
        seen2, take2 = collector()
        await within(latest.start(take2))
        assert seen2 == [] and latest.position == 60 and latest.skipped_offsets == 60

        await within(client.commit("g", "short", 0, 0))
        strict = Consumer(client, "g", "short", 0, until_end=True, reset="error")
        with pytest.raises(OffsetOutOfRange):
            await within(strict.start(lambda records: None))
        assert await within(client.committed("g", "short", 0)) == 0
    finally:
        await within(client.close())
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_new_group_starts_at_the_log_start(client: RustkaClientProtocol) -> None:
    """Without a committed offset the consumer begins at the earliest stored offset."""
    await within(client.create_topic("fresh", 1))
    await fill(client, "fresh", 5)
    seen, take = collector()
    consumer = Consumer(client, "newcomer", "fresh", 0, until_end=True)
    await within(consumer.start(take))
    assert consumer.start_offset == 0 and [r.offset for r in seen] == [0, 1, 2, 3, 4]
    assert consumer.skipped_offsets == 0


@pytest_twisted.ensureDeferred
async def test_unknown_partition_fails_start(client: RustkaClientProtocol) -> None:
    """Asking for a partition the topic does not have fails with UnknownPartition."""
    await within(client.create_topic("two", 2))
    consumer = Consumer(client, "g", "two", 5, until_end=True)
    with pytest.raises(UnknownPartition):
        await within(consumer.start(lambda records: None))


def test_conflicting_settings_are_refused() -> None:
    """Two commit policies, a bad reset policy or negative sizes raise InvalidRequest."""
    for kwargs in (
        {"commit_every_records": 5, "commit_interval_ms": 5},
        {"reset": "sometimes"},
        {"commit_every_records": 0},
        {"max_bytes": 0},
        {"max_wait_ms": -1},
    ):
        with pytest.raises(InvalidRequest):
            Consumer(object(), "g", "t", 0, reactor=object(), **kwargs)
