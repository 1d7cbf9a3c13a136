"""Topics: atomic creation of numbered partition folders (and the topic's own configs),
discovery, reconfiguration and key routing."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path

import pytest

from rustka.errors import (
    InvalidName,
    InvalidPartitionCount,
    StorageError,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)
from rustka.partitioner import partition_for_key
from rustka.record.batch import Record, encode_batch
from rustka.settings import ConfigError
from rustka.storage.log_config import LogConfig
from rustka.storage.log_files import TOPIC_CONFIG_FILE, decode_topic_config, encode_topic_config
from rustka.storage.topic import MAX_PARTITIONS, Topic, is_temp_name, temp_name


def _config() -> LogConfig:
    return LogConfig(segment_bytes=64 * 1024, flush="never")


def _produce(topic: Topic, key: bytes, value: bytes) -> tuple[int, int]:
    index = topic.partition_for_key(key)
    first, _last = topic.partition(index).append(encode_batch([Record(key, value)]))
    return index, first


def test_create_makes_numbered_partition_folders(tmp_path: Path) -> None:
    """create() leaves exactly the folders 0..n-1 under data_dir/<topic>/ and nothing else."""
    topic = Topic.create(tmp_path, "orders", 3, _config())
    try:
        assert sorted(os.listdir(tmp_path)) == ["orders"]
        assert sorted(os.listdir(tmp_path / "orders")) == ["0", "1", "2"]
        assert topic.name == "orders"
        assert topic.directory == tmp_path / "orders"
        assert len(topic.partitions) == 3
        assert [p.end_offset for p in topic.partitions] == [0, 0, 0]
    finally:
        topic.close()


def test_partition_for_key_matches_kafka_partitioner(tmp_path: Path) -> None:
    """Routing delegates to the Kafka-compatible partitioner with the topic's count."""
    topic = Topic.create(tmp_path, "orders", 7, _config())
    try:
        for i in range(50):
            key = f"user-{i}".encode()
            assert topic.partition_for_key(key) == partition_for_key(key, 7)
    finally:
        topic.close()


def test_same_key_same_partition_across_reopen(tmp_path: Path) -> None:
    """A key routes to the same partition after a reopen, and its records are still there."""
    topic = Topic.create(tmp_path, "orders", 4, _config())
    placed = {f"user-{i}".encode(): _produce(topic, f"user-{i}".encode(), b"v") for i in range(20)}
    topic.close()

    reopened = Topic.open(tmp_path / "orders", _config())
    try:
        assert len(reopened.partitions) == 4
        for key, (index, offset) in placed.items():
            assert reopened.partition_for_key(key) == index
            record = reopened.partition(index).read_record(offset)
            assert record is not None and record.key == key
    finally:
        reopened.close()


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../escape", "__offsets", "x" * 250, "a b"])
def test_invalid_name_creates_nothing(tmp_path: Path, name: str) -> None:
    """An illegal topic name raises InvalidName and leaves the data dir empty."""
    with pytest.raises(InvalidName):
        Topic.create(tmp_path, name, 3, _config())
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("count", [0, -1, MAX_PARTITIONS + 1, True, 2.0, "3"])
def test_invalid_partition_count_creates_nothing(tmp_path: Path, count: object) -> None:
    """Partition counts outside 1..10000 (or not ints) raise and write nothing."""
    with pytest.raises(InvalidPartitionCount):
        Topic.create(tmp_path, "orders", count, _config())  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


def test_create_existing_topic_raises(tmp_path: Path) -> None:
    """Creating a topic whose folder exists raises TopicExists and keeps the original."""
    topic = Topic.create(tmp_path, "orders", 2, _config())
    try:
        with pytest.raises(TopicExists, match="orders"):
            Topic.create(tmp_path, "orders", 5, _config())
        assert sorted(os.listdir(tmp_path / "orders")) == ["0", "1"]
        assert sorted(os.listdir(tmp_path)) == ["orders"]
    finally:
        topic.close()


def test_longest_name_fits_in_temp_dir(tmp_path: Path) -> None:
    """A 249-character name can be created: the staging dir name stays under NAME_MAX."""
    name = "t" * 249
    topic = Topic.create(tmp_path, name, 1, _config())
    try:
        assert os.listdir(tmp_path) == [name]
    finally:
        topic.close()


def test_temp_names_are_never_valid_topics() -> None:
    """Staging names are recognised as temporary and could never be a real topic name."""
    name = temp_name("orders")
    assert is_temp_name(name)
    assert not is_temp_name("orders.tmp-1234")
    with pytest.raises(InvalidName):
        Topic.create(Path("/nonexistent"), name, 1, _config())


def test_open_rejects_gap_in_partitions(tmp_path: Path) -> None:
    """A missing partition folder is a clear StorageError naming the missing number."""
    Topic.create(tmp_path, "orders", 4, _config()).close()
    for entry in os.listdir(tmp_path / "orders" / "2"):
        os.unlink(tmp_path / "orders" / "2" / entry)
    os.rmdir(tmp_path / "orders" / "2")
    with pytest.raises(StorageError, match="missing 2"):
        Topic.open(tmp_path / "orders", _config())


def test_open_rejects_non_canonical_partition_folder(tmp_path: Path) -> None:
    """A folder like '01' cannot be mapped to a partition and is refused."""
    Topic.create(tmp_path, "orders", 2, _config()).close()
    (tmp_path / "orders" / "01").mkdir()
    with pytest.raises(StorageError, match="'01'"):
        Topic.open(tmp_path / "orders", _config())


def test_open_rejects_topic_without_partitions(tmp_path: Path) -> None:
    """An empty topic folder is an error rather than a zero-partition topic."""
    (tmp_path / "orders").mkdir()
    with pytest.raises(StorageError, match="no partition folders"):
        Topic.open(tmp_path / "orders", _config())


def test_open_removes_leftover_partition_staging_dirs(tmp_path: Path) -> None:
    """A staging folder from an interrupted add_partitions is deleted at open."""
    Topic.create(tmp_path, "orders", 2, _config()).close()
    leftover = tmp_path / "orders" / temp_name("2")
    leftover.mkdir()
    topic = Topic.open(tmp_path / "orders", _config())
    try:
        assert len(topic.partitions) == 2
        assert not leftover.exists()
    finally:
        topic.close()


def test_partition_out_of_range_raises(tmp_path: Path) -> None:
    """partition() refuses indexes outside 0..n-1 with UnknownPartition."""
    topic = Topic.create(tmp_path, "orders", 2, _config())
    try:
        assert topic.partition(1) is topic.partitions[1]
        for bad in (2, -1, 100):
            with pytest.raises(UnknownPartition, match="orders"):
                topic.partition(bad)
    finally:
        topic.close()


def test_add_partitions_grows_and_survives_reopen(tmp_path: Path) -> None:
    """add_partitions creates the new folders, keeps old data and is seen after reopen."""
    topic = Topic.create(tmp_path, "orders", 2, _config())
    index, offset = _produce(topic, b"k", b"before")
    topic.add_partitions(5)
    assert len(topic.partitions) == 5
    assert sorted(os.listdir(tmp_path / "orders")) == ["0", "1", "2", "3", "4"]
    assert topic.partition(4).end_offset == 0
    topic.close()

    reopened = Topic.open(tmp_path / "orders", _config())
    try:
        assert len(reopened.partitions) == 5
        record = reopened.partition(index).read_record(offset)
        assert record is not None and record.value == b"before"
        assert reopened.partition_for_key(b"k") == partition_for_key(b"k", 5)
    finally:
        reopened.close()


def test_add_partitions_refuses_equal_or_lower(tmp_path: Path) -> None:
    """add_partitions never lowers the count and treats an equal count as an error."""
    topic = Topic.create(tmp_path, "orders", 3, _config())
    try:
        with pytest.raises(InvalidPartitionCount, match="already has 3"):
            topic.add_partitions(3)
        with pytest.raises(InvalidPartitionCount, match="cannot shrink"):
            topic.add_partitions(2)
        with pytest.raises(InvalidPartitionCount):
            topic.add_partitions(MAX_PARTITIONS + 1)
        assert len(topic.partitions) == 3
        assert sorted(os.listdir(tmp_path / "orders")) == ["0", "1", "2"]
    finally:
        topic.close()


def test_describe_reports_each_partition(tmp_path: Path) -> None:
    """describe() lists every partition with its offsets."""
    topic = Topic.create(tmp_path, "orders", 2, _config())
    try:
        topic.partition(1).append(encode_batch([Record(b"k", b"v"), Record(b"k", b"w")]))
        rows = topic.describe()
        assert [r["partition"] for r in rows] == [0, 1]
        assert rows[0]["end_offset"] == 0
        assert rows[1]["end_offset"] == 2
        assert rows[1]["log_start_offset"] == 0
        assert rows[1]["topic"] == "orders"
        assert rows[1]["size_bytes"] > 0
    finally:
        topic.close()


def test_concurrent_add_partitions_create_each_folder_once(tmp_path: Path) -> None:
    """Two threads growing the topic at once: one grows it, the other is refused cleanly."""
    topic = Topic.create(tmp_path, "orders", 1, LogConfig(flush="never"))
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def grow() -> None:
        start.wait()
        try:
            topic.add_partitions(6)
        except InvalidPartitionCount as e:
            errors.append(e)

    threads = [threading.Thread(target=grow) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert topic.partition_count == 6
    assert len(errors) == 1 and "already has 6" in str(errors[0])
    topic.close()


def test_closed_topic_refuses_to_grow(tmp_path: Path) -> None:
    """A topic closed (deleted) under a request cannot grow into a directory it no longer owns."""
    topic = Topic.create(tmp_path, "orders", 1, LogConfig(flush="never"))
    topic.close()
    with pytest.raises(UnknownTopic, match="deleted or closed"):
        topic.add_partitions(2)
    assert sorted(p.name for p in (tmp_path / "orders").iterdir()) == ["0"]


# -- the topic's own configs ------------------------------------------------------------


def _resolve(overrides: Mapping[str, str]) -> LogConfig:
    """The broker's resolver (rustka/config.py) over this file's test settings."""
    from rustka.config import Config

    resolved = Config().updated({"flush": "never"}).log_config(overrides)
    return resolved


def test_a_topic_is_created_with_its_configs_and_opens_with_them(tmp_path: Path) -> None:
    overrides = {"segment.bytes": "200", "retention.ms": "-1"}
    topic = Topic.create(tmp_path, "orders", 2, _resolve(overrides), overrides)
    try:
        assert sorted(os.listdir(tmp_path / "orders")) == ["0", "1", TOPIC_CONFIG_FILE]
        assert topic.overrides == overrides
        assert [p.config.segment_bytes for p in topic.partitions] == [200, 200]
    finally:
        topic.close()
    data = (tmp_path / "orders" / TOPIC_CONFIG_FILE).read_bytes()
    assert decode_topic_config(data) == overrides
    reopened = Topic.open(tmp_path / "orders", _config(), resolve=_resolve)
    try:
        assert reopened.overrides == overrides
        assert reopened.config.retention_ms is None
        assert all(p.config is reopened.config for p in reopened.partitions)
    finally:
        reopened.close()


def test_a_topic_without_configs_of_its_own_has_no_file(tmp_path: Path) -> None:
    Topic.create(tmp_path, "plain", 1, _config()).close()
    assert TOPIC_CONFIG_FILE not in os.listdir(tmp_path / "plain")
    topic = Topic.open(tmp_path / "plain", _config())
    try:
        assert topic.overrides == {} and topic.config == _config()
    finally:
        topic.close()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"garbage", "is damaged"),
        (encode_topic_config({"retention.ms": "soon"}), "configuration retention.ms"),
        (encode_topic_config({"dummy.doesntexist": "1"}), "Unknown topic config name"),
    ],
)
def test_a_damaged_or_invalid_config_file_stops_the_topic_opening(
    tmp_path: Path, data: bytes, message: str
) -> None:
    """Opening with the broker's settings instead could delete what the topic's own
    retention keeps, so the error names the file and what to do."""
    Topic.create(tmp_path, "orders", 1, _config()).close()
    (tmp_path / "orders" / TOPIC_CONFIG_FILE).write_bytes(data)
    with pytest.raises(StorageError, match=message) as e:
        Topic.open(tmp_path / "orders", _config(), resolve=_resolve)
    assert TOPIC_CONFIG_FILE in str(e.value)
    assert "remove" in str(e.value)


def test_configs_without_a_resolver_are_refused(tmp_path: Path) -> None:
    overrides = {"segment.bytes": "200"}
    Topic.create(tmp_path, "orders", 1, _resolve(overrides), overrides).close()
    with pytest.raises(StorageError, match="configs of its own"):
        Topic.open(tmp_path / "orders", _config())


def test_reconfigure_applies_to_open_logs_and_survives_reopen(tmp_path: Path) -> None:
    topic = Topic.create(tmp_path, "orders", 2, _config())
    try:
        new = topic.reconfigure(lambda old: {**old, "segment.bytes": "100"}, _resolve)
        assert new == {"segment.bytes": "100"} == topic.overrides
        assert [p.config.segment_bytes for p in topic.partitions] == [100, 100]
        # The very next append to the open log rolls at the new size.
        log = topic.partition(0)
        for i in range(3):
            log.append(encode_batch([Record(b"k", b"v" * 80, timestamp=i)]))
        assert len(log.segments) == 3
        topic.add_partitions(3)
        assert topic.partition(2).config.segment_bytes == 100
    finally:
        topic.close()
    reopened = Topic.open(tmp_path / "orders", _config(), resolve=_resolve)
    try:
        assert reopened.overrides == {"segment.bytes": "100"}
        assert reopened.partition(1).config.segment_bytes == 100
        reopened.reconfigure(lambda old: {}, _resolve)
        assert reopened.config == _resolve({})
        assert TOPIC_CONFIG_FILE not in os.listdir(tmp_path / "orders")
    finally:
        reopened.close()


def test_a_refused_or_validate_only_reconfigure_changes_nothing(tmp_path: Path) -> None:
    overrides = {"retention.ms": "1000"}
    topic = Topic.create(tmp_path, "orders", 1, _resolve(overrides), overrides)
    before = (tmp_path / "orders" / TOPIC_CONFIG_FILE).read_bytes()
    try:
        with pytest.raises(ConfigError, match=r"segment\.bytes"):
            topic.reconfigure(lambda old: {**old, "segment.bytes": "1"}, _resolve)
        checked = topic.reconfigure(lambda old: {"retention.ms": "5"}, _resolve, validate_only=True)
        assert checked == {"retention.ms": "5"}
        assert topic.overrides == overrides
        assert topic.partition(0).config.retention_ms == 1000
        assert (tmp_path / "orders" / TOPIC_CONFIG_FILE).read_bytes() == before
    finally:
        topic.close()
    with pytest.raises(UnknownTopic):
        topic.reconfigure(lambda old: {}, _resolve)


def test_a_leftover_of_an_interrupted_replacement_is_removed(tmp_path: Path) -> None:
    """A crash between writing the .tmp and renaming it leaves the old file whole."""
    overrides = {"retention.ms": "1000"}
    Topic.create(tmp_path, "orders", 1, _resolve(overrides), overrides).close()
    (tmp_path / "orders" / f"{TOPIC_CONFIG_FILE}.tmp").write_bytes(b"half a")
    topic = Topic.open(tmp_path / "orders", _config(), resolve=_resolve)
    try:
        assert topic.overrides == overrides
        assert sorted(os.listdir(tmp_path / "orders")) == ["0", TOPIC_CONFIG_FILE]
    finally:
        topic.close()


def test_concurrent_reconfigures_lose_no_change(tmp_path: Path) -> None:
    topic = Topic.create(tmp_path, "orders", 1, _config())
    keys = [
        "delete.retention.ms",
        "file.delete.delay.ms",
        "min.compaction.lag.ms",
        "segment.jitter.ms",
        "flush.ms",
        "local.retention.ms",
    ]
    try:
        threads = [
            threading.Thread(
                target=topic.reconfigure, args=(lambda old, k=k: {**old, k: "7"}, _resolve)
            )
            for k in keys
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert topic.overrides == dict.fromkeys(keys, "7")
    finally:
        topic.close()
    assert decode_topic_config(
        (tmp_path / "orders" / TOPIC_CONFIG_FILE).read_bytes()
    ) == dict.fromkeys(keys, "7")
