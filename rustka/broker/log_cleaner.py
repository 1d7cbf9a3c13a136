"""When and where the log cleaner runs: one partition at a time, on its lane, paced.

The cleaning itself is storage's (rustka/storage/cleaner.py, a `Cleaning` per
round); this module is Kafka's LogCleaner thread and LogCleanerManager around
it, Twisted-style. A pass looks at every partition whose LogConfig compacts
(on the I/O pool: the numbers come from the logs' segment snapshots), keeps
each one's dirty ratio for the metrics, and picks the dirtiest one that is due
(`CleanableRange.due`: the dirty ratio above min.cleanable.dirty.ratio, a
dirty segment older than max.compaction.lag.ms, or a kept tombstone past its
delete horizon). That partition's round then runs as a sequence of steps, each
a job on the partition's lane, so a step never races an append, a roll or
retention, and appends queued meanwhile wait for one step at most. After each
step the next is delayed until the bytes read and written so far fit
``cleaner_io_max_bytes_per_second``, which also bounds the share of the CPU
(and of the GIL) the cleaner takes from produce and fetch. Nothing of it runs
on the reactor thread. When no partition is due, the next pass waits
``cleaner_backoff_ms``; after a round it starts at once.

A round that finds its segments changed under it (retention, a topic
deletion) simply ends and the partition is looked at again next pass. Any
other failure (a corrupt batch, a full disk) marks the partition uncleanable
until the broker restarts, as Kafka does, and is counted with the background
failures (task ``cleaner``) and logged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from rustka.broker.lanes import IOPool
from rustka.broker.maintenance import CLEANER
from rustka.broker.partition_lanes import PartitionKey, PartitionLanes
from rustka.broker.stats import BrokerStats
from rustka.record.batch import ms_now
from rustka.storage.cleaner import (
    CHUNK_BYTES,
    CleanableRange,
    CleanerStats,
    Cleaning,
    cleanable_range,
)
from rustka.storage.log_manager import LogManager
from rustka.storage.partition_log import PartitionLog, SegmentsChanged
from rustka.storage.partition_store import PartitionStore

__all__ = ["STEP_BYTES", "CleanerCore", "CleanerTotals", "LogCleaner", "PartitionCleaning"]


STEP_BYTES = 512 * 1024
"""Bytes read and written per step at most: a few tens of milliseconds of work on the lane.
Under a rate limit a step is a tenth of a second's worth, so the pauses stay short."""

BURST_S = 0.1
"""How far ahead of its rate limit a round may get after falling behind it."""


class CleanerCore(Protocol):
    """What `LogCleaner` needs of the broker core (`rustka.broker.core.Broker` is one)."""

    reactor: IReactorTime
    io: IOPool
    stats: BrokerStats
    logs: LogManager | None

    def partition(self, topic: str, partition: int) -> PartitionStore:
        """The partition's log; `UnknownTopic` or `UnknownPartition` if there is none."""


@dataclass
class PartitionCleaning:
    """What the cleaner knows of one compacted partition, for metrics and ``topics describe``."""

    dirty_ratio: float = 0.0
    first_dirty: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    rounds: int = 0
    last_clean_ms: int | None = None
    uncleanable: str | None = None


@dataclass
class CleanerTotals:
    """The whole broker's cleaner counters (Prometheus counters)."""

    bytes_read: int = 0
    bytes_written: int = 0
    rounds: int = 0
    rounds_aborted: int = 0
    last_round: CleanerStats | None = None
    partitions: dict[PartitionKey, PartitionCleaning] = field(default_factory=dict)


def _candidates(logs: LogManager) -> list[tuple[PartitionKey, PartitionLog]]:
    """The compacted partitions this cleaner can clean: those kept in local segments.

    Cleaning rewrites segment files, so it is the local log's business; a partition
    another engine keeps (`rustka.storage.partition_store`) compacts its own way.
    """
    return [
        ((name, index), plog)
        for name, topic in list(logs.topics.items())
        for index, plog in enumerate(list(topic.partitions))
        if isinstance(plog, PartitionLog) and plog.config.compact
    ]


def _survey(
    candidates: list[tuple[PartitionKey, PartitionLog]], now_ms: int
) -> list[tuple[PartitionKey, PartitionLog, CleanableRange]]:
    """On the pool: every compacted partition's cleanable range (from segment snapshots)."""
    found = []
    for key, plog in candidates:
        try:
            found.append((key, plog, cleanable_range(plog, now_ms)))
        except Exception:
            # A log closed by a topic deletion meanwhile is simply not a candidate.
            continue
    return found


def _step(cleaning: Cleaning, budget: int) -> tuple[int, float]:
    """On the partition's lane: one step of a round, and how long it took."""
    started = time.perf_counter()
    used = cleaning.step(budget)
    return used, time.perf_counter() - started


class LogCleaner:
    """The broker's cleaner; see the module docstring."""

    log = Logger()

    def __init__(
        self,
        core: CleanerCore,
        lanes: PartitionLanes,
        *,
        enabled: bool,
        map_bytes: int,
        max_bytes_per_second: int | None,
        backoff_ms: int,
        failed: Callable[[Failure, str, PartitionKey | None], None],
    ) -> None:
        self._core = core
        self._lanes = lanes
        self.enabled = enabled
        self.map_bytes = map_bytes
        self.max_bytes_per_second = max_bytes_per_second
        self.backoff_s = backoff_ms / 1000
        self._failed = failed
        self.step_bytes = STEP_BYTES
        if max_bytes_per_second is not None:
            self.step_bytes = max(4096, min(STEP_BYTES, max_bytes_per_second // 10))
        self.totals = CleanerTotals()
        self._timer: IDelayedCall | None = None
        self._running = False
        self._busy = False
        self._current: tuple[PartitionKey, PartitionLog, Cleaning] | None = None
        self._round_started = 0.0
        self._due = 0.0
        self._counted = (0, 0)
        self._passes_waiting: list[defer.Deferred[None]] = []
        self._step_waiting: list[defer.Deferred[None]] = []

    @property
    def cleaning(self) -> PartitionKey | None:
        """The partition being cleaned now, if any."""
        return None if self._current is None else self._current[0]

    def start(self) -> None:
        """Begin passes (once the storage is open); the first after one backoff."""
        if not self.enabled or self._running:
            return
        self._running = True
        self._later(self.backoff_s)

    def stop(self) -> defer.Deferred[None]:
        """No more passes; a round in progress is abandoned on its lane (its partial
        cleaned segment removed). Fires once that is done."""
        self._running = False
        self._cancel_timer()
        current, self._current = self._current, None
        self._busy = False
        self._answer(self._passes_waiting)
        if current is None:
            return defer.succeed(None)
        key, plog, cleaning = current
        lane = self._lane_of(key, plog)
        run = lane.submit if lane is not None else self._core.io.run
        return run(cleaning.abort).addErrback(self._report, key)

    def after_next_step(self) -> defer.Deferred[None]:
        """Fires once the next step of a round has run (for tests and the manhole)."""
        d: defer.Deferred[None] = defer.Deferred()
        self._step_waiting.append(d)
        return d

    def run_pass(self) -> defer.Deferred[None]:
        """Look now rather than at the next timer (for tests and the manhole); fires when
        the pass has cleaned the partition it picked, or found none due (at once when
        the cleaner is not running). A pass or round already under way counts."""
        d: defer.Deferred[None] = defer.Deferred()
        self._passes_waiting.append(d)
        if not self._running:
            self._answer(self._passes_waiting)
        elif not self._busy:
            self._cancel_timer()
            self._pass()
        return d

    def _lane_of(self, key: PartitionKey, plog: PartitionStore) -> Any:
        """The partition's lane while ``plog`` is still its log (not deleted, not
        deleted and created again), else None."""
        try:
            if self._core.partition(*key) is not plog:
                return None
            return self._lanes.lane(*key)
        except Exception:
            return None

    # -- passes ------------------------------------------------------------------
    #
    # One pass or round at a time: ``_busy`` from the survey until the round ends
    # (or the survey finds nothing due); the timer only ever holds the next pass
    # or the next step.

    def _later(self, delay_s: float, step: bool = False) -> None:
        f = self._next_step if step else self._pass
        self._timer = self._core.reactor.callLater(delay_s, f)

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    @staticmethod
    def _answer(waiting: list[defer.Deferred[None]]) -> None:
        answered = list(waiting)
        waiting.clear()
        for d in answered:
            d.callback(None)

    def _pass(self) -> None:
        self._timer = None
        logs = self._core.logs
        if self._busy or not self._running:
            return
        if logs is None:
            self._rest(self.backoff_s)
            return
        self._busy = True
        now = ms_now()
        self._core.io.run(_survey, _candidates(logs), now).addCallbacks(
            self._surveyed, self._survey_failed, (now,)
        )

    def _survey_failed(self, failure: Failure) -> None:
        self._report(failure, None)
        self._rest(self.backoff_s)

    def _surveyed(
        self, found: list[tuple[PartitionKey, PartitionLog, CleanableRange]], now: int
    ) -> None:
        if not self._busy:
            return  # stopped meanwhile
        partitions = self.totals.partitions
        live = {key for key, _, _ in found}
        for key in list(partitions):
            if key not in live:
                del partitions[key]
        best: tuple[PartitionKey, PartitionLog, CleanableRange] | None = None
        for key, plog, cleanable in found:
            state = partitions.setdefault(key, PartitionCleaning())
            state.dirty_ratio = cleanable.dirty_ratio
            state.first_dirty = cleanable.first_dirty
            if state.uncleanable is not None:
                continue
            if not cleanable.due(plog.config.min_cleanable_dirty_ratio):
                continue
            if best is None or cleanable.dirty_ratio > best[2].dirty_ratio:
                best = (key, plog, cleanable)
        if best is None or self._lane_of(best[0], best[1]) is None:
            self._rest(self.backoff_s)
            return
        key, plog, _ = best
        chunk = min(CHUNK_BYTES, self.step_bytes)
        cleaning = Cleaning(plog, map_bytes=self.map_bytes, now_ms=now, chunk_bytes=chunk)
        self._current = (key, plog, cleaning)
        self._round_started = time.monotonic()
        self._due = time.monotonic()
        self._counted = (0, 0)
        self._next_step()

    def _rest(self, delay_s: float) -> None:
        """The pass or round is over: answer `run_pass` callers, and look again later
        (at once after a round: another partition may be due)."""
        self._busy = False
        self._current = None
        if self._running:
            self._later(delay_s)
        self._answer(self._passes_waiting)

    # -- a round -----------------------------------------------------------------

    def _next_step(self) -> None:
        self._timer = None
        current = self._current
        if current is None:
            return
        key, plog, cleaning = current
        lane = self._lane_of(key, plog)
        if lane is None:
            # The topic was deleted: drop the round's files (on the pool), look again.
            self._core.io.run(cleaning.abort).addErrback(self._report, key)
            self.totals.rounds_aborted += 1
            self._rest(0)
            return
        lane.submit(_step, cleaning, self.step_bytes).addCallbacks(
            self._stepped, self._round_failed, (current,), None, (current,)
        )

    def _stepped(self, result: tuple[int, float], current: Any) -> None:
        self._answer(self._step_waiting)
        if self._current is not current:
            return  # stopped meanwhile; the abort was queued behind this step
        used, _ = result
        key, plog, cleaning = current
        self._count(key, cleaning.stats)
        if not cleaning.done:
            self._later(self._pause(used), step=True)
            return
        self._finished(key, plog, cleaning)
        self._rest(0)

    def _pause(self, used: int) -> float:
        """Seconds to wait after a step of ``used`` bytes to stay within the rate limit.

        A token bucket holding at most `BURST_S` worth of bytes: a round that fell
        behind its rate (other work had the CPU) does not make up for it with a
        burst at full speed.
        """
        rate = self.max_bytes_per_second
        if rate is None:
            return 0.0
        now = time.monotonic()
        self._due = max(self._due, now - BURST_S) + used / rate
        return max(0.0, self._due - now)

    def _count(self, key: PartitionKey, stats: CleanerStats) -> None:
        """Add the bytes a round moved since the last count (step by step, so the
        metrics show a long round's progress)."""
        read = stats.bytes_read - self._counted[0]
        written = stats.bytes_written - self._counted[1]
        self._counted = (stats.bytes_read, stats.bytes_written)
        totals = self.totals
        totals.bytes_read += read
        totals.bytes_written += written
        state = totals.partitions.setdefault(key, PartitionCleaning())
        state.bytes_read += read
        state.bytes_written += written

    def _finished(self, key: PartitionKey, plog: PartitionStore, cleaning: Cleaning) -> None:
        stats = cleaning.stats
        totals = self.totals
        totals.rounds += 1
        totals.last_round = stats
        state = totals.partitions.setdefault(key, PartitionCleaning())
        state.rounds += 1
        state.last_clean_ms = ms_now()
        state.first_dirty = stats.cleaned_to
        state.dirty_ratio = 0.0
        seconds = time.monotonic() - self._round_started
        if stats.groups_swapped:
            self.log.info(
                "cleaned {topic}/{partition} up to offset {end}: {read} bytes read, {written} "
                "written, {kept} of {records} records kept, {keys} keys, in {seconds:.2f} s",
                topic=key[0],
                partition=key[1],
                end=stats.cleaned_to,
                read=stats.bytes_read,
                written=stats.bytes_written,
                kept=stats.records_kept,
                records=stats.records_read,
                keys=stats.keys_mapped,
                seconds=seconds,
            )
            # The replaced segments stay open for reads already in flight; then go.
            self._core.reactor.callLater(
                plog.config.file_delete_delay_ms / 1000, self._release, key, plog
            )

    def _release(self, key: PartitionKey, plog: PartitionStore) -> None:
        lane = self._lane_of(key, plog)
        if lane is not None:
            lane.submit(plog.release_deleted).addErrback(self._report, key)

    def _round_failed(self, failure: Failure, current: Any) -> None:
        self._answer(self._step_waiting)
        if self._current is not current:
            return
        key = current[0]
        self.totals.rounds_aborted += 1
        if failure.check(SegmentsChanged):
            self.log.info(
                "cleaning {topic}/{partition} stopped: {why}; it is looked at again next pass",
                topic=key[0],
                partition=key[1],
                why=failure.getErrorMessage(),
            )
        else:
            state = self.totals.partitions.setdefault(key, PartitionCleaning())
            state.uncleanable = failure.getErrorMessage()
            self._report(failure, key)
            self.log.error(
                "{topic}/{partition} is uncleanable until the broker restarts: {why}",
                topic=key[0],
                partition=key[1],
                why=failure.getErrorMessage(),
            )
        self._rest(0)

    def _report(self, failure: Failure, key: PartitionKey | None) -> None:
        self._failed(failure, CLEANER, key)
