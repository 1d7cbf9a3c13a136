"""Diskless topics when the catalog goes away under load: produces fail with a
retriable error while it is down, nothing acknowledged is lost, nothing is stored
twice, and offsets stay contiguous (docs/diskless.md, "Produce")."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from tests.conftest import RunningBroker, reactor_turns, start_broker, within
from tests.diskless.test_diskless_clients import create_topic, diskless_settings
from tests.kafka import real_clients as rc
from tests.services.postgres import PostgresServer
from tests.services.seaweed import S3Place, S3Server

pytestmark = pytest.mark.clients

COUNT = 3000


class Producing:
    """confluent-kafka producing COUNT records in a thread, idempotent, retrying forever
    within its delivery timeout; `delivered` counts the acknowledgements as they come."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.acked: list[tuple[int, bytes]] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()

    @property
    def delivered(self) -> int:
        with self.lock:
            return len(self.acked)

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                "batch.num.messages": 50,
                "message.timeout.ms": 120_000,
                "retry.backoff.ms": 50,
            }
        )

        def report(err: Any, msg: Any) -> None:
            with self.lock:
                if err is not None:
                    self.errors.append(str(err))
                else:
                    self.acked.append((msg.offset(), msg.value()))

        for i in range(COUNT):
            while True:
                try:
                    producer.produce(self.topic, value=b"v%05d" % i, on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        producer.flush(180)


async def under_load(broker: RunningBroker) -> tuple[Producing, Any]:
    """A diskless topic with a producer a quarter through its records."""
    error = await threads.deferToThread(
        create_topic, broker.address, "load", 1, {"diskless.enable": "true"}
    )
    assert error is None
    producing = Producing(broker.address, "load")
    done = threads.deferToThread(producing.run)
    await reactor_turns(lambda: producing.delivered >= COUNT // 4, 60)
    return producing, done


async def everything_once(broker: RunningBroker, producing: Producing, done: Any) -> None:
    """Every record acknowledged once, at offsets 0..COUNT-1, and read back in order."""
    await within(done, 240)
    assert producing.errors == []
    assert sorted(o for o, _ in producing.acked) == list(range(COUNT))
    read = await within(
        threads.deferToThread(rc.confluent_read_all, broker.address, "load", 1, COUNT), 120
    )
    assert [v for _, _, _, v in read] == [b"v%05d" % i for i in range(COUNT)]
    assert broker.broker.diskless.engine.catalog.bounds("load", 0) == (0, COUNT)


@pytest_twisted.ensureDeferred
async def test_postgresql_restarted_under_load_loses_and_duplicates_nothing(
    tmp_path: Path, postgres_server: PostgresServer, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    broker = await start_broker(tmp_path / "b", **diskless_settings(postgres_dsn, s3_bucket))
    try:
        producing, done = await under_load(broker)
        stats = broker.broker.diskless.engine.stats
        await threads.deferToThread(postgres_server.stop)
        try:
            # Uploads go on, commits fail: nothing of them is acknowledged.
            await reactor_turns(lambda: stats.commit_failures >= 3, 60)
            acked_while_down = producing.delivered
        finally:
            await threads.deferToThread(postgres_server.start)
        assert acked_while_down < COUNT
        await everything_once(broker, producing, done)
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_the_object_store_gone_under_load_loses_and_duplicates_nothing(
    tmp_path: Path, s3_server: S3Server, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    broker = await start_broker(tmp_path / "b", **diskless_settings(postgres_dsn, s3_bucket))
    try:
        producing, done = await under_load(broker)
        stats = broker.broker.diskless.engine.stats
        await threads.deferToThread(s3_server.stop)
        try:
            # Uploads fail: nothing of them is committed or acknowledged.
            await reactor_turns(lambda: stats.upload_failures >= 3, 60)
            committed_while_down = stats.commits
            await reactor_turns(lambda: stats.upload_failures >= 5, 60)
            assert stats.commits == committed_while_down
        finally:
            await threads.deferToThread(s3_server.start)
        await everything_once(broker, producing, done)
    finally:
        await broker.stop()
