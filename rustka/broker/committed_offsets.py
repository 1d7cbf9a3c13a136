"""Committed offsets: each group's position per partition, for both protocols' groups.

Commits and deletions go through the core's one offsets lane, so concurrent
commits from any connection coalesce into one write and one fsync
(`CommittedOffsets.write_commits` is that lane's writer); reads of them
(`committed_offsets`, `group_offsets` for lag, `group_names`) are synchronous
lookups in the `OffsetsStore` the core opened. Offsets expire per Kafka's
``offsets.retention.minutes`` once their group is empty (`offsets_expiry`, for
`rustka.broker.maintenance`).

`CommittedOffsets` states what it needs of the core in `OffsetsCore`, so it
never imports the core (`rustka.broker.core.Broker` builds it and delegates to it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from twisted.internet import defer

from rustka.broker.deferreds import reports_errors
from rustka.broker.lanes import Lane
from rustka.broker.partition_lanes import OFFSETS_KEY, PartitionLanes
from rustka.config import Config
from rustka.names import validate_group, validate_stored_topic
from rustka.record.batch import ms_now
from rustka.storage.log_manager import LogManager
from rustka.storage.offsets import Commit, OffsetsStore
from rustka.storage.partition_store import PartitionStore

PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A group's committed offset beside the partition's bounds (bounds 0/0 if it is gone)."""

    topic: str
    partition: int
    committed: int
    log_start: int
    high_watermark: int

    @property
    def lag(self) -> int:
        """Records the group has yet to read; never negative even if the log was rewound."""
        return max(0, self.high_watermark - max(self.committed, self.log_start))


class EmptyGroups(Protocol):
    """Which groups are empty: the group coordinator knows (`GroupCoordinator` is one)."""

    def empty_since(self, group_id: str, unknown_ms: int) -> int | None: ...


class OffsetsCore(Protocol):
    """What `CommittedOffsets` needs of the broker core (`rustka.broker.core.Broker` is one)."""

    config: Config
    lanes: PartitionLanes
    groups: EmptyGroups
    offsets: OffsetsStore | None
    offsets_lane: Lane | None

    def check_serving(self) -> None:
        """Raise the `BrokerUnavailable` that says why commits cannot run now."""

    def check_open(self) -> LogManager:
        """The open storage; `BrokerUnavailable` while it is closed."""

    def partition(self, topic: str, partition: int) -> PartitionStore:
        """The partition's log; `UnknownTopic` or `UnknownPartition` if there is none."""


class CommittedOffsets:
    """The committed offsets of one broker; see the module docstring."""

    def __init__(self, core: OffsetsCore) -> None:
        self._core = core
        # Offsets of groups not seen since the start expire counting from here at the
        # earliest (group states are not persisted).
        self._started_ms = ms_now()

    @reports_errors
    def commit_offsets(
        self,
        group: str,
        offsets: Mapping[PartitionKey, int],
        metadata: Mapping[PartitionKey, str] | None = None,
    ) -> defer.Deferred[None]:
        """Store a group's offsets for existing partitions, all or none, in one write."""
        core = self._core
        core.check_serving()
        validate_group(group)
        commits = []
        for (topic, partition), offset in offsets.items():
            core.partition(topic, partition)
            text = "" if metadata is None else metadata.get((topic, partition), "")
            commits.append((group, topic, partition, offset, text))
        lane = core.offsets_lane
        assert lane is not None
        return lane.append(commits).addCallback(self._committed)

    @reports_errors
    def delete_offsets(
        self, group: str, partitions: Iterable[PartitionKey] | None = None
    ) -> defer.Deferred[list[PartitionKey]]:
        """Delete a group's commits (of ``partitions`` only, if given), durably, in one
        write; answers the partitions that had one. Kafka members' checks are the caller's."""
        core = self._core
        core.check_serving()
        validate_group(group)
        assert core.offsets is not None
        present = set(core.offsets.group_partitions(group))
        doomed = sorted(present if partitions is None else present.intersection(partitions))
        if not doomed:
            return defer.succeed([])
        lane = core.offsets_lane
        assert lane is not None
        d = lane.append([(group, topic, partition) for topic, partition in doomed])
        return d.addCallback(self._committed).addCallback(lambda _: doomed)

    def drop_topic_offsets(self, topic: str) -> defer.Deferred[None]:
        """Tombstone every group's commits on a deleted topic, in one write, like Kafka's
        coordinator does on topic deletion: a topic re-created under the name must not
        inherit the old positions (they point into a log that no longer exists)."""
        core = self._core
        assert core.offsets is not None and core.offsets_lane is not None
        doomed = core.offsets.topic_commits(topic)
        if not doomed:
            return defer.succeed(None)
        d = core.offsets_lane.append([(group, topic, partition) for group, partition in doomed])
        return d.addCallback(self._committed)

    def _committed(self, _: None) -> None:
        self._core.lanes.mark_dirty(OFFSETS_KEY)

    def write_commits(self, items: list[list[Commit]]) -> list[None]:
        """The offsets lane's writer, on the pool: all queued commits in one batch, one
        write, one fsync."""
        core = self._core
        assert core.offsets is not None
        core.offsets.commit_many([commit for commits in items for commit in commits])
        if core.config.flush == "always":
            core.offsets.flush()
        return [None] * len(items)

    def committed_offsets(
        self, group: str, partitions: Iterable[PartitionKey] | None = None
    ) -> dict[PartitionKey, int]:
        """A group's committed offsets (of ``partitions`` only, if given; partitions
        without a commit are absent)."""
        core = self._core
        core.check_open()
        validate_group(group)
        assert core.offsets is not None
        if partitions is None:
            return dict(core.offsets.groups().get(group, {}))
        result: dict[PartitionKey, int] = {}
        for topic, partition in partitions:
            validate_stored_topic(topic)
            offset = core.offsets.committed(group, topic, partition)
            if offset is not None:
                result[(topic, partition)] = offset
        return result

    def committed_metadata(self, group: str) -> dict[PartitionKey, str]:
        """The metadata string of each of a group's commits ("" where it had none)."""
        core = self._core
        core.check_open()
        validate_group(group)
        assert core.offsets is not None
        return core.offsets.group_metadata(group)

    def group_offsets(self, group: str) -> tuple[PartitionLag, ...]:
        """A group's committed offsets beside each partition's current bounds.

        The one place lag is derived from (DescribeGroup, metrics, manhole); a
        partition that no longer exists shows bounds 0/0.
        """
        logs = self._core.check_open()
        entries = []
        for (topic_name, partition), offset in sorted(self.committed_offsets(group).items()):
            topic = logs.topics.get(topic_name)
            if topic is not None and partition < len(topic.partitions):
                plog = topic.partitions[partition]
                start, end = plog.log_start_offset, plog.end_offset
            else:
                start = end = 0
            entries.append(PartitionLag(topic_name, partition, offset, start, end))
        return tuple(entries)

    def offsets_expiry(self) -> tuple[int | None, dict[str, int | None]]:
        """See `MaintenanceCore.offsets_expiry`: the coordinator knows which groups are empty."""
        core = self._core
        assert core.offsets is not None
        groups = core.offsets.groups()
        since = {name: core.groups.empty_since(name, self._started_ms) for name in groups}
        return core.config.offsets_retention_ms, since

    def group_names(self) -> list[str]:
        """Groups that committed offsets, sorted (a coordinator adds its live groups)."""
        core = self._core
        core.check_open()
        assert core.offsets is not None
        return sorted(core.offsets.groups())
