"""A broker of a cluster killed with SIGKILL under load, with real `twistd rustka`
processes: an idempotent producer and a consumer group with both brokers in their
bootstrap list go on through the other broker; no acknowledged record is lost or
stored twice, offsets stay contiguous, and once the collector has run no object is
left that no row uses (docs/diskless.md, "Faults")."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rustka.storage.diskless.catalog import Catalog
from rustka.storage.diskless.engine import DisklessEngine
from rustka.storage.diskless.object_cache import ObjectCache
from tests.diskless.test_cluster import GroupMember
from tests.diskless.test_diskless_clients import create_topic, diskless_settings
from tests.kafka import real_clients as rc
from tests.services.seaweed import S3Place

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
COUNT = 4000
PARTITIONS = 2


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def knows(bootstrap: str, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return meta.topics[topic].error is None


class Daemon:
    """``twistd rustka --nodaemon`` on its own data dir and TOML config."""

    def __init__(self, work: Path, broker_id: int, settings: dict[str, Any]) -> None:
        data = work / f"broker-{broker_id}"
        config = work / f"broker-{broker_id}.toml"
        lines = [f'data_dir = "{data}"', 'listen = ["tcp:0:interface=127.0.0.1"]']
        for key, value in {**settings, "broker_id": broker_id}.items():
            lines.append(f"{key} = {json.dumps(value)}")
        config.write_text("\n".join(lines) + "\n")
        self.log = work / f"broker-{broker_id}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "twistd"),
                    "--nodaemon",
                    "--pidfile=",
                    "rustka",
                    "--config",
                    str(config),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        self.port = 0

        def listening() -> bool:
            assert self.proc.poll() is None, self.text()[-3000:]
            found = re.findall(r"listening on .*port=(\d+)", self.text())
            if found and "cluster: live brokers" in self.text():
                self.port = int(found[-1])
                return True
            return False

        wait_for(listening, f"broker {broker_id} to join")

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Producing:
    """An idempotent confluent-kafka producer with every broker in its bootstrap list."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.acked: list[tuple[int, int, bytes]] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()

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
                "batch.num.messages": 40,
                "message.timeout.ms": 120_000,
                "retry.backoff.ms": 50,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )

        def report(err: Any, msg: Any) -> None:
            with self.lock:
                if err is not None:
                    self.errors.append(str(err))
                else:
                    self.acked.append((msg.partition(), msg.offset(), msg.value()))

        for i in range(COUNT):
            while True:
                try:
                    producer.produce(
                        "load", value=b"v%05d" % i, partition=i % PARTITIONS, on_delivery=report
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        producer.flush(180)


def test_a_broker_killed_under_load_loses_nothing_and_clients_go_on_through_the_other(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    settings = diskless_settings(postgres_dsn, s3_bucket, cluster_lease_ms=2000)
    first = Daemon(tmp_path, 1, settings)
    second = Daemon(tmp_path, 2, settings)
    try:
        wait_for(lambda: "live brokers [1, 2]" in second.text(), "both brokers to be live")
        assert create_topic(first.address, "load", PARTITIONS, {"diskless.enable": "true"}) is None
        wait_for(lambda: knows(second.address, "load"), "broker 2 to know the topic")
        bootstrap = f"{first.address},{second.address}"
        producing = Producing(bootstrap)
        group = GroupMember(bootstrap, "survivors", "load")
        threads = [threading.Thread(target=t.run, daemon=True) for t in (producing, group)]
        for t in threads:
            t.start()
        wait_for(lambda: producing.delivered() >= COUNT // 4 and group.seen() > 0, "traffic")
        first.kill()
        threads[0].join(240)
        assert not threads[0].is_alive()
        assert producing.errors == []
        # Every acknowledged record once, at contiguous offsets from 0 in its partition.
        for p in range(PARTITIONS):
            offsets = sorted(o for q, o, _ in producing.acked if q == p)
            assert offsets == list(range(COUNT // PARTITIONS)), p
        read = rc.confluent_read_all(second.address, "load", PARTITIONS, COUNT)
        assert sorted(v for _, _, _, v in read) == [b"v%05d" % i for i in range(COUNT)]
        # The group goes on through broker 2 once the coordinator role has passed.
        wait_for(lambda: len({v for _, _, v in group.consumed}) == COUNT, "the group", 180)
        group.stopping.set()
        threads[1].join(60)
        assert group.errors == []
        second.stop()
        # Nothing of a crashed upload stays: collected with no grace once nobody uploads.
        catalog = Catalog(postgres_dsn)
        engine = DisklessEngine(catalog, s3_bucket.store(), ObjectCache(0), orphan_grace_ms=0)
        try:
            engine.collect()
            keys = [key for key, _, _ in engine.store.list_objects()]
            assert keys and catalog.known_objects(keys) == set(keys)
            assert catalog.bounds("load", 0) == (0, COUNT // PARTITIONS)
        finally:
            engine.close()
    finally:
        first.stop()
        second.stop()
