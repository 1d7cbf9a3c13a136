"""The admin APIs tools call, proven with confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient against a real broker (docs/kafka.md, "APIs and versions")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from tests.conftest import RunningBroker, within

pytestmark = pytest.mark.clients


def in_thread(f: Callable[..., Any], *args: Any) -> Any:
    return within(threads.deferToThread(f, *args), 60)


async def make_topic(running: RunningBroker, topic: str, partitions: int) -> None:
    c = await running.client()
    try:
        await within(c.create_topic(topic, partitions))
    finally:
        await c.close()


# -- OffsetCommit metadata ----------------------------------------------------------------


def commit_with_metadata(bootstrap: str, topic: str, group: str) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[
                TopicPartition(topic, 0, 3, metadata="ck-é"),
                TopicPartition(topic, 1, 4),
            ],
            asynchronous=False,
        )
        ck_committed = {
            tp.partition: (tp.offset, tp.metadata)
            for tp in consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], 30)
        }
    finally:
        consumer.close()
    kp_consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group + "-kp")
    try:
        kp_consumer.commit({KTP(topic, 0): OffsetAndMetadata(9, "kp-meta", -1)})
    finally:
        kp_consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    ck_listed = {tp.partition: tp.metadata for tp in future.result(30).topic_partitions}
    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        kp_listed = {
            tp.partition: m.metadata
            for tp, m in kp.list_group_offsets(group + "-kp")[group + "-kp"].items()
        }
    finally:
        kp.close()
    return {"ck_committed": ck_committed, "ck_listed": ck_listed, "kp_listed": kp_listed}


@pytest_twisted.ensureDeferred
async def test_offset_commit_metadata_is_stored_and_returned(broker: RunningBroker) -> None:
    await make_topic(broker, "meta", 2)
    seen = await in_thread(commit_with_metadata, broker.address, "meta", "g-meta")
    # librdkafka shows the "" Kafka answers for a commit without metadata as None.
    assert seen["ck_committed"] == {0: (3, "ck-é"), 1: (4, None)}
    assert seen["ck_listed"] == {0: "ck-é", 1: None}
    assert seen["kp_listed"] == {0: "kp-meta"}
    offsets = broker.broker.offsets
    # confluent-kafka sends the string with its C terminator; Kafka stores the bytes sent.
    assert offsets.committed_metadata("g-meta", "meta", 0) == "ck-é\x00"
    assert offsets.committed_metadata("g-meta", "meta", 1) == ""
    assert offsets.committed_metadata("g-meta-kp", "meta", 0) == "kp-meta"


# -- CreatePartitions ---------------------------------------------------------------------


def grow_topic(bootstrap: str, topic: str) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewPartitions
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions as KNewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    seen: dict[str, Any] = {}
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    try:
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
    except Exception as exc:
        seen["shrink"] = exc.args[0].name()
    admin.create_partitions([NewPartitions(topic, 9)], validate_only=True)[topic].result(30)
    seen["ck"] = len(admin.list_topics(topic, timeout=30).topics[topic].partitions)
    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        kp.create_partitions({topic: KNewPartitions(total_count=5)})
    finally:
        kp.close()
    seen["kp"] = len(admin.list_topics(topic, timeout=30).topics[topic].partitions)
    return seen


@pytest_twisted.ensureDeferred
async def test_create_partitions_grows_a_topic(broker: RunningBroker) -> None:
    await make_topic(broker, "grow", 1)
    seen = await in_thread(grow_topic, broker.address, "grow")
    assert seen == {"shrink": "INVALID_PARTITIONS", "ck": 3, "kp": 5}
    assert len(broker.broker.topics["grow"].partitions) == 5


# -- DeleteGroups, OffsetDelete -----------------------------------------------------------


def delete_group_offsets(bootstrap: str, topic: str) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as KTP

    for group in ("g-del", "g-part"):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        c.commit(
            offsets=[TopicPartition(topic, 0, 1), TopicPartition(topic, 1, 2)], asynchronous=False
        )
        c.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    seen: dict[str, Any] = {}
    admin.delete_consumer_groups(["g-del"])["g-del"].result(30)
    try:
        admin.delete_consumer_groups(["g-del"])["g-del"].result(30)
    except Exception as exc:
        seen["again"] = exc.args[0].name()
    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        seen["kp_offset_delete"] = kp.delete_group_offsets("g-part", [KTP(topic, 0)])
        seen["left"] = {
            tp.partition: m.offset for tp, m in kp.list_group_offsets("g-part")["g-part"].items()
        }
    finally:
        kp.close()
    seen["listed"] = {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    return seen


@pytest_twisted.ensureDeferred
async def test_delete_groups_and_offset_delete_drop_commits_durably(
    broker: RunningBroker, data_dir: Any
) -> None:
    await make_topic(broker, "dg", 2)
    seen = await in_thread(delete_group_offsets, broker.address, "dg")
    assert seen["again"] == "GROUP_ID_NOT_FOUND"
    assert seen["left"] == {1: 2}
    assert "g-del" not in seen["listed"] and "g-part" in seen["listed"]
    await broker.stop()
    from rustka.config import Config
    from rustka.storage.offsets import OffsetsStore

    store = OffsetsStore.open(data_dir, Config().log_config())
    try:
        assert store.groups() == {"g-part": {("dg", 1): 2}}
    finally:
        store.close()


# -- ListGroups v4 state filter ------------------------------------------------------------


def list_groups_by_state(bootstrap: str, topic: str) -> dict[str, Any]:
    from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient

    idle = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-empty"})
    try:
        idle.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        idle.close()
    assigned: list[Any] = []
    member = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "g-stable", "auto.offset.reset": "earliest"}
    )
    try:
        member.subscribe([topic], on_assign=lambda _c, parts: assigned.extend(parts))
        for _ in range(60):
            member.poll(0.5)
            if assigned:
                break
        admin = AdminClient({"bootstrap.servers": bootstrap})

        def listed(states: set[Any] | None) -> dict[str, str]:
            result = admin.list_consumer_groups(states=states).result(30)
            return {g.group_id: g.state.name for g in result.valid}

        seen = {
            "assigned": len(assigned),
            "stable": listed({ConsumerGroupState.STABLE}),
            "empty": listed({ConsumerGroupState.EMPTY}),
            "both": listed({ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY}),
            "dead": listed({ConsumerGroupState.DEAD}),
            "all": listed(None),
        }
        kp = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            seen["kp"] = kp.list_groups(states_filter=["Stable"])
        finally:
            kp.close()
    finally:
        member.close()
    return seen


@pytest_twisted.ensureDeferred
async def test_list_groups_filters_by_state(broker: RunningBroker) -> None:
    """confluent-kafka sends ListGroups v4 (flexible) with the states it asks for."""
    await make_topic(broker, "lg", 1)
    seen = await in_thread(list_groups_by_state, broker.address, "lg")
    assert seen["assigned"] == 1
    assert seen["stable"] == {"g-stable": "STABLE"}
    assert seen["empty"] == {"g-empty": "EMPTY"}
    assert seen["both"] == seen["all"] == {"g-stable": "STABLE", "g-empty": "EMPTY"}
    assert seen["dead"] == {}
    assert seen["kp"] == [
        # ListGroups v5 (KIP-848) adds the group's type.
        {
            "group_id": "g-stable",
            "protocol_type": "consumer",
            "group_state": "Stable",
            "group_type": "classic",
        }
    ]


# -- DescribeCluster ----------------------------------------------------------------------


def describe_cluster(bootstrap: str) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.describe_cluster(request_timeout=30).result(30)
    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        kp_cluster = kp.describe_cluster()  # DescribeCluster itself (librdkafka uses Metadata)
    finally:
        kp.close()
    return {
        "cluster_id": result.cluster_id,
        "controller": (result.controller.id, result.controller.host, result.controller.port),
        "nodes": [(n.id, n.host, n.port, n.rack) for n in result.nodes],
        "kp": kp_cluster,
    }


@pytest_twisted.ensureDeferred
async def test_describe_cluster_names_this_node_as_controller_and_only_broker(
    broker: RunningBroker,
) -> None:
    seen = await in_thread(describe_cluster, broker.address)
    assert seen["cluster_id"] == await within(broker.broker.cluster_id())
    assert seen["controller"] == (0, "127.0.0.1", broker.port)
    assert seen["nodes"] == [(0, "127.0.0.1", broker.port, None)]
    assert seen["kp"]["cluster_id"] == seen["cluster_id"]
    assert seen["kp"]["controller_id"] == 0
    assert seen["kp"]["brokers"] == [
        {"broker_id": 0, "host": "127.0.0.1", "port": broker.port, "rack": None}
    ]


# -- OffsetForLeaderEpoch -----------------------------------------------------------------


class _Lines:
    """A logging.Logger stand-in for librdkafka's log callback: keeps every line."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, _level: int, fmt: str, *args: Any) -> None:
        self.lines.append(fmt % args if args else fmt)


def consume_after_epoch_seek(bootstrap: str, topic: str) -> dict[str, Any]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        producer.produce(topic, b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    logs = _Lines()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "g-epoch",
            "debug": "protocol",
            "logger": logs,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values = []
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append((message.offset(), message.leader_epoch()))
                break
        # A position with a leader epoch is validated with OffsetForLeaderEpoch first.
        consumer.seek(TopicPartition(topic, 0, 2, leader_epoch=0))
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append((message.offset(), message.leader_epoch()))
            if len(values) == 4:
                break
    finally:
        consumer.close()
    asked = [line for line in logs.lines if "OffsetForLeaderEpoch" in line]
    return {"values": values, "asked": asked}


@pytest_twisted.ensureDeferred
async def test_a_position_with_a_leader_epoch_is_validated_and_kept(broker: RunningBroker) -> None:
    """librdkafka asks OffsetForLeaderEpoch about epoch 0 and keeps the position (an end
    offset below it would have been truncation, and reset the consumer)."""
    await make_topic(broker, "ep", 1)
    seen = await in_thread(consume_after_epoch_seek, broker.address, "ep")
    assert any("Sent OffsetForLeaderEpochRequest" in line for line in seen["asked"]), seen["asked"]
    assert any("Received OffsetForLeaderEpochResponse" in line for line in seen["asked"])
    assert seen["values"] == [(0, 0), (2, 0), (3, 0), (4, 0)]


# -- DescribeLogDirs ----------------------------------------------------------------------


def describe_log_dirs(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    from confluent_kafka import Producer
    from kafka import KafkaAdminClient

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(topic, b"x" * 100, partition=i % 2)
    producer.produce(topic, b"y", partition=1)
    assert producer.flush(30) == 0
    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return kp.describe_log_dirs()  # type: ignore[no-any-return]
    finally:
        kp.close()


@pytest_twisted.ensureDeferred
async def test_describe_log_dirs_reports_the_data_dir_and_each_partitions_size(
    broker: RunningBroker, data_dir: Any
) -> None:
    await make_topic(broker, "ld", 2)
    seen = await in_thread(describe_log_dirs, broker.address, "ld")
    [[result]] = [answer["log_dirs"] for answer in seen]
    assert seen[0]["broker"] == 0
    assert result["error_code"] == 0
    assert result["log_dir"] == str(data_dir.resolve())
    [topic] = result["topics"]
    assert topic["name"] == "ld"
    stored = broker.broker.topics["ld"].partitions
    sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
    # What is on disk, segment by segment: each partition's batches, not a guess.
    on_disk = {i: sum(s.size for s in stored[i].segments) for i in (0, 1)}
    assert sizes == on_disk and sizes[1] > sizes[0] > 500
    assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in topic["partitions"])


# -- DeleteRecords ------------------------------------------------------------------------


def delete_records_with_clients(bootstrap: str, topic: str) -> dict[str, Any]:
    """Produce 20 records to partition 0 and 5 to partition 1, trim both with each admin
    client, then read what is left as consumers do: from the beginning, and the
    earliest offset by ListOffsets."""
    from confluent_kafka import OFFSET_END, Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.errors import OffsetOutOfRangeError
    from kafka.structs import TopicPartition as KTP

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(20):
        producer.produce(topic, b"v%d" % i, key=b"k", partition=0)
        producer.flush(30)  # one batch per record: segments roll between them
    for i in range(5):
        producer.produce(topic, b"w%d" % i, partition=1)
    assert producer.flush(30) == 0
    seen: dict[str, Any] = {}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.delete_records([TopicPartition(topic, 0, 6)]).values()
    seen["ck"] = future.result(30).low_watermark
    [future] = admin.delete_records([TopicPartition(topic, 0, 99)]).values()
    try:
        future.result(30)
    except KafkaException as exc:
        seen["ck_past_end"] = exc.args[0].name()
    [future] = admin.delete_records([TopicPartition(topic, 1, OFFSET_END)]).values()
    seen["ck_to_end"] = future.result(30).low_watermark
    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = kp.delete_records({KTP(topic, 0): 13})
        seen["kp"] = {tp.partition: r["low_watermark"] for tp, r in result.items()}
        seen["kp_backwards"] = kp.delete_records({KTP(topic, 0): 2})[KTP(topic, 0)]["low_watermark"]
        try:
            kp.delete_records({KTP(topic, 0): 21})
        except OffsetOutOfRangeError:
            seen["kp_past_end"] = "OFFSET_OUT_OF_RANGE"
    finally:
        kp.close()
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "trim", "auto.offset.reset": "earliest"}
    )
    try:
        seen["ck_watermarks"] = consumer.get_watermark_offsets(TopicPartition(topic, 0), 30)
        consumer.assign([TopicPartition(topic, 0)])
        read: list[tuple[int, bytes]] = []
        for _ in range(200):
            if len(read) >= 7:
                break
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                read.append((msg.offset(), msg.value()))
        seen["ck_read"] = read
    finally:
        consumer.close()
    kc = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        seen["kp_earliest"] = {
            tp.partition: offset
            for tp, offset in kc.beginning_offsets([KTP(topic, 0), KTP(topic, 1)]).items()
        }
    finally:
        kc.close()
    return seen


@pytest_twisted.ensureDeferred
async def test_delete_records_moves_the_log_start_for_admin_clients(
    broker_factory: Any, data_dir: Any
) -> None:
    """confluent-kafka's and kafka-python's delete_records move the start (into a
    segment), -1 to the high watermark, never back, OFFSET_OUT_OF_RANGE past it; a
    consumer from the beginning and ListOffsets earliest start there. On disk: the
    log-start-offset file, the records below still stored until the retention pass
    deletes the segments wholly below, and after a restart the same start."""
    from rustka.storage.log_files import LOG_START_FILE, decode_log_start

    running = await broker_factory()
    try:
        c = await running.client()
        try:
            await within(c.create_topic("trim", 2, configs={"segment.bytes": "300"}))
        finally:
            await c.close()
        seen = await in_thread(delete_records_with_clients, running.address, "trim")
        assert (seen["ck"], seen["ck_past_end"], seen["ck_to_end"]) == (
            6,
            "OFFSET_OUT_OF_RANGE",
            5,
        )
        assert (seen["kp"], seen["kp_backwards"], seen["kp_past_end"]) == (
            {0: 13},
            13,
            "OFFSET_OUT_OF_RANGE",
        )
        assert seen["ck_watermarks"] == (13, 20)
        assert seen["ck_read"] == [(i, b"v%d" % i) for i in range(13, 20)]
        assert seen["kp_earliest"] == {0: 13, 1: 5}
        plog = running.broker.partition("trim", 0)
        directory = plog.directory
        assert decode_log_start((directory / LOG_START_FILE).read_bytes()) == 13
        bases = [seg.base_offset for seg in plog.segments]
        assert bases[0] == 0 and len(bases) > 3  # still stored, not served
        holding = max(b for b in bases if b <= 13)
        await within(running.broker.enforce_retention())
        assert plog.segments[0].base_offset == holding
        assert plog.log_start_offset == 13
        stored = sorted(p.name for p in directory.glob("*.log"))
        assert stored[0] == f"{holding:020d}.log"
    finally:
        await running.stop()
    running = await broker_factory()
    try:
        assert running.broker.bounds("trim", 0) == (13, 20)
        assert running.broker.bounds("trim", 1) == (5, 5)
    finally:
        await running.stop()
