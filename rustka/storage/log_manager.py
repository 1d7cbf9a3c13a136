"""Every topic of one data dir: discovered at startup, created and deleted on demand.

The directory listing is the metadata, with each topic's own configs in its
directory (rustka/storage/topic.py), which the broker's `Resolver` turns into
the topic's LogConfig. A clean-shutdown marker file is
what lets startup trust the logs without scanning them: it is deleted as soon
as the broker starts (so a crash leaves it missing) and written back, durably,
only after every partition has been flushed and closed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rustka.errors import (
    BrokerUnavailable,
    InvalidName,
    RustkaError,
    StorageError,
    TopicExists,
    UnknownTopic,
)
from rustka.names import OFFSETS_TOPIC, validate_stored_topic
from rustka.storage.file_io import close_all, fsync_dir
from rustka.storage.log_config import LogConfig, Resolver
from rustka.storage.log_files import CLEAN_SHUTDOWN_MARKER
from rustka.storage.topic import Topic, check_partition_count, deleted_name, is_temp_name

if TYPE_CHECKING:
    # Imported only by a broker with a catalog: it needs the diskless extra's drivers.
    from rustka.storage.diskless.topics import DisklessTopics


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening one segment had to repair, for the broker to log at startup."""

    topic: str
    partition: int
    base_offset: int
    detail: Any

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition} segment {self.base_offset}: {self.detail}"


class LogManager:
    """The topics of a data dir.

    ``recovered`` says whether this startup scanned the logs because the last
    run did not shut down cleanly; the broker should open the offsets store with
    the same flag, since the marker it depends on is gone by then.
    """

    data_dir: Path
    topics: dict[str, Topic]
    config: LogConfig
    recovered: bool
    recovery_reports: list[RecoveryReport]

    def __init__(
        self, data_dir: Path, config: LogConfig, recovered: bool, resolve: Resolver | None = None
    ) -> None:
        self.data_dir = data_dir
        self.config = config
        self.resolve: Resolver = resolve or _no_configs_of_their_own(config)
        self.recovered = recovered
        self.topics = {}
        self.recovery_reports = []
        self.diskless: DisklessTopics | None = None
        """The diskless topics' registry, when the broker has a catalog (docs/diskless.md)."""
        self.diskless_clashes: list[str] = []
        """Names both a local topic here and a diskless one in the catalog: served local."""
        self.claim_local: Callable[[str, int], None] | None = None
        """In a cluster: takes a new local topic's name for this broker in the catalog
        first (`TopicExists` if another broker or a diskless topic has it)."""
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(
        cls,
        data_dir: Path,
        config: LogConfig,
        *,
        recover: bool | None = None,
        resolve: Resolver | None = None,
    ) -> LogManager:
        """Load every topic of ``data_dir``, creating the directory if needed.

        ``recover=None`` decides from the marker: a data dir that holds logs but
        no marker was not shut down cleanly, so its logs are scanned with CRCs.
        ``config`` is the broker's LogConfig; ``resolve`` makes a topic's from
        its own configs (without one, a topic that has configs fails to open).
        """
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        marker = data_dir / CLEAN_SHUTDOWN_MARKER
        had_marker = marker.exists()
        if had_marker:
            marker.unlink()
            fsync_dir(data_dir)
        entries = [e for e in os.scandir(data_dir) if e.is_dir(follow_symlinks=False)]
        for entry in entries:
            if is_temp_name(entry.name):
                shutil.rmtree(entry.path, ignore_errors=True)
        entries = [e for e in entries if not is_temp_name(e.name)]
        if recover is None:
            recover = not had_marker and bool(entries)
        manager = cls(data_dir, config, recover, resolve)
        try:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.name == OFFSETS_TOPIC or not _is_topic_name(entry.name):
                    continue
                topic = Topic.open(
                    Path(entry.path), config, recover=recover, resolve=manager.resolve
                )
                manager.topics[topic.name] = topic
                manager.recovery_reports.extend(_recovery_reports(topic))
        except BaseException:
            for topic in manager.topics.values():
                topic.close()
            raise
        return manager

    def topic(self, name: str) -> Topic:
        """The open topic ``name``; the error names it so the client can act."""
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopic(f"unknown topic {name!r}")
        return topic

    def get_or_create(self, name: str, partition_count: int) -> Topic:
        """The topic ``name``, created with ``partition_count`` partitions on first use
        (a diskless topic another broker created a moment ago is opened, not created)."""
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        with self._lock:
            topic = self.topics.get(name) or self._discover_locked(name)
            if topic is None:
                topic = self._create_locked(name, partition_count)
            return topic

    def discover(self, name: str) -> Topic | None:
        """The topic ``name``: open here, or a diskless topic the catalog defines that this
        broker's refresh has not brought yet (blocking: one catalog read)."""
        topic = self.topics.get(name)
        if topic is not None or self.diskless is None:
            return topic
        with self._lock:
            return self.topics.get(name) or self._discover_locked(name)

    def _discover_locked(self, name: str) -> Topic | None:
        if self.diskless is None:
            return None
        found = self.diskless.load(only=name).get(name)
        if found is not None:
            self.topics[name] = found
        return found

    def create_topic(
        self, name: str, partition_count: int, overrides: Mapping[str, str] | None = None
    ) -> Topic:
        """Create a new topic, with configs of its own if ``overrides``; an existing one is an
        error, never silently reused. ``resolve``'s error for bad configs propagates."""
        with self._lock:
            if name in self.topics:
                raise TopicExists(f"topic {name!r} already exists")
            return self._create_locked(name, partition_count, overrides)

    def _create_locked(
        self, name: str, partition_count: int, overrides: Mapping[str, str] | None = None
    ) -> Topic:
        self._check_open()
        validate_stored_topic(name)
        if name == CLEAN_SHUTDOWN_MARKER:
            raise InvalidName(f"invalid topic name {name!r}: reserved by the broker")
        check_partition_count(partition_count)
        config = self.resolve(overrides) if overrides else self.config
        topic: Topic
        if config.diskless_enable and self.diskless is not None:
            topic = self.diskless.create(name, partition_count, overrides or {})
        else:
            if self.claim_local is not None:
                self.claim_local(name, partition_count)
            topic = Topic.create(self.data_dir, name, partition_count, config, overrides)
        self.topics[name] = topic
        return topic

    def delete_topic(self, name: str) -> None:
        """Take topic ``name`` out of service, then remove its directory and free its space.

        Out of the topics map first, so no new lookup finds it; its files are
        closed, the directory is renamed to a name no topic can have (durably),
        and only then removed. A crash leaves either the whole topic or a
        renamed leftover that the next startup removes, never a half-deleted
        topic. A topic created later under the same name starts empty. The
        caller (the broker) must have stopped appends to it first.
        """
        with self._lock:
            self._check_open()
            topic = self.topics.pop(name, None)
        if topic is None:
            raise UnknownTopic(f"unknown topic {name!r}")
        if topic.directory is None:
            if self.diskless is None:
                raise StorageError(f"topic {name!r} has no directory and no catalog keeps it")
            try:
                self.diskless.delete(topic)  # type: ignore[arg-type]
            except BaseException:
                with self._lock:
                    self.topics.setdefault(name, topic)
                raise
            return
        with contextlib.suppress(RustkaError, OSError):
            # Its data is going away: a failed final flush (a full disk) must not
            # stop the deletion that would free the space.
            topic.close()
        target = self.data_dir / deleted_name(name)
        try:
            os.rename(topic.directory, target)
            fsync_dir(self.data_dir)
        except OSError as e:
            raise StorageError(f"cannot delete topic {name!r}: {e.strerror}") from e
        shutil.rmtree(target, ignore_errors=True)
        with contextlib.suppress(OSError):
            fsync_dir(self.data_dir)

    def describe(self) -> list[dict[str, Any]]:
        """Per-partition figures for every topic, sorted by topic name."""
        rows: list[dict[str, Any]] = []
        for name in sorted(self.topics):
            rows.extend(self.topics[name].describe())
        return rows

    def close(self) -> None:
        """Flush and close every partition, then durably mark the shutdown as clean.

        The marker is written only if every close succeeded: a partition that
        failed to flush must be scanned next time.
        """
        if self._closed:
            return
        self._closed = True
        with self._lock:
            topics = list(self.topics.values())
        close_all(topics)
        self._write_marker()

    def _write_marker(self) -> None:
        marker = self.data_dir / CLEAN_SHUTDOWN_MARKER
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"clean\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.data_dir)

    def _check_open(self) -> None:
        if self._closed:
            raise BrokerUnavailable("the log manager is closed: the broker is shutting down")


def _no_configs_of_their_own(config: LogConfig) -> Resolver:
    def resolve(overrides: Mapping[str, str]) -> LogConfig:
        if overrides:
            raise StorageError(
                f"topic configs {sorted(overrides)} given, and nothing to read them with"
            )
        return config

    return resolve


def _is_topic_name(name: str) -> bool:
    try:
        validate_stored_topic(name)
    except InvalidName:
        return False
    return name != CLEAN_SHUTDOWN_MARKER


def _recovery_reports(topic: Topic) -> list[RecoveryReport]:
    reports: list[RecoveryReport] = []
    for index, log in enumerate(topic.partitions):
        if log.log_start_note is not None:
            reports.append(
                RecoveryReport(topic.name, index, log.log_start_offset, log.log_start_note)
            )
        for segment in log.segments:
            detail = getattr(segment, "last_recovery", None)
            if detail:
                reports.append(RecoveryReport(topic.name, index, segment.base_offset, detail))
    return reports
