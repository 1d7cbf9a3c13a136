"""Background work: interval flushing, retention (with segment_ms rolls), offsets expiry
and compaction, and the expiry of idle transactional ids.

Each pass runs every partition's work on that partition's lane, so it never
races an append, and it must survive failures (docs/reliability.md): a pass
never errbacks, one failing partition never stops the others, and a partition
whose flush failed stays dirty so the next pass retries it. Every failure is
counted in ``BrokerStats.background_failures`` by task and logged, at most once
a minute per task and partition.

The lanes and dirty marks come from the core that creates `Maintenance`
(`PartitionLanes`, shared with the produce path); what else it needs of the
core is `MaintenanceCore`, so this module never imports the core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from rustka.broker.lanes import Lane
from rustka.broker.partition_lanes import OFFSETS_KEY, PartitionKey, PartitionLanes
from rustka.broker.stats import BrokerStats, LogLimiter
from rustka.broker.transactions import TransactionCoordinator
from rustka.config import Config
from rustka.storage.log_manager import LogManager
from rustka.storage.offsets import OffsetsStore
from rustka.storage.partition_store import PartitionStore

FLUSH = "flush"
RETENTION = "retention"
OFFSETS_COMPACTION = "offsets_compaction"
OFFSETS_EXPIRY = "offsets_expiry"
TRANSACTIONAL_ID_EXPIRY = "transactional_id_expiry"
# The log cleaner's failures (rustka/broker/log_cleaner.py) are counted here too.
CLEANER = "cleaner"
BACKGROUND_TASKS: tuple[str, ...] = (
    FLUSH,
    RETENTION,
    OFFSETS_COMPACTION,
    CLEANER,
    OFFSETS_EXPIRY,
    TRANSACTIONAL_ID_EXPIRY,
)


class MaintenanceCore(Protocol):
    """What `Maintenance` needs of the broker core (`rustka.broker.core.Broker` is one).

    ``logs``, ``offsets`` and ``offsets_lane`` are None until the storage is open.
    """

    reactor: IReactorTime
    config: Config
    stats: BrokerStats
    transactions: TransactionCoordinator
    log_limiter: LogLimiter
    logs: LogManager | None
    offsets: OffsetsStore | None
    offsets_lane: Lane | None

    def partition(self, topic: str, partition: int) -> PartitionStore:
        """The partition's log; `UnknownTopic` or `UnknownPartition` if there is none."""

    def offsets_expiry(self) -> tuple[int | None, dict[str, int | None]]:
        """``offsets_retention_ms`` (None: never) and, for each group with commits, since
        when it has been empty (None while in use), as `OffsetsStore.expired` takes them."""


class Maintenance:
    """The background passes of one broker; see the module docstring."""

    log = Logger()

    def __init__(
        self, core: MaintenanceCore, lanes: PartitionLanes, clock: IReactorTime | None = None
    ) -> None:
        self._core = core
        self._lanes = lanes
        self._flushing: set[PartitionKey] = set()
        self.clock: IReactorTime = core.reactor if clock is None else clock
        """What "now" is for retention, offsets expiry and transactional-id expiry, and
        what the delayed releases wait on: the core's reactor, or a test's
        `twisted.internet.task.Clock`, so a test advances time instead of waiting."""

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def flush_dirty(self) -> defer.Deferred[None]:
        """For ``flush = "interval"``: fsync every partition written since its last flush.

        A mark is cleared only when that partition's flush succeeded; a flush
        still running from the previous pass is not queued twice.
        """
        core = self._core
        lanes = self._lanes
        work: list[defer.Deferred[None]] = []
        for key in lanes.dirty:
            if key in self._flushing:
                continue
            try:
                if key == OFFSETS_KEY:
                    offsets, lane = core.offsets, core.offsets_lane
                    if offsets is None or lane is None:
                        continue
                    d = lane.submit(offsets.flush)
                else:
                    lane = lanes.existing(key)
                    if lane is None:
                        # the partition is gone (deleted topic): nothing left to flush
                        lanes.mark_clean(key)
                        continue
                    d = lane.submit(core.partition(*key).flush)
            except Exception:
                self.failed(Failure(), FLUSH, key)
                continue
            self._flushing.add(key)
            work.append(d.addCallbacks(self._flushed, self._flush_failed, (key,), None, (key,)))
        return _all(work)

    def _flushed(self, _: Any, key: PartitionKey) -> None:
        self._flushing.discard(key)
        self._lanes.mark_clean(key)

    def _flush_failed(self, failure: Failure, key: PartitionKey) -> None:
        self._flushing.discard(key)
        self.failed(failure, FLUSH, key)

    def enforce_retention(self) -> defer.Deferred[None]:
        """Delete expired segments (rolling old active ones first, which is also how
        ``segment_ms`` rolls an idle partition), partition by partition.

        The offsets log is exempt from retention (an idle group must keep its
        position); it is compacted instead, on its own lane, once superseded
        commits dominate it. Transactional ids idle for transactional_id_expiration_ms
        are forgotten in the same pass (`TransactionCoordinator.expire_ids`).
        """
        core = self._core
        logs = core.logs
        if logs is None:
            return defer.succeed(None)
        now = self.now_ms()
        work: list[defer.Deferred[None]] = []
        for name, topic in list(logs.topics.items()):
            for index, plog in enumerate(list(topic.partitions)):
                key = (name, index)
                try:
                    d = self._lanes.lane(name, index).submit(plog.enforce_retention, now)
                except Exception:
                    self.failed(Failure(), RETENTION, key)
                    continue
                work.append(
                    d.addCallbacks(self._retained, self.failed, (key, plog), None, (RETENTION, key))
                )
        offsets, lane = core.offsets, core.offsets_lane
        if offsets is not None and lane is not None:
            try:
                retention_ms, empty_since = core.offsets_expiry()
                # Decided and forgotten in this reactor turn, with the groups' states just
                # read: no join can come in between (OffsetsStore.expire); the lane makes
                # it durable.
                doomed = (
                    [] if retention_ms is None else offsets.expire(now, retention_ms, empty_since)
                )
                if doomed:
                    d = lane.submit(offsets.write_expiry, doomed)
                    work.append(
                        d.addCallbacks(
                            self._expired, self.failed, None, None, (OFFSETS_EXPIRY, OFFSETS_KEY)
                        )
                    )
            except Exception:
                self.failed(Failure(), OFFSETS_EXPIRY, OFFSETS_KEY)
            try:
                if offsets.needs_compaction():
                    d = lane.submit(offsets.compact)
                    work.append(
                        d.addCallbacks(
                            _ignore, self.failed, None, None, (OFFSETS_COMPACTION, OFFSETS_KEY)
                        )
                    )
            except Exception:
                self.failed(Failure(), OFFSETS_COMPACTION, OFFSETS_KEY)
        try:
            d = core.transactions.expire_ids(now, core.config.transactional_id_expiration_ms)
            work.append(
                d.addCallbacks(_ignore, self.failed, None, None, (TRANSACTIONAL_ID_EXPIRY,))
            )
        except Exception:
            self.failed(Failure(), TRANSACTIONAL_ID_EXPIRY)
        return _all(work)

    def _retained(self, deleted: list[int], key: PartitionKey, plog: PartitionStore) -> None:
        if deleted:
            # Readers that snapshotted the deleted segments keep them for the topic's
            # file.delete.delay.ms (as the cleaner's replaced segments), then the files
            # close and their space returns: a full disk recovers in seconds, not one
            # retention interval later.
            delay_s = plog.config.file_delete_delay_ms / 1000
            self.clock.callLater(delay_s, self._release, key)
            self._core.stats.retention_deleted_segments += len(deleted)
            self.log.info(
                "retention deleted {count} segment(s) of {topic}/{partition}: base offsets {bases}",
                count=len(deleted),
                topic=key[0],
                partition=key[1],
                bases=deleted,
            )

    def _expired(self, doomed: list[tuple[str, str, int]]) -> None:
        if doomed:
            self.log.info(
                "offsets retention expired {count} committed offset(s) of {groups} empty group(s)",
                count=len(doomed),
                groups=len({group for group, _t, _p in doomed}),
            )

    def _release(self, key: PartitionKey) -> None:
        core = self._core
        try:
            if core.logs is None or key[0] not in core.logs.topics:
                return
            plog = core.partition(*key)
            d = self._lanes.lane(*key).submit(plog.release_deleted)
        except Exception:
            self.failed(Failure(), RETENTION, key)
            return
        d.addCallbacks(_ignore, self.failed, None, None, (RETENTION, key))

    def failed(self, failure: Failure, task: str, key: PartitionKey | None = None) -> None:
        """Count and (rate-limited) log one failed piece of background work."""
        stats = self._core.stats.background_failures
        stats[task] = stats.get(task, 0) + 1
        where = "" if key is None else f"{key[0]}/{key[1]}"
        if self._core.log_limiter.first_in_a_while(("background", task, where)):
            self.log.error(
                "background {task} failed{on}: {error} (it will be retried; "
                "repeats of this message are suppressed for a minute)",
                task=task,
                on=f" for {where}" if where else "",
                error=failure.getErrorMessage(),
            )


def guarded(task: str, maintenance: Maintenance, f: Callable[[], Any]) -> Callable[[], Any]:
    """``f`` for a LoopingCall: an exception or errback is counted and logged, never
    returned, because a LoopingCall stops for good at its first errback."""

    def run() -> defer.Deferred[None]:
        d = defer.maybeDeferred(f)
        return d.addErrback(maintenance.failed, task)

    return run


def _ignore(_: Any) -> None:
    return None


def _all(work: list[defer.Deferred[None]]) -> defer.Deferred[None]:
    """Fires when every piece of work is done; the pieces never errback."""
    if not work:
        return defer.succeed(None)
    return defer.DeferredList(work, consumeErrors=True).addCallback(_ignore)
