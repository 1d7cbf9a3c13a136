"""The broker's diskless side: opening the engine, and the timers that keep it current.

Imported only when the configuration names a catalog and a bucket, since the
engine needs the drivers of the ``diskless`` extra (psycopg, boto3); the embedded
broker never loads them.

Two timers run on the reactor while the broker serves. The refresh reads every
diskless partition's bounds from the catalog, so a broker learns what the others
committed and wakes the long-polls of its consumers there; the collector deletes
the objects no row uses any more and the orphans of crashed uploads
(docs/diskless.md, "Collection"). Both run their blocking work on the I/O pool,
one at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from rustka.broker.diskless_writer import DisklessWriter
from rustka.broker.lanes import IOPool
from rustka.broker.waiters import Waiters
from rustka.config import Config
from rustka.storage.diskless.catalog import Catalog
from rustka.storage.diskless.engine import DisklessEngine
from rustka.storage.diskless.object_cache import ObjectCache
from rustka.storage.diskless.object_store import ObjectStore
from rustka.storage.diskless.topics import (
    DisklessTopic,
    DisklessTopics,
    Refreshed,
    apply_change,
)
from rustka.storage.log_config import Resolver
from rustka.storage.log_manager import LogManager

__all__ = ["DisklessSide", "open_diskless"]

REFRESH_S = 0.5
"""How often the bounds other brokers committed are read (a consumer on this broker
sees another broker's records within about this long)."""
COLLECT_S = 60.0
"""How often unused objects and old orphans are deleted from the store."""


def open_diskless(config: Config, resolve: Resolver, logs: LogManager) -> DisklessEngine:
    """On the pool at startup: connect, create the catalog's tables if new, make sure
    the bucket exists, and put the catalog's topics beside the local ones.

    A name that is both a local topic and a diskless one is served as the local one,
    and the clash is reported (`LogManager.diskless_clashes`)."""
    assert config.diskless_dsn is not None and config.diskless_bucket is not None
    catalog = Catalog(config.diskless_dsn)
    try:
        catalog.migrate()
        store = ObjectStore(
            config.diskless_bucket,
            endpoint_url=config.diskless_s3_endpoint,
            region=config.diskless_s3_region,
            prefix=config.diskless_prefix,
        )
        store.ensure_bucket()
    except BaseException:
        catalog.close()
        raise
    engine = DisklessEngine(
        catalog, store, ObjectCache(config.diskless_cache_bytes), broker_id=config.broker_id
    )
    registry = DisklessTopics(engine, resolve)
    logs.diskless = registry
    for name, topic in registry.load().items():
        if name in logs.topics:
            logs.diskless_clashes.append(name)
            continue
        logs.topics[name] = topic
    return engine


class DisklessSide:
    """The writer and the two timers of a broker with a diskless engine."""

    log = Logger()

    def __init__(
        self,
        engine: DisklessEngine,
        logs: LogManager,
        io: IOPool,
        clock: IReactorTime,
        waiters: Waiters,
        config: Config,
        on_gone: Callable[[str], object] | None = None,
    ) -> None:
        self.engine = engine
        self._logs = logs
        self._io = io
        self._waiters = waiters
        self._on_gone = on_gone
        """Forgets a diskless topic another broker deleted (the core's own bookkeeping)."""
        self.writer = DisklessWriter(
            engine, io, clock, config.diskless_buffer_ms, config.diskless_buffer_bytes
        )
        self._refresh = task.LoopingCall(self._refresh_once)
        self._refresh.clock = clock
        self._collect = task.LoopingCall(self._collect_once)
        self._collect.clock = clock

    def start(self) -> None:
        self._refresh.start(REFRESH_S, now=False).addErrback(self._stopped, "refresh")
        self._collect.start(COLLECT_S, now=False).addErrback(self._stopped, "collector")

    def stop(self) -> None:
        for call in (self._refresh, self._collect):
            if call.running:
                call.stop()

    def _stopped(self, failure: Failure, what: str) -> None:
        self.log.failure("the diskless {what} stopped", failure, what=what)

    def _refresh_once(self) -> defer.Deferred[Any]:
        registry = self._logs.diskless
        if registry is None:
            return defer.succeed(None)
        d = self._io.run(registry.refresh, self._logs.topics)
        # A failure applying what was read is logged like one reading it: the loop goes on.
        d.addCallback(self._refreshed).addErrback(self._failed, "refresh")
        return d

    def _refreshed(self, found: Refreshed) -> None:
        topics = self._logs.topics
        for name, topic in found.added.items():
            # Created on another broker: served here from now on (a name this broker
            # already has, local or diskless, is left as it is).
            topics.setdefault(name, topic)
        for topic, overrides, config, grown in found.changed:
            if topics.get(topic.name) is topic:
                apply_change(topic, overrides, config, grown)
        for name in found.gone:
            topic = topics.get(name)
            if isinstance(topic, DisklessTopic) and self._on_gone is not None:
                self._on_gone(name)
        for key in found.moved:
            self._waiters.wake(key)

    def _collect_once(self) -> defer.Deferred[Any]:
        d = self._io.run(self.engine.collect)
        d.addCallbacks(self._collected, self._failed, errbackArgs=("collection",))
        return d

    def _collected(self, counts: tuple[int, int]) -> None:
        objects, orphans = counts
        if objects or orphans:
            self.log.info(
                "diskless collection: {objects} unused objects and {orphans} orphans deleted",
                objects=objects,
                orphans=orphans,
            )

    def _failed(self, failure: Failure, what: str) -> None:
        # The catalog or the store is away: the next tick tries again.
        self.log.warn("diskless {what} failed: {why}", what=what, why=failure.getErrorMessage())
