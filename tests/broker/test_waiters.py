"""Long-poll waiters on a fake clock: first wake wins, timeouts, cancel, shutdown."""

from __future__ import annotations

from twisted.internet import defer, task

from rustka.broker.waiters import Waiters


def test_a_waiter_on_many_partitions_fires_once_and_leaves_them_all() -> None:
    clock = task.Clock()
    waiters = Waiters(clock)
    fired: list[None] = []
    d = waiters.park([("a", 0), ("b", 1)], 5)
    d.addCallback(fired.append)
    other = waiters.park([("b", 1)], 5)
    assert len(waiters) == 2
    waiters.wake(("a", 0))
    assert fired == [None] and not other.called
    assert len(waiters) == 1 and clock.getDelayedCalls() and len(clock.getDelayedCalls()) == 1
    waiters.wake(("b", 1))
    assert other.called and fired == [None]
    assert len(waiters) == 0 and clock.getDelayedCalls() == []


def test_timeout_and_cancel_unpark() -> None:
    clock = task.Clock()
    waiters = Waiters(clock)
    timed = waiters.park([("a", 0)], 2)
    clock.advance(1.9)
    assert not timed.called
    clock.advance(0.2)
    assert timed.called and len(waiters) == 0
    cancelled = waiters.park([("a", 0), ("c", 0)], 2)
    cancelled.addErrback(lambda f: f.trap(defer.CancelledError))
    cancelled.cancel()
    assert len(waiters) == 0 and clock.getDelayedCalls() == []
    waiters.wake(("a", 0))


def test_release_all_answers_everything() -> None:
    clock = task.Clock()
    waiters = Waiters(clock)
    parked = [waiters.park([("a", i), ("z", 0)], 30) for i in range(3)]
    waiters.release_all()
    assert all(d.called for d in parked)
    assert len(waiters) == 0 and clock.getDelayedCalls() == []
