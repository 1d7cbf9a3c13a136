"""Where disk work runs: one small thread pool, and a serial lane per partition.

Every blocking call (write, fsync, read, mkdir, unlink) leaves the reactor
thread through `IOPool.run`. A thread pool alone does not keep appends in
order, so each partition gets a `Lane`: work submitted to a lane runs one item
at a time, in submission order, while different lanes proceed in parallel.

A lane also does the group commit: appends that queue up while a write is in
progress are handed to the next hop *together*, so a burst of N produce
requests costs one thread hop, one write and one fsync rather than N.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from twisted.application import service
from twisted.internet import defer
from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger
from twisted.python.failure import Failure

from rustka.errors import BrokerUnavailable

T = TypeVar("T")

OnDone = Callable[[Any, Any], None]
"""``on_done(result or Failure, context)``: how a pool job answers on the reactor thread."""


class WorkerPool:
    """N plain threads taking jobs from one deque, each woken alone, answering on the reactor.

    Twisted's `ThreadPool` routes every job and every completion through its
    `Team` coordinator (extra lock hand-offs on the way in and out); under load
    that cost ~60 µs per round trip on the benchmark machine
    (docs/performance.md, "W2 today, and answering in one hop"). Here a job is
    one deque append and at most one thread woken, and completions that finish
    while the reactor has not yet run the previous wake-up share it: one
    ``callFromThread`` (one waker write) per batch, not per job.

    Exactly one idle thread is woken per job, the one that went idle last
    (its stack and caches are the warmest): with one shared blocking queue, a
    job woke every idle thread in turn, and each one woken for nothing then
    fought the reactor and the working thread for the GIL (docs/performance.md,
    "One thread woken per job (issue 33)"). Each thread sleeps on a lock of its
    own, held while it sleeps; `submit` releases the lock of a thread it takes
    from the idle stack.

    Jobs are ``(f, args, on_done, context)``; ``on_done(result or Failure,
    context)`` runs on the reactor thread. The attributes the manhole's
    ``pool()`` shows (``workers``, ``working``, ``max``) keep ThreadPool's names.
    """

    log = Logger()

    def __init__(self, reactor: IReactorFromThreads, threads: int, name: str) -> None:
        self.max = max(1, threads)
        self.name = name
        self.started = False
        self.joined = False
        self._reactor = reactor
        self._jobs: deque[tuple[Callable[..., Any], tuple[Any, ...], OnDone, Any] | None]
        self._jobs = deque()
        # Each thread's lock, held while the thread sleeps; idle threads, last to sleep last.
        self._locks = [threading.Lock() for _ in range(self.max)]
        self._idle: list[threading.Lock] = []
        self._threads: list[threading.Thread] = []
        self._busy = [False] * self.max
        self._done: deque[tuple[OnDone, Any, Any]] = deque()
        self._wake_pending = False
        self.wakeups = 0
        """Reactor wake-ups that delivered completions (fewer than jobs under load)."""

    @property
    def workers(self) -> int:
        """Threads alive."""
        return sum(1 for t in self._threads if t.is_alive())

    @property
    def working(self) -> list[str]:
        """Names of the threads running a job now."""
        return [t.name for t, busy in zip(self._threads, self._busy, strict=False) if busy]

    @property
    def queued(self) -> int:
        """Jobs waiting for a thread."""
        return len(self._jobs)

    def start(self) -> None:
        self.started = True
        for index in range(self.max):
            self._locks[index].acquire()
            thread = threading.Thread(
                target=self._work, args=(index,), name=f"{self.name}-{index}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        """Refuse new jobs, let the queued ones finish, then join the threads.

        Their results still reach the reactor (as with ThreadPool.stop).
        """
        self.started = False
        self.joined = True
        for _ in self._threads:
            self._put(None)
        for thread in self._threads:
            thread.join()

    def submit(
        self, on_done: OnDone, context: Any, f: Callable[..., Any], args: tuple[Any, ...]
    ) -> None:
        self._put((f, args, on_done, context))

    def _put(self, job: tuple[Callable[..., Any], tuple[Any, ...], OnDone, Any] | None) -> None:
        self._jobs.append(job)
        try:
            sleeper = self._idle.pop()
        except IndexError:
            # Every thread is working; the first to finish takes the job.
            return
        sleeper.release()

    def _work(self, index: int) -> None:
        jobs = self._jobs
        idle = self._idle
        lock = self._locks[index]
        wait = lock.acquire
        busy = self._busy
        done = self._done
        wake = self._reactor.callFromThread
        while True:
            try:
                job = jobs.popleft()
            except IndexError:
                idle.append(lock)
                if jobs:
                    # A job came between the pop and the append: take it back unless
                    # `_put` already chose this thread (its release is then consumed).
                    try:
                        idle.remove(lock)
                    except ValueError:
                        wait()
                    continue
                wait()
                continue
            if job is None:
                return
            f, args, on_done, context = job
            busy[index] = True
            try:
                result = f(*args)
            except BaseException:
                result = Failure()
            busy[index] = False
            done.append((on_done, result, context))
            # The drain clears the flag before it reads the deque, so an append
            # that sees the flag set is always picked up by a drain still to run.
            if not self._wake_pending:
                self._wake_pending = True
                wake(self._deliver)
            del job, f, args, on_done, context, result

    def _deliver(self) -> None:
        """On the reactor: run the completions queued so far, each contained."""
        self._wake_pending = False
        self.wakeups += 1
        done = self._done
        for _ in range(len(done)):
            on_done, result, context = done.popleft()
            try:
                on_done(result, context)
            except Exception:
                self.log.failure("an I/O pool completion failed")


class IOPool(service.Service):
    """The broker's own thread pool for disk I/O, started first and stopped last.

    Kept apart from the reactor's default pool so DNS lookups or metric scrapes
    never queue behind a slow fsync, and sized small: the GIL makes more than a
    few threads useless for Python-level work. The threads are a `WorkerPool`
    (``pool``), not Twisted's ThreadPool: one wake-up each way and nothing else
    on the produce latency path.
    """

    log = Logger()

    def __init__(self, reactor: IReactorFromThreads, threads: int = 2) -> None:
        self._reactor = reactor
        self.pool = WorkerPool(reactor, threads, name="rustka-io")
        self.submitted = 0

    def startService(self) -> None:
        super().startService()
        self.pool.start()

    def stopService(self) -> defer.Deferred[None] | None:
        super().stopService()
        self.pool.stop()
        return None

    @property
    def queue_depth(self) -> int:
        """Work items waiting for a thread (for metrics and the manhole)."""
        return self.pool.queued

    def run(self, f: Callable[..., T], *args: Any, **kwargs: Any) -> defer.Deferred[T]:
        """Run ``f`` in the pool; fail at once (never hang) once the pool is stopped."""
        if not self.pool.started:
            return defer.fail(BrokerUnavailable("the broker is shutting down"))
        self.submitted += 1
        d: defer.Deferred[T] = defer.Deferred()
        if kwargs:
            self.pool.submit(_fire, d, functools.partial(f, **kwargs), args)
        else:
            self.pool.submit(_fire, d, f, args)
        return d

    def run_then(
        self, on_done: Callable[[Any, Any], None], context: Any, f: Callable[..., Any], *args: Any
    ) -> None:
        """`run` for the lanes: ``on_done(result or Failure, context)`` on the reactor thread.

        One hop per coalesced write is the lanes' whole cost of leaving the
        reactor, so it skips the Deferred and its callback chain.
        """
        if not self.pool.started:
            on_done(Failure(BrokerUnavailable("the broker is shutting down")), context)
            return
        self.submitted += 1
        self.pool.submit(on_done, context, f, args)


def _fire(result: Any, d: defer.Deferred[Any]) -> None:
    if type(result) is Failure:
        d.errback(result)
    else:
        d.callback(result)


# Marks a queued append whose sink is a Deferred rather than a plain callback.
_FIRE = object()

OnResult = Callable[[Any, Any], None]
Early = Callable[[Any], None]
"""``early(result)``: an append's hook on the pool thread once its write returned."""


def _write_then_early(
    write_many: Callable[[list[Any]], list[Any]],
    items: list[Any],
    earlies: list[tuple[int, Early]],
) -> list[Any]:
    """On the pool: the coalesced write, then each hook with its own item's result.

    A hook that raises is skipped: its append is still answered on the reactor,
    by ``on_result``, from the same results.
    """
    results = write_many(items)
    for index, early in earlies:
        # The reactor's answer still follows if a hook fails.
        with contextlib.suppress(Exception):
            early(results[index])
    return results


class Lane:
    """Serial execution on the pool with coalescing of queued appends.

    Two kinds of work enter a lane: `submit` (a single callable, run alone) and
    `append` (an item handed to ``write_many`` together with every other append
    queued behind it). Order across both kinds is submission order.

    `append_to` is `append` for hot paths: instead of a Deferred per item it
    calls ``on_result(result, context)``, which saves the Deferred and its
    callback chain on every produce request.
    """

    log = Logger()

    def __init__(
        self,
        io: IOPool,
        write_many: Callable[[list[Any]], list[Any]],
        max_coalesce: int = 4096,
    ) -> None:
        self._io = io
        self._write_many = write_many
        self._max_coalesce = max_coalesce
        # (is_call, payload, sink, context, early): sink is a Deferred when context is
        # _FIRE; early is None or the item's hook on the pool thread (`append_to`).
        self._queue: deque[tuple[bool, Any, Any, Any, Early | None]] = deque()
        self._busy = False
        self._idle_waiters: list[defer.Deferred[None]] = []
        self.hops = 0
        self.items = 0

    @property
    def depth(self) -> int:
        return len(self._queue) + (1 if self._busy else 0)

    def append(self, item: Any) -> defer.Deferred[Any]:
        """Queue ``item`` for the next coalesced ``write_many`` call; fires with its result."""
        d: defer.Deferred[Any] = defer.Deferred()
        self._queue.append((False, item, d, _FIRE, None))
        if not self._busy:
            self._kick()
        return d

    def append_to(
        self, item: Any, on_result: OnResult, context: Any, early: Early | None = None
    ) -> None:
        """Like `append`, but ``on_result(result, context)`` gets the outcome.

        The result is the item's entry in what ``write_many`` returned, or a
        Failure. ``on_result`` must not raise; if it does, the error is logged
        and the lane carries on with the other items.

        ``early(result)``, when given, runs on the pool thread as soon as the
        write returns, before the hop back to the reactor: the native server
        answers a stored produce from there (docs/performance.md, "Latency
        (issue 21)"). It sees only the item's own result, never a Failure of the
        whole write, must be thread-safe and must not raise; ``on_result`` runs
        afterwards on the reactor as always.
        """
        self._queue.append((False, item, on_result, context, early))
        if not self._busy:
            self._kick()

    def submit(self, f: Callable[..., T], *args: Any) -> defer.Deferred[T]:
        """Run ``f(*args)`` on the pool after everything queued before it."""
        d: defer.Deferred[T] = defer.Deferred()
        self._queue.append((True, (f, args), d, _FIRE, None))
        if not self._busy:
            self._kick()
        return d

    def when_idle(self) -> defer.Deferred[None]:
        """Fires once everything queued so far has run (used by graceful shutdown)."""
        if not self._busy and not self._queue:
            return defer.succeed(None)
        d: defer.Deferred[None] = defer.Deferred()
        self._idle_waiters.append(d)
        return d

    def _kick(self) -> None:
        queue = self._queue
        if self._busy or not queue:
            if not self._busy:
                self._notify_idle()
            return
        is_call, payload, sink, context, early = queue.popleft()
        self._busy = True
        self.hops += 1
        if is_call:
            f, args = payload
            self.items += 1
            self._io.run_then(self._finish_call, sink, f, *args)
            return
        items = [payload]
        waiters = [(sink, context)]
        earlies = None if early is None else [(0, early)]
        limit = self._max_coalesce
        while queue and not queue[0][0] and len(items) < limit:
            _, item, sink, context, early = queue.popleft()
            if early is not None:
                if earlies is None:
                    earlies = []
                earlies.append((len(items), early))
            items.append(item)
            waiters.append((sink, context))
        self.items += len(items)
        if earlies is None:
            self._io.run_then(self._finish_appends, waiters, self._write_many, items)
        else:
            self._io.run_then(
                self._finish_appends, waiters, _write_then_early, self._write_many, items, earlies
            )

    def _finish_call(self, result: Any, d: defer.Deferred[Any]) -> None:
        self._busy = False
        try:
            if isinstance(result, Failure):
                d.errback(result)
            else:
                d.callback(result)
        finally:
            self._kick()

    def _finish_appends(self, result: Any, waiters: list[tuple[Any, Any]]) -> None:
        self._busy = False
        try:
            if isinstance(result, Failure):
                for sink, context in waiters:
                    self._deliver(sink, context, result)
            else:
                for (sink, context), r in zip(waiters, result, strict=True):
                    if isinstance(r, BaseException):
                        r = Failure(r)
                    if context is _FIRE:
                        if type(r) is Failure:
                            sink.errback(r)
                        else:
                            sink.callback(r)
                    else:
                        try:
                            sink(r, context)
                        except Exception:
                            self.log.failure("a lane result callback failed")
        finally:
            self._kick()

    def _deliver(self, sink: Any, context: Any, failure: Failure) -> None:
        if context is _FIRE:
            sink.errback(failure)
            return
        try:
            sink(failure, context)
        except Exception:
            self.log.failure("a lane result callback failed")

    def _notify_idle(self) -> None:
        waiters, self._idle_waiters = self._idle_waiters, []
        for w in waiters:
            w.callback(None)
