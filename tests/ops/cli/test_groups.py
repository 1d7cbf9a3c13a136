"""``rustka groups`` (rustka/ops/cli/groups.py)."""

from __future__ import annotations

import json

import pytest_twisted

from tests.conftest import RunningBroker
from tests.ops.cli import cli, ok


@pytest_twisted.ensureDeferred
async def test_groups_commands_with_json(broker: RunningBroker) -> None:
    """groups list/describe/reset (earliest, latest, offset) in text and JSON."""
    await ok(broker, "topics", "create", "orders", "--partitions", "1")
    for i in range(5):
        await ok(broker, "produce", "orders", "k", f"v{i}")
    await ok(broker, "consume", "analytics", "orders", "0", "--max-records", "2")
    assert await ok(broker, "groups", "list") == "analytics\n"
    assert json.loads(await ok(broker, "groups", "list", "--json")) == ["analytics"]
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
