"""Lanes: serial order per lane, coalescing of queued appends, parallel lanes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer
from twisted.python.failure import Failure

from rustka.broker.lanes import IOPool, Lane, WorkerPool
from rustka.errors import BrokerUnavailable
from tests.conftest import LogWatcher, within


@pytest.fixture
def io() -> Any:
    from twisted.internet import reactor

    pool = IOPool(reactor, threads=2)
    pool.startService()
    yield pool
    if pool.running:
        pool.stopService()


def gated_writer() -> tuple[threading.Event, list[list[int]], Callable[[list[int]], list[int]]]:
    """A write_many whose first call blocks until the gate opens, recording each call.

    While the first write is held, later appends queue up, so a test sees exactly
    how the lane coalesces them.
    """
    gate = threading.Event()
    calls: list[list[int]] = []

    def write_many(items: list[int]) -> list[int]:
        if not calls:
            gate.wait(10)
        calls.append(list(items))
        return [i * 10 for i in items]

    return gate, calls, write_many


@pytest_twisted.ensureDeferred
async def test_appends_queued_behind_a_write_are_coalesced(io: IOPool) -> None:
    """While one write runs, later appends wait and then go to write_many together."""
    gate, calls, write_many = gated_writer()
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


@pytest_twisted.ensureDeferred
async def test_append_to_delivers_results_in_order_with_context(io: IOPool) -> None:
    """Callback appends coalesce with Deferred appends and each gets its own result."""
    gate, calls, write_many = gated_writer()
    lane = Lane(io, write_many)
    seen: list[tuple[int, str]] = []
    both: defer.Deferred[None] = defer.Deferred()

    def on_result(result: int, context: str) -> None:
        seen.append((result, context))
        if len(seen) == 2:
            both.callback(None)

    first = lane.append(0)
    lane.append_to(1, on_result, "one")
    second = lane.append(2)
    lane.append_to(3, on_result, "three")
    gate.set()
    assert await within(defer.gatherResults([first, second])) == [0, 20]
    await within(both)
    assert seen == [(10, "one"), (30, "three")]
    assert calls == [[0], [1, 2, 3]]


@pytest_twisted.ensureDeferred
async def test_append_to_reports_a_failed_write_and_survives_a_raising_callback(
    io: IOPool,
) -> None:
    """A failed write reaches the callback as a Failure; a callback that raises is contained."""

    def write_many(items: list[str]) -> list[str]:
        if "bad" in items:
            raise OSError("disk full")
        return items

    lane = Lane(io, write_many)
    outcomes: list[Any] = []

    def explode(result: Any, context: Any) -> None:
        raise RuntimeError("callback bug")

    lane.append_to("bad", lambda result, context: outcomes.append(result), None)
    await within(lane.when_idle())
    lane.append_to("ok", explode, None)
    assert await within(lane.append("after")) == "after"
    assert len(outcomes) == 1 and isinstance(outcomes[0], Failure)
    assert outcomes[0].check(OSError)


@pytest_twisted.ensureDeferred
async def test_pool_runs_work_on_its_own_threads_and_answers_on_the_reactor(io: IOPool) -> None:
    """Disk work never runs on the reactor thread; its answer always does."""
    reactor_thread = threading.get_ident()
    ran_on = await within(io.run(threading.get_ident))
    assert ran_on != reactor_thread
    assert await within(io.run(lambda a, *, b: a + b, 2, b=3)) == 5
    answered_on: list[int] = []
    done: defer.Deferred[None] = defer.Deferred()

    def on_done(result: Any, context: str) -> None:
        answered_on.append(threading.get_ident())
        done.callback((result, context))

    io.run_then(on_done, "ctx", pow, 2, 10)
    assert await within(done) == (1024, "ctx")
    assert answered_on == [reactor_thread]
    assert io.pool.workers == io.pool.max == 2
    assert io.submitted == 3


@pytest_twisted.ensureDeferred
async def test_completions_that_finish_together_share_one_reactor_wake_up(io: IOPool) -> None:
    """Jobs finishing while the reactor is busy are delivered by a single wake-up."""
    finished = threading.Event()
    count = 50
    ran: list[int] = []

    def job(i: int) -> int:
        ran.append(i)
        if len(ran) == count:
            finished.set()
        return i

    before = io.pool.wakeups
    results = [io.run(job, i) for i in range(count)]
    # Hold the reactor thread until every job has run: their completions queue up.
    assert finished.wait(10)
    assert await within(defer.gatherResults(results)) == list(range(count))
    assert io.pool.wakeups - before == 1


@pytest_twisted.ensureDeferred
async def test_queue_depth_counts_work_waiting_for_a_thread() -> None:
    """With every thread busy, further work waits in the queue and is counted there."""
    from twisted.internet import reactor

    io = IOPool(reactor, threads=1)
    io.startService()
    gate = threading.Event()
    try:
        first = io.run(gate.wait, 10)
        rest = [io.run(int, i) for i in range(3)]
        assert io.queue_depth in (3, 4)  # 4 until the thread has taken the first job
        gate.set()
        assert await within(first) is True
        assert await within(defer.gatherResults(rest)) == [0, 1, 2]
        assert io.queue_depth == 0
    finally:
        gate.set()
        io.stopService()


@pytest_twisted.ensureDeferred
async def test_stopping_the_pool_finishes_queued_work_first() -> None:
    """stopService lets every queued job run and still delivers its result."""
    from twisted.internet import reactor

    io = IOPool(reactor, threads=2)
    io.startService()
    ran: list[int] = []
    results = [io.run(ran.append, i) for i in range(20)]
    io.stopService()
    assert sorted(ran) == list(range(20))
    assert io.pool.workers == 0
    await within(defer.gatherResults(results))
    with pytest.raises(BrokerUnavailable):
        await io.run(int)


@pytest_twisted.ensureDeferred
async def test_a_raising_completion_does_not_stop_the_others(
    io: IOPool, log_watcher: LogWatcher
) -> None:
    """A completion callback that raises is logged; later completions still arrive."""
    last: defer.Deferred[int] = defer.Deferred()

    def explode(result: Any, context: Any) -> None:
        raise RuntimeError("completion bug")

    io.run_then(explode, None, int, 1)
    io.run_then(lambda result, context: last.callback(result), None, int, 2)
    assert await within(last) == 2
    assert log_watcher.messages("an I/O pool completion failed")
    failed = await within(io.run(int, "not a number").addErrback(lambda f: [f]))
    assert isinstance(failed[0], Failure) and failed[0].check(ValueError)


def test_each_job_wakes_one_idle_thread_and_none_is_lost() -> None:
    """A job wakes one sleeping thread, never all of them; jobs submitted from many
    threads at random moments (around a thread going to sleep) all run exactly once."""
    import random

    from twisted.internet import reactor

    pool = WorkerPool(reactor, 3, name="wake-one")
    pool.start()
    try:
        woken: list[str] = []
        asleep = threading.Event()
        for _ in range(10_000):
            if len(pool._idle) == 3:
                break
            asleep.wait(0.001)
        assert len(pool._idle) == 3, "the threads never went to sleep"
        gate = threading.Event()
        ran = threading.Event()

        def first() -> None:
            woken.append(threading.current_thread().name)
            ran.set()
            gate.wait(10)

        pool.submit(lambda result, context: None, None, first, ())
        assert ran.wait(10)
        # One thread took the job; the two others still sleep, not woken for nothing.
        assert len(woken) == 1 and len(pool._idle) == 2
        gate.set()

        count = 3000
        seen: list[int] = []
        lock = threading.Lock()
        every = threading.Event()

        def job(i: int) -> None:
            with lock:
                seen.append(i)
                if len(seen) == count:
                    every.set()

        def submitter(start: int) -> None:
            rng = random.Random(start)
            for i in range(start, start + count // 3):
                pool.submit(lambda result, context: None, None, job, (i,))
                if rng.random() < 0.05:
                    # Let the threads run dry and go back to sleep now and then.
                    threading.Event().wait(rng.random() / 2000)

        senders = [threading.Thread(target=submitter, args=(k * (count // 3),)) for k in range(3)]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        assert every.wait(20), f"{count - len(seen)} jobs never ran"
        assert sorted(seen) == list(range(count))
    finally:
        pool.stop()
    assert pool.workers == 0
