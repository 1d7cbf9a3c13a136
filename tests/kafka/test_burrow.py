"""Burrow (Debian's ``burrow`` 1.2.1) watching a rustka group's lag through ``__consumer_offsets``.

Burrow learns commits only by reading Kafka's offsets topic and the partitions' ends
by ListOffsets, so its lag report is the proof that what rustka writes there reads as
Kafka's (docs/kafka.md, "The __consumer_offsets topic"). Burrow 1.2.1 also needs a
ZooKeeper for itself: the test starts Debian's ``zookeeper`` standalone and waits until
it serves sessions (``srvr``, not ``ruok``: ZooKeeper answers ``imok`` before it takes
sessions, and Burrow gives up at once on a refused first session). Both run as real
processes, killed in ``finally``; the broker runs in-process, so every wait for them is
done in a pool thread with a deadline.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from tests.conftest import start_broker, within

BURROW = "/usr/bin/Burrow"
ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
# ZooKeeper logs through slf4j: the simple binding writes its log to stderr.
SLF4J_SIMPLE = "/usr/share/java/slf4j-simple.jar"

pytestmark = pytest.mark.clients

CLUSTER = "rustka"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(what: str, check: Callable[[], Any], seconds: float, log: Path) -> Any:
    """``check()``'s first true answer, polled until ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while True:
        answer = check()
        if answer:
            return answer
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise AssertionError(f"{what}: not within {seconds} s; {log.name} ends:\n{tail}")
        time.sleep(0.2)


class Process:
    """A child process with its output in a file, killed (with its group) on ``stop``."""

    def __init__(self, argv: list[str], log: Path, cwd: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True
            )

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(30)


def zookeeper(home: Path) -> tuple[Process, int]:
    """A standalone ZooKeeper on 127.0.0.1, serving sessions when this returns."""
    (home / "data").mkdir(parents=True)
    port = free_port()
    (home / "zoo.cfg").write_text(
        "tickTime=2000\n"
        f"dataDir={home / 'data'}\n"
        f"clientPort={port}\n"
        "clientPortAddress=127.0.0.1\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr\n"
    )
    classpath = ZOOKEEPER_JAR + (":" + SLF4J_SIMPLE if os.path.exists(SLF4J_SIMPLE) else "")
    main = "org.apache.zookeeper.server.ZooKeeperServerMain"
    process = Process(
        ["java", "-Xmx128m", "-cp", classpath, main, str(home / "zoo.cfg")],
        home / "zookeeper.log",
        home,
    )

    def serving() -> bool:
        # "srvr" says "not currently serving requests" until the server takes sessions.
        assert process.popen.poll() is None, "ZooKeeper exited"
        try:
            with socket.create_connection(("127.0.0.1", port), 1) as conn:
                conn.sendall(b"srvr")
                return conn.recv(64).startswith(b"Zookeeper version")
        except OSError:
            return False

    try:
        wait_until("ZooKeeper serving", serving, 60, process.log)
    except BaseException:
        process.stop()
        raise
    return process, port


BURROW_TOML = """\
[general]
pidfile="{home}/burrow.pid"

[logging]
level="info"

[zookeeper]
servers=["127.0.0.1:{zookeeper}"]
timeout=6
root-path="/burrow"

[client-profile.rustka]
client-id="burrow"
kafka-version="2.0.0"

[cluster.{cluster}]
class-name="kafka"
servers=["{bootstrap}"]
client-profile="rustka"
topic-refresh=1
offset-refresh=1

[consumer.{cluster}]
class-name="kafka"
cluster="{cluster}"
servers=["{bootstrap}"]
client-profile="rustka"
start-latest=false

[httpserver.default]
address="127.0.0.1:{http}"

[storage.default]
class-name="inmemory"
workers=2
intervals=10
expire-group=604800
min-distance=1

[evaluator.default]
class-name="caching"
expire-cache=1
"""


def burrow(home: Path, zookeeper_port: int, bootstrap: str) -> tuple[Process, int]:
    home.mkdir(parents=True)
    http = free_port()
    (home / "burrow.toml").write_text(
        BURROW_TOML.format(
            home=home, zookeeper=zookeeper_port, cluster=CLUSTER, bootstrap=bootstrap, http=http
        )
    )
    process = Process([BURROW, "--config-dir", str(home)], home / "burrow.log", home)
    return process, http


def get_json(http: int, path: str) -> Any:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http}{path}", timeout=5) as answer:
            return json.loads(answer.read())
    except (OSError, urllib.error.HTTPError, ValueError):
        return None


def produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert producer.flush(30) == 0


def consume_and_commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """A member of ``group`` reads up to ``offsets`` and commits there."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p) for p in offsets])
        wanted = sum(offsets.values())
        read: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while sum(read.values()) < wanted:
            assert time.monotonic() < deadline, f"read only {read}"
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            if msg.offset() < offsets[msg.partition()]:
                read[msg.partition()] = msg.offset() + 1
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def burrow_reports(
    http: int, group: str, expected: dict[int, tuple[int, int]], log: Path
) -> dict[str, Any]:
    """Burrow's lag answer for ``group`` once it shows, per partition, (committed, lag)."""

    def lag() -> dict[str, Any] | None:
        listed = get_json(http, f"/v3/kafka/{CLUSTER}/consumer")
        if not listed or group not in listed.get("consumers", []):
            return None
        answer = get_json(http, f"/v3/kafka/{CLUSTER}/consumer/{group}/lag")
        if not answer or answer.get("error"):
            return None
        seen = {
            p["partition"]: (p["end"]["offset"], p["current_lag"])
            for p in answer["status"]["partitions"]
            if p.get("end")
        }
        return answer if seen == expected else None

    return wait_until(f"Burrow reporting {expected}", lag, 90, log)  # type: ignore[no-any-return]


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    try:
        yield started
    finally:
        for process in reversed(started):
            process.stop()


def in_thread(f: Callable[..., Any], *args: Any, timeout: float = 120) -> Any:
    return within(threads.deferToThread(f, *args), timeout)


@pytest_twisted.ensureDeferred
async def test_burrow_reports_a_groups_committed_offsets_and_lag(
    tmp_path: Path, processes: list[Process]
) -> None:
    assert os.path.exists(BURROW) and os.path.exists(ZOOKEEPER_JAR) and shutil.which("java"), (
        "needs Debian's burrow, zookeeper and a Java runtime: scripts/test installs them"
    )
    running = await start_broker(
        tmp_path / "data", consumer_offsets_topic=True, offsets_topic_num_partitions=2
    )
    try:
        c = await running.client()
        try:
            await c.create_topic("orders", 2)
        finally:
            await c.close()
        await in_thread(produce, running.address, "orders", 20)  # 10 in each partition
        await in_thread(consume_and_commit, running.address, "billing", "orders", {0: 4, 1: 7})

        zk, zk_port = await in_thread(zookeeper, tmp_path / "zookeeper")
        processes.append(zk)
        watcher, http = burrow(tmp_path / "burrow", zk_port, running.address)
        processes.append(watcher)

        answer = await in_thread(
            burrow_reports, http, "billing", {0: (4, 6), 1: (7, 3)}, watcher.log
        )
        assert answer["status"]["cluster"] == CLUSTER
        assert answer["status"]["totallag"] == 9

        # The group reads on: Burrow follows the new commits...
        await in_thread(consume_and_commit, running.address, "billing", "orders", {0: 9, 1: 10})
        await in_thread(burrow_reports, http, "billing", {0: (9, 1), 1: (10, 0)}, watcher.log)
        # ...and the partitions' new ends.
        await in_thread(produce, running.address, "orders", 4)
        answer = await in_thread(
            burrow_reports, http, "billing", {0: (9, 3), 1: (10, 2)}, watcher.log
        )
        assert answer["status"]["totallag"] == 5
        assert watcher.popen.poll() is None, "Burrow exited"
    finally:
        await running.stop()
