"""Client telemetry (KIP-714): who subscribes to what, and the metrics each client pushed.

A client asks for its subscription (`ClientTelemetry.subscription`), then pushes its
metrics every push interval (`ClientTelemetry.push`). The broker keeps, per client
instance, only the last value of each metric series: enough for the Prometheus endpoint
and the console to show each client as it is now, and bounded three ways so that
clients cannot grow the broker without limit (docs/operations.md, "Client telemetry"):

- at most ``max_clients`` client instances: past it, the one that pushed least
  recently is dropped;
- at most ``max_series`` series per client (the rest of a push is dropped);
- a client is forgotten when it says it is terminating, when its connection closes,
  and when it has sent nothing for three push intervals (at least a minute).

Pure and synchronous, with time passed in: the Kafka front-end calls it on the reactor.
The payload's decoding is `rustka.broker.otlp`'s; its decompression the record codecs'.

Kafka's broker throttles a GetTelemetrySubscriptions sent sooner than a push interval
after the last request; rustka does not (a subscription costs it nothing), and it
accepts a push once a subscription was asked since the last push or half an interval
has passed, since clients jitter their pushes between 0.5 and 1.5 intervals.
"""

from __future__ import annotations

import uuid
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from rustka.broker.otlp import InvalidMetrics, Point, decode_metrics, require
from rustka.config import Config
from rustka.errors import InvalidBatch
from rustka.record.compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    decompress,
)

# Kafka's order of preference: the client takes the first it supports.
ACCEPTED_COMPRESSION: tuple[int, ...] = (CODEC_ZSTD, CODEC_LZ4, CODEC_GZIP, CODEC_SNAPPY)
_MIN_EXPIRY_MS = 60_000
ZERO_UUID = bytes(16)


class TelemetryRefused(Exception):
    """A request the broker will not take; ``reason`` names which rule it broke."""

    THROTTLED = "throttled"
    UNKNOWN_SUBSCRIPTION = "unknown subscription"
    TOO_LARGE = "too large"
    UNSUPPORTED_COMPRESSION = "unsupported compression"
    INVALID_REQUEST = "invalid request"
    INVALID_RECORD = "invalid record"

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    metrics: tuple[str, ...]
    """Metric name prefixes clients are asked for; "*" (or "") for all, none: off."""
    interval_ms: int
    max_bytes: int
    max_clients: int
    max_series: int


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """Who a request came from, as the connection knows it."""

    client_id: str
    software_name: str
    software_version: str
    principal: str
    address: str
    connection: object
    """The connection's identity, to forget its client instance when it closes."""


@dataclass(frozen=True, slots=True)
class Subscription:
    instance_id: bytes
    subscription_id: int
    requested_metrics: tuple[str, ...]
    push_interval_ms: int
    max_bytes: int
    accepted_compression: tuple[int, ...]


@dataclass(slots=True)
class ClientState:
    """One client instance: who it is, its subscription, and its latest metrics."""

    instance_id: bytes
    info: ClientInfo
    subscription_id: int
    last_request_ms: int
    last_push_ms: int = 0
    subscribed_since_push: bool = True
    terminating: bool = False
    series: dict[tuple[str, tuple[tuple[str, str], ...]], Point] = field(default_factory=dict)

    @property
    def instance(self) -> str:
        return str(uuid.UUID(bytes=self.instance_id))


def _subscription_id(metrics: Sequence[str], interval_ms: int, instance_id: bytes) -> int:
    """Stable for one client and one subscription; changes when either changes."""
    text = ",".join(metrics) + f"/{interval_ms}"
    value = zlib.crc32(text.encode()) ^ int.from_bytes(instance_id[:4], "big")
    return value - (1 << 32) if value >= 1 << 31 else value


class ClientTelemetry:
    """The subscription every client gets, and the clients that push."""

    def __init__(self, settings: TelemetrySettings) -> None:
        require()
        self.settings = settings
        wanted = tuple(m.strip() for m in settings.metrics if m.strip() != "*")
        self.all_metrics = any(m.strip() in ("*", "") for m in settings.metrics)
        # KIP-714: one empty string asks for every metric.
        self.requested: tuple[str, ...] = ("",) if self.all_metrics else wanted
        self.clients: OrderedDict[bytes, ClientState] = OrderedDict()
        self.pushes: dict[str, int] = {}
        """Pushes by result ("accepted", or a `TelemetryRefused` reason)."""
        self.dropped_clients = 0

    def subscription(self, instance_id: bytes, info: ClientInfo, now_ms: int) -> Subscription:
        """The subscription for a client; a new instance id when it sent none."""
        self.expire(now_ms)
        if instance_id == ZERO_UUID:
            instance_id = uuid.uuid4().bytes
            while instance_id in self.clients:
                instance_id = uuid.uuid4().bytes
        sid = _subscription_id(self.requested, self.settings.interval_ms, instance_id)
        state = self.clients.get(instance_id)
        if state is None:
            state = ClientState(instance_id, info, sid, now_ms)
            self._admit(state)
        state.info = info
        state.subscription_id = sid
        state.last_request_ms = now_ms
        state.subscribed_since_push = True
        self.clients.move_to_end(instance_id)
        return Subscription(
            instance_id,
            sid,
            self.requested,
            self.settings.interval_ms,
            self.settings.max_bytes,
            ACCEPTED_COMPRESSION,
        )

    def push(
        self,
        instance_id: bytes,
        subscription_id: int,
        terminating: bool,
        compression: int,
        payload: bytes,
        info: ClientInfo,
        now_ms: int,
    ) -> int:
        """Take one push; the number of series it updated. TelemetryRefused if refused."""
        try:
            taken = self._push(
                instance_id, subscription_id, terminating, compression, payload, info, now_ms
            )
        except TelemetryRefused as e:
            self.pushes[e.reason] = self.pushes.get(e.reason, 0) + 1
            raise
        self.pushes["accepted"] = self.pushes.get("accepted", 0) + 1
        return taken

    def _push(
        self,
        instance_id: bytes,
        subscription_id: int,
        terminating: bool,
        compression: int,
        payload: bytes,
        info: ClientInfo,
        now_ms: int,
    ) -> int:
        self.expire(now_ms)
        if instance_id == ZERO_UUID:
            raise TelemetryRefused(TelemetryRefused.INVALID_REQUEST, "no client instance id")
        state = self.clients.get(instance_id)
        if state is None or state.subscription_id != subscription_id:
            # Unknown here (expired, or asked another broker): the client asks again.
            raise TelemetryRefused(
                TelemetryRefused.UNKNOWN_SUBSCRIPTION, "unknown subscription: ask for it again"
            )
        if state.terminating:
            raise TelemetryRefused(
                TelemetryRefused.INVALID_REQUEST, "the client already said it was terminating"
            )
        early = now_ms - state.last_push_ms < self.settings.interval_ms // 2
        if early and not state.subscribed_since_push and not terminating:
            raise TelemetryRefused(TelemetryRefused.THROTTLED, "pushed before its interval")
        if compression != CODEC_NONE and compression not in ACCEPTED_COMPRESSION:
            raise TelemetryRefused(
                TelemetryRefused.UNSUPPORTED_COMPRESSION, f"compression type {compression}"
            )
        if len(payload) > self.settings.max_bytes:
            raise TelemetryRefused(
                TelemetryRefused.TOO_LARGE,
                f"{len(payload)} bytes, above the {self.settings.max_bytes} accepted",
            )
        state.info = info
        state.last_request_ms = state.last_push_ms = now_ms
        state.subscribed_since_push = False
        state.terminating = terminating
        self.clients.move_to_end(instance_id)
        taken = self._take(state, compression, payload) if payload else 0
        if terminating:
            self.forget(instance_id)
        return taken

    def _take(self, state: ClientState, compression: int, payload: bytes) -> int:
        limit = self.settings.max_bytes * 8
        try:
            raw = payload if compression == CODEC_NONE else decompress(compression, payload, limit)
            points = decode_metrics(raw, self.settings.max_series)
        except InvalidBatch as e:
            raise TelemetryRefused(TelemetryRefused.TOO_LARGE, str(e)) from None
        except InvalidMetrics as e:
            raise TelemetryRefused(TelemetryRefused.INVALID_RECORD, str(e)) from None
        taken = 0
        for point in points:
            if not self._wanted(point.name):
                continue
            key = (point.name, point.labels)
            if key not in state.series and len(state.series) >= self.settings.max_series:
                continue
            state.series[key] = point
            taken += 1
        return taken

    def _wanted(self, name: str) -> bool:
        if self.all_metrics:
            return True
        base = name.removesuffix(".count").removesuffix(".sum")
        return any(base.startswith(p) or name.startswith(p) for p in self.requested)

    def _admit(self, state: ClientState) -> None:
        while len(self.clients) >= self.settings.max_clients:
            self.clients.popitem(last=False)
            self.dropped_clients += 1
        self.clients[state.instance_id] = state

    def forget(self, instance_id: bytes) -> None:
        self.clients.pop(instance_id, None)

    def disconnected(self, connection: object) -> None:
        """Forget the client instances a closed connection spoke for."""
        for key in [k for k, s in self.clients.items() if s.info.connection is connection]:
            del self.clients[key]

    def expire(self, now_ms: int) -> None:
        """Forget clients silent for three push intervals (and at least a minute)."""
        horizon = now_ms - max(_MIN_EXPIRY_MS, 3 * self.settings.interval_ms)
        for key in [k for k, s in self.clients.items() if s.last_request_ms < horizon]:
            del self.clients[key]

    def snapshot(self, now_ms: int) -> list[ClientState]:
        """The clients known now, least recently heard from first."""
        self.expire(now_ms)
        return list(self.clients.values())


def from_config(config: Config) -> ClientTelemetry | None:
    """The broker's client telemetry, or None when client_telemetry_metrics is empty."""
    metrics = tuple(m for m in config.client_telemetry_metrics.split(",") if m.strip())
    if not metrics:
        return None
    return ClientTelemetry(
        TelemetrySettings(
            metrics,
            config.client_telemetry_interval_ms,
            config.client_telemetry_max_bytes,
            config.client_telemetry_max_clients,
            config.client_telemetry_max_series,
        )
    )
