"""The diskless produce path's buffer: many partitions' appends, one upload, one commit.

Appends to diskless partitions do not go to the partitions' lanes (a lane writes
one partition). They are gathered here, on the reactor, for up to
``diskless_buffer_ms`` or until ``diskless_buffer_bytes`` have arrived, then
handed to the I/O pool together: each partition's appends are validated as a
lane's would be (`rustka.broker.produce.prepare_batches`), all of them are
uploaded as one object and committed in one catalog transaction
(`rustka.storage.diskless.engine.DisklessEngine.write`), and only then answered
(docs/diskless.md, "Produce").

One flush runs at a time. What arrives meanwhile waits for the next, which
starts as soon as the running one ends if its time is up or it is full: under
load the uploads grow instead of queueing, and a partition's appends are
committed in arrival order, so an idempotent producer's sequences stay in order
across flushes. A failed upload or commit fails every append of the flush with
a retriable error; nothing of it was acknowledged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from rustka.broker.lanes import IOPool, OnResult
from rustka.broker.produce import prepare_batches
from rustka.record.batch import BatchHeader
from rustka.storage.diskless.engine import DisklessEngine, PartitionWrite
from rustka.storage.diskless.partition import DisklessPartition
from rustka.storage.log_append import AppendInfo

__all__ = ["DisklessWriter"]

Item = tuple[bytes, "list[tuple[int, BatchHeader]] | int"]


@dataclass(slots=True)
class _Queued:
    plog: DisklessPartition
    item: Item
    on_result: OnResult
    context: Any


@dataclass(slots=True)
class _Buffer:
    queued: list[_Queued] = field(default_factory=list)
    size: int = 0


class DisklessWriter:
    """Gathers diskless appends and flushes them; see the module docstring."""

    log = Logger()

    def __init__(
        self,
        engine: DisklessEngine,
        io: IOPool,
        clock: IReactorTime,
        buffer_ms: int,
        buffer_bytes: int,
    ) -> None:
        self.engine = engine
        self._io = io
        self._clock = clock
        self._buffer_s = buffer_ms / 1000
        self._buffer_bytes = buffer_bytes
        self._buffer = _Buffer()
        self._timer: IDelayedCall | None = None
        self._due = False
        self._flushing = False
        self._idle: list[defer.Deferred[None]] = []
        self.flushes = 0
        """Uploads started (each one object and one commit)."""
        self.known_schema_id: Callable[[int], bool] | None = None
        """For topics with schema validation (`rustka.broker.produce.prepare_batches`)."""

    def append_to(
        self, plog: DisklessPartition, item: Item, on_result: OnResult, context: Any
    ) -> None:
        """Queue ``item`` for ``plog``; ``on_result(AppendInfo or Failure, context)`` runs
        on the reactor once it is committed or refused, as a lane's append would."""
        buffer = self._buffer
        buffer.queued.append(_Queued(plog, item, on_result, context))
        buffer.size += len(item[0])
        if buffer.size >= self._buffer_bytes:
            self._due = True
        elif self._timer is None and not self._due:
            self._timer = self._clock.callLater(self._buffer_s, self._time_up)
        self._maybe_flush()

    def _time_up(self) -> None:
        self._timer = None
        self._due = True
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if self._flushing or not self._due or not self._buffer.queued:
            return
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        self._due = False
        queued = self._buffer.queued
        self._buffer = _Buffer()
        self._flushing = True
        self.flushes += 1
        self._io.run_then(self._flushed, queued, _flush, self.engine, queued, self.known_schema_id)

    def _flushed(self, results: list[AppendInfo] | Failure, queued: list[_Queued]) -> None:
        self._flushing = False
        if isinstance(results, Failure):
            self.log.warn(
                "diskless upload of {count} appends failed: {why}",
                count=len(queued),
                why=results.getErrorMessage(),
            )
            for entry in queued:
                entry.on_result(results, entry.context)
        else:
            for entry, result in zip(queued, results, strict=True):
                entry.on_result(result, entry.context)
        if self._buffer.queued and (self._timer is None or self._idle):
            # What arrived during the flush has waited at least that long already.
            self._due = True
        self._maybe_flush()
        if self._idle and not self._flushing and not self._buffer.queued:
            idle, self._idle = self._idle, []
            for d in idle:
                d.callback(None)

    def drain(self) -> defer.Deferred[None]:
        """Flush what is buffered now; fires once nothing is buffered or in flight
        (graceful shutdown: every append taken is answered before the broker stops)."""
        d: defer.Deferred[None] = defer.Deferred()
        if not self._flushing and not self._buffer.queued:
            d.callback(None)
            return d
        self._idle.append(d)
        self._due = True
        self._maybe_flush()
        return d


def _flush(
    engine: DisklessEngine,
    queued: list[_Queued],
    known_schema_id: Callable[[int], bool] | None = None,
) -> list[AppendInfo]:
    """On the pool: validate each partition's appends, then one upload and one commit."""
    groups: dict[DisklessPartition, list[int]] = {}
    for index, entry in enumerate(queued):
        groups.setdefault(entry.plog, []).append(index)
    writes: list[PartitionWrite] = []
    prepared = []
    for plog, indexes in groups.items():
        ready = prepare_batches(plog.config, [queued[i].item for i in indexes], known_schema_id)
        prepared.append((plog, indexes, ready))
        writes.append(
            PartitionWrite(
                plog.topic,
                plog.index,
                ready.payloads,
                ready.headers,
                ready.log_append_time is not None,
            )
        )
    stored = engine.write(writes)
    results: list[AppendInfo | None] = [None] * len(queued)
    for (plog, indexes, ready), infos in zip(prepared, stored, strict=True):
        plog.stored(infos)
        for index, info in zip(indexes, ready.answers(infos), strict=True):
            results[index] = info
    return [r if r is not None else AppendInfo(-1, -1) for r in results]
