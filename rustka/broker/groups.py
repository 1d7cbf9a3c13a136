"""The group coordinator: Kafka's classic group protocol, protocol-neutral, on the reactor.

Kafka clients that ``subscribe()`` need a broker-side coordinator that collects the
members of a group (JoinGroup), lets one of them - the leader - compute an assignment
and relays it to everyone (SyncGroup), watches liveness (Heartbeat, session timeouts)
and starts a new generation whenever membership changes. This module is that
coordinator, written against the broker core only: the Kafka front-end decodes
requests, calls the methods here and encodes the plain results (dataclasses whose
``error`` fields carry Kafka's numeric error codes, see `GroupErrorCode`). The
behaviour follows Kafka's classic coordinator as docs/kafka.md describes it.

Membership is transient, exactly like Kafka after a coordinator moves: after a
restart clients rejoin and resume from their committed offsets, which live in the
``__offsets`` log and are written by the broker core, never by this module. The
coordinator only *fences* commits (`check_commit`) and tells the native protocol
whether a group is currently driven by Kafka members (`native_commit_allowed`).

Everything runs on the reactor thread; timeouts use the injected ``IReactorTime``
so tests drive them with ``twisted.internet.task.Clock``. Answers to pending
JoinGroup/SyncGroup Deferreds are queued while the state changes and fired only
once it is consistent, so a callback that re-enters the coordinator (a test, or a
front-end answering synchronously) never sees a half-updated group.
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from rustka.errors import GroupHasActiveMembers, InvalidName
from rustka.names import validate_group

log = Logger()

DEFAULT_MIN_SESSION_TIMEOUT_MS = 6_000
DEFAULT_MAX_SESSION_TIMEOUT_MS = 1_800_000
CONSUMER_PROTOCOL_TYPE = "consumer"
"""The protocol type Kafka consumers join with; native-only groups are shown with it."""


class GroupErrorCode(enum.IntEnum):
    """The Kafka error codes the coordinator answers with (ints on the wire).

    Defined here rather than imported from the Kafka front-end because the core must
    not depend on any front-end (docs/architecture.md, layers); the numbers are
    Kafka's, so the front-end passes them through unchanged.
    """

    NONE = 0
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82


E = GroupErrorCode


class GroupState(enum.StrEnum):
    """Kafka's classic group states; the string values are what admin tools print."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class CommittedGroups(Protocol):
    """What the coordinator needs from the offsets side: the names of groups with commits.

    The broker core (`Broker.group_names`) provides it; so does an adapter over an
    `OffsetsStore` (see `offsets_store_groups`).
    """

    def group_names(self) -> Iterable[str]: ...


class _StoreGroups:
    def __init__(self, store: Any) -> None:
        self.store = store

    def group_names(self) -> Iterable[str]:
        return list(self.store.groups())


def offsets_store_groups(store: Any) -> CommittedGroups:
    """Adapt anything with ``groups() -> {name: ...}`` (the `OffsetsStore`)."""
    return _StoreGroups(store)


# -- results -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """One member as the leader sees it in its JoinGroup answer."""

    member_id: str
    instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    """The JoinGroup answer. ``members`` is filled only for the leader."""

    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    """The SyncGroup answer: this member's assignment bytes, opaque to the broker."""

    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class LeftMember:
    """The per-member outcome of a LeaveGroup (echoes the request's identity)."""

    member_id: str
    instance_id: str | None
    error: int


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: int
    members: tuple[LeftMember, ...] = ()


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as DescribeGroups, ``rustka groups describe`` and the metrics show it.

    As in Kafka, member metadata, assignments and the protocol name are shown only
    while the group is Stable; in the other states they are in flux.
    """

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation_id: int
    members: tuple[MemberDescription, ...] = ()


# -- internal state ----------------------------------------------------------------------


@dataclass(eq=False)
class _Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_waiter: defer.Deferred[JoinResult] | None = None
    sync_waiter: defer.Deferred[SyncResult] | None = None
    session_timer: IDelayedCall | None = None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise AssertionError("a member joined without a protocol the group supports")


@dataclass(eq=False)
class _Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState = GroupState.DEAD
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_join: dict[str, IDelayedCall] = field(default_factory=dict)
    pending_sync: set[str] = field(default_factory=set)
    join_timer: IDelayedCall | None = None
    sync_timer: IDelayedCall | None = None
    initial_delay_running: bool = False
    new_member_added: bool = False

    def transition(self, state: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(
                f"group {self.group_id}: illegal transition {self.state} -> {state}"
            )
        self.previous_state, self.state = self.state, state

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return not self.pending_join and all(
            m.join_waiter is not None for m in self.members.values()
        )

    def validate_member(self, member_id: str, instance_id: str | None) -> int:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID for a request naming a member, else NONE."""
        if instance_id is not None:
            known = self.static_members.get(instance_id)
            if known is None:
                return E.UNKNOWN_MEMBER_ID
            if known != member_id:
                return E.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return E.UNKNOWN_MEMBER_ID
        return E.NONE

    def supports(self, protocol_type: str, names: Sequence[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidates().intersection(names))

    def candidates(self) -> set[str]:
        """Protocols every current member supports."""
        members = list(self.members.values())
        common = set(members[0].protocol_names)
        for member in members[1:]:
            common.intersection_update(member.protocol_names)
        return common

    def select_protocol(self) -> str:
        """Kafka's rule: every member votes for its favourite common protocol; most votes win.

        Ties go to the protocol the leader prefers, so the choice is deterministic.
        """
        candidates = self.candidates()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        leader = self.members.get(self.leader_id or "")
        order = leader.protocol_names if leader is not None else sorted(votes)
        rank = {name: i for i, name in enumerate(order)}
        return max(votes, key=lambda name: (votes[name], -rank.get(name, len(rank))))


# -- the coordinator ---------------------------------------------------------------------


class GroupCoordinator:
    """Kafka's classic group coordinator for every group on this broker.

    ``offsets`` supplies the groups that only have committed offsets (native groups)
    for `list_groups`/`describe`; it may be None until storage opens and can be set
    later through the ``offsets`` attribute.
    """

    def __init__(
        self,
        clock: IReactorTime,
        offsets: CommittedGroups | None = None,
        *,
        initial_rebalance_delay_ms: int = 0,
        min_session_timeout_ms: int = DEFAULT_MIN_SESSION_TIMEOUT_MS,
        max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
        max_group_size: int | None = None,
    ) -> None:
        if initial_rebalance_delay_ms < 0:
            raise ValueError("initial_rebalance_delay_ms must be >= 0")
        if not 0 < min_session_timeout_ms <= max_session_timeout_ms:
            raise ValueError("need 0 < min_session_timeout_ms <= max_session_timeout_ms")
        if max_group_size is not None and max_group_size < 1:
            raise ValueError("max_group_size must be >= 1")
        self.clock = clock
        self.offsets = offsets
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.max_group_size = max_group_size
        self._groups: dict[str, _Group] = {}
        self._outbox: list[tuple[defer.Deferred[Any], Any]] = []
        self._closed = False

    # -- JoinGroup -------------------------------------------------------------------

    def join(
        self,
        group_id: str,
        member_id: str,
        *,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        instance_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
        require_known_member_id: bool = False,
    ) -> defer.Deferred[JoinResult]:
        """Handle one JoinGroup; the Deferred fires when the join phase completes.

        ``require_known_member_id`` is true for JoinGroup v4+: a dynamic member joining
        with an empty id first gets MEMBER_ID_REQUIRED with its new id and must rejoin
        with it (so a client that loses the answer does not leave a ghost member).
        ``rebalance_timeout_ms`` is the session timeout for JoinGroup v0.
        """
        try:
            return self._join(
                group_id,
                member_id,
                protocol_type=protocol_type,
                protocols=_dedup(protocols),
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                instance_id=instance_id,
                client_id=client_id,
                client_host=client_host,
                require_known_member_id=require_known_member_id,
            )
        finally:
            self._flush()

    def _join(
        self,
        group_id: str,
        member_id: str,
        *,
        protocol_type: str,
        protocols: tuple[tuple[str, bytes], ...],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        require_known_member_id: bool,
    ) -> defer.Deferred[JoinResult]:
        def fail(code: int, mid: str = member_id) -> defer.Deferred[JoinResult]:
            return defer.succeed(JoinResult(code, mid))

        if self._closed:
            return fail(E.NOT_COORDINATOR)
        if not _valid_group_id(group_id):
            return fail(E.INVALID_GROUP_ID)
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return fail(E.INVALID_SESSION_TIMEOUT)
        if rebalance_timeout_ms <= 0:
            rebalance_timeout_ms = session_timeout_ms
        names = [name for name, _ in protocols]
        group = self._groups.get(group_id)
        if member_id:
            if group is None:
                return fail(E.UNKNOWN_MEMBER_ID)
            return self._join_known(
                group, member_id, instance_id, protocol_type, protocols, names,
                session_timeout_ms, rebalance_timeout_ms, client_id, client_host,
            )  # fmt: skip
        if group is None:
            group = self._groups[group_id] = _Group(group_id)
        try:
            if not group.supports(protocol_type, names):
                return fail(E.INCONSISTENT_GROUP_PROTOCOL)
            replacing = instance_id is not None and instance_id in group.static_members
            if (
                not replacing
                and self.max_group_size is not None
                and len(group.members) + len(group.pending_join) >= self.max_group_size
            ):
                return fail(E.GROUP_MAX_SIZE_REACHED)
            new_id = f"{instance_id if instance_id is not None else client_id}-{uuid.uuid4()}"
            if replacing:
                assert instance_id is not None
                return self._replace_static_member(
                    group, instance_id, new_id, protocols, session_timeout_ms,
                    rebalance_timeout_ms,
                )  # fmt: skip
            member = _Member(
                new_id, instance_id, client_id, client_host, session_timeout_ms,
                rebalance_timeout_ms, protocol_type, protocols,
            )  # fmt: skip
            if instance_id is None and require_known_member_id:
                group.pending_join[new_id] = self.clock.callLater(
                    session_timeout_ms / 1000, self._pending_expired, group, new_id
                )
                return fail(E.MEMBER_ID_REQUIRED, new_id)
            return self._add_member(group, member)
        finally:
            self._maybe_forget(group)

    def _join_known(
        self,
        group: _Group,
        member_id: str,
        instance_id: str | None,
        protocol_type: str,
        protocols: tuple[tuple[str, bytes], ...],
        names: list[str],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
    ) -> defer.Deferred[JoinResult]:
        def fail(code: int) -> defer.Deferred[JoinResult]:
            return defer.succeed(JoinResult(code, member_id))

        if member_id in group.pending_join:
            if not group.supports(protocol_type, names):
                return fail(E.INCONSISTENT_GROUP_PROTOCOL)
            group.pending_join.pop(member_id).cancel()
            member = _Member(
                member_id, instance_id, client_id, client_host, session_timeout_ms,
                rebalance_timeout_ms, protocol_type, protocols,
            )  # fmt: skip
            return self._add_member(group, member)
        error = group.validate_member(member_id, instance_id)
        if error:
            return fail(error)
        if not group.supports(protocol_type, names):
            return fail(E.INCONSISTENT_GROUP_PROTOCOL)
        member = group.members[member_id]
        unchanged = member.protocols == protocols
        if group.state is GroupState.COMPLETING_REBALANCE and unchanged:
            # A repeated JoinGroup (the client lost the answer): same generation again.
            return defer.succeed(self._join_answer(group, member))
        if group.state is GroupState.STABLE and unchanged and group.leader_id != member_id:
            return defer.succeed(self._join_answer(group, member))
        d: defer.Deferred[JoinResult] = defer.Deferred()
        self._update_member(member, protocols, session_timeout_ms, rebalance_timeout_ms, d)
        self._rebalance_or_complete(group)
        return d

    def _join_answer(self, group: _Group, member: _Member) -> JoinResult:
        leader = member.member_id == group.leader_id
        members = (
            tuple(
                JoinedMember(m.member_id, m.instance_id, m.metadata(group.protocol_name))
                for m in group.members.values()
            )
            if leader
            else ()
        )
        return JoinResult(
            E.NONE,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            members,
        )

    def _update_member(
        self,
        member: _Member,
        protocols: tuple[tuple[str, bytes], ...],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        waiter: defer.Deferred[JoinResult],
    ) -> None:
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        if member.join_waiter is not None:
            # Superseded by the client's new JoinGroup; the old request gets a retriable answer.
            self._answer(member.join_waiter, JoinResult(E.REBALANCE_IN_PROGRESS, member.member_id))
        member.join_waiter = waiter

    def _add_member(self, group: _Group, member: _Member) -> defer.Deferred[JoinResult]:
        d: defer.Deferred[JoinResult] = defer.Deferred()
        member.join_waiter = d
        if group.state is GroupState.PREPARING_REBALANCE and group.initial_delay_running:
            group.new_member_added = True
        if not group.members:
            group.protocol_type = member.protocol_type
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member.member_id
        if group.leader_id is None:
            group.leader_id = member.member_id
        group.members[member.member_id] = member
        self._schedule_session(group, member)
        self._rebalance_or_complete(group)
        return d

    def _replace_static_member(
        self,
        group: _Group,
        instance_id: str,
        new_id: str,
        protocols: tuple[tuple[str, bytes], ...],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
    ) -> defer.Deferred[JoinResult]:
        """A static member restarted (unknown member id, known instance id).

        The new member id takes over the old member's place and assignment; whatever
        the old incarnation is still waiting for is answered FENCED_INSTANCE_ID. A
        Stable group whose protocol would not change needs no rebalance: the member
        gets the current generation and then its stored assignment through SyncGroup.
        """
        old_id = group.static_members[instance_id]
        previous_leader = group.leader_id
        old = group.members.pop(old_id)
        self._cancel_session(old)
        if old.join_waiter is not None:
            self._answer(old.join_waiter, JoinResult(E.FENCED_INSTANCE_ID, old_id))
        if old.sync_waiter is not None:
            self._answer(old.sync_waiter, SyncResult(E.FENCED_INSTANCE_ID))
        member = replace(old, member_id=new_id, join_waiter=None, sync_waiter=None)
        member.session_timer = None
        group.members[new_id] = member
        group.static_members[instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        self._schedule_session(group, member)
        d: defer.Deferred[JoinResult] = defer.Deferred()
        self._update_member(member, protocols, session_timeout_ms, rebalance_timeout_ms, d)
        if group.state is GroupState.STABLE and group.select_protocol() == group.protocol_name:
            member.join_waiter = None
            # The leader id is the one before the replacement, so a returning leader acts
            # as a follower and does not recompute an assignment nobody asked for.
            answer = replace(self._join_answer(group, member), leader_id=previous_leader or "")
            self._answer(d, replace(answer, members=()))
            return d
        self._rebalance_or_complete(group)
        return d

    def _pending_expired(self, group: _Group, member_id: str) -> None:
        """A member id handed out with MEMBER_ID_REQUIRED was never used."""
        if group.pending_join.pop(member_id, None) is None:
            return
        self._maybe_complete_join(group)
        self._maybe_forget(group)
        self._flush()

    # -- rebalancing -----------------------------------------------------------------

    def _rebalance_or_complete(self, group: _Group) -> None:
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        elif group.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]:
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: _Group) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._fail_syncs(group, E.REBALANCE_IN_PROGRESS)
            for member in group.members.values():
                member.assignment = b""
        _cancel(group.sync_timer)
        group.sync_timer = None
        group.pending_sync.clear()
        initial = group.state is GroupState.EMPTY
        group.transition(GroupState.PREPARING_REBALANCE)
        log.info(
            "group {group}: rebalancing (generation {gen}, {n} member(s))",
            group=group.group_id,
            gen=group.generation_id,
            n=len(group.members),
        )
        timeout = group.rebalance_timeout_ms
        _cancel(group.join_timer)
        if initial and self.initial_rebalance_delay_ms > 0:
            # Wait a little for more members of a new group before the first generation,
            # extending while members keep arriving, up to the rebalance timeout.
            delay = min(self.initial_rebalance_delay_ms, timeout)
            remaining = max(timeout - self.initial_rebalance_delay_ms, 0)
            group.initial_delay_running = True
            group.new_member_added = False
            group.join_timer = self.clock.callLater(
                delay / 1000, self._initial_delay_over, group, remaining
            )
            return
        group.join_timer = self.clock.callLater(timeout / 1000, self._join_timed_out, group)
        self._maybe_complete_join(group)

    def _initial_delay_over(self, group: _Group, remaining_ms: int) -> None:
        group.join_timer = None
        if group.new_member_added and remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms, remaining_ms)
            left = max(remaining_ms - self.initial_rebalance_delay_ms, 0)
            group.join_timer = self.clock.callLater(
                delay / 1000, self._initial_delay_over, group, left
            )
            return
        group.initial_delay_running = False
        self._complete_join(group)
        self._flush()

    def _join_timed_out(self, group: _Group) -> None:
        group.join_timer = None
        self._complete_join(group)
        self._flush()

    def _maybe_complete_join(self, group: _Group) -> None:
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and not group.initial_delay_running
            and group.all_joined()
        ):
            self._complete_join(group)

    def _complete_join(self, group: _Group) -> None:
        """End the join phase: drop who did not rejoin, start the next generation."""
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        _cancel(group.join_timer)
        group.join_timer = None
        group.initial_delay_running = False
        for member in list(group.members.values()):
            # Static members keep their place until their session expires.
            if member.join_waiter is None and member.instance_id is None:
                log.info(
                    "group {group}: member {member} did not rejoin in time, removed",
                    group=group.group_id,
                    member=member.member_id,
                )
                self._remove_member(group, member)
        if group.members and not self._elect_joined_leader(group):
            # Nobody rejoined: wait for their sessions to expire rather than start a
            # generation without members that may still be alive.
            group.join_timer = self.clock.callLater(
                group.rebalance_timeout_ms / 1000, self._join_timed_out, group
            )
            return
        group.generation_id += 1
        group.pending_sync.clear()
        if not group.members:
            group.protocol_name = None
            group.transition(GroupState.EMPTY)
            return
        group.protocol_name = group.select_protocol()
        group.transition(GroupState.COMPLETING_REBALANCE)
        log.info(
            "group {group}: generation {gen} with {n} member(s), protocol {proto}",
            group=group.group_id,
            gen=group.generation_id,
            n=len(group.members),
            proto=group.protocol_name,
        )
        for member in group.members.values():
            if member.join_waiter is not None:
                waiter, member.join_waiter = member.join_waiter, None
                self._answer(waiter, self._join_answer(group, member))
            self._schedule_session(group, member)
            group.pending_sync.add(member.member_id)
        group.sync_timer = self.clock.callLater(
            group.rebalance_timeout_ms / 1000, self._sync_timed_out, group, group.generation_id
        )

    def _elect_joined_leader(self, group: _Group) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.join_waiter is not None:
            return True
        for member in group.members.values():
            if member.join_waiter is not None:
                group.leader_id = member.member_id
                return True
        return False

    def _sync_timed_out(self, group: _Group, generation_id: int) -> None:
        """Members that never sent SyncGroup for this generation are removed."""
        group.sync_timer = None
        if group.generation_id != generation_id or group.state not in (
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        ):
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                self._remove_member(group, member)
        group.pending_sync.clear()
        self._prepare_rebalance(group)
        self._flush()

    # -- SyncGroup -------------------------------------------------------------------

    def sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        *,
        instance_id: str | None = None,
        assignments: Mapping[str, bytes] | Iterable[tuple[str, bytes]] = (),
    ) -> defer.Deferred[SyncResult]:
        """Handle one SyncGroup; a follower's Deferred fires when the leader's arrives."""
        try:
            return self._sync(group_id, generation_id, member_id, instance_id, assignments)
        finally:
            self._flush()

    def _sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        assignments: Mapping[str, bytes] | Iterable[tuple[str, bytes]],
    ) -> defer.Deferred[SyncResult]:
        if self._closed:
            return defer.succeed(SyncResult(E.NOT_COORDINATOR))
        group = self._groups.get(group_id)
        if group is None:
            return defer.succeed(SyncResult(E.UNKNOWN_MEMBER_ID))
        error = group.validate_member(member_id, instance_id)
        if not error and generation_id != group.generation_id:
            error = E.ILLEGAL_GENERATION
        if not error and group.state is GroupState.PREPARING_REBALANCE:
            error = E.REBALANCE_IN_PROGRESS
        if error:
            return defer.succeed(SyncResult(error))
        member = group.members[member_id]
        self._synced(group, member_id)
        if group.state is GroupState.STABLE:
            self._schedule_session(group, member)
            return defer.succeed(self._sync_answer(group, member))
        d: defer.Deferred[SyncResult] = defer.Deferred()
        if member.sync_waiter is not None:
            self._answer(member.sync_waiter, SyncResult(E.REBALANCE_IN_PROGRESS))
        member.sync_waiter = d
        if member_id == group.leader_id:
            given = dict(assignments.items() if isinstance(assignments, Mapping) else assignments)
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            group.transition(GroupState.STABLE)
            for m in group.members.values():
                if m.sync_waiter is not None:
                    waiter, m.sync_waiter = m.sync_waiter, None
                    self._answer(waiter, self._sync_answer(group, m))
                    self._schedule_session(group, m)
        return d

    def _synced(self, group: _Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            _cancel(group.sync_timer)
            group.sync_timer = None

    @staticmethod
    def _sync_answer(group: _Group, member: _Member) -> SyncResult:
        return SyncResult(E.NONE, member.assignment, group.protocol_type, group.protocol_name)

    # -- Heartbeat ---------------------------------------------------------------------

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None = None
    ) -> int:
        """Handle one Heartbeat; REBALANCE_IN_PROGRESS tells the member to rejoin."""
        if self._closed:
            return E.NOT_COORDINATOR
        group = self._groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        error = group.validate_member(member_id, instance_id)
        if error:
            return error
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        self._schedule_session(group, group.members[member_id])
        if group.state is GroupState.PREPARING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    # -- LeaveGroup ------------------------------------------------------------------

    def leave(self, group_id: str, members: Sequence[tuple[str, str | None]]) -> LeaveResult:
        """Handle one LeaveGroup: ``members`` are (member id, instance id) pairs.

        v0-2 send one member id; v3+ a batch where a static member may be named by
        its instance id alone. Each gets its own error; one rebalance follows.
        """
        try:
            return self._leave(group_id, members)
        finally:
            self._flush()

    def _leave(self, group_id: str, members: Sequence[tuple[str, str | None]]) -> LeaveResult:
        if self._closed:
            return LeaveResult(E.NOT_COORDINATOR)
        group = self._groups.get(group_id)
        if group is None:
            return LeaveResult(
                E.NONE, tuple(LeftMember(m, i, E.UNKNOWN_MEMBER_ID) for m, i in members)
            )
        results = []
        removed = False
        for member_id, instance_id in members:
            error: int = E.NONE
            if not member_id:
                known = group.static_members.get(instance_id) if instance_id is not None else None
                if known is None:
                    error = E.UNKNOWN_MEMBER_ID
                else:
                    self._remove_member(group, group.members[known])
                    removed = True
            elif member_id in group.pending_join:
                group.pending_join.pop(member_id).cancel()
                removed = True
            else:
                error = group.validate_member(member_id, instance_id)
                if not error:
                    self._remove_member(group, group.members[member_id])
                    removed = True
            results.append(LeftMember(member_id, instance_id, error))
        if removed:
            self._after_removal(group)
        return LeaveResult(E.NONE, tuple(results))

    # -- membership bookkeeping ------------------------------------------------------

    def _remove_member(self, group: _Group, member: _Member) -> None:
        """Take a member out without starting a rebalance (callers decide that)."""
        if group.members.get(member.member_id) is not member:
            return
        del group.members[member.member_id]
        self._cancel_session(member)
        if member.join_waiter is not None:
            self._answer(member.join_waiter, JoinResult(E.UNKNOWN_MEMBER_ID, member.member_id))
            member.join_waiter = None
        if member.sync_waiter is not None:
            self._answer(member.sync_waiter, SyncResult(E.UNKNOWN_MEMBER_ID))
            member.sync_waiter = None
        if (
            member.instance_id is not None
            and group.static_members.get(member.instance_id) == member.member_id
        ):
            del group.static_members[member.instance_id]
        group.pending_sync.discard(member.member_id)
        if group.leader_id == member.member_id:
            group.leader_id = next(iter(group.members), None)

    def _after_removal(self, group: _Group) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        self._maybe_forget(group)

    def _schedule_session(self, group: _Group, member: _Member) -> None:
        seconds = member.session_timeout_ms / 1000
        timer = member.session_timer
        if timer is not None and timer.active():
            timer.reset(seconds)
        else:
            member.session_timer = self.clock.callLater(
                seconds, self._session_expired, group, member
            )

    @staticmethod
    def _cancel_session(member: _Member) -> None:
        _cancel(member.session_timer)
        member.session_timer = None

    def _session_expired(self, group: _Group, member: _Member) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is not member:
            return
        if member.join_waiter is not None or member.sync_waiter is not None:
            # A member parked in JoinGroup or SyncGroup is alive by definition; the
            # rebalance and sync timeouts bound how long it can stay there.
            self._schedule_session(group, member)
            return
        log.info(
            "group {group}: member {member} missed its session timeout ({ms} ms), removed",
            group=group.group_id,
            member=member.member_id,
            ms=member.session_timeout_ms,
        )
        self._remove_member(group, member)
        self._after_removal(group)
        self._flush()

    def _maybe_forget(self, group: _Group) -> None:
        """Drop a group that never had a generation and has nobody left (no leak from
        clients that got MEMBER_ID_REQUIRED and went away)."""
        if (
            group.state is GroupState.EMPTY
            and group.generation_id == 0
            and not group.members
            and not group.pending_join
            and self._groups.get(group.group_id) is group
        ):
            group.transition(GroupState.DEAD)
            del self._groups[group.group_id]

    def _fail_syncs(self, group: _Group, error: int) -> None:
        for member in group.members.values():
            if member.sync_waiter is not None:
                waiter, member.sync_waiter = member.sync_waiter, None
                self._answer(waiter, SyncResult(error))

    def _answer(self, d: defer.Deferred[Any], result: Any) -> None:
        self._outbox.append((d, result))

    def _flush(self) -> None:
        while self._outbox:
            d, result = self._outbox.pop(0)
            if not d.called:
                d.callback(result)

    # -- offsets fencing -------------------------------------------------------------

    def check_commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None = None,
    ) -> int | None:
        """May this OffsetCommit write? None if so, else the Kafka error code.

        Generation -1 (a standalone consumer or an admin tool) is accepted only while
        the group has no members; a member must name the current generation. During
        CompletingRebalance the member has a new generation but no assignment yet, so
        it is told REBALANCE_IN_PROGRESS, as Kafka does. A valid commit also counts as
        a heartbeat.
        """
        if self._closed:
            return E.NOT_COORDINATOR
        group = self._groups.get(group_id)
        if group is None:
            return None if generation_id < 0 else E.ILLEGAL_GENERATION
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return None
        if generation_id >= 0 or member_id or instance_id is not None:
            error = group.validate_member(member_id, instance_id)
            if error:
                return error
            if generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
        elif group.state is not GroupState.EMPTY:
            return E.UNKNOWN_MEMBER_ID
        if group.state is GroupState.COMPLETING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        member = group.members.get(member_id)
        if member is not None:
            self._schedule_session(group, member)
        return None

    def has_active_members(self, group_id: str) -> bool:
        """True while Kafka consumers are members (resets and native commits wait)."""
        group = self._groups.get(group_id)
        return group is not None and bool(group.members)

    def native_commit_allowed(self, group_id: str) -> bool:
        return not self.has_active_members(group_id)

    def require_no_active_members(self, group_id: str) -> None:
        """Raise `GroupHasActiveMembers` (a clear client-facing error) if members exist."""
        group = self._groups.get(group_id)
        if group is not None and group.members:
            raise GroupHasActiveMembers.for_group(group_id, len(group.members))

    # -- admin views -----------------------------------------------------------------

    def _committed_groups(self) -> Iterable[str]:
        return () if self.offsets is None else self.offsets.group_names()

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) for every known group, Kafka's and native."""
        rows = {
            group.group_id: (group.group_id, group.protocol_type or "", str(group.state))
            for group in self._groups.values()
        }
        for name in self._committed_groups():
            rows.setdefault(name, (name, CONSUMER_PROTOCOL_TYPE, str(GroupState.EMPTY)))
        return [rows[name] for name in sorted(rows)]

    def describe(self, group_id: str) -> GroupDescription:
        """One group for DescribeGroups and the admin tools; Dead if nobody knows it."""
        group = self._groups.get(group_id)
        if group is None:
            if group_id in set(self._committed_groups()):
                return GroupDescription(
                    group_id, str(GroupState.EMPTY), CONSUMER_PROTOCOL_TYPE, "", 0
                )
            return GroupDescription(group_id, str(GroupState.DEAD), "", "", 0)
        stable = group.state is GroupState.STABLE
        members = tuple(
            MemberDescription(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol_name) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return GroupDescription(
            group_id,
            str(group.state),
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            group.generation_id,
            members,
        )

    # -- shutdown --------------------------------------------------------------------

    def close(self) -> None:
        """Broker shutdown: answer every parked request NOT_COORDINATOR, stop all timers.

        Clients then look for the coordinator again and rejoin after the restart.
        """
        self._closed = True
        for group in list(self._groups.values()):
            _cancel(group.join_timer)
            _cancel(group.sync_timer)
            for timer in group.pending_join.values():
                _cancel(timer)
            for member in group.members.values():
                self._cancel_session(member)
                if member.join_waiter is not None:
                    self._answer(
                        member.join_waiter, JoinResult(E.NOT_COORDINATOR, member.member_id)
                    )
                    member.join_waiter = None
                if member.sync_waiter is not None:
                    self._answer(member.sync_waiter, SyncResult(E.NOT_COORDINATOR))
                    member.sync_waiter = None
            group.transition(GroupState.DEAD)
        self._groups.clear()
        self._flush()


def _cancel(timer: IDelayedCall | None) -> None:
    if timer is not None and timer.active():
        timer.cancel()


def _dedup(protocols: Sequence[tuple[str, bytes]]) -> tuple[tuple[str, bytes], ...]:
    """Keep each protocol name's first entry, in the member's preference order."""
    seen: set[str] = set()
    result = []
    for name, metadata in protocols:
        if name not in seen:
            seen.add(name)
            result.append((name, bytes(metadata)))
    return tuple(result)


def consumer_assignment(data: bytes) -> dict[str, list[int]] | None:
    """The partitions a ``consumer``-protocol assignment hands a member, for admin views.

    The broker relays assignments as opaque bytes; only the admin tools look inside.
    Kafka's ConsumerProtocolAssignment (every version): int16 version, an int32
    count of (int16-length topic, int32 count of int32 partitions), then user data.
    None for bytes that are not one (another protocol type, or truncated); an empty
    assignment (no bytes) is ``{}``.
    """
    if not data:
        return {}
    try:
        pos = 2
        (count,) = struct.unpack_from("!i", data, pos)
        pos += 4
        if not 0 <= count <= len(data):
            return None
        result: dict[str, list[int]] = {}
        for _ in range(count):
            (size,) = struct.unpack_from("!h", data, pos)
            pos += 2
            if size < 0 or pos + size > len(data):
                return None
            topic = bytes(data[pos : pos + size]).decode("utf-8")
            pos += size
            (n,) = struct.unpack_from("!i", data, pos)
            pos += 4
            if not 0 <= n <= (len(data) - pos) // 4:
                return None
            result.setdefault(topic, []).extend(struct.unpack_from(f"!{n}i", data, pos))
            pos += 4 * n
    except (struct.error, UnicodeDecodeError):
        return None
    return {topic: sorted(parts) for topic, parts in result.items()}


def format_assignment(data: bytes) -> str:
    """``orders[0,1] audit[3]``: a member's assignment as the admin tools print it."""
    decoded = consumer_assignment(data)
    if decoded is None:
        return f"<{len(data)} bytes>"
    return " ".join(
        f"{topic}[{','.join(map(str, parts))}]" for topic, parts in sorted(decoded.items())
    )


def _valid_group_id(group_id: str) -> bool:
    """Kafka refuses only empty ids; rustka also refuses names its offsets log refuses."""
    try:
        validate_group(group_id)
    except InvalidName:
        return False
    return True
