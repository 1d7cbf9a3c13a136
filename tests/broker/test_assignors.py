"""The server-side assignors of KIP-848 consumer groups: balance, stickiness, ranges."""

from __future__ import annotations

import itertools

from rustka.broker.assignors import ASSIGNORS, range_assignor, uniform


def _partitions(result: dict[str, dict[str, frozenset[int]]]) -> list[tuple[str, int]]:
    return sorted((t, p) for a in result.values() for t, ps in a.items() for p in ps)


def test_uniform_assigns_every_partition_once_and_evenly() -> None:
    for members, count in itertools.product(range(1, 6), range(0, 13)):
        subs = {f"m{i}": {"t"} for i in range(members)}
        got = uniform(subs, {"t": count}, {})
        assert _partitions(got) == [("t", p) for p in range(count)]
        sizes = [len(a.get("t", ())) for a in got.values()]
        assert max(sizes) - min(sizes) <= 1, (members, count, sizes)


def test_uniform_keeps_partitions_where_they_are_when_a_member_joins() -> None:
    before = uniform({"a": {"t"}, "b": {"t"}}, {"t": 6}, {})
    after = uniform({"a": {"t"}, "b": {"t"}, "c": {"t"}}, {"t": 6}, before)
    for member in ("a", "b"):
        assert after[member]["t"] <= before[member]["t"]  # only given up, none swapped
    assert len(after["c"]["t"]) == 2


def test_uniform_respects_heterogeneous_subscriptions() -> None:
    got = uniform({"a": {"t"}, "b": {"t", "u"}}, {"t": 2, "u": 4}, {})
    assert "u" not in got["a"]
    assert _partitions(got) == [("t", 0), ("t", 1)] + [("u", p) for p in range(4)]
    assert {len(got["a"].get("t", ())), sum(len(x) for x in got["b"].values())} == {2, 4}


def test_range_gives_consecutive_ranges_the_first_members_one_more() -> None:
    got = range_assignor({"b": {"t"}, "a": {"t"}, "c": {"t"}}, {"t": 7}, {})
    assert got["a"]["t"] == frozenset({0, 1, 2})
    assert got["b"]["t"] == frozenset({3, 4})
    assert got["c"]["t"] == frozenset({5, 6})


def test_unsubscribed_topics_and_members_get_nothing() -> None:
    for assign in ASSIGNORS.values():
        got = assign({"a": {"t"}, "b": set()}, {"t": 2, "x": 3}, {})
        assert got["b"] == {} and set(got["a"]) == {"t"}
