"""Each partition's write lane, and the partitions written since their last flush.

The produce path (`rustka.broker.produce`) queues appends on a partition's lane
and marks the partition dirty once they are stored; the background passes
(`rustka.broker.maintenance`) queue flushes and retention on the same lanes, so
they never race an append, and flush what is marked dirty. The core creates
one `PartitionLanes` and hands it to both, so neither reaches into the other
or into the core for them, and topic deletion retires a partition's lane and
its mark in one call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rustka.broker.lanes import IOPool, Lane

PartitionKey = tuple[str, int]

OFFSETS_KEY: PartitionKey = ("__offsets", 0)
"""The dirty mark of the offsets log, which has its own lane on the core."""

WriteMany = Callable[[list[Any]], list[Any]]
"""A lane's ``write_many``: every append queued on it, written in one call on the pool."""


class PartitionLanes:
    """The lanes of one broker's partitions, created on first use, and the dirty marks.

    ``writer_for(topic, partition)`` gives a new lane its ``write_many``; it
    raises the core's `UnknownTopic`/`UnknownPartition` for a partition that does
    not exist, so no lane is ever made for one. Dirty marks are kept only when
    ``track_dirty`` (``flush = "interval"``): under the other flush modes nobody
    flushes them, and an unbounded set of marks would be a leak.
    """

    def __init__(
        self,
        io: IOPool,
        writer_for: Callable[[str, int], WriteMany],
        *,
        track_dirty: bool,
    ) -> None:
        self._io = io
        self._writer_for = writer_for
        self._lanes: dict[PartitionKey, Lane] = {}
        self._dirty: set[PartitionKey] = set()
        self.track_dirty = track_dirty

    # -- lanes -------------------------------------------------------------------

    def lane(self, topic: str, partition: int) -> Lane:
        """The serial lane that owns writes to one partition."""
        key = (topic, partition)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = Lane(self._io, self._writer_for(topic, partition))
        return lane

    def existing(self, key: PartitionKey) -> Lane | None:
        """The partition's lane if it has one: a background pass must not revive a
        partition that was deleted."""
        return self._lanes.get(key)

    def all(self) -> list[Lane]:
        """Every lane, for a drain that waits for them all."""
        return list(self._lanes.values())

    def retire(self, keys: Iterable[PartitionKey]) -> list[Lane]:
        """Take these partitions' lanes away and drop their dirty marks (their topic is
        being deleted); the lanes taken are returned, for the caller to wait for their
        queued work. That work may mark the partitions dirty again as it finishes, so
        the deletion retires them once more when it is done."""
        retired = []
        for key in keys:
            lane = self._lanes.pop(key, None)
            if lane is not None:
                retired.append(lane)
            self._dirty.discard(key)
        return retired

    # -- dirty marks -------------------------------------------------------------

    def mark_dirty(self, key: PartitionKey) -> None:
        """Something was written to ``key`` (a partition or `OFFSETS_KEY`) and awaits a flush."""
        if self.track_dirty:
            self._dirty.add(key)

    def mark_clean(self, key: PartitionKey) -> None:
        """``key`` was flushed, or is gone and has nothing left to flush."""
        self._dirty.discard(key)

    @property
    def dirty(self) -> frozenset[PartitionKey]:
        """The marks now (a copy: a flush pass iterates it while marks change)."""
        return frozenset(self._dirty)
