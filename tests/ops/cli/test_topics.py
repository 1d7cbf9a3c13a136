"""``rustka topics`` (rustka/ops/cli/topics.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest_twisted

from tests.conftest import RunningBroker
from tests.ops.cli import cli, ok


@pytest_twisted.ensureDeferred
async def test_topics_commands_with_json(broker: RunningBroker) -> None:
    """topics create/list/describe/alter answer in text and JSON."""
    assert await ok(broker, "topics", "create", "pay", "--partitions", "2") == (
        "topic pay created 2 partitions\n"
    )
    created = json.loads(
        await ok(broker, "topics", "create", "ship", "--partitions", "1", "--json")
    )
    assert created == {"topic": "ship", "partitions": 1}
    assert await ok(broker, "topics", "list") == "pay\nship\n"
    listed = json.loads(await ok(broker, "topics", "list", "--json"))
    assert listed == [{"topic": "pay", "partitions": 2}, {"topic": "ship", "partitions": 1}]
    await ok(broker, "produce", "ship", "k", "v")
    described = json.loads(await ok(broker, "topics", "describe", "ship", "--json"))
    assert described == [
        {"topic": "ship", "partitions": [{"partition": 0, "log_start": 0, "end": 1}]}
    ]
    table = await ok(broker, "topics", "describe", "ship")
    assert table == "TOPIC\tPARTITION\tLOG-START\tEND\tRECORDS\nship\t0\t0\t1\t1\n"
    altered = json.loads(await ok(broker, "topics", "alter", "pay", "--partitions", "5", "--json"))
    assert altered == {"topic": "pay", "partitions": 5}
    shrink = await cli(broker, "topics", "alter", "pay", "--partitions", "3")
    assert shrink.returncode == 1 and shrink.stderr.count("\n") == 1


@pytest_twisted.ensureDeferred
async def test_topics_delete(broker: RunningBroker) -> None:
    """topics delete removes the topic and its data; a second delete is a one-line error."""
    await ok(broker, "produce", "doomed", "k", "v")
    await ok(broker, "topics", "create", "kept", "--partitions", "1")
    assert await ok(broker, "topics", "delete", "doomed") == (
        "topic doomed deleted with all its data\n"
    )
    assert await ok(broker, "topics", "list") == "kept\n"
    assert not (Path(broker.config.data_dir) / "doomed").exists()
    assert (Path(broker.config.data_dir) / "kept").is_dir()
    again = await cli(broker, "topics", "delete", "doomed")
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.count("\n") == 1 and "unknown topic" in again.stderr
    deleted = json.loads(await ok(broker, "topics", "delete", "kept", "--json"))
    assert deleted == {"topic": "kept", "deleted": True}
    assert json.loads(await ok(broker, "topics", "list", "--json")) == []
    missing = await cli(broker, "topics", "delete")
    assert missing.returncode == 2 and "topics delete needs a TOPIC" in missing.stderr
