"""The diskless topics: defined in the catalog, so every broker sharing it sees them.

A diskless topic is a `Topic` whose partitions are `DisklessPartition`s and whose
definition (partition count, configs) is a catalog row instead of a directory:
creating, growing, reconfiguring and deleting one changes that row, in one
transaction each, and the broker's topic map follows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rustka.errors import UnknownTopic
from rustka.storage.diskless.engine import DisklessEngine
from rustka.storage.diskless.partition import DisklessPartition
from rustka.storage.log_config import Resolver
from rustka.storage.topic import Topic, check_partition_count

__all__ = ["DisklessTopic", "DisklessTopics", "Refreshed", "apply_change"]


class DisklessTopic(Topic):
    """A topic kept by the diskless engine; see the module docstring."""

    diskless = True

    def __init__(
        self,
        name: str,
        partitions: list[DisklessPartition],
        config: Any,
        overrides: Mapping[str, str],
        engine: DisklessEngine,
    ) -> None:
        super().__init__(name, None, list(partitions), config, overrides)
        self.engine = engine

    def _store_configs(self, configs: Mapping[str, str]) -> None:
        """The topic's configs are its catalog row's: every broker reads them there."""
        self.engine.catalog.alter_configs(self.name, configs)

    def add_partitions(self, new_count: int) -> None:
        check_partition_count(new_count)
        with self._lock:
            if self._closed:
                raise UnknownTopic(f"topic {self.name!r} was deleted or closed")
            current = len(self.partitions)
            self.engine.catalog.add_partitions(self.name, new_count)
            added = [
                DisklessPartition(self.engine, self.name, i, self.config)
                for i in range(current, new_count)
            ]
            self.partitions = self.partitions + added

    def close(self) -> None:
        with self._lock:
            self._closed = True


class DisklessTopics:
    """Every diskless topic of the catalog, as this broker opened them."""

    def __init__(self, engine: DisklessEngine, resolve: Resolver) -> None:
        self.engine = engine
        self.resolve = resolve

    def load(self) -> dict[str, DisklessTopic]:
        """Open every topic the catalog defines, with its partitions' bounds (blocking)."""
        catalog = self.engine.catalog
        bounds = catalog.all_bounds()
        topics: dict[str, DisklessTopic] = {}
        for name, row in catalog.topics().items():
            config = self.resolve(row.configs)
            partitions = [
                DisklessPartition(self.engine, name, i, config, bounds.get((name, i), (0, 0)))
                for i in range(row.partitions)
            ]
            topics[name] = DisklessTopic(name, partitions, config, row.configs, self.engine)
        return topics

    def create(
        self, name: str, partition_count: int, overrides: Mapping[str, str]
    ) -> DisklessTopic:
        """Define a new diskless topic in the catalog (`TopicExists` if any broker has)."""
        check_partition_count(partition_count)
        config = self.resolve(overrides)
        self.engine.catalog.create_topic(name, partition_count, dict(overrides))
        partitions = [
            DisklessPartition(self.engine, name, i, config) for i in range(partition_count)
        ]
        return DisklessTopic(name, partitions, config, overrides, self.engine)

    def delete(self, topic: DisklessTopic) -> None:
        """Remove the topic's rows; its objects go to the collector afterwards."""
        topic.close()
        self.engine.catalog.delete_topic(topic.name)

    def refresh(self, topics: Mapping[str, Topic]) -> Refreshed:
        """What other brokers changed, read from the catalog (blocking): the partitions
        whose end moved (their long-polls are woken), the diskless topics created
        elsewhere (opened here, not yet added) and those deleted elsewhere. The caller
        applies the topic changes on its own thread."""
        catalog = self.engine.catalog
        # Which diskless topics this broker serves, taken before the catalog is read: a
        # topic created here while the catalog is read is in the catalog's answer or not
        # in this list, so it is never taken for one deleted elsewhere.
        served = [(n, t) for n, t in list(topics.items()) if isinstance(t, DisklessTopic)]
        bounds = catalog.all_bounds()
        rows = catalog.topics()
        refreshed = Refreshed()
        for name, topic in served:
            row = rows.get(name)
            if row is None:
                refreshed.gone.append(name)
                continue
            if row.configs != topic.overrides or row.partitions > len(topic.partitions):
                config = self.resolve(row.configs)
                grown = [
                    DisklessPartition(self.engine, name, i, config, bounds.get((name, i), (0, 0)))
                    for i in range(len(topic.partitions), row.partitions)
                ]
                refreshed.changed.append((topic, row.configs, config, grown))
            for index, plog in enumerate(list(topic.partitions)):
                seen = bounds.get((name, index))
                if seen is None or not isinstance(plog, DisklessPartition):
                    continue
                before = plog.end_offset
                plog.observe(*seen)
                if plog.end_offset > before:
                    refreshed.moved.append((name, index))
        for name, row in rows.items():
            if name in topics:
                continue
            config = self.resolve(row.configs)
            partitions = [
                DisklessPartition(self.engine, name, i, config, bounds.get((name, i), (0, 0)))
                for i in range(row.partitions)
            ]
            refreshed.added[name] = DisklessTopic(
                name, partitions, config, row.configs, self.engine
            )
        return refreshed


@dataclass
class Refreshed:
    """What `DisklessTopics.refresh` found other brokers changed."""

    moved: list[tuple[str, int]] = field(default_factory=list)
    added: dict[str, DisklessTopic] = field(default_factory=dict)
    gone: list[str] = field(default_factory=list)
    changed: list[tuple[DisklessTopic, dict[str, str], Any, list[DisklessPartition]]] = field(
        default_factory=list
    )
    """Topics another broker reconfigured or grew: (topic, its configs, their LogConfig,
    the new partitions)."""


def apply_change(
    topic: DisklessTopic, overrides: dict[str, str], config: Any, grown: list[DisklessPartition]
) -> None:
    """Take another broker's change to ``topic`` (on the broker's own thread)."""
    topic.overrides = dict(overrides)
    topic.config = config
    for log in topic.partitions:
        log.config = config
    if grown:
        topic.partitions = topic.partitions + grown
