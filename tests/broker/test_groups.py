"""A group's state on its own: legal transitions, protocol agreement, member checks and
the answers built from it (the coordinator that drives it: tests/broker/test_coordinator.py)."""

from __future__ import annotations

import pytest

from rustka.broker.groups import (
    Group,
    GroupErrorCode,
    GroupState,
    JoinedMember,
    JoinResult,
    Member,
    SyncResult,
    dedup_protocols,
    valid_group_id,
)

E = GroupErrorCode
S = GroupState


def member(member_id: str, *protocols: str, instance_id: str | None = None) -> Member:
    return Member(
        member_id,
        instance_id,
        f"client-{member_id}",
        "/127.0.0.1",
        10_000,
        30_000,
        "consumer",
        tuple((name, f"{member_id}:{name}".encode()) for name in protocols),
        assignment=f"assigned-{member_id}".encode(),
    )


def group_of(*members: Member, leader: str | None = None) -> Group:
    group = Group("app", protocol_type="consumer")
    for m in members:
        group.members[m.member_id] = m
        if m.instance_id is not None:
            group.static_members[m.instance_id] = m.member_id
    group.leader_id = leader if leader is not None else next(iter(group.members), None)
    return group


def test_the_states_print_as_kafkas_admin_tools_do() -> None:
    assert [s.value for s in GroupState] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]


def test_only_kafkas_transitions_are_legal() -> None:
    group = Group("app")
    assert group.state is S.EMPTY and group.may_prepare_rebalance()
    for step in (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.STABLE):
        group.transition(step)
    assert (group.previous_state, group.state) == (S.COMPLETING_REBALANCE, S.STABLE)
    assert group.may_prepare_rebalance()
    with pytest.raises(AssertionError, match="illegal transition Stable -> Empty"):
        group.transition(S.EMPTY)
    group.transition(S.PREPARING_REBALANCE)
    assert not group.may_prepare_rebalance()  # already preparing
    with pytest.raises(AssertionError):
        group.transition(S.STABLE)
    group.transition(S.DEAD)  # from anywhere
    assert not group.may_prepare_rebalance()


def test_an_empty_group_takes_any_type_with_protocols_then_only_a_common_one() -> None:
    empty = Group("app")
    assert empty.supports("consumer", ["range"])
    assert not empty.supports("", ["range"]) and not empty.supports("consumer", [])
    group = group_of(member("a", "range", "roundrobin"), member("b", "roundrobin", "sticky"))
    assert group.candidates() == {"roundrobin"}
    assert group.supports("consumer", ["sticky", "roundrobin"])
    assert not group.supports("consumer", ["range"])  # b does not support it
    assert not group.supports("connect", ["roundrobin"])


def test_the_protocol_with_most_votes_wins_and_the_leader_breaks_ties() -> None:
    a = member("a", "roundrobin", "range")
    b = member("b", "range", "roundrobin")
    c = member("c", "range", "roundrobin")
    assert group_of(a, b, c).select_protocol() == "range"  # two votes to one
    assert group_of(a, b).select_protocol() == "roundrobin"  # tie: the leader, a, prefers it
    assert group_of(a, b, leader="b").select_protocol() == "range"


def test_a_request_must_name_a_current_member_and_its_own_instance() -> None:
    group = group_of(member("a", "range"), member("s", "range", instance_id="i1"))
    assert group.validate_member("a", None) == E.NONE
    assert group.validate_member("s", "i1") == E.NONE
    assert group.validate_member("ghost", None) == E.UNKNOWN_MEMBER_ID
    assert group.validate_member("a", "i1") == E.FENCED_INSTANCE_ID  # i1 is s's
    assert group.validate_member("s", "i9") == E.UNKNOWN_MEMBER_ID


def test_only_the_leader_gets_the_members_metadata_of_the_chosen_protocol() -> None:
    a, b = member("a", "roundrobin", "range"), member("b", "range", "roundrobin")
    group = group_of(a, b)
    group.generation_id, group.protocol_name = 4, "range"
    assert group.join_answer(a) == JoinResult(
        E.NONE,
        "a",
        4,
        "consumer",
        "range",
        "a",
        (JoinedMember("a", None, b"a:range"), JoinedMember("b", None, b"b:range")),
    )
    assert group.join_answer(b) == JoinResult(E.NONE, "b", 4, "consumer", "range", "a", ())
    assert group.sync_answer(b) == SyncResult(E.NONE, b"assigned-b", "consumer", "range")


def test_describe_shows_metadata_and_assignments_only_while_stable() -> None:
    group = group_of(member("a", "range"))
    group.generation_id, group.protocol_name = 1, "range"
    group.transition(S.PREPARING_REBALANCE)
    group.transition(S.COMPLETING_REBALANCE)
    during = group.describe()
    assert (during.state, during.protocol, during.generation_id) == ("CompletingRebalance", "", 1)
    assert [(m.metadata, m.assignment) for m in during.members] == [(b"", b"")]
    group.transition(S.STABLE)
    stable = group.describe()
    assert (stable.group_id, stable.state, stable.protocol_type, stable.protocol) == (
        "app",
        "Stable",
        "consumer",
        "range",
    )
    (m,) = stable.members
    assert (m.member_id, m.client_id, m.client_host) == ("a", "client-a", "/127.0.0.1")
    assert (m.metadata, m.assignment) == (b"a:range", b"assigned-a")


def test_protocols_keep_each_names_first_entry_and_group_ids_follow_the_offsets_log() -> None:
    assert dedup_protocols([("range", b"1"), ("rr", bytearray(b"2")), ("range", b"3")]) == (
        ("range", b"1"),
        ("rr", b"2"),
    )
    assert valid_group_id("billing")
    assert not valid_group_id("") and not valid_group_id("a\x00b")
