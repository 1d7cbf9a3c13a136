"""Prometheus metrics at /metrics, read from the live broker at scrape time.

Nothing here is updated on the request path: the broker keeps plain integer
counters (`BrokerStats`) and the collector turns them, and the storage state,
into samples only when Prometheus asks. Each service gets a private
`CollectorRegistry`, so several brokers in one process (the test suite) never
clash over the global one.

The page is rendered in the reactor thread, on purpose. The stock
``prometheus_client.twisted.MetricsResource`` renders in the reactor's thread
pool, where the collector would iterate the broker's dicts and sets while the
reactor thread mutates them ("dictionary changed size during iteration").
Rendering is a walk over in-memory numbers, cheap next to a request.
"""

from __future__ import annotations

import itertools
import re
import typing
from collections.abc import Iterator
from typing import Any

from prometheus_client import ProcessCollector, exposition
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from twisted.web import pages, resource, server

from rustka.broker.maintenance import BACKGROUND_TASKS
from rustka.broker.stats import LATENCY_BUCKETS, LatencyHistogram, OperationStats
from rustka.kafka import messages as kafka_messages
from rustka.kafka.errors import ErrorCode as KafkaErrorCode
from rustka.native import codec as p
from rustka.ops.client_metrics import client_metric_families
from rustka.ops.listeners import Listener
from rustka.ops.manhole import group_offsets


def _op_label(name: str) -> str:
    """``ProduceBatch`` -> ``produce_batch``: label values in Prometheus' own style."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


_OPS: dict[str, str] = {t.__name__: _op_label(t.__name__) for t in typing.get_args(p.Request)}


def _kafka_error_label(code: int) -> str:
    """Kafka's own name for an error code (``UNKNOWN_TOPIC_OR_PARTITION``), else the number."""
    try:
        return KafkaErrorCode(code).name
    except ValueError:
        return str(code)


class BrokerCollector(Collector):
    """Samples the broker, its connections and its I/O pool whenever it is collected.

    ``kafka_factory`` is the Kafka front-end's factory (None when Kafka is off);
    each front-end's factory keeps its requests in a `rustka.broker.stats.RequestStats`
    (``request_stats``), read here alike; the Kafka one's become the
    ``rustka_kafka_*`` families, labelled with Kafka's API names (``Fetch``,
    ``ApiVersions``) as Kafka's own request metrics are (docs/kafka.md).
    """

    def __init__(self, broker: Any, factory: Any, io: Any, kafka_factory: Any = None) -> None:
        self.broker = broker
        self.factory = factory
        self.io = io
        self.kafka_factory = kafka_factory

    def describe(self) -> list[Metric]:
        # nothing to check against other collectors: the registry is private
        return []

    def collect(self) -> Iterator[Metric]:
        yield from self._requests()
        yield from self._kafka_requests()
        yield from self._traffic()
        yield from self._partitions()
        yield from self._cleaner()
        yield from self._diskless()
        yield from self._transactions()
        yield from self._authorization()
        yield from self._authentication()
        yield self._lag()
        yield from self._group_members()
        yield from self._share_groups()
        telemetry = self.broker.client_telemetry
        if telemetry is not None:
            now_ms = int(self.broker.reactor.seconds() * 1000)
            yield from client_metric_families(telemetry, now_ms)

    def _requests(self) -> Iterator[Metric]:
        stats = self.factory.request_stats
        requests = CounterMetricFamily(
            "rustka_requests",
            "Requests answered, by operation and outcome.",
            labels=("op", "outcome"),
        )
        errors = CounterMetricFamily(
            "rustka_request_errors",
            "Requests answered with an error, by operation.",
            labels=("op",),
        )
        # every known op from the start, so rate() has a zero to start from
        latency = HistogramMetricFamily(
            "rustka_request_duration_seconds",
            "Time from a request's arrival to its response, by operation.",
            labels=("op",),
        )
        in_flight = GaugeMetricFamily(
            "rustka_requests_in_flight", "Requests received and not yet answered.", labels=("op",)
        )
        seen = stats.operations
        names = {**_OPS, **{n: _op_label(str(n)) for n in seen if n not in _OPS}}
        for name, op in sorted(names.items(), key=lambda item: item[1]):
            counted = seen.get(name) or OperationStats()
            requests.add_metric((op, "ok"), max(0, counted.answered - counted.failed))
            requests.add_metric((op, "error"), counted.failed)
            errors.add_metric((op,), counted.failed)
            in_flight.add_metric((op,), max(0, counted.received - counted.answered))
            _add_histogram(latency, (op,), counted.latency)
        yield requests
        yield errors
        yield in_flight
        yield latency

    def _kafka_requests(self) -> Iterator[Metric]:
        kafka = self.kafka_factory
        if kafka is None:
            return
        requests = CounterMetricFamily(
            "rustka_kafka_requests", "Kafka requests answered, by API.", labels=("api",)
        )
        errors = CounterMetricFamily(
            "rustka_kafka_errors",
            "Non-zero error codes in Kafka responses (one per partition or resource), by API.",
            labels=("api", "error"),
        )
        latency = HistogramMetricFamily(
            "rustka_kafka_request_duration_seconds",
            "Time from a Kafka request's arrival to its response, by API.",
            labels=("api",),
        )
        # every advertised API from the start, so rate() has a zero to start from
        seen = kafka.request_stats.operations
        keys = sorted({key for key, _, _ in kafka.advertised_versions()} | set(seen))
        for key in keys:
            api = kafka_messages.APIS[key].name if key in kafka_messages.APIS else str(key)
            counted = seen.get(key) or OperationStats()
            requests.add_metric((api,), counted.answered)
            for code, count in sorted(counted.error_codes.items()):
                errors.add_metric((api, _kafka_error_label(code)), count)
            _add_histogram(latency, (api,), counted.latency)
        yield requests
        yield errors
        yield latency
        yield CounterMetricFamily(
            "rustka_kafka_bad_requests",
            "Kafka connections closed for an unparseable or unsupported request.",
            value=kafka.bad_requests,
        )

    def _traffic(self) -> Iterator[Metric]:
        stats = self.broker.stats
        counters = (
            ("rustka_records_in", "Records appended to partition logs.", stats.records_in),
            ("rustka_bytes_in", "Record batch bytes appended to partition logs.", stats.bytes_in),
            ("rustka_bytes_out", "Record bytes served to consumers.", stats.bytes_out),
            ("rustka_fsync", "fsync calls on logs and the offsets store.", stats.fsyncs),
            ("rustka_fsync_seconds", "Time spent in fsync.", stats.fsync_seconds),
            (
                "rustka_corrupt_batches",
                "Stored batches that failed their CRC when read.",
                stats.corrupt_batches,
            ),
            (
                "rustka_retention_deleted_segments",
                "Segments deleted by retention.",
                stats.retention_deleted_segments,
            ),
            (
                "rustka_connections_refused",
                "Connections refused because max_connections was reached.",
                getattr(self.factory, "refused", 0) + getattr(self.kafka_factory, "refused", 0),
            ),
        )
        for name, documentation, value in counters:
            yield CounterMetricFamily(name, documentation, value=value)
        background = CounterMetricFamily(
            "rustka_background_failures",
            "Failed background work (per partition and pass), by task; it is retried.",
            labels=("task",),
        )
        for task in BACKGROUND_TASKS:
            background.add_metric((task,), stats.background_failures.get(task, 0))
        yield background
        native = len(self.factory.connections)
        kafka = len(self.kafka_factory.connections) if self.kafka_factory is not None else 0
        yield GaugeMetricFamily(
            "rustka_connections", "Open client connections, both protocols.", value=native + kafka
        )
        by_protocol = GaugeMetricFamily(
            "rustka_protocol_connections",
            "Open client connections, by protocol (native or kafka).",
            labels=("protocol",),
        )
        by_protocol.add_metric(("native",), native)
        by_protocol.add_metric(("kafka",), kafka)
        yield by_protocol
        yield GaugeMetricFamily(
            "rustka_io_queue_depth",
            "Disk work items waiting for an I/O thread.",
            value=self.io.queue_depth,
        )

    def _partitions(self) -> Iterator[Metric]:
        labels = ("topic", "partition")
        families = {
            "start": GaugeMetricFamily(
                "rustka_partition_log_start_offset",
                "Oldest offset still stored.",
                labels=labels,
            ),
            "end": GaugeMetricFamily(
                "rustka_partition_end_offset", "Next offset to be assigned.", labels=labels
            ),
            "size": GaugeMetricFamily(
                "rustka_partition_size_bytes", "Bytes of log on disk.", labels=labels
            ),
            "segments": GaugeMetricFamily(
                "rustka_partition_segments", "Segment files in the log.", labels=labels
            ),
            "stable": GaugeMetricFamily(
                "rustka_partition_last_stable_offset",
                "First offset of the earliest open transaction, else the end offset.",
                labels=labels,
            ),
            "open": GaugeMetricFamily(
                "rustka_partition_open_transactions",
                "Transactions open on the partition (each holds its last stable offset back).",
                labels=labels,
            ),
        }
        logs = self.broker.logs
        topics = sorted(logs.topics.items()) if logs is not None else []
        for name, topic in topics:
            for index, plog in enumerate(list(topic.partitions)):
                key = (name, str(index))
                families["start"].add_metric(key, plog.log_start_offset)
                families["end"].add_metric(key, plog.end_offset)
                families["size"].add_metric(key, plog.size_bytes)
                families["segments"].add_metric(key, len(plog.segments))
                families["stable"].add_metric(key, plog.last_stable_offset)
                families["open"].add_metric(key, len(plog.open_transactions()))
        yield from families.values()

    def _transactions(self) -> Iterator[Metric]:
        """Transactions by how they ended since the start, and those open now
        (docs/kafka.md, "Transactions")."""
        coordinator = self.broker.transactions
        outcomes = coordinator.outcomes
        ended = CounterMetricFamily(
            "rustka_transactions",
            "Transactions ended since the start: committed, aborted by their producer or "
            "an operator, aborted at their timeout, aborted by a newer producer fencing "
            "the old one or by a restart after a crash.",
            labels=("outcome",),
        )
        for outcome in ("committed", "aborted", "timed_out", "fenced"):
            ended.add_metric((outcome,), getattr(outcomes, outcome))
        yield ended
        yield GaugeMetricFamily(
            "rustka_transactions_open",
            "Transactional ids with a transaction open or being completed.",
            value=coordinator.open_count(),
        )

    def _authorization(self) -> Iterator[Metric]:
        """ACLs in force and requests refused by them (docs/security.md); nothing while
        authorization is off."""
        access = self.broker.access
        authorizer = access.authorizer
        if authorizer is None:
            return
        denials = CounterMetricFamily(
            "rustka_authorization_denials",
            "Requests (or parts of one) the ACLs refused, by Kafka operation.",
            labels=("operation",),
        )
        for operation, count in sorted(access.denials.items()):
            denials.add_metric((operation,), count)
        yield denials
        yield GaugeMetricFamily("rustka_acls", "ACLs in force.", value=len(authorizer.acls))
        yield CounterMetricFamily(
            "rustka_acl_changes", "Changes made to the ACLs since the start.", value=access.changes
        )

    def _authentication(self) -> Iterator[Metric]:
        """Logins by mechanism and outcome, both protocols together (docs/security.md);
        ``mtls`` is a client certificate, ``unsupported`` a mechanism not offered."""
        authenticator = getattr(self.factory, "authenticator", None)
        if authenticator is None:
            return
        logins = CounterMetricFamily(
            "rustka_authentications",
            "Authentication attempts on both protocols, by mechanism and result.",
            labels=("mechanism", "result"),
        )
        stats = authenticator.stats
        for result, counts in (("success", stats.successes), ("failure", stats.failures)):
            for mechanism, count in sorted(counts.items()):
                logins.add_metric((mechanism, result), count)
        yield logins
        store = authenticator.store
        store.refresh()  # one stat; re-reads only a changed file
        yield GaugeMetricFamily(
            "rustka_credential_file_error",
            "1 while the credential file cannot be read (the last good copy is in use).",
            value=0 if store.last_error is None else 1,
        )

    def _diskless(self) -> Iterator[Metric]:
        """The diskless engine (docs/diskless.md, "Metrics"), when the broker has one:
        uploads and commits with their failures, reads from the store, the object
        cache, and what the collector deleted."""
        side = self.broker.diskless
        if side is None:
            return
        stats = side.engine.stats
        cache = side.engine.cache
        counters = (
            ("rustka_diskless_uploads", "Objects uploaded.", stats.uploads),
            ("rustka_diskless_upload_bytes", "Bytes uploaded.", stats.upload_bytes),
            ("rustka_diskless_upload_failures", "Uploads that failed.", stats.upload_failures),
            ("rustka_diskless_commits", "Catalog commits.", stats.commits),
            ("rustka_diskless_commit_failures", "Commits that failed.", stats.commit_failures),
            ("rustka_diskless_batches", "Payloads committed.", stats.batches_committed),
            ("rustka_diskless_fetch_reads", "Reads served from objects.", stats.fetch_reads),
            ("rustka_diskless_cache_hits", "Object reads the cache answered.", cache.hits),
            ("rustka_diskless_cache_misses", "Object reads that went to the store.", cache.misses),
            (
                "rustka_diskless_objects_collected",
                "Objects deleted once no row used them.",
                stats.objects_collected,
            ),
            (
                "rustka_diskless_orphans_collected",
                "Objects of crashed uploads deleted.",
                stats.orphans_collected,
            ),
        )
        for name, documentation, value in counters:
            yield CounterMetricFamily(name, documentation, value=value)
        cluster = self.broker.cluster
        if cluster is None:
            return
        yield GaugeMetricFamily(
            "rustka_cluster_live_brokers",
            "Brokers of the cluster whose lease runs, as this broker's last heartbeat saw.",
            value=len(cluster.brokers()),
        )
        yield GaugeMetricFamily(
            "rustka_cluster_group_coordinator",
            "1 while this broker holds the cluster's group coordinator role.",
            value=1 if cluster.coordinates_groups() else 0,
        )
        yield CounterMetricFamily(
            "rustka_cluster_role_changes",
            "Times the group coordinator role reached or left this broker.",
            value=cluster.role_changes,
        )
        yield CounterMetricFamily(
            "rustka_cluster_heartbeat_failures",
            "Heartbeats to the catalog that failed (the lease is renewed by the next one).",
            value=cluster.beats_failed,
        )
        yield CounterMetricFamily(
            "rustka_cluster_live_set_changes",
            "Times the set of live brokers changed (a broker joined, left or its lease ran out).",
            value=cluster.live_changes,
        )

    def _cleaner(self) -> Iterator[Metric]:
        """The log cleaner (docs/kafka.md, "Log compaction"): Kafka's cleaner metrics
        (bytes read and written, dirtiness, time of the last clean), per compacted
        partition where Kafka has them per log."""
        cleaner = self.broker.cleaner
        totals = cleaner.totals
        yield CounterMetricFamily(
            "rustka_cleaner_bytes_read",
            "Bytes the log cleaner read (key maps and copies).",
            value=totals.bytes_read,
        )
        yield CounterMetricFamily(
            "rustka_cleaner_bytes_written",
            "Bytes the log cleaner wrote into cleaned segments.",
            value=totals.bytes_written,
        )
        yield CounterMetricFamily(
            "rustka_cleaner_rounds", "Cleaning rounds completed.", value=totals.rounds
        )
        yield CounterMetricFamily(
            "rustka_cleaner_rounds_aborted",
            "Cleaning rounds stopped before the end (segments changed, topic deleted, error).",
            value=totals.rounds_aborted,
        )
        labels = ("topic", "partition")
        ratio = GaugeMetricFamily(
            "rustka_cleaner_dirty_ratio",
            "Share of a compacted partition's log not cleaned yet, at the cleaner's last look.",
            labels=labels,
        )
        last = GaugeMetricFamily(
            "rustka_cleaner_last_clean_timestamp_seconds",
            "When the cleaner last finished a round of the partition (Unix time).",
            labels=labels,
        )
        read = CounterMetricFamily(
            "rustka_cleaner_partition_bytes_read",
            "Bytes the log cleaner read for the partition.",
            labels=labels,
        )
        written = CounterMetricFamily(
            "rustka_cleaner_partition_bytes_written",
            "Bytes the log cleaner wrote for the partition.",
            labels=labels,
        )
        uncleanable = 0
        for (topic, partition), state in sorted(totals.partitions.items()):
            key = (topic, str(partition))
            ratio.add_metric(key, state.dirty_ratio)
            read.add_metric(key, state.bytes_read)
            written.add_metric(key, state.bytes_written)
            if state.last_clean_ms is not None:
                last.add_metric(key, state.last_clean_ms / 1000)
            uncleanable += state.uncleanable is not None
        yield ratio
        yield last
        yield read
        yield written
        yield GaugeMetricFamily(
            "rustka_cleaner_uncleanable_partitions",
            "Compacted partitions the cleaner gave up on until a restart (a damaged batch).",
            value=uncleanable,
        )

    def _lag(self) -> Metric:
        lag = GaugeMetricFamily(
            "rustka_group_lag",
            "Records a consumer group has yet to read (end offset minus committed offset).",
            labels=("group", "topic", "partition"),
        )
        for group, offset in group_offsets(self.broker):
            lag.add_metric((group, offset.topic, str(offset.partition)), offset.lag)
        return lag

    def _group_members(self) -> Iterator[Metric]:
        """Live members and generation per group, labelled with its state (docs/kafka.md)."""
        members = GaugeMetricFamily(
            "rustka_group_members",
            "Members of a consumer group (Kafka's group protocol), by group and state.",
            labels=("group", "state"),
        )
        generation = GaugeMetricFamily(
            "rustka_group_generation",
            "The generation id of a consumer group (it grows by one per rebalance).",
            labels=("group",),
        )
        coordinator = self.broker.groups
        for group_id, _ptype, _state in coordinator.list_groups():
            desc = coordinator.describe(group_id)
            members.add_metric((group_id, desc.state), len(desc.members))
            generation.add_metric((group_id,), desc.generation_id)
        yield members
        yield generation
        heartbeats = CounterMetricFamily(
            "rustka_group_heartbeats",
            "Group heartbeats handled, by group type: classic (Heartbeat), consumer "
            "(ConsumerGroupHeartbeat, KIP-848), share (ShareGroupHeartbeat, KIP-932).",
            labels=("type",),
        )
        rebalances = CounterMetricFamily(
            "rustka_group_rebalances",
            "Rebalances by group type: a classic group's new generation begun, a consumer "
            "group's epoch bumped (a new target assignment).",
            labels=("type",),
        )
        heartbeats.add_metric(("classic",), coordinator.heartbeats)
        heartbeats.add_metric(("consumer",), coordinator.consumer.heartbeats)
        rebalances.add_metric(("classic",), coordinator.rebalances)
        rebalances.add_metric(("consumer",), coordinator.consumer.rebalances)
        shares = getattr(self.broker, "share_groups", None)
        if shares is not None:
            heartbeats.add_metric(("share",), shares.heartbeats)
        yield heartbeats
        yield rebalances

    def _share_groups(self) -> Iterator[Metric]:
        """Share groups (docs/kafka.md, "Share groups (KIP-932)"): what happened to their
        records since the start, and their members."""
        shares = getattr(self.broker, "share_groups", None)
        if shares is None:
            return
        counts = shares.counts
        records = CounterMetricFamily(
            "rustka_share_records",
            "Records of share groups by what happened to them: acquired by a member, "
            "accepted, released (to be delivered again), rejected, archived (rejected, or "
            "past the delivery count limit).",
            labels=("event",),
        )
        for event in ("acquired", "accepted", "released", "rejected", "archived"):
            records.add_metric((event,), getattr(counts, event))
        yield records
        yield CounterMetricFamily(
            "rustka_share_lock_expiries",
            "Acquisition locks of share groups that ran out before the member acknowledged.",
            value=counts.lock_expiries,
        )
        members = GaugeMetricFamily(
            "rustka_share_group_members",
            "Members of a share group (ShareGroupHeartbeat), by group and state.",
            labels=("group", "state"),
        )
        for group_id, state in shares.list_groups():
            members.add_metric((group_id, state), len(shares.describe(group_id).members))
        yield members


class MetricsPage(resource.Resource):
    """The exposition of one registry, in the format the scraper's Accept header asks for."""

    isLeaf = True

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__()
        self.registry = registry

    def render_GET(self, request: server.Request) -> bytes:
        accept = request.getHeader("accept") or ""
        encoder, content_type = exposition.choose_encoder(accept)
        body = encoder(self.registry)
        request.setHeader(b"content-type", content_type.encode("ascii"))
        return body


class _Root(resource.Resource):
    """Only /metrics exists; anything else is a plain 404 (the stock one is deprecated)."""

    def getChild(self, path: bytes, request: server.Request) -> resource.IResource:
        return pages.notFound()


class QuietSite(server.Site):
    """A Site without the access log: one line per scrape every 15 s is only noise."""

    def log(self, request: server.Request) -> None:
        pass


def metrics_registry(
    broker: Any, factory: Any, io: Any, kafka_factory: Any = None
) -> CollectorRegistry:
    """A private registry: the broker's samples plus the process's (memory, fds, CPU)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker, factory, io, kafka_factory))
    ProcessCollector(registry=registry)
    return registry


def metrics_service(
    endpoint: str,
    broker: Any,
    factory: Any,
    io: Any,
    reactor: Any,
    backlog: int | None = None,
    kafka_factory: Any = None,
) -> Listener:
    """An HTTP listener serving /metrics (and 404 elsewhere) on ``endpoint``.

    It binds at once, before the storage opens, so a long recovery can be watched.
    """
    root = _Root()
    root.putChild(b"metrics", MetricsPage(metrics_registry(broker, factory, io, kafka_factory)))
    return Listener(endpoint, "metrics", QuietSite(root), reactor, backlog=backlog)


def _add_histogram(
    family: HistogramMetricFamily, labels: tuple[str, ...], histogram: LatencyHistogram | None
) -> None:
    """One labelled histogram sample set, all buckets present even before any request."""
    counts = histogram.counts if histogram is not None else [0] * (len(LATENCY_BUCKETS) + 1)
    cumulative = list(itertools.accumulate(counts))
    buckets = [(repr(bound), n) for bound, n in zip(LATENCY_BUCKETS, cumulative, strict=False)]
    buckets.append(("+Inf", cumulative[-1]))
    family.add_metric(labels, buckets, histogram.total if histogram is not None else 0.0)
