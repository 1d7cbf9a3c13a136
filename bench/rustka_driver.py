"""rustka side of the benchmark: one workload per process, on the Twisted client library.

Run by bench/harness.py as ``python bench/rustka_driver.py SPEC_JSON``; prints a
JSON Result. The client is the project's own (rustka.client.protocol, and
rustka.client.producer.BatchingProducer for W1 when it exists), because what a user of
rustka gets is that library, not a hand-tuned loop.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any

from twisted.internet import defer, task
from twisted.internet.defer import Deferred

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import VALUE, Clock, Result, driver_main, key_for, percentiles

from rustka.client.protocol import RustkaClientProtocol, connect
from rustka.errors import TopicExists
from rustka.record.batch import Record, encode_batch

FETCH_MAX_BYTES = 1024 * 1024
MANUAL_BATCH = 1000
MANUAL_IN_FLIGHT = 8


async def _client(reactor: Any, spec: dict[str, Any]) -> RustkaClientProtocol:
    return await connect(reactor, f"{spec['host']}:{spec['port']}")


async def _ensure_topic(client: RustkaClientProtocol, topic: str) -> None:
    with contextlib.suppress(TopicExists):
        await client.create_topic(topic, 1)


def _batching_producer() -> Any:
    """rustka.client.producer.BatchingProducer if that module is there yet, else None."""
    try:
        from rustka.client.producer import BatchingProducer
    except ImportError:
        return None
    return BatchingProducer


async def _produce_batches(client: RustkaClientProtocol, topic: str, start: int, n: int) -> int:
    """Client-side batches of MANUAL_BATCH records, MANUAL_IN_FLIGHT requests outstanding."""
    in_flight: list[Deferred[Any]] = []
    done = 0
    i = start
    end = start + n
    while i < end:
        stop = min(end, i + MANUAL_BATCH)
        batch = encode_batch([Record(key_for(j), VALUE) for j in range(i, stop)])
        in_flight.append(client.produce_batch(topic, 0, batch))
        i = stop
        if len(in_flight) >= MANUAL_IN_FLIGHT:
            first, last = await in_flight.pop(0)
            done += last - first + 1
    for d in in_flight:
        first, last = await d
        done += last - first + 1
    return done


async def w1(reactor: Any, spec: dict[str, Any]) -> Result:
    """Batched produce with the library's batching producer (or its stand-in)."""
    client = await _client(reactor, spec)
    topic = spec["name"]
    await _ensure_topic(client, topic)
    n = spec["count"]
    clock = Clock(spec["server_pid"])
    producing = _batching_producer()
    result = Result(records=n)
    if producing is not None:
        producer = producing(client)
        clock.start()
        pending = []
        for i in range(n):
            pending.append(producer.send(topic, key_for(i), VALUE))
            if producer.buffered_bytes >= producer.buffer_bytes:
                await producer.wait_for_room()
        await producer.flush()
        offsets = await defer.gatherResults(pending)
        clock.stop(result)
        result.note = "BatchingProducer (defaults)"
        result.ok = [o for _, o in offsets] == list(range(offsets[0][1], offsets[0][1] + n))
    else:
        clock.start()
        done = await _produce_batches(client, topic, 0, n)
        clock.stop(result)
        result.note = f"produce_batch x{MANUAL_BATCH}, {MANUAL_IN_FLIGHT} in flight"
        result.ok = done == n
    await client.close()
    return result


async def w1_many(reactor: Any, spec: dict[str, Any]) -> Result:
    """The BatchingProducer fed MANUAL_BATCH records per ``send_many`` call.

    The records are still routed, batched and encoded by the producer one by
    one; what it saves over ``send`` is the Deferred per record.
    """
    from rustka.client.producer import BatchingProducer

    client = await _client(reactor, spec)
    topic = spec["name"]
    await _ensure_topic(client, topic)
    n = spec["count"]
    clock = Clock(spec["server_pid"])
    result = Result(records=n)
    producer = BatchingProducer(client)
    clock.start()
    pending = []
    for i in range(0, n, MANUAL_BATCH):
        chunk = [(key_for(j), VALUE) for j in range(i, min(n, i + MANUAL_BATCH))]
        pending.append(producer.send_many(topic, chunk))
        if producer.buffered_bytes >= producer.buffer_bytes:
            await producer.wait_for_room()
    await producer.flush()
    answers = await defer.gatherResults(pending)
    clock.stop(result)
    offsets = [o for answer in answers for _, o in answer]
    result.note = f"BatchingProducer.send_many x{MANUAL_BATCH}"
    result.ok = offsets == list(range(offsets[0], offsets[0] + n))
    await client.close()
    return result


async def w1_raw(reactor: Any, spec: dict[str, Any]) -> Result:
    """Broker capacity: one pre-encoded batch sent over and over, like redis-benchmark.

    The client does no per-record work at all (the broker rewrites each copy's
    base offset; its CRC stays valid), so this shows what the broker absorbs
    when the client is not the bottleneck.
    """
    client = await _client(reactor, spec)
    topic = spec["name"]
    await _ensure_topic(client, topic)
    batch = encode_batch([Record(key_for(j), VALUE) for j in range(MANUAL_BATCH)])
    sends = spec["count"] // MANUAL_BATCH
    window = spec.get("window", 16)
    done = 0
    clock = Clock(spec["server_pid"])
    clock.start()
    in_flight: list[Deferred[Any]] = []
    for _ in range(sends):
        in_flight.append(client.produce_batch(topic, 0, batch))
        if len(in_flight) >= window:
            first, last = await in_flight.pop(0)
            done += last - first + 1
    for d in in_flight:
        first, last = await d
        done += last - first + 1
    result = clock.stop(
        Result(records=done, note=f"same {MANUAL_BATCH}-record batch, {window} in flight")
    )
    result.ok = done == sends * MANUAL_BATCH
    await client.close()
    return result


async def w2(reactor: Any, spec: dict[str, Any]) -> Result:
    """One seed Produce at a time, each waiting for its acknowledgement."""
    client = await _client(reactor, spec)
    topic = spec["name"]
    await _ensure_topic(client, topic)
    for i in range(50):  # warm the connection and the partition's lane
        await client.produce(topic, key_for(i), VALUE)
    limit = spec.get("max_seconds", 5.0)
    samples: list[int] = []
    clock = Clock(spec["server_pid"])
    clock.start()
    deadline = time.perf_counter() + limit
    ns = time.perf_counter_ns
    for i in range(spec["count"]):
        t0 = ns()
        await client.produce(topic, key_for(i), VALUE)
        samples.append(ns() - t0)
        if time.perf_counter() > deadline:
            break
    result = clock.stop(Result(records=len(samples)))
    result.p50_us, result.p99_us = percentiles(samples)
    await client.close()
    return result


async def load(reactor: Any, spec: dict[str, Any]) -> Result:
    """Fill the W3/W4 partition (not measured)."""
    client = await _client(reactor, spec)
    await _ensure_topic(client, spec["name"])
    done = await _produce_batches(client, spec["name"], 0, spec["count"])
    await client.close()
    return Result(records=done, ok=done == spec["count"])


async def w3(reactor: Any, spec: dict[str, Any]) -> Result:
    """Read a whole partition from offset 0 into a callback, one fetch always in flight."""
    client = await _client(reactor, spec)
    topic = spec["name"]
    n = spec["count"]
    seen = 0
    value_bytes = 0

    def on_record(record: Record) -> None:
        nonlocal seen, value_bytes
        seen += 1
        value_bytes += len(record.value or b"")

    clock = Clock(spec["server_pid"])
    clock.start()
    d = client.fetch_batch(topic, 0, 0, FETCH_MAX_BYTES)
    while True:
        batch = await d
        more = batch.next_offset < n
        if more:
            # Prefetch: the broker reads the next chunk while we walk this one.
            d = client.fetch_batch(topic, 0, batch.next_offset, FETCH_MAX_BYTES)
        for record in batch.records:
            on_record(record)
        if not more:
            break
    result = clock.stop(Result(records=seen))
    result.ok = seen == n and value_bytes == n * len(VALUE)
    await client.close()
    return result


async def w4(reactor: Any, spec: dict[str, Any]) -> Result:
    """Consumer group: half, commit, hang up, resume from the commit, check exactly-once delivery.

    Uses the library's prefetching Consumer, which is what an application would.
    """
    from rustka.client.consumer import Consumer

    topic = spec["name"]
    group = spec["group"]
    n = spec["count"]
    half = n // 2
    delivered: list[int] = []

    def on_batch(records: list[Record]) -> None:
        delivered.extend(r.offset for r in records)  # type: ignore[misc]

    clock = Clock(spec["server_pid"])
    clock.start()
    first = await _client(reactor, spec)
    consumer = Consumer(
        first, group, topic, 0, max_records=half, max_bytes=FETCH_MAX_BYTES, reactor=reactor
    )
    await consumer.start(on_batch)
    await first.close()

    second = await _client(reactor, spec)
    resumed = await second.committed(group, topic, 0)
    consumer = Consumer(
        second,
        group,
        topic,
        0,
        until_end=True,
        max_records=n - half,
        max_bytes=FETCH_MAX_BYTES,
        reactor=reactor,
    )
    await consumer.start(on_batch)
    final = await second.committed(group, topic, 0)
    await second.close()
    result = clock.stop(Result(records=len(delivered)))
    result.ok = delivered == list(range(n)) and resumed == half and final == n
    if result.ok:
        result.note = f"Consumer; resumed at {resumed}, no gap, no duplicate"
    else:
        result.note = (
            f"delivered {len(delivered)} of {n}, resumed at {resumed}, final commit {final}: "
            "gap or duplicate"
        )
    return result


async def w5(reactor: Any, spec: dict[str, Any]) -> Result:
    """Seed op-1 Produce, pipelined: many connections, a window of requests in flight on each."""
    conns = spec.get("connections", 16)
    window = spec.get("window", 256)
    topic = spec["name"]
    clients = [await _client(reactor, spec) for _ in range(conns)]
    await _ensure_topic(clients[0], topic)
    per_conn = spec["count"] // conns
    acked = 0

    async def run(client: RustkaClientProtocol, base: int) -> None:
        nonlocal acked
        in_flight: list[Deferred[Any]] = []
        for i in range(base, base + per_conn):
            in_flight.append(client.produce(topic, key_for(i), VALUE))
            if len(in_flight) >= window:
                # Wait for half the window, so the pipe never drains.
                for d in in_flight[: window // 2]:
                    await d
                    acked += 1
                del in_flight[: window // 2]
        for d in in_flight:
            await d
            acked += 1

    clock = Clock(spec["server_pid"])
    clock.start()
    await defer.gatherResults(
        [Deferred.fromCoroutine(run(c, k * per_conn)) for k, c in enumerate(clients)]
    )
    result = clock.stop(Result(records=acked))
    result.ok = acked == per_conn * conns
    result.note = f"{conns} connections x {window} in flight"
    for c in clients:
        await c.close()
    return result


WORKLOADS = {
    "W1": w1,
    "W1-many": w1_many,
    "W1-raw": w1_raw,
    "W2": w2,
    "W3": w3,
    "W4": w4,
    "W5": w5,
    "LOAD": load,
}


def run(spec: dict[str, Any]) -> Result:
    box: dict[str, Result] = {}

    async def main(reactor: Any) -> None:
        try:
            box["result"] = await WORKLOADS[spec["workload"]](reactor, spec)
        except Exception as exc:  # reported as a failed row by the harness
            box["result"] = Result(ok=False, note=f"{type(exc).__name__}: {exc}")

    with contextlib.suppress(SystemExit):
        task.react(lambda reactor: Deferred.fromCoroutine(main(reactor)))
    return box.get("result") or Result(ok=False, note="the reactor stopped without a result")


if __name__ == "__main__":
    driver_main(run)
