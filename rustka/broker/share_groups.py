"""The share-group coordinator (KIP-932, "queues for Kafka"), protocol-neutral, on the reactor.

A share group's members all read the same partitions; each record goes to one member at
a time, which acknowledges it (accept, release, reject) or lets its acquisition lock run
out. This module holds the groups (membership by heartbeat, member and group epochs,
session timeouts, the assignment), and the share-partitions
(rustka.storage.share_partition), and is what a front-end calls: `heartbeat`,
`acquire`, `acknowledge`, `close_session`, `describe`, `list_groups` and the
offsets admin (`describe_offsets`, `alter_offsets`, `delete_offsets`).

Durability (docs/kafka.md, "Share groups (KIP-932)"): every change a share-partition
reports is written to the share-state log (rustka.storage.share_state) on the I/O pool,
in order, and a call's Deferred fires only once its changes are on disk. Membership is
not durable, as in Kafka: members heartbeat again after a restart.

Assignment follows Kafka's simple share assignor: every subscribed partition is given
to at least one member, and when a topic has more members than partitions, members
share partitions. Error codes are Kafka's numbers (`ShareErrorCode`), defined here so
the core depends on no front-end.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from rustka.broker.reads import ReadResult
from rustka.errors import RustkaError
from rustka.record.batch import parse_header
from rustka.record.control import is_control
from rustka.storage.share_partition import (
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    DEFAULT_DELIVERY_COUNT_LIMIT,
    DEFAULT_LOCK_DURATION_MS,
    DEFAULT_MAX_IN_FLIGHT,
    AcquiredRange,
    Counts,
    Delta,
    InvalidRecordState,
    SharePartition,
)
from rustka.storage.share_state import ShareKey, ShareStateLog

log = Logger()
T = TypeVar("T")


class ShareErrorCode(enum.IntEnum):
    """Kafka's error codes for share-group answers (ints on the wire)."""

    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_COORDINATOR = 16
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_REQUEST = 42
    KAFKA_STORAGE_ERROR = 56
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_MEMBER_EPOCH = 110
    INVALID_RECORD_STATE = 121


E = ShareErrorCode


class ShareCore(Protocol):
    """What the coordinator needs of the broker core (`rustka.broker.core.Broker` is one)."""

    def partition_count(self, name: str) -> int: ...

    def bounds(self, topic: str, partition: int) -> tuple[int, int]: ...

    def read(
        self, topic: str, partition: int, offset: int, max_bytes: int
    ) -> defer.Deferred[ReadResult]: ...

    def run(self, f: Callable[..., T], *args: Any) -> defer.Deferred[T]: ...


@dataclass(frozen=True, slots=True)
class ShareSettings:
    """Kafka's share-group settings, with Kafka's defaults."""

    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    lock_duration_ms: int = DEFAULT_LOCK_DURATION_MS  # group.share.record.lock.duration.ms
    delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT  # group.share.delivery.count.limit
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT  # group.share.partition.max.record.locks
    max_group_size: int = 200  # group.share.max.size
    auto_offset_reset: str = "latest"  # share.auto.offset.reset (a group config)


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: int
    member_id: str = ""
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    # topic -> partitions; None when the member already has this assignment.
    assignment: Mapping[str, Sequence[int]] | None = None
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class AcquireResult:
    """Records of one partition for one member: whole stored batches (``chunks``, the
    records outside ``acquired`` are not the member's) and the acquired ranges."""

    error: int = E.NONE
    chunks: tuple[bytes, ...] = ()
    acquired: tuple[AcquiredRange, ...] = ()

    @property
    def records(self) -> int:
        return sum(r.last - r.first + 1 for r in self.acquired)


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    member_epoch: int
    rack_id: str | None
    subscribed_topics: tuple[str, ...]
    assignment: Mapping[str, Sequence[int]]


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    group_id: str
    state: str  # "Empty", "Stable" or "Dead" (unknown group)
    group_epoch: int
    assignment_epoch: int
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True, slots=True)
class SharePartitionState:
    """A started share-partition as the operator's views show it: the in-flight window
    ``start_offset``..``end_offset`` (exclusive) and how many of its records are in each
    state (docs/kafka.md, "Share groups (KIP-932)")."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    available: int
    acquired: int
    acknowledged: int
    archived: int


AckBatch = tuple[int, int, Sequence[int]]
"""``(first_offset, last_offset, types)``: one acknowledgement batch, as on the wire."""


@dataclass(slots=True)
class _Member:
    member_id: str
    epoch: int
    subscribed: tuple[str, ...] = ()
    rack_id: str | None = None
    assignment: dict[str, list[int]] = field(default_factory=dict)
    timer: IDelayedCall | None = None


@dataclass(slots=True)
class _Group:
    group_id: str
    epoch: int = 0
    members: dict[str, _Member] = field(default_factory=dict)
    auto_offset_reset: str | None = None


class ShareGroupCoordinator:
    """Share groups of one broker; see the module docstring."""

    def __init__(
        self,
        reactor: IReactorTime,
        core: ShareCore,
        state_log: ShareStateLog,
        *,
        settings: ShareSettings = ShareSettings(),
        classic_has_members: Callable[[str], bool] = lambda group_id: False,
        on_available: Callable[[str, int], None] = lambda topic, partition: None,
    ) -> None:
        self._reactor = reactor
        self._core = core
        self._log = state_log
        self.settings = settings
        self._classic_has_members = classic_has_members
        # Records released or unlocked are new to a waiting fetch, as an append is: the
        # broker wakes the long-polls parked on the partition (`Waiters.wake`).
        self._on_available = on_available
        self.available_events = 0
        self.heartbeats = 0
        """ShareGroupHeartbeats handled since the start (for the metrics)."""
        """How many times records became available other than by an append: a waiting
        fetch compares it before and after a try, so a wake-up between is not lost."""
        self._groups: dict[str, _Group] = {}
        self._partitions: dict[ShareKey, SharePartition] = {}
        self._expiry: dict[ShareKey, IDelayedCall] = {}
        self._pending: list[tuple[Callable[[], None], defer.Deferred[None]]] = []
        self._writing = False
        # What share-partitions forgotten since the start counted (`counts` adds them).
        self._retired = Counts()
        for key, state in state_log.state.items():
            self._groups.setdefault(key[0], _Group(key[0]))
            self._partitions[key] = SharePartition.restore(
                state.start_offset, state.records or {}, **self._partition_settings()
            )

    # --- groups --------------------------------------------------------------------------

    def is_share_group(self, group_id: str) -> bool:
        """Whether ``group_id`` is a share group here (for the classic coordinator: a group
        id is one type only)."""
        return group_id in self._groups

    def list_groups(self) -> list[tuple[str, str]]:
        """``(group_id, state)`` of every share group."""
        return [(g.group_id, "Stable" if g.members else "Empty") for g in self._groups.values()]

    def set_auto_offset_reset(self, group_id: str, value: str) -> None:
        """The group config ``share.auto.offset.reset``: "latest" or "earliest"."""
        if value not in ("latest", "earliest"):
            raise ValueError(f"share.auto.offset.reset must be latest or earliest, not {value!r}")
        self._groups.setdefault(group_id, _Group(group_id)).auto_offset_reset = value

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        subscribed_topics: Sequence[str] | None,
        rack_id: str | None = None,
    ) -> HeartbeatResult:
        """One ShareGroupHeartbeat: join (epoch 0), keep alive, change subscription, or
        leave (epoch -1)."""
        self.heartbeats += 1
        if not group_id:
            return HeartbeatResult(E.INVALID_REQUEST, error_message="GroupId can't be empty")
        if group_id not in self._groups and self._classic_has_members(group_id):
            return HeartbeatResult(
                E.GROUP_ID_NOT_FOUND, error_message=f"Group {group_id} is not a share group"
            )
        group = self._groups.get(group_id)
        if member_epoch == -1:
            member = None if group is None else group.members.get(member_id)
            if member is None:
                return HeartbeatResult(E.UNKNOWN_MEMBER_ID, member_id, -1)
            assert group is not None
            # Its records stay acquired: a leaving client closes its share session next,
            # with its last acknowledgements (`close_session` releases what is left).
            self._remove_member(group, member, release=False)
            return HeartbeatResult(E.NONE, member_id, -1, self.settings.heartbeat_interval_ms)
        if member_epoch == 0:
            if subscribed_topics is None:
                return HeartbeatResult(
                    E.INVALID_REQUEST, error_message="SubscribedTopicNames must be set to join"
                )
            group = self._groups.setdefault(group_id, _Group(group_id))
            member_id = member_id or str(uuid.uuid4())
            member = group.members.get(member_id)
            if member is None:
                if len(group.members) >= self.settings.max_group_size:
                    return HeartbeatResult(E.GROUP_MAX_SIZE_REACHED, member_id)
                member = group.members[member_id] = _Member(member_id, 0)
        else:
            member = None if group is None else group.members.get(member_id)
            if member is None:
                return HeartbeatResult(E.UNKNOWN_MEMBER_ID, member_id, -1)
            if member_epoch != member.epoch:
                return HeartbeatResult(E.FENCED_MEMBER_EPOCH, member_id, -1)
        assert group is not None
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed_topics is not None and tuple(sorted(set(subscribed_topics))) != (
            member.subscribed
        ):
            member.subscribed = tuple(sorted(set(subscribed_topics)))
        self._reassign(group)
        self._touch(group, member)
        changed = member_epoch != member.epoch
        return HeartbeatResult(
            E.NONE,
            member_id,
            member.epoch,
            self.settings.heartbeat_interval_ms,
            {t: list(p) for t, p in member.assignment.items()} if changed else None,
        )

    def _reassign(self, group: _Group) -> None:
        """Recompute the assignment; members whose assignment changes move to a new epoch."""
        wanted = _simple_assignment(
            {m.member_id: m.subscribed for m in group.members.values()},
            {
                t: self._core.partition_count(t)
                for m in group.members.values()
                for t in m.subscribed
            },
        )
        moved = [m for m in group.members.values() if wanted[m.member_id] != m.assignment]
        if not moved and all(m.epoch > 0 for m in group.members.values()):
            return
        group.epoch += 1
        for member in group.members.values():
            if member in moved or member.epoch == 0:
                member.assignment = wanted[member.member_id]
                member.epoch = group.epoch

    def _touch(self, group: _Group, member: _Member) -> None:
        if member.timer is not None and member.timer.active():
            member.timer.reset(self.settings.session_timeout_ms / 1000)
            return
        member.timer = self._reactor.callLater(
            self.settings.session_timeout_ms / 1000, self._session_expired, group, member
        )

    def _session_expired(self, group: _Group, member: _Member) -> None:
        if group.members.get(member.member_id) is member:
            log.info(
                "share group {group}: member {member} timed out",
                group=group.group_id,
                member=member.member_id,
            )
            self._remove_member(group, member)

    def _remove_member(self, group: _Group, member: _Member, *, release: bool = True) -> None:
        del group.members[member.member_id]
        if member.timer is not None and member.timer.active():
            member.timer.cancel()
        self._reassign(group)
        if release:
            self._release_everywhere(group.group_id, member.member_id).addErrback(
                lambda f: log.failure("share state: writing released records failed", f)
            )

    def close_session(self, group_id: str, member_id: str) -> defer.Deferred[None]:
        """The member closed its share session: its acquired records go back (durably)."""
        return self._release_everywhere(group_id, member_id)

    def _release_everywhere(self, group_id: str, member_id: str) -> defer.Deferred[None]:
        changes = [
            (key, part.release_member(member_id))
            for key, part in self._partitions.items()
            if key[0] == group_id and part.initialized
        ]
        return self._append(changes).addCallback(self._available, changes)

    def _available(self, result: T, changes: Sequence[tuple[ShareKey, Delta]]) -> T:
        """Wake the fetches waiting on the partitions of ``changes`` (once each)."""
        self.available_events += 1
        for _group, topic, partition in {key for key, delta in changes if delta}:
            self._on_available(topic, partition)
        return result

    def assignment_of(self, group_id: str, member_id: str) -> dict[str, list[int]]:
        """A member's current assignment (topic -> partitions); empty if unknown."""
        group = self._groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        return {} if member is None else {t: list(p) for t, p in member.assignment.items()}

    def describe(self, group_id: str) -> ShareGroupDescription:
        group = self._groups.get(group_id)
        if group is None:
            return ShareGroupDescription(group_id, "Dead", 0, 0, ())
        members = tuple(
            MemberDescription(
                m.member_id,
                m.epoch,
                m.rack_id,
                m.subscribed,
                {t: list(p) for t, p in m.assignment.items()},
            )
            for m in group.members.values()
        )
        state = "Stable" if group.members else "Empty"
        return ShareGroupDescription(group_id, state, group.epoch, group.epoch, members)

    # --- records -------------------------------------------------------------------------

    def acquire(
        self,
        group_id: str,
        member_id: str,
        topic: str,
        partition: int,
        max_records: int,
        max_bytes: int = 1 << 20,
        start: str | None = None,
    ) -> defer.Deferred[AcquireResult]:
        """Acquire up to ``max_records`` records of a partition for a member, reading them
        through the broker core; fires once the acquisition is durable. ``start``
        ("earliest" or "latest") overrides the group's ``share.auto.offset.reset`` for a
        share-partition read for the first time (the native queue consumer's choice)."""
        if self._core.partition_count(topic) <= partition or partition < 0:
            return defer.succeed(AcquireResult(E.UNKNOWN_TOPIC_OR_PARTITION))
        group = self._groups.setdefault(group_id, _Group(group_id))
        key = (group_id, topic, partition)
        part = self._partitions.get(key)
        try:
            log_start, high_watermark = self._core.bounds(topic, partition)
        except RustkaError:
            return defer.succeed(AcquireResult(E.UNKNOWN_TOPIC_OR_PARTITION))
        changes: list[tuple[ShareKey, Delta]] = []
        if part is None:
            part = self._partitions[key] = SharePartition(**self._partition_settings())
        if not part.initialized or (part.start_offset or 0) > high_watermark:
            # Never read, or beyond the log's end (the topic was deleted and created
            # again under its name): start where share.auto.offset.reset says.
            reset = start or group.auto_offset_reset or self.settings.auto_offset_reset
            changes.append(
                (key, part.initialize(log_start if reset == "earliest" else high_watermark))
            )
        elif part.start_offset is not None and part.start_offset < log_start:
            changes.append((key, part.move_start(log_start)))
        changes.append((key, part.expire_locks(self._now_ms())))
        offset = part.next_fetch_offset()
        if max_records <= 0 or offset >= high_watermark or not part.can_acquire():
            return self._append(changes).addCallback(lambda _: AcquireResult())
        d = self._core.read(topic, partition, offset, max(1, max_bytes))

        def read(result: ReadResult) -> defer.Deferred[AcquireResult]:
            batches = _batches(result.chunks)
            records = [
                o
                for h, _ in batches
                if not is_control(h)
                for o in range(h.base_offset, h.last_offset + 1)
            ]
            gaps = [
                o
                for h, _ in batches
                if is_control(h)
                for o in range(h.base_offset, h.last_offset + 1)
            ]
            ranges, delta = part.acquire(member_id, records, max_records, self._now_ms(), gaps)
            changes.append((key, delta))
            self._schedule_expiry(key, part)
            wanted = [
                data
                for h, data in batches
                if any(r.first <= h.last_offset and h.base_offset <= r.last for r in ranges)
            ]
            return self._append(changes).addCallback(
                lambda _: AcquireResult(E.NONE, tuple(wanted), tuple(ranges))
            )

        def failed(failure: Any) -> defer.Deferred[AcquireResult] | AcquireResult:
            if failure.check(RustkaError):
                return self._append(changes).addCallback(
                    lambda _: AcquireResult(E.UNKNOWN_TOPIC_OR_PARTITION)
                )
            return failure

        return d.addCallbacks(read, failed)

    def acknowledge(
        self, group_id: str, member_id: str, topic: str, partition: int, batches: Sequence[AckBatch]
    ) -> defer.Deferred[int]:
        """Apply a member's acknowledgement batches of one partition; fires with an error
        code once durable. Batches are applied in order; the first invalid one (records
        not acquired by this member: INVALID_RECORD_STATE) stops the rest."""
        key = (group_id, topic, partition)
        part = self._partitions.get(key)
        if part is None or not part.initialized:
            return defer.succeed(E.INVALID_RECORD_STATE if batches else E.NONE)
        changes: list[tuple[ShareKey, Delta]] = []
        error = E.NONE
        for first, last, types in batches:
            try:
                changes.append((key, part.acknowledge(member_id, first, last, types)))
            except InvalidRecordState:
                error = E.INVALID_RECORD_STATE
                break
        self._schedule_expiry(key, part)
        # A release makes records available; any acknowledgement may move the window's
        # start and so make room under the in-flight bound.
        return (
            self._append(changes)
            .addCallback(self._available, changes)
            .addCallback(lambda _: int(error))
        )

    def _schedule_expiry(self, key: ShareKey, part: SharePartition) -> None:
        deadline = part.next_deadline()
        timer = self._expiry.get(key)
        if timer is not None and timer.active():
            timer.cancel()
        if deadline is None:
            self._expiry.pop(key, None)
            return
        delay = max(0.0, (deadline - self._now_ms()) / 1000)
        self._expiry[key] = self._reactor.callLater(delay, self._expire_locks, key)

    def _expire_locks(self, key: ShareKey) -> None:
        part = self._partitions.get(key)
        if part is None:
            return
        delta = part.expire_locks(self._now_ms())
        self._schedule_expiry(key, part)
        self._append([(key, delta)]).addCallback(self._available, [(key, delta)]).addErrback(
            lambda f: log.failure("share state: writing lock expiries failed", f)
        )

    # --- offsets admin -------------------------------------------------------------------

    def describe_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], int]:
        """Start offset of each share-partition of the group (-1: not initialized)."""
        found = {
            (k[1], k[2]): (-1 if p.start_offset is None else p.start_offset)
            for k, p in self._partitions.items()
            if k[0] == group_id
        }
        if partitions is None:
            return found
        return {tp: found.get(tp, -1) for tp in partitions}

    def alter_offsets(
        self, group_id: str, offsets: Mapping[tuple[str, int], int]
    ) -> defer.Deferred[int]:
        """Move the start offsets of an empty group's share-partitions (in-flight state is
        dropped)."""
        group = self._groups.get(group_id)
        if group is not None and group.members:
            return defer.succeed(E.NON_EMPTY_GROUP)
        self._groups.setdefault(group_id, _Group(group_id))
        changes = []
        for (topic, partition), offset in offsets.items():
            key = (group_id, topic, partition)
            part = self._partitions.setdefault(key, SharePartition(**self._partition_settings()))
            changes.append((key, offset))
            part.initialize(offset)
        return self._submit(lambda: [self._log.reset(k, o) for k, o in changes]).addCallback(
            lambda _: int(E.NONE)
        )

    def delete_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> defer.Deferred[int]:
        """Forget an empty group's share-partitions (all of them with None: the group)."""
        group = self._groups.get(group_id)
        if group is None:
            return defer.succeed(E.GROUP_ID_NOT_FOUND)
        if group.members:
            return defer.succeed(E.NON_EMPTY_GROUP)
        if partitions is None:
            for key in [k for k in self._partitions if k[0] == group_id]:
                self._retire(self._partitions.pop(key))
            del self._groups[group_id]
            return self._submit(lambda: self._log.forget(group_id)).addCallback(
                lambda _: int(E.NONE)
            )
        wanted = list(partitions)
        for topic, partition in wanted:
            gone = self._partitions.pop((group_id, topic, partition), None)
            if gone is not None:
                self._retire(gone)
        return self._submit(
            lambda: [self._log.forget(group_id, t, p) for t, p in wanted]
        ).addCallback(lambda _: int(E.NONE))

    # --- metrics -------------------------------------------------------------------------

    @property
    def counts(self) -> Counts:
        """Records acquired, accepted, released, rejected, archived, lock expiries."""
        total = Counts()
        for counts in [self._retired, *(p.counts for p in self._partitions.values())]:
            _add(total, counts)
        return total

    def _retire(self, part: SharePartition) -> None:
        _add(self._retired, part.counts)

    # --- durability ----------------------------------------------------------------------

    def _append(self, changes: Sequence[tuple[ShareKey, Delta]]) -> defer.Deferred[None]:
        changes = [(k, d) for k, d in changes if d]
        if not changes:
            return defer.succeed(None)
        return self._submit(lambda: self._log.append(changes))

    def _submit(self, write: Callable[[], object]) -> defer.Deferred[None]:
        """Queue a write of the share-state log; writes run on the pool one job at a time,
        in the order they were queued, and each Deferred fires once its write is done."""
        d: defer.Deferred[None] = defer.Deferred()
        self._pending.append((lambda: (write(), None)[1], d))
        if not self._writing:
            self._flush()
        return d

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        if not batch:
            self._writing = False
            return
        self._writing = True
        state_log = self._log

        def write_all() -> list[BaseException | None]:
            results: list[BaseException | None] = []
            for write, _ in batch:
                try:
                    write()
                    results.append(None)
                except Exception as exc:  # handed to the caller's Deferred
                    results.append(exc)
            if state_log.needs_compaction():
                state_log.compact()
            return results

        def done(results: list[BaseException | None]) -> None:
            self._flush()
            for (_, d), error in zip(batch, results, strict=True):
                if error is None:
                    d.callback(None)
                else:
                    d.errback(error)

        def failed(failure: Any) -> None:
            self._flush()
            for _, d in batch:
                d.errback(failure)

        self._core.run(write_all).addCallbacks(done, failed)

    def _now_ms(self) -> int:
        return int(self._reactor.seconds() * 1000)

    def _partition_settings(self) -> dict[str, int]:
        s = self.settings
        return {
            "lock_duration_ms": s.lock_duration_ms,
            "delivery_count_limit": s.delivery_count_limit,
            "max_in_flight": s.max_in_flight,
        }

    def partition_states(self, group_id: str) -> list[SharePartitionState]:
        """Each started share-partition of the group, by topic and partition."""
        out = []
        for (group, topic, partition), part in sorted(self._partitions.items()):
            if group != group_id or part.start_offset is None:
                continue
            tally = dict.fromkeys((AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED), 0)
            for record in part.records.values():
                tally[record.state] += 1
            out.append(
                SharePartitionState(
                    topic,
                    partition,
                    part.start_offset,
                    part.end_offset,
                    tally[AVAILABLE],
                    tally[ACQUIRED],
                    tally[ACKNOWLEDGED],
                    tally[ARCHIVED],
                )
            )
        return out

    def close(self) -> None:
        """Stop timers (the broker is stopping); the log is closed by its owner."""
        for group in self._groups.values():
            for member in group.members.values():
                if member.timer is not None and member.timer.active():
                    member.timer.cancel()
        for timer in self._expiry.values():
            if timer.active():
                timer.cancel()
        self._expiry.clear()


def _add(total: Counts, more: Counts) -> None:
    for name in Counts.__dataclass_fields__:
        setattr(total, name, getattr(total, name) + getattr(more, name))


def _batches(chunks: Sequence[bytes]) -> list[tuple[Any, bytes]]:
    """Each stored batch of ``chunks``: its header and its bytes."""
    found = []
    for chunk in chunks:
        pos = 0
        while pos + 61 <= len(chunk):
            header = parse_header(chunk, pos)
            if pos + header.size > len(chunk):
                break
            found.append((header, bytes(chunk[pos : pos + header.size])))
            pos += header.size
    return found


def _simple_assignment(
    subscriptions: Mapping[str, Sequence[str]], partition_counts: Mapping[str, int]
) -> dict[str, dict[str, list[int]]]:
    """Kafka's simple share assignor: per topic, partitions go round the subscribed
    members; with more members than partitions, member i gets partition i mod count, so
    every partition has a member and members share partitions."""
    result: dict[str, dict[str, list[int]]] = {m: {} for m in subscriptions}
    for topic in sorted({t for topics in subscriptions.values() for t in topics}):
        count = partition_counts.get(topic, 0)
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if count <= 0 or not members:
            continue
        if len(members) <= count:
            for p in range(count):
                result[members[p % len(members)]].setdefault(topic, []).append(p)
        else:
            for i, member in enumerate(members):
                result[member][topic] = [i % count]
    return result
