"""LogManager: topic discovery (with each topic's own configs), auto-create, deletion and
the clean-shutdown marker."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from rustka.errors import (
    InvalidName,
    InvalidPartitionCount,
    StorageError,
    TopicExists,
    UnknownTopic,
)
from rustka.record.batch import Record, encode_batch
from rustka.settings import ConfigError
from rustka.storage.log_config import LogConfig
from rustka.storage.log_files import CLEAN_SHUTDOWN_MARKER
from rustka.storage.log_manager import LogManager
from rustka.storage.topic import deleted_name, temp_name


def _config(**overrides: object) -> LogConfig:
    config = LogConfig(segment_bytes=64 * 1024, flush="never")
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def _append(manager: LogManager, topic: str, partition: int, count: int) -> None:
    log = manager.topic(topic).partition(partition)
    for i in range(count):
        log.append(encode_batch([Record(f"k{i}".encode(), b"x" * 100)]))


def test_reopen_finds_topics_and_end_offsets(tmp_path: Path) -> None:
    """Every topic, its partition count and each partition's end offset survive a reopen."""
    manager = LogManager.open(tmp_path, _config())
    manager.create_topic("orders", 3)
    manager.create_topic("payments", 1)
    _append(manager, "orders", 0, 5)
    _append(manager, "orders", 2, 2)
    _append(manager, "payments", 0, 7)
    manager.close()

    reopened = LogManager.open(tmp_path, _config())
    try:
        assert sorted(reopened.topics) == ["orders", "payments"]
        assert [p.end_offset for p in reopened.topic("orders").partitions] == [5, 0, 2]
        assert [p.end_offset for p in reopened.topic("payments").partitions] == [7]
    finally:
        reopened.close()


def test_open_creates_missing_data_dir(tmp_path: Path) -> None:
    """A data dir that does not exist yet is created, and a fresh one needs no recovery."""
    data_dir = tmp_path / "nested" / "data"
    manager = LogManager.open(data_dir, _config())
    try:
        assert data_dir.is_dir()
        assert manager.recovered is False
        assert manager.topics == {}
    finally:
        manager.close()


def test_marker_present_after_close(tmp_path: Path) -> None:
    """close() leaves the clean-shutdown marker and the next open skips recovery."""
    manager = LogManager.open(tmp_path, _config())
    manager.create_topic("orders", 1)
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    manager.close()
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()

    reopened = LogManager.open(tmp_path, _config())
    try:
        assert reopened.recovered is False
        assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    finally:
        reopened.close()


def test_unclosed_open_is_recovered_next_time(tmp_path: Path) -> None:
    """Without close() the marker stays deleted, so the next open reports recovered=True."""
    manager = LogManager.open(tmp_path, _config())
    manager.create_topic("orders", 2)
    _append(manager, "orders", 1, 3)
    manager.close()

    crashed = LogManager.open(tmp_path, _config())
    _append(crashed, "orders", 1, 2)
    for topic in crashed.topics.values():
        topic.close()
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()

    recovered = LogManager.open(tmp_path, _config())
    try:
        assert recovered.recovered is True
        assert recovered.topic("orders").partition(1).end_offset == 5
    finally:
        recovered.close()


def test_explicit_recover_overrides_marker(tmp_path: Path) -> None:
    """recover=True forces a scan even after a clean shutdown."""
    manager = LogManager.open(tmp_path, _config())
    manager.create_topic("orders", 1)
    manager.close()
    forced = LogManager.open(tmp_path, _config(), recover=True)
    try:
        assert forced.recovered is True
    finally:
        forced.close()


def test_torn_tail_is_truncated_and_reported(tmp_path: Path) -> None:
    """After an unclean stop, a torn tail is cut back to the last whole batch and reported."""
    manager = LogManager.open(tmp_path, _config())
    manager.create_topic("orders", 1)
    _append(manager, "orders", 0, 4)
    manager.close()
    os.unlink(tmp_path / CLEAN_SHUTDOWN_MARKER)
    log_file = next((tmp_path / "orders" / "0").glob("*.log"))
    with open(log_file, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00\x01\x00garbage")

    recovered = LogManager.open(tmp_path, _config())
    try:
        assert recovered.recovered is True
        assert recovered.topic("orders").partition(0).end_offset == 4
        assert [(r.topic, r.partition) for r in recovered.recovery_reports] == [("orders", 0)]
        assert "orders/0" in str(recovered.recovery_reports[0])
    finally:
        recovered.close()


def test_skips_offsets_invalid_names_and_deletes_staging_dirs(tmp_path: Path) -> None:
    """__offsets and invalid names are ignored; leftover staging dirs are deleted."""
    (tmp_path / "__offsets").mkdir()
    (tmp_path / "bad name").mkdir()
    staging = tmp_path / temp_name("half")
    (staging / "0").mkdir(parents=True)
    manager = LogManager.open(tmp_path, _config())
    try:
        assert manager.topics == {}
        assert not staging.exists()
        assert (tmp_path / "__offsets").is_dir()
        assert (tmp_path / "bad name").is_dir()
    finally:
        manager.close()


def test_get_or_create_auto_creates_once(tmp_path: Path) -> None:
    """get_or_create creates a topic on first use and returns the same one afterwards."""
    manager = LogManager.open(tmp_path, _config())
    try:
        first = manager.get_or_create("orders", 3)
        again = manager.get_or_create("orders", 5)
        assert first is again
        assert len(again.partitions) == 3
        assert sorted(os.listdir(tmp_path / "orders")) == ["0", "1", "2"]
    finally:
        manager.close()


def test_concurrent_get_or_create_creates_one_topic(tmp_path: Path) -> None:
    """Several threads auto-creating the same topic all get one and the same Topic."""
    manager = LogManager.open(tmp_path, _config())
    results: list[object] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        try:
            results.append(manager.get_or_create("orders", 4))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        assert len(results) == 8
        assert all(r is results[0] for r in results)
        assert sorted(os.listdir(tmp_path)) == ["orders"]
    finally:
        manager.close()


def test_create_topic_twice_raises_topic_exists(tmp_path: Path) -> None:
    """create_topic refuses an existing topic instead of reusing it."""
    manager = LogManager.open(tmp_path, _config())
    try:
        manager.create_topic("orders", 2)
        with pytest.raises(TopicExists, match="orders"):
            manager.create_topic("orders", 2)
    finally:
        manager.close()


def test_unknown_topic_names_the_topic(tmp_path: Path) -> None:
    """topic() on a missing topic raises UnknownTopic mentioning its name."""
    manager = LogManager.open(tmp_path, _config())
    try:
        with pytest.raises(UnknownTopic, match="'nosuch'"):
            manager.topic("nosuch")
    finally:
        manager.close()


@pytest.mark.parametrize("name", ["../x", "__offsets", "", CLEAN_SHUTDOWN_MARKER])
def test_invalid_names_create_nothing(tmp_path: Path, name: str) -> None:
    """Auto-create with an illegal or reserved name raises InvalidName and writes nothing."""
    manager = LogManager.open(tmp_path, _config())
    try:
        with pytest.raises(InvalidName):
            manager.get_or_create(name, 3)
        assert os.listdir(tmp_path) == []
        assert manager.topics == {}
    finally:
        manager.close()


def test_invalid_partition_count_creates_nothing(tmp_path: Path) -> None:
    """A bad partition count is refused before any folder is created."""
    manager = LogManager.open(tmp_path, _config())
    try:
        with pytest.raises(InvalidPartitionCount):
            manager.create_topic("orders", 0)
        assert os.listdir(tmp_path) == []
    finally:
        manager.close()


def test_describe_lists_all_partitions(tmp_path: Path) -> None:
    """describe() covers every partition of every topic in name order."""
    manager = LogManager.open(tmp_path, _config())
    try:
        manager.create_topic("b", 2)
        manager.create_topic("a", 1)
        rows = manager.describe()
        assert [(r["topic"], r["partition"]) for r in rows] == [("a", 0), ("b", 0), ("b", 1)]
    finally:
        manager.close()


def _disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def test_delete_topic_removes_it_and_frees_its_space(tmp_path: Path) -> None:
    """delete_topic takes the topic out of service and removes every file; others are untouched."""
    manager = LogManager.open(tmp_path, _config(segment_bytes=1024))
    try:
        manager.create_topic("orders", 2)
        manager.create_topic("keep", 1)
        _append(manager, "orders", 0, 50)
        _append(manager, "keep", 0, 5)
        assert _disk_bytes(tmp_path / "orders") > 2000
        manager.delete_topic("orders")
        assert "orders" not in manager.topics
        with pytest.raises(UnknownTopic, match="'orders'"):
            manager.topic("orders")
        assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["keep"]
        assert manager.topic("keep").partition(0).end_offset == 5
        with pytest.raises(UnknownTopic):
            manager.delete_topic("orders")
    finally:
        manager.close()


def test_topic_created_again_after_delete_starts_empty(tmp_path: Path) -> None:
    """The same name created after a delete has new partitions at offset 0, also after restart."""
    manager = LogManager.open(tmp_path, _config())
    manager.create_topic("orders", 3)
    _append(manager, "orders", 1, 10)
    manager.delete_topic("orders")
    again = manager.create_topic("orders", 1)
    assert again.partition_count == 1
    assert again.partition(0).end_offset == 0
    _append(manager, "orders", 0, 2)
    manager.close()
    reopened = LogManager.open(tmp_path, _config())
    try:
        topic = reopened.topic("orders")
        assert topic.partition_count == 1 and topic.partition(0).end_offset == 2
    finally:
        reopened.close()


def test_leftover_of_an_interrupted_delete_is_removed_at_startup(tmp_path: Path) -> None:
    """A renamed directory left by a crash mid-delete is not a topic and is removed at open."""
    manager = LogManager.open(tmp_path, _config())
    manager.create_topic("orders", 1)
    _append(manager, "orders", 0, 3)
    manager.close()
    leftover = tmp_path / deleted_name("orders")
    (tmp_path / "orders").rename(leftover)
    reopened = LogManager.open(tmp_path, _config())
    try:
        assert reopened.topics == {}
        assert not leftover.exists()
    finally:
        reopened.close()


def test_topics_keep_their_own_configs_across_a_restart(tmp_path: Path) -> None:
    """Each topic's resolved LogConfig is what its partitions use; others get the broker's."""
    from rustka.config import Config

    broker = Config().updated({"flush": "never"})
    manager = LogManager.open(tmp_path, broker.log_config(), resolve=broker.log_config)
    manager.create_topic("compacted", 2, {"cleanup.policy": "compact", "segment.bytes": "500"})
    manager.create_topic("plain", 1)
    manager.close()
    reopened = LogManager.open(tmp_path, broker.log_config(), resolve=broker.log_config)
    try:
        compacted = reopened.topic("compacted")
        assert compacted.overrides == {"cleanup.policy": "compact", "segment.bytes": "500"}
        assert [(p.config.compact, p.config.segment_bytes) for p in compacted.partitions] == [
            (True, 500),
            (True, 500),
        ]
        assert reopened.topic("plain").partition(0).config == broker.log_config()
    finally:
        reopened.close()
    with pytest.raises(StorageError, match="nothing to read them with"):
        LogManager.open(tmp_path, broker.log_config())


def test_create_topic_with_bad_configs_creates_nothing(tmp_path: Path) -> None:
    from rustka.config import Config

    broker = Config()
    manager = LogManager.open(tmp_path, broker.log_config(), resolve=broker.log_config)
    try:
        with pytest.raises(ConfigError, match="Unknown topic config name: nope"):
            manager.create_topic("orders", 1, {"nope": "1"})
        assert "orders" not in manager.topics
        assert os.listdir(tmp_path) == []
    finally:
        manager.close()
