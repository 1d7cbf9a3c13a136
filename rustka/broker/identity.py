"""The broker's identities: the data dir's cluster id and fresh producer ids.

Kafka's Metadata names the cluster id, and InitProducerId hands out producer
ids; both must stay the same, or never repeat, across restarts of the broker.
`Identity` states what it needs of the core in `IdentityCore`, so it never
imports the core (`rustka.broker.core.Broker` builds it and delegates to it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from rustka.config import Config
from rustka.storage import cluster_id

T = TypeVar("T")


class IdentityCore(Protocol):
    """What `Identity` needs of the broker core (`rustka.broker.core.Broker` is one)."""

    config: Config

    def run(self, f: Callable[..., T], *args: Any) -> defer.Deferred[T]:
        """Run ``f`` on the I/O pool, counted so the core's drain waits for it."""

    @property
    def shared_cluster_id(self) -> Callable[[str], str] | None:
        """In a cluster: reads (or stores a proposed) id in the catalog, on the pool."""


class Identity:
    """One broker's cluster id and producer ids; see the module docstring."""

    log = Logger()

    def __init__(self, core: IdentityCore) -> None:
        self._core = core
        self._cluster_id: str | None = None
        self._cluster_id_waiters: list[defer.Deferred[str]] = []
        self._last_producer_id = 0

    def cluster_id(self) -> defer.Deferred[str]:
        """The data dir's cluster id, read (or created) once on the I/O pool.

        Created on first use rather than at startup, so a data dir no Kafka client
        asked about keeps no file for it. A failure reaches every caller waiting
        for it, and the next call tries again.
        """
        if self._cluster_id is not None:
            return defer.succeed(self._cluster_id)
        d: defer.Deferred[str] = defer.Deferred()
        self._cluster_id_waiters.append(d)
        if len(self._cluster_id_waiters) == 1:
            data_dir = Path(self._core.config.data_dir)
            shared = self._core.shared_cluster_id
            job = (
                self._core.run(shared, cluster_id.new_cluster_id())
                if shared is not None
                else self._core.run(cluster_id.load_or_create, data_dir)
            )
            job.addCallbacks(self._got_cluster_id, self._cluster_id_failed)
        return d

    def _got_cluster_id(self, value: str) -> None:
        self._cluster_id = value
        waiters, self._cluster_id_waiters = self._cluster_id_waiters, []
        for d in waiters:
            d.callback(value)

    def _cluster_id_failed(self, failure: Failure) -> None:
        self.log.failure("cannot read or create the cluster id", failure)
        waiters, self._cluster_id_waiters = self._cluster_id_waiters, []
        for d in waiters:
            d.errback(failure)

    def new_producer_id(self) -> int:
        """A producer id never handed out before, by this or any earlier run of the broker.

        Ids are the clock in milliseconds, then 10 bits of the broker id, then a
        10-bit counter, always above the last one given: restarts take a later clock,
        so no id repeats unless the clock goes backwards by more than the broker's
        downtime, and brokers sharing a diskless catalog (whose ids differ modulo
        1024) never hand out the same id, as Kafka's brokers take disjoint blocks.
        """
        broker = self._core.config.broker_id % 1024
        candidate = (int(time.time() * 1000) << 20) | (broker << 10)
        self._last_producer_id = max(candidate, self._last_producer_id + 1)
        return self._last_producer_id
