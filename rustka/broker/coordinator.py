"""The group coordinator: Kafka's classic group protocol, protocol-neutral, on the reactor.

Kafka clients that ``subscribe()`` need a broker-side coordinator that collects the
members of a group (JoinGroup), lets one of them - the leader - compute an assignment
and relays it to everyone (SyncGroup), watches liveness (Heartbeat, session timeouts)
and starts a new generation whenever membership changes. This module is that
coordinator, written against the broker core only: the Kafka front-end decodes
requests, calls the methods here and encodes the plain results (the dataclasses of
`rustka.broker.groups`, whose ``error`` fields carry Kafka's numeric error codes).
The behaviour follows Kafka's classic coordinator as docs/kafka.md describes it.

The broker core builds the one coordinator (``Broker.groups``) with the config's
bounds (``group_min_session_timeout_ms``, ``group_max_session_timeout_ms``,
``group_initial_rebalance_delay_ms``), so every front-end's requests meet the same
rules. What the coordinator needs of the core is `CommittedGroups`.

Membership is transient, exactly like Kafka after a coordinator moves: after a
restart clients rejoin and resume from their committed offsets, which live in the
``__offsets`` log and are written by the broker core, never by this module. The
coordinator only *fences* commits (`check_commit`) and refuses a native consumer a
group that Kafka members drive (`require_no_active_members`).

Everything runs on the reactor thread; timeouts use the injected ``IReactorTime``
so tests drive them with ``twisted.internet.task.Clock``. Answers to pending
JoinGroup/SyncGroup Deferreds are queued while the state changes and fired only
once it is consistent, so a callback that re-enters the coordinator (a test, or a
front-end answering synchronously) never sees a half-updated group.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from rustka.broker.consumer_groups import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    ConsumerGroup,
    ConsumerGroups,
    HeartbeatRequest,
    HeartbeatResult,
)
from rustka.broker.groups import (
    CONSUMER_PROTOCOL_TYPE,
    Group,
    GroupDescription,
    GroupErrorCode,
    GroupState,
    JoinResult,
    LeaveResult,
    LeftMember,
    Member,
    SyncResult,
    dedup_protocols,
    valid_group_id,
)
from rustka.errors import GroupHasActiveMembers

log = Logger()

E = GroupErrorCode

DEFAULT_MIN_SESSION_TIMEOUT_MS = 6_000
DEFAULT_MAX_SESSION_TIMEOUT_MS = 1_800_000


class CommittedGroups(Protocol):
    """What the coordinator needs from the offsets side: the names of groups with commits.

    The broker core (`Broker.group_names`) provides it.
    """

    def group_names(self) -> Iterable[str]: ...


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """One JoinGroup, as every front-end hands it to `GroupCoordinator.join`.

    ``protocols`` are (name, metadata) in the member's order of preference.
    ``rebalance_timeout_ms`` of 0 or less means the session timeout (JoinGroup v0
    has no rebalance timeout; Kafka then uses the session timeout for both).
    ``require_known_member_id`` is true for JoinGroup v4+: a dynamic member joining
    with an empty id first gets MEMBER_ID_REQUIRED with its new id and must rejoin
    with it (so a client that loses the answer does not leave a ghost member).
    ``client_host`` is shown as Kafka shows it (``/address``).
    """

    group_id: str
    member_id: str
    protocol_type: str
    protocols: Sequence[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1
    instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = False


def _new_member(member_id: str, request: JoinRequest) -> Member:
    return Member(
        member_id,
        request.instance_id,
        request.client_id,
        request.client_host,
        request.session_timeout_ms,
        request.rebalance_timeout_ms,
        request.protocol_type,
        tuple(request.protocols),
    )


class GroupCoordinator:
    """Kafka's classic group coordinator for every group on this broker.

    ``offsets`` supplies the groups that only have committed offsets (native groups)
    for `list_groups`/`describe`: the broker core, which builds the coordinator with
    the config's bounds (None leaves those views to the live groups).
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
        consumer_session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        consumer_heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
        consumer_assignors: Sequence[str] = ("uniform", "range"),
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
        self._groups: dict[str, Group] = {}
        self.heartbeats = 0
        """Classic Heartbeats handled since the start (for the metrics)."""
        self.rebalances = 0
        """Classic rebalances begun since the start (for the metrics)."""
        self._outbox: list[tuple[defer.Deferred[Any], Any]] = []
        self._closed = False
        self.consumer = ConsumerGroups(
            session_timeout_ms=consumer_session_timeout_ms,
            heartbeat_interval_ms=consumer_heartbeat_interval_ms,
            assignors=consumer_assignors,
            max_group_size=max_group_size,
        )
        """The groups of the consumer group protocol (KIP-848); a group id is either one
        of these or a classic group (docs/kafka.md, "Consumer groups (KIP-848)")."""
        self._consumer_timer: IDelayedCall | None = None
        self.coordinating: Callable[[], bool] = _always
        """Whether this broker coordinates groups now: in a cluster, only the holder of
        the coordinator role does (docs/diskless.md, "Consumer groups in a cluster")."""

    def _not_here(self) -> bool:
        """Requests are answered NOT_COORDINATOR: the broker is stopping, or another
        broker of the cluster coordinates the groups."""
        return self._closed or not self.coordinating()

    # -- JoinGroup -------------------------------------------------------------------

    def join(self, request: JoinRequest) -> defer.Deferred[JoinResult]:
        """Handle one JoinGroup; the Deferred fires when the join phase completes."""
        try:
            return self._join(request)
        finally:
            self._flush()

    def _join(self, request: JoinRequest) -> defer.Deferred[JoinResult]:
        def fail(code: int, mid: str = request.member_id) -> defer.Deferred[JoinResult]:
            return defer.succeed(JoinResult(code, mid))

        if self._not_here():
            return fail(E.NOT_COORDINATOR)
        if not valid_group_id(request.group_id):
            return fail(E.INVALID_GROUP_ID)
        session_ms = request.session_timeout_ms
        if not self.min_session_timeout_ms <= session_ms <= self.max_session_timeout_ms:
            return fail(E.INVALID_SESSION_TIMEOUT)
        rebalance_ms = request.rebalance_timeout_ms
        request = replace(
            request,
            protocols=dedup_protocols(request.protocols),
            rebalance_timeout_ms=rebalance_ms if rebalance_ms > 0 else session_ms,
        )
        names = [name for name, _ in request.protocols]
        if self.consumer.has_members(request.group_id):
            # Kafka would migrate the group to classic members; rustka refuses.
            return fail(E.INCONSISTENT_GROUP_PROTOCOL)
        self.consumer.forget_if_empty(request.group_id)
        group = self._groups.get(request.group_id)
        if request.member_id:
            if group is None:
                return fail(E.UNKNOWN_MEMBER_ID)
            return self._join_known(group, request, names)
        if group is None:
            group = self._groups[request.group_id] = Group(request.group_id)
        try:
            if not group.supports(request.protocol_type, names):
                return fail(E.INCONSISTENT_GROUP_PROTOCOL)
            instance_id = request.instance_id
            replacing = instance_id is not None and instance_id in group.static_members
            if (
                not replacing
                and self.max_group_size is not None
                and len(group.members) + len(group.pending_join) >= self.max_group_size
            ):
                return fail(E.GROUP_MAX_SIZE_REACHED)
            owner = instance_id if instance_id is not None else request.client_id
            new_id = f"{owner}-{uuid.uuid4()}"
            if replacing:
                assert instance_id is not None
                return self._replace_static_member(group, instance_id, new_id, request)
            if instance_id is None and request.require_known_member_id:
                group.pending_join[new_id] = self.clock.callLater(
                    session_ms / 1000, self._pending_expired, group, new_id
                )
                return fail(E.MEMBER_ID_REQUIRED, new_id)
            return self._add_member(group, _new_member(new_id, request))
        finally:
            self._maybe_forget(group)

    def _join_known(
        self, group: Group, request: JoinRequest, names: list[str]
    ) -> defer.Deferred[JoinResult]:
        member_id = request.member_id

        def fail(code: int) -> defer.Deferred[JoinResult]:
            return defer.succeed(JoinResult(code, member_id))

        if member_id in group.pending_join:
            if not group.supports(request.protocol_type, names):
                return fail(E.INCONSISTENT_GROUP_PROTOCOL)
            group.pending_join.pop(member_id).cancel()
            return self._add_member(group, _new_member(member_id, request))
        error = group.validate_member(member_id, request.instance_id)
        if error:
            return fail(error)
        if not group.supports(request.protocol_type, names):
            return fail(E.INCONSISTENT_GROUP_PROTOCOL)
        member = group.members[member_id]
        unchanged = member.protocols == request.protocols
        if group.state is GroupState.COMPLETING_REBALANCE and unchanged:
            # A repeated JoinGroup (the client lost the answer): same generation again.
            return defer.succeed(group.join_answer(member))
        if group.state is GroupState.STABLE and unchanged and group.leader_id != member_id:
            return defer.succeed(group.join_answer(member))
        d: defer.Deferred[JoinResult] = defer.Deferred()
        self._update_member(member, request, d)
        self._rebalance_or_complete(group)
        return d

    def _update_member(
        self, member: Member, request: JoinRequest, waiter: defer.Deferred[JoinResult]
    ) -> None:
        member.protocols = tuple(request.protocols)
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if member.join_waiter is not None:
            # Superseded by the client's new JoinGroup; the old request gets a retriable answer.
            self._answer(member.join_waiter, JoinResult(E.REBALANCE_IN_PROGRESS, member.member_id))
        member.join_waiter = waiter

    def _add_member(self, group: Group, member: Member) -> defer.Deferred[JoinResult]:
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
        self, group: Group, instance_id: str, new_id: str, request: JoinRequest
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
        self._update_member(member, request, d)
        if group.state is GroupState.STABLE and group.select_protocol() == group.protocol_name:
            member.join_waiter = None
            # The leader id is the one before the replacement, so a returning leader acts
            # as a follower and does not recompute an assignment nobody asked for.
            answer = replace(group.join_answer(member), leader_id=previous_leader or "")
            self._answer(d, replace(answer, members=()))
            return d
        self._rebalance_or_complete(group)
        return d

    def _pending_expired(self, group: Group, member_id: str) -> None:
        """A member id handed out with MEMBER_ID_REQUIRED was never used."""
        if group.pending_join.pop(member_id, None) is None:
            return
        self._maybe_complete_join(group)
        self._maybe_forget(group)
        self._flush()

    # -- rebalancing -----------------------------------------------------------------

    def _rebalance_or_complete(self, group: Group) -> None:
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        elif group.may_prepare_rebalance():
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: Group) -> None:
        self.rebalances += 1
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

    def _initial_delay_over(self, group: Group, remaining_ms: int) -> None:
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

    def _join_timed_out(self, group: Group) -> None:
        group.join_timer = None
        self._complete_join(group)
        self._flush()

    def _maybe_complete_join(self, group: Group) -> None:
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and not group.initial_delay_running
            and group.all_joined()
        ):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
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
                self._answer(waiter, group.join_answer(member))
            self._schedule_session(group, member)
            group.pending_sync.add(member.member_id)
        group.sync_timer = self.clock.callLater(
            group.rebalance_timeout_ms / 1000, self._sync_timed_out, group, group.generation_id
        )

    def _elect_joined_leader(self, group: Group) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.join_waiter is not None:
            return True
        for member in group.members.values():
            if member.join_waiter is not None:
                group.leader_id = member.member_id
                return True
        return False

    def _sync_timed_out(self, group: Group, generation_id: int) -> None:
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
        if self._not_here():
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
            return defer.succeed(group.sync_answer(member))
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
                    self._answer(waiter, group.sync_answer(m))
                    self._schedule_session(group, m)
        return d

    def _synced(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            _cancel(group.sync_timer)
            group.sync_timer = None

    # -- Heartbeat ---------------------------------------------------------------------

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None = None
    ) -> int:
        """Handle one Heartbeat; REBALANCE_IN_PROGRESS tells the member to rejoin."""
        self.heartbeats += 1
        if self._not_here():
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
        if self._not_here():
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

    def _remove_member(self, group: Group, member: Member) -> None:
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

    def _after_removal(self, group: Group) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        self._maybe_forget(group)

    def _schedule_session(self, group: Group, member: Member) -> None:
        seconds = member.session_timeout_ms / 1000
        timer = member.session_timer
        if timer is not None and timer.active():
            timer.reset(seconds)
        else:
            member.session_timer = self.clock.callLater(
                seconds, self._session_expired, group, member
            )

    @staticmethod
    def _cancel_session(member: Member) -> None:
        _cancel(member.session_timer)
        member.session_timer = None

    def _session_expired(self, group: Group, member: Member) -> None:
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

    def _maybe_forget(self, group: Group) -> None:
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

    def _fail_syncs(self, group: Group, error: int) -> None:
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
        api_version: int = 9,
    ) -> int | None:
        """May this OffsetCommit write? None if so, else the Kafka error code.

        A consumer group (KIP-848) checks the member and its epoch instead
        (`ConsumerGroups.check_commit`); ``api_version`` is the OffsetCommit's.

        Generation -1 (a standalone consumer or an admin tool) is accepted only while
        the group has no members; a member must name the current generation. During
        CompletingRebalance the member has a new generation but no assignment yet, so
        it is told REBALANCE_IN_PROGRESS, as Kafka does. A valid commit also counts as
        a heartbeat.
        """
        if self._not_here():
            return E.NOT_COORDINATOR
        group = self._groups.get(group_id)
        if group is None and group_id in self.consumer.groups:
            code = self.consumer.check_commit(group_id, member_id, generation_id, api_version)
            return code or None
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

    def check_txn_commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None = None,
    ) -> int | None:
        """May this TxnOffsetCommit stage offsets? None if so, else the Kafka error code.

        Kafka's rule for transactional commits (KIP-447, TxnOffsetCommit v3): a request
        that names a generation, member or instance must be the group's current member
        (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID) in the current generation
        (ILLEGAL_GENERATION), so a producer whose consumer was rebalanced away cannot
        commit its old partitions' offsets; generation -1 is accepted while the group is
        empty, and one naming none of them (v0-2) whatever the group's state, since
        those versions carry no member. Unlike
        `check_commit` it neither answers REBALANCE_IN_PROGRESS nor counts as a heartbeat.
        """
        if self._not_here():
            return E.NOT_COORDINATOR
        group = self._groups.get(group_id)
        if group is None and group_id in self.consumer.groups:
            # Kafka checks a consumer group's transactional commits as its others.
            code = self.consumer.check_commit(group_id, member_id, generation_id, 9)
            return code or None
        empty = group is None or group.state is GroupState.EMPTY
        named = generation_id >= 0 or bool(member_id) or instance_id is not None
        if (generation_id < 0 and empty) or not named:
            return None
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        error = group.validate_member(member_id, instance_id)
        if error:
            return error
        return E.ILLEGAL_GENERATION if generation_id != group.generation_id else None

    def has_active_members(self, group_id: str) -> bool:
        """True while Kafka consumers are members (resets and native commits wait)."""
        group = self._groups.get(group_id)
        return (group is not None and bool(group.members)) or self.consumer.has_members(group_id)

    def require_no_active_members(self, group_id: str) -> None:
        """Raise `GroupHasActiveMembers` (a clear client-facing error) if members exist."""
        group = self._groups.get(group_id)
        if group is not None and group.members:
            raise GroupHasActiveMembers.for_group(group_id, len(group.members))
        cgroup = self.consumer.groups.get(group_id)
        if cgroup is not None and cgroup.members:
            raise GroupHasActiveMembers.for_group(group_id, len(cgroup.members))

    # -- offsets expiry (offsets_retention_ms) -----------------------------------------

    def empty_since(self, group_id: str, unknown_ms: int) -> int | None:
        """Since when (ms) a group has been Empty, from which its offsets may expire, or
        None while it is not (members, or joins pending). A group this coordinator does
        not hold in memory counts as empty since ``unknown_ms`` (the broker's start: group
        states are not persisted, so a restart never makes old offsets expire sooner)."""
        group = self._groups.get(group_id)
        if self.consumer.has_members(group_id):
            return None
        if group is None:
            return unknown_ms
        if group.state is GroupState.EMPTY and not group.members and not group.pending_join:
            return group.state_since_ms
        return None

    # -- group deletion (DeleteGroups, OffsetDelete) ------------------------------------

    def deletion_refused(self, group_id: str) -> int | None:
        """Why a group's offsets may not be deleted now, as Kafka answers, or None.

        Members own the offsets while they exist (NON_EMPTY_GROUP); a group nobody
        knows is GROUP_ID_NOT_FOUND.
        """
        group = self._groups.get(group_id)
        if (group is not None and group.members) or self.consumer.has_members(group_id):
            return E.NON_EMPTY_GROUP
        if group is None and group_id in self.consumer.groups:
            return None
        if group is None and group_id not in set(self._committed_groups()):
            return E.GROUP_ID_NOT_FOUND
        return None

    def forget(self, group_id: str) -> None:
        """Drop an empty group's state after DeleteGroups (it becomes Dead, unknown)."""
        group = self._groups.get(group_id)
        if group is not None and not group.members:
            del self._groups[group_id]
        self.consumer.forget_if_empty(group_id)

    # -- admin views -----------------------------------------------------------------

    def _committed_groups(self) -> Iterable[str]:
        return () if self.offsets is None else self.offsets.group_names()

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) for every known group, Kafka's and native."""
        return [(g, p, s) for g, p, s, _ in self.list_typed_groups()]

    def list_typed_groups(self) -> list[tuple[str, str, str, str]]:
        """`list_groups` with each group's type, ``classic`` or ``consumer`` (KIP-848)."""
        rows = {
            group.group_id: (group.group_id, group.protocol_type or "", str(group.state), "classic")
            for group in self._groups.values()
        }
        for cgroup in self.consumer.groups.values():
            rows[cgroup.group_id] = (
                cgroup.group_id,
                CONSUMER_PROTOCOL_TYPE,
                str(cgroup.state),
                "consumer",
            )
        for name in self._committed_groups():
            rows.setdefault(name, (name, CONSUMER_PROTOCOL_TYPE, str(GroupState.EMPTY), "classic"))
        return [rows[name] for name in sorted(rows)]

    def describe(self, group_id: str) -> GroupDescription:
        """One group for DescribeGroups and the admin tools; Dead if nobody knows it."""
        group = self._groups.get(group_id)
        if group is None and group_id in self.consumer.groups:
            # Kafka's DescribeGroups knows classic groups only (ConsumerGroupDescribe).
            return GroupDescription(group_id, str(GroupState.DEAD), "", "", 0)
        if group is None:
            if group_id in set(self._committed_groups()):
                return GroupDescription(
                    group_id, str(GroupState.EMPTY), CONSUMER_PROTOCOL_TYPE, "", 0
                )
            return GroupDescription(group_id, str(GroupState.DEAD), "", "", 0)
        return group.describe()

    # -- shutdown --------------------------------------------------------------------

    def close(self) -> None:
        """Broker shutdown: answer every parked request NOT_COORDINATOR, stop all timers.

        Clients then look for the coordinator again and rejoin after the restart.
        """
        self._closed = True
        self.resign()

    def resign(self) -> None:
        """Drop every group, answering parked requests NOT_COORDINATOR: the broker is
        stopping, or the cluster's coordinator role left or reached this broker (members
        find the coordinator again and rejoin; their committed offsets stay)."""
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
        self.consumer.clear()
        _cancel(self._consumer_timer)
        self._consumer_timer = None
        self._flush()

    # -- consumer groups (KIP-848) ---------------------------------------------------

    def consumer_heartbeat(
        self, request: HeartbeatRequest, topics: Mapping[str, int]
    ) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat: the model's answer, timers kept in step.

        A classic group with members keeps its id (GROUP_ID_NOT_FOUND, Kafka's answer
        when it does not migrate the group); an empty one is dropped for the new group.
        """
        if self._not_here():
            return HeartbeatResult(E.NOT_COORDINATOR)
        classic = self._groups.get(request.group_id)
        if classic is not None:
            if classic.members or classic.pending_join:
                return HeartbeatResult(
                    E.GROUP_ID_NOT_FOUND, message=f"Group {request.group_id} is a classic group"
                )
            self.forget(request.group_id)
        result = self.consumer.heartbeat(request, topics, self._now_ms())
        self._arm_consumer_timer()
        return result

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group of that id, for ConsumerGroupDescribe and DescribeGroups."""
        return self.consumer.groups.get(group_id)

    def _now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def _arm_consumer_timer(self) -> None:
        """One timer for every consumer group member's session and rebalance deadline."""
        deadline = self.consumer.next_deadline_ms()
        _cancel(self._consumer_timer)
        self._consumer_timer = None
        if deadline is not None:
            delay = max(0, deadline - self._now_ms()) / 1000
            self._consumer_timer = self.clock.callLater(delay, self._consumer_expired)

    def _consumer_expired(self) -> None:
        self._consumer_timer = None
        for group_id, member_id in self.consumer.expire(self._now_ms()):
            log.info("consumer group {g}: member {m} removed (timeout)", g=group_id, m=member_id)
        self._arm_consumer_timer()


def _always() -> bool:
    return True


def _cancel(timer: IDelayedCall | None) -> None:
    if timer is not None and timer.active():
        timer.cancel()
