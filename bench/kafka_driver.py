"""Kafka-protocol side of the benchmark: one workload per process, on confluent-kafka.

Run by bench/harness.py as ``python bench/kafka_driver.py SPEC_JSON``; prints a
JSON Result. Every Kafka-speaking system (rustka's Kafka front-end, Tansu) is
driven by this one file with the same client settings (``PRODUCER`` and
``CONSUMER`` below), so the only thing that differs between rows is the broker.

confluent-kafka wraps librdkafka, Kafka's own C client: unlike the Python
clients, it does not hide the broker behind its per-record cost (see
docs/performance.md, "Kafka protocol").

Workloads (spec["workload"]):

- ``K1`` produce ``count`` records (16-byte key, 100-byte value) to partition 0,
  acks=all; every 1000th record's offset checked against the first's.
- ``K1T`` K1 from a transactional producer (``transactional.id``, so idempotent),
  committing a transaction every ``TXN_EVERY`` records (docs/kafka.md, "Transactions").
- ``K2`` one record at a time, ``flush()`` after each produce; p50/p99 latency.
- ``K3`` read ``count`` records from offset 0 by assignment; every offset once, in order.
- ``K4`` group consume with commits: half with one consumer (``subscribe``,
  commits every ``COMMIT_EVERY`` records), close, resume with a new consumer in
  the same group; counts gaps and duplicates over the offsets delivered.
- ``LOAD`` fill the K3/K4 topic with K1's producer (not measured).
- ``PROBE`` does this port answer Kafka Metadata at all (before any round).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import VALUE, Clock, Result, driver_main, key_for, percentiles

# One set of client settings for every Kafka-speaking system, tuned once:
# batches of up to 1 MiB with 5 ms linger, no compression (the value would not
# compress anyway), every acknowledgement after the broker's full commit.
PRODUCER: dict[str, Any] = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1024 * 1024,
    "compression.type": "none",
    "enable.idempotence": False,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 1024 * 1024,
    "message.max.bytes": 4 * 1024 * 1024,
}
# A delivery callback on every SAMPLE_EVERY-th record (and the last) only: one
# Python callback per record would measure the binding, not the broker. The
# sampled offsets must be base + i, so a lost or duplicated record shows. (Not
# the high watermark: Tansu 0.6 reports the last batch's base offset as it.)
SAMPLE_EVERY = 1000
CONSUMER: dict[str, Any] = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "fetch.max.bytes": 4 * 1024 * 1024,
    "max.partition.fetch.bytes": 1024 * 1024,
    "fetch.wait.max.ms": 100,
    "queued.min.messages": 200_000,
    # Kafka's smallest default group.min.session.timeout.ms. Tansu 0.6 holds a
    # JoinGroup for about half the session timeout, so the 45 s default made K4
    # a 47 s wait; 6 s is a setting a real Kafka cluster accepts too.
    "session.timeout.ms": 6000,
}
TXN_EVERY = 1000
CONSUME_BATCH = 10_000
COMMIT_EVERY = 10_000
TIMEOUT = 60.0


def _bootstrap(spec: dict[str, Any]) -> str:
    return f"{spec['host']}:{spec['port']}"


def _ensure_topic(spec: dict[str, Any], topic: str) -> None:
    """One partition, like the native workloads; an existing topic is fine."""
    admin = AdminClient({"bootstrap.servers": _bootstrap(spec)})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    try:
        futures[topic].result(TIMEOUT)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


class _Deliveries:
    """Offsets of the sampled records (index -> offset) and every failure among them."""

    def __init__(self) -> None:
        self.offsets: dict[int, int] = {}
        self.errors = 0
        self.first_error = ""

    def callback(self, index: int) -> Any:
        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self.errors += 1
                self.first_error = self.first_error or str(err)
            else:
                self.offsets[index] = msg.offset()

        return delivered

    def check(self, start: int, n: int) -> str:
        """'' if every sampled record landed at base + its index, else what went wrong."""
        if self.errors:
            return f"{self.errors} sampled records failed: {self.first_error}"
        indexes = sorted(i for i in self.offsets if start <= i < start + n)
        if not indexes or indexes[-1] != start + n - 1:
            return "the last record was never acknowledged"
        base = self.offsets[indexes[0]] - indexes[0]
        wrong = [i for i in indexes if self.offsets[i] != base + i]
        if wrong:
            i = wrong[0]
            return f"record {i} at offset {self.offsets[i]}, expected {base + i}: gap or duplicate"
        return ""


def _produce(producer: Producer, topic: str, start: int, n: int, seen: _Deliveries) -> None:
    """Queue ``n`` records, serving callbacks when librdkafka's queue is full, then flush."""
    produce = producer.produce
    last = start + n - 1
    for i in range(start, start + n):
        callback = seen.callback(i) if i % SAMPLE_EVERY == 0 or i == last else None
        while True:
            try:
                if callback is None:
                    produce(topic, VALUE, key_for(i), 0)
                else:
                    produce(topic, VALUE, key_for(i), 0, callback)
                break
            except BufferError:
                producer.poll(0.001)
    left = producer.flush(TIMEOUT)
    if left:
        raise RuntimeError(f"{left} records still undelivered after {TIMEOUT} s")


def _producer(spec: dict[str, Any]) -> Producer:
    return Producer({"bootstrap.servers": _bootstrap(spec), **PRODUCER})


def k1(spec: dict[str, Any]) -> Result:
    """Throughput of acks=all produce with the shared batching settings."""
    topic = spec["name"]
    n = spec["count"]
    _ensure_topic(spec, topic)
    seen = _Deliveries()
    producer = _producer(spec)
    producer.list_topics(topic, TIMEOUT)  # connect and learn the leader before the clock
    clock = Clock(spec["server_pid"])
    clock.start()
    _produce(producer, topic, 0, n, seen)
    result = clock.stop(Result(records=n))
    problem = seen.check(0, n)
    result.ok = not problem
    result.note = problem or "linger 5 ms, batch 1 MiB, acks=all"
    return result


def k1t(spec: dict[str, Any]) -> Result:
    """K1 in transactions of TXN_EVERY records each, every one committed."""
    topic = spec["name"]
    n = spec["count"]
    _ensure_topic(spec, topic)
    seen = _Deliveries()
    settings = {**PRODUCER, "enable.idempotence": True, "transactional.id": f"bench-{topic}"}
    producer = Producer({"bootstrap.servers": _bootstrap(spec), **settings})
    producer.init_transactions(TIMEOUT)
    producer.list_topics(topic, TIMEOUT)
    clock = Clock(spec["server_pid"])
    clock.start()
    done = 0
    while done < n:
        size = min(TXN_EVERY, n - done)
        producer.begin_transaction()
        produce = producer.produce
        for i in range(done, done + size):
            last = i == done + size - 1
            callback = seen.callback(i) if i % SAMPLE_EVERY == 0 or last else None
            while True:
                try:
                    if callback is None:
                        produce(topic, VALUE, key_for(i), 0)
                    else:
                        produce(topic, VALUE, key_for(i), 0, callback)
                    break
                except BufferError:
                    producer.poll(0.001)
        producer.commit_transaction(TIMEOUT)
        done += size
    result = clock.stop(Result(records=n))
    # Each commit adds a marker offset, so offsets are not base + i: check the count.
    problem = "" if not seen.errors else f"{seen.errors} sampled records failed"
    result.ok = not problem
    result.note = problem or f"transactions of {TXN_EVERY}, linger 5 ms, acks=all"
    return result


def k2(spec: dict[str, Any]) -> Result:
    """Latency: one record, flush, the next; flush returns once the record is acknowledged."""
    topic = spec["name"]
    _ensure_topic(spec, topic)
    seen = _Deliveries()
    producer = _producer(spec)
    for i in range(50):  # warm the connection and the partition
        producer.produce(topic, VALUE, key_for(i), 0)
        producer.flush(TIMEOUT)
    limit = spec.get("max_seconds", 5.0)
    samples: list[int] = []
    ns = time.perf_counter_ns
    clock = Clock(spec["server_pid"])
    clock.start()
    deadline = time.perf_counter() + limit
    for i in range(spec["count"]):
        t0 = ns()
        producer.produce(topic, VALUE, key_for(i), 0, seen.callback(i))
        if producer.flush(TIMEOUT):
            raise RuntimeError("a record was not acknowledged in time")
        samples.append(ns() - t0)
        if time.perf_counter() > deadline:
            break
    result = clock.stop(Result(records=len(samples)))
    result.p50_us, result.p99_us = percentiles(samples)
    problem = seen.check(0, len(samples))
    result.ok = not problem
    result.note = problem or "produce + flush per record"
    return result


def load(spec: dict[str, Any]) -> Result:
    """Fill the K3/K4 topic with K1's producer and settings (not measured)."""
    topic = spec["name"]
    _ensure_topic(spec, topic)
    seen = _Deliveries()
    _produce(_producer(spec), topic, 0, spec["count"], seen)
    problem = seen.check(0, spec["count"])
    return Result(records=spec["count"], ok=not problem, note=problem)


def _consumer(spec: dict[str, Any], group: str) -> Consumer:
    return Consumer({"bootstrap.servers": _bootstrap(spec), "group.id": group, **CONSUMER})


def _consume(consumer: Consumer, on_messages: Any, done: Any) -> int:
    """Consume batches into ``on_messages`` until ``done()``; returns the records seen."""
    seen = 0
    deadline = time.monotonic() + TIMEOUT
    while not done():
        batch = consumer.consume(CONSUME_BATCH, 1.0)
        if not batch:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no records for {TIMEOUT} s after {seen}")
            continue
        deadline = time.monotonic() + TIMEOUT
        good = []
        for m in batch:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(err)
            good.append(m)
        seen += len(good)
        on_messages(good)
    return seen


def k3(spec: dict[str, Any]) -> Result:
    """Read the whole partition from offset 0 by assignment, touching every value."""
    topic = spec["name"]
    n = spec["count"]
    consumer = _consumer(spec, f"bench-k3-{spec.get('group', 'x')}")
    expected = 0
    value_bytes = 0
    out_of_order = 0

    def check(messages: list[Any]) -> None:
        nonlocal expected, value_bytes, out_of_order
        for m in messages:
            if m.offset() != expected:
                out_of_order += 1
            expected = m.offset() + 1
            value_bytes += len(m.value())

    clock = Clock(spec["server_pid"])
    clock.start()
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = _consume(consumer, check, lambda: expected >= n)
    result = clock.stop(Result(records=seen))
    consumer.close()
    result.ok = seen == n and out_of_order == 0 and value_bytes == n * len(VALUE)
    result.note = "assign from 0" if result.ok else f"{out_of_order} offsets out of order"
    return result


def k4(spec: dict[str, Any]) -> Result:
    """Group consume with commits, stop halfway, resume in the same group; gaps and duplicates.

    The first consumer processes offsets 0..half-1 (records fetched beyond that
    are not processed), commits ``half`` and closes; the second, a new consumer
    in the same group, starts wherever the group's commit says. What was
    delivered across both must be exactly 0..n-1 once each.
    """
    topic = spec["name"]
    group = spec["group"]
    n = spec["count"]
    half = n // 2
    delivered: list[int] = []
    joins: list[float] = []  # seconds from subscribe to the first records, per consumer
    tp = TopicPartition(topic, 0)

    def run(consumer: Consumer, upto: int) -> None:
        """Process offsets below ``upto``, committing as it goes, then commit ``upto`` and close."""
        since_commit = 0
        last = -1
        subscribed = time.perf_counter()

        def process(messages: list[Any]) -> None:
            nonlocal since_commit, last
            if last < 0:
                joins.append(time.perf_counter() - subscribed)
            for m in messages:
                offset = m.offset()
                last = max(last, offset)
                if offset < upto:
                    delivered.append(offset)
            since_commit += len(messages)
            if since_commit >= COMMIT_EVERY and delivered:
                since_commit = 0
                position = min(last + 1, upto)
                consumer.commit(offsets=[TopicPartition(topic, 0, position)], asynchronous=True)

        consumer.subscribe([topic])
        _consume(consumer, process, lambda: last >= upto - 1)
        consumer.commit(offsets=[TopicPartition(topic, 0, upto)], asynchronous=False)
        consumer.close()

    clock = Clock(spec["server_pid"])
    clock.start()
    run(_consumer(spec, group), half)
    second = _consumer(spec, group)
    resumed = second.committed([tp], TIMEOUT)[0].offset
    run(second, n)
    result = clock.stop(Result(records=len(delivered)))
    check = _consumer(spec, group)
    final = check.committed([tp], TIMEOUT)[0].offset
    check.close()
    unique = set(delivered)
    duplicates = len(delivered) - len(unique)
    gaps = len(set(range(n)) - unique)
    result.extra = {
        "gaps": gaps,
        "duplicates": duplicates,
        "resumed": resumed,
        "final": final,
        "join_seconds": joins,
    }
    result.ok = gaps == 0 and duplicates == 0 and resumed == half and final == n
    result.note = (
        f"resumed at {resumed}, gaps {gaps}, dups {duplicates}; "
        f"joins {' + '.join(f'{j:.1f}' for j in joins)} s"
    )
    return result


def probe(spec: dict[str, Any]) -> Result:
    """Does this port speak Kafka? Metadata within a few seconds, or a failed row saying so."""
    admin = AdminClient({"bootstrap.servers": _bootstrap(spec)})
    meta = admin.list_topics(timeout=spec.get("timeout", 10.0))
    return Result(ok=bool(meta.brokers), note=f"{len(meta.brokers)} broker(s)")


WORKLOADS = {"K1": k1, "K1T": k1t, "K2": k2, "K3": k3, "K4": k4, "LOAD": load, "PROBE": probe}


def run(spec: dict[str, Any]) -> Result:
    return WORKLOADS[spec["workload"]](spec)


if __name__ == "__main__":
    driver_main(run)
