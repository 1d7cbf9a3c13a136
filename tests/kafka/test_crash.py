"""kill -9 in the middle of an idempotent Kafka producer's stream: no duplicate, no gap.

A real `twistd rustka` process serves confluent-kafka (librdkafka) producing with
`enable.idempotence=true` and `acks=all` from a thread. Once part of the stream
is acknowledged the broker is SIGKILLed with batches in flight and restarted on
the same port and data dir; librdkafka retries what it had not got answers for,
with the same producer id and sequences, and the broker recognises the batches
it already stored from the idempotence state it rebuilt from the log
(docs/kafka.md, "Idempotent producers"). Reading everything back then shows
each acknowledged record exactly once, at the offset its acknowledgement gave,
with contiguous offsets and each partition's values in the order they were sent.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from rustka.native import codec as p
from rustka.storage.inspect import dump_path
from tools.twistd_process import STORAGE_READY, Twistd, start_broker
from tools.wire import SyncClient

pytestmark = pytest.mark.system

TOPIC = "crash-idem"
PARTITIONS = 2
RECORDS = 6000
#: Acknowledged records before the kill: far enough in that the stream is running.
KILL_AFTER = 1500


class IdempotentProducer(threading.Thread):
    """confluent-kafka producing RECORDS values, round-robin over the partitions."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failures: list[str] = []
        self.undelivered = -1
        self.enough = threading.Event()
        self.done = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "message.send.max.retries": 1_000_000,
                "retry.backoff.ms": 50,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 300,
                "message.timeout.ms": 60_000,
                "socket.timeout.ms": 10_000,
                # Small batches, so the stream is many requests long and the kill lands
                # between some of them.
                "batch.num.messages": 50,
                "linger.ms": 2,
            }
        )

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                self.failures.append(str(err))
                return
            self.acked[msg.value()] = (msg.partition(), msg.offset())
            if len(self.acked) >= KILL_AFTER:
                self.enough.set()

        try:
            for i in range(RECORDS):
                while True:
                    try:
                        producer.produce(
                            TOPIC, value=b"v%06d" % i, partition=i % PARTITIONS, on_delivery=report
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)
                producer.poll(0)
            self.undelivered = producer.flush(90)
        finally:
            self.enough.set()
            self.done.set()


def stored_records(data_dir: Path) -> int:
    """Records with a good CRC in the topic's segments, read offline (`rustka dump`)."""
    total = 0
    for segment in sorted(data_dir.glob(f"{TOPIC}/*/*.log")):
        for batch in dump_path(segment)["batches"]:
            if batch["crc_ok"]:
                total += batch["record_count"]
    return total


def read_partition(
    bootstrap: str, partition: int, count: int
) -> tuple[list[tuple[int, bytes | None, bytes | None]], int]:
    """Every record of a partition from offset 0 (up to ``count``) and its high watermark."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "crash-check", "enable.auto.commit": False}
    )
    got: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(TOPIC, partition, 0)])
        for _ in range(100):
            if len(got) >= count:
                break
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error():
                    raise AssertionError(f"confluent-kafka consumer: {msg.error()}")
                got.append((msg.offset(), msg.key(), msg.value()))
        _low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=15)
    finally:
        consumer.close()
    return got, high


def test_sigkill_mid_idempotent_produce_leaves_no_duplicate_and_no_gap(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    broker = start_broker(data_dir)
    restarted: Twistd | None = None
    try:
        port = broker.port
        assert port is not None
        admin = SyncClient("127.0.0.1", port)
        assert type(admin.call(p.CreateTopic(TOPIC, PARTITIONS))) is p.TopicInfo
        admin.close()
        producer = IdempotentProducer(f"127.0.0.1:{port}")
        producer.start()
        assert producer.enough.wait(30), "the producer got no acknowledgements"
        acked_before_kill = len(producer.acked)
        broker.kill()
        assert acked_before_kill < RECORDS, "the stream had finished before the kill"
        # Stored but never acknowledged: what the producer must resend and the broker
        # must recognise (reported; how many depends on where the kill landed).
        stored_at_kill = stored_records(data_dir)
        assert stored_at_kill >= acked_before_kill
        restarted = Twistd(
            ["--data-dir", str(data_dir), "--listen", f"tcp:{port}:interface=127.0.0.1"]
        )
        restarted.wait_for(STORAGE_READY, 30)
        assert restarted.wait_port(30) == port
        assert producer.done.wait(120), "the producer never finished"
        producer.join(10)
        assert producer.failures == []
        assert producer.undelivered == 0
        assert len(producer.acked) == RECORDS
        for partition in range(PARTITIONS):
            sent = [b"v%06d" % i for i in range(partition, RECORDS, PARTITIONS)]
            got, high = read_partition(f"127.0.0.1:{port}", partition, len(sent))
            assert high == len(sent), "the log holds more records than were sent"
            offsets = [offset for offset, _, _ in got]
            values = [value for _, _, value in got]
            assert offsets == list(range(len(got))), "offsets are not contiguous"
            assert len(set(values)) == len(values), "a record was stored twice"
            assert values == sent, "a record is missing or out of order"
            for offset, _, value in got:
                assert producer.acked[value] == (partition, offset)
        assert restarted.logged("unclean shutdown detected")
        print(
            f"acknowledged before the kill: {acked_before_kill} of {RECORDS}; "
            f"on disk at the kill: {stored_at_kill}; after: {RECORDS}"
        )
    finally:
        if broker.proc.poll() is None:
            broker.kill()
        if restarted is not None:
            restarted.stop()
