"""Transaction markers: the partitions' side of ending a transaction.

The transaction coordinator (`rustka.broker.transactions`) decides; this part
writes each partition's COMMIT or ABORT control batch on the partition's lane
and tells the coordinator, at startup, which transactions the partitions still
hold open. `Markers` states what it needs of the core in `MarkersCore`, so it
never imports the core (`rustka.broker.core.Broker` builds it and delegates to it).
"""

from __future__ import annotations

from typing import Protocol

from twisted.internet import defer

from rustka.broker.deferreds import reports_errors
from rustka.broker.partition_lanes import PartitionLanes
from rustka.broker.waiters import Waiters
from rustka.storage.log_manager import LogManager
from rustka.storage.partition_store import PartitionStore


class MarkersCore(Protocol):
    """What `Markers` needs of the broker core (`rustka.broker.core.Broker` is one)."""

    lanes: PartitionLanes
    waiters: Waiters

    def check_open(self) -> LogManager:
        """The open storage; `BrokerUnavailable` while it is closed."""

    def partition(self, topic: str, partition: int) -> PartitionStore:
        """The partition's log; `UnknownTopic` or `UnknownPartition` if there is none."""


class Markers:
    """One broker's transaction markers; see the module docstring."""

    def __init__(self, core: MarkersCore) -> None:
        self._core = core

    def open_transactions(self) -> list[tuple[str, int, int, int]]:
        """(topic, partition, producer id, epoch) of every transaction a partition holds
        open, for the coordinator's check at startup."""
        logs = self._core.check_open()
        out = []
        for name, topic in sorted(logs.topics.items()):
            for index, plog in enumerate(topic.partitions):
                state = plog.producer_state
                for producer_id in sorted(plog.open_transactions()):
                    entry = state.entry(producer_id)
                    out.append((name, index, producer_id, 0 if entry is None else entry.epoch))
        return out

    @reports_errors
    def write_marker(
        self, topic: str, partition: int, producer_id: int, epoch: int, commit: bool
    ) -> defer.Deferred[int]:
        """End a transaction on one partition: a control batch on its lane, fsynced
        (the coordinator records the transaction complete only after every marker is
        durable), then long-polls woken, since the last stable offset moved."""
        core = self._core
        plog = core.partition(topic, partition)
        key = (topic, partition)

        def write() -> int:
            offset = plog.append_marker(producer_id, epoch, commit)
            if plog.config.flush != "always":  # "always" fsynced it already
                plog.flush()
            return offset

        def written(offset: int) -> int:
            core.waiters.wake(key)
            return offset

        return core.lanes.lane(topic, partition).submit(write).addCallback(written)
