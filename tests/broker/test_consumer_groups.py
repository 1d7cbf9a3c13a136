"""The pure consumer group model (KIP-848): epochs, revoke-before-assign, fencing,
static membership, regex subscriptions and timeouts, with time passed by hand."""

from __future__ import annotations

from typing import Any

from rustka.broker.assignors import range_assignor, uniform
from rustka.broker.consumer_groups import (
    ConsumerGroups,
    ConsumerGroupState,
    HeartbeatRequest,
    MemberState,
)
from rustka.broker.consumer_groups import E as Err

TOPICS = {"t": 6}


def join(groups: ConsumerGroups, now: int = 0, **kw: object) -> object:
    request = HeartbeatRequest(
        "g",
        "",
        0,
        rebalance_timeout_ms=kw.pop("rebalance_timeout_ms", 10_000),  # type: ignore[arg-type]
        subscribed_names=kw.pop("names", ("t",)),  # type: ignore[arg-type]
        owned={},
        **kw,  # type: ignore[arg-type]
    )
    return groups.heartbeat(request, TOPICS, now)


def beat(groups, member_id, epoch, owned=None, now=0, topics=TOPICS, **kw):  # type: ignore[no-untyped-def]
    return groups.heartbeat(HeartbeatRequest("g", member_id, epoch, owned=owned, **kw), topics, now)


def owned_by(groups: ConsumerGroups, member_id: str) -> dict[str, frozenset[int]]:
    return groups.groups["g"].members[member_id].assigned


def test_first_member_gets_everything_at_epoch_one() -> None:
    groups = ConsumerGroups()
    r = join(groups)
    assert r.error == 0 and r.member_epoch == 1
    assert r.assignment == {"t": frozenset(range(6))}
    assert groups.groups["g"].state is ConsumerGroupState.STABLE


def test_a_partition_is_revoked_before_it_is_given_to_another_member() -> None:
    groups = ConsumerGroups()
    a = join(groups)
    b = join(groups)
    # b's target is half the partitions, but a still owns them: b gets none yet.
    assert b.member_epoch == 2 and b.assignment == {}
    assert groups.groups["g"].members[b.member_id].state is MemberState.UNRELEASED_PARTITIONS
    # a is told to keep only its half; its epoch stays until it acknowledges.
    r = beat(groups, a.member_id, 1, owned=a.assignment)
    assert r.member_epoch == 1 and len(r.assignment["t"]) == 3
    assert groups.groups["g"].members[a.member_id].state is MemberState.UNREVOKED_PARTITIONS
    # b still waits while a owns them (no assignment in the answer: unchanged).
    assert beat(groups, b.member_id, 2, owned={}).assignment is None
    assert groups.groups["g"].members[b.member_id].assigned == {}
    kept = r.assignment
    r = beat(groups, a.member_id, 1, owned=kept)
    assert r.member_epoch == 2 and r.assignment is None  # same partitions, new epoch
    rb = beat(groups, b.member_id, 2, owned={})
    assert len(rb.assignment["t"]) == 3
    assert rb.assignment["t"].isdisjoint(kept["t"])
    assert groups.groups["g"].state is ConsumerGroupState.STABLE


def test_epochs_fence_zombies_and_unknown_members() -> None:
    groups = ConsumerGroups()
    a = join(groups)
    assert beat(groups, a.member_id, 5).error == Err.FENCED_MEMBER_EPOCH
    assert beat(groups, "nobody", 1).error == Err.UNKNOWN_MEMBER_ID
    # A group this coordinator does not know (a restart): rejoin, not a fatal error.
    assert ConsumerGroups().heartbeat(HeartbeatRequest("g", "m", 3), TOPICS, 0).error == (
        Err.UNKNOWN_MEMBER_ID
    )


def test_session_timeout_removes_a_member_and_its_partitions_move() -> None:
    groups = ConsumerGroups(session_timeout_ms=1000)
    a = join(groups)
    b = join(groups)
    beat(groups, a.member_id, 1, owned=a.assignment, now=500)
    assert groups.expire(1200) == [("g", b.member_id)]
    r = beat(groups, a.member_id, 1, owned={"t": frozenset(range(3))}, now=1300)
    assert r.assignment == {"t": frozenset(range(6))}


def test_rebalance_timeout_removes_a_member_that_does_not_revoke() -> None:
    groups = ConsumerGroups(session_timeout_ms=100_000)
    a = join(groups, rebalance_timeout_ms=500)
    join(groups)
    beat(groups, a.member_id, 1, owned=a.assignment, now=10)
    assert groups.expire(600) == [("g", a.member_id)]


def test_static_member_rejoining_keeps_its_partitions() -> None:
    groups = ConsumerGroups(session_timeout_ms=1000)
    a = join(groups, instance_id="i1")
    b = join(groups, instance_id="i2")
    beat(groups, a.member_id, 1, owned=a.assignment)
    beat(groups, a.member_id, 1, owned=owned_by(groups, a.member_id))
    beat(groups, b.member_id, 2, owned={})
    mine_a, mine_b = owned_by(groups, a.member_id), owned_by(groups, b.member_id)
    assert len(mine_a["t"]) == len(mine_b["t"]) == 3
    epoch = groups.groups["g"].group_epoch
    left = beat(groups, b.member_id, -2, instance_id="i2", now=100)
    assert left.member_epoch == -2
    # Another instance with the same id while the old one is active is refused...
    assert join(groups, instance_id="i1").error == Err.UNRELEASED_INSTANCE_ID
    # ...but i2 comes back to its own partitions without a rebalance.
    back = join(groups, instance_id="i2", now=200)
    assert back.assignment == mine_b and groups.groups["g"].group_epoch == epoch
    assert back.member_epoch == epoch


def test_regex_subscription_picks_up_a_topic_created_later() -> None:
    groups = ConsumerGroups()
    a = groups.heartbeat(
        HeartbeatRequest("g", "", 0, rebalance_timeout_ms=1000, subscribed_regex="^p.*", owned={}),
        {"p1": 2, "q": 2},
        0,
    )
    assert a.assignment == {"p1": frozenset({0, 1})}
    r = beat(groups, a.member_id, 1, owned=a.assignment, topics={"p1": 2, "p2": 1, "q": 2})
    assert r.member_epoch == 2 and r.assignment == {"p1": frozenset({0, 1}), "p2": frozenset({0})}


def test_leaving_frees_the_partitions_and_unknown_assignor_is_refused() -> None:
    groups = ConsumerGroups(assignors=("uniform",))
    assert join(groups, server_assignor="range").error == Err.UNSUPPORTED_ASSIGNOR
    a = join(groups)
    assert beat(groups, a.member_id, -1).member_epoch == -1
    assert groups.groups["g"].state is ConsumerGroupState.EMPTY


def test_commit_checks_follow_kafka() -> None:
    groups = ConsumerGroups()
    a = join(groups)
    assert groups.check_commit("g", a.member_id, 1, 9) == 0
    assert groups.check_commit("g", a.member_id, 0, 9) == Err.STALE_MEMBER_EPOCH
    assert groups.check_commit("g", a.member_id, 1, 8) == Err.UNSUPPORTED_VERSION
    assert groups.check_commit("g", "x", 1, 9) == Err.UNKNOWN_MEMBER_ID


def test_assignors_balance_and_range_is_per_topic() -> None:
    subs = {"a": {"t"}, "b": {"t"}, "c": {"t"}}
    got = uniform(subs, {"t": 7}, {})
    sizes = sorted(len(x["t"]) for x in got.values())
    assert sizes == [2, 2, 3]
    assert set().union(*(x["t"] for x in got.values())) == set(range(7))
    # Sticky: a member that keeps its share keeps its partitions.
    again = uniform({"a": {"t"}, "b": {"t"}}, {"t": 4}, {"a": {"t": frozenset({0, 1})}})
    assert again["a"]["t"] == frozenset({0, 1})
    ranged = range_assignor({"a": {"t", "u"}, "b": {"t", "u"}}, {"t": 3, "u": 3}, {})
    assert ranged["a"] == {"t": frozenset({0, 1}), "u": frozenset({0, 1})}
    assert ranged["b"] == {"t": frozenset({2}), "u": frozenset({2})}


# -- in the coordinator: one group id, one type; reactor timers -----------------------


def _coordinator() -> tuple[Any, Any]:
    from twisted.internet import task

    from rustka.broker.coordinator import GroupCoordinator

    clock = task.Clock()
    return clock, GroupCoordinator(clock, consumer_session_timeout_ms=3000)


def _classic_join(gc: Any, member_id: str = "") -> Any:
    from rustka.broker.coordinator import JoinRequest

    results: list[Any] = []
    gc.join(
        JoinRequest(
            "g",
            member_id,
            protocol_type="consumer",
            protocols=[("range", b"")],
            session_timeout_ms=10_000,
        )
    ).addCallback(results.append)
    return results[0] if results else None


def _cjoin(gc: Any, **kw: Any) -> Any:
    request = HeartbeatRequest(
        "g", "", 0, rebalance_timeout_ms=10_000, subscribed_names=("t",), owned={}, **kw
    )
    return gc.consumer_heartbeat(request, TOPICS)


def test_a_non_empty_group_of_one_type_refuses_the_other() -> None:
    from rustka.broker.groups import GroupErrorCode

    _, gc = _coordinator()
    member = _cjoin(gc)
    assert member.error == 0
    assert _classic_join(gc).error == GroupErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert gc.list_typed_groups() == [("g", "consumer", "Stable", "consumer")]
    assert gc.describe("g").state == "Dead"  # DescribeGroups knows classic groups only
    assert gc.has_active_members("g") and gc.deletion_refused("g") == 68
    assert gc.empty_since("g", 0) is None  # offsets do not expire under members
    gc.consumer_heartbeat(HeartbeatRequest("g", member.member_id, -1), TOPICS)
    # Empty now: a classic member may take the id, and then the consumer protocol may not.
    classic = _classic_join(gc)
    assert classic.error == 0 and gc.consumer_group("g") is None
    assert _cjoin(gc).error == Err.GROUP_ID_NOT_FOUND
    assert gc.list_typed_groups()[0][3] == "classic"


def test_the_coordinator_s_timer_removes_a_silent_member() -> None:
    clock, gc = _coordinator()
    a = _cjoin(gc)
    b = _cjoin(gc)
    clock.advance(2.0)
    gc.consumer_heartbeat(HeartbeatRequest("g", a.member_id, 1, owned=a.assignment), TOPICS)
    clock.advance(1.5)  # b silent for 3.5 s > 3 s; a heartbeat 1.5 s ago
    group = gc.consumer_group("g")
    assert list(group.members) == [a.member_id] and b.member_id not in group.members
    clock.advance(3.1)
    assert not group.members and group.state is ConsumerGroupState.EMPTY


def test_commits_are_fenced_by_member_epoch_in_the_coordinator() -> None:
    _, gc = _coordinator()
    a = _cjoin(gc)
    assert gc.check_commit("g", 1, a.member_id, api_version=9) is None
    assert gc.check_commit("g", 7, a.member_id, api_version=9) == Err.STALE_MEMBER_EPOCH
    assert gc.check_commit("g", 1, a.member_id, api_version=8) == Err.UNSUPPORTED_VERSION
    assert gc.check_commit("g", -1, "", api_version=9) == Err.UNKNOWN_MEMBER_ID
    assert gc.check_txn_commit("g", 1, a.member_id) is None
    assert gc.check_txn_commit("g", 2, a.member_id) == Err.STALE_MEMBER_EPOCH


def test_restart_forgets_members_and_they_rejoin() -> None:
    _, gc = _coordinator()
    a = _cjoin(gc)
    gc.resign()  # what a restart or a moved coordinator role leaves
    gone = gc.consumer_heartbeat(HeartbeatRequest("g", a.member_id, 1), TOPICS)
    assert gone.error == Err.UNKNOWN_MEMBER_ID
    assert _cjoin(gc).member_epoch == 1


def test_new_partitions_bump_the_group_epoch_at_the_next_heartbeat() -> None:
    groups = ConsumerGroups()
    a = join(groups)
    r = beat(groups, a.member_id, 1, owned=a.assignment, topics={"t": 8})
    assert r.member_epoch == 2 and r.assignment == {"t": frozenset(range(8))}


def test_a_member_acknowledging_late_with_the_previous_epoch_is_accepted() -> None:
    groups = ConsumerGroups()
    a = join(groups)
    beat(groups, a.member_id, 1, owned=a.assignment, topics={"t": 8})  # epoch 2, answer lost
    again = beat(groups, a.member_id, 1, owned=a.assignment, topics={"t": 8})
    assert again.error == 0 and again.member_epoch == 2
    # ...but not when it claims partitions it does not own.
    stray = beat(groups, a.member_id, 1, owned={"t": frozenset({9})}, topics={"t": 8})
    assert stray.error == Err.FENCED_MEMBER_EPOCH


def test_a_replaced_static_member_is_fenced_by_its_instance_id() -> None:
    groups = ConsumerGroups()
    old = join(groups, instance_id="i")
    beat(groups, old.member_id, -2, instance_id="i")
    new = join(groups, instance_id="i")
    assert new.error == 0 and new.member_id != old.member_id
    zombie = beat(groups, old.member_id, 1, instance_id="i")
    assert zombie.error == Err.FENCED_INSTANCE_ID
    assert beat(groups, new.member_id, new.member_epoch, instance_id="i").error == 0


def test_off_the_coordinator_broker_heartbeats_are_not_coordinator() -> None:
    _, gc = _coordinator()
    a = _cjoin(gc)
    gc.coordinating = lambda: False  # another broker of the cluster holds the role
    assert _cjoin(gc).error == Err.NOT_COORDINATOR
    beat_elsewhere = gc.consumer_heartbeat(HeartbeatRequest("g", a.member_id, 1), TOPICS)
    assert beat_elsewhere.error == Err.NOT_COORDINATOR
    assert gc.check_commit("g", 1, a.member_id, api_version=9) == Err.NOT_COORDINATOR
