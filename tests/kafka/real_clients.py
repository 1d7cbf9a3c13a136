"""Blocking drivers for the real Kafka clients the suite runs against rustka.

Each function runs one client to completion and returns what it read or was
told, so a test can run it in a thread (`threads.deferToThread`) while the
reactor serves the broker in the test's own thread. Nothing here imitates a
client: these are confluent-kafka (librdkafka 2.x), kafka-python, aiokafka and
Debian's kcat (librdkafka 2.0).
"""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

Record = tuple[bytes | None, bytes | None]

#: kcat and librdkafka log to stderr; keep their retries short so failures are fast.
_RDKAFKA_QUICK = {"socket.timeout.ms": 10000, "message.timeout.ms": 15000}


def confluent_produce(
    bootstrap: str,
    topic: str,
    records: list[Record],
    partition: int = 0,
    *,
    spread: int = 1,
    **conf: Any,
) -> list[tuple[int, int]]:
    """Produce with confluent-kafka, record i to partition ``partition + i % spread``;
    return (partition, offset) per delivered record."""
    from confluent_kafka import Producer

    settings = {"bootstrap.servers": bootstrap, **_RDKAFKA_QUICK, **conf}
    producer = Producer(settings)
    delivered: list[tuple[int, int]] = []
    failures: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            delivered.append((msg.partition(), msg.offset()))

    for i, (key, value) in enumerate(records):
        where = partition + i % spread
        producer.produce(topic, value=value, key=key, partition=where, on_delivery=report)
    left = producer.flush(30)
    if left or failures:
        raise AssertionError(f"confluent-kafka: {left} undelivered, errors {failures[:3]}")
    return delivered


def confluent_read(
    bootstrap: str, topic: str, partition: int, count: int, offset: int = 0
) -> list[tuple[int, bytes | None, bytes | None]]:
    """Read ``count`` records by assignment from ``offset`` with confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "rustka-test-assign",
            "enable.auto.commit": False,
            **{k: v for k, v in _RDKAFKA_QUICK.items() if k != "message.timeout.ms"},
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        polls = 0
        while len(out) < count and polls < 200:
            polls += 1
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                raise AssertionError(f"confluent-kafka consumer: {msg.error()}")
            out.append((msg.offset(), msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def confluent_read_all(
    bootstrap: str, topic: str, partitions: int, count: int, **conf: Any
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Read ``count`` records from every partition of ``topic`` at once, by assignment
    from offset 0, with confluent-kafka (one Fetch asks for all of them); returns
    (partition, offset, key, value) in the order they were consumed."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "rustka-test-assign",
            "enable.auto.commit": False,
            **{k: v for k, v in _RDKAFKA_QUICK.items() if k != "message.timeout.ms"},
            **conf,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[tuple[int, int, bytes | None, bytes | None]] = []
        polls = 0
        while len(out) < count and polls < 600:
            polls += 1
            for msg in consumer.consume(1000, 0.2):
                if msg.error():
                    raise AssertionError(f"confluent-kafka consumer: {msg.error()}")
                out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def confluent_committed(
    bootstrap: str, group: str, topic: str, partitions: int = 1, **conf: Any
) -> list[int]:
    """The group's committed offsets of the topic's partitions, as a confluent-kafka
    consumer reads them (OffsetFetch; -1001 where nothing is committed). A partition
    that comes back with an error fails."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **conf})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 60)
        for tp in tps:
            if tp.error is not None:
                raise AssertionError(f"committed offset of {topic}-{tp.partition}: {tp.error}")
        return [int(tp.offset) for tp in tps]
    finally:
        consumer.close()


def kafka_python_produce(
    bootstrap: str, topic: str, records: list[Record], partition: int = 0, **conf: Any
) -> list[tuple[int, int]]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, **conf)
    try:
        futures = [
            producer.send(topic, key=key, value=value, partition=partition)
            for key, value in records
        ]
        producer.flush(30)
        return [(m.partition, m.offset) for m in (f.get(timeout=30) for f in futures)]
    finally:
        producer.close(5)


def kafka_python_read(
    bootstrap: str, topic: str, partition: int, count: int, offset: int = 0
) -> list[tuple[int, bytes | None, bytes | None]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, offset)
        out: list[tuple[int, bytes | None, bytes | None]] = []
        polls = 0
        while len(out) < count and polls < 100:
            polls += 1
            for batch in consumer.poll(timeout_ms=200).values():
                out.extend((m.offset, m.key, m.value) for m in batch)
        return out
    finally:
        consumer.close()


def aiokafka_produce(
    bootstrap: str, topic: str, records: list[Record], partition: int = 0, **conf: Any
) -> list[tuple[int, int]]:
    async def run() -> list[tuple[int, int]]:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **conf)
        await producer.start()
        try:
            out = []
            for key, value in records:
                meta = await producer.send_and_wait(
                    topic, value=value, key=key, partition=partition
                )
                out.append((meta.partition, meta.offset))
            return out
        finally:
            await producer.stop()

    return asyncio.run(run())


def aiokafka_read(
    bootstrap: str, topic: str, partition: int, count: int, offset: int = 0
) -> list[tuple[int, bytes | None, bytes | None]]:
    async def run() -> list[tuple[int, bytes | None, bytes | None]]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, offset)
            out: list[tuple[int, bytes | None, bytes | None]] = []
            polls = 0
            while len(out) < count and polls < 100:
                polls += 1
                got = await consumer.getmany(tp, timeout_ms=200)
                out.extend((m.offset, m.key, m.value) for m in got.get(tp, []))
            return out
        finally:
            await consumer.stop()

    return asyncio.run(run())


def kcat(*args: str, stdin: bytes | None = None, timeout: float = 60) -> str:
    """Run Debian's kcat; fail the test with its stderr if it exits non-zero."""
    done = subprocess.run(
        ["kcat", *args], input=stdin, capture_output=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"kcat {' '.join(args)} exited {done.returncode}: {done.stderr!r}")
    return done.stdout.decode()
