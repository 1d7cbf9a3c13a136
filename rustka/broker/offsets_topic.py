"""Kafka's ``__consumer_offsets`` topic, kept from rustka's offsets store for the tools
that read it (Burrow, and Kafka's own ``kafka-console-consumer --formatter``).

rustka's committed offsets live in its own store (rustka.storage.offsets); Kafka keeps
them as records of an internal, compacted topic, and monitoring tools read that topic
to see every group's position without joining it. With ``consumer_offsets_topic`` on,
the broker writes each change of its store into ``__consumer_offsets`` as Kafka would:
one record per commit, keyed by group, topic and partition in Kafka's OffsetCommitKey
(version 1), valued in OffsetCommitValue version 3 (offset, leader epoch -1, metadata,
commit time), a null value when the commit is deleted or expires. The partition of a
group is Kafka's: the group id's Java hash modulo the partition count.

The store stays the record: the topic follows it (each write is handed over once it
is in the store's log) and is read-only to clients. At every start the broker writes
the store's current commits once more, so whatever a crash kept from the topic is
restated and compaction folds the repeats. docs/kafka.md, "The __consumer_offsets
topic", says what is written and what is not (group metadata records).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, Protocol

from twisted.internet import defer
from twisted.internet.interfaces import IReactorThreads
from twisted.logger import Logger
from twisted.python.failure import Failure

from rustka.broker.produce import Appends
from rustka.errors import BrokerUnavailable
from rustka.names import CONSUMER_OFFSETS_TOPIC
from rustka.record.batch import Record, encode_batch
from rustka.storage.log_manager import LogManager
from rustka.storage.offsets import Commit, OffsetsStore

KEY_VERSION = 1
VALUE_VERSION = 3
_INT16 = struct.Struct(">h")
_KEY_TAIL = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqi")
_INT64 = struct.Struct(">q")
# Records per batch: well under any batch size limit (a key and value are < 5 KB).
_BATCH_RECORDS = 500


def _string(text: str) -> bytes:
    data = text.encode()
    return _INT16.pack(len(data)) + data


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    """Kafka's OffsetCommitKey, version 1: the record's key."""
    return _INT16.pack(KEY_VERSION) + _string(group) + _string(topic) + _KEY_TAIL.pack(partition)


def offset_commit_value(offset: int, metadata: str, commit_ms: int) -> bytes:
    """Kafka's OffsetCommitValue, version 3 (the one Kafka writes): the record's value."""
    return _VALUE_HEAD.pack(VALUE_VERSION, offset, -1) + _string(metadata) + _INT64.pack(commit_ms)


def java_hash(text: str) -> int:
    """Java's ``String.hashCode``, over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group: str, partitions: int) -> int:
    """Kafka's choice: ``Utils.abs(groupId.hashCode) % partitions``."""
    h = java_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def records_of(commits: Sequence[Commit], commit_ms: int) -> list[tuple[str, Record]]:
    """(group, record) for each change of the store, in order."""
    out = []
    for c in commits:
        key = offset_commit_key(c[0], c[1], c[2])
        value = None
        if len(c) > 3:
            value = offset_commit_value(c[3], c[4] if len(c) == 5 else "", commit_ms)  # type: ignore[misc]
        out.append((c[0], Record(key=key, value=value, timestamp=commit_ms)))
    return out


class OffsetsTopicCore(Protocol):
    """What the topic's writer needs of the broker core (`Broker` is one)."""

    appends: Appends
    reactor: Any

    def check_open(self) -> LogManager: ...

    def run(self, f: Any, *args: Any) -> defer.Deferred[Any]: ...


class OffsetsTopic:
    """Writes the offsets store's changes into ``__consumer_offsets``."""

    log = Logger()

    def __init__(self, core: OffsetsTopicCore, store: OffsetsStore, partitions: int) -> None:
        self._core = core
        self._store = store
        self._partitions = partitions
        self.records_written = 0
        self.failed_writes = 0

    def create(self) -> defer.Deferred[None]:
        """Create the topic if it is missing (before the broker serves: see `follow`)."""
        logs = self._core.check_open()
        if CONSUMER_OFFSETS_TOPIC in logs.topics:
            made: defer.Deferred[Any] = defer.succeed(None)
        else:
            made = self._core.run(
                logs.create_topic,
                CONSUMER_OFFSETS_TOPIC,
                self._partitions,
                {"cleanup.policy": "compact"},
            )

        def created(_: Any) -> None:
            self._partitions = len(logs.topics[CONSUMER_OFFSETS_TOPIC].partitions)

        return made.addCallback(created)

    def follow(self) -> None:
        """Write the store's current commits, then each change (the broker is serving)."""
        reactor: IReactorThreads = self._core.reactor
        self._store.observer = lambda commits, ms: reactor.callFromThread(self.publish, commits, ms)
        by_time: dict[int, list[Commit]] = {}
        for (group, topic, partition), (offset, ms, metadata) in self._store.entries():
            by_time.setdefault(ms, []).append((group, topic, partition, offset, metadata))
        for ms, commits in sorted(by_time.items()):
            self.publish(commits, ms)

    def stop(self) -> None:
        self._store.observer = None

    def publish(self, commits: Sequence[Commit], commit_ms: int) -> None:
        """Append the records of ``commits``, one batch per partition (on its lane, in order)."""
        by_partition: dict[int, list[Record]] = {}
        for group, record in records_of(commits, commit_ms):
            by_partition.setdefault(partition_for(group, self._partitions), []).append(record)
        for partition, records in sorted(by_partition.items()):
            for start in range(0, len(records), _BATCH_RECORDS):
                chunk = records[start : start + _BATCH_RECORDS]
                # maybeDeferred: a broker that stops refuses at once (BrokerUnavailable).
                d = defer.maybeDeferred(
                    self._core.appends.append,
                    CONSUMER_OFFSETS_TOPIC,
                    partition,
                    encode_batch(chunk, timestamp=commit_ms),
                    auto_create=False,
                    internal=True,
                )
                d.addCallbacks(self._written, self._failed, callbackArgs=(len(chunk),))

    def _written(self, _: Any, count: int) -> None:
        self.records_written += count

    def _failed(self, failure: Failure) -> None:
        self.failed_writes += 1
        if not failure.check(BrokerUnavailable):  # stopping: restated at the next start
            self.log.failure("writing __consumer_offsets failed", failure)
