"""Produce and fetch rates, topic growth and group lag over the last minutes.

The broker keeps only running totals (`BrokerStats`, the logs' end offsets, the
committed offsets); the charts want rates over time. A `RateSampler` reads the
totals every few seconds into a fixed ring (a deque with ``maxlen``), so memory is
bounded whatever the uptime, and the rates are differences between neighbouring
samples. Sampling is a walk over in-memory numbers in the reactor thread, cheap
next to the interval.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.application import service
from twisted.internet import task

DEFAULT_INTERVAL_S = 5.0
DEFAULT_SAMPLES = 120
"""Ten minutes at the default interval."""


@dataclass(frozen=True, slots=True)
class Sample:
    t: float
    records_in: int
    bytes_in: int
    bytes_out: int
    topic_ends: dict[str, int]
    group_lags: dict[str, int]


def take_sample(broker: Any, now: float) -> Sample:
    """The broker's totals now; topics and groups only once the storage is open."""
    stats = broker.stats
    ends: dict[str, int] = {}
    lags: dict[str, int] = {}
    logs = broker.logs
    if logs is not None and broker.offsets is not None:
        for name, topic in logs.topics.items():
            ends[name] = sum(plog.end_offset for plog in topic.partitions)
        for group in broker.offsets.groups():
            lags[group] = sum(entry.lag for entry in broker.group_offsets(group))
    return Sample(now, stats.records_in, stats.bytes_in, stats.bytes_out, ends, lags)


def _per_second(later: int, earlier: int, seconds: float) -> float:
    return max(0, later - earlier) / seconds if seconds > 0 else 0.0


class RateSampler(service.Service):
    """The ring of samples, filled by a LoopingCall while the service runs."""

    def __init__(
        self,
        broker: Any,
        reactor: Any,
        interval_s: float = DEFAULT_INTERVAL_S,
        size: int = DEFAULT_SAMPLES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.broker = broker
        self.interval_s = interval_s
        self.samples: deque[Sample] = deque(maxlen=size + 1)
        self._clock = clock
        self._loop = task.LoopingCall(self.sample)
        self._loop.clock = reactor

    def startService(self) -> None:
        super().startService()
        self._loop.start(self.interval_s, now=True)

    def stopService(self) -> None:
        super().stopService()
        if self._loop.running:
            self._loop.stop()

    def sample(self) -> None:
        self.samples.append(take_sample(self.broker, self._clock()))

    def _pairs(self) -> list[tuple[Sample, Sample]]:
        samples = list(self.samples)
        return list(itertools.pairwise(samples))

    def broker_rates(self) -> list[dict[str, float]]:
        """Records and bytes in, bytes out, per second, one point per interval."""
        return [
            {
                "t": b.t,
                "records_in": _per_second(b.records_in, a.records_in, b.t - a.t),
                "bytes_in": _per_second(b.bytes_in, a.bytes_in, b.t - a.t),
                "bytes_out": _per_second(b.bytes_out, a.bytes_out, b.t - a.t),
            }
            for a, b in self._pairs()
        ]

    def topic_rates(self, name: str) -> list[dict[str, float]]:
        """Records appended to one topic per second (from its end offsets)."""
        return [
            {
                "t": b.t,
                "records_in": _per_second(
                    b.topic_ends.get(name, 0), a.topic_ends.get(name, 0), b.t - a.t
                ),
            }
            for a, b in self._pairs()
            if name in b.topic_ends
        ]

    def latest_topic_rate(self, name: str) -> float:
        rates = self.topic_rates(name)
        return rates[-1]["records_in"] if rates else 0.0

    def group_lag(self, group: str) -> list[dict[str, float]]:
        """A group's total lag at each sample."""
        return [
            {"t": s.t, "lag": s.group_lags[group]} for s in self.samples if group in s.group_lags
        ]
