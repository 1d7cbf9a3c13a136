"""The group coordinator on a fake clock: joins, rebalances, timeouts, fencing, views.

Every scenario drives `GroupCoordinator` exactly as the Kafka front-end will (one call
per request) and moves time only through ``task.Clock``, so the timeouts are exact and
the whole module runs in well under a second. The rules that read a group's state
alone are in tests/broker/test_groups.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from twisted.internet import defer, task

from rustka.broker.coordinator import CommittedGroups, GroupCoordinator, JoinRequest
from rustka.broker.groups import GroupErrorCode, JoinResult, SyncResult
from rustka.errors import ERRORS_BY_CODE, GroupHasActiveMembers, RustkaError

E = GroupErrorCode
G = "app"
SESSION = 10_000
REBALANCE = 30_000
RANGE = [("range", b"range-meta"), ("roundrobin", b"rr-meta")]


class Committed:
    """The one thing the coordinator asks of the core: the groups with committed offsets
    (on a running broker, `Broker.group_names`; see tests/broker/test_core.py)."""

    def __init__(self, *names: str) -> None:
        self.names = list(names)

    def group_names(self) -> Iterable[str]:
        return list(self.names)


def committed(*names: str) -> CommittedGroups:
    return Committed(*names)


def fired(d: defer.Deferred[Any]) -> Any:
    """The result of a Deferred that must already have fired (left in place for others)."""
    assert d.called, "the Deferred has not fired"
    results: list[Any] = []

    def keep(result: Any) -> Any:
        results.append(result)
        return result

    d.addBoth(keep)
    return results[0]


def pending(d: defer.Deferred[Any]) -> bool:
    return not d.called


@pytest.fixture
def clock() -> task.Clock:
    return task.Clock()


@pytest.fixture
def gc(clock: task.Clock) -> GroupCoordinator:
    return GroupCoordinator(clock, committed())


def join(
    gc: GroupCoordinator,
    member_id: str = "",
    *,
    protocols: list[tuple[str, bytes]] | None = None,
    instance_id: str | None = None,
    client_id: str = "client",
    v4: bool = True,
    group: str = G,
    session: int = SESSION,
    rebalance: int = REBALANCE,
    protocol_type: str = "consumer",
) -> defer.Deferred[JoinResult]:
    request = JoinRequest(
        group,
        member_id,
        protocol_type=protocol_type,
        protocols=RANGE if protocols is None else protocols,
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        instance_id=instance_id,
        client_id=client_id,
        client_host="/127.0.0.1",
        require_known_member_id=v4,
    )
    return gc.join(request)


def new_member(gc: GroupCoordinator, **kw: Any) -> defer.Deferred[JoinResult]:
    """The v4 dance: empty id -> MEMBER_ID_REQUIRED with an id -> join with it."""
    first = fired(join(gc, **kw))
    assert first.error == E.MEMBER_ID_REQUIRED
    assert first.member_id.startswith(kw.get("client_id", "client") + "-")
    return join(gc, first.member_id, **kw)


def state(gc: GroupCoordinator, group: str = G) -> str:
    return gc.describe(group).state


def stable_single(gc: GroupCoordinator, assignment: bytes = b"a0") -> JoinResult:
    r = fired(new_member(gc))
    s = fired(gc.sync(G, r.generation_id, r.member_id, assignments={r.member_id: assignment}))
    assert s == SyncResult(E.NONE, assignment, "consumer", "range")
    return r


def stable_pair(gc: GroupCoordinator) -> tuple[JoinResult, JoinResult]:
    """A leader and a follower in a Stable generation 2."""
    a = stable_single(gc)
    jb = new_member(gc, client_id="b")
    assert pending(jb)
    assert gc.heartbeat(G, a.generation_id, a.member_id) == E.REBALANCE_IN_PROGRESS
    a2 = fired(join(gc, a.member_id))
    b2 = fired(jb)
    sb = gc.sync(G, b2.generation_id, b2.member_id)
    assert pending(sb)
    fired(
        gc.sync(
            G, a2.generation_id, a2.member_id, assignments={a2.member_id: b"A", b2.member_id: b"B"}
        )
    )
    assert fired(sb).assignment == b"B"
    return a2, b2


# -- joining -------------------------------------------------------------------------------


def test_single_member_v4_dance_makes_it_leader_of_generation_1(gc: GroupCoordinator) -> None:
    assert state(gc) == "Dead"
    r = fired(new_member(gc))
    assert r.error == E.NONE
    assert r.generation_id == 1
    assert r.leader_id == r.member_id
    assert r.protocol_type == "consumer" and r.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in r.members] == [(r.member_id, b"range-meta")]
    assert state(gc) == "CompletingRebalance"
    s = fired(gc.sync(G, 1, r.member_id, assignments=[(r.member_id, b"assigned")]))
    assert s.error == E.NONE and s.assignment == b"assigned"
    assert state(gc) == "Stable"
    assert gc.heartbeat(G, 1, r.member_id) == E.NONE


def test_join_below_v4_gets_a_member_id_directly(gc: GroupCoordinator) -> None:
    r = fired(join(gc, v4=False, client_id="rdkafka"))
    assert r.error == E.NONE and r.member_id.startswith("rdkafka-") and r.generation_id == 1


def test_join_rejects_bad_group_session_timeout_and_protocols(gc: GroupCoordinator) -> None:
    assert fired(join(gc, group="")).error == E.INVALID_GROUP_ID
    assert fired(join(gc, group="a\x00b")).error == E.INVALID_GROUP_ID
    assert fired(join(gc, session=1000)).error == E.INVALID_SESSION_TIMEOUT
    assert fired(join(gc, session=3_600_000)).error == E.INVALID_SESSION_TIMEOUT
    assert fired(join(gc, protocols=[])).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert fired(join(gc, protocol_type="")).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert fired(join(gc, "nobody-1")).error == E.UNKNOWN_MEMBER_ID
    assert gc.list_groups() == []  # refused joins leave nothing behind
    stable_single(gc)
    other = fired(join(gc, protocol_type="connect", v4=False))
    assert other.error == E.INCONSISTENT_GROUP_PROTOCOL
    sticky = fired(join(gc, protocols=[("sticky", b"")], v4=False))
    assert sticky.error == E.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_is_the_common_one_with_most_votes(gc: GroupCoordinator) -> None:
    a_protocols = [("roundrobin", b"a"), ("range", b"a"), ("x", b"")]
    a = fired(join(gc, v4=False, protocols=a_protocols))
    assert a.protocol_name == "roundrobin"  # alone, its first choice
    jb = join(gc, v4=False, client_id="b", protocols=[("range", b"b"), ("roundrobin", b"b")])
    jc = join(gc, v4=False, client_id="c", protocols=[("range", b"c"), ("roundrobin", b"c")])
    a2 = fired(join(gc, a.member_id, protocols=a_protocols))
    assert [a2.protocol_name, fired(jb).protocol_name, fired(jc).protocol_name] == ["range"] * 3
    assert a2.leader_id == a.member_id
    assert [m.metadata for m in a2.members] == [b"a", b"b", b"c"]  # the chosen protocol's


def test_protocol_vote_tie_goes_to_the_leaders_preference(gc: GroupCoordinator) -> None:
    a = fired(join(gc, v4=False, protocols=[("roundrobin", b""), ("range", b"")]))
    jb = join(gc, v4=False, protocols=[("range", b""), ("roundrobin", b"")])
    assert fired(join(gc, a.member_id, protocols=[("roundrobin", b""), ("range", b"")]))
    assert fired(jb).protocol_name == "roundrobin"


def test_pending_member_id_expires_after_the_session_timeout(
    gc: GroupCoordinator, clock: task.Clock
) -> None:
    first = fired(join(gc))
    assert first.error == E.MEMBER_ID_REQUIRED
    assert [g for g, _, _ in gc.list_groups()] == [G]
    clock.advance(SESSION / 1000)
    assert gc.list_groups() == []
    assert fired(join(gc, first.member_id)).error == E.UNKNOWN_MEMBER_ID


def test_group_max_size(clock: task.Clock) -> None:
    gc = GroupCoordinator(clock, None, max_group_size=1)
    stable_single(gc)
    assert fired(join(gc)).error == E.GROUP_MAX_SIZE_REACHED


# -- rebalancing ---------------------------------------------------------------------------


def test_two_members_rebalance_and_assignments_are_relayed(gc: GroupCoordinator) -> None:
    a, b = stable_pair(gc)
    assert a.generation_id == b.generation_id == 2
    assert a.leader_id == b.leader_id == a.member_id
    assert {m.member_id for m in a.members} == {a.member_id, b.member_id}
    assert b.members == ()
    assert state(gc) == "Stable"
    assert gc.heartbeat(G, 2, a.member_id) == gc.heartbeat(G, 2, b.member_id) == E.NONE
    desc = gc.describe(G)
    assert {m.member_id: m.assignment for m in desc.members} == {
        a.member_id: b"A",
        b.member_id: b"B",
    }


def test_follower_sync_waits_for_leader_and_late_sync_gets_stored_assignment(
    gc: GroupCoordinator,
) -> None:
    _a, b = stable_pair(gc)
    # In Stable a repeated SyncGroup answers at once with the stored assignment.
    assert fired(gc.sync(G, 2, b.member_id)).assignment == b"B"


def test_heartbeat_during_rebalance_and_completing_rebalance(gc: GroupCoordinator) -> None:
    a = stable_single(gc)
    jb = new_member(gc, client_id="b")
    assert state(gc) == "PreparingRebalance"
    assert gc.heartbeat(G, 1, a.member_id) == E.REBALANCE_IN_PROGRESS
    a2 = fired(join(gc, a.member_id))
    fired(jb)
    assert state(gc) == "CompletingRebalance"
    assert gc.heartbeat(G, 2, a2.member_id) == E.NONE
    assert gc.heartbeat(G, 1, a2.member_id) == E.ILLEGAL_GENERATION
    assert gc.heartbeat(G, 2, "ghost") == E.UNKNOWN_MEMBER_ID
    assert gc.heartbeat("other", 2, a2.member_id) == E.UNKNOWN_MEMBER_ID


def test_sync_errors(gc: GroupCoordinator) -> None:
    a = stable_single(gc)
    assert fired(gc.sync(G, 0, a.member_id)).error == E.ILLEGAL_GENERATION
    assert fired(gc.sync(G, 1, "ghost")).error == E.UNKNOWN_MEMBER_ID
    assert fired(gc.sync("other", 1, a.member_id)).error == E.UNKNOWN_MEMBER_ID
    new_member(gc, client_id="b")
    assert fired(gc.sync(G, 1, a.member_id)).error == E.REBALANCE_IN_PROGRESS


def test_waiting_follower_hears_of_a_new_rebalance(gc: GroupCoordinator) -> None:
    a = stable_single(gc)
    jb = new_member(gc, client_id="b")
    fired(join(gc, a.member_id))
    b = fired(jb)
    waiting = gc.sync(G, b.generation_id, b.member_id)
    assert pending(waiting)
    new_member(gc, client_id="c")  # a third member arrives before the leader synced
    assert fired(waiting).error == E.REBALANCE_IN_PROGRESS
    assert state(gc) == "PreparingRebalance"


def test_single_consumer_rejoining_as_leader_starts_a_new_generation(
    gc: GroupCoordinator,
) -> None:
    # kafka-python's first generation has an empty assignment; it rejoins at once.
    a = stable_single(gc, assignment=b"")
    again = fired(join(gc, a.member_id))
    assert again.generation_id == 2 and again.members


def test_follower_rejoin_with_same_metadata_keeps_the_generation(gc: GroupCoordinator) -> None:
    _a, b = stable_pair(gc)
    again = fired(join(gc, b.member_id))
    assert again.error == E.NONE and again.generation_id == 2 and again.members == ()
    assert state(gc) == "Stable"
    changed = join(gc, b.member_id, protocols=[("range", b"new topics")])
    assert pending(changed) and state(gc) == "PreparingRebalance"


def test_superseded_join_request_is_answered(gc: GroupCoordinator) -> None:
    a, b = stable_pair(gc)
    first = join(gc, b.member_id, protocols=[("range", b"v2")])
    second = join(gc, b.member_id, protocols=[("range", b"v2")])
    assert fired(first).error == E.REBALANCE_IN_PROGRESS
    fired(join(gc, a.member_id))
    assert fired(second).generation_id == 3


def test_initial_rebalance_delay_collects_members(clock: task.Clock) -> None:
    gc = GroupCoordinator(clock, None, initial_rebalance_delay_ms=3000)
    ja = new_member(gc)
    clock.advance(2)
    jb = new_member(gc, client_id="b")
    clock.advance(1)  # first delay over, but a member arrived: wait once more
    assert pending(ja) and pending(jb)
    clock.advance(3)
    a, b = fired(ja), fired(jb)
    assert a.generation_id == b.generation_id == 1
    assert len(a.members) == 2


# -- timeouts ------------------------------------------------------------------------------


def test_session_timeout_expels_a_member_and_the_survivor_rebalances(
    gc: GroupCoordinator, clock: task.Clock
) -> None:
    a, b = stable_pair(gc)
    for _ in range(3):
        clock.advance(SESSION / 1000 / 2)
        assert gc.heartbeat(G, 2, a.member_id) in (E.NONE, E.REBALANCE_IN_PROGRESS)
    assert state(gc) == "PreparingRebalance"
    assert gc.heartbeat(G, 2, b.member_id) == E.UNKNOWN_MEMBER_ID
    assert gc.heartbeat(G, 2, a.member_id) == E.REBALANCE_IN_PROGRESS
    a3 = fired(join(gc, a.member_id))
    assert a3.generation_id == 3 and [m.member_id for m in a3.members] == [a.member_id]


def test_session_timer_is_reset_by_heartbeats_and_commits(
    gc: GroupCoordinator, clock: task.Clock
) -> None:
    a = stable_single(gc)
    clock.advance(9)
    assert gc.heartbeat(G, 1, a.member_id) == E.NONE
    clock.advance(9)
    assert gc.check_commit(G, 1, a.member_id) is None
    clock.advance(9)
    assert state(gc) == "Stable"
    clock.advance(1)
    assert state(gc) == "Empty"
    assert gc.describe(G).generation_id == 2


def test_rebalance_timeout_drops_a_member_that_does_not_rejoin(
    gc: GroupCoordinator, clock: task.Clock
) -> None:
    a, b = stable_pair(gc)
    jc = new_member(gc, client_id="c")
    ja = join(gc, a.member_id)
    for _ in range(REBALANCE // 5000 - 1):
        clock.advance(5)
        # b stays alive through heartbeats but ignores the request to rejoin.
        assert gc.heartbeat(G, 2, b.member_id) == E.REBALANCE_IN_PROGRESS
        assert pending(ja) and pending(jc)
    clock.advance(5)
    a3, c3 = fired(ja), fired(jc)
    assert a3.generation_id == c3.generation_id == 3
    assert {m.member_id for m in a3.members} == {a.member_id, c3.member_id}
    assert gc.heartbeat(G, 3, b.member_id) == E.UNKNOWN_MEMBER_ID


def test_member_parked_in_join_is_not_expired_by_its_session(
    gc: GroupCoordinator, clock: task.Clock
) -> None:
    a, b = stable_pair(gc)
    jb = join(gc, b.member_id, protocols=[("range", b"changed")])
    for _ in range(5):  # b waits in JoinGroup past its session; a heartbeats, never rejoins
        clock.advance(5)
        assert gc.heartbeat(G, 2, a.member_id) == E.REBALANCE_IN_PROGRESS
        assert pending(jb)
    clock.advance(5)
    b3 = fired(jb)
    assert b3.error == E.NONE and b3.generation_id == 3
    assert b3.leader_id == b.member_id  # a was dropped, b was elected leader
    assert [m.member_id for m in b3.members] == [b.member_id]


def test_member_that_never_syncs_is_removed(gc: GroupCoordinator, clock: task.Clock) -> None:
    a = stable_single(gc)
    jb = new_member(gc, client_id="b")
    fired(join(gc, a.member_id))
    b = fired(jb)
    fired(gc.sync(G, 2, a.member_id, assignments={a.member_id: b"A", b.member_id: b"B"}))
    assert state(gc) == "Stable"
    for _ in range(REBALANCE // 5000):
        clock.advance(5)
        gc.heartbeat(G, 2, a.member_id)
    assert state(gc) == "PreparingRebalance"
    assert gc.heartbeat(G, 2, b.member_id) == E.UNKNOWN_MEMBER_ID
    assert gc.heartbeat(G, 2, a.member_id) == E.REBALANCE_IN_PROGRESS


def test_nobody_rejoining_waits_for_sessions_then_empties(
    gc: GroupCoordinator, clock: task.Clock
) -> None:
    _a, b = stable_pair(gc)
    assert gc.leave(G, [(b.member_id, None)]).members[0].error == E.NONE
    assert state(gc) == "PreparingRebalance"
    clock.advance(SESSION / 1000)  # a never rejoins nor heartbeats
    assert state(gc) == "Empty"
    assert gc.describe(G).generation_id == 3


# -- static membership -------------------------------------------------------------------


def test_static_member_restart_replaces_old_id_without_rebalance(gc: GroupCoordinator) -> None:
    r = fired(join(gc, instance_id="i1", client_id="app"))
    assert r.error == E.NONE and r.member_id.startswith("i1-")  # no MEMBER_ID_REQUIRED
    fired(gc.sync(G, 1, r.member_id, instance_id="i1", assignments={r.member_id: b"P"}))
    again = fired(join(gc, instance_id="i1", client_id="app"))
    assert again.error == E.NONE and again.member_id != r.member_id
    assert again.generation_id == 1 and state(gc) == "Stable"
    assert again.leader_id == r.member_id  # not itself: it must not reassign
    s = fired(gc.sync(G, 1, again.member_id, instance_id="i1"))
    assert s.assignment == b"P"
    assert gc.heartbeat(G, 1, r.member_id, "i1") == E.FENCED_INSTANCE_ID
    assert gc.heartbeat(G, 1, again.member_id, "i1") == E.NONE
    assert gc.check_commit(G, 1, r.member_id, "i1") == E.FENCED_INSTANCE_ID
    assert fired(join(gc, r.member_id, instance_id="i1")).error == E.FENCED_INSTANCE_ID
    assert gc.heartbeat(G, 1, again.member_id, "i2") == E.UNKNOWN_MEMBER_ID
    desc = gc.describe(G)
    assert [(m.member_id, m.instance_id) for m in desc.members] == [(again.member_id, "i1")]


def test_static_member_replaced_while_waiting_is_fenced(gc: GroupCoordinator) -> None:
    a = fired(join(gc, instance_id="i1"))
    fired(gc.sync(G, 1, a.member_id, instance_id="i1", assignments={}))
    jb = new_member(gc, client_id="b")
    b = fired(join(gc, a.member_id, instance_id="i1")) and fired(jb)
    jc = new_member(gc, client_id="c")  # generation 3 starts; b has not rejoined yet
    old = join(gc, a.member_id, instance_id="i1")
    assert pending(old)
    new = join(gc, instance_id="i1")
    assert fired(old).error == E.FENCED_INSTANCE_ID
    assert pending(new) and pending(jc)
    fired(join(gc, b.member_id))
    n = fired(new)
    assert n.generation_id == fired(jc).generation_id == 3
    assert n.leader_id == n.member_id  # the new incarnation inherits leadership
    assert len(n.members) == 3


def test_static_member_survives_rebalance_timeout_but_not_its_session(
    gc: GroupCoordinator, clock: task.Clock
) -> None:
    a = fired(join(gc, instance_id="i1", session=60_000, rebalance=5000))
    fired(gc.sync(G, 1, a.member_id, instance_id="i1", assignments={}))
    jb = new_member(gc, client_id="b", rebalance=5000)
    clock.advance(5)
    b = fired(jb)
    assert {m.member_id for m in b.members} == {a.member_id, b.member_id}  # still listed
    assert b.leader_id == b.member_id  # a did not rejoin, b leads
    fired(gc.sync(G, 2, b.member_id, assignments={}))
    clock.advance(5)  # a never synced generation 2: removed with the sync timeout
    assert gc.heartbeat(G, 2, a.member_id, "i1") == E.UNKNOWN_MEMBER_ID


# -- leaving -------------------------------------------------------------------------------


def test_single_leave_triggers_rebalance(gc: GroupCoordinator) -> None:
    a, b = stable_pair(gc)
    res = gc.leave(G, [(b.member_id, None)])
    assert res.error == E.NONE and [m.error for m in res.members] == [E.NONE]
    assert state(gc) == "PreparingRebalance"
    a3 = fired(join(gc, a.member_id))
    assert a3.generation_id == 3 and len(a3.members) == 1
    again = gc.leave(G, [(b.member_id, None)])
    assert [m.error for m in again.members] == [E.UNKNOWN_MEMBER_ID]
    unknown = gc.leave("nope", [("x", None)])
    assert unknown.error == E.NONE and unknown.members[0].error == E.UNKNOWN_MEMBER_ID


def test_batch_leave_by_member_and_instance_id(gc: GroupCoordinator) -> None:
    s = fired(join(gc, instance_id="i1", v4=False))
    jd = join(gc, v4=False, client_id="d")
    js = join(gc, s.member_id, instance_id="i1")
    d, s2 = fired(jd), fired(js)
    pend = fired(join(gc, client_id="p")).member_id  # only holds a MEMBER_ID_REQUIRED id
    res = gc.leave(
        G,
        [("", "i1"), (d.member_id, None), ("ghost", None), ("", "i9"), (pend, None)],
    )
    assert [(m.member_id, m.instance_id, m.error) for m in res.members] == [
        ("", "i1", E.NONE),
        (d.member_id, None, E.NONE),
        ("ghost", None, E.UNKNOWN_MEMBER_ID),
        ("", "i9", E.UNKNOWN_MEMBER_ID),
        (pend, None, E.NONE),
    ]
    assert state(gc) == "Empty"
    assert gc.describe(G).generation_id == 3
    assert s2.generation_id == 2


def test_leave_with_fenced_instance_id(gc: GroupCoordinator) -> None:
    a = fired(join(gc, instance_id="i1"))
    res = gc.leave(G, [("someone-else", "i1")])
    assert res.members[0].error == E.FENCED_INSTANCE_ID
    assert gc.has_active_members(G)
    assert gc.leave(G, [(a.member_id, "i1")]).members[0].error == E.NONE
    assert not gc.has_active_members(G)


def test_leaving_member_parked_in_join_is_answered(gc: GroupCoordinator) -> None:
    _a, b = stable_pair(gc)
    jb = join(gc, b.member_id, protocols=[("range", b"x")])
    gc.leave(G, [(b.member_id, None)])
    assert fired(jb).error == E.UNKNOWN_MEMBER_ID


# -- commit fencing ------------------------------------------------------------------------


def test_commit_fencing(gc: GroupCoordinator) -> None:
    assert gc.check_commit(G, -1, "") is None  # no group: a standalone consumer
    assert gc.check_commit(G, 3, "m") == E.ILLEGAL_GENERATION
    a = stable_single(gc)
    assert gc.check_commit(G, 1, a.member_id) is None
    assert gc.check_commit(G, 0, a.member_id) == E.ILLEGAL_GENERATION
    assert gc.check_commit(G, 1, "ghost") == E.UNKNOWN_MEMBER_ID
    assert gc.check_commit(G, -1, "") == E.UNKNOWN_MEMBER_ID  # active members: -1 refused
    jb = new_member(gc, client_id="b")
    # PreparingRebalance: the current generation may still commit before rejoining.
    assert gc.check_commit(G, 1, a.member_id) is None
    fired(join(gc, a.member_id))
    fired(jb)
    assert gc.check_commit(G, 2, a.member_id) == E.REBALANCE_IN_PROGRESS
    assert gc.has_active_members(G) is True
    with pytest.raises(GroupHasActiveMembers) as info:
        gc.require_no_active_members(G)
    assert isinstance(info.value, RustkaError) and "2 active" in str(info.value)
    b = fired(jb)
    gc.leave(G, [(a.member_id, None), (b.member_id, None)])
    assert state(gc) == "Empty"
    assert gc.check_commit(G, -1, "") is None
    assert gc.check_commit(G, 2, a.member_id) == E.UNKNOWN_MEMBER_ID
    assert gc.has_active_members(G) is False
    gc.require_no_active_members(G)
    assert gc.has_active_members("never-seen") is False


# -- states, views, shutdown ---------------------------------------------------------------


def test_state_transitions_through_a_lifecycle(gc: GroupCoordinator) -> None:
    seen = [state(gc)]
    first = fired(join(gc))
    seen.append(state(gc))  # pending only: still Empty (generation 0)
    r = fired(join(gc, first.member_id))
    seen.append(state(gc))
    fired(gc.sync(G, 1, r.member_id, assignments={}))
    seen.append(state(gc))
    jb = new_member(gc, client_id="b")
    seen.append(state(gc))
    fired(join(gc, r.member_id))
    seen.append(state(gc))
    gc.leave(G, [(r.member_id, None), (fired(jb).member_id, None)])
    seen.append(state(gc))
    assert seen == [
        "Dead",
        "Empty",
        "CompletingRebalance",
        "Stable",
        "PreparingRebalance",
        "CompletingRebalance",
        "Empty",
    ]


def test_list_and_describe_show_kafka_and_native_groups(clock: task.Clock) -> None:
    gc = GroupCoordinator(clock, committed("native", G))
    assert gc.list_groups() == [(G, "consumer", "Empty"), ("native", "consumer", "Empty")]
    a, b = stable_pair(gc)
    assert gc.list_groups() == [(G, "consumer", "Stable"), ("native", "consumer", "Empty")]
    desc = gc.describe(G)
    assert (desc.state, desc.protocol_type, desc.protocol, desc.generation_id) == (
        "Stable",
        "consumer",
        "range",
        2,
    )
    m = {x.member_id: x for x in desc.members}
    assert m[b.member_id].client_id == "b" and m[b.member_id].client_host == "/127.0.0.1"
    assert m[a.member_id].metadata == b"range-meta" and m[a.member_id].assignment == b"A"
    new_member(gc, client_id="c")
    during = gc.describe(G)
    assert during.state == "PreparingRebalance" and during.protocol == ""
    assert {x.metadata for x in during.members} == {b""}
    native = gc.describe("native")
    assert (native.state, native.protocol_type, native.members) == ("Empty", "consumer", ())
    assert gc.describe("unknown").state == "Dead"


def test_close_answers_parked_requests_and_kills_groups(
    gc: GroupCoordinator, clock: task.Clock
) -> None:
    a, b = stable_pair(gc)
    ja = join(gc, a.member_id, protocols=[("range", b"x")])
    gc.close()
    assert fired(ja).error == E.NOT_COORDINATOR
    assert gc.list_groups() == [] and state(gc) == "Dead"
    assert clock.getDelayedCalls() == []
    assert fired(join(gc)).error == E.NOT_COORDINATOR
    assert gc.heartbeat(G, 2, b.member_id) == E.NOT_COORDINATOR
    assert gc.check_commit(G, 2, b.member_id) == E.NOT_COORDINATOR


def test_group_has_active_members_is_a_stable_wire_error(gc: GroupCoordinator) -> None:
    """Code 17 in docs/protocol.md; a client rebuilds it from the message alone."""
    assert ERRORS_BY_CODE[17] is GroupHasActiveMembers
    rebuilt = ERRORS_BY_CODE[17]("group 'app' has 1 active Kafka consumer(s)")
    assert isinstance(rebuilt, GroupHasActiveMembers) and rebuilt.code == 17
    gc.require_no_active_members("nobody")


def test_session_timeout_bounds_are_the_coordinators_own(clock: task.Clock) -> None:
    gc = GroupCoordinator(clock, None, min_session_timeout_ms=2000, max_session_timeout_ms=5000)
    assert fired(join(gc, session=1999, v4=False)).error == E.INVALID_SESSION_TIMEOUT
    assert fired(join(gc, session=5001, v4=False)).error == E.INVALID_SESSION_TIMEOUT
    assert fired(join(gc, session=2000, v4=False)).error == E.NONE
    assert fired(join(gc, session=5000, v4=False, group="other")).error == E.NONE
    with pytest.raises(ValueError, match="min_session_timeout_ms"):
        GroupCoordinator(clock, None, min_session_timeout_ms=10, max_session_timeout_ms=9)


def test_a_join_without_a_rebalance_timeout_uses_the_session_timeout(
    gc: GroupCoordinator, clock: task.Clock
) -> None:
    """JoinGroup v0 has none; the session timeout then bounds the join phase."""
    a = fired(join(gc, v4=False, rebalance=-1))
    fired(gc.sync(G, 1, a.member_id, assignments={}))
    jb = join(gc, v4=False, client_id="b", rebalance=-1)
    clock.advance(SESSION / 1000 - 1)
    assert gc.heartbeat(G, 1, a.member_id) == E.REBALANCE_IN_PROGRESS
    assert pending(jb)
    clock.advance(1)  # a never rejoined: the join phase ends without it
    b = fired(jb)
    assert b.generation_id == 2 and [m.member_id for m in b.members] == [b.member_id]
