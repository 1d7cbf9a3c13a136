"""A consumer group's state: Kafka's classic group states, its members, and the answers.

`GroupCoordinator` (`rustka.broker.coordinator`) drives these objects through
Kafka's classic group protocol; everything here is the state it drives and the
rules that read only that state: which transitions are legal, which protocol
the members agree on, whether a request names a current member, and what a
JoinGroup, SyncGroup or DescribeGroups answer holds. Nothing here keeps time or
answers a request: the timers and the parked requests' Deferreds are the
coordinator's, merely stored on the members they belong to.

The answers are plain dataclasses whose ``error`` fields carry Kafka's numeric
error codes (`GroupErrorCode`), so the Kafka front-end encodes them as they are
(docs/kafka.md, "Consumer groups").
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall

from rustka.errors import InvalidName
from rustka.names import validate_group
from rustka.record.batch import ms_now

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
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86


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


# -- state -------------------------------------------------------------------------------


@dataclass(eq=False)
class Member:
    """One member of a group, with the requests it has parked and its session timer."""

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
class Group:
    """One group: its state, generation, chosen protocol, leader and members.

    ``pending_join`` holds member ids handed out with MEMBER_ID_REQUIRED and not
    used yet (each with the timer that forgets it); ``pending_sync`` the members
    of this generation that have not sent SyncGroup.
    """

    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState = GroupState.DEAD
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_join: dict[str, IDelayedCall] = field(default_factory=dict)
    pending_sync: set[str] = field(default_factory=set)
    join_timer: IDelayedCall | None = None
    sync_timer: IDelayedCall | None = None
    initial_delay_running: bool = False
    new_member_added: bool = False
    # When the group entered its state (wall clock, ms): Kafka's currentStateTimestamp,
    # from which an empty group's offsets expire (offsets_retention_ms).
    state_since_ms: int = field(default_factory=ms_now)

    def transition(self, state: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(
                f"group {self.group_id}: illegal transition {self.state} -> {state}"
            )
        self.previous_state, self.state = self.state, state
        self.state_since_ms = ms_now()

    def may_prepare_rebalance(self) -> bool:
        """True in the states a rebalance can start from (Empty, Stable, CompletingRebalance)."""
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

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

    # -- answers -----------------------------------------------------------------

    def join_answer(self, member: Member) -> JoinResult:
        """The JoinGroup answer of ``member`` in the current generation; only the leader
        gets the members' metadata (for the chosen protocol), to compute assignments."""
        leader = member.member_id == self.leader_id
        members = (
            tuple(
                JoinedMember(m.member_id, m.instance_id, m.metadata(self.protocol_name))
                for m in self.members.values()
            )
            if leader
            else ()
        )
        return JoinResult(
            E.NONE,
            member.member_id,
            self.generation_id,
            self.protocol_type,
            self.protocol_name,
            self.leader_id or "",
            members,
        )

    def sync_answer(self, member: Member) -> SyncResult:
        return SyncResult(E.NONE, member.assignment, self.protocol_type, self.protocol_name)

    def describe(self) -> GroupDescription:
        """The group as DescribeGroups shows it (metadata and assignments only when Stable)."""
        stable = self.state is GroupState.STABLE
        members = tuple(
            MemberDescription(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.metadata(self.protocol_name) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in self.members.values()
        )
        return GroupDescription(
            self.group_id,
            str(self.state),
            self.protocol_type or "",
            (self.protocol_name or "") if stable else "",
            self.generation_id,
            members,
        )


def valid_group_id(group_id: str) -> bool:
    """Kafka refuses only empty ids; rustka also refuses names its offsets log refuses."""
    try:
        validate_group(group_id)
    except InvalidName:
        return False
    return True


def dedup_protocols(protocols: Sequence[tuple[str, bytes]]) -> tuple[tuple[str, bytes], ...]:
    """Keep each protocol name's first entry, in the member's preference order."""
    seen: set[str] = set()
    result = []
    for name, metadata in protocols:
        if name not in seen:
            seen.add(name)
            result.append((name, bytes(metadata)))
    return tuple(result)
