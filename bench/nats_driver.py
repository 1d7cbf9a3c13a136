"""NATS JetStream side of the benchmark, with nats-py (asyncio), file storage.

A record is one message whose payload is the 16-byte key followed by the
100-byte value, published on the stream's subject. Run as
``python bench/nats_driver.py SPEC_JSON``; prints a JSON Result.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import VALUE, Clock, Result, driver_main, key_for, percentiles

MAX_PENDING = 4000
FETCH_BATCH = 1000


async def _connect(spec: dict[str, Any]) -> tuple[Any, Any]:
    import nats

    nc = await nats.connect(f"nats://{spec['host']}:{spec['port']}")
    js = nc.jetstream(publish_async_max_pending=MAX_PENDING)
    return nc, js


async def _fresh_stream(js: Any, name: str) -> str:
    from nats.js.api import StorageType

    # Deleting first makes every run start empty; the stream may well not exist yet.
    with contextlib.suppress(Exception):
        await js.delete_stream(name)
    await js.add_stream(name=name, subjects=[f"{name}.data"], storage=StorageType.FILE)
    return f"{name}.data"


async def _publish_async(js: Any, subject: str, n: int) -> None:
    for i in range(n):
        await js.publish_async(subject, key_for(i) + VALUE)
    await js.publish_async_completed()


async def w1(spec: dict[str, Any]) -> Result:
    """Async publish: up to MAX_PENDING unacknowledged publishes in flight."""
    nc, js = await _connect(spec)
    subject = await _fresh_stream(js, spec["name"])
    clock = Clock(spec["server_pid"])
    clock.start()
    await _publish_async(js, subject, spec["count"])
    result = clock.stop(Result(records=spec["count"], note=f"publish_async, {MAX_PENDING} pending"))
    info = await js.stream_info(spec["name"])
    result.ok = info.state.messages == spec["count"]
    await js.delete_stream(spec["name"])
    await nc.close()
    return result


async def w2(spec: dict[str, Any]) -> Result:
    """Synchronous publish: one message, wait for its PubAck, repeat."""
    nc, js = await _connect(spec)
    subject = await _fresh_stream(js, spec["name"])
    for i in range(50):
        await js.publish(subject, key_for(i) + VALUE)
    samples: list[int] = []
    ns = time.perf_counter_ns
    clock = Clock(spec["server_pid"])
    clock.start()
    deadline = time.perf_counter() + spec.get("max_seconds", 5.0)
    for i in range(spec["count"]):
        t0 = ns()
        await js.publish(subject, key_for(i) + VALUE)
        samples.append(ns() - t0)
        if time.perf_counter() > deadline:
            break
    result = clock.stop(Result(records=len(samples)))
    result.p50_us, result.p99_us = percentiles(samples)
    await js.delete_stream(spec["name"])
    await nc.close()
    return result


async def load(spec: dict[str, Any]) -> Result:
    nc, js = await _connect(spec)
    subject = await _fresh_stream(js, spec["name"])
    await _publish_async(js, subject, spec["count"])
    info = await js.stream_info(spec["name"])
    await nc.close()
    return Result(records=spec["count"], ok=info.state.messages == spec["count"])


async def w3(spec: dict[str, Any]) -> Result:
    """Pull consumer from the first message, fetch(FETCH_BATCH) into a callback."""
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    nc, js = await _connect(spec)
    n = spec["count"]
    seen = 0
    value_bytes = 0

    def on_record(data: bytes) -> None:
        nonlocal seen, value_bytes
        seen += 1
        value_bytes += len(data) - 16

    config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE)
    sub = await js.pull_subscribe(
        f"{spec['name']}.data", durable=spec["group"], stream=spec["name"], config=config
    )
    clock = Clock(spec["server_pid"])
    clock.start()
    while seen < n:
        msgs = await sub.fetch(min(FETCH_BATCH, n - seen), timeout=5)
        for msg in msgs:
            on_record(msg.data)
    result = clock.stop(Result(records=seen, note=f"pull fetch {FETCH_BATCH}, no acks"))
    result.ok = seen == n and value_bytes == n * len(VALUE)
    await sub.unsubscribe()
    await nc.close()
    return result


WORKLOADS = {"W1": w1, "W2": w2, "W3": w3, "LOAD": load}


def run(spec: dict[str, Any]) -> Result:
    return asyncio.run(WORKLOADS[spec["workload"]](spec))


if __name__ == "__main__":
    driver_main(run)
