"""The broker core: the protocol-neutral API every front-end calls, and its façade.

Front-ends (``rustka.native``, ``rustka.kafka``) decode their wire messages,
call the methods of `Broker`, and encode what comes back; the core never sees a
protocol message. docs/broker-api.md describes the whole API for readers.

State. ``state`` is ``"starting"`` until the storage is open (recovery runs on
the I/O pool, see `open_storage`), then ``"serving"``, then ``"stopping"``
once `drain` began (``"failed"`` if the storage could not open). Every call
made outside ``"serving"`` fails with `BrokerUnavailable` whose message says
why ("broker is starting: recovering storage", "the broker is shutting down").

Errors. Methods that return a Deferred never raise: a bad argument, an unknown
topic or partition, a full disk all arrive as the Deferred's failure, always a
`RustkaError` subclass from `rustka.errors` (anything else is a bug; turn it
into an answer with `report_error`). Synchronous methods raise those errors.

Parts. This module keeps the lifecycle (open and close the storage, drain,
readiness), the I/O pool's counted work, partition lookup and the wiring; the
API's methods delegate to the part that owns them, each built here and stating
what it needs of the core as a Protocol, so none imports this module:

- `rustka.broker.produce.Appends` (`AppendsCore`): ``append``, ``append_records``.
- `rustka.broker.reads.Reads` (`ReadsCore`): ``read``, ``read_many``,
  ``read_record``, ``wait_for_data``, ``list_offset``.
- `rustka.broker.fetch_policy.FetchPolicy` (`FetchCore`): ``fetch``, one
  fetch's size cap and long-poll for both front-ends; ``fetch_limits`` for the
  output reservation their servers make before a fetch runs.
- `rustka.broker.topic_admin.TopicAdmin` (`TopicAdminCore`): ``create_topic``,
  ``alter_topic``, ``alter_topic_configs``, ``delete_topic``,
  ``auto_create_topic``, ``topics_snapshot``, ``topic_configs``, ``broker_configs``.
- `rustka.broker.committed_offsets.CommittedOffsets` (`OffsetsCore`):
  ``commit_offsets``, ``delete_offsets``, ``committed_offsets``,
  ``committed_metadata``, ``group_offsets``, ``group_names``, ``offsets_expiry``.
- `rustka.broker.maintenance.Maintenance` and `rustka.broker.log_cleaner.LogCleaner`:
  the background passes (``flush_dirty``, ``enforce_retention``).

The produce path, the background passes and the log cleaner share one
`PartitionLanes` (each partition's write lane and the dirty marks), created here.
`rustka.broker.identity.Identity` answers ``cluster_id`` and ``new_producer_id``,
`rustka.broker.markers.Markers` ``write_marker`` and ``open_transactions``; the
core itself ``delete_records`` (on the partition's lane) and ``bounds``.

Transactions. ``transactions`` is the broker's one `TransactionCoordinator`
(rustka/broker/transactions.py), loaded from ``__transactions/`` with the
storage. ``append`` verifies every transactional batch with it; ``write_marker``
ends a transaction on one partition; reads take ``committed=True`` for
read_committed (they stop at the last stable offset).

Groups. ``groups`` is the broker's one `GroupCoordinator`, built here with the
config's group settings, so every front-end and admin view sees the same groups
under the same rules; `CommittedOffsets` stores their committed offsets.

Lifecycle (for `rustka.broker.service.BrokerService`): ``open_storage``,
``when_ready``, ``drain``, ``close_storage``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from rustka.broker.access import Access
from rustka.broker.client_telemetry import from_config as telemetry_from_config
from rustka.broker.committed_offsets import CommittedOffsets, PartitionLag
from rustka.broker.coordinator import GroupCoordinator
from rustka.broker.deferreds import reports_errors
from rustka.broker.fetch_policy import FetchLimits, FetchPolicy
from rustka.broker.identity import Identity
from rustka.broker.lanes import IOPool, Lane
from rustka.broker.log_cleaner import LogCleaner
from rustka.broker.maintenance import Maintenance
from rustka.broker.markers import Markers
from rustka.broker.offsets_topic import OffsetsTopic
from rustka.broker.partition_lanes import PartitionLanes, WriteMany
from rustka.broker.produce import (
    AppendResult,
    Appends,
    BatchesEarly,
    EarlyAnswer,
    KeyedRecord,
    RecordsReply,
    lane_writer,
)
from rustka.broker.reads import EARLIEST, LATEST, FetchPosition, OffsetAtTime, ReadResult, Reads
from rustka.broker.share_groups import ShareGroupCoordinator, ShareSettings
from rustka.broker.stats import BrokerStats, LogLimiter
from rustka.broker.topic_admin import PartitionInfo, TopicAdmin, TopicInfo
from rustka.broker.transactions import TransactionCoordinator
from rustka.broker.waiters import Waiters
from rustka.config import APPEND, DELETE, SET, SUBTRACT, Config, ConfigEntry, ConfigOp
from rustka.errors import (
    BrokerUnavailable,
    CorruptBatch,
    HeldElsewhere,
    InvalidName,
    OffsetOutOfRange,
    PolicyViolation,
    RustkaError,
    StorageError,
    UnknownPartition,
    UnknownTopic,
)
from rustka.names import validate_stored_topic
from rustka.record.header import first_producer, is_transactional_batch
from rustka.storage.log_config import LogConfig
from rustka.storage.log_manager import LogManager
from rustka.storage.offsets import OffsetsStore
from rustka.storage.partition_store import PartitionStore
from rustka.storage.share_state import ShareStateLog
from rustka.storage.topic import Topic
from rustka.storage.txn_log import TransactionLog

if TYPE_CHECKING:
    from rustka.broker.cluster import ClusterMember
    from rustka.broker.diskless import DisklessSide

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
    "ConfigOp",
    "FetchPosition",
    "OffsetAtTime",
    "PartitionInfo",
    "PartitionLag",
    "ReadResult",
    "TopicInfo",
]

PartitionKey = tuple[str, int]
T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")

STARTING = "starting"
SERVING = "serving"
STOPPING = "stopping"
FAILED = "failed"


def _delegate(
    part: str, method: Callable[Concatenate[Any, P], R]
) -> Callable[Concatenate[Any, P], R]:
    """A `Broker` method that calls ``method`` on the part held in the attribute ``part``.

    The front-ends, tools and tests call the one `Broker`; the part owns the code.
    """
    name = method.__name__

    @functools.wraps(method)
    def call(self: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        return getattr(getattr(self, part), name)(*args, **kwargs)

    return call


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
        self.diskless: DisklessSide | None = None
        """The diskless engine, writer and timers, with a catalog configured (docs/diskless.md)."""
        self.cluster: ClusterMember | None = None
        """This broker's membership of the cluster sharing its catalog (docs/diskless.md)."""
        self.state = STARTING
        self.flush_interval = config.flush == "interval"
        # Kafka's message.max.bytes: no stored batch may be larger than a native frame.
        self.max_batch_bytes = config.max_batch_bytes or config.max_frame_bytes
        self.waiters = Waiters(reactor)
        # Topics being deleted: lookups no longer find them (`TopicAdmin.delete_topic`).
        self.deleting: set[str] = set()
        self.lanes = PartitionLanes(io, self._lane_writer, track_dirty=self.flush_interval)
        self.appends = Appends(self, self.lanes)
        self.reads = Reads(self)
        self.fetches = FetchPolicy(
            self, FetchLimits(config.fetch_max_bytes, config.fetch_max_wait_ms)
        )
        self.admin = TopicAdmin(self)
        self.committed = CommittedOffsets(self)
        self.identity = Identity(self)
        self.markers = Markers(self)
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
            consumer_session_timeout_ms=config.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            consumer_assignors=config.group_consumer_assignors.split(","),
        )
        self.transactions = TransactionCoordinator(
            reactor,
            self,
            max_timeout_ms=config.transaction_max_timeout_ms,
            abort_interval_ms=config.transaction_abort_interval_ms,
        )
        self.txn_log: TransactionLog | None = None
        # Share groups (KIP-932): built once the share-state log is replayed.
        self.share_state: ShareStateLog | None = None
        self.share_groups: ShareGroupCoordinator | None = None
        # Kafka's __consumer_offsets, with consumer_offsets_topic set.
        self.offsets_topic: OffsetsTopic | None = None
        # Client telemetry (KIP-714), with client_telemetry_metrics set.
        self.client_telemetry = telemetry_from_config(config)
        self._open_failure: Failure | None = None
        self._ready: list[defer.Deferred[None]] = []
        self._pool_work = 0
        self._pool_quiet: list[defer.Deferred[None]] = []
        # Commits of deleted topics that opening the storage tombstoned (for the log).
        self._orphans_dropped: list[tuple[str, str, int]] = []
        self.known_schema_id: Callable[[int], bool] | None = None
        """Set by the schema registry's wiring (docs/schema-registry.md): whether a
        schema id is registered, for topics with confluent.*.schema.validation."""

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

    def check_open(self) -> LogManager:
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
                _open_storage,
                Path(config.data_dir),
                config.log_config(),
                self.admin.resolve,
                config if config.diskless_configured else None,
            )
        ).addCallback(self._open_share_state).addCallbacks(
            self._storage_opened, self._storage_failed
        )
        return self.when_ready()

    def _open_share_state(self, opened: T) -> defer.Deferred[T]:
        """Replay the share-state log (docs/kafka.md, "Share groups (KIP-932)") on the
        pool and build the share-group coordinator, then hand ``opened`` on."""

        def ready(state_log: ShareStateLog) -> T:
            self.share_state = state_log
            config = self.config
            settings = ShareSettings(
                session_timeout_ms=config.group_share_session_timeout_ms,
                heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
                lock_duration_ms=config.group_share_record_lock_duration_ms,
                delivery_count_limit=config.group_share_delivery_count_limit,
                auto_offset_reset=config.share_auto_offset_reset,
            )
            self.share_groups = ShareGroupCoordinator(
                self.reactor,
                self,
                state_log,
                settings=settings,
                classic_has_members=self.groups.has_active_members,
                on_available=lambda topic, partition: self.waiters.wake((topic, partition)),
            )
            return opened

        return self._run(ShareStateLog.open, Path(self.config.data_dir)).addCallback(ready)

    def _storage_opened(
        self,
        opened: tuple[LogManager, OffsetsStore, list[tuple[str, str, int]], TransactionLog, Any],
    ) -> None:
        self.logs, self.offsets, self._orphans_dropped, self.txn_log, engine = opened
        self.offsets_lane = Lane(self.io, self.committed.write_commits)
        if engine is not None:
            from rustka.broker.diskless import DisklessSide

            self.diskless = DisklessSide(
                engine,
                self.logs,
                self.io,
                self.reactor,
                self.waiters,
                self.config,
                self._forget_topic,
            )
            self.appends.diskless = self.diskless.writer
            self.diskless.writer.known_schema_id = self._known_schema_id
            self.diskless.start()
            from rustka.broker.cluster import ClusterMember

            # What this broker knew of the groups may be stale: the coordinator role
            # loads the cluster's commits when it reaches this broker.
            self.offsets.replace({})
            self.cluster = ClusterMember(
                engine.catalog,
                self.config,
                self.io,
                self.reactor,
                self.groups,
                self.offsets,
                self._local_topic_counts,
                self.access,
            )
            for name in self.logs.diskless_clashes:
                self.log.error(
                    "topic {name!r} is both a local topic here and a diskless topic in the "
                    "catalog: serving the local one",
                    name=name,
                )
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
        # Served only once __consumer_offsets exists (with the setting on): a client's
        # first Metadata must find it, not an unknown, invalid name.
        self._make_offsets_topic().addCallback(self._serve)

    def _serve(self, _: object) -> None:
        assert self.txn_log is not None and self.logs is not None
        if self.state == STARTING:
            self.state = SERVING
        if self.offsets_topic is not None and self.state == SERVING:
            self.offsets_topic.follow()
        # Decisions the log left prepared are rolled forward on their own; requests for
        # those ids wait for them (the coordinator's lock per id).
        self.transactions.load(self.txn_log, clean=not self.logs.recovered)
        ready, self._ready = self._ready, []
        for d in ready:
            d.callback(None)

    def _make_offsets_topic(self) -> defer.Deferred[None]:
        """Create __consumer_offsets if it is missing, with the setting on (at once, off)."""
        if not self.config.consumer_offsets_topic or self.offsets is None:
            return defer.succeed(None)
        if self.diskless is not None:
            self.log.warn(
                "consumer_offsets_topic is not served in a cluster (docs/kafka.md, "
                '"The __consumer_offsets topic"): ignored'
            )
            return defer.succeed(None)
        offsets_topic = OffsetsTopic(self, self.offsets, self.config.offsets_topic_num_partitions)

        def made(_: object) -> None:
            self.offsets_topic = offsets_topic

        def failed(f: Failure) -> None:
            self.log.failure("creating __consumer_offsets failed: not kept", f)

        return offsets_topic.create().addCallbacks(made, failed)

    @property
    def node_id(self) -> int:
        """This broker's id as Kafka's responses name it (``broker_id``; 0 by default)."""
        return self.config.broker_id

    def join_cluster(self, host: str, port: int) -> defer.Deferred[None]:
        """Once the Kafka listener is bound: register as ``host:port`` in the cluster (a
        broker without a catalog has none to join)."""
        if self.cluster is None:
            return defer.succeed(None)
        d = self.cluster.join(host, port)

        def joined(_: None) -> None:
            if self.logs is not None and self.cluster is not None:
                membership = self.cluster.membership
                if membership is not None:
                    self.logs.claim_local = membership.claim_local_topic

        return d.addCallback(joined)

    def partition_count(self, name: str) -> int:
        """How many partitions topic ``name`` has in the cluster (0: none): this broker's
        topics, and in a cluster the local topics other brokers hold, on which the group
        coordinator takes commits too."""
        topic = self.topics.get(name)
        if topic is not None:
            return len(topic.partitions)
        view = None if self.cluster is None else self.cluster.view
        held = None if view is None else view.local_topics.get(name)
        return 0 if held is None else held[1]

    @property
    def shared_cluster_id(self) -> Callable[[str], str] | None:
        """A cluster's brokers all name the id the catalog keeps (`Identity.cluster_id`)."""
        cluster = self.cluster
        return None if cluster is None else cluster.shared_cluster_id

    def coordinates_groups(self) -> bool:
        """Whether group requests are served here (in a cluster, by the role's holder)."""
        return self.cluster is None or self.cluster.coordinates_groups()

    def _local_topic_counts(self) -> dict[str, int]:
        logs = self.logs
        if logs is None:
            return {}
        return {
            name: len(topic.partitions)
            for name, topic in list(logs.topics.items())
            if topic.directory is not None and name not in self.deleting
        }

    def _forget_topic(self, name: str) -> None:
        """Stop serving a diskless topic another broker deleted: its rows are gone from
        the catalog already, so only this broker's view and commits on it remain."""
        logs = self.logs
        if logs is None or name in self.deleting:
            return
        topic = logs.topics.pop(name, None)
        if topic is None:
            return
        topic.close()
        keys = [(name, index) for index in range(len(topic.partitions))]
        self.lanes.retire(keys)
        for key in keys:
            self.waiters.wake(key)
        self.drop_topic_offsets(name).addErrback(
            lambda f: self.log.failure("dropping the offsets of {name}", f, name=name)
        )

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
        if self.share_groups is not None:
            self.share_groups.close()
        lanes = self.lanes.all()
        if self.offsets_lane is not None:
            lanes.append(self.offsets_lane)
        idle = [lane.when_idle() for lane in lanes]
        if self.cluster is not None:
            idle.append(self.cluster.leave())
        if self.diskless is not None:
            self.diskless.stop()
            idle.append(self.diskless.writer.drain())
        if self._pool_work:
            quiet: defer.Deferred[None] = defer.Deferred()
            self._pool_quiet.append(quiet)
            idle.append(quiet)
        return defer.gatherResults(idle).addCallback(lambda _: None)

    def close_storage(self) -> None:
        """Flush, close and mark the shutdown clean (called on the pool after `drain`)."""
        if self.offsets_topic is not None:
            self.offsets_topic.stop()
        if self.offsets is not None:
            self.offsets.close()
        if self.share_state is not None:
            self.share_state.close()
        if self.txn_log is not None:
            for meta in self.transactions.unsaved():
                self.txn_log.write(meta, durable=False)
            self.txn_log.close()
        if self.logs is not None:
            self.logs.close()
        if self.diskless is not None:
            self.diskless.engine.close()

    def run(self, f: Callable[..., T], *args: Any) -> defer.Deferred[T]:
        """Pool work for the core's helpers (the transaction log), counted like `_run`."""
        return self._run(f, *args)

    def partition_exists(self, topic: str, partition: int) -> bool:
        try:
            self.partition(topic, partition)
        except (UnknownTopic, UnknownPartition, InvalidName, BrokerUnavailable):
            return False
        return True

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
        return self.check_open().topics

    def topic(self, name: str) -> Topic:
        logs = self.check_open()
        validate_stored_topic(name)
        topic = logs.topics.get(name)
        if topic is None or name in self.deleting:
            self.check_not_held_elsewhere(name)
            raise UnknownTopic(f"unknown topic {name!r}")
        return topic

    def discover_topic(self, name: str) -> defer.Deferred[Topic | None]:
        """The topic ``name`` if this broker has it or, with a catalog, if another broker
        created it as a diskless topic since this broker's last refresh (read now)."""
        logs = self.check_open()
        topic = logs.topics.get(name)
        if topic is not None or logs.diskless is None or name in self.deleting:
            return defer.succeed(None if name in self.deleting else topic)
        return self._run(logs.discover, name)

    def check_not_held_elsewhere(self, name: str) -> None:
        """In a cluster, a topic this broker does not have may be another broker's local
        topic: `HeldElsewhere` then, never "unknown" (nor created here by a produce)."""
        view = None if self.cluster is None else self.cluster.view
        held = None if view is None else view.local_topics.get(name)
        if held is not None and held[0] != self.node_id:
            raise HeldElsewhere(f"topic {name!r} is a local topic of broker {held[0]}")

    def partition(self, topic_name: str, partition: int) -> PartitionStore:
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

    def _known_schema_id(self, schema_id: int) -> bool:
        """For topics with schema validation: the schema registry's answer (none without
        a registry: every id is unknown)."""
        known = self.known_schema_id
        return known is not None and known(schema_id)

    def _lane_writer(self, topic: str, partition: int) -> WriteMany:
        """A new lane's writer; raises for a partition that does not exist."""
        return lane_writer(self.partition(topic, partition), self._known_schema_id)

    # -- appends ---------------------------------------------------------------------------

    @reports_errors
    def append(
        self,
        topic: str,
        partition: int,
        batches: bytes | memoryview,
        *,
        auto_create: bool,
        transactional_id: str | None = None,
        early: BatchesEarly | None = None,
    ) -> defer.Deferred[AppendResult]:
        """Store client-built record batches; see docs/broker-api.md, "Writes", and for
        ``early``, `rustka.broker.produce.Appends.append`."""
        if is_transactional_batch(batches):
            # Kafka looks at the first batch: a transactional one must belong to the
            # ongoing transaction of its producer that added this partition.
            producer_id, epoch = first_producer(batches)
            self.transactions.verify(transactional_id, producer_id, epoch, topic, partition)
        return self.appends.append(topic, partition, batches, auto_create=auto_create, early=early)

    def append_records(
        self,
        records: Sequence[KeyedRecord],
        tokens: list[Any],
        reply: RecordsReply,
        context: Any,
        early: EarlyAnswer | None = None,
    ) -> None:
        """Store single records routed by key; see `rustka.broker.produce.RecordsReply`
        and, for ``early``, `rustka.broker.produce.EarlyAnswer`."""
        self.appends.append_records(records, tokens, reply, context, early)

    @reports_errors
    def delete_records(self, topic: str, partition: int, offset: int) -> defer.Deferred[int]:
        """Kafka's DeleteRecords for one partition (docs/broker-api.md, "Writes").

        Runs on the partition's lane, so it is ordered with the appends queued
        before it and with retention, and fires once the new log start is
        durable (`PartitionStore.delete_records`). As Kafka's leader does, a topic
        that does not delete (cleanup.policy ``compact`` alone) refuses it.
        """
        self.check_serving()
        self.admin.check_not_kept(topic, "trimmed")
        plog = self.partition(topic, partition)
        if not plog.config.delete:
            raise PolicyViolation(
                f"Records of partition {topic}-{partition} can not be deleted due to the "
                f"configured policy (cleanup.policy does not include delete)"
            )
        if offset < -1:
            raise OffsetOutOfRange(offset, plog.log_start_offset, plog.end_offset)
        return self.lanes.lane(topic, partition).submit(plog.delete_records, offset)

    # -- the parts' API: each call is the part's own method, docstring and all ---------------

    read = _delegate("reads", Reads.read)
    read_many = _delegate("reads", Reads.read_many)
    read_record = _delegate("reads", Reads.read_record)
    wait_for_data = _delegate("reads", Reads.wait_for_data)
    list_offset = _delegate("reads", Reads.list_offset)
    fetch = _delegate("fetches", FetchPolicy.fetch)

    topic_configs = _delegate("admin", TopicAdmin.topic_configs)
    broker_configs = _delegate("admin", TopicAdmin.broker_configs)
    topics_snapshot = _delegate("admin", TopicAdmin.topics_snapshot)
    create_topic = _delegate("admin", TopicAdmin.create_topic)
    alter_topic_configs = _delegate("admin", TopicAdmin.alter_topic_configs)
    alter_topic = _delegate("admin", TopicAdmin.alter_topic)
    delete_topic = _delegate("admin", TopicAdmin.delete_topic)
    auto_create_topic = _delegate("admin", TopicAdmin.auto_create_topic)

    commit_offsets = _delegate("committed", CommittedOffsets.commit_offsets)
    delete_offsets = _delegate("committed", CommittedOffsets.delete_offsets)
    drop_topic_offsets = _delegate("committed", CommittedOffsets.drop_topic_offsets)
    committed_offsets = _delegate("committed", CommittedOffsets.committed_offsets)
    committed_metadata = _delegate("committed", CommittedOffsets.committed_metadata)
    group_offsets = _delegate("committed", CommittedOffsets.group_offsets)
    offsets_expiry = _delegate("committed", CommittedOffsets.offsets_expiry)
    group_names = _delegate("committed", CommittedOffsets.group_names)

    open_transactions = _delegate("markers", Markers.open_transactions)
    write_marker = _delegate("markers", Markers.write_marker)

    cluster_id = _delegate("identity", Identity.cluster_id)
    new_producer_id = _delegate("identity", Identity.new_producer_id)

    @property
    def fetch_limits(self) -> FetchLimits:
        """The broker's bounds on one fetch, for the servers' output reservations."""
        return self.fetches.limits

    # -- background work ------------------------------------------------------------------

    def flush_dirty(self) -> defer.Deferred[None]:
        """See `Maintenance.flush_dirty`."""
        return self.maintenance.flush_dirty()

    def enforce_retention(self) -> defer.Deferred[None]:
        """See `Maintenance.enforce_retention`."""
        return self.maintenance.enforce_retention()


def _open_storage(
    data_dir: Path,
    log_config: LogConfig,
    resolve: Callable[[Mapping[str, str]], LogConfig],
    diskless: Config | None,
) -> tuple[LogManager, OffsetsStore, list[tuple[str, str, int]], TransactionLog, Any]:
    """Runs on the pool: recovery scans and the offsets replay are disk work.

    Commits on topics that do not exist are tombstoned, durably, before anything
    is served: deleting a topic removes its directory first and its commits
    after (`Broker.delete_topic`), and a crash in between must not leave the old
    positions to a topic later created under the name (Kafka's coordinator
    drops a deleted topic's offsets the same way).
    """
    logs = LogManager.open(data_dir, log_config, resolve=resolve)
    engine = None
    if diskless is not None:
        # Only a broker with a catalog loads the diskless drivers (docs/diskless.md).
        from rustka.broker.diskless import open_diskless

        try:
            engine = open_diskless(diskless, resolve, logs)
        except BaseException:
            for topic in logs.topics.values():
                topic.close()
            raise
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
    return logs, offsets, orphans, txn_log, engine
