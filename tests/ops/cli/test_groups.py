"""``rustka groups`` (rustka/ops/cli/groups.py)."""

from __future__ import annotations

import json

import pytest_twisted

from tests.conftest import RunningBroker
from tests.ops import join_consumer_group
from tests.ops.cli import cli, ok


@pytest_twisted.ensureDeferred
async def test_groups_commands_with_json(broker: RunningBroker) -> None:
    """groups list/describe/reset (earliest, latest, offset) in text and JSON."""
    await ok(broker, "topics", "create", "orders", "--partitions", "1")
    for i in range(5):
        await ok(broker, "produce", "orders", "k", f"v{i}")
    await ok(broker, "consume", "analytics", "orders", "0", "--max-records", "2")
    assert await ok(broker, "groups", "list") == "analytics\tclassic\tEmpty\n"
    assert json.loads(await ok(broker, "groups", "list", "--json")) == [
        {"group": "analytics", "type": "classic", "state": "Empty"}
    ]
    described = json.loads(await ok(broker, "groups", "describe", "analytics", "--json"))
    assert described["state"] == "Empty" and described["members"] == []
    assert described["offsets"] == [
        {"topic": "orders", "partition": 0, "committed": 2, "end": 5, "lag": 3}
    ]
    table = await ok(broker, "groups", "describe", "analytics")
    assert table == "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\norders\t0\t2\t5\t3\n"

    latest = await ok(broker, "groups", "reset", "analytics", "orders", "--to", "latest")
    assert latest == "group analytics orders partition 0 -> 5\n"
    earliest = json.loads(
        await ok(broker, "groups", "reset", "analytics", "orders", "--to", "earliest", "--json")
    )
    assert earliest == [{"topic": "orders", "partition": 0, "offset": 0}]
    await ok(broker, "groups", "reset", "analytics", "orders", "--partition", "0", "--to", "3")
    assert await ok(broker, "consume", "analytics", "orders", "0") == "3\tk\tv3\n4\tk\tv4\n"
    bad = await cli(broker, "groups", "reset", "analytics", "orders", "--to", "soon")
    assert bad.returncode == 1 and "--to must be" in bad.stderr


@pytest_twisted.ensureDeferred
async def test_describe_a_share_group_shows_each_partitions_in_flight_window(
    broker: RunningBroker,
) -> None:
    """A share group's describe is its in-flight state (docs/protocol.md 7.16)."""
    await ok(broker, "topics", "create", "jobs", "--partitions", "1")
    for i in range(6):
        await ok(broker, "produce", "jobs", "k", f"job-{i}")
    c = await broker.client()
    try:
        taken = await c.share_fetch("workers", "w1", "jobs", 5, 0, 1)
        assert len(taken) == 5
        # 0 accepted, 1 rejected, 2 released: 3 and 4 stay acquired, 5 was never taken.
        await c.share_acknowledge("workers", "w1", "jobs", [(0, 0, 1), (0, 1, 3), (0, 2, 2)])
    finally:
        await c.close()
    described = json.loads(await ok(broker, "groups", "describe", "workers", "--json"))
    assert described == {
        "group": "workers",
        "type": "share",
        "state": "Empty",
        "group_epoch": 0,
        "members": [],
        "partitions": [
            {
                "topic": "jobs",
                "partition": 0,
                "start_offset": 2,
                "end_offset": 5,
                "available": 1,
                "acquired": 2,
                "acknowledged": 0,
                "archived": 0,
            }
        ],
    }
    table = await ok(broker, "groups", "describe", "workers")
    assert table.splitlines()[0] == "share group workers: state Empty, epoch 0, 0 member(s)"
    assert table.splitlines()[-1] == "jobs\t0\t2\t5\t1\t2\t0\t0"


@pytest_twisted.ensureDeferred
async def test_reset_and_delete_a_share_group_only_while_it_is_idle(broker: RunningBroker) -> None:
    """``groups reset`` restarts an idle share group's partitions (AlterShareGroupOffsets),
    ``groups delete`` forgets its state; a worker holding records blocks both."""
    await ok(broker, "topics", "create", "jobs", "--partitions", "1")
    for i in range(4):
        await ok(broker, "produce", "jobs", "k", f"job-{i}")
    c = await broker.client()
    try:
        held = await c.share_fetch("workers", "w1", "jobs", 2, 0, 1)
        busy = await cli(broker, "groups", "reset", "workers", "jobs", "--to", "latest")
        assert busy.returncode != 0 and "holding records" in busy.stderr
        await c.share_acknowledge("workers", "w1", "jobs", [(0, r.record.offset, 1) for r in held])
    finally:
        await c.close()
    assert await ok(broker, "groups", "reset", "workers", "jobs", "--to", "3") == (
        "group workers jobs partition 0 -> 3\n"
    )
    described = json.loads(await ok(broker, "groups", "describe", "workers", "--json"))
    assert [(w["start_offset"], w["end_offset"]) for w in described["partitions"]] == [(3, 3)]
    taken = await ok(broker, "consume", "--share", "workers", "jobs", "--wait-ms", "200")
    assert taken == "0\t3\tk\tjob-3\n"
    assert await ok(broker, "groups", "delete", "workers") == (
        "deleted the state of share group workers\n"
    )
    gone = await cli(broker, "groups", "delete", "workers")
    assert gone.returncode != 0 and "not a share group" in gone.stderr


@pytest_twisted.ensureDeferred
async def test_a_consumer_protocol_group_is_listed_and_described_with_member_epochs(
    broker: RunningBroker,
) -> None:
    """A KIP-848 group (docs/kafka.md, "Consumer groups (KIP-848)"): ``list`` gives its
    type, ``describe`` its epochs and each member's epoch and assignment."""
    await ok(broker, "topics", "create", "orders", "--partitions", "2")
    k, joined = await join_consumer_group(broker.address, "modern", "m-1", ["orders"])
    try:
        assert joined["error_code"] == 0 and joined["member_epoch"] >= 1
        listed = json.loads(await ok(broker, "groups", "list", "--json"))
        assert {"group": "modern", "type": "consumer", "state": "Stable"} in listed
        described = json.loads(await ok(broker, "groups", "describe", "modern", "--json"))
        assert (described["type"], described["assignor"]) == ("consumer", "uniform")
        [member] = described["members"]
        assert member["member_id"] == "m-1" and member["client_id"] == "cg-test"
        assert member["member_epoch"] == joined["member_epoch"] == described["group_epoch"]
        assert member["target_assignment"] == {"orders": [0, 1]}
        table = await ok(broker, "groups", "describe", "modern")
        assert table.startswith("consumer group modern: state Stable")
        assert "orders[0,1]" in table
    finally:
        await k.close()
