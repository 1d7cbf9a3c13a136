"""The console's read-only JSON API: overview, topics, messages, groups, live tail.

Every answer is built from the broker core's public API in the reactor thread
(in-memory state) or through its Deferreds (disk reads and record decoding on the
I/O pool), so a large or slow topic never blocks the reactor. Reads are bounded:
a call returns at most `MAX_RECORDS` records and `MAX_BYTES` bytes of keys,
values and headers, whatever it asks for. The JSON escapes ``<``, ``>`` and ``&``
so that an attacker's bytes stay inert even where a response is mistaken for HTML
(docs/console.md, "Safety").
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from twisted.internet import defer, interfaces
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import server
from zope.interface import implementer

import rustka
from rustka.broker.maintenance import BACKGROUND_TASKS
from rustka.errors import (
    BrokerUnavailable,
    GroupHasActiveMembers,
    InvalidConfig,
    InvalidName,
    InvalidPartitionCount,
    InvalidRequest,
    NotAuthorized,
    OffsetOutOfRange,
    PolicyViolation,
    RustkaError,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)
from rustka.ops.assignments import consumer_assignment
from rustka.ops.console.rates import RateSampler
from rustka.ops.console.records import FORMATS, Page, ValueDecoder, decode_page
from rustka.ops.console.search import (
    DEFAULT_MAX_SCAN,
    MAX_SCAN,
    MAX_SCAN_BYTES,
    FilterError,
    RecordFilter,
    parse_filter,
)

MAX_RECORDS = 500
"""Records one messages call (or one tail event) returns at most."""
MAX_BYTES = 1024 * 1024
"""Bytes of keys, values and headers one call returns at most."""
DEFAULT_RECORDS = 50
MAX_TAILS = 32
"""Live tails open at once; more are refused, each holds a connection and a waiter."""
TAIL_WAIT_S = 15.0
"""How long a tail waits for data before a keep-alive comment."""
_READS_PER_PAGE = 16
_DISK_USAGE_TTL_S = 10.0

_log = Logger(namespace="rustka.ops.console")


class ApiError(Exception):
    """An answer other than 200: its HTTP status and a message for the caller."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (UnknownTopic, 404),
    (UnknownPartition, 404),
    (TopicExists, 409),
    (GroupHasActiveMembers, 409),
    (NotAuthorized, 403),
    (BrokerUnavailable, 503),
    (InvalidName, 400),
    (InvalidConfig, 400),
    (InvalidPartitionCount, 400),
    (InvalidRequest, 400),
    (OffsetOutOfRange, 400),
    (PolicyViolation, 400),
)


def to_json(value: Any) -> bytes:
    """JSON with ``<``, ``>`` and ``&`` as \\u escapes: the same data, never markup."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return text.encode("utf-8")


def security_headers(request: server.Request) -> None:
    request.setHeader(b"x-content-type-options", b"nosniff")
    request.setHeader(b"x-frame-options", b"DENY")
    request.setHeader(b"referrer-policy", b"no-referrer")
    request.setHeader(b"cache-control", b"no-store")


def send_json(request: server.Request, status: int, value: Any) -> None:
    if request.finished or request._disconnected:  # type: ignore[attr-defined]
        return
    request.setResponseCode(status)
    security_headers(request)
    request.setHeader(b"content-type", b"application/json; charset=utf-8")
    request.write(to_json(value))
    request.finish()


def error_status(error: BaseException) -> tuple[int, str]:
    if isinstance(error, ApiError):
        return error.status, str(error)
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return status, str(error)
    if isinstance(error, RustkaError):
        return 500, str(error)
    return 500, "internal error"


Handler = Callable[..., Coroutine[Any, Any, Any]]


def respond(request: server.Request, handler: Handler, *args: Any) -> int:
    """Run an async handler and answer its value as JSON (or its error), later."""

    def failed(failure: Failure) -> None:
        status, message = error_status(failure.value)
        if status == 500:
            _log.failure("console request {path} failed", failure, path=request.path)
        send_json(request, status, {"error": message})

    d = defer.ensureDeferred(handler(*args))
    d.addCallback(lambda value: send_json(request, 200, value))
    d.addErrback(failed)
    return server.NOT_DONE_YET


def query(request: server.Request) -> dict[str, str]:
    """The query string's last value of each name."""
    raw = request.uri.split(b"?", 1)
    if len(raw) < 2:
        return {}
    parsed = parse_qs(raw[1].decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[-1] for name, values in parsed.items()}


def int_param(params: dict[str, str], name: str, default: int | None = None) -> int | None:
    text = params.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ApiError(400, f"{name}: expected a whole number, got {text!r}") from None


def path_segments(request: server.Request) -> list[str]:
    """The path's segments, each percent-decoded on its own (group ids may hold ``/``)."""
    path = request.path.decode("ascii", "replace")
    return [unquote(part) for part in path.split("/") if part]


def _dir_size(root: str) -> int:
    """Bytes under the data directory; runs on the I/O pool."""
    total = 0
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
    return total


def _disk_usage(root: str) -> dict[str, int]:
    usage = shutil.disk_usage(root)
    return {"data_dir_bytes": _dir_size(root), "disk_free_bytes": usage.free}


class ReadApi:
    """The read-only endpoints, over one broker and its front-ends."""

    def __init__(
        self,
        broker: Any,
        factory: Any,
        kafka_factory: Any,
        sampler: RateSampler,
        started: float,
        decode_value: ValueDecoder | None = None,
    ) -> None:
        self.broker = broker
        self.decode_value = decode_value
        """The schema registry's decoder of framed values, when there is one."""
        self.factory = factory
        self.kafka_factory = kafka_factory
        self.sampler = sampler
        self.started = started
        self.tails: set[Tail] = set()
        """The live tails streaming now."""
        self._disk: tuple[float, dict[str, int]] | None = None

    # -- overview ------------------------------------------------------------------

    async def _disk_usage(self) -> dict[str, int]:
        """Walked on the pool, at most once per `_DISK_USAGE_TTL_S` whatever the polling."""
        now = time.monotonic()
        if self._disk is not None and now - self._disk[0] < _DISK_USAGE_TTL_S:
            return self._disk[1]
        root = str(Path(self.broker.config.data_dir))
        usage = await self.broker.io.run(_disk_usage, root)
        self._disk = (now, usage)
        return usage

    async def overview(self) -> dict[str, Any]:
        stats = self.broker.stats
        kafka = self.kafka_factory
        usage = await self._disk_usage()
        logs = self.broker.logs
        topics = [n for n in logs.topics] if logs is not None else []
        return {
            "version": rustka.__version__,
            "uptime_s": max(0.0, time.time() - self.started),
            "data_dir": str(self.broker.config.data_dir),
            **usage,
            "connections": {
                "native": len(self.factory.connections),
                "kafka": len(kafka.connections) if kafka is not None else 0,
            },
            "topics": len(topics),
            "partitions": sum(len(logs.topics[n].partitions) for n in topics) if logs else 0,
            "groups": len(self.broker.groups.list_groups()),
            "totals": {
                "records_in": stats.records_in,
                "bytes_in": stats.bytes_in,
                "bytes_out": stats.bytes_out,
            },
            "background_failures": {
                name: stats.background_failures.get(name, 0) for name in BACKGROUND_TASKS
            },
            "sample_interval_s": self.sampler.interval_s,
            "rates": self.sampler.broker_rates(),
            "brokers": self._brokers(),
        }

    def _brokers(self) -> list[dict[str, Any]]:
        """The cluster's live brokers and what each leads (docs/diskless.md); a broker
        alone is the one row, leading everything."""
        broker = self.broker
        cluster = broker.cluster
        topics = broker.topics_snapshot() if broker.logs is not None else []
        if cluster is None:
            return [
                {
                    "node_id": broker.node_id,
                    "address": "",
                    "this": True,
                    "coordinator": True,
                    "leads": sum(len(t.partitions) for t in topics),
                }
            ]
        leads: dict[int, int] = {}
        for t in topics:
            if t.configs.get("diskless.enable") == "true":
                leaders = cluster.diskless_leaders(t.name, len(t.partitions))
            else:
                leaders = [broker.node_id] * len(t.partitions)
            for leader in leaders:
                leads[leader] = leads.get(leader, 0) + 1
        view = cluster.view
        if view is not None:
            for name, (holder, count) in view.local_topics.items():
                if holder != broker.node_id and name not in broker.topics:
                    leads[holder] = leads.get(holder, 0) + count
        coordinator = cluster.coordinator()
        return [
            {
                "node_id": b.broker_id,
                "address": f"{b.host}:{b.port}",
                "this": b.broker_id == broker.node_id,
                "coordinator": coordinator is not None and coordinator.broker_id == b.broker_id,
                "leads": leads.get(b.broker_id, 0),
            }
            for b in cluster.brokers()
        ]

    # -- topics --------------------------------------------------------------------

    def _partitions(self, name: str) -> list[dict[str, Any]]:
        out = []
        for info in self.broker.topics_snapshot([name])[0].partitions:
            plog = self.broker.partition(name, info.partition)
            out.append(
                {
                    "partition": info.partition,
                    "log_start_offset": info.log_start_offset,
                    "end_offset": info.high_watermark,
                    "records": info.high_watermark - info.log_start_offset,
                    "size_bytes": plog.size_bytes,
                    "segments": len(plog.segments),
                }
            )
        return out

    async def topics(self) -> dict[str, Any]:
        rows = []
        for info in self.broker.topics_snapshot():
            partitions = self._partitions(info.name)
            rows.append(
                {
                    "name": info.name,
                    "partitions": len(partitions),
                    "log_start_offset": sum(p["log_start_offset"] for p in partitions),
                    "end_offset": sum(p["end_offset"] for p in partitions),
                    "records": sum(p["records"] for p in partitions),
                    "size_bytes": sum(p["size_bytes"] for p in partitions),
                    "configs": dict(info.configs),
                    "records_in_per_s": self.sampler.latest_topic_rate(info.name),
                }
            )
        return {"topics": rows}

    async def topic(self, name: str) -> dict[str, Any]:
        info = self.broker.topics_snapshot([name])[0]
        return {
            "name": name,
            "partitions": self._partitions(name),
            "configs": dict(info.configs),
            "effective_configs": [
                {"name": e.name, "value": e.value, "source": e.source}
                for e in self.broker.topic_configs(name)
            ],
            "sample_interval_s": self.sampler.interval_s,
            "rates": self.sampler.topic_rates(name),
        }

    # -- messages ------------------------------------------------------------------

    async def read_page(
        self,
        topic: str,
        partition: int,
        first: int,
        limit: int,
        max_bytes: int,
        fmt: str,
        keep: RecordFilter | None = None,
        max_scan: int = DEFAULT_MAX_SCAN,
    ) -> Page:
        """Up to ``limit`` records from ``first``, read and decoded on the pool (and
        decoded with the schema registry's decoder in the same job). With ``keep``
        (a search), only matching records, looking at no more than ``max_scan``
        records and `MAX_SCAN_BYTES` bytes; the reactor is free between reads."""
        page = Page(next_offset=first)
        reads = _READS_PER_PAGE if keep is None else MAX_SCAN_BYTES // MAX_BYTES + 1
        for _ in range(reads):
            start, end = self.broker.bounds(topic, partition)
            offset = max(page.next_offset, start)
            page.next_offset = offset
            if offset >= end or len(page.records) >= limit or page.truncated:
                break
            if keep is not None and page.scanned_bytes >= MAX_SCAN_BYTES:
                page.truncated = True
                break
            result = await self.broker.read(topic, partition, offset, max_bytes)
            if not result.chunks:
                break
            before = page.next_offset
            page = await self.broker.io.run(
                decode_page,
                result.chunks,
                offset,
                limit,
                max_bytes,
                fmt,
                page,
                keep,
                max_scan if keep is not None else None,
                self.decode_value,
            )
            if page.next_offset <= before:
                break
        else:
            if keep is not None and page.next_offset < self.broker.bounds(topic, partition)[1]:
                page.truncated = True
        return page

    async def messages(self, topic: str, partition: int, params: dict[str, str]) -> dict[str, Any]:
        fmt = params.get("format", "text")
        if fmt not in FORMATS:
            raise ApiError(400, f"format: one of {', '.join(FORMATS)}, got {fmt!r}")
        limit = int_param(params, "limit", DEFAULT_RECORDS)
        max_bytes = int_param(params, "max_bytes", MAX_BYTES)
        assert limit is not None and max_bytes is not None
        if limit < 1 or max_bytes < 1:
            raise ApiError(400, "limit and max_bytes must be at least 1")
        limit, max_bytes = min(limit, MAX_RECORDS), min(max_bytes, MAX_BYTES)
        try:
            keep: RecordFilter | None = parse_filter(params)
        except FilterError as e:
            raise ApiError(400, str(e)) from None
        assert keep is not None
        if keep.empty:
            keep = None
        max_scan = int_param(params, "max_scan", DEFAULT_MAX_SCAN)
        assert max_scan is not None
        if max_scan < 1:
            raise ApiError(400, "max_scan must be at least 1")
        max_scan = min(max_scan, MAX_SCAN)
        start, end = self.broker.bounds(topic, partition)
        chosen = [n for n in ("offset", "timestamp", "latest") if params.get(n, "") != ""]
        if len(chosen) > 1:
            raise ApiError(400, "give one of offset, timestamp and latest")
        # a search reads forward: from the time range's start, else the log's start
        mode = chosen[0] if chosen else ("search" if keep is not None else "latest")
        if mode == "search":
            assert keep is not None
            first = start
            if keep.from_ts is not None:
                found = await self.broker.list_offset(topic, partition, keep.from_ts)
                first = end if found is None else found.offset
        elif mode == "offset":
            first = int_param(params, "offset")
            assert first is not None
            first = min(max(first, start), end)
        elif mode == "timestamp":
            at = int_param(params, "timestamp")
            assert at is not None
            if at < 0:
                raise ApiError(400, "timestamp: milliseconds since the epoch, not negative")
            found = await self.broker.list_offset(topic, partition, at)
            first = end if found is None else found.offset
        else:
            latest = int_param(params, "latest", limit)
            assert latest is not None
            if latest < 1:
                raise ApiError(400, "latest must be at least 1")
            limit = min(latest, limit)
            first = max(start, end - limit)
        page = await self.read_page(topic, partition, first, limit, max_bytes, fmt, keep, max_scan)
        return {
            "scanned": page.scanned,
            "matched": len(page.records),
            "topic": topic,
            "partition": partition,
            "log_start_offset": start,
            "end_offset": end,
            "first_offset": first,
            "next_offset": page.next_offset,
            "limit": limit,
            "max_bytes": max_bytes,
            "bytes": page.bytes,
            "truncated": page.truncated,
            "records": page.records,
        }

    # -- groups --------------------------------------------------------------------

    async def groups(self) -> dict[str, Any]:
        rows = []
        for group_id, protocol_type, state, kind in self.broker.groups.list_typed_groups():
            desc = self.broker.groups.describe(group_id)
            consumer = self.broker.groups.consumer_group(group_id)
            offsets = self.broker.group_offsets(group_id) if self.broker.logs else ()
            rows.append(
                {
                    "group": group_id,
                    "type": kind,
                    "protocol_type": protocol_type,
                    "state": state,
                    "members": len(desc.members if consumer is None else consumer.members),
                    "partitions": len(offsets),
                    "lag": sum(o.lag for o in offsets),
                }
            )
        shares = self.broker.share_groups
        for group_id, state in shares.list_groups() if shares is not None else ():
            windows = self._share_windows(group_id)
            rows.append(
                {
                    "group": group_id,
                    "type": "share",
                    "protocol_type": "share",
                    "state": state,
                    "members": len(shares.describe(group_id).members),
                    "partitions": len(windows),
                    "lag": sum(w["undelivered"] for w in windows),
                }
            )
        rows.sort(key=lambda r: r["group"])
        return {"groups": rows}

    def _group_offsets(self, group_id: str) -> list[dict[str, Any]]:
        return [
            {
                "topic": o.topic,
                "partition": o.partition,
                "committed": o.committed,
                "log_start_offset": o.log_start,
                "end_offset": o.high_watermark,
                "lag": o.lag,
            }
            for o in self.broker.group_offsets(group_id)
        ]

    def _consumer_group(self, group_id: str, group: Any) -> dict[str, Any]:
        """A consumer-protocol group (docs/kafka.md, "Consumer groups (KIP-848)"): its
        epochs and each member's epoch, assignment and target, beside the lag."""
        offsets = self._group_offsets(group_id)
        return {
            "group": group_id,
            "type": "consumer",
            "state": str(group.state),
            "protocol_type": "consumer",
            "protocol": group.assignor_name or self.broker.groups.consumer.assignors[0],
            "generation": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "members": [
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "member_epoch": m.member_epoch,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "assignment": _assignment_rows(m.assigned),
                    "target_assignment": _assignment_rows(group.target_of(m.member_id)),
                }
                for m in group.members.values()
            ],
            "offsets": offsets,
            "lag": sum(o["lag"] for o in offsets),
            "sample_interval_s": self.sampler.interval_s,
            "lag_history": self.sampler.group_lag(group_id),
        }

    def _share_windows(self, group_id: str) -> list[dict[str, Any]]:
        """Each started share-partition of the group with its log end, and the records
        not yet done: those available or acquired in the window and every record past it
        (docs/kafka.md, "Share groups (KIP-932)")."""
        shares = self.broker.share_groups
        out = []
        for w in shares.partition_states(group_id) if shares is not None else ():
            try:
                end = self.broker.bounds(w.topic, w.partition)[1]
            except RustkaError:
                continue
            past = max(0, end - max(w.end_offset, w.start_offset))
            out.append(
                {
                    "topic": w.topic,
                    "partition": w.partition,
                    "start_offset": w.start_offset,
                    "end_offset": w.end_offset,
                    "log_end_offset": end,
                    "available": w.available,
                    "acquired": w.acquired,
                    "acknowledged": w.acknowledged,
                    "archived": w.archived,
                    "undelivered": w.available + w.acquired + past,
                }
            )
        return out

    def _share_group(self, group_id: str) -> dict[str, Any]:
        shares = self.broker.share_groups
        assert shares is not None
        desc = shares.describe(group_id)
        windows = self._share_windows(group_id)
        return {
            "group": group_id,
            "type": "share",
            "state": desc.state,
            "group_epoch": desc.group_epoch,
            "members": [
                {
                    "member_id": m.member_id,
                    "member_epoch": m.member_epoch,
                    "assignment": _assignment_rows(m.assignment),
                }
                for m in desc.members
            ],
            "partitions": windows,
            "lag": sum(w["undelivered"] for w in windows),
        }

    async def group(self, group_id: str) -> dict[str, Any]:
        shares = self.broker.share_groups
        if shares is not None and shares.is_share_group(group_id):
            return self._share_group(group_id)
        known = {row[0] for row in self.broker.groups.list_groups()}
        if group_id not in known:
            raise ApiError(404, f"unknown group {group_id!r}")
        consumer = self.broker.groups.consumer_group(group_id)
        if consumer is not None:
            return self._consumer_group(group_id, consumer)
        desc = self.broker.groups.describe(group_id)
        members = []
        for m in desc.members:
            assigned = consumer_assignment(m.assignment) if m.assignment else None
            members.append(
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "assignment": _assignment_rows(assigned),
                }
            )
        offsets = self._group_offsets(group_id)
        return {
            "group": group_id,
            "type": "classic",
            "state": desc.state,
            "protocol_type": desc.protocol_type,
            "protocol": desc.protocol,
            "generation": desc.generation_id,
            "members": members,
            "offsets": offsets,
            "lag": sum(o["lag"] for o in offsets),
            "sample_interval_s": self.sampler.interval_s,
            "lag_history": self.sampler.group_lag(group_id),
        }


def _assignment_rows(assignment: Any) -> list[dict[str, Any]]:
    """An assignment (topic -> partitions, or None) as the API lists it."""
    return [
        {"topic": topic, "partitions": sorted(partitions)}
        for topic, partitions in sorted((assignment or {}).items())
    ]


@implementer(interfaces.IPushProducer)
class Tail:
    """A live tail over server-sent events: one ``records`` event per batch of new
    records, a comment every `TAIL_WAIT_S` without any. Registered as the
    request's producer, so a reader that stops reading pauses the tail instead of
    filling the broker's memory; a hang-up cancels the wait."""

    def __init__(
        self,
        api: ReadApi,
        request: server.Request,
        topic: str,
        partition: int,
        offset: int,
        limit: int,
        fmt: str,
        keep: RecordFilter | None = None,
    ) -> None:
        self.api = api
        self.keep = keep
        self.request = request
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.limit = limit
        self.fmt = fmt
        self.done = False
        self._waiting: defer.Deferred[Any] | None = None
        self._paused: defer.Deferred[None] | None = None

    def pauseProducing(self) -> None:
        if self._paused is None:
            self._paused = defer.Deferred()

    def resumeProducing(self) -> None:
        paused, self._paused = self._paused, None
        if paused is not None:
            paused.callback(None)

    def stopProducing(self) -> None:
        self._stop()

    def _stop(self, _: object = None) -> None:
        self.done = True
        for d in (self._waiting, self._paused):
            if d is not None and not d.called:
                d.cancel()

    def _event(self, name: str, value: Any) -> None:
        self.request.write(b"event: " + name.encode() + b"\ndata: " + to_json(value) + b"\n\n")

    async def run(self) -> None:
        request = self.request
        request.notifyFinish().addBoth(self._stop)
        request.registerProducer(self, True)
        self.api.tails.add(self)
        try:
            self._event(
                "hello", {"topic": self.topic, "partition": self.partition, "offset": self.offset}
            )
            while not self.done:
                if self._paused is not None:
                    await self._paused
                    continue
                start, end = self.api.broker.bounds(self.topic, self.partition)
                self.offset = min(max(self.offset, start), end)
                if self.offset >= end:
                    self._waiting = self.api.broker.wait_for_data(
                        [(self.topic, self.partition, self.offset)], TAIL_WAIT_S
                    )
                    await self._waiting
                    self._waiting = None
                    if (
                        not self.done
                        and self.api.broker.bounds(self.topic, self.partition)[1] <= self.offset
                    ):
                        request.write(b": waiting\n\n")
                    continue
                page = await self.api.read_page(
                    self.topic,
                    self.partition,
                    self.offset,
                    self.limit,
                    MAX_BYTES,
                    self.fmt,
                    self.keep,
                )
                if self.done:
                    break
                self.offset = max(self.offset, page.next_offset)
                # the id is where to resume: EventSource sends it back as Last-Event-ID
                request.write(b"id: %d\n" % page.next_offset)
                self._event("records", {"next_offset": page.next_offset, "records": page.records})
        except defer.CancelledError:
            pass
        except Exception as e:
            status, message = error_status(e)
            if status == 500:
                _log.failure("console tail failed", Failure())
            if not self.done:
                self._event("error", {"error": message})
        finally:
            self.api.tails.discard(self)
            self.done = True
            if not request.finished and not request._disconnected:  # type: ignore[attr-defined]
                request.unregisterProducer()
                request.finish()


def start_tail(api: ReadApi, request: server.Request, topic: str, partition: int) -> int:
    """Answer the tail's headers now and stream from there; refuse beyond `MAX_TAILS`."""
    params = query(request)
    fmt = params.get("format", "text")
    if fmt not in FORMATS:
        send_json(request, 400, {"error": f"format: one of {', '.join(FORMATS)}"})
        return server.NOT_DONE_YET
    if len(api.tails) >= MAX_TAILS:
        send_json(request, 503, {"error": f"at most {MAX_TAILS} live tails at once"})
        return server.NOT_DONE_YET
    try:
        _start, end = api.broker.bounds(topic, partition)
        resume = request.getHeader(b"last-event-id")
        if resume is not None and "offset" not in params:
            params["offset"] = (
                resume.decode("ascii", "replace") if isinstance(resume, bytes) else resume
            )
        offset = int_param(params, "offset", end)
        limit = int_param(params, "limit", DEFAULT_RECORDS)
        keep: RecordFilter | None = parse_filter(params)
    except FilterError as e:
        send_json(request, 400, {"error": str(e)})
        return server.NOT_DONE_YET
    except Exception as e:
        status, message = error_status(e)
        send_json(request, status, {"error": message})
        return server.NOT_DONE_YET
    assert offset is not None and limit is not None and keep is not None
    security_headers(request)
    request.setHeader(b"content-type", b"text/event-stream; charset=utf-8")
    request.setHeader(b"x-accel-buffering", b"no")
    tail = Tail(
        api,
        request,
        topic,
        partition,
        offset,
        min(max(1, limit), MAX_RECORDS),
        fmt,
        None if keep.empty else keep,
    )
    defer.ensureDeferred(tail.run())
    return server.NOT_DONE_YET
