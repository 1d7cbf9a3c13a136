"""Long-poll waiters: fetches parked until one of their partitions grows or time runs out.

One waiter may watch several partitions (a Kafka Fetch spans many; a native
FetchBatch watches one). It fires once, on the first append to any of them or
on its timeout, and is then removed from every partition it watched, so a
waiter costs nothing after it fired.

Waking is cheap when nobody waits (one dict pop), because every append calls it.
"""

from __future__ import annotations

from collections.abc import Sequence

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime

PartitionKey = tuple[str, int]


class _Waiter:
    __slots__ = ("deferred", "keys", "timer")

    def __init__(self, keys: Sequence[PartitionKey], deferred: defer.Deferred[None]) -> None:
        self.keys = keys
        self.deferred = deferred
        self.timer: IDelayedCall | None = None


class Waiters:
    """Parked long-polls by partition; see the module docstring."""

    def __init__(self, reactor: IReactorTime) -> None:
        self._reactor = reactor
        self._by_key: dict[PartitionKey, list[_Waiter]] = {}

    def __len__(self) -> int:
        """Waiters parked now (for the admin views and tests)."""
        return len({id(w) for ws in self._by_key.values() for w in ws})

    def park(self, keys: Sequence[PartitionKey], timeout_s: float) -> defer.Deferred[None]:
        """A Deferred that fires with None on the first append to any of ``keys``, or
        after ``timeout_s``; cancelling it unparks the waiter."""
        waiter = _Waiter(tuple(keys), defer.Deferred(lambda _: self._unpark(waiter)))
        for key in waiter.keys:
            self._by_key.setdefault(key, []).append(waiter)
        waiter.timer = self._reactor.callLater(max(0.0, timeout_s), self._expire, waiter)
        return waiter.deferred

    def wake(self, key: PartitionKey) -> None:
        """New data in ``key``: release every long-poll parked on it."""
        waiters = self._by_key.pop(key, None)
        if not waiters:
            return
        for waiter in waiters:
            self._unpark(waiter, skip=key)
            waiter.deferred.callback(None)

    def release_all(self) -> None:
        """Answer every parked long-poll now (graceful shutdown)."""
        waiters = {id(w): w for ws in self._by_key.values() for w in ws}
        self._by_key.clear()
        for waiter in waiters.values():
            if waiter.timer is not None and waiter.timer.active():
                waiter.timer.cancel()
            waiter.deferred.callback(None)

    def _expire(self, waiter: _Waiter) -> None:
        waiter.timer = None
        self._unpark(waiter)
        waiter.deferred.callback(None)

    def _unpark(self, waiter: _Waiter, skip: PartitionKey | None = None) -> None:
        if waiter.timer is not None and waiter.timer.active():
            waiter.timer.cancel()
        waiter.timer = None
        for key in waiter.keys:
            if key == skip:
                continue
            parked = self._by_key.get(key)
            if parked is None:
                continue
            try:
                parked.remove(waiter)
            except ValueError:
                continue
            if not parked:
                del self._by_key[key]
