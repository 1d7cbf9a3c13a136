"""`BrokerService`: the I/O pool and the broker core as one Twisted service.

Starting opens the storage on the I/O pool (recovery scans and the offsets
replay are disk work and must not block the reactor: metrics and the manhole
stay reachable during a long recovery). `BrokerService.whenReady` fires once the
storage is open, so the service tree can send READY=1 and open listeners only
then; until it fires every request is answered "broker is starting".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.application import service
from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger
from twisted.python.failure import Failure

from rustka.broker.core import Broker
from rustka.broker.lanes import IOPool
from rustka.broker.maintenance import FLUSH, RETENTION, guarded
from rustka.config import Config


def raise_open_files_limit(max_connections: int) -> int:
    """Lift the soft open-files limit to the hard one; every connection costs an fd.

    Returns the new soft limit, and says so in the log when even the hard limit
    cannot hold ``max_connections`` plus headroom for segment files.
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft < max_connections + 256:
        BrokerService.log.warn(
            "the open-files limit is {soft}, below max_connections ({max}) plus headroom; "
            "raise LimitNOFILE or lower max_connections",
            soft=soft,
            max=max_connections,
        )
    return soft


class BrokerService(service.MultiService):
    """Owns the I/O pool and the broker's storage; started before the listeners.

    Stopping is ordered by hand because MultiService stops its children all at
    once: drain the lanes, close the storage on the pool (writing the
    clean-shutdown marker), and only then stop the pool.
    """

    log = Logger()

    def __init__(self, config: Config, reactor: Any) -> None:
        super().__init__()
        self.io = IOPool(reactor, config.io_threads)
        self.broker = Broker(config, self.io, reactor)
        self._reactor: IReactorFromThreads = reactor
        self._timers: list[task.LoopingCall] = []

    def startService(self) -> None:
        raise_open_files_limit(self.broker.config.max_connections)
        self.io.startService()
        service.Service.startService(self)
        self.broker.open_storage().addCallbacks(self._storage_ready, lambda _: None)

    def whenReady(self) -> defer.Deferred[None]:
        """Fires once the storage is open; errbacks with the cause if opening failed."""
        return self.broker.when_ready()

    def _storage_ready(self, _: None) -> None:
        if not self.running:
            return
        config = self.broker.config
        maintenance = self.broker.maintenance
        self._every(
            config.retention_check_interval_ms,
            guarded(RETENTION, maintenance, self.broker.enforce_retention),
        )
        if config.flush == "interval":
            self._every(
                config.flush_interval_ms, guarded(FLUSH, maintenance, self.broker.flush_dirty)
            )
        self.broker.cleaner.start()

    def _every(self, interval_ms: int, f: Callable[[], defer.Deferred[Any]]) -> None:
        loop = task.LoopingCall(f)
        loop.clock = self._reactor
        loop.start(interval_ms / 1000, now=False).addErrback(self._loop_stopped)
        self._timers.append(loop)

    def _loop_stopped(self, failure: Failure) -> None:
        # `guarded` never lets an error through, so this is a bug worth a traceback.
        self.log.failure("background task stopped", failure)

    @property
    def loops(self) -> list[task.LoopingCall]:
        """The background loops (retention, and flushing under ``flush = "interval"``)."""
        return list(self._timers)

    @defer.inlineCallbacks
    def stopService(self) -> Any:
        service.Service.stopService(self)
        for loop in self._timers:
            if loop.running:
                loop.stop()
        self._timers.clear()
        yield self.broker.drain()
        try:
            yield self.io.run(self.broker.close_storage)
        except Exception:
            self.log.failure("closing the storage failed; the next start will run recovery")
        self.io.stopService()
        self.log.info("broker stopped")
