"""A topic as a work queue: records of any of its partitions taken for one share-group member.

Kafka's ShareFetch names partitions; the native queue consumer (docs/protocol.md 7.16)
asks instead for "up to N records of this topic", as a worker asks a queue. This
module answers that with the share-group coordinator's per-partition acquisitions
(`ShareGroupCoordinator.acquire`, each durable before it is answered): partitions are
tried from a starting point that moves round on every call, so one busy partition
does not starve the others, until ``max_records`` are taken; when none are
available, the call waits (the broker's long-poll waiters) for new records or for
``max_wait_ms`` to pass, as a FetchBatch does.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from twisted.internet import defer

from rustka.broker.share_groups import (
    AckBatch,
    AcquireResult,
    ShareErrorCode,
    ShareGroupCoordinator,
)
from rustka.errors import (
    GroupHasActiveMembers,
    InvalidRecordState,
    InvalidRequest,
    RustkaError,
    UnknownTopic,
)

if TYPE_CHECKING:
    from rustka.broker.core import Broker

__all__ = ["acknowledge", "alter_offsets", "coordinator", "delete_offsets", "leave", "take"]

_turn = itertools.count()


def take(
    broker: Broker,
    group: str,
    member: str,
    topic: str,
    max_records: int,
    max_wait_ms: int,
    start: str | None = None,
) -> defer.Deferred[list[tuple[int, AcquireResult]]]:
    """Up to ``max_records`` records of ``topic`` acquired for ``member``, as
    ``(partition, result)`` pairs with records; an empty list if none came in time."""
    return defer.ensureDeferred(
        _take(broker, group, member, topic, max_records, max_wait_ms, start)
    )


async def _take(
    broker: Broker,
    group: str,
    member: str,
    topic: str,
    max_records: int,
    max_wait_ms: int,
    start: str | None,
) -> list[tuple[int, AcquireResult]]:
    shares = coordinator(broker)
    deadline = broker.reactor.seconds() + max_wait_ms / 1000
    while True:
        count = broker.partition_count(topic)
        if count == 0:
            raise UnknownTopic(f"unknown topic {topic!r}")
        first = next(_turn) % count
        # What a wait must see change: the log ends and the releases as of now, before
        # the tries, so news arriving during them cuts the wait short.
        seen = shares.available_events
        ends = [(topic, p, broker.bounds(topic, p)[1]) for p in range(count)]
        taken: list[tuple[int, AcquireResult]] = []
        left = max_records
        for i in range(count):
            partition = (first + i) % count
            result = await shares.acquire(group, member, topic, partition, left, start=start)
            if result.error == ShareErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise UnknownTopic(f"unknown topic or partition {topic}[{partition}]")
            if result.error:
                raise RustkaError(f"share group {group!r}: error {result.error} on {topic}")
            if result.acquired:
                taken.append((partition, result))
                left -= result.records
                if left <= 0:
                    break
        remaining = deadline - broker.reactor.seconds()
        if taken or remaining <= 0:
            return taken
        if shares.available_events != seen:
            continue
        # Woken by an append past ``ends``, or by records released, unlocked or
        # acknowledged (`ShareGroupCoordinator`'s ``on_available``).
        await broker.wait_for_data(ends, remaining)


def acknowledge(
    broker: Broker, group: str, member: str, topic: str, acks: Sequence[tuple[int, int, int]]
) -> defer.Deferred[list[tuple[int, int]]]:
    """Apply ``(partition, offset, kind)`` acknowledgements; fires once durable with
    ``(partition, code)`` per partition named, in first-named order: 0, or
    `InvalidRecordState`'s code for a partition where one did not apply."""
    by_partition: dict[int, list[AckBatch]] = {}
    for partition, offset, kind in acks:
        by_partition.setdefault(partition, []).append((offset, offset, (kind,)))
    shares = coordinator(broker)
    partitions = list(by_partition)
    done = [shares.acknowledge(group, member, topic, p, by_partition[p]) for p in partitions]

    def codes(errors: list[int]) -> list[tuple[int, int]]:
        return [
            (p, InvalidRecordState.code if error else 0)
            for p, error in zip(partitions, errors, strict=True)
        ]

    return defer.gatherResults(done, consumeErrors=True).addCallback(codes)


def alter_offsets(
    broker: Broker, group: str, offsets: Mapping[tuple[str, int], int]
) -> defer.Deferred[None]:
    """Restart share-partitions of an idle group at ``offsets`` (durably)."""
    shares = coordinator(broker)
    _require_idle(shares, group)
    return shares.alter_offsets(group, offsets).addCallback(_checked, group)


def delete_offsets(broker: Broker, group: str, topics: Sequence[str]) -> defer.Deferred[None]:
    """Forget an idle group's state for ``topics`` (every topic, and the group, when
    empty); durable when it fires."""
    shares = coordinator(broker)
    _require_idle(shares, group)
    if not topics:
        return shares.delete_offsets(group).addCallback(_checked, group)
    wanted = set(topics)
    partitions = [
        (w.topic, w.partition) for w in shares.partition_states(group) if w.topic in wanted
    ]
    return shares.delete_offsets(group, partitions).addCallback(_checked, group)


def _require_idle(shares: ShareGroupCoordinator, group: str) -> None:
    """Kafka changes a share group's offsets only while it is empty; native workers are
    not members, so records they hold count too."""
    if not shares.is_share_group(group):
        raise InvalidRequest(f"{group!r} is not a share group here")
    if shares.describe(group).members or any(w.acquired for w in shares.partition_states(group)):
        raise GroupHasActiveMembers(
            f"share group {group!r} has members or workers holding records; stop them first"
        )


def _checked(code: int, group: str) -> None:
    if code:
        raise RustkaError(f"share group {group!r}: error {code}")


def leave(broker: Broker, group: str, member: str) -> defer.Deferred[None]:
    """The member stops: what it holds is released now (durably), delivery counted."""
    return coordinator(broker).close_session(group, member)


def coordinator(broker: Broker) -> ShareGroupCoordinator:
    """The broker's share-group coordinator, once its state log is replayed."""
    shares = broker.share_groups
    if shares is None:
        raise RustkaError("share groups are not ready: the broker's storage is still opening")
    return shares
