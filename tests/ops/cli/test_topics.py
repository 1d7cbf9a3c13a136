"""``rustka topics`` (rustka/ops/cli/topics.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest_twisted

from tests.conftest import RunningBroker, within
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
    size = broker.broker.partition("ship", 0).size_bytes
    assert described == [
        {
            "topic": "ship",
            "cleanup_policy": "delete",
            "partitions": [
                {
                    "partition": 0,
                    "log_start": 0,
                    "end": 1,
                    "bytes": size,
                    "segments": 1,
                    "last_stable": 1,
                    "open_transactions": [],
                }
            ],
            "configs": {},
        }
    ]
    table = await ok(broker, "topics", "describe", "ship")
    assert table == (
        "TOPIC\tPARTITION\tLOG-START\tEND\tLAST-STABLE\tOPEN-TXNS\tRECORDS\tBYTES\n"
        f"ship\t0\t0\t1\t1\t0\t1\t{size}\n"
    )
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


@pytest_twisted.ensureDeferred
async def test_topics_describe_shows_the_log_cleaner(broker_factory: Any) -> None:
    """On a compacted topic, describe adds the cleaner's numbers: dirty ratio, when it
    last cleaned, the bytes it read and wrote (docs/kafka.md, "Log compaction")."""
    running = await broker_factory(
        cleanup_policy="compact", segment_bytes=1024, cleaner_backoff_ms=3_600_000
    )
    try:
        client = await running.client()
        try:
            for i in range(60):
                await client.produce("table", b"key-%d" % (i % 5), b"value-%d" % i * 5)
        finally:
            await client.close()
        before = json.loads(await ok(running, "topics", "describe", "table", "--json"))
        cleaner = before[0]["partitions"][0]["cleaner"]
        assert cleaner["last_clean"] is None and cleaner["bytes_read"] == 0
        await within(running.broker.cleaner.run_pass())
        after = json.loads(await ok(running, "topics", "describe", "table", "--json"))
        part = after[0]["partitions"][0]
        assert after[0]["cleanup_policy"] == "compact"
        state = running.broker.cleaner.totals.partitions[("table", 0)]
        assert part["cleaner"] == {
            "dirty_ratio": 0.0,
            "first_dirty": state.first_dirty,
            "bytes_read": state.bytes_read,
            "bytes_written": state.bytes_written,
            "last_clean": part["cleaner"]["last_clean"],
            "uncleanable": None,
        }
        assert state.bytes_read > 0 and part["cleaner"]["last_clean"].startswith("20")
        assert part["bytes"] == running.broker.partition("table", 0).size_bytes
        table = (await ok(running, "topics", "describe", "table")).splitlines()
        assert table[0].endswith("POLICY\tDIRTY\tLAST-CLEAN\tCLEANER-READ\tCLEANER-WRITTEN")
        fields = table[1].split("\t")
        assert fields[8:10] == ["compact", "0.0%"]
        assert fields[11:] == [str(state.bytes_read), str(state.bytes_written)]
        missing = await cli(running, "topics", "describe", "nosuch")
        assert missing.returncode == 1 and "unknown topic" in missing.stderr
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_topics_configs_are_created_altered_and_described(broker: RunningBroker) -> None:
    """--config KEY=VALUE on create and alter, --delete-config KEY on alter; describe lists
    the topic's own configs, which the topic's logs use."""
    made = await ok(
        broker,
        "topics",
        "create",
        "st",
        "--partitions",
        "1",
        "--config",
        "cleanup.policy=compact",
        "--config",
        "retention.ms=-1",
    )
    assert made == "topic st created 1 partitions\n  cleanup.policy=compact\n  retention.ms=-1\n"
    assert broker.broker.partition("st", 0).config.compact
    described = json.loads(await ok(broker, "topics", "describe", "st", "--json"))
    assert described[0]["configs"] == {"cleanup.policy": "compact", "retention.ms": "-1"}
    table = await ok(broker, "topics", "describe", "st")
    assert table.endswith(
        "TOPIC\tCONFIG\tVALUE\nst\tcleanup.policy\tcompact\nst\tretention.ms\t-1\n"
    )
    altered = json.loads(
        await ok(
            broker,
            "topics",
            "alter",
            "st",
            "--config",
            "segment.bytes=1000",
            "--delete-config",
            "retention.ms",
            "--json",
        )
    )
    assert altered == {
        "topic": "st",
        "configs": {"cleanup.policy": "compact", "segment.bytes": "1000"},
    }
    assert broker.broker.partition("st", 0).config.segment_bytes == 1000
    both = await ok(
        broker,
        "topics",
        "alter",
        "st",
        "--partitions",
        "2",
        "--delete-config",
        "cleanup.policy",
        "--delete-config",
        "segment.bytes",
    )
    assert both == (
        "topic st now has 2 partitions\ntopic st has configs of its own:\n"
        "  (none: the broker's settings)\n"
    )
    bad = await cli(broker, "topics", "alter", "st", "--config", "retention.ms=soon")
    assert bad.returncode == 1 and "retention.ms" in bad.stderr
    assert bad.stderr.count("\n") == 1
    bad = await cli(broker, "topics", "create", "x", "--partitions", "1", "--config", "nope=1")
    assert bad.returncode == 1 and "nope" in bad.stderr
    for argv in (
        ("topics", "alter", "st"),
        ("topics", "create", "y", "--partitions", "1", "--config", "novalue"),
        ("topics", "describe", "st", "--config", "a=b"),
        ("topics", "alter", "st", "--config", "a=1", "--delete-config", "a"),
    ):
        refused = await cli(broker, *argv)
        assert refused.returncode == 2, argv
    assert broker.broker.topic("st").overrides == {}


@pytest_twisted.ensureDeferred
async def test_topics_delete_records(broker: RunningBroker) -> None:
    """topics delete-records moves a partition's log start (text and JSON, 'end' for the
    high watermark); describe shows it; a bad use is a usage error, a refusal one line."""
    await ok(broker, "topics", "create", "trim", "--partitions", "1")
    for i in range(5):
        await ok(broker, "produce", "trim", "k", f"v{i}")
    assert await ok(
        broker, "topics", "delete-records", "trim", "--partition", "0", "--before", "2"
    ) == ("topic trim partition 0 now starts at offset 2\n")
    moved = json.loads(
        await ok(
            broker,
            "topics",
            "delete-records",
            "trim",
            "--partition",
            "0",
            "--before",
            "end",
            "--json",
        )
    )
    assert moved == {"topic": "trim", "partition": 0, "log_start": 5}
    described = json.loads(await ok(broker, "topics", "describe", "trim", "--json"))
    assert described[0]["partitions"][0]["log_start"] == 5
    past = await cli(
        broker, "topics", "delete-records", "trim", "--partition", "0", "--before", "9"
    )
    assert past.returncode == 1 and past.stderr.count("\n") == 1 and "9" in past.stderr
    for bad in (("--partition", "0"), ("--before", "1"), ("--partition", "0", "--before", "x")):
        usage = await cli(broker, "topics", "delete-records", "trim", *bad)
        assert usage.returncode == 2, usage.stderr
    stray = await cli(broker, "topics", "delete", "trim", "--partition", "0")
    assert stray.returncode == 2 and "takes no --partition" in stray.stderr
