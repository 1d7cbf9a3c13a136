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

from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from twisted.application import service
from twisted.internet import defer
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from rustka.errors import BrokerUnavailable

T = TypeVar("T")


class IOPool(service.Service):
    """The broker's own thread pool for disk I/O, started first and stopped last.

    Kept apart from the reactor's default pool so DNS lookups or metric scrapes
    never queue behind a slow fsync, and sized small: the GIL makes more than a
    few threads useless for Python-level work.
    """

    log = Logger()

    def __init__(self, reactor: IReactorFromThreads, threads: int = 2) -> None:
        self._reactor = reactor
        self.pool = ThreadPool(minthreads=1, maxthreads=max(1, threads), name="rustka-io")
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
        return self.pool._queue.qsize()

    def run(self, f: Callable[..., T], *args: Any, **kwargs: Any) -> defer.Deferred[T]:
        """Run ``f`` in the pool; fail at once (never hang) once the pool is stopped."""
        if not self.pool.started or self.pool.joined:
            return defer.fail(BrokerUnavailable("the broker is shutting down"))
        self.submitted += 1
        return deferToThreadPool(self._reactor, self.pool, f, *args, **kwargs)


class Lane:
    """Serial execution on the pool with coalescing of queued appends.

    Two kinds of work enter a lane: `submit` (a single callable, run alone) and
    `append` (an item handed to ``write_many`` together with every other append
    queued behind it). Order across both kinds is submission order.
    """

    def __init__(
        self,
        io: IOPool,
        write_many: Callable[[list[Any]], list[Any]],
        max_coalesce: int = 4096,
    ) -> None:
        self._io = io
        self._write_many = write_many
        self._max_coalesce = max_coalesce
        self._queue: deque[tuple[str, Any, defer.Deferred[Any]]] = deque()
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
        self._queue.append(("append", item, d))
        self._kick()
        return d

    def submit(self, f: Callable[..., T], *args: Any) -> defer.Deferred[T]:
        """Run ``f(*args)`` on the pool after everything queued before it."""
        d: defer.Deferred[T] = defer.Deferred()
        self._queue.append(("call", (f, args), d))
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
        if self._busy or not self._queue:
            if not self._busy:
                self._notify_idle()
            return
        kind, payload, d = self._queue.popleft()
        self._busy = True
        self.hops += 1
        if kind == "call":
            f, args = payload
            self.items += 1
            hop = self._io.run(f, *args)
            hop.addBoth(self._finish_call, d)
            return
        items = [payload]
        waiters = [d]
        while self._queue and self._queue[0][0] == "append" and len(items) < self._max_coalesce:
            _, item, waiter = self._queue.popleft()
            items.append(item)
            waiters.append(waiter)
        self.items += len(items)
        hop = self._io.run(self._write_many, items)
        hop.addBoth(self._finish_appends, waiters)

    def _finish_call(self, result: Any, d: defer.Deferred[Any]) -> None:
        self._busy = False
        try:
            if isinstance(result, Failure):
                d.errback(result)
            else:
                d.callback(result)
        finally:
            self._kick()

    def _finish_appends(self, result: Any, waiters: list[defer.Deferred[Any]]) -> None:
        self._busy = False
        try:
            if isinstance(result, Failure):
                for w in waiters:
                    w.errback(result)
            else:
                for w, r in zip(waiters, result, strict=True):
                    if isinstance(r, BaseException):
                        w.errback(Failure(r))
                    else:
                        w.callback(r)
        finally:
            self._kick()

    def _notify_idle(self) -> None:
        waiters, self._idle_waiters = self._idle_waiters, []
        for w in waiters:
            w.callback(None)
