"""Consumer groups of Kafka 4's consumer group protocol (KIP-848): the pure model.

In the classic protocol a leader member computes the assignment; here the
coordinator does, and members only heartbeat (ConsumerGroupHeartbeat): each
heartbeat says what the member subscribes to and which partitions it owns, and the
answer says its member epoch and the partitions it may own now. The rules follow
Kafka's group coordinator (GroupMetadataManager, ConsumerGroup,
CurrentAssignmentBuilder), as docs/kafka.md, "Consumer groups (KIP-848)" says:

- the *group epoch* is bumped whenever the membership, a member's subscription or the
  partitions of a subscribed topic change; a heartbeat then computes a new *target
  assignment* with the group's assignor (`rustka.broker.assignors`), whose epoch is the
  *assignment epoch*;
- each member moves towards its target one heartbeat at a time: partitions it must
  give up are revoked first (UNREVOKED_PARTITIONS: its epoch stays until it heartbeats
  without them), partitions another member still owns are withheld
  (UNRELEASED_PARTITIONS) until that member has released them, and only then does the
  member reach the assignment epoch (STABLE) - so no partition ever has two owners;
- epochs fence zombies: a heartbeat with another epoch than the member's is
  FENCED_MEMBER_EPOCH (the one before is accepted if the member owns no more than its
  assignment: the answer that bumped it may have been lost), an unknown member is
  UNKNOWN_MEMBER_ID, and both make the client rejoin with epoch 0;
- a member leaves with epoch -1; a static member (``group.instance.id``) with -2 keeps
  its assignment until its session times out, and a new member with the same instance
  id takes it over without a rebalance;
- a member silent for the session timeout, or holding partitions to revoke past its
  rebalance timeout, is removed.

Time is passed in (``now_ms``), never read: the coordinator's reactor timers call
`ConsumerGroups.expire`, and tests drive it by hand. Regular expression subscriptions
are RE2 in Kafka; here they are Python `re` patterns matched against the whole topic
name (`re.fullmatch`), which agrees with RE2 for the patterns clients use.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from rustka.broker.assignors import ASSIGNORS, Assignment

JOIN_EPOCH: Final = 0
LEAVE_EPOCH: Final = -1
STATIC_LEAVE_EPOCH: Final = -2
DEFAULT_SESSION_TIMEOUT_MS: Final = 45_000
DEFAULT_HEARTBEAT_INTERVAL_MS: Final = 5_000


class ConsumerGroupError(enum.IntEnum):
    """The Kafka error codes of the consumer group protocol (ints on the wire)."""

    NONE = 0
    NOT_COORDINATOR = 16
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_REQUEST = 42
    GROUP_ID_NOT_FOUND = 69
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    UNSUPPORTED_VERSION = 35
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113


E = ConsumerGroupError


class MemberState(enum.StrEnum):
    """CurrentAssignmentBuilder's member states, named as Kafka's admin tools show them."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(enum.StrEnum):
    """Kafka's consumer group states as ListGroups and the describe APIs show them."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def _empty() -> Assignment:
    return {}


@dataclass(slots=True)
class ConsumerMember:
    """One member: what it subscribes to, what it owns, where it is in reconciling."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    rebalance_timeout_ms: int = 300_000
    subscribed_names: tuple[str, ...] = ()
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    assigned: Assignment = field(default_factory=_empty)
    revoking: Assignment = field(default_factory=_empty)
    session_deadline_ms: int = 0
    revoke_deadline_ms: int | None = None

    def subscribes(self, topic: str) -> bool:
        """Whether the topic is one of the member's: by name, or by its pattern."""
        if topic in self.subscribed_names:
            return True
        return self.subscribed_regex is not None and _matches(self.subscribed_regex, topic)


def _matches(pattern: str, topic: str) -> bool:
    try:
        return re.fullmatch(pattern, topic) is not None
    except re.error:
        return False


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """One ConsumerGroupHeartbeat, as the front-end hands it over (None: unchanged)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_names: tuple[str, ...] | None = None
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """The answer: the member's epoch and, when it changed or the request was a full
    one, its assignment (None: unchanged)."""

    error: int
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None
    message: str | None = None


def _union(a: Mapping[str, frozenset[int]], b: Mapping[str, frozenset[int]]) -> Assignment:
    out = dict(a)
    for topic, parts in b.items():
        out[topic] = out.get(topic, frozenset()) | parts
    return {t: p for t, p in out.items() if p}


def _minus(a: Mapping[str, frozenset[int]], b: Mapping[str, frozenset[int]]) -> Assignment:
    out = {t: p - b.get(t, frozenset()) for t, p in a.items()}
    return {t: p for t, p in out.items() if p}


def _intersect(a: Mapping[str, frozenset[int]], b: Mapping[str, frozenset[int]]) -> Assignment:
    out = {t: p & b.get(t, frozenset()) for t, p in a.items()}
    return {t: p for t, p in out.items() if p}


def _is_subset(a: Mapping[str, frozenset[int]], b: Mapping[str, frozenset[int]]) -> bool:
    return all(p <= b.get(t, frozenset()) for t, p in a.items())


class ConsumerGroup:
    """One consumer group: members, group epoch, target assignment and its epoch."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}
        self.target: dict[str, Assignment] = {}
        self.subscribed_topics: dict[str, int] = {}
        self.assignor_name = ""

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch != self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(
            m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
            for m in self.members.values()
        ):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owner_of(self, topic: str, partition: int) -> str | None:
        """The member that owns (or still has to revoke) a partition, if any."""
        for member in self.members.values():
            if partition in member.assigned.get(topic, ()) or partition in member.revoking.get(
                topic, ()
            ):
                return member.member_id
        return None

    def target_of(self, member_id: str) -> Assignment:
        return self.target.get(member_id, {})


class ConsumerGroups:
    """Every consumer group of the coordinator, reactor-free.

    ``assignors`` are the names of `rustka.broker.assignors.ASSIGNORS` a member may
    ask for, the first the default (Kafka's ``group.consumer.assignors``).
    """

    def __init__(
        self,
        *,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
        assignors: Iterable[str] = ("uniform", "range"),
        max_group_size: int | None = None,
    ) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.assignors = [name for name in assignors if name in ASSIGNORS] or ["uniform"]
        self.max_group_size = max_group_size
        self.groups: dict[str, ConsumerGroup] = {}
        self.heartbeats = 0
        """Heartbeats handled since the start (for the metrics)."""
        self.rebalances = 0
        """Group epoch bumps since the start: each is a new target assignment."""

    # -- ConsumerGroupHeartbeat ---------------------------------------------------------

    def heartbeat(
        self, request: HeartbeatRequest, topics: Mapping[str, int], now_ms: int
    ) -> HeartbeatResult:
        """Handle one heartbeat; ``topics`` are the broker's topics and partition counts."""
        self.heartbeats += 1
        invalid = self._invalid(request)
        if invalid is not None:
            return HeartbeatResult(E.INVALID_REQUEST, message=invalid)
        if request.server_assignor is not None and request.server_assignor not in self.assignors:
            return HeartbeatResult(
                E.UNSUPPORTED_ASSIGNOR,
                message=f"ServerAssignor {request.server_assignor} is not supported; "
                f"supported: {', '.join(self.assignors)}",
            )
        group = self.groups.get(request.group_id)
        joining = request.member_epoch == JOIN_EPOCH
        if group is None:
            if not joining:
                # Kafka 4 answers a member of a group it does not know (a coordinator
                # that restarted) so that the member rejoins, not GROUP_ID_NOT_FOUND.
                return HeartbeatResult(E.UNKNOWN_MEMBER_ID, message="unknown group")
            group = self.groups[request.group_id] = ConsumerGroup(request.group_id)
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, request, now_ms)
        member, error = self._member_of(group, request)
        if member is None:
            if not group.members:
                del self.groups[group.group_id]
            return HeartbeatResult(error, message="member not accepted")
        previous_assigned = dict(member.assigned)
        new_member = member.member_id not in group.members
        if new_member:
            group.members[member.member_id] = member
        bump = new_member and member.previous_member_epoch == -1
        bump |= self._update(member, request)
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member.member_id
        resolved = self._subscribed_topics(group, topics)
        if resolved != group.subscribed_topics:
            group.subscribed_topics = resolved
            bump = True
        if bump:
            group.group_epoch += 1
            self.rebalances += 1
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group)
        self._reconcile(group, member, request.owned, now_ms)
        member.session_deadline_ms = now_ms + self.session_timeout_ms
        full = joining or (
            request.rebalance_timeout_ms != -1
            and request.subscribed_names is not None
            and request.owned is not None
        )
        changed = member.assigned != previous_assigned or new_member
        return HeartbeatResult(
            E.NONE,
            member.member_id,
            member.member_epoch,
            self.heartbeat_interval_ms,
            dict(member.assigned) if full or changed else None,
        )

    @staticmethod
    def _invalid(request: HeartbeatRequest) -> str | None:
        if not request.group_id:
            return "GroupId can't be empty."
        if request.instance_id == "":
            return "InstanceId can't be empty."
        if request.rack_id == "":
            return "RackId can't be empty."
        epoch = request.member_epoch
        if epoch > 0 or epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            if not request.member_id:
                return "MemberId can't be empty."
            if epoch == STATIC_LEAVE_EPOCH and request.instance_id is None:
                return "InstanceId can't be null."
        elif epoch == JOIN_EPOCH:
            if request.rebalance_timeout_ms == -1:
                return "RebalanceTimeoutMs must be provided in first request."
            if request.owned is None or any(request.owned.values()):
                return "TopicPartitions must be empty when (re-)joining."
            if not request.subscribed_names and request.subscribed_regex is None:
                return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
        else:
            return "MemberEpoch is invalid."
        if request.subscribed_regex is not None:
            try:
                re.compile(request.subscribed_regex)
            except re.error as exc:
                return f"SubscribedTopicRegex is not a valid regular expression: {exc}"
        return None

    def _member_of(
        self, group: ConsumerGroup, request: HeartbeatRequest
    ) -> tuple[ConsumerMember | None, int]:
        """The heartbeat's member (new when joining), or None and the error to answer."""
        joining = request.member_epoch == JOIN_EPOCH
        if request.instance_id is not None and joining:
            old_id = group.static_members.get(request.instance_id)
            old = group.members.get(old_id) if old_id is not None else None
            if old is not None:
                if old.member_epoch != STATIC_LEAVE_EPOCH and old.member_id != request.member_id:
                    return None, E.UNRELEASED_INSTANCE_ID
                # The restarted instance takes over its predecessor's assignment.
                new_id = request.member_id or str(uuid.uuid4())
                del group.members[old.member_id]
                taken = ConsumerMember(
                    new_id,
                    instance_id=request.instance_id,
                    member_epoch=0,
                    previous_member_epoch=0,
                    rebalance_timeout_ms=old.rebalance_timeout_ms,
                    subscribed_names=old.subscribed_names,
                    subscribed_regex=old.subscribed_regex,
                    server_assignor=old.server_assignor,
                    assigned=old.assigned,
                    revoking=old.revoking,
                )
                group.target[new_id] = group.target.pop(old.member_id, {})
                return taken, E.NONE
        if joining:
            member = group.members.get(request.member_id) if request.member_id else None
            if member is not None:
                # A member rejoining with epoch 0 gives up what it owned.
                member.member_epoch = 0
                member.assigned, member.revoking = {}, {}
                member.state = MemberState.STABLE
                return member, E.NONE
            if self.max_group_size is not None and len(group.members) >= self.max_group_size:
                return None, E.GROUP_MAX_SIZE_REACHED
            return ConsumerMember(request.member_id or str(uuid.uuid4())), E.NONE
        if request.instance_id is not None:
            holder = group.static_members.get(request.instance_id)
            if holder is None:
                return None, E.UNKNOWN_MEMBER_ID
            if holder != request.member_id:
                # Another member took the instance id over (Kafka's FENCED_INSTANCE_ID).
                return None, E.FENCED_INSTANCE_ID
        member = group.members.get(request.member_id)
        if member is None:
            return None, E.UNKNOWN_MEMBER_ID
        epoch = request.member_epoch
        if epoch > member.member_epoch:
            return None, E.FENCED_MEMBER_EPOCH
        if epoch < member.member_epoch and (
            epoch != member.previous_member_epoch
            or (request.owned is not None and not _is_subset(request.owned, member.assigned))
        ):
            return None, E.FENCED_MEMBER_EPOCH
        return member, E.NONE

    def _update(self, member: ConsumerMember, request: HeartbeatRequest) -> bool:
        """Apply what the heartbeat changed; True if the subscription did (epoch bump)."""
        member.client_id = request.client_id or member.client_id
        member.client_host = request.client_host or member.client_host
        if request.instance_id is not None:
            member.instance_id = request.instance_id
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        changed = False
        if request.subscribed_names is not None:
            names = tuple(sorted(set(request.subscribed_names)))
            changed |= names != member.subscribed_names
            member.subscribed_names = names
        if request.subscribed_regex is not None:
            regex = request.subscribed_regex or None
            changed |= regex != member.subscribed_regex
            member.subscribed_regex = regex
        if request.server_assignor is not None:
            changed |= request.server_assignor != member.server_assignor
            member.server_assignor = request.server_assignor
        return changed

    @staticmethod
    def _subscribed_topics(group: ConsumerGroup, topics: Mapping[str, int]) -> dict[str, int]:
        """The existing topics some member subscribes to, with their partition counts.

        Named topics are looked up; only a regular expression subscription walks the
        broker's topics, once per distinct pattern, so a heartbeat stays cheap.
        """
        names = {n for m in group.members.values() for n in m.subscribed_names}
        found = {n: topics[n] for n in names if n in topics}
        patterns = {m.subscribed_regex for m in group.members.values() if m.subscribed_regex}
        for pattern in patterns:
            for name in topics:
                if name not in found and _matches(pattern, name):
                    found[name] = topics[name]
        return found

    def _compute_target(self, group: ConsumerGroup) -> None:
        chosen = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        name = chosen.most_common(1)[0][0] if chosen else self.assignors[0]
        group.assignor_name = name
        subscriptions = {
            m.member_id: {t for t in group.subscribed_topics if m.subscribes(t)}
            for m in group.members.values()
        }
        group.target = ASSIGNORS[name](subscriptions, group.subscribed_topics, group.target)
        group.assignment_epoch = group.group_epoch

    def _reconcile(
        self,
        group: ConsumerGroup,
        member: ConsumerMember,
        owned: Assignment | None,
        now_ms: int,
    ) -> None:
        """One step of CurrentAssignmentBuilder towards the member's target."""
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            # Still owns what it must give up: wait for a heartbeat without it.
            if owned is None or _intersect(owned, member.revoking):
                return
            member.revoking = {}
        elif member.state is MemberState.STABLE and member.member_epoch == group.assignment_epoch:
            return
        target = group.target_of(member.member_id)
        kept = _intersect(member.assigned, target)
        revoke = _minus(member.assigned, target)
        wanted = _minus(target, member.assigned)
        free: Assignment = {}
        unreleased = False
        for topic, parts in wanted.items():
            ready = frozenset(
                p for p in parts if group.owner_of(topic, p) in (None, member.member_id)
            )
            unreleased |= ready != parts
            if ready:
                free[topic] = ready
        if revoke:
            member.assigned, member.revoking = kept, revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.revoke_deadline_ms = now_ms + member.rebalance_timeout_ms
            return
        member.revoke_deadline_ms = None
        member.assigned = _union(kept, free)
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
        member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE

    def _leave(
        self, group: ConsumerGroup, request: HeartbeatRequest, now_ms: int
    ) -> HeartbeatResult:
        member = group.members.get(request.member_id)
        if member is None and request.instance_id is not None:
            known = group.static_members.get(request.instance_id)
            member = group.members.get(known) if known is not None else None
        if member is None:
            return HeartbeatResult(E.UNKNOWN_MEMBER_ID, request.member_id)
        if request.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # Keeps its assignment until its session ends or the instance returns.
            member.member_epoch = STATIC_LEAVE_EPOCH
            member.session_deadline_ms = now_ms + self.session_timeout_ms
            return HeartbeatResult(E.NONE, member.member_id, STATIC_LEAVE_EPOCH)
        self.remove(group, member.member_id)
        return HeartbeatResult(E.NONE, member.member_id, LEAVE_EPOCH)

    def remove(self, group: ConsumerGroup, member_id: str) -> None:
        """Take a member out (it left, timed out or was fenced): its partitions are free
        and the group epoch moves so the others get a new target."""
        member = group.members.pop(member_id, None)
        if member is None:
            return
        if member.instance_id is not None and group.static_members.get(member.instance_id) == (
            member_id
        ):
            del group.static_members[member.instance_id]
        group.target.pop(member_id, None)
        group.group_epoch += 1
        self.rebalances += 1

    # -- time ---------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        """When `expire` next has something to do, for the coordinator's one timer."""
        deadlines = [
            d
            for group in self.groups.values()
            for m in group.members.values()
            for d in (m.session_deadline_ms, m.revoke_deadline_ms)
            if d is not None
        ]
        return min(deadlines) if deadlines else None

    def expire(self, now_ms: int) -> list[tuple[str, str]]:
        """Remove members past their session or rebalance timeout; (group, member) of each."""
        removed = []
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                late = member.session_deadline_ms <= now_ms or (
                    member.revoke_deadline_ms is not None and member.revoke_deadline_ms <= now_ms
                )
                if late:
                    self.remove(group, member.member_id)
                    removed.append((group.group_id, member.member_id))
        return removed

    # -- offsets fencing and views ------------------------------------------------------

    def check_commit(self, group_id: str, member_id: str, epoch: int, api_version: int) -> int:
        """Kafka's ConsumerGroup.validateOffsetCommit: 0 if the commit may write."""
        group = self.groups.get(group_id)
        if group is None or (epoch < 0 and not group.members):
            return E.NONE
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if api_version < 9:
            return E.UNSUPPORTED_VERSION
        return E.NONE if epoch == member.member_epoch else E.STALE_MEMBER_EPOCH

    def check_fetch(self, group_id: str, member_id: str | None, epoch: int) -> int:
        """Kafka's ConsumerGroup.validateOffsetFetch: 0 if the member may read."""
        if member_id is None and epoch < 0:
            return E.NONE
        group = self.groups.get(group_id)
        member = group.members.get(member_id or "") if group is not None else None
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        return E.NONE if epoch == member.member_epoch else E.STALE_MEMBER_EPOCH

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def forget_if_empty(self, group_id: str) -> None:
        """Drop an empty group (another protocol takes the id, or DeleteGroups)."""
        group = self.groups.get(group_id)
        if group is not None and not group.members:
            del self.groups[group_id]

    def clear(self) -> None:
        self.groups.clear()
