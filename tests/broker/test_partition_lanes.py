"""PartitionLanes: one lane per partition made on first use, dirty marks, retirement;
and, on a running broker, the produce path and the flush pass sharing them."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted

from rustka.broker.lanes import IOPool
from rustka.broker.partition_lanes import OFFSETS_KEY, PartitionLanes, WriteMany
from rustka.errors import UnknownTopic
from rustka.record.batch import Record, encode_batch, ms_now
from tests.conftest import within


@pytest.fixture
def io() -> Any:
    from twisted.internet import reactor

    pool = IOPool(reactor, threads=2)
    pool.startService()
    yield pool
    if pool.running:
        pool.stopService()


class Writers:
    """A ``writer_for`` over a fixed set of partitions; each lane's writes are recorded."""

    def __init__(self, *partitions: tuple[str, int]) -> None:
        self.partitions = set(partitions)
        self.made: list[tuple[str, int]] = []
        self.written: list[tuple[tuple[str, int], list[Any]]] = []

    def __call__(self, topic: str, partition: int) -> WriteMany:
        key = (topic, partition)
        if key not in self.partitions:
            raise UnknownTopic(f"unknown topic {topic!r}")
        self.made.append(key)
        generation = self.made.count(key)

        def write_many(items: list[Any]) -> list[Any]:
            self.written.append((key, list(items)))
            return [(generation, item) for item in items]

        return write_many


@pytest_twisted.ensureDeferred
async def test_a_partition_gets_one_lane_made_on_first_use(io: IOPool) -> None:
    writers = Writers(("a", 0), ("a", 1))
    lanes = PartitionLanes(io, writers, track_dirty=False)
    assert lanes.existing(("a", 0)) is None and lanes.all() == []
    first = lanes.lane("a", 0)
    assert lanes.lane("a", 0) is first and lanes.existing(("a", 0)) is first
    other = lanes.lane("a", 1)
    assert writers.made == [("a", 0), ("a", 1)]
    assert set(map(id, lanes.all())) == {id(first), id(other)}
    assert await within(first.append("x")) == (1, "x")
    assert await within(other.append("y")) == (1, "y")
    assert writers.written == [(("a", 0), ["x"]), (("a", 1), ["y"])]


def test_no_lane_is_made_for_a_partition_that_does_not_exist(io: IOPool) -> None:
    lanes = PartitionLanes(io, Writers(("a", 0)), track_dirty=True)
    with pytest.raises(UnknownTopic):
        lanes.lane("gone", 0)
    assert lanes.existing(("gone", 0)) is None and lanes.all() == []


def test_dirty_marks_are_kept_only_when_tracking(io: IOPool) -> None:
    untracked = PartitionLanes(io, Writers(), track_dirty=False)
    untracked.mark_dirty(("a", 0))
    untracked.mark_dirty(OFFSETS_KEY)
    assert untracked.dirty == frozenset()

    lanes = PartitionLanes(io, Writers(), track_dirty=True)
    lanes.mark_dirty(("a", 0))
    lanes.mark_dirty(OFFSETS_KEY)
    snapshot = lanes.dirty
    lanes.mark_clean(("a", 0))
    lanes.mark_clean(("never", 0))  # cleaning an unmarked key is no error
    assert snapshot == {("a", 0), OFFSETS_KEY}  # a copy: later marks do not change it
    assert lanes.dirty == {OFFSETS_KEY}


@pytest_twisted.ensureDeferred
async def test_retire_takes_the_lanes_and_marks_and_a_new_lane_starts_afresh(
    io: IOPool,
) -> None:
    writers = Writers(("t", 0), ("t", 1), ("u", 0))
    lanes = PartitionLanes(io, writers, track_dirty=True)
    old = lanes.lane("t", 0)
    kept = lanes.lane("u", 0)
    for key in [("t", 0), ("t", 1), ("u", 0)]:
        lanes.mark_dirty(key)
    retired = lanes.retire([("t", 0), ("t", 1)])
    assert retired == [old]  # ("t", 1) had a mark but no lane
    assert lanes.dirty == {("u", 0)}
    assert lanes.all() == [kept] and lanes.existing(("t", 0)) is None
    assert lanes.retire([("t", 0)]) == []  # retiring twice is harmless
    new = lanes.lane("t", 0)
    assert new is not old
    assert await within(new.append("z")) == (2, "z")  # the second writer made for t/0


async def _append(core: Any, topic: str) -> None:
    payload = encode_batch([Record(b"k", b"v")], timestamp=ms_now())
    await within(core.append(topic, 0, payload, auto_create=False))


@pytest_twisted.ensureDeferred
async def test_appends_and_commits_mark_dirty_and_the_flush_pass_cleans(
    broker_factory: Any,
) -> None:
    """The produce path and the core mark, the background pass flushes and clears:
    three owners of one `PartitionLanes`."""
    running = await broker_factory(flush="interval", flush_interval_ms=3_600_000)
    try:
        core = running.broker
        await within(core.create_topic("t", 1))
        await _append(core, "t")
        await within(core.commit_offsets("g", {("t", 0): 1}))
        assert core.lanes.dirty == {("t", 0), OFFSETS_KEY}
        assert core.lanes.existing(("t", 0)) is core.lane("t", 0)
        await within(core.flush_dirty())
        assert core.lanes.dirty == frozenset()
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_flush_always_keeps_no_marks(broker_factory: Any) -> None:
    running = await broker_factory(flush="always")
    try:
        core = running.broker
        await within(core.create_topic("t", 1))
        await _append(core, "t")
        await within(core.commit_offsets("g", {("t", 0): 1}))
        assert core.lanes.dirty == frozenset()
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_deleted_topic_leaves_no_lane_or_mark_and_comes_back_fresh(
    broker_factory: Any,
) -> None:
    running = await broker_factory(flush="interval", flush_interval_ms=3_600_000)
    try:
        core = running.broker
        await within(core.create_topic("t", 2))
        await _append(core, "t")
        old = core.lane("t", 0)
        assert ("t", 0) in core.lanes.dirty
        await within(core.delete_topic("t"))
        assert core.lanes.dirty == frozenset()
        assert core.lanes.existing(("t", 0)) is None and core.lanes.all() == []
        await within(core.create_topic("t", 1))
        await _append(core, "t")
        assert core.lane("t", 0) is not old
        assert core.bounds("t", 0) == (0, 1)  # written to the new log, not the old one
    finally:
        await running.stop()
