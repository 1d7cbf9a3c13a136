"""The broker: turns one decoded request into one response, off the reactor.

It owns the registry of topics (`LogManager`) and the offsets store, and
schedules every disk operation on the I/O pool through a `Lane` per partition
(plus one for the offsets log), so appends to a partition stay in order while
partitions proceed in parallel and no global lock exists. Reads skip the lanes:
a partition log snapshots its bounds, so a read never waits for an append.

`Broker.handle` never fails: every error becomes the response the protocol
prescribes (tag 4 for seed ops, tag 14/15 for extensions).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twisted.application import service
from twisted.internet import defer, task
from twisted.internet.interfaces import IDelayedCall, IReactorFromThreads, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

import rustka
from rustka.broker.lanes import IOPool, Lane
from rustka.config import Config
from rustka.errors import (
    BrokerUnavailable,
    CorruptBatch,
    InvalidPartitionCount,
    OffsetOutOfRange,
    RustkaError,
    StorageError,
    UnknownPartition,
    UnknownTopic,
)
from rustka.names import validate_group, validate_topic
from rustka.native import codec as p
from rustka.storage.log_manager import LogManager
from rustka.storage.offsets import OffsetsStore
from rustka.storage.partition_log import PartitionLog
from rustka.storage.record_batch import (
    BatchHeader,
    Record,
    encode_batch,
    parse_header,
    validate_batches,
)
from rustka.storage.segment import SYNC_STATS

PartitionKey = tuple[str, int]
ERROR_LOG_INTERVAL_S = 60.0
_OFFSETS_KEY: PartitionKey = ("__offsets", 0)

_PRODUCE = "Produce"
_new_tuple: Callable[..., Any] = tuple.__new__

Reply = Callable[[list[Any], list[p.Response]], None]
"""``reply(tokens, responses)``: how `Broker.produce_many` hands answers back."""


def _fire_first(tokens: list[Any], responses: list[p.Response]) -> None:
    tokens[0].callback(responses[0])


def now_ms() -> int:
    return time.time_ns() // 1_000_000


LATENCY_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


@dataclass
class LatencyHistogram:
    """Seconds from a request's decode to its response, in Prometheus-style buckets.

    Non-cumulative counts per bucket (the last one is +Inf); the exporter adds
    them up. A bisect per request keeps the cost to well under a microsecond.
    """

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: float = 0.0
    count: int = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds
        self.count += 1

    def observe_many(self, seconds: float, count: int) -> None:
        """``count`` requests that took the same time (a burst answered together)."""
        self.counts[bisect_left(LATENCY_BUCKETS, seconds)] += count
        self.total += seconds * count
        self.count += count


@dataclass
class BrokerStats:
    """Counters the metrics endpoint and the manhole read; cheap to bump."""

    requests: dict[str, int] = field(default_factory=dict)
    completed: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    latency: dict[str, LatencyHistogram] = field(default_factory=dict)
    records_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    corrupt_batches: int = 0
    retention_deleted_segments: int = 0

    @property
    def fsyncs(self) -> int:
        """fsync calls in this process (counted where they happen, in the segment)."""
        return SYNC_STATS.count

    @property
    def fsync_seconds(self) -> float:
        return SYNC_STATS.seconds


def _seed_batches(requests: list[p.Produce]) -> tuple[bytes, list[tuple[int, BatchHeader]]]:
    """Seed records as stored batches: each record its own one-record batch.

    MISSION.md fixes that a native single-record Produce is stored as a
    one-record batch (so a later Kafka-protocol fetch serves it exactly as it
    was produced); the burst still costs one write, since the batches are
    concatenated into one payload for the lane. Each record is its own Produce
    and carries no timestamp, so all get the broker's clock at arrival.
    """
    timestamp = now_ms()
    make = _new_tuple
    record = Record
    batches = [
        encode_batch([make(record, (key, value, (), None, None))], timestamp=timestamp)
        for _, key, value in requests
    ]
    validated: list[tuple[int, BatchHeader]] = []
    pos = 0
    for batch in batches:
        validated.append((pos, parse_header(batch)))
        pos += len(batch)
    return (batches[0] if len(batches) == 1 else b"".join(batches)), validated


class _Waiter:
    """A long-poll fetch parked until its partition grows or its wait runs out."""

    __slots__ = ("deferred", "offset", "timer")

    def __init__(self, offset: int, deferred: defer.Deferred[None], timer: IDelayedCall) -> None:
        self.offset = offset
        self.deferred = deferred
        self.timer = timer


class Broker:
    """Request handling over the storage layer; see the module docstring."""

    log = Logger()

    def __init__(self, config: Config, io: IOPool, reactor: IReactorTime) -> None:
        self.config = config
        self.io = io
        self.reactor = reactor
        self.stats = BrokerStats()
        self.logs: LogManager | None = None
        self.offsets: OffsetsStore | None = None
        self.accepting = False
        self._lanes: dict[PartitionKey, Lane] = {}
        self._offsets_lane: Lane | None = None
        self._waiters: dict[PartitionKey, list[_Waiter]] = {}
        self._dirty: set[PartitionKey] = set()
        self._pool_work = 0
        self._partitions_in_creation = 0
        self._logged_at: dict[tuple[str, ...], float] = {}
        self._pool_quiet: list[defer.Deferred[None]] = []
        # Topics being auto-created -> seed produces waiting for them, in arrival order.
        self._creating: dict[str, list[tuple[p.Produce, Any, Reply, float | None]]] = {}
        self._handlers: dict[type, Callable[[Any], defer.Deferred[Any] | Any]] = {
            p.Produce: self._produce,
            p.Fetch: self._fetch,
            p.Commit: self._commit,
            p.OffsetFetch: self._offset_fetch,
            p.Hello: self._hello,
            p.ProduceBatch: self._produce_batch,
            p.FetchBatch: self._fetch_batch,
            p.Metadata: self._metadata,
            p.CreateTopic: self._create_topic,
            p.AlterTopic: self._alter_topic,
            p.ListGroups: self._list_groups,
            p.DescribeGroup: self._describe_group,
        }

    # -- lifecycle -------------------------------------------------------------

    def open_storage(self) -> None:
        """Load every topic and the offsets log; runs before any listener serves."""
        data_dir = Path(self.config.data_dir)
        log_config = self.config.log_config()
        self.logs = LogManager.open(data_dir, log_config)
        self.offsets = OffsetsStore.open(data_dir, log_config, recover=self.logs.recovered)
        self._offsets_lane = Lane(self.io, self._write_commits)
        if self.logs.recovered:
            self.log.warn("unclean shutdown detected: the log tails were checked and repaired")
        for report in self.logs.recovery_reports:
            self.log.warn("recovery: {report}", report=report)
        self.log.info(
            "storage ready in {data_dir}: {topics} topics, {groups} groups",
            data_dir=str(data_dir.resolve()),
            topics=len(self.logs.topics),
            groups=len(self.offsets.groups()),
        )
        self.accepting = True

    def drain(self) -> defer.Deferred[None]:
        """Refuse new work, answer parked long-polls, wait for lanes and reads to finish."""
        self.accepting = False
        for key in list(self._waiters):
            for waiter in self._waiters.pop(key):
                if waiter.timer.active():
                    waiter.timer.cancel()
                waiter.deferred.callback(None)
        lanes = [*self._lanes.values()]
        if self._offsets_lane is not None:
            lanes.append(self._offsets_lane)
        idle = [lane.when_idle() for lane in lanes]
        if self._pool_work:
            quiet: defer.Deferred[None] = defer.Deferred()
            self._pool_quiet.append(quiet)
            idle.append(quiet)
        return defer.gatherResults(idle).addCallback(lambda _: None)

    def _run(self, f: Callable[..., Any], *args: Any) -> defer.Deferred[Any]:
        """Lane-less pool work (reads, topic creation), counted so `drain` can wait for it."""
        self._pool_work += 1
        return self.io.run(f, *args).addBoth(self._pool_work_done)

    def _pool_work_done(self, result: Any) -> Any:
        self._pool_work -= 1
        if not self._pool_work:
            waiters, self._pool_quiet = self._pool_quiet, []
            for d in waiters:
                d.callback(None)
        return result

    def close_storage(self) -> None:
        """Flush, close and mark the shutdown clean (called on the pool after `drain`)."""
        if self.offsets is not None:
            self.offsets.close()
        if self.logs is not None:
            self.logs.close()

    # -- request entry ---------------------------------------------------------

    def handle(self, request: p.Request) -> defer.Deferred[p.Response]:
        """The response for ``request``; the Deferred never errbacks.

        This is the per-request hot path: one dict lookup to dispatch and a
        single callback/errback pair for accounting, whatever the operation.
        """
        name = type(request).__name__
        stats = self.stats
        stats.requests[name] = stats.requests.get(name, 0) + 1
        started = time.perf_counter()
        try:
            if not self.accepting:
                raise BrokerUnavailable("the broker is shutting down")
            result = self._handlers[type(request)](request)
        except Exception:
            result = self._error(request, Failure())
        if isinstance(result, defer.Deferred):
            return result.addCallbacks(
                self._done,
                self._failed,
                callbackArgs=(name, started),
                errbackArgs=(request, name, started),
            )
        return defer.succeed(self._done(result, name, started))

    def _done(self, response: p.Response, name: str, started: float) -> p.Response:
        stats = self.stats
        stats.completed[name] = stats.completed.get(name, 0) + 1
        histogram = stats.latency.get(name)
        if histogram is None:
            histogram = stats.latency[name] = LatencyHistogram()
        histogram.observe(time.perf_counter() - started)
        return response

    def _failed(
        self, failure: Failure, request: p.Request, name: str, started: float
    ) -> p.Response:
        return self._done(self._error(request, failure), name, started)

    def _error(self, request: p.Request, failure: Failure) -> p.Response:
        name = type(request).__name__
        self.stats.errors[name] = self.stats.errors.get(name, 0) + 1
        exc = failure.value
        if isinstance(exc, CorruptBatch):
            self.stats.corrupt_batches += 1
            if self._first_in_a_while(("corrupt", str(exc))):
                self.log.error("corrupt data refused to a client: {message}", message=str(exc))
        elif isinstance(exc, StorageError) and self._first_in_a_while(("storage", str(exc))):
            self.log.error("disk error, request refused: {message}", message=str(exc))
        if isinstance(exc, RustkaError):
            return p.error_response(request, exc)
        if self._first_in_a_while(("internal", name, type(exc).__name__)):
            self.log.failure("unexpected error handling {request}", failure, request=name)
        return p.error_response(request, RustkaError(f"internal error: {exc}"))

    def _first_in_a_while(self, key: tuple[str, ...]) -> bool:
        """Rate-limit repeated error logs: a full disk or a corrupt batch fails every
        request that touches it, and one line per minute says as much as thousands."""
        now = time.monotonic()
        last = self._logged_at.get(key)
        if last is not None and now - last < ERROR_LOG_INTERVAL_S:
            return False
        if len(self._logged_at) > 1024:
            self._logged_at.clear()
        self._logged_at[key] = now
        return True

    # -- helpers ---------------------------------------------------------------

    def _topic(self, name: str) -> Any:
        assert self.logs is not None
        validate_topic(name)
        topic = self.logs.topics.get(name)
        if topic is None:
            raise UnknownTopic(f"unknown topic {name!r}")
        return topic

    def _partition(self, topic_name: str, partition: int) -> PartitionLog:
        topic = self._topic(topic_name)
        if not 0 <= partition < len(topic.partitions):
            raise UnknownPartition(
                f"unknown partition {partition} of topic {topic_name!r} "
                f"(it has {len(topic.partitions)} partitions)"
            )
        return topic.partitions[partition]

    def _topic_for_produce(self, name: str) -> defer.Deferred[Any]:
        """The topic, auto-created (on the pool: it makes directories) when allowed."""
        assert self.logs is not None
        validate_topic(name)
        topic = self.logs.topics.get(name)
        if topic is not None:
            return defer.succeed(topic)
        if not self.config.auto_create_topics:
            raise UnknownTopic(f"unknown topic {name!r} (auto-create is disabled)")
        count = self.config.default_partitions
        return self._with_partitions(count, self.logs.get_or_create, name, count)

    def _with_partitions(
        self, count: int, f: Callable[..., Any], *args: Any
    ) -> defer.Deferred[Any]:
        """Run topic creation or growth on the pool within the broker-wide partition cap.

        Every partition holds open files, so the cap (``max_partitions``) keeps
        valid but greedy requests from exhausting the process's descriptors.
        Partitions being created count against it until their creation ends.
        """
        assert self.logs is not None
        existing = sum(len(t.partitions) for t in self.logs.topics.values())
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

    def lane(self, topic: str, partition: int) -> Lane:
        """The serial lane that owns writes to one partition."""
        key = (topic, partition)
        lane = self._lanes.get(key)
        if lane is None:
            plog = self._partition(topic, partition)
            lane = Lane(self.io, lambda payloads: self._write_batches(plog, payloads))
            self._lanes[key] = lane
        return lane

    def _write_batches(
        self, plog: PartitionLog, items: list[tuple[bytes, list[tuple[int, BatchHeader]]]]
    ) -> list[tuple[int, int]]:
        """Runs on the pool: one coalesced write (and fsync) for queued appends."""
        return plog.append_many([item[0] for item in items], [item[1] for item in items])

    def _append(
        self,
        topic: str,
        partition: int,
        payload: bytes,
        batches: list[tuple[int, BatchHeader]],
        respond: Callable[[int, int], p.Response],
    ) -> defer.Deferred[p.Response]:
        """Queue ``payload`` on the partition's lane; ``respond(first, last)`` builds the answer."""
        return (
            self.lane(topic, partition)
            .append((payload, batches))
            .addCallback(self._appended, topic, partition, len(payload), respond)
        )

    def _appended(
        self,
        offsets: tuple[int, int],
        topic: str,
        partition: int,
        size: int,
        respond: Callable[[int, int], p.Response],
    ) -> p.Response:
        first, last = offsets
        stats = self.stats
        stats.bytes_in += size
        stats.records_in += last - first + 1
        key = (topic, partition)
        if self.config.flush == "interval":
            self._dirty.add(key)
        if key in self._waiters:
            self._wake(key)
        return respond(first, last)

    # -- seed operations ---------------------------------------------------------

    def _produce(self, req: p.Produce) -> defer.Deferred[p.Response]:
        d: defer.Deferred[p.Response] = defer.Deferred()
        self._produce_burst([req], [d], _fire_first, None)
        return d

    def produce_many(self, requests: list[p.Produce], tokens: list[Any], reply: Reply) -> None:
        """Seed Produce requests that arrived together: one lane append per partition.

        `handle` costs a Deferred chain per request, which is most of a one-record
        request's price; a connection hands its burst of Produce frames here
        instead. ``reply(tokens, responses)`` is called on the reactor thread
        once per partition touched (possibly before this returns), with the
        tokens of that partition's requests in arrival order and their
        responses (`Produced`, or `Error` like `handle` would answer). Each
        request is counted and timed in the stats as if it went through `handle`.
        """
        stats = self.stats
        stats.requests[_PRODUCE] = stats.requests.get(_PRODUCE, 0) + len(requests)
        self._produce_burst(requests, tokens, reply, time.perf_counter())

    def _produce_burst(
        self, requests: list[p.Produce], tokens: list[Any], reply: Reply, started: float | None
    ) -> None:
        """Route each record and queue one append per partition.

        ``started`` is None when `handle` does the accounting itself.
        """
        if not self.accepting:
            failure = Failure(BrokerUnavailable("the broker is shutting down"))
            self._produce_failed(requests, tokens, reply, started, failure)
            return
        assert self.logs is not None
        topics = self.logs.topics
        creating = self._creating
        groups: dict[PartitionKey, tuple[list[p.Produce], list[Any]]] = {}
        for req, token in zip(requests, tokens, strict=True):
            name = req[0]
            topic = topics.get(name)
            if topic is None or (creating and name in creating):
                self._produce_after_creation(req, token, reply, started)
                continue
            partitions = topic.partitions
            partition = 0 if len(partitions) == 1 else topic.partition_for_key(req[1])
            key = (name, partition)
            group = groups.get(key)
            if group is None:
                groups[key] = ([req], [token])
            else:
                group[0].append(req)
                group[1].append(token)
        for key, (reqs, toks) in groups.items():
            lane = self._lanes.get(key) or self.lane(*key)
            try:
                payload, validated = _seed_batches(reqs)
            except Exception:
                self._produce_failed(reqs, toks, reply, started, Failure())
                continue
            lane.append_to(
                (payload, validated),
                self._seed_appended,
                (key, reqs, toks, reply, started, len(payload)),
            )

    def _produce_after_creation(
        self, req: p.Produce, token: Any, reply: Reply, started: float | None
    ) -> None:
        """Auto-create the topic (on the pool), then append in arrival order.

        Every produce to a topic in creation waits in one queue, so records a
        connection sent in order are appended in order even when later ones
        arrive after the topic exists but before the earlier ones were stored.
        """
        name = req[0]
        waiting = self._creating.get(name)
        if waiting is not None:
            waiting.append((req, token, reply, started))
            return
        try:
            created = self._topic_for_produce(name)
        except Exception:
            self._produce_failed([req], [token], reply, started, Failure())
            return
        self._creating[name] = [(req, token, reply, started)]
        created.addBoth(self._created, name)

    def _created(self, result: Any, name: str) -> None:
        waiting = self._creating.pop(name)
        for req, token, reply, started in waiting:
            if isinstance(result, Failure):
                self._produce_failed([req], [token], reply, started, result)
            else:
                self._produce_burst([req], [token], reply, started)

    def _produce_failed(
        self,
        requests: list[p.Produce],
        tokens: list[Any],
        reply: Reply,
        started: float | None,
        failure: Failure,
    ) -> None:
        responses = [self._error(req, failure) for req in requests]
        self._produce_answered(tokens, responses, reply, started)

    def _produce_answered(
        self, tokens: list[Any], responses: list[p.Response], reply: Reply, started: float | None
    ) -> None:
        if started is not None:
            count = len(tokens)
            stats = self.stats
            stats.completed[_PRODUCE] = stats.completed.get(_PRODUCE, 0) + count
            histogram = stats.latency.get(_PRODUCE)
            if histogram is None:
                histogram = stats.latency[_PRODUCE] = LatencyHistogram()
            histogram.observe_many(time.perf_counter() - started, count)
        reply(tokens, responses)

    def _seed_appended(
        self,
        result: Any,
        context: tuple[PartitionKey, list[p.Produce], list[Any], Reply, float | None, int],
    ) -> None:
        key, reqs, tokens, reply, started, size = context
        if isinstance(result, Failure):
            self._produce_failed(reqs, tokens, reply, started, result)
            return
        first, last = result
        stats = self.stats
        stats.bytes_in += size
        stats.records_in += last - first + 1
        if self.config.flush == "interval":
            self._dirty.add(key)
        if key in self._waiters:
            self._wake(key)
        partition = key[1]
        make = _new_tuple
        produced = p.Produced
        responses = [make(produced, (partition, offset)) for offset in range(first, last + 1)]
        self._produce_answered(tokens, responses, reply, started)

    def _fetch(self, req: p.Fetch) -> defer.Deferred[p.Response] | p.Response:
        plog = self._partition(req.topic, req.partition)
        if req.offset >= plog.end_offset:
            return p.NotFound()
        if req.offset < plog.log_start_offset:
            raise OffsetOutOfRange(req.offset, plog.log_start_offset, plog.end_offset)

        def found(record: Record | None) -> p.Response:
            if record is None:
                return p.NotFound()
            value = record.value or b""
            self.stats.bytes_out += len(value)
            return p.FetchedRecord(req.offset, record.key or b"", value)

        return self._run(plog.read_record, req.offset).addCallback(found)

    def _commit(self, req: p.Commit) -> defer.Deferred[p.Response]:
        validate_group(req.group)
        self._partition(req.topic, req.partition)
        assert self._offsets_lane is not None
        d = self._offsets_lane.append((req.group, req.topic, req.partition, req.offset))

        def committed(_: None) -> p.Response:
            if self.config.flush == "interval":
                self._dirty.add(_OFFSETS_KEY)
            return p.CommitOk()

        return d.addCallback(committed)

    def _write_commits(self, commits: list[tuple[str, str, int, int]]) -> list[None]:
        """Runs on the pool: all queued commits in one batch, one write, one fsync."""
        assert self.offsets is not None
        self.offsets.commit_many(commits)
        if self.config.flush == "always":
            self.offsets.flush()
        return [None] * len(commits)

    def _offset_fetch(self, req: p.OffsetFetch) -> p.Response:
        assert self.offsets is not None
        validate_group(req.group)
        validate_topic(req.topic)
        offset = self.offsets.committed(req.group, req.topic, req.partition)
        return p.NotFound() if offset is None else p.Offset(offset)

    # -- extensions --------------------------------------------------------------

    def _hello(self, req: p.Hello) -> p.Response:
        version = max(1, min(req.version, p.PROTOCOL_VERSION))
        ops = p.SEED_OPS if version == 1 else (*p.SEED_OPS, *p.EXTENSION_OPS)
        return p.Welcome(version, f"rustka {rustka.__version__}", tuple(ops))

    def _produce_batch(self, req: p.ProduceBatch) -> defer.Deferred[p.Response]:
        batches = validate_batches(req.batches)

        def write(topic: Any) -> defer.Deferred[p.Response]:
            self._partition(req.topic, req.partition)
            return self._append(
                req.topic,
                req.partition,
                req.batches,
                batches,
                lambda first, last: p.BatchProduced(req.partition, first, last),
            )

        return self._topic_for_produce(req.topic).addCallback(write)

    def _fetch_batch(self, req: p.FetchBatch) -> defer.Deferred[p.Response] | p.Response:
        plog = self._partition(req.topic, req.partition)
        if not plog.log_start_offset <= req.offset <= plog.end_offset:
            raise OffsetOutOfRange(req.offset, plog.log_start_offset, plog.end_offset)
        max_bytes = max(1, min(req.max_bytes, self.config.fetch_max_bytes))
        wait_ms = min(req.max_wait_ms, self.config.fetch_max_wait_ms)
        if req.offset == plog.end_offset:
            if wait_ms <= 0:
                return p.Batches(plog.log_start_offset, plog.end_offset, b"")
            parked = self._park((req.topic, req.partition), req.offset, wait_ms / 1000)
            return parked.addCallback(lambda _: self._read_batches(plog, req.offset, max_bytes))
        return self._read_batches(plog, req.offset, max_bytes)

    def _read_batches(
        self, plog: PartitionLog, offset: int, max_bytes: int
    ) -> defer.Deferred[p.Response] | p.Response:
        if offset >= plog.end_offset:
            return p.Batches(plog.log_start_offset, plog.end_offset, b"")

        def read() -> p.Response:
            data = plog.read(offset, max_bytes)
            return p.Batches(plog.log_start_offset, plog.end_offset, data)

        def count(resp: p.Batches) -> p.Batches:
            self.stats.bytes_out += len(resp.batches)
            return resp

        return self._run(read).addCallback(count)

    def _park(self, key: PartitionKey, offset: int, wait_s: float) -> defer.Deferred[None]:
        d: defer.Deferred[None] = defer.Deferred()
        waiters = self._waiters.setdefault(key, [])

        def expire() -> None:
            if waiter in waiters:
                waiters.remove(waiter)
            d.callback(None)

        waiter = _Waiter(offset, d, self.reactor.callLater(wait_s, expire))
        waiters.append(waiter)
        return d

    def _wake(self, key: PartitionKey) -> None:
        """New data in ``key``: release every long-poll parked on it."""
        waiters = self._waiters.pop(key, None)
        if not waiters:
            return
        for waiter in waiters:
            if waiter.timer.active():
                waiter.timer.cancel()
            waiter.deferred.callback(None)

    def _metadata(self, req: p.Metadata) -> p.Response:
        assert self.logs is not None
        names = req.topics or tuple(sorted(self.logs.topics))
        topics = []
        for name in names:
            topic = self._topic(name)
            parts = tuple(
                p.PartitionMetadata(plog.log_start_offset, plog.end_offset)
                for plog in topic.partitions
            )
            topics.append(p.TopicMetadata(name, parts))
        return p.MetadataResult(tuple(topics))

    def _create_topic(self, req: p.CreateTopic) -> defer.Deferred[p.Response]:
        assert self.logs is not None
        validate_topic(req.topic)
        d = self._with_partitions(req.partitions, self.logs.create_topic, req.topic, req.partitions)
        return d.addCallback(lambda topic: p.TopicInfo(req.topic, len(topic.partitions)))

    def _alter_topic(self, req: p.AlterTopic) -> defer.Deferred[p.Response]:
        topic = self._topic(req.topic)
        added = max(0, req.partitions - len(topic.partitions))
        d = self._with_partitions(added, topic.add_partitions, req.partitions)
        return d.addCallback(lambda _: p.TopicInfo(req.topic, len(topic.partitions)))

    def _list_groups(self, req: p.ListGroups) -> p.Response:
        assert self.offsets is not None
        return p.Groups(tuple(sorted(self.offsets.groups())))

    def _describe_group(self, req: p.DescribeGroup) -> p.Response:
        validate_group(req.group)
        return p.GroupOffsets(req.group, self.group_offsets(req.group))

    def group_offsets(self, group: str) -> tuple[p.GroupOffset, ...]:
        """A group's committed offsets beside each partition's current bounds.

        The one place lag is derived from (DescribeGroup, metrics, manhole); a
        partition that no longer exists shows bounds 0/0.
        """
        assert self.offsets is not None and self.logs is not None
        committed = self.offsets.groups().get(group, {})
        entries = []
        for (topic_name, partition), offset in sorted(committed.items()):
            topic = self.logs.topics.get(topic_name)
            if topic is not None and partition < len(topic.partitions):
                plog = topic.partitions[partition]
                start, end = plog.log_start_offset, plog.end_offset
            else:
                start = end = 0
            entries.append(p.GroupOffset(topic_name, partition, offset, start, end))
        return tuple(entries)

    # -- background work -----------------------------------------------------------

    def flush_dirty(self) -> defer.Deferred[Any]:
        """For ``flush = "interval"``: fsync every partition written since last time."""
        dirty, self._dirty = self._dirty, set()
        work = []
        for key in dirty:
            if key == _OFFSETS_KEY:
                if self._offsets_lane is not None and self.offsets is not None:
                    work.append(self._offsets_lane.submit(self.offsets.flush))
            elif key in self._lanes:
                plog = self._partition(*key)
                work.append(self._lanes[key].submit(plog.flush))
        return defer.gatherResults(work, consumeErrors=True)

    def enforce_retention(self) -> defer.Deferred[Any]:
        """Delete expired segments, each partition on its own lane so appends never race.

        The offsets log is exempt from retention (an idle group must keep its
        position); it is compacted instead, on its own lane, once superseded
        commits dominate it.
        """
        assert self.logs is not None
        now = now_ms()
        work = []
        for name, topic in list(self.logs.topics.items()):
            for index, plog in enumerate(topic.partitions):
                d = self.lane(name, index).submit(plog.enforce_retention, now)
                d.addCallback(self._retained, name, index)
                work.append(d)
        offsets, lane = self.offsets, self._offsets_lane
        if offsets is not None and lane is not None and offsets.needs_compaction():
            work.append(lane.submit(offsets.compact))
        return defer.gatherResults(work, consumeErrors=True)

    def _retained(self, deleted: list[int], topic: str, partition: int) -> None:
        if deleted:
            self.stats.retention_deleted_segments += len(deleted)
            self.log.info(
                "retention deleted {count} segment(s) of {topic}/{partition}: base offsets {bases}",
                count=len(deleted),
                topic=topic,
                partition=partition,
                bases=deleted,
            )


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
        Broker.log.warn(
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
        self.broker.open_storage()
        config = self.broker.config
        self._every(config.retention_check_interval_ms, self.broker.enforce_retention)
        if config.flush == "interval":
            self._every(config.flush_interval_ms, self.broker.flush_dirty)

    def _every(self, interval_ms: int, f: Callable[[], defer.Deferred[Any]]) -> None:
        loop = task.LoopingCall(f)
        loop.clock = self._reactor
        loop.start(interval_ms / 1000, now=False).addErrback(
            lambda failure: self.log.failure("background task stopped", failure)
        )
        self._timers.append(loop)

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
