"""Cluster membership and the shared group offsets against a real PostgreSQL: leases,
the coordinator role, local topics' names, and commits a next coordinator reads."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rustka.errors import TopicExists
from rustka.storage.diskless.catalog import Catalog
from rustka.storage.diskless.group_offsets import GroupOffsets
from rustka.storage.diskless.membership import (
    COORDINATOR_ROLE,
    BrokerIdTaken,
    Membership,
    leader_for,
)

LEASE_MS = 1000


@pytest.fixture
def catalog(postgres_dsn: str) -> Iterator[Catalog]:
    c = Catalog(postgres_dsn)
    c.migrate()
    yield c
    c.close()


def member(catalog: Catalog, broker_id: int, port: int, **more: object) -> Membership:
    return Membership(catalog, broker_id, "127.0.0.1", port, lease_ms=LEASE_MS, **more)  # type: ignore[arg-type]


def until(condition: object, timeout_s: float = 20.0) -> None:
    """Poll ``condition`` (a callable) until it is true; the database's clock decides leases."""
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_live_brokers_are_listed_with_their_addresses(catalog: Catalog) -> None:
    one, two = member(catalog, 1, 9001), member(catalog, 2, 9002)
    one.heartbeat()
    view = two.heartbeat()
    assert [(b.broker_id, b.host, b.port) for b in view.brokers] == [
        (1, "127.0.0.1", 9001),
        (2, "127.0.0.1", 9002),
    ]
    two.leave()
    assert one.heartbeat().live_ids == (1,)


def test_a_live_brokers_id_is_refused_until_its_lease_is_over(catalog: Catalog) -> None:
    first = member(catalog, 7, 9001)
    first.heartbeat()
    intruder = member(catalog, 7, 9002)
    with pytest.raises(
        BrokerIdTaken, match=re.escape("broker id 7 is held by a live broker at 127.0.0.1:9001")
    ):
        intruder.heartbeat()

    def taken() -> bool:
        try:
            intruder.heartbeat()
        except BrokerIdTaken:
            return False
        return True

    until(taken)
    assert [(b.broker_id, b.port) for b in intruder.heartbeat().brokers] == [(7, 9002)]
    # The first incarnation is fenced now: it cannot renew a lease it lost.
    with pytest.raises(BrokerIdTaken):
        first.heartbeat()


def test_a_restart_on_the_same_data_dir_takes_its_id_back_at_once(
    catalog: Catalog, tmp_path: Path
) -> None:
    state = tmp_path / "cluster.incarnation"
    crashed = member(catalog, 3, 9001, state_file=state)
    crashed.heartbeat()
    assert state.read_text().strip() == str(crashed.incarnation)
    restarted = member(catalog, 3, 9001, state_file=state)
    assert restarted.heartbeat().live_ids == (3,)
    # Another data dir (no state file) is still a different broker.
    with pytest.raises(BrokerIdTaken):
        member(catalog, 3, 9009, state_file=tmp_path / "other").heartbeat()


def test_the_coordinator_role_has_one_holder_and_passes_when_it_leaves(catalog: Catalog) -> None:
    one, two = member(catalog, 1, 9001), member(catalog, 2, 9002)
    assert one.heartbeat([COORDINATOR_ROLE]).holder(COORDINATOR_ROLE) == (1, 1)
    assert two.heartbeat([COORDINATOR_ROLE]).holder(COORDINATOR_ROLE) == (1, 1)
    assert one.heartbeat([COORDINATOR_ROLE]).holder(COORDINATOR_ROLE) == (1, 1)
    one.leave()
    assert two.heartbeat([COORDINATOR_ROLE]).holder(COORDINATOR_ROLE) == (2, 2)


def test_the_coordinator_role_passes_when_its_holders_lease_runs_out(catalog: Catalog) -> None:
    one, two = member(catalog, 1, 9001), member(catalog, 2, 9002)
    one.heartbeat([COORDINATOR_ROLE])
    until(lambda: two.heartbeat([COORDINATOR_ROLE]).holder(COORDINATOR_ROLE) == (2, 2))
    view = two.heartbeat([COORDINATOR_ROLE])
    assert view.live_ids == (2,)


def test_a_local_topics_name_is_one_brokers_and_never_a_diskless_topics(
    catalog: Catalog,
) -> None:
    one, two = member(catalog, 1, 9001), member(catalog, 2, 9002)
    one.heartbeat()
    two.heartbeat()
    one.claim_local_topic("orders", 3)
    with pytest.raises(TopicExists, match="local topic of broker 1"):
        two.claim_local_topic("orders", 1)
    with pytest.raises(TopicExists, match="local topic of broker 1"):
        catalog.create_topic("orders", 1, {"diskless.enable": "true"})
    catalog.create_topic("shared", 1, {"diskless.enable": "true"})
    with pytest.raises(TopicExists, match="diskless topic"):
        one.claim_local_topic("shared", 1)
    assert two.heartbeat().local_topics == {"orders": (1, 3)}
    # Publishing: names that clash are reported, names gone are removed.
    assert one.publish_local_topics({"orders": 4, "shared": 1, "mine": 2}) == ["shared"]
    assert two.heartbeat().local_topics == {"orders": (1, 4), "mine": (1, 2)}
    assert one.publish_local_topics({"mine": 2}) == []
    assert two.heartbeat().local_topics == {"mine": (1, 2)}


def test_diskless_leaders_are_spread_and_the_same_on_every_broker() -> None:
    leaders = [leader_for("events", p, [3, 1, 2]) for p in range(6)]
    assert sorted(leaders[:3]) == [1, 2, 3] and leaders[3:] == leaders[:3]
    assert leaders == [leader_for("events", p, [1, 2, 3]) for p in range(6)]
    assert leader_for("events", 0, []) == -1
    assert [leader_for("events", p, [2]) for p in range(3)] == [2, 2, 2]


def test_group_offsets_are_written_and_read_back_by_the_next_coordinator(
    catalog: Catalog,
) -> None:
    table = GroupOffsets(catalog)
    table.write([("g", "t", 0, 10, "m"), ("g", "t", 1, 20, ""), ("h", "u", 0, 5, "")], 1000)
    table.write([("g", "t", 0, 11, "n"), ("h", "u", 0)], 2000)
    assert GroupOffsets(catalog).load() == {
        ("g", "t", 0): (11, 2000, "n"),
        ("g", "t", 1): (20, 1000, ""),
    }
    catalog.create_topic("t", 2, {"diskless.enable": "true"})
    catalog.delete_topic("t")
    assert table.load() == {}
