"""``__consumer_offsets`` read by Kafka clients, as monitoring tools read it.

With ``consumer_offsets_topic`` on, a group's commits become records of Kafka's
internal topic (docs/kafka.md, "The __consumer_offsets topic"). Each test here commits
with confluent-kafka and reads the topic back from its beginning with a plain assigned
consumer, decoding keys and values with the test's own decoder written from Kafka's
schemas (OffsetCommitKey v1, OffsetCommitValue v3), not with rustka's encoder. Clients
run in reactor pool threads while the reactor serves the broker; every wait polls
with a deadline.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from rustka.client.protocol import BrokerError
from tests.conftest import start_broker, within

pytestmark = pytest.mark.clients

TOPIC = "__consumer_offsets"
ON = {"consumer_offsets_topic": True}

Key = tuple[str, str, int]
Value = tuple[int, int, str, int]


def _string(data: bytes, pos: int) -> tuple[str, int]:
    (length,) = struct.unpack_from(">h", data, pos)
    pos += 2
    return data[pos : pos + length].decode(), pos + length


def decode_key(data: bytes) -> Key | None:
    """An offset commit's (group, topic, partition); None for any other record kind."""
    (version,) = struct.unpack_from(">h", data, 0)
    if version not in (0, 1):
        return None
    group, pos = _string(data, 2)
    topic, pos = _string(data, pos)
    (partition,) = struct.unpack_from(">i", data, pos)
    assert pos + 4 == len(data)
    return group, topic, partition


def decode_value(data: bytes | None) -> Value | None:
    """(offset, leader epoch, metadata, commit ms) of OffsetCommitValue v3; None: a tombstone."""
    if data is None:
        return None
    version, offset, epoch = struct.unpack_from(">hqi", data, 0)
    assert version == 3
    metadata, pos = _string(data, 14)
    (commit_ms,) = struct.unpack_from(">q", data, pos)
    assert pos + 8 == len(data)
    return offset, epoch, metadata, commit_ms


Entry = tuple[int, Key, Value | None]  # (partition of __consumer_offsets, key, value)


def read_offsets_topic(bootstrap: str) -> list[Entry]:
    """Every offset commit record of ``__consumer_offsets``, each partition from its start."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "offsets-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        meta = consumer.list_topics(TOPIC, timeout=30).topics[TOPIC]
        assert meta.error is None, meta.error
        partitions = sorted(meta.partitions)
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in partitions])
        pending = set(partitions)
        entries: list[Entry] = []
        deadline = time.monotonic() + 60
        while pending:
            assert time.monotonic() < deadline, f"partitions {pending} never reached their end"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, str(error)
                pending.discard(msg.partition())
                continue
            key = decode_key(msg.key())
            if key is not None:
                entries.append((msg.partition(), key, decode_value(msg.value())))
        return entries
    finally:
        consumer.close()


def read_until(bootstrap: str, done: Callable[[list[Entry]], bool]) -> list[Entry]:
    """Read the topic again until ``done`` holds of it: the broker writes a commit into it
    just after the commit is acknowledged."""
    deadline = time.monotonic() + 30
    while True:
        entries = read_offsets_topic(bootstrap)
        if done(entries):
            return entries
        assert time.monotonic() < deadline, f"never came: {entries}"
        time.sleep(0.2)


def latest(entries: list[Entry]) -> dict[Key, Value | None]:
    """The table the records describe, as compaction would leave it."""
    return {key: value for _, key, value in entries}


def in_thread(f: Callable[..., Any], *args: Any, timeout: float = 90) -> Any:
    return within(threads.deferToThread(f, *args), timeout)


def produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0


def consume_and_commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    """A group member reads ``offset`` records and commits there."""
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
        consumer.subscribe([topic])
        read = 0
        deadline = time.monotonic() + 60
        while read < offset:
            assert time.monotonic() < deadline
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                read += 1
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def commit_with_metadata(
    bootstrap: str, group: str, topic: str, offset: int, metadata: str
) -> None:
    """A commit from outside the group, with kafka-python: confluent-kafka 2.16 sends a
    metadata string with its C terminator (``"m1\\x00"``)."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(offset, metadata, -1)})
    finally:
        consumer.close()


def commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    """A commit from outside the group (the group has no members)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def delete_group(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_consumer_groups([group], request_timeout=30).values():
        future.result(30)


def topic_names(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return set(admin.list_topics(timeout=30).topics)


@pytest_twisted.ensureDeferred
async def test_a_groups_commits_and_their_deletion_are_kafka_records(data_dir: Path) -> None:
    running = await start_broker(data_dir, **ON, offsets_topic_num_partitions=3)
    try:
        await in_thread(produce, running.address, "orders", 10)
        await in_thread(consume_and_commit, running.address, "billing", "orders", 4)
        before = int(time.time() * 1000)
        await in_thread(commit_with_metadata, running.address, "billing", "orders", 6, "m1")
        after = int(time.time() * 1000)

        entries = await in_thread(
            read_until,
            running.address,
            lambda es: any(v is not None and v[0] == 6 for _, _, v in es),
        )
        key = ("billing", "orders", 0)
        # Java's "billing".hashCode() is -109829509: Kafka's partition is 109829509 % 3.
        assert {p for p, _, _ in entries} == {1}
        commits = [v for _, k, v in entries if k == key]
        assert commits[0] is not None and commits[0][:3] == (4, -1, "")
        last = commits[-1]
        assert last is not None and last[:3] == (6, -1, "m1")
        assert before - 1000 <= last[3] <= after + 1000
        assert set(latest(entries)) == {key}

        # Deleting the group deletes its commits: a tombstone (a null value) for each.
        await in_thread(delete_group, running.address, "billing")
        entries = await in_thread(read_until, running.address, lambda es: es and es[-1][2] is None)
        assert latest(entries) == {key: None}
        assert running.broker.offsets_topic.failed_writes == 0
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_the_current_commits_are_restated_at_each_start(data_dir: Path) -> None:
    running = await start_broker(data_dir, **ON)
    try:
        await in_thread(produce, running.address, "orders", 10)
        await in_thread(commit, running.address, "billing", "orders", 3)
        await in_thread(commit, running.address, "audit", "orders", 7)
        await in_thread(delete_group, running.address, "audit")
        first = await in_thread(read_until, running.address, lambda es: len(es) == 3)
    finally:
        await running.stop()
    assert latest(first) == {
        ("billing", "orders", 0): first[0][2],
        ("audit", "orders", 0): None,
    }

    running = await start_broker(data_dir, **ON)
    try:
        entries = await in_thread(read_until, running.address, lambda es: len(es) == 4)
        # Only what the store holds now is written again; the tombstone stays as it was.
        assert entries[:3] == first
        restated = entries[3]
        assert restated[1] == ("billing", "orders", 0)
        assert restated[2] is not None and restated[2][:3] == (3, -1, "")
        # The commit keeps its own time, not the restart's.
        assert first[0][2] is not None and restated[2][3] == first[0][2][3]
    finally:
        await running.stop()


def describe(bootstrap: str) -> Any:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.describe_topics(TopicCollection([TOPIC])).values()
    return future.result(30)


def kafka_python_metadata(bootstrap: str) -> list[dict[str, Any]]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return admin.describe_topics([TOPIC])  # type: ignore[no-any-return]
    finally:
        admin.close()


@pytest_twisted.ensureDeferred
async def test_metadata_marks_the_topic_internal(data_dir: Path) -> None:
    running = await start_broker(data_dir, **ON, offsets_topic_num_partitions=4)
    try:
        described = await in_thread(describe, running.address)
        assert described.is_internal is True
        assert len(described.partitions) == 4
        [topic] = await in_thread(kafka_python_metadata, running.address)
        assert (topic["name"], topic["is_internal"]) == (TOPIC, True)
        c = await running.client()
        try:
            await c.create_topic("orders", 1)
        finally:
            await c.close()
        others = await in_thread(kafka_python_topics, running.address)
        assert others["orders"] is False
    finally:
        await running.stop()


def kafka_python_topics(bootstrap: str) -> dict[str, bool]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {t["name"]: t["is_internal"] for t in admin.describe_topics()}
    finally:
        admin.close()


def end_offsets(bootstrap: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        meta = consumer.list_topics(TOPIC, timeout=30).topics[TOPIC]
        return {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
            for p in meta.partitions
        }
    finally:
        consumer.close()


def confluent_produce_error(bootstrap: str) -> Any:
    from confluent_kafka import Producer

    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.send.max.retries": 0})
    producer.produce(
        TOPIC, key=b"k", value=b"v", partition=0, on_delivery=lambda e, m: errors.append(e)
    )
    assert producer.flush(30) == 0
    return errors[0]


def admin_errors(bootstrap: str) -> dict[str, Any]:
    """What DeleteTopics, CreatePartitions and DeleteRecords answer for the topic."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    calls = {
        "delete_topics": lambda: admin.delete_topics([TOPIC], request_timeout=30),
        "create_partitions": lambda: admin.create_partitions(
            [NewPartitions(TOPIC, 3)], request_timeout=30
        ),
        "delete_records": lambda: admin.delete_records(
            [TopicPartition(TOPIC, 0, 1)], request_timeout=30
        ),
    }
    out: dict[str, Any] = {}
    for name, call in calls.items():
        [future] = call().values()
        try:
            future.result(30)
            out[name] = None
        except KafkaException as e:
            out[name] = e.args[0]
    return out


@pytest_twisted.ensureDeferred
async def test_clients_cannot_write_delete_grow_or_trim_it(data_dir: Path) -> None:
    from confluent_kafka import KafkaError

    running = await start_broker(data_dir, **ON)
    try:
        await in_thread(produce, running.address, "orders", 3)
        await in_thread(commit, running.address, "billing", "orders", 2)
        await in_thread(read_until, running.address, lambda es: len(es) == 1)
        ends = await in_thread(end_offsets, running.address)
        assert ends == {0: 1}

        error = await in_thread(confluent_produce_error, running.address)
        assert error is not None and error.code() == KafkaError.TOPIC_EXCEPTION

        c = await running.client()
        try:
            with pytest.raises(BrokerError, match=r"'__consumer_offsets'.* reserved"):
                await c.produce(TOPIC, b"k", b"v")
        finally:
            await c.close()

        errors = await in_thread(admin_errors, running.address)
        assert {name: e is not None and e.code() for name, e in errors.items()} == {
            "delete_topics": KafkaError.TOPIC_EXCEPTION,
            "create_partitions": KafkaError.TOPIC_EXCEPTION,
            "delete_records": KafkaError.TOPIC_EXCEPTION,
        }
        # Nothing was stored, removed or added: the one commit record is still all there is.
        assert await in_thread(end_offsets, running.address) == {0: 1}
        entries = await in_thread(read_offsets_topic, running.address)
        assert [k for _, k, _ in entries] == [("billing", "orders", 0)]
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_off_by_default_no_topic_and_nothing_changes(data_dir: Path) -> None:
    running = await start_broker(data_dir)
    try:
        await in_thread(produce, running.address, "orders", 3)
        await in_thread(commit, running.address, "billing", "orders", 2)
        assert running.broker.offsets_topic is None
        assert await in_thread(topic_names, running.address) == {"orders"}
        assert not (data_dir / TOPIC).exists()
        c = await running.client()
        try:
            assert await c.committed("billing", "orders", 0) == 2
        finally:
            await c.close()
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_turned_off_later_the_topic_is_an_ordinary_one_to_delete(data_dir: Path) -> None:
    running = await start_broker(data_dir, **ON)
    try:
        await in_thread(produce, running.address, "orders", 3)
        await in_thread(commit, running.address, "billing", "orders", 2)
        await in_thread(read_until, running.address, lambda es: len(es) == 1)
    finally:
        await running.stop()
    running = await start_broker(data_dir)
    try:
        errors = await in_thread(admin_errors_delete_only, running.address)
        assert errors is None
        assert await in_thread(topic_names, running.address) == {"orders"}
    finally:
        await running.stop()


def admin_errors_delete_only(bootstrap: str) -> Any:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.delete_topics([TOPIC], request_timeout=30).values()
    try:
        future.result(30)
    except KafkaException as e:
        return e.args[0]
    return None


def run_mirror(source: str, target: str, state: Path) -> tuple[int, str, str]:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "rustka.ops.cli", "mirror"),
            *("--broker", source, "--to", target, "--state", str(state), "--json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


@pytest_twisted.ensureDeferred
async def test_rustka_mirror_leaves_it_behind(tmp_path: Path) -> None:
    source = await start_broker(tmp_path / "source", **ON)
    target = await start_broker(tmp_path / "target")
    try:
        await in_thread(produce, source.address, "orders", 5)
        await in_thread(commit, source.address, "billing", "orders", 2)
        await in_thread(read_until, source.address, lambda es: len(es) == 1)
        code, out, err = await in_thread(
            run_mirror, source.address, target.address, tmp_path / "mirror.json", timeout=150
        )
        assert code == 0, err
        assert json.loads(out)["records"] == 5
        assert await in_thread(topic_names, target.address) == {"orders"}
    finally:
        await target.stop()
        await source.stop()
