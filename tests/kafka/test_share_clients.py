"""Share groups (KIP-932) with confluent-kafka's `ShareConsumer` against a real rustka process.

The broker runs as ``twistd rustka`` (tools/twistd_process.py) with short share-group
timings (a 3 s acquisition lock, a delivery count limit of 3), so a test can kill it with
SIGKILL and start it again on the same data directory. Consumers run in threads of the
test, or as their own processes when a test kills one. Every wait is a poll loop with a
deadline; each test prints the counts it checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.twistd_process import STORAGE_READY, Twistd, start_broker

pytestmark = pytest.mark.clients

TOPIC = "q"
RUSTKA = str(Path(sys.executable).parent / "rustka")
LOCK_MS = 3000
DELIVERY_LIMIT = 3
SETTINGS = f"""
share_auto_offset_reset = "earliest"
group_share_record_lock_duration_ms = {LOCK_MS}
group_share_delivery_count_limit = {DELIVERY_LIMIT}
group_share_session_timeout_ms = 6000
group_share_heartbeat_interval_ms = 500
"""

Delivery = tuple[int, str, int]
"""(offset, value, delivery count) of one record as a consumer got it."""


class Broker:
    """A rustka process on a data directory, killable and restartable on its port."""

    def __init__(self, tmp_path: Path) -> None:
        self.data_dir = tmp_path / "data"
        self.config = tmp_path / "rustka.toml"
        self.config.write_text(SETTINGS)
        self.process = start_broker(self.data_dir, "--config", str(self.config))
        assert self.process.port is not None
        self.port: int = self.process.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        self.process.kill()

    def restart(self) -> None:
        self.process = Twistd(
            [
                "--data-dir",
                str(self.data_dir),
                "--listen",
                f"tcp:{self.port}:interface=127.0.0.1",
                "--config",
                str(self.config),
            ]
        )
        self.process.wait_for(STORAGE_READY, 30)
        assert self.process.wait_port(30) == self.port

    def stop(self) -> None:
        if self.process.proc.poll() is None:
            self.process.stop()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    running = Broker(tmp_path)
    try:
        yield running
    finally:
        running.stop()


def create_topic(bootstrap: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, partitions, 1)]).values():
        future.result(30)


def produce(bootstrap: str, values: list[str]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for value in values:
        producer.produce(TOPIC, value.encode())
    assert producer.flush(30) == 0


def share_consumer(bootstrap: str, group: str, **extra: Any) -> Any:
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **extra})
    consumer.subscribe([TOPIC])
    return consumer


def poll_until(
    consumer: Any,
    done: Callable[[list[Delivery]], bool],
    *,
    timeout: float = 60,
    handle: Callable[[Any], None] | None = None,
) -> list[Delivery]:
    """Poll until ``done(got)`` or the deadline; ``handle`` acknowledges each message (explicit
    mode; then each poll's acknowledgements are committed before the next poll)."""
    got: list[Delivery] = []
    deadline = time.monotonic() + timeout
    while not done(got):
        assert time.monotonic() < deadline, f"gave up after {len(got)} deliveries: {got[-5:]}"
        for msg in consumer.poll(0.5):
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.value().decode(), msg.delivery_count()))
            if handle is not None:
                handle(msg)
        if handle is not None and got:
            consumer.commit_sync(30)
    return got


def values(n: int, prefix: str = "v") -> list[str]:
    return [f"{prefix}{i:04d}" for i in range(n)]


# -- a consumer of its own (killed with SIGKILL by the tests) -----------------------------

# Polls up to ``want`` records (one poll when they are all there: explicit mode allows no
# further poll before every record is acknowledged), accepts the first ``accept`` of them,
# holds the rest unacknowledged, and prints each delivery as a JSON line.
_CONSUMER_PROGRAM = """
import json, sys
from confluent_kafka import ShareConsumer
bootstrap, group, accept, want = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                   "share.acknowledgement.mode": "explicit", "max.poll.records": want})
c.subscribe(["q"])
seen = 0
try:
    while seen < want:
        msgs = c.poll(0.5)
        for m in msgs:
            print(json.dumps([m.offset(), m.value().decode(), m.delivery_count()]), flush=True)
            seen += 1
            if seen <= accept:
                c.acknowledge(m)
        if msgs and accept:
            c.commit_sync(30)
            print(json.dumps("committed"), flush=True)
    print(json.dumps("holding"), flush=True)
except Exception as exc:
    print(json.dumps("error: " + repr(exc)), flush=True)
sys.stdin.read()
"""


class ConsumerProcess:
    def __init__(self, bootstrap: str, group: str, accept: int, want: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CONSUMER_PROGRAM, bootstrap, group, str(accept), str(want)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.got: list[Delivery] = []
        self.events: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            item = json.loads(line)
            with self._changed:
                if isinstance(item, str):
                    self.events.append(item)
                else:
                    self.got.append(tuple(item))  # type: ignore[arg-type]
                self._changed.notify_all()

    def wait_for(self, event: str, timeout: float = 60) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: event in self.events, timeout), (
                f"consumer never reported {event!r}; got {len(self.got)}: {self.events}"
            )

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self._reader.join(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


# -- tests ------------------------------------------------------------------------------


def members_of(bootstrap: str, group: str) -> int:
    """How many members the broker counts in a share group (`rustka groups describe`)."""
    done = subprocess.run(
        [RUSTKA, "groups", "describe", group, "--broker", bootstrap, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        return 0
    return len(json.loads(done.stdout)["members"])


def test_share_consumers_split_one_partition_and_together_get_every_record_once(
    broker: Broker,
) -> None:
    total, members = 300, 3
    create_topic(broker.bootstrap)
    seen: list[list[Delivery]] = [[] for _ in range(members)]
    lock = threading.Lock()
    failures: list[BaseException] = []

    def run(index: int) -> None:
        consumer = share_consumer(broker.bootstrap, "split", **{"max.poll.records": 10})
        try:

            def everything(got: list[Delivery]) -> bool:
                with lock:
                    seen[index] = list(got)
                    return sum(len(s) for s in seen) >= total

            poll_until(consumer, everything)
            # Implicit mode accepts a poll's records at the next poll or commit; close()
            # alone would release them (librdkafka sends no acknowledgements then).
            consumer.commit_sync(30)
        except BaseException as exc:
            failures.append(exc)
        finally:
            consumer.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(members)]
    for thread in threads:
        thread.start()
    # The records come once every member has joined and waits on them, so they are
    # shared out rather than all taken by whichever consumer joined first.
    deadline = time.monotonic() + 60
    while members_of(broker.bootstrap, "split") < members:
        assert time.monotonic() < deadline, "the consumers never all joined"
        time.sleep(0.2)
    produce(broker.bootstrap, values(total))
    for thread in threads:
        thread.join(90)
    assert not failures, failures
    everyone = [value for s in seen for _, value, _ in s]
    counts = Counter(everyone)
    twice = [v for v, n in counts.items() if n > 1]
    assert twice == [], [(i, d) for i, s in enumerate(seen) for d in s if d[1] in twice[:2]]
    assert sorted(counts) == values(total)
    per_member = [len(s) for s in seen]
    assert sum(1 for n in per_member if n) >= 2, per_member
    assert {c for s in seen for _, _, c in s} == {1}
    print(f"produced {total}, consumed {len(everyone)} by {members} members {per_member}")


def test_a_released_record_comes_back_counted_and_a_rejected_one_never(broker: Broker) -> None:
    from confluent_kafka import AcknowledgeType

    create_topic(broker.bootstrap)
    sent = values(10)
    produce(broker.bootstrap, sent)
    consumer = share_consumer(
        broker.bootstrap,
        "acks",
        **{"share.acknowledgement.mode": "explicit", "max.poll.records": 10},
    )
    try:
        released, rejected = set(sent[:3]), set(sent[3:6])

        def first_round(msg: Any) -> None:
            value = msg.value().decode()
            if value in released and msg.delivery_count() == 1:
                consumer.acknowledge(msg, AcknowledgeType.RELEASE)
            elif value in rejected:
                consumer.acknowledge(msg, AcknowledgeType.REJECT)
            else:
                consumer.acknowledge(msg, AcknowledgeType.ACCEPT)

        produce_later = threading.Event()

        def until_sentinel(got: list[Delivery]) -> bool:
            if not produce_later.is_set() and sum(1 for _, v, c in got if c == 2) == 3:
                produce_later.set()
                produce(broker.bootstrap, ["sentinel"])
            return any(v == "sentinel" for _, v, _ in got)

        got = poll_until(consumer, until_sentinel, handle=first_round)
    finally:
        consumer.close()
    by_value: dict[str, list[int]] = {}
    for _, value, count in got:
        by_value.setdefault(value, []).append(count)
    for value in released:
        assert by_value[value] == [1, 2], (value, by_value[value])
    for value in rejected:
        assert by_value[value] == [1], (value, by_value[value])
    for value in sent[6:]:
        assert by_value[value] == [1]
    print(
        f"produced {len(sent) + 1}, deliveries {len(got)}: released and redelivered "
        f"{len(released)}, rejected (archived) {len(rejected)}, accepted {len(sent) - 6} + sentinel"
    )


def test_a_killed_consumers_records_go_to_the_survivor_when_its_locks_expire(
    broker: Broker,
) -> None:
    create_topic(broker.bootstrap)
    sent = values(20)
    produce(broker.bootstrap, sent)
    doomed = ConsumerProcess(broker.bootstrap, "expiry", accept=0, want=len(sent))
    try:
        doomed.wait_for("holding")
    finally:
        doomed.kill()
    assert sorted(v for _, v, _ in doomed.got) == sent
    survivor = share_consumer(broker.bootstrap, "expiry")
    started = time.monotonic()
    try:
        got = poll_until(survivor, lambda got: len(got) >= len(sent))
    finally:
        survivor.close()
    waited = time.monotonic() - started
    assert sorted(v for _, v, _ in got) == sent
    assert {c for _, _, c in got} == {2}
    print(
        f"produced {len(sent)}; the killed consumer held {len(doomed.got)}; the survivor got "
        f"{len(got)}, each on its 2nd delivery, after {waited:.1f}s (lock {LOCK_MS} ms)"
    )


def test_a_poison_record_released_again_and_again_is_archived_at_the_limit(
    broker: Broker,
) -> None:
    from confluent_kafka import AcknowledgeType

    create_topic(broker.bootstrap)
    produce(broker.bootstrap, ["poison"])
    consumer = share_consumer(
        broker.bootstrap, "poison", **{"share.acknowledgement.mode": "explicit"}
    )
    sentinel_sent = threading.Event()
    try:

        def handle(msg: Any) -> None:
            if msg.value() == b"poison":
                consumer.acknowledge(msg, AcknowledgeType.RELEASE)
            else:
                consumer.acknowledge(msg, AcknowledgeType.ACCEPT)

        def until_sentinel(got: list[Delivery]) -> bool:
            if not sentinel_sent.is_set() and len(got) >= DELIVERY_LIMIT:
                sentinel_sent.set()
                produce(broker.bootstrap, ["sentinel"])
            return any(v == "sentinel" for _, v, _ in got)

        got = poll_until(consumer, until_sentinel, handle=handle)
    finally:
        consumer.close()
    poison = [c for _, v, c in got if v == "poison"]
    assert poison == list(range(1, DELIVERY_LIMIT + 1))
    print(
        f"produced 2; the poison record was delivered {len(poison)} times {poison} and "
        f"archived at the limit {DELIVERY_LIMIT}; then the sentinel came"
    )


def test_a_broker_killed_mid_way_loses_no_acknowledgement_and_keeps_delivery_counts(
    broker: Broker,
) -> None:
    create_topic(broker.bootstrap)
    sent = values(40)
    produce(broker.bootstrap, sent)
    first = ConsumerProcess(broker.bootstrap, "crash", accept=20, want=40)
    try:
        first.wait_for("holding")
        accepted = {v for _, v, _ in first.got[:20]}
        held = {v for _, v, _ in first.got[20:]}
        assert len(accepted) == 20 and len(held) == 20
        assert "committed" in first.events
        broker.kill()
    finally:
        first.kill()
    broker.restart()
    second = share_consumer(broker.bootstrap, "crash")
    sentinel_sent = threading.Event()
    try:

        def until_sentinel(got: list[Delivery]) -> bool:
            if not sentinel_sent.is_set() and len(got) >= len(held):
                sentinel_sent.set()
                produce(broker.bootstrap, ["sentinel"])
            return any(v == "sentinel" for _, v, _ in got)

        got = poll_until(second, until_sentinel)
    finally:
        second.close()
    again = {v: c for _, v, c in got if v != "sentinel"}
    assert set(again) == held, "an accepted record came back, or a held one was lost"
    assert set(again.values()) == {2}
    assert len(got) == len(held) + 1
    print(
        f"produced {len(sent) + 1}; accepted before the kill {len(accepted)}, held "
        f"{len(held)}; after the restart redelivered {len(again)} (count 2), accepted ones "
        f"delivered again: 0"
    )
