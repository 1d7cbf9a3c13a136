"""What the broker counts, and how it keeps repeated errors out of the log.

Nothing here is exported on the request path: front-ends and the core bump
plain integers, and `rustka.ops.metrics` turns them into samples at scrape time.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass, field

from rustka.storage.file_io import SYNC_STATS

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

ERROR_LOG_INTERVAL_S = 60.0


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


@dataclass(slots=True)
class OperationStats:
    """One operation's requests: received, answered, answered with an error, and how
    long they took. ``error_codes`` counts the error codes of the answers where a
    protocol carries one per part (Kafka's per-partition codes)."""

    received: int = 0
    answered: int = 0
    failed: int = 0
    error_codes: dict[int, int] = field(default_factory=dict)
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)


class RequestStats:
    """A front-end's requests, per operation (a native op's message name, a Kafka API
    key): owned by the front-end's factory, read by the metrics endpoint at scrape
    time. Both protocols count the same way, so one metrics builder reads both."""

    __slots__ = ("operations",)

    def __init__(self) -> None:
        self.operations: dict[str | int, OperationStats] = {}

    def of(self, op: str | int) -> OperationStats:
        stats = self.operations.get(op)
        if stats is None:
            stats = self.operations[op] = OperationStats()
        return stats

    def received(self, op: str | int, count: int = 1) -> None:
        self.of(op).received += count

    def answered(self, op: str | int, seconds: float, count: int = 1) -> None:
        """``count`` requests of ``op`` answered after ``seconds``."""
        stats = self.of(op)
        stats.answered += count
        if count == 1:
            stats.latency.observe(seconds)
        else:
            stats.latency.observe_many(seconds, count)

    def failed(self, op: str | int) -> None:
        """One request of ``op`` answered with an error."""
        self.of(op).failed += 1


@dataclass
class BrokerStats:
    """The core's counters, which the metrics endpoint and the manhole read; cheap to bump.

    Requests are counted by the front-end that serves them (`RequestStats`).
    ``background_failures`` counts failed background work by task (``flush``,
    ``retention``, ``offsets_compaction``, ``cleaner``), one per partition that failed.
    """

    records_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    corrupt_batches: int = 0
    retention_deleted_segments: int = 0
    background_failures: dict[str, int] = field(default_factory=dict)

    @property
    def fsyncs(self) -> int:
        """fsync calls in this process (counted where they happen, in the segment)."""
        return SYNC_STATS.count

    @property
    def fsync_seconds(self) -> float:
        return SYNC_STATS.seconds


class LogLimiter:
    """Says whether an error worth logging was already logged in the last minute.

    A full disk or a corrupt batch fails every request (or every background
    pass) that touches it; one line per minute says as much as thousands.
    """

    def __init__(self, interval_s: float = ERROR_LOG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._logged_at: dict[tuple[str, ...], float] = {}

    def first_in_a_while(self, key: tuple[str, ...]) -> bool:
        now = time.monotonic()
        last = self._logged_at.get(key)
        if last is not None and now - last < self.interval_s:
            return False
        if len(self._logged_at) > 1024:
            self._logged_at.clear()
        self._logged_at[key] = now
        return True
