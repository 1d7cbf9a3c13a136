"""Topic admin: creating, growing, reconfiguring and deleting topics, and their views.

Every admin request of either front-end (native CreateTopic ..., Kafka
CreateTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs,
DeleteTopics, Metadata's topics) and the produce path's auto-create come here.
Creation and growth run on the I/O pool within the broker-wide partition cap
(`TopicAdmin.auto_create_topic`, ``max_partitions``); a deletion first waits
for the appends queued to the topic, then drops its data, then every group's
commits on it.

A topic's configs are Kafka topic configs, declared and checked in
`rustka.config` (the arithmetic of an alter too: `altered_topic_configs`);
`TopicAdmin.resolve` turns them into the `LogConfig` the storage opens and
reconfigures a topic with.

`TopicAdmin` states what it needs of the core in `TopicAdminCore`, so it never
imports the core (`rustka.broker.core.Broker` builds it and delegates to it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from twisted.internet import defer
from twisted.python.failure import Failure

from rustka.broker.deferreds import reports_errors
from rustka.broker.partition_lanes import PartitionLanes
from rustka.broker.waiters import Waiters
from rustka.config import (
    CONFIG_OPS,
    Config,
    ConfigEntry,
    ConfigOp,
    altered_topic_configs,
    describe_broker_configs,
    describe_topic_configs,
    topic_configs,
)
from rustka.errors import (
    InvalidConfig,
    InvalidName,
    InvalidPartitionCount,
    InvalidRequest,
    TopicExists,
    UnknownTopic,
)
from rustka.names import INTERNAL_TOPICS, validate_topic
from rustka.settings import ConfigError
from rustka.storage.log_config import LogConfig
from rustka.storage.log_manager import LogManager
from rustka.storage.topic import Topic, check_partition_count

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as Metadata shows it; ``configs`` are its own (Kafka topic configs, as
    stored), without the broker's defaults."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: Mapping[str, str]


class TopicAdminCore(Protocol):
    """What `TopicAdmin` needs of the broker core (`rustka.broker.core.Broker` is one)."""

    config: Config
    lanes: PartitionLanes
    waiters: Waiters
    deleting: set[str]
    """Topics being deleted: the core's lookups no longer find them."""

    def check_serving(self) -> None:
        """Raise the `BrokerUnavailable` that says why admin requests cannot run now."""

    def check_open(self) -> LogManager:
        """The open storage; `BrokerUnavailable` while it is closed."""

    def topic(self, name: str) -> Topic:
        """The topic; `UnknownTopic` if there is none (or it is being deleted)."""

    def run(self, f: Callable[..., T], *args: Any) -> defer.Deferred[T]:
        """Run ``f`` on the I/O pool, counted so the core's drain waits for it."""

    def drop_topic_offsets(self, topic: str) -> defer.Deferred[None]:
        """Tombstone every group's commits on a deleted topic, durably."""

    def check_not_held_elsewhere(self, name: str) -> None:
        """`HeldElsewhere` if another broker of the cluster holds ``name`` as a local topic."""


class TopicAdmin:
    """The topic admin of one broker; see the module docstring."""

    def __init__(self, core: TopicAdminCore) -> None:
        self._core = core
        self._partitions_in_creation = 0

    def resolve(self, overrides: Mapping[str, str]) -> LogConfig:
        """A topic's LogConfig from its own configs over the broker's settings (the
        Resolver storage opens and reconfigures topics with)."""
        try:
            return self._core.config.log_config(overrides)
        except ConfigError as e:
            raise InvalidConfig(str(e)) from None

    def topic_configs(self, name: str) -> list[ConfigEntry]:
        """Every Kafka topic config of ``name`` with its value and source (DescribeConfigs)."""
        return describe_topic_configs(self._core.config, self._core.topic(name).overrides)

    def broker_configs(self) -> list[ConfigEntry]:
        """Every broker setting with its value and source; all read-only at run time."""
        return describe_broker_configs(self._core.config)

    def topics_snapshot(self, names: Iterable[str] | None = None) -> list[TopicInfo]:
        """Every topic (or those named, in that order; unknown names raise UnknownTopic)."""
        core = self._core
        logs = core.check_open()
        wanted = (
            sorted(n for n in logs.topics if n not in core.deleting) if names is None else names
        )
        return [self.topic_info(core.topic(name)) for name in wanted]

    def topic_info(self, topic: Topic) -> TopicInfo:
        partitions = tuple(
            PartitionInfo(index, plog.log_start_offset, plog.end_offset)
            for index, plog in enumerate(topic.partitions)
        )
        return TopicInfo(topic.name, partitions, dict(topic.overrides))

    @reports_errors
    def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str | None] | None = None,
        *,
        validate_only: bool = False,
    ) -> defer.Deferred[TopicInfo]:
        """Create a topic with configs of its own; an existing one is `TopicExists`.

        ``configs`` are Kafka topic configs, each checked by its declaration
        (`InvalidConfig` names a bad one) and stored with the topic. With
        ``validate_only`` every check runs and nothing is created (the answer is
        the topic as it would be, without partition bounds).
        """
        core = self._core
        core.check_serving()
        validate_topic(name)
        logs = core.check_open()
        try:
            own = topic_configs(configs or {})
        except ConfigError as e:
            raise InvalidConfig(str(e)) from None
        self.resolve(own)
        if validate_only:
            check_partition_count(partitions)
            if name in logs.topics and name not in core.deleting:
                raise TopicExists(f"topic {name!r} already exists")
            return defer.succeed(TopicInfo(name, (), own))
        d = self._with_partitions(partitions, logs.create_topic, name, partitions, own)
        return d.addCallback(self.topic_info)

    @reports_errors
    def alter_topic_configs(
        self,
        name: str,
        ops: Sequence[ConfigOp],
        *,
        replace: bool = False,
        validate_only: bool = False,
    ) -> defer.Deferred[dict[str, str]]:
        """Change a topic's own configs; fires with them as stored.

        ``ops`` apply in order (`rustka.config.altered_topic_configs`), to the
        configs the topic has when the change runs. Checked whole, then written and
        applied to the open partition logs at once, or only checked with
        ``validate_only``. Changes to one topic apply one at a time, each on the last.
        """
        core = self._core
        core.check_serving()
        topic = core.topic(name)
        for key, op, _ in ops:
            if op not in CONFIG_OPS:
                raise InvalidRequest(f"unknown config operation {op!r} for {key}")
        change = functools.partial(self._changed_configs, ops, replace)
        reconfigure = functools.partial(topic.reconfigure, validate_only=validate_only)
        return core.run(reconfigure, change, self.resolve).addCallback(dict)

    def _changed_configs(
        self, ops: Sequence[ConfigOp], replace: bool, current: Mapping[str, str]
    ) -> dict[str, str]:
        """Runs on the pool, under the topic's lock: the configs ``ops`` make of ``current``."""
        try:
            return altered_topic_configs(self._core.config, current, ops, replace=replace)
        except ConfigError as e:
            raise InvalidConfig(str(e)) from None

    @reports_errors
    def alter_topic(self, name: str, partitions: int) -> defer.Deferred[TopicInfo]:
        """Grow a topic to ``partitions`` partitions (never shrink it)."""
        core = self._core
        core.check_serving()
        self.check_not_kept(name, "grown")
        topic = core.topic(name)
        added = max(0, partitions - len(topic.partitions))
        d = self._with_partitions(added, topic.add_partitions, partitions)
        return d.addCallback(lambda _: self.topic_info(topic))

    @reports_errors
    def delete_topic(self, name: str) -> defer.Deferred[None]:
        """Delete a topic and its data once the appends already queued to it are done,
        then every group's commits on it."""
        core = self._core
        core.check_serving()
        self.check_not_kept(name, "deleted")
        topic = core.topic(name)
        logs = core.check_open()
        core.deleting.add(name)
        keys = [(name, index) for index in range(len(topic.partitions))]
        idle = defer.gatherResults([lane.when_idle() for lane in core.lanes.retire(keys)])
        d = idle.addCallback(lambda _: core.run(logs.delete_topic, name))
        d.addCallback(lambda _: core.drop_topic_offsets(name))

        def finished(result: Any) -> Any:
            core.deleting.discard(name)
            core.lanes.retire(keys)
            for key in keys:
                core.waiters.wake(key)
            return None if not isinstance(result, Failure) else result

        return d.addBoth(finished)

    def check_not_kept(self, name: str, what: str) -> None:
        """`InvalidName` for an internal topic the broker keeps (only it changes it)."""
        if name in INTERNAL_TOPICS and self._core.config.consumer_offsets_topic:
            raise InvalidName(
                f"topic {name!r} is kept by the broker from its offsets store: it cannot "
                f"be {what} (turn consumer_offsets_topic off first)"
            )

    def auto_create_topic(self, name: str) -> defer.Deferred[Topic]:
        """The topic, created with the default partition count if the config allows."""
        logs = self._core.check_open()
        self._core.check_not_held_elsewhere(name)
        config = self._core.config
        if not config.auto_create_topics:
            raise UnknownTopic(f"unknown topic {name!r} (auto-create is disabled)")
        count = config.default_partitions
        return self._with_partitions(count, logs.get_or_create, name, count)

    def _with_partitions(self, count: int, f: Callable[..., T], *args: Any) -> defer.Deferred[T]:
        """Run topic creation or growth on the pool within the broker-wide partition cap.

        Every partition holds open files, so the cap (``max_partitions``) keeps
        valid but greedy requests from exhausting the process's descriptors.
        Partitions being created count against it until their creation ends.
        """
        logs = self._core.check_open()
        existing = sum(len(t.partitions) for t in logs.topics.values())
        limit = self._core.config.max_partitions
        if existing + self._partitions_in_creation + count > limit:
            raise InvalidPartitionCount(
                f"the broker's limit of {limit} partitions would be exceeded "
                f"({existing} exist, {count} more requested)"
            )
        self._partitions_in_creation += count

        def release(result: Any) -> Any:
            self._partitions_in_creation -= count
            return result

        return self._core.run(f, *args).addBoth(release)
