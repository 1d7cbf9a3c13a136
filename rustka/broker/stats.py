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


@dataclass
class BrokerStats:
    """Counters the metrics endpoint and the manhole read; cheap to bump.

    ``requests``/``completed``/``errors``/``latency`` are keyed by the operation
    name a front-end chooses (the native one uses its message names).
    ``background_failures`` counts failed background work by task (``flush``,
    ``retention``, ``offsets_compaction``, ``cleaner``), one per partition that failed.
    """

    requests: dict[str, int] = field(default_factory=dict)
    completed: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    latency: dict[str, LatencyHistogram] = field(default_factory=dict)
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

    def answered(self, name: str, seconds: float, count: int = 1) -> None:
        """``count`` requests of ``name`` completed after ``seconds``."""
        self.completed[name] = self.completed.get(name, 0) + count
        histogram = self.latency.get(name)
        if histogram is None:
            histogram = self.latency[name] = LatencyHistogram()
        if count == 1:
            histogram.observe(seconds)
        else:
            histogram.observe_many(seconds, count)


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
