"""Lanes: serial order per lane, coalescing of queued appends, parallel lanes."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer

from rustka.errors import BrokerUnavailable
from rustka.lanes import IOPool, Lane


@pytest.fixture
def io() -> Any:
    from twisted.internet import reactor

    pool = IOPool(reactor, threads=2)
    pool.startService()
    yield pool
    if pool.running:
        pool.stopService()


@pytest_twisted.ensureDeferred
async def test_appends_queued_behind_a_write_are_coalesced(io: IOPool) -> None:
    """While one write runs, later appends wait and then go to write_many together."""
    gate = threading.Event()
    calls: list[list[int]] = []

    def write_many(items: list[int]) -> list[int]:
        if not calls:
            gate.wait(10)
        calls.append(list(items))
        return [i * 10 for i in items]

    lane = Lane(io, write_many)
    first = lane.append(0)
    rest = [lane.append(i) for i in range(1, 50)]
    gate.set()
    results = await defer.gatherResults([first, *rest])
    assert results == [i * 10 for i in range(50)]
    assert calls == [[0], list(range(1, 50))]
    assert lane.hops == 2 and lane.items == 50


@pytest_twisted.ensureDeferred
async def test_calls_and_appends_keep_submission_order(io: IOPool) -> None:
    """A submitted call runs after the appends before it and before those after it."""
    seen: list[str] = []
    lane = Lane(io, lambda items: [seen.extend(items) or None for _ in items])
    work = [
        lane.append("a1"),
        lane.append("a2"),
        lane.submit(seen.append, "call"),
        lane.append("a3"),
    ]
    await defer.gatherResults(work)
    assert seen == ["a1", "a2", "call", "a3"]


@pytest_twisted.ensureDeferred
async def test_failed_write_fails_only_its_own_group(io: IOPool) -> None:
    """An exception in write_many fails the appends of that hop; the lane keeps going."""
    gate = threading.Event()
    hops: list[list[str]] = []

    def write_many(items: list[str]) -> list[str]:
        if not hops:
            gate.wait(10)
        hops.append(items)
        if "bad" in items:
            raise OSError("disk full")
        return items

    lane = Lane(io, write_many)
    first = lane.append("ok")
    bad = lane.append("bad")
    gate.set()
    assert await first == "ok"
    with pytest.raises(OSError):
        await bad
    assert await lane.append("after") == "after"


@pytest_twisted.ensureDeferred
async def test_when_idle_waits_for_queued_work(io: IOPool) -> None:
    """Graceful shutdown can wait for everything already queued on a lane."""
    done: list[int] = []
    lane = Lane(io, lambda items: [done.append(i) for i in items])
    for i in range(5):
        lane.append(i)
    await lane.when_idle()
    assert done == [0, 1, 2, 3, 4]
    assert lane.depth == 0


@pytest_twisted.ensureDeferred
async def test_stopped_pool_fails_fast(io: IOPool) -> None:
    """After the pool stops, work fails at once instead of hanging forever."""
    io.stopService()
    with pytest.raises(BrokerUnavailable):
        await io.run(lambda: None)
