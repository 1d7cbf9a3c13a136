"""Background passes survive a failing partition: the others carry on, the loop keeps
running, a failed flush is retried, and every failure is counted and logged."""

from __future__ import annotations

from typing import Any

import pytest_twisted
from prometheus_client import generate_latest
from twisted.internet import defer
from twisted.internet.task import Clock

from rustka.errors import StorageError
from rustka.ops.metrics import metrics_registry
from rustka.record.batch import Record, encode_batch, ms_now
from rustka.storage.partition_log import PartitionLog
from tests.conftest import RunningBroker, within


class FlakyLog(PartitionLog):
    """A real partition log whose flush or retention fails on demand.

    ``done[name]`` fires (on the reactor thread) the first time that operation
    succeeds after the Deferred was put there, so tests wait for events, not time.
    """

    failing: set[str]
    done: dict[str, defer.Deferred[None]]

    def _outcome(self, name: str) -> None:
        if name in self.failing:
            raise StorageError(f"injected {name} failure in {self.directory}")

    def _succeeded(self, name: str) -> None:
        from twisted.internet import reactor

        d = self.done.pop(name, None)
        if d is not None:
            reactor.callFromThread(d.callback, None)

    def flush(self) -> None:
        self._outcome("flush")
        super().flush()
        self._succeeded("flush")

    def enforce_retention(self, now_ms: int) -> list[int]:
        self._outcome("retention")
        deleted = super().enforce_retention(now_ms)
        self._succeeded("retention")
        return deleted


def flaky(running: RunningBroker, topic: str, *failing: str) -> FlakyLog:
    plog = running.broker.partition(topic, 0)
    plog.__class__ = FlakyLog
    assert isinstance(plog, FlakyLog)
    plog.failing = set(failing)
    plog.done = {}
    return plog


async def fill(running: RunningBroker, topic: str, count: int = 1, size: int = 10) -> None:
    await within(running.broker.create_topic(topic, 1))
    for _ in range(count):
        payload = encode_batch([Record(b"k", b"v" * size)], timestamp=ms_now())
        await within(running.broker.append(topic, 0, payload, auto_create=False))


@pytest_twisted.ensureDeferred
async def test_a_failed_flush_stays_dirty_and_is_retried(broker_factory: Any) -> None:
    running = await broker_factory(flush="interval", flush_interval_ms=3_600_000)
    try:
        core = running.broker
        await fill(running, "bad")
        await fill(running, "good")
        bad = flaky(running, "bad", "flush")
        assert core.lanes.dirty >= {("bad", 0), ("good", 0)}
        await within(core.flush_dirty())
        assert ("bad", 0) in core.lanes.dirty
        assert ("good", 0) not in core.lanes.dirty
        assert core.stats.background_failures == {"flush": 1}
        registry = metrics_registry(core, running.factory, core.io)
        page = generate_latest(registry).decode()
        assert 'rustka_background_failures_total{task="flush"} 1.0' in page
        assert 'rustka_background_failures_total{task="retention"} 0.0' in page
        bad.failing.clear()
        await within(core.flush_dirty())
        assert core.lanes.dirty == set()
        assert core.stats.background_failures == {"flush": 1}
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_the_flush_loop_keeps_running_after_a_failure(
    broker_factory: Any, log_watcher: Any
) -> None:
    running = await broker_factory(flush="interval", flush_interval_ms=10)
    try:
        await fill(running, "bad")
        await fill(running, "good")
        bad = flaky(running, "bad", "flush")
        good = flaky(running, "good")
        good.done["flush"] = good_flushed = defer.Deferred()
        more = encode_batch([Record(b"k", b"v")], timestamp=ms_now())
        await within(running.broker.append("bad", 0, more, auto_create=False))
        await within(running.broker.append("good", 0, more, auto_create=False))
        await log_watcher.wait_for("background flush failed for bad/0")
        await within(good_flushed)
        loops = running.top.broker_service.loops
        assert loops and all(loop.running for loop in loops)
        bad.done["flush"] = retried = defer.Deferred()
        bad.failing.clear()
        await within(retried)
        assert running.broker.stats.background_failures["flush"] >= 1
        assert all(loop.running for loop in running.top.broker_service.loops)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_retention_goes_on_for_the_other_partitions(broker_factory: Any) -> None:
    running = await broker_factory(
        segment_bytes=200, retention_bytes=1, retention_check_interval_ms=3_600_000
    )
    try:
        core = running.broker
        await fill(running, "bad", count=5, size=150)
        await fill(running, "good", count=5, size=150)
        flaky(running, "bad", "retention")
        await within(core.enforce_retention())
        assert core.bounds("good", 0)[0] == 4
        assert core.bounds("bad", 0)[0] == 0
        assert core.stats.background_failures == {"retention": 1}
        assert core.stats.retention_deleted_segments == 4
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_the_retention_loop_keeps_running_after_a_failure(
    broker_factory: Any, log_watcher: Any
) -> None:
    running = await broker_factory(
        segment_bytes=200, retention_bytes=1, retention_check_interval_ms=10
    )
    try:
        await fill(running, "bad", count=3, size=150)
        await fill(running, "good")
        bad = flaky(running, "bad", "retention")
        await log_watcher.wait_for("background retention failed for bad/0")
        assert all(loop.running for loop in running.top.broker_service.loops)
        bad.done["retention"] = retried = defer.Deferred()
        bad.failing.clear()
        await within(retried)
        assert running.broker.bounds("bad", 0)[0] > 0
        failures = running.broker.stats.background_failures["retention"]
        assert failures >= 1
    finally:
        await running.stop()


# -- offsets expiry ------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_offsets_of_empty_groups_expire_after_offsets_retention(
    broker_factory: Any,
) -> None:
    """A group nobody is in loses its commits once they and its emptiness are
    offsets_retention_ms old, for good; a group with a member keeps them."""
    from rustka.broker.coordinator import JoinRequest
    from rustka.broker.groups import GroupErrorCode

    retention_ms = 200
    settings = {"offsets_retention_ms": retention_ms, "retention_check_interval_ms": 3_600_000}
    running = await broker_factory(**settings)
    try:
        core = running.broker
        await within(core.create_topic("t", 2))
        join = JoinRequest("live", "", "consumer", [("range", b"")], 10_000)
        assert (await within(core.groups.join(join))).error == GroupErrorCode.NONE
        await within(core.commit_offsets("idle", {("t", 0): 5, ("t", 1): 6}))
        await within(core.commit_offsets("live", {("t", 0): 7}))
        await within(core.enforce_retention())  # nothing is old enough yet
        assert core.committed_offsets("idle") == {("t", 0): 5, ("t", 1): 6}
        core.maintenance.clock = clock_past(retention_ms)
        await within(core.enforce_retention())
        assert core.committed_offsets("idle") == {}
        assert "idle" not in core.group_names()
        assert core.committed_offsets("live") == {("t", 0): 7}
        core.groups.close()
    finally:
        await running.stop()
    again = await broker_factory(**settings)
    try:
        core = again.broker
        assert core.committed_offsets("idle") == {}  # the tombstones were durable
        # Not seen since this start: it counts as empty from the start, not from before.
        await within(core.enforce_retention())
        assert core.committed_offsets("live") == {("t", 0): 7}
    finally:
        await again.stop()


def test_expired_keeps_groups_in_use_and_counts_from_the_later_of_commit_and_empty(
    tmp_path: Any,
) -> None:
    from rustka.config import Config
    from rustka.storage.offsets import OffsetsStore

    store = OffsetsStore.open(tmp_path, Config().log_config())
    try:
        store.commit_many([("a", "t", 0, 1), ("b", "t", 0, 2), ("c", "t", 0, 3), ("d", "t", 0, 4)])
        now = ms_now() + 10_000
        since = {"a": 0, "b": None, "c": now - 50}  # d: absent, kept
        assert store.expired(now, 100, since) == [("a", "t", 0)]
        assert store.expired(now + 60, 100, since) == [("a", "t", 0), ("c", "t", 0)]
        assert store.expired(now, 100_000, since) == []
    finally:
        store.close()


class WatchedLog(PartitionLog):
    """A real partition log that says when the broker asks it to release deleted segments."""

    released: defer.Deferred[int]

    def release_deleted(self) -> int:
        from twisted.internet import reactor

        count = super().release_deleted()
        reactor.callFromThread(self.released.callback, count)
        return count


def deleted_files(plog: PartitionLog) -> list[str]:
    return sorted(p.name for p in plog.directory.iterdir() if p.name.endswith(".log.deleted"))


@pytest_twisted.ensureDeferred
async def test_retention_keeps_deleted_segments_for_the_topics_file_delete_delay_ms(
    broker_factory: Any,
) -> None:
    """Kafka's file.delete.delay.ms, per topic: a topic with 0 gets its deleted segments
    released right after the pass; one with 10 minutes has its release scheduled that
    far ahead and keeps the files through the next pass and an early release."""
    from twisted.internet import reactor

    running = await broker_factory(
        segment_bytes=200, retention_bytes=1, retention_check_interval_ms=3_600_000
    )
    try:
        core = running.broker
        for name, delay in (("fast", "0"), ("slow", "600000")):
            await within(core.create_topic(name, 1, {"file.delete.delay.ms": delay}))
            for _ in range(5):
                payload = encode_batch([Record(b"k", b"v" * 150)], timestamp=ms_now())
                await within(core.append(name, 0, payload, auto_create=False))
        fast, slow = core.partition("fast", 0), core.partition("slow", 0)
        for plog in (fast, slow):
            plog.__class__ = WatchedLog
            assert isinstance(plog, WatchedLog)
            plog.released = defer.Deferred()
        await within(core.enforce_retention())
        assert len(deleted_files(slow)) == 4
        # fast's release may already be running on its lane: wait for it to answer.
        assert await within(fast.released) == 4
        assert deleted_files(fast) == []
        [call] = [
            c
            for c in reactor.getDelayedCalls()
            if c.func == core.maintenance._release and c.args == (("slow", 0),)
        ]
        assert 590 < call.getTime() - reactor.seconds() <= 600
        await within(core.enforce_retention())
        assert len(deleted_files(slow)) == 4
        call.reset(0)  # the release comes early: the delay is not over, nothing goes
        assert await within(slow.released) == 0
        assert len(deleted_files(slow)) == 4
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_time_retention_reads_the_maintenance_clock(broker_factory: Any) -> None:
    """retention.ms is judged against the maintenance clock, not the wall clock: an hour
    of retention deletes nothing now, and everything but the newest data once the clock
    is moved two hours on, with no wait."""
    running = await broker_factory(segment_bytes=200, retention_check_interval_ms=3_600_000)
    try:
        core = running.broker
        await within(core.create_topic("aged", 1, {"retention.ms": "3600000"}))
        for _ in range(4):
            payload = encode_batch([Record(b"k", b"v" * 150)], timestamp=ms_now())
            await within(core.append("aged", 0, payload, auto_create=False))
        plog = core.partition("aged", 0)
        segments = len(plog.segments)
        assert segments >= 3
        await within(core.enforce_retention())
        assert len(plog.segments) == segments
        assert core.stats.retention_deleted_segments == 0
        core.maintenance.clock = clock_past(3_600_000)
        await within(core.enforce_retention())
        assert core.stats.retention_deleted_segments == segments - 1
        # Kafka keeps the active segment: the last batch stays readable.
        assert (plog.log_start_offset, plog.end_offset) == (3, 4)
    finally:
        await running.stop()


def clock_past(retention_ms: int) -> Clock:
    """A clock for the maintenance passes that reads twice ``retention_ms`` past now:
    what was committed and emptied before it is old enough to expire, without a wait."""
    from twisted.internet import reactor

    clock = Clock()
    clock.advance(reactor.seconds() + 2 * retention_ms / 1000)
    return clock


async def _old_commits(core: Any, retention_ms: int, commits: dict[Any, int]) -> None:
    """Commit for the group "idle", then move the maintenance clock past ``retention_ms``
    (the expiry's precondition, as above)."""
    await within(core.create_topic("t", 2))
    await within(core.commit_offsets("idle", commits))
    core.maintenance.clock = clock_past(retention_ms)


def _block_lane(core: Any) -> tuple[Any, defer.Deferred[Any]]:
    """Hold the offsets lane until the returned event is set (waits are bounded)."""
    import threading

    gate = threading.Event()
    return gate, core.offsets_lane.submit(gate.wait, 30)


@pytest_twisted.ensureDeferred
async def test_a_group_joining_during_the_expiry_pass_never_sees_offsets_vanish(
    broker_factory: Any,
) -> None:
    """The pass decides while the group is empty; its durable write waits behind a busy
    offsets lane, and meanwhile a member joins and reads the group's offsets. What it
    reads is what stays: the offsets were already gone when it joined (Kafka expires
    them under the group's lock), and they do not come back after a restart."""
    from rustka.broker.coordinator import JoinRequest
    from rustka.broker.groups import GroupErrorCode

    settings = {"offsets_retention_ms": 100, "retention_check_interval_ms": 3_600_000}
    running = await broker_factory(**settings)
    try:
        core = running.broker
        await _old_commits(core, 100, {("t", 0): 5, ("t", 1): 6})
        gate, blocked = _block_lane(core)
        expiry = core.enforce_retention()
        join = JoinRequest("idle", "", "consumer", [("range", b"")], 10_000)
        assert (await within(core.groups.join(join))).error == GroupErrorCode.NONE
        seen_by_member = core.committed_offsets("idle")
        gate.set()
        await within(blocked)
        await within(expiry)
        assert core.committed_offsets("idle") == seen_by_member == {}
        core.groups.close()
    finally:
        await running.stop()
    again = await broker_factory(**settings)
    try:
        assert again.broker.committed_offsets("idle") == {}
    finally:
        await again.stop()


@pytest_twisted.ensureDeferred
async def test_a_commit_queued_before_the_expiry_pass_outlives_it(broker_factory: Any) -> None:
    """A commit waiting on the offsets lane when the pass expires the group's old one
    is stored after it: it is answered, read back and survives a restart (the pass
    writes no tombstone over it); a partition it did not commit expires."""
    settings = {"offsets_retention_ms": 100, "retention_check_interval_ms": 3_600_000}
    running = await broker_factory(**settings)
    try:
        core = running.broker
        await _old_commits(core, 100, {("t", 0): 5, ("t", 1): 6})
        gate, blocked = _block_lane(core)
        commit = core.commit_offsets("idle", {("t", 0): 9})
        expiry = core.enforce_retention()
        gate.set()
        await within(blocked)
        await within(commit)
        await within(expiry)
        assert core.committed_offsets("idle") == {("t", 0): 9}
    finally:
        await running.stop()
    again = await broker_factory(**settings)
    try:
        assert again.broker.committed_offsets("idle") == {("t", 0): 9}
    finally:
        await again.stop()


def test_expire_forgets_at_once_and_write_expiry_spares_what_came_back(tmp_path: Any) -> None:
    from rustka.config import Config
    from rustka.storage.offsets import OffsetsStore

    store = OffsetsStore.open(tmp_path, Config().log_config())
    try:
        store.commit_many([("a", "t", 0, 1), ("a", "t", 1, 2), ("b", "t", 0, 3)])
        now = ms_now() + 10_000
        doomed = store.expire(now, 100, {"a": 0, "b": None})
        assert doomed == [("a", "t", 0), ("a", "t", 1)]
        assert store.groups() == {"b": {("t", 0): 3}}
        store.commit("a", "t", 1, 7)  # a commit between the decision and the write
        assert store.write_expiry(doomed) == [("a", "t", 0)]
    finally:
        store.close()
    store = OffsetsStore.open(tmp_path, Config().log_config())
    try:
        assert store.groups() == {"a": {("t", 1): 7}, "b": {("t", 0): 3}}
    finally:
        store.close()


# -- transactional id expiry ----------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_the_retention_pass_expires_idle_transactional_ids(broker_factory: Any) -> None:
    """transactional_id_expiration_ms runs with retention: an id idle that long is gone
    (and stays gone after a restart), an open transaction stays, and nothing failed."""
    from twisted.internet import reactor, task

    from rustka.broker.maintenance import TRANSACTIONAL_ID_EXPIRY

    settings = {"transactional_id_expiration_ms": 1, "retention_check_interval_ms": 3_600_000}
    running = await broker_factory(**settings)
    try:
        core = running.broker
        txn = core.transactions
        await within(core.create_topic("t", 1))
        await within(txn.init_producer_id("idle", 60_000))
        pid, epoch = await within(txn.init_producer_id("open", 60_000))
        await within(txn.add_partitions("open", pid, epoch, [("t", 0)]))
        # The precondition: the coordinator's clock is past the idle id's last update
        # plus the expiration (1 ms); bounded.
        stamp = txn.describe("idle").last_update_ms  # type: ignore[union-attr]
        for _ in range(100):
            if reactor.seconds() * 1000 >= stamp + 2:
                break
            await within(task.deferLater(reactor, 0.005, lambda: None))
        await within(core.enforce_retention())
        assert txn.describe("idle") is None
        meta = txn.describe("open")
        assert meta is not None and meta.state.kafka_name == "Ongoing"
        assert core.stats.background_failures.get(TRANSACTIONAL_ID_EXPIRY, 0) == 0
    finally:
        await running.stop()
    again = await broker_factory(**settings)
    try:
        assert [m.transactional_id for m in again.broker.transactions.transactions()] == ["open"]
    finally:
        await again.stop()
