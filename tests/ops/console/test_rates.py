"""The ring of samples behind the console's charts, against a live broker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest_twisted

from rustka.ops.console.rates import RateSampler
from tests.conftest import within


@pytest_twisted.ensureDeferred
async def test_rates_are_differences_over_a_bounded_ring(
    broker_factory: Callable[..., Any],
) -> None:
    from twisted.internet import reactor

    broker = await broker_factory(default_partitions=1)
    try:
        now = [1000.0]
        sampler = RateSampler(broker.broker, reactor, interval_s=5, size=3, clock=lambda: now[0])
        sampler.sample()
        client = await broker.client()
        try:
            for _ in range(10):
                await within(client.produce("rated", b"k", b"v"))
            await within(client.commit("g", "rated", 0, 4))
        finally:
            await client.close()
        now[0] += 2
        sampler.sample()
        [point] = sampler.broker_rates()
        assert point["t"] == 1002.0 and point["records_in"] == 5.0 and point["bytes_in"] > 0
        assert sampler.topic_rates("rated") == [{"t": 1002.0, "records_in": 5.0}]
        assert sampler.latest_topic_rate("rated") == 5.0
        assert sampler.group_lag("g")[-1] == {"t": 1002.0, "lag": 6}
        for _ in range(10):
            now[0] += 1
            sampler.sample()
        assert len(sampler.samples) == 4, "the ring keeps size + 1 samples, whatever the uptime"
        assert len(sampler.broker_rates()) == 3
        assert sampler.broker_rates()[-1]["records_in"] == 0.0
        assert sampler.topic_rates("nosuch") == [] and sampler.latest_topic_rate("nosuch") == 0.0
    finally:
        await broker.stop()
