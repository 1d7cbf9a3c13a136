"""A topic: numbered partition folders under ``data_dir/<topic>/`` plus key routing.

The partition count *is* the number of folders, so the folders must only ever
appear whole and in order. Creation therefore builds the complete tree under a
temporary name and renames it into place in one step, and ``open`` refuses a
topic whose folders are not exactly ``0..n-1``, because a gap means keys would
silently route to a different partition than before.

A topic's own configs (Kafka topic configs, docs/kafka.md "Topic configs") are
the one metadata file, ``topic-config`` (rustka/storage/log_files.py): written
into the tree before the rename that creates the topic, replaced whole when
they change, and checked when the topic opens by the broker's `Resolver`, which
turns them into the LogConfig every partition of the topic uses. Storage keeps
them as given and never interprets them itself.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from rustka import partitioner
from rustka.errors import (
    InvalidConfig,
    InvalidPartitionCount,
    StorageError,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)
from rustka.names import validate_stored_topic
from rustka.storage.file_io import close_all, fsync_dir, replace_file
from rustka.storage.log_config import LogConfig, Resolver
from rustka.storage.log_files import (
    TOPIC_CONFIG_FILE,
    DamagedFile,
    decode_topic_config,
    encode_topic_config,
)
from rustka.storage.partition_log import PartitionLog

MAX_PARTITIONS = 10_000

# "~" is outside the topic name alphabet, so a temporary directory can never be
# mistaken for (or collide with) a real topic or partition folder.
TEMP_MARKER = ".tmp~"
# Likewise for a topic being deleted: renamed out of the way first, then removed.
DELETED_MARKER = ".deleted~"
_PARTITION_DIR = re.compile(r"0|[1-9][0-9]*")
_DIGITS = re.compile(r"[0-9]+")
# Keeps temporary names under NAME_MAX even for a 249-character topic name.
_TEMP_NAME_PREFIX_CHARS = 64


def temp_name(label: str) -> str:
    """A fresh name for a directory that is built first and renamed into place later."""
    return f"{label[:_TEMP_NAME_PREFIX_CHARS]}{TEMP_MARKER}{secrets.token_hex(8)}"


def is_temp_name(name: str) -> bool:
    """True for leftovers of an interrupted create or delete, which are safe to remove."""
    return TEMP_MARKER in name or DELETED_MARKER in name


def deleted_name(label: str) -> str:
    """A fresh name a deleted topic's directory is renamed to before it is removed."""
    return f"{label[:_TEMP_NAME_PREFIX_CHARS]}{DELETED_MARKER}{secrets.token_hex(8)}"


def check_partition_count(count: object) -> int:
    """Return ``count`` if a topic may have that many partitions, else raise."""
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidPartitionCount(f"partition count must be an integer, got {count!r}")
    if not 1 <= count <= MAX_PARTITIONS:
        raise InvalidPartitionCount(
            f"partition count must be between 1 and {MAX_PARTITIONS}, got {count}"
        )
    return count


def _make_partition_dir(path: Path) -> None:
    """Create one empty partition folder and make its creation durable."""
    path.mkdir()
    fsync_dir(path)


class Topic:
    """The partitions of one topic, in partition order.

    ``partitions`` is replaced, never mutated, when partitions are added, so a
    reader that grabbed the list keeps a consistent view.
    """

    diskless: ClassVar[bool] = False
    """Whether the partitions live in the diskless engine (rustka/storage/diskless/)."""
    name: str
    directory: Path | None
    """Where the topic's partitions live; None for a diskless topic, which has none."""
    partitions: list[PartitionLog]
    config: LogConfig
    overrides: Mapping[str, str]

    def __init__(
        self,
        name: str,
        directory: Path | None,
        partitions: list[PartitionLog],
        config: LogConfig,
        overrides: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.directory = directory
        self.partitions = partitions
        self.config = config
        #: The topic's own configs, as stored (replaced, never mutated).
        self.overrides = dict(overrides or {})
        # add_partitions from two requests at once must not both create folder n.
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def create(
        cls,
        data_dir: Path,
        name: str,
        partition_count: int,
        config: LogConfig,
        overrides: Mapping[str, str] | None = None,
    ) -> Topic:
        """Create the topic's folders (and configs) atomically, then open its partition logs.

        Everything is validated before the first byte touches the disk, and a
        crash at any point leaves either no topic or a complete one (plus a
        temporary directory that the next startup removes). ``config`` is what
        ``overrides``, the topic's own configs, resolve to.
        """
        validate_stored_topic(name)
        check_partition_count(partition_count)
        data_dir = Path(data_dir)
        directory = data_dir / name
        if directory.exists():
            raise TopicExists(f"topic {name!r} already exists")
        staging = data_dir / temp_name(name)
        staging.mkdir()
        try:
            for index in range(partition_count):
                _make_partition_dir(staging / str(index))
            if overrides:
                replace_file(staging / TOPIC_CONFIG_FILE, encode_topic_config(overrides))
            fsync_dir(staging)
            try:
                os.rename(staging, directory)
            except OSError as e:
                if e.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                    raise TopicExists(f"topic {name!r} already exists") from e
                raise
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        fsync_dir(data_dir)
        return cls.open(directory, config, resolve=lambda _: config)

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        recover: bool = False,
        resolve: Resolver | None = None,
    ) -> Topic:
        """Open every partition folder of an existing topic.

        ``recover`` is passed to each partition log: after an unclean shutdown
        the tails of the logs must be scanned and torn writes truncated.
        ``config`` is the broker's; a topic with configs of its own gets what
        ``resolve`` makes of them, and a damaged or invalid ``topic-config``
        file is a StorageError naming it: opening the topic with the broker's
        settings instead could delete what its own retention keeps.
        """
        directory = Path(directory)
        name = validate_stored_topic(directory.name)
        overrides = read_topic_config(directory)
        if overrides:
            if resolve is None:
                raise StorageError(
                    f"{directory / TOPIC_CONFIG_FILE}: the topic has configs of its own, "
                    f"and nothing was given to read them"
                )
            try:
                config = resolve(overrides)
            except Exception as e:
                raise StorageError(
                    f"{directory / TOPIC_CONFIG_FILE}: {e}; fix or remove the file "
                    f"(without it the topic has the broker's settings)"
                ) from e
        indexes = _list_partitions(directory)
        partitions: list[PartitionLog] = []
        try:
            for index in indexes:
                partitions.append(
                    PartitionLog.open(directory / str(index), config, recover=recover)
                )
        except BaseException:
            for log in partitions:
                log.close()
            raise
        return cls(name, directory, partitions, config, overrides)

    def reconfigure(
        self,
        change: Callable[[Mapping[str, str]], Mapping[str, str]],
        resolve: Resolver,
        *,
        validate_only: bool = False,
    ) -> Mapping[str, str]:
        """Replace the topic's own configs with ``change(current)``; returns the new ones.

        ``resolve`` checks them (its error propagates, and nothing changes);
        then the file is replaced whole and every open partition log takes
        the new LogConfig at once (retention, rolls, size limits and the
        timestamp type apply from the next append or pass; segments already
        open keep their index interval). One change at a time per topic, each
        computed from the last, so concurrent alters never lose one another.
        ``validate_only`` stops after the check.
        """
        with self._lock:
            if self._closed:
                raise UnknownTopic(f"topic {self.name!r} was deleted or closed")
            new = dict(change(self.overrides))
            config = resolve(new)
            if config.diskless_enable != self.diskless:
                raise InvalidConfig(
                    "diskless.enable cannot change once a topic exists: create a new topic "
                    "and copy the records over (rustka mirror)"
                )
            if validate_only:
                return new
            self._store_configs(new)
            self.overrides = new
            self.config = config
            for log in self.partitions:
                log.config = config
            return new

    def _store_configs(self, configs: Mapping[str, str]) -> None:
        """Make the topic's own configs durable: its ``topic-config`` file, replaced whole."""
        assert self.directory is not None
        path = self.directory / TOPIC_CONFIG_FILE
        try:
            if configs:
                replace_file(path, encode_topic_config(configs))
            elif path.exists():
                path.unlink()
                fsync_dir(self.directory)
        except OSError as e:
            raise StorageError(f"cannot write {path}: {e.strerror}") from e

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    def partition(self, index: int) -> PartitionLog:
        """The log of partition ``index``; the error names the valid range."""
        partitions = self.partitions
        if (
            isinstance(index, bool)
            or not isinstance(index, int)
            or not 0 <= index < len(partitions)
        ):
            raise UnknownPartition(
                f"topic {self.name!r} has no partition {index!r} "
                f"(it has partitions 0-{len(partitions) - 1})"
            )
        return partitions[index]

    def partition_for_key(self, key: bytes) -> int:
        """Route a key exactly as Kafka's default partitioner would."""
        return partitioner.partition_for_key(key, len(self.partitions))

    def add_partitions(self, new_count: int) -> None:
        """Grow the topic to ``new_count`` partitions (keys may move, as in Kafka).

        New folders are created one at a time in increasing order, each made
        durable before the next, so a crash can only leave a shorter but still
        contiguous topic, never a gap.
        """
        check_partition_count(new_count)
        with self._lock:
            if self._closed:
                raise UnknownTopic(f"topic {self.name!r} was deleted or closed")
            try:
                self._add_partitions_locked(new_count)
            except OSError as e:
                raise StorageError(
                    f"cannot add partitions to topic {self.name!r}: {e.strerror}"
                ) from e

    def _add_partitions_locked(self, new_count: int) -> None:
        current = len(self.partitions)
        if new_count == current:
            raise InvalidPartitionCount(
                f"topic {self.name!r} already has {current} partitions; "
                f"the new count must be larger"
            )
        if new_count < current:
            raise InvalidPartitionCount(
                f"topic {self.name!r} has {current} partitions and cannot shrink to {new_count}"
            )
        added: list[PartitionLog] = []
        try:
            for index in range(current, new_count):
                staging = self.directory / temp_name(str(index))
                final = self.directory / str(index)
                try:
                    _make_partition_dir(staging)
                    os.rename(staging, final)
                except BaseException:
                    shutil.rmtree(staging, ignore_errors=True)
                    raise
                fsync_dir(self.directory)
                added.append(PartitionLog.open(final, self.config))
        finally:
            if added:
                self.partitions = self.partitions + added

    def describe(self) -> list[dict[str, Any]]:
        """Per-partition figures for admin views (CLI, manhole, metrics)."""
        rows: list[dict[str, Any]] = []
        for index, log in enumerate(self.partitions):
            rows.append(
                {
                    "topic": self.name,
                    "partition": index,
                    "log_start_offset": log.log_start_offset,
                    "end_offset": log.end_offset,
                    "size_bytes": log.size_bytes,
                    "segments": len(log.segments),
                }
            )
        return rows

    def close(self) -> None:
        """Flush and close every partition, even if one of them fails."""
        with self._lock:
            self._closed = True
        close_all(self.partitions)


def read_topic_config(directory: Path) -> dict[str, str]:
    """The configs a topic directory's ``topic-config`` file holds ({} without one).

    A ``.tmp`` leftover of an interrupted replacement is removed: the file it
    was to replace is still whole. Damage is a StorageError naming the file.
    """
    path = directory / TOPIC_CONFIG_FILE
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path.with_name(TOPIC_CONFIG_FILE + ".tmp"))
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise StorageError(f"cannot read {path}: {e.strerror}") from e
    try:
        return decode_topic_config(data)
    except DamagedFile as e:
        raise StorageError(
            f"{path} is damaged ({e}); restore it or remove it "
            f"(without it the topic has the broker's settings)"
        ) from e


def _list_partitions(directory: Path) -> list[int]:
    """The partition numbers found in ``directory``, checked to be exactly ``0..n-1``.

    Leftover temporary folders from an interrupted ``add_partitions`` are
    removed; anything else that looks numeric but is not canonical ("01") is an
    error, since it cannot be mapped to a partition unambiguously.
    """
    try:
        entries = list(os.scandir(directory))
    except OSError as e:
        raise StorageError(f"cannot list topic directory {directory}: {e.strerror}") from e
    found: list[int] = []
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        if is_temp_name(entry.name):
            shutil.rmtree(entry.path, ignore_errors=True)
            continue
        if _PARTITION_DIR.fullmatch(entry.name):
            found.append(int(entry.name))
        elif _DIGITS.fullmatch(entry.name):
            raise StorageError(
                f"topic directory {directory} has a non-canonical partition folder "
                f"{entry.name!r}; rename it (without leading zeros) or remove it"
            )
    found.sort()
    if not found:
        raise StorageError(f"topic directory {directory} has no partition folders")
    if found != list(range(len(found))):
        missing = sorted(set(range(found[-1] + 1)) - set(found))
        raise StorageError(
            f"topic directory {directory} has partition folders up to {found[-1]} but "
            f"is missing {', '.join(map(str, missing))}; partitions must be numbered "
            f"0..n-1 without gaps"
        )
    return found
