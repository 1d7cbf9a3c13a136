"""The broker core: the protocol-neutral API every front-end calls.

Front-ends (``rustka.native``, ``rustka.kafka``) decode their wire messages,
call the methods below, and encode what comes back; the core never sees a
protocol message. docs/broker-api.md describes the same API for readers.

State. ``state`` is ``"starting"`` until the storage is open (recovery runs on
the I/O pool, see `open_storage`), then ``"serving"``, then ``"stopping"``
once `drain` began (``"failed"`` if the storage could not open). Every call
made outside ``"serving"`` fails with `BrokerUnavailable` whose message says
why ("broker is starting: recovering storage", "the broker is shutting down").

Errors. Methods that return a Deferred never raise: a bad argument, an unknown
topic or partition, a full disk all arrive as the Deferred's failure, always a
`RustkaError` subclass from `rustka.errors` (anything else is a bug; turn it
into an answer with `report_error`). Synchronous methods raise those errors.

Writes (Deferred-returning: they touch disk, and under ``flush = "always"``
they fire only after the fsync):

- ``append(topic, partition, batches, *, auto_create) -> AppendResult``:
  client-built RecordBatch v2 bytes, validated whole before anything is stored
  (`accept_batches`; each batch at most ``max_batch_bytes``, else
  `RecordTooLarge`). Base offsets are rewritten, and so is a maxTimestamp that
  is not the records' largest (with the CRC), as Kafka does. The topic is
  auto-created when ``auto_create`` and the config's ``auto_create_topics``
  both allow it.
- ``append_records(records, tokens, reply, context)``: single ``(topic, key,
  value)`` records, routed by key, one one-record batch each (the native seed
  Produce). Answers through ``reply`` per partition, without a Deferred per
  record. Both append paths share one lane per partition, so concurrent
  appends from any connections coalesce into one write and one fsync.
- ``create_topic(name, partitions, configs, *, validate_only) -> TopicInfo``,
  ``alter_topic(name, partitions) -> TopicInfo``, ``delete_topic(name)``.
- ``alter_topic_configs(name, ops, *, replace, validate_only) -> configs``:
  change a topic's own configs (Kafka topic configs; ``ops`` are (key, SET |
  DELETE | APPEND | SUBTRACT, value)); the topic's logs use them at once.
- ``commit_offsets(group, {(topic, partition): offset}, metadata)``: ``metadata``
  optionally maps some of those partitions to the commit's metadata string.
- ``delete_offsets(group, partitions=None) -> [(topic, partition)]``: tombstone
  a group's commits (DeleteGroups, OffsetDelete).
- ``delete_records(topic, partition, offset) -> int``: move the partition's log
  start up to ``offset`` (-1: the high watermark), answering the new log start
  (Kafka's DeleteRecords low watermark); past the high watermark is
  `OffsetOutOfRange`, a topic without cleanup.policy ``delete`` `PolicyViolation`.

Reads:

- ``read(topic, partition, offset, max_bytes) -> ReadResult``: stored batch
  bytes from the batch holding ``offset`` (the first batch whole even if it is
  larger than ``max_bytes``; never more than one segment), with the high
  watermark and log start. ``offset == high watermark`` reads nothing;
  below the log start or past the end is `OffsetOutOfRange`.
- ``read_many([(topic, partition, offset, max_bytes), ...], max_bytes) ->
  [ReadResult | error, ...]``: Kafka's Fetch, every partition in one pool job,
  in request order within the shared ``max_bytes`` (the first batch of the
  first partition with data whole, later ones over what is left empty); each
  partition's error (unknown, `OffsetOutOfRange`) in its place. Partitions at
  the high watermark (the LSO under ``committed``) are answered without the pool.
- ``read_record(topic, partition, offset) -> Record | None`` (seed Fetch).
- ``wait_for_data([(topic, partition, offset), ...], timeout_s) -> None``:
  the long-poll. Fires as soon as any listed partition has data past its
  offset, or on timeout (unknown partitions are ignored: the caller reports
  them itself).
- ``list_offset(topic, partition, timestamp) -> OffsetAtTime | None``:
  ``EARLIEST`` (-2), ``LATEST`` (-1), or the first offset whose timestamp is at
  least ``timestamp`` (None when there is none).
- Synchronous: ``topics_snapshot(names)``, ``topic_configs(name)`` and
  ``broker_configs()`` (each config's value and source, for DescribeConfigs),
  ``bounds(topic, partition)``,
  ``committed_offsets(group, partitions)``, ``committed_metadata(group)``,
  ``group_offsets(group)`` (lag),
  ``group_names()``.

Identity:

- ``cluster_id() -> str`` (a Deferred): the data dir's cluster id, created on
  first use and the same after every restart (Kafka's Metadata names it).
- ``new_producer_id() -> int``: a producer id no earlier call, in this run or
  any before it, handed out (Kafka's InitProducerId).

Transactions. ``transactions`` is the broker's one `TransactionCoordinator`
(rustka/broker/transactions.py), loaded from ``__transactions/`` with the
storage. ``append`` verifies every transactional batch with it (a batch of
a producer not in an ongoing transaction with that partition added is
refused with Kafka's error); ``write_marker`` ends a transaction on one
partition (on its lane, fsynced before it fires); ``read``, ``list_offset``
and ``wait_for_data`` take ``committed=True`` for read_committed: they stop
at the last stable offset and ``read`` lists the aborted transactions of
what it returns.

Groups. ``groups`` is the broker's one `GroupCoordinator`, built here with the
config's group settings (session-timeout bounds, initial rebalance delay), so
every front-end and admin view sees the same groups under the same rules; the
core itself stores the committed offsets.

Parts. The produce path (`Appends`), the background passes (`Maintenance`)
and the log cleaner (`LogCleaner`) share one `PartitionLanes` (each
partition's write lane and the dirty marks), created here and handed to them;
each states what it needs of the core as a Protocol (`AppendsCore`,
`MaintenanceCore`, `CleanerCore`) and never imports this module.

Lifecycle (for `rustka.broker.service.BrokerService`): ``open_storage``,
``when_ready``, ``drain``, ``close_storage``; background passes
``flush_dirty`` and ``enforce_retention`` (see `rustka.broker.maintenance`).
"""

from __future__ import annotations

import functools
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from rustka.broker.access import Access
from rustka.broker.coordinator import GroupCoordinator
from rustka.broker.lanes import IOPool, Lane
from rustka.broker.log_cleaner import LogCleaner
from rustka.broker.maintenance import Maintenance
from rustka.broker.partition_lanes import OFFSETS_KEY, PartitionLanes, WriteMany
from rustka.broker.produce import (
    AppendResult,
    Appends,
    KeyedRecord,
    RecordsReply,
    lane_writer,
)
from rustka.broker.stats import BrokerStats, LogLimiter
from rustka.broker.transactions import TransactionCoordinator
from rustka.broker.waiters import Waiters
from rustka.config import (
    TOPIC_CONFIGS,
    Config,
    ConfigEntry,
    describe_broker_configs,
    describe_topic_configs,
    topic_configs,
)
from rustka.errors import (
    BrokerUnavailable,
    CorruptBatch,
    InvalidConfig,
    InvalidName,
    InvalidPartitionCount,
    InvalidRequest,
    OffsetOutOfRange,
    PolicyViolation,
    RustkaError,
    StorageError,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)
from rustka.names import validate_group, validate_topic
from rustka.record.batch import Record, ms_now
from rustka.settings import ConfigError, Kind, join_list, split_list
from rustka.storage import cluster_id
from rustka.storage.log_config import LogConfig
from rustka.storage.log_manager import LogManager
from rustka.storage.offsets import Commit, OffsetsStore
from rustka.storage.partition_log import PartitionLog
from rustka.storage.topic import Topic, check_partition_count
from rustka.storage.txn_log import TransactionLog

__all__ = [
    "APPEND",
    "DELETE",
    "EARLIEST",
    "LATEST",
    "SET",
    "SUBTRACT",
    "AppendResult",
    "Broker",
    "ConfigEntry",
    "OffsetAtTime",
    "PartitionInfo",
    "PartitionLag",
    "ReadResult",
    "TopicInfo",
]

PartitionKey = tuple[str, int]
T = TypeVar("T")

# The parts of a RecordBatch v2 header the transactional check reads.
_MAGIC_AT = 16
_ATTRIBUTES_LOW_AT = 22
_TRANSACTIONAL_BIT = 0x10
_PRODUCER_AT = 43
_PRODUCER = struct.Struct(">qh")
_PRODUCER_END = 53
_OFFSET_LENGTH = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")

STARTING = "starting"
SERVING = "serving"
STOPPING = "stopping"
FAILED = "failed"

EARLIEST = -2
LATEST = -1

# What alter_topic_configs may do to one config (Kafka's AlterConfigOp).
SET = "set"
DELETE = "delete"
APPEND = "append"
SUBTRACT = "subtract"
ConfigOp = tuple[str, str, str | None]
"""``(key, SET | DELETE | APPEND | SUBTRACT, value)``: one change to a topic's configs."""


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Stored batch bytes (as chunks, to be sent back to back) and the partition's bounds."""

    chunks: tuple[bytes, ...]
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int = -1
    # read_committed only: (producer id, first offset) of each aborted transaction
    # with records in what was read; None for read_uncommitted.
    aborted: tuple[tuple[int, int], ...] | None = None

    @property
    def size(self) -> int:
        return sum(len(chunk) for chunk in self.chunks)


FetchPosition = tuple[str, int, int, int]
"""``(topic, partition, offset, max_bytes)``: one partition of a `Broker.read_many`."""

# A read_many slot the pool job has yet to fill (never returned).
_PENDING = ReadResult((), -1, -1)


@dataclass(frozen=True, slots=True)
class OffsetAtTime:
    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as Metadata shows it; ``configs`` are its own (Kafka topic configs, as
    stored), without the broker's defaults."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A group's committed offset beside the partition's bounds (bounds 0/0 if it is gone)."""

    topic: str
    partition: int
    committed: int
    log_start: int
    high_watermark: int

    @property
    def lag(self) -> int:
        """Records the group has yet to read; never negative even if the log was rewound."""
        return max(0, self.high_watermark - max(self.committed, self.log_start))


def _deferred(f: Callable[..., defer.Deferred[T]]) -> Callable[..., defer.Deferred[T]]:
    """Make a Deferred-returning method report synchronous errors through the Deferred."""

    def wrapper(*args: Any, **kwargs: Any) -> defer.Deferred[T]:
        try:
            return f(*args, **kwargs)
        except Exception:
            return defer.fail(Failure())

    wrapper.__name__ = f.__name__
    wrapper.__doc__ = f.__doc__
    return wrapper


class Broker:
    """The protocol-neutral core; see the module docstring for its API."""

    log = Logger()

    def __init__(self, config: Config, io: IOPool, reactor: IReactorTime) -> None:
        self.config = config
        self.io = io
        self.reactor = reactor
        self.stats = BrokerStats()
        self.log_limiter = LogLimiter()
        self.access = Access(config, io)
        self.logs: LogManager | None = None
        self.offsets: OffsetsStore | None = None
        self.offsets_lane: Lane | None = None
        self.state = STARTING
        self.flush_interval = config.flush == "interval"
        # Kafka's message.max.bytes: no stored batch may be larger than a native frame.
        self.max_batch_bytes = config.max_batch_bytes or config.max_frame_bytes
        self.waiters = Waiters(reactor)
        self.lanes = PartitionLanes(io, self._lane_writer, track_dirty=self.flush_interval)
        self.appends = Appends(self, self.lanes)
        self.maintenance = Maintenance(self, self.lanes)
        self.cleaner = LogCleaner(
            self,
            self.lanes,
            enabled=config.cleaner_enabled,
            map_bytes=config.cleaner_dedupe_buffer_bytes,
            max_bytes_per_second=config.cleaner_io_max_bytes_per_second,
            backoff_ms=config.cleaner_backoff_ms,
            failed=self.maintenance.failed,
        )
        # One coordinator for both protocols' groups (docs/kafka.md, "Groups").
        self.groups = GroupCoordinator(
            reactor,
            self,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
        )
        self.transactions = TransactionCoordinator(
            reactor,
            self,
            max_timeout_ms=config.transaction_max_timeout_ms,
            abort_interval_ms=config.transaction_abort_interval_ms,
        )
        self.txn_log: TransactionLog | None = None
        self._open_failure: Failure | None = None
        self._ready: list[defer.Deferred[None]] = []
        self._deleting: set[str] = set()
        self._pool_work = 0
        self._pool_quiet: list[defer.Deferred[None]] = []
        self._partitions_in_creation = 0
        self._cluster_id: str | None = None
        # Commits of deleted topics that opening the storage tombstoned (for the log).
        self._orphans_dropped: list[tuple[str, str, int]] = []
        # Offsets of groups not seen since the start expire counting from here at the
        # earliest (group states are not persisted).
        self._started_ms = ms_now()
        self._cluster_id_waiters: list[defer.Deferred[str]] = []
        self._last_producer_id = 0

    # -- state -------------------------------------------------------------------

    @property
    def accepting(self) -> bool:
        return self.state == SERVING

    @accepting.setter
    def accepting(self, value: bool) -> None:
        """For tests and the manhole: stop (or resume) taking requests."""
        self.state = SERVING if value else STOPPING

    def check_serving(self) -> None:
        """Raise the `BrokerUnavailable` that says why requests cannot run now."""
        state = self.state
        if state == SERVING:
            return
        if state == STARTING:
            raise BrokerUnavailable("broker is starting: recovering storage")
        if state == FAILED:
            cause = self._open_failure.getErrorMessage() if self._open_failure else "unknown"
            raise BrokerUnavailable(f"broker storage failed to open: {cause}")
        raise BrokerUnavailable("the broker is shutting down")

    def _check_open(self) -> LogManager:
        """Reads need open storage only: they still run while a drain finishes."""
        if self.logs is None:
            self.check_serving()
            raise BrokerUnavailable("broker storage is closed")
        return self.logs

    # -- lifecycle -------------------------------------------------------------------

    def open_storage(self) -> defer.Deferred[None]:
        """Open every topic and replay the offsets log on the I/O pool (the pool must
        be running); fires like `when_ready`."""
        config = self.config
        # With authorization on, nothing is served before the ACLs are read; a damaged
        # ACL file fails the start before any log is opened.
        self.access.load().addCallback(
            lambda _: self._run(
                _open_storage, Path(config.data_dir), config.log_config(), self._resolve
            )
        ).addCallbacks(self._storage_opened, self._storage_failed)
        return self.when_ready()

    def _storage_opened(
        self,
        opened: tuple[LogManager, OffsetsStore, list[tuple[str, str, int]], TransactionLog],
    ) -> None:
        self.logs, self.offsets, self._orphans_dropped, self.txn_log = opened
        self.offsets_lane = Lane(self.io, self._write_commits)
        if self.logs.recovered:
            self.log.warn("unclean shutdown detected: the log tails were checked and repaired")
        for report in self.logs.recovery_reports:
            self.log.warn("recovery: {report}", report=report)
        for skipped in self.offsets.skipped_batches:
            self.log.error("damaged commit batch skipped in {where}", where=str(skipped))
        if self._orphans_dropped:
            self.log.warn(
                "dropped {count} committed offset(s) of deleted topic(s) {topics}: the "
                "broker stopped after deleting them and before deleting their commits",
                count=len(self._orphans_dropped),
                topics=sorted({topic for _g, topic, _p in self._orphans_dropped}),
            )
        self.log.info(
            "storage ready in {data_dir}: {topics} topics, {groups} groups",
            data_dir=str(Path(self.config.data_dir).resolve()),
            topics=len(self.logs.topics),
            groups=len(self.offsets.groups()),
        )
        for skipped in self.txn_log.skipped_batches:
            self.log.error("damaged transaction-log batch skipped in {where}", where=str(skipped))
        if self.state == STARTING:
            self.state = SERVING
        # Decisions the log left prepared are rolled forward on their own; requests for
        # those ids wait for them (the coordinator's lock per id).
        self.transactions.load(self.txn_log, clean=not self.logs.recovered)
        ready, self._ready = self._ready, []
        for d in ready:
            d.callback(None)

    def _storage_failed(self, failure: Failure) -> None:
        self._open_failure = failure
        if self.state == STARTING:
            self.state = FAILED
        self.log.failure("the storage could not be opened", failure)
        ready, self._ready = self._ready, []
        for d in ready:
            d.errback(failure)

    def when_ready(self) -> defer.Deferred[None]:
        """Fires once the storage is open; errbacks with the cause if it cannot open."""
        if self._open_failure is not None:
            return defer.fail(self._open_failure)
        if self.logs is not None:
            return defer.succeed(None)
        d: defer.Deferred[None] = defer.Deferred()
        self._ready.append(d)
        return d

    def drain(self) -> defer.Deferred[None]:
        """Refuse new work, answer parked long-polls, stop the log cleaner (a round in
        progress is abandoned on its lane), wait for lanes and reads to finish."""
        self.state = STOPPING
        self.waiters.release_all()
        self.cleaner.stop()
        self.transactions.stop()
        lanes = self.lanes.all()
        if self.offsets_lane is not None:
            lanes.append(self.offsets_lane)
        idle = [lane.when_idle() for lane in lanes]
        if self._pool_work:
            quiet: defer.Deferred[None] = defer.Deferred()
            self._pool_quiet.append(quiet)
            idle.append(quiet)
        return defer.gatherResults(idle).addCallback(lambda _: None)

    def close_storage(self) -> None:
        """Flush, close and mark the shutdown clean (called on the pool after `drain`)."""
        if self.offsets is not None:
            self.offsets.close()
        if self.txn_log is not None:
            for meta in self.transactions.unsaved():
                self.txn_log.write(meta, durable=False)
            self.txn_log.close()
        if self.logs is not None:
            self.logs.close()

    def run(self, f: Callable[..., T], *args: Any) -> defer.Deferred[T]:
        """Pool work for the core's helpers (the transaction log), counted like `_run`."""
        return self._run(f, *args)

    def open_transactions(self) -> list[tuple[str, int, int, int]]:
        """(topic, partition, producer id, epoch) of every transaction a partition holds
        open, for the coordinator's check at startup."""
        logs = self._check_open()
        out = []
        for name, topic in sorted(logs.topics.items()):
            for index, plog in enumerate(topic.partitions):
                state = plog.producer_state
                for producer_id in sorted(plog.open_transactions()):
                    entry = state.entry(producer_id)
                    out.append((name, index, producer_id, 0 if entry is None else entry.epoch))
        return out

    def partition_exists(self, topic: str, partition: int) -> bool:
        try:
            self.partition(topic, partition)
        except (UnknownTopic, UnknownPartition, InvalidName, BrokerUnavailable):
            return False
        return True

    @_deferred
    def write_marker(
        self, topic: str, partition: int, producer_id: int, epoch: int, commit: bool
    ) -> defer.Deferred[int]:
        """End a transaction on one partition: a control batch on its lane, fsynced
        (the coordinator records the transaction complete only after every marker is
        durable), then long-polls woken, since the last stable offset moved."""
        plog = self.partition(topic, partition)
        key = (topic, partition)

        def write() -> int:
            offset = plog.append_marker(producer_id, epoch, commit)
            if plog.config.flush != "always":  # "always" fsynced it already
                plog.flush()
            return offset

        def written(offset: int) -> int:
            self.waiters.wake(key)
            return offset

        return self.lanes.lane(topic, partition).submit(write).addCallback(written)

    def _run(self, f: Callable[..., T], *args: Any) -> defer.Deferred[T]:
        """Lane-less pool work (reads, topic admin), counted so `drain` can wait for it."""
        self._pool_work += 1
        return self.io.run(f, *args).addBoth(self._pool_work_done)

    def _pool_work_done(self, result: Any) -> Any:
        self._pool_work -= 1
        if not self._pool_work:
            waiters, self._pool_quiet = self._pool_quiet, []
            for d in waiters:
                d.callback(None)
        return result

    # -- errors ------------------------------------------------------------------------

    def report_error(self, failure: Failure, what: str) -> RustkaError:
        """The error to answer a failed ``what`` with: counted, and logged at most once a
        minute per kind (a corrupt batch or full disk fails every request touching it)."""
        exc = failure.value
        limiter = self.log_limiter
        if isinstance(exc, CorruptBatch):
            self.stats.corrupt_batches += 1
            if limiter.first_in_a_while(("corrupt", str(exc))):
                self.log.error("corrupt data refused to a client: {message}", message=str(exc))
        elif isinstance(exc, StorageError) and limiter.first_in_a_while(("storage", str(exc))):
            self.log.error("disk error, request refused: {message}", message=str(exc))
        if isinstance(exc, RustkaError):
            return exc
        if limiter.first_in_a_while(("internal", what, type(exc).__name__)):
            self.log.failure("unexpected error handling {request}", failure, request=what)
        return RustkaError(f"internal error: {exc}")

    # -- lookups -------------------------------------------------------------------------

    @property
    def topics(self) -> Mapping[str, Topic]:
        """The open topics by name (live: do not hold across a reactor turn)."""
        return self._check_open().topics

    def topic(self, name: str) -> Topic:
        logs = self._check_open()
        validate_topic(name)
        topic = logs.topics.get(name)
        if topic is None or name in self._deleting:
            raise UnknownTopic(f"unknown topic {name!r}")
        return topic

    def partition(self, topic_name: str, partition: int) -> PartitionLog:
        topic = self.topic(topic_name)
        if not 0 <= partition < len(topic.partitions):
            raise UnknownPartition(
                f"unknown partition {partition} of topic {topic_name!r} "
                f"(it has {len(topic.partitions)} partitions)"
            )
        return topic.partitions[partition]

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """``(log_start_offset, high_watermark)`` of one partition."""
        plog = self.partition(topic, partition)
        return plog.log_start_offset, plog.end_offset

    def lane(self, topic: str, partition: int) -> Lane:
        """The serial lane that owns writes to one partition."""
        return self.lanes.lane(topic, partition)

    def _lane_writer(self, topic: str, partition: int) -> WriteMany:
        """A new lane's writer; raises for a partition that does not exist."""
        return lane_writer(self.partition(topic, partition))

    # -- appends ---------------------------------------------------------------------------

    @_deferred
    def append(
        self,
        topic: str,
        partition: int,
        batches: bytes | memoryview,
        *,
        auto_create: bool,
        transactional_id: str | None = None,
    ) -> defer.Deferred[AppendResult]:
        """Store client-built record batches; see the module docstring."""
        if (
            len(batches) >= _PRODUCER_END
            and batches[_MAGIC_AT] == 2
            and batches[_ATTRIBUTES_LOW_AT] & _TRANSACTIONAL_BIT
        ):
            # Kafka looks at the first batch: a transactional one must belong to the
            # ongoing transaction of its producer that added this partition.
            producer_id, epoch = _PRODUCER.unpack_from(batches, _PRODUCER_AT)
            self.transactions.verify(transactional_id, producer_id, epoch, topic, partition)
        return self.appends.append(topic, partition, batches, auto_create=auto_create)

    def append_records(
        self, records: Sequence[KeyedRecord], tokens: list[Any], reply: RecordsReply, context: Any
    ) -> None:
        """Store single records routed by key; see `rustka.broker.produce.RecordsReply`."""
        self.appends.append_records(records, tokens, reply, context)

    # -- reads -----------------------------------------------------------------------------

    @_deferred
    def read(
        self, topic: str, partition: int, offset: int, max_bytes: int, *, committed: bool = False
    ) -> defer.Deferred[ReadResult]:
        """Stored batches from ``offset``; see the module docstring."""
        plog = self.partition(topic, partition)
        start, end = plog.log_start_offset, plog.end_offset
        if not start <= offset <= end:
            raise OffsetOutOfRange(offset, start, end)
        if committed:
            stable = plog.last_stable_offset
            if offset >= stable:
                return defer.succeed(ReadResult((), end, start, stable, ()))
            return self._run(_read_committed_blocking, plog, offset, max(1, max_bytes)).addCallback(
                self._sent
            )
        if offset == end:
            return defer.succeed(ReadResult((), end, start, plog.last_stable_offset))
        return self._run(_read_blocking, plog, offset, max(1, max_bytes)).addCallback(self._sent)

    def _sent(self, result: ReadResult) -> ReadResult:
        for chunk in result.chunks:
            self.stats.bytes_out += len(chunk)
        return result

    @_deferred
    def read_many(
        self, wanted: Sequence[FetchPosition], max_bytes: int, *, committed: bool = False
    ) -> defer.Deferred[list[ReadResult | Exception]]:
        """`read` of many partitions in one pool job; see the module docstring.

        One hop to the pool and back per Fetch instead of one per partition (a
        consumer of 64 partitions paid 64 in a row). Lookups and bounds are checked
        here on the reactor thread, so a partition with nothing to read (at the high
        watermark, or at the LSO under read_committed) or an error never reaches the
        pool, and a Fetch with nothing to read anywhere makes no hop at all.
        """
        out: list[ReadResult | Exception] = []
        reads: list[tuple[int, PartitionLog, int, int]] = []
        for topic, partition, offset, part_max in wanted:
            try:
                plog = self.partition(topic, partition)
            except RustkaError as exc:
                out.append(exc)
                continue
            start, end = plog.log_start_offset, plog.end_offset
            if not start <= offset <= end:
                out.append(OffsetOutOfRange(offset, start, end))
                continue
            stable = plog.last_stable_offset
            if offset >= (stable if committed else end):
                out.append(ReadResult((), end, start, stable, () if committed else None))
                continue
            reads.append((len(out), plog, offset, part_max))
            out.append(_PENDING)
        if not reads:
            return defer.succeed(out)
        return self._run(_read_many_blocking, reads, max_bytes, committed).addCallbacks(
            self._read_many_done, self._read_many_failed, (out,), None, (out, reads)
        )

    def _read_many_done(
        self, read: list[tuple[int, ReadResult | Exception]], out: list[ReadResult | Exception]
    ) -> list[ReadResult | Exception]:
        for slot, result in read:
            out[slot] = result
            if type(result) is ReadResult:
                self._sent(result)
        return out

    def _read_many_failed(
        self,
        failure: Failure,
        out: list[ReadResult | Exception],
        reads: list[tuple[int, PartitionLog, int, int]],
    ) -> list[ReadResult | Exception]:
        """The job itself could not run (the pool stopped): each partition it was to
        read answers that error in its place, as a `read` of each would have."""
        exc = failure.value if isinstance(failure.value, Exception) else RustkaError(str(failure))
        for slot, *_ in reads:
            out[slot] = exc
        return out

    @_deferred
    def read_record(self, topic: str, partition: int, offset: int) -> defer.Deferred[Record | None]:
        """The record at ``offset`` (None at or past the end, or in a gap recovery left)."""
        plog = self.partition(topic, partition)
        if offset >= plog.end_offset:
            return defer.succeed(None)
        if offset < plog.log_start_offset:
            raise OffsetOutOfRange(offset, plog.log_start_offset, plog.end_offset)
        return self._run(plog.read_record, offset).addCallback(self._record_read)

    def _record_read(self, record: Record | None) -> Record | None:
        if record is not None:
            self.stats.bytes_out += len(record.value or b"")
        return record

    @_deferred
    def wait_for_data(
        self,
        positions: Iterable[tuple[str, int, int]],
        timeout_s: float,
        *,
        committed: bool = False,
    ) -> defer.Deferred[None]:
        """The long-poll; see the module docstring. Cancelling the Deferred unparks it."""
        logs = self._check_open()
        keys: list[PartitionKey] = []
        for topic_name, partition, offset in positions:
            topic = logs.topics.get(topic_name)
            if topic is None or not 0 <= partition < len(topic.partitions):
                continue
            plog = topic.partitions[partition]
            if (plog.last_stable_offset if committed else plog.end_offset) > offset:
                return defer.succeed(None)
            keys.append((topic_name, partition))
        if not keys or timeout_s <= 0:
            return defer.succeed(None)
        return self.waiters.park(keys, timeout_s)

    @_deferred
    def list_offset(
        self, topic: str, partition: int, timestamp: int, *, committed: bool = False
    ) -> defer.Deferred[OffsetAtTime | None]:
        """Kafka's ListOffsets for one partition; see the module docstring. Under
        read_committed the latest offset is the last stable offset, and a time
        found at or past it is none (Kafka's fetchOffsetByTimestamp)."""
        plog = self.partition(topic, partition)
        if timestamp == EARLIEST:
            return defer.succeed(OffsetAtTime(plog.log_start_offset, -1))
        if timestamp == LATEST:
            end = plog.last_stable_offset if committed else plog.end_offset
            return defer.succeed(OffsetAtTime(end, -1))
        if timestamp < 0:
            raise InvalidRequest(f"invalid timestamp {timestamp}: use -2, -1 or a time in ms")

        def found(hit: tuple[int, int] | None) -> OffsetAtTime | None:
            if hit is None or (committed and hit[0] >= plog.last_stable_offset):
                return None
            return OffsetAtTime(hit[0], hit[1])

        return self._run(plog.offset_for_timestamp, timestamp).addCallback(found)

    @_deferred
    def delete_records(self, topic: str, partition: int, offset: int) -> defer.Deferred[int]:
        """Kafka's DeleteRecords for one partition; see the module docstring.

        Runs on the partition's lane, so it is ordered with the appends queued
        before it and with retention, and fires once the new log start is
        durable (`PartitionLog.delete_records`). As Kafka's leader does, a topic
        that does not delete (cleanup.policy ``compact`` alone) refuses it.
        """
        self.check_serving()
        plog = self.partition(topic, partition)
        if not plog.config.delete:
            raise PolicyViolation(
                f"Records of partition {topic}-{partition} can not be deleted due to the "
                f"configured policy (cleanup.policy does not include delete)"
            )
        if offset < -1:
            raise OffsetOutOfRange(offset, plog.log_start_offset, plog.end_offset)
        return self.lanes.lane(topic, partition).submit(plog.delete_records, offset)

    # -- topic admin -------------------------------------------------------------------------

    def _resolve(self, overrides: Mapping[str, str]) -> LogConfig:
        """A topic's LogConfig from its own configs over the broker's settings (the
        Resolver storage opens and reconfigures topics with)."""
        try:
            return self.config.log_config(overrides)
        except ConfigError as e:
            raise InvalidConfig(str(e)) from None

    def topic_configs(self, name: str) -> list[ConfigEntry]:
        """Every Kafka topic config of ``name`` with its value and source (DescribeConfigs)."""
        return describe_topic_configs(self.config, self.topic(name).overrides)

    def broker_configs(self) -> list[ConfigEntry]:
        """Every broker setting with its value and source; all read-only at run time."""
        return describe_broker_configs(self.config)

    def topics_snapshot(self, names: Iterable[str] | None = None) -> list[TopicInfo]:
        """Every topic (or those named, in that order; unknown names raise UnknownTopic)."""
        logs = self._check_open()
        wanted = (
            sorted(n for n in logs.topics if n not in self._deleting) if names is None else names
        )
        return [self._topic_info(self.topic(name)) for name in wanted]

    def _topic_info(self, topic: Topic) -> TopicInfo:
        partitions = tuple(
            PartitionInfo(index, plog.log_start_offset, plog.end_offset)
            for index, plog in enumerate(topic.partitions)
        )
        return TopicInfo(topic.name, partitions, dict(topic.overrides))

    @_deferred
    def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str | None] | None = None,
        *,
        validate_only: bool = False,
    ) -> defer.Deferred[TopicInfo]:
        """Create a topic with configs of its own; an existing one is `TopicExists`.

        ``configs`` are Kafka topic configs, each checked by its declaration
        (`InvalidConfig` names a bad one) and stored with the topic. With
        ``validate_only`` every check runs and nothing is created (the answer is
        the topic as it would be, without partition bounds).
        """
        self.check_serving()
        validate_topic(name)
        logs = self._check_open()
        try:
            own = topic_configs(configs or {})
        except ConfigError as e:
            raise InvalidConfig(str(e)) from None
        self._resolve(own)
        if validate_only:
            check_partition_count(partitions)
            if name in logs.topics and name not in self._deleting:
                raise TopicExists(f"topic {name!r} already exists")
            return defer.succeed(TopicInfo(name, (), own))
        d = self._with_partitions(partitions, logs.create_topic, name, partitions, own)
        return d.addCallback(self._topic_info)

    @_deferred
    def alter_topic_configs(
        self,
        name: str,
        ops: Sequence[ConfigOp],
        *,
        replace: bool = False,
        validate_only: bool = False,
    ) -> defer.Deferred[dict[str, str]]:
        """Change a topic's own configs; fires with them as stored.

        ``ops`` apply in order to the current configs (Kafka's
        IncrementalAlterConfigs: SET a value, DELETE back to the broker's, APPEND
        to or SUBTRACT from a list config, starting from the value the topic has);
        ``replace`` starts from none instead, so the topic keeps only what is SET
        (Kafka's AlterConfigs). Checked whole, then written and applied to the
        open partition logs at once, or only checked with ``validate_only``.
        Changes to one topic apply one at a time, each on the last.
        """
        self.check_serving()
        topic = self.topic(name)
        for key, op, _ in ops:
            if op not in (SET, DELETE, APPEND, SUBTRACT):
                raise InvalidRequest(f"unknown config operation {op!r} for {key}")
        change = functools.partial(self._changed_configs, ops, replace)
        reconfigure = functools.partial(topic.reconfigure, validate_only=validate_only)
        d = self._run(reconfigure, change, self._resolve)
        return d.addCallback(dict)

    def _changed_configs(
        self, ops: Sequence[ConfigOp], replace: bool, current: Mapping[str, str]
    ) -> dict[str, str]:
        """Runs on the pool, under the topic's lock: the configs ``ops`` make of ``current``."""
        new = {} if replace else dict(current)
        for key, op, value in ops:
            if op == DELETE:
                new.pop(key, None)
                continue
            declared = TOPIC_CONFIGS.get(key)
            if declared is None:
                raise InvalidConfig(f"Unknown topic config name: {key}")
            if op == SET:
                new[key] = value  # type: ignore[assignment]
                continue
            if declared.kind is not Kind.LIST:
                raise InvalidConfig(
                    f"Can't {op.upper()} to key {key} because its type is not LIST."
                )
            if value is None:
                raise InvalidConfig(f"Null value not supported for topic configs: {key}")
            have = (
                new[key] if key in new else declared.topic_text(self.config.topic_value(declared))
            )
            items = split_list(have)
            for item in value.split(","):
                if op == APPEND and item not in items:
                    items.append(item)
                elif op == SUBTRACT and item in items:
                    items.remove(item)
            new[key] = join_list(items)
        try:
            return topic_configs(new)
        except ConfigError as e:
            raise InvalidConfig(str(e)) from None

    @_deferred
    def alter_topic(self, name: str, partitions: int) -> defer.Deferred[TopicInfo]:
        """Grow a topic to ``partitions`` partitions (never shrink it)."""
        self.check_serving()
        topic = self.topic(name)
        added = max(0, partitions - len(topic.partitions))
        d = self._with_partitions(added, topic.add_partitions, partitions)
        return d.addCallback(lambda _: self._topic_info(topic))

    @_deferred
    def delete_topic(self, name: str) -> defer.Deferred[None]:
        """Delete a topic and its data once the appends already queued to it are done,
        then every group's commits on it."""
        self.check_serving()
        topic = self.topic(name)
        logs = self._check_open()
        self._deleting.add(name)
        keys = [(name, index) for index in range(len(topic.partitions))]
        idle = defer.gatherResults([lane.when_idle() for lane in self.lanes.retire(keys)])
        d = idle.addCallback(lambda _: self._run(logs.delete_topic, name))
        d.addCallback(lambda _: self._drop_topic_offsets(name))

        def finished(result: Any) -> Any:
            self._deleting.discard(name)
            self.lanes.retire(keys)
            for key in keys:
                self.waiters.wake(key)
            return None if not isinstance(result, Failure) else result

        return d.addBoth(finished)

    def auto_create_topic(self, name: str) -> defer.Deferred[Topic]:
        """The topic, created with the default partition count if the config allows."""
        logs = self._check_open()
        if not self.config.auto_create_topics:
            raise UnknownTopic(f"unknown topic {name!r} (auto-create is disabled)")
        count = self.config.default_partitions
        return self._with_partitions(count, logs.get_or_create, name, count)

    def _with_partitions(self, count: int, f: Callable[..., T], *args: Any) -> defer.Deferred[T]:
        """Run topic creation or growth on the pool within the broker-wide partition cap.

        Every partition holds open files, so the cap (``max_partitions``) keeps
        valid but greedy requests from exhausting the process's descriptors.
        Partitions being created count against it until their creation ends.
        """
        logs = self._check_open()
        existing = sum(len(t.partitions) for t in logs.topics.values())
        limit = self.config.max_partitions
        if existing + self._partitions_in_creation + count > limit:
            raise InvalidPartitionCount(
                f"the broker's limit of {limit} partitions would be exceeded "
                f"({existing} exist, {count} more requested)"
            )
        self._partitions_in_creation += count

        def release(result: Any) -> Any:
            self._partitions_in_creation -= count
            return result

        return self._run(f, *args).addBoth(release)

    # -- offsets -----------------------------------------------------------------------------

    @_deferred
    def commit_offsets(
        self,
        group: str,
        offsets: Mapping[PartitionKey, int],
        metadata: Mapping[PartitionKey, str] | None = None,
    ) -> defer.Deferred[None]:
        """Store a group's offsets for existing partitions, all or none, in one write."""
        self.check_serving()
        validate_group(group)
        commits = []
        for (topic, partition), offset in offsets.items():
            self.partition(topic, partition)
            text = "" if metadata is None else metadata.get((topic, partition), "")
            commits.append((group, topic, partition, offset, text))
        lane = self.offsets_lane
        assert lane is not None
        return lane.append(commits).addCallback(self._committed)

    @_deferred
    def delete_offsets(
        self, group: str, partitions: Iterable[PartitionKey] | None = None
    ) -> defer.Deferred[list[PartitionKey]]:
        """Delete a group's commits (of ``partitions`` only, if given), durably, in one
        write; answers the partitions that had one. Kafka members' checks are the caller's."""
        self.check_serving()
        validate_group(group)
        assert self.offsets is not None
        present = set(self.offsets.group_partitions(group))
        doomed = sorted(present if partitions is None else present.intersection(partitions))
        if not doomed:
            return defer.succeed([])
        lane = self.offsets_lane
        assert lane is not None
        d = lane.append([(group, topic, partition) for topic, partition in doomed])
        return d.addCallback(self._committed).addCallback(lambda _: doomed)

    def _drop_topic_offsets(self, topic: str) -> defer.Deferred[None]:
        """Tombstone every group's commits on a deleted topic, in one write, like Kafka's
        coordinator does on topic deletion: a topic re-created under the name must not
        inherit the old positions (they point into a log that no longer exists)."""
        assert self.offsets is not None and self.offsets_lane is not None
        doomed = self.offsets.topic_commits(topic)
        if not doomed:
            return defer.succeed(None)
        d = self.offsets_lane.append([(group, topic, partition) for group, partition in doomed])
        return d.addCallback(self._committed)

    def _committed(self, _: None) -> None:
        self.lanes.mark_dirty(OFFSETS_KEY)

    def _write_commits(self, items: list[list[Commit]]) -> list[None]:
        """Runs on the pool: all queued commits in one batch, one write, one fsync."""
        assert self.offsets is not None
        self.offsets.commit_many([commit for commits in items for commit in commits])
        if self.config.flush == "always":
            self.offsets.flush()
        return [None] * len(items)

    def committed_offsets(
        self, group: str, partitions: Iterable[PartitionKey] | None = None
    ) -> dict[PartitionKey, int]:
        """A group's committed offsets (of ``partitions`` only, if given; partitions
        without a commit are absent)."""
        self._check_open()
        validate_group(group)
        assert self.offsets is not None
        if partitions is None:
            return dict(self.offsets.groups().get(group, {}))
        result: dict[PartitionKey, int] = {}
        for topic, partition in partitions:
            validate_topic(topic)
            offset = self.offsets.committed(group, topic, partition)
            if offset is not None:
                result[(topic, partition)] = offset
        return result

    def committed_metadata(self, group: str) -> dict[PartitionKey, str]:
        """The metadata string of each of a group's commits ("" where it had none)."""
        self._check_open()
        validate_group(group)
        assert self.offsets is not None
        return self.offsets.group_metadata(group)

    def group_offsets(self, group: str) -> tuple[PartitionLag, ...]:
        """A group's committed offsets beside each partition's current bounds.

        The one place lag is derived from (DescribeGroup, metrics, manhole); a
        partition that no longer exists shows bounds 0/0.
        """
        logs = self._check_open()
        entries = []
        for (topic_name, partition), offset in sorted(self.committed_offsets(group).items()):
            topic = logs.topics.get(topic_name)
            if topic is not None and partition < len(topic.partitions):
                plog = topic.partitions[partition]
                start, end = plog.log_start_offset, plog.end_offset
            else:
                start = end = 0
            entries.append(PartitionLag(topic_name, partition, offset, start, end))
        return tuple(entries)

    def offsets_expiry(self) -> tuple[int | None, dict[str, int | None]]:
        """See `MaintenanceCore.offsets_expiry`: the coordinator knows which groups are empty."""
        assert self.offsets is not None
        groups = self.offsets.groups()
        since = {name: self.groups.empty_since(name, self._started_ms) for name in groups}
        return self.config.offsets_retention_ms, since

    def group_names(self) -> list[str]:
        """Groups that committed offsets, sorted (a coordinator adds its live groups)."""
        self._check_open()
        assert self.offsets is not None
        return sorted(self.offsets.groups())

    # -- identity -----------------------------------------------------------------------

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
            self._run(cluster_id.load_or_create, Path(self.config.data_dir)).addCallbacks(
                self._got_cluster_id, self._cluster_id_failed
            )
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

        Ids are the clock in milliseconds times 1024 plus a counter, always above the
        last one given: restarts take a later clock, so no id repeats unless the
        clock goes backwards by more than the broker's downtime.
        """
        candidate = int(time.time() * 1000) << 10
        self._last_producer_id = max(candidate, self._last_producer_id + 1)
        return self._last_producer_id

    # -- background work ------------------------------------------------------------------

    def flush_dirty(self) -> defer.Deferred[None]:
        """See `Maintenance.flush_dirty`."""
        return self.maintenance.flush_dirty()

    def enforce_retention(self) -> defer.Deferred[None]:
        """See `Maintenance.enforce_retention`."""
        return self.maintenance.enforce_retention()


def _open_storage(
    data_dir: Path, log_config: LogConfig, resolve: Callable[[Mapping[str, str]], LogConfig]
) -> tuple[LogManager, OffsetsStore, list[tuple[str, str, int]]]:
    """Runs on the pool: recovery scans and the offsets replay are disk work.

    Commits on topics that do not exist are tombstoned, durably, before anything
    is served: deleting a topic removes its directory first and its commits
    after (`Broker.delete_topic`), and a crash in between must not leave the old
    positions to a topic later created under the name (Kafka's coordinator
    drops a deleted topic's offsets the same way).
    """
    logs = LogManager.open(data_dir, log_config, resolve=resolve)
    try:
        offsets = OffsetsStore.open(data_dir, log_config, recover=logs.recovered)
    except BaseException:
        for topic in logs.topics.values():
            topic.close()
        raise
    try:
        txn_log = TransactionLog.open(data_dir, log_config, recover=logs.recovered)
    except BaseException:
        offsets.close()
        for topic in logs.topics.values():
            topic.close()
        raise
    try:
        orphans = offsets.orphaned(logs.topics)
        if orphans:
            offsets.commit_many(orphans)
            offsets.flush()
    except BaseException:
        offsets.close()
        txn_log.close()
        for topic in logs.topics.values():
            topic.close()
        raise
    return logs, offsets, orphans, txn_log


def _read_blocking(plog: PartitionLog, offset: int, max_bytes: int) -> ReadResult:
    """Runs on the pool. Bounds are taken after the read, so the high watermark
    never trails the data returned."""
    data = plog.read(offset, max_bytes)
    return ReadResult(
        (data,) if data else (), plog.end_offset, plog.log_start_offset, plog.last_stable_offset
    )


def _read_many_blocking(
    reads: list[tuple[int, PartitionLog, int, int]], max_bytes: int, committed: bool
) -> list[tuple[int, ReadResult | Exception]]:
    """Runs on the pool: each ``(slot, plog, offset, partition max bytes)`` in request
    order within Kafka's response budget (ReplicaManager.readFromLocalLog): the
    response's ``max_bytes`` is shared in order, and until a partition has returned
    data its first batch comes whole even above the limits, so a consumer always
    progresses; after that a partition whose first batch is over what is left gets
    no records. A failed read answers its own slot; the others still read."""
    read = _read_committed_blocking if committed else _read_blocking
    none = () if committed else None
    left = max_bytes
    progressed = False
    out: list[tuple[int, ReadResult | Exception]] = []
    for slot, plog, offset, part_max in reads:
        limit = min(part_max, left)
        if limit <= 0 and progressed:
            out.append(
                (
                    slot,
                    ReadResult(
                        (), plog.end_offset, plog.log_start_offset, plog.last_stable_offset, none
                    ),
                )
            )
            continue
        try:
            result = read(plog, offset, max(limit, 1))
        except Exception as exc:
            out.append((slot, exc))
            continue
        size = result.size
        if progressed and size > limit:
            result = ReadResult(
                (), result.high_watermark, result.log_start_offset, result.last_stable_offset, none
            )
        elif size:
            progressed = True
            left -= size
        out.append((slot, result))
    return out


def _read_committed_blocking(plog: PartitionLog, offset: int, max_bytes: int) -> ReadResult:
    """Runs on the pool: batches below the LSO, with the aborted transactions among them
    (Kafka's collectAbortedTxns up to the end of the last batch returned)."""
    data, stable = plog.read_committed(offset, max_bytes)
    upto = offset
    pos = 0
    while pos + 12 <= len(data):
        base, length = _OFFSET_LENGTH.unpack_from(data, pos)
        (delta,) = _LAST_DELTA.unpack_from(data, pos + 23)
        upto = base + delta + 1
        pos += length + 12
    aborted = tuple(
        (txn.producer_id, txn.first_offset) for txn in plog.aborted_transactions(offset, upto)
    )
    return ReadResult(
        (data,) if data else (), plog.end_offset, plog.log_start_offset, stable, aborted
    )
