"""``rustka produce``, ``fetch`` and ``consume`` (rustka/ops/cli/records.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest_twisted

from rustka.record.batch import Record
from tests.conftest import RunningBroker
from tests.ops.cli import cli, ok


@pytest_twisted.ensureDeferred
async def test_produce_tsv_file_then_consume_to_file(broker: RunningBroker, tmp_path: Path) -> None:
    """Lines of a TSV file become records, and consume --output writes them back out."""
    source = tmp_path / "in.tsv"
    source.write_text("".join(f"user-{i % 4}\tevent {i}\twith tab\n" for i in range(500)) + "\n")
    await ok(broker, "topics", "create", "events", "--partitions", "1")
    out = await ok(broker, "produce", "events", "--file", str(source))
    assert out == "produced 500 records to events\n  partition 0: offsets 0-499 (500 records)\n"

    target = tmp_path / "out.tsv"
    summary = await ok(broker, "consume", "g", "events", "0", "--output", str(target))
    assert (
        summary == f"consumed 500 records from events partition 0 (offsets 0-499) into {target}\n"
    )
    lines = target.read_text().splitlines()
    assert lines[0] == "0\tuser-0\tevent 0\twith tab"
    assert lines[-1] == "499\tuser-3\tevent 499\twith tab"
    assert len(lines) == 500
    assert await ok(broker, "consume", "g", "events", "0") == ""


@pytest_twisted.ensureDeferred
async def test_produce_json_lines_from_stdin(broker: RunningBroker, tmp_path: Path) -> None:
    """--format json on stdin keeps keys, values and headers; --json prints the summary as JSON."""
    lines = [
        json.dumps({"key": f"k{i}", "value": f"v{i}", "headers": {"n": str(i), "empty": None}})
        for i in range(30)
    ]
    lines.append(json.dumps({"key": None, "value": "keyless"}))
    out = await ok(
        broker,
        "produce",
        "jsonin",
        "--file",
        "-",
        "--format",
        "json",
        "--json",
        input="\n".join(lines) + "\n",
    )
    summary = json.loads(out)
    assert summary["topic"] == "jsonin" and summary["records"] == 31
    assert sum(p["records"] for p in summary["partitions"]) == 31

    client = await broker.client()
    try:
        stored: list[Record] = []
        for part in summary["partitions"]:
            result = await client.fetch_batch("jsonin", part["partition"], part["first"])
            stored.extend(result.records)
    finally:
        await client.close()
    by_key = {r.key: r for r in stored}
    assert by_key[b"k7"].value == b"v7"
    assert by_key[b"k7"].headers == (("n", b"7"), ("empty", None))
    assert by_key[None].value == b"keyless"

    target = tmp_path / "out.jsonl"
    first = summary["partitions"][0]
    await ok(
        broker, "consume", "j", "jsonin", str(first["partition"]), "--json", "--output", str(target)
    )
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(records) == first["records"]
    assert set(records[0]) == {"offset", "key", "value", "headers"}


@pytest_twisted.ensureDeferred
async def test_produce_tsv_from_stdin_and_bad_json_line(broker: RunningBroker) -> None:
    """TSV works from stdin; a malformed JSON line exits 1 naming the line."""
    out = await ok(broker, "produce", "piped", "--file", "-", input="a\t1\nb\t2\nvalue-only\n")
    assert out.startswith("produced 3 records to piped\n")
    bad = await cli(
        broker, "produce", "piped", "--file", "-", "--format", "json", input='{"value": "x"}\n{\n'
    )
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "line 2" in bad.stderr


@pytest_twisted.ensureDeferred
async def test_consume_reports_offsets_skipped_by_retention(
    broker_factory: Callable[..., Any],
) -> None:
    """A committed offset below the log start resumes at the new start and says how many."""
    running = await broker_factory(segment_bytes=1024, retention_bytes=2048)
    try:
        client = await running.client()
        try:
            await client.create_topic("short", 1)
            await client.commit("g", "short", 0, 0)
            for i in range(60):
                await client.produce_batch("short", 0, [Record(b"k", b"x" * 90 + b"%02d" % i)])
            await running.broker.enforce_retention()
            start = (await client.metadata(["short"]))[0].partitions[0].log_start
        finally:
            await client.close()
        assert start > 0
        result = await cli(running, "consume", "g", "short", "0")
        assert result.returncode == 0
        assert result.stderr == (
            f"rustka: committed offset 0 of group 'g' was deleted by retention; skipped "
            f"{start} offsets, resuming at {start} (earliest)\n"
        )
        assert result.stdout.splitlines()[0].startswith(f"{start}\tk\t")
        assert len(result.stdout.splitlines()) == 60 - start

        await cli(running, "groups", "reset", "g", "short", "--to", "0")
        strict = await cli(running, "consume", "g", "short", "0", "--reset", "error")
        assert strict.returncode == 1 and strict.stdout == ""
        assert strict.stderr.count("\n") == 1 and "out of range" in strict.stderr
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_no_progress_output_when_stderr_is_piped(
    broker: RunningBroker, tmp_path: Path
) -> None:
    """Long produce and consume runs write nothing to a non-TTY stderr."""
    source = tmp_path / "many.tsv"
    source.write_text("".join(f"k{i}\t{'x' * 100}\n" for i in range(20_000)))
    produced = await cli(broker, "produce", "bulk", "--file", str(source))
    assert produced.returncode == 0 and produced.stderr == ""
    assert produced.stdout.startswith("produced 20000 records to bulk\n")
    consumed = await cli(broker, "consume", "g", "bulk", "0", "--output", str(tmp_path / "o"))
    assert consumed.returncode == 0 and consumed.stderr == ""


@pytest_twisted.ensureDeferred
async def test_two_share_workers_at_once_never_print_the_same_record(
    broker: RunningBroker,
) -> None:
    """``consume --share``: two workers of one share group started together print
    different records, all of them between them, each accepted once printed; a third
    run finds nothing left (docs/protocol.md 7.16)."""
    from twisted.internet import defer

    await ok(broker, "topics", "create", "jobs", "--partitions", "3")
    c = await broker.client()
    try:
        for i in range(300):
            await c.produce("jobs", b"k%d" % (i % 7), b"job-%d" % i)
    finally:
        await c.close()
    args = ("consume", "--share", "workers", "jobs", "--from-beginning", "--wait-ms", "1000")
    runs = await defer.gatherResults([defer.ensureDeferred(ok(broker, *args)) for _ in range(2)])
    printed = [[line.split("\t") for line in out.splitlines()] for out in runs]
    taken = [{(int(p), int(o)) for p, o, _k, _v in lines} for lines in printed]
    assert all(len(t) == len(lines) for t, lines in zip(taken, printed, strict=True))
    assert not taken[0] & taken[1]
    assert sorted(v for lines in printed for *_, v in lines) == sorted(
        f"job-{i}" for i in range(300)
    )
    assert await ok(broker, *args) == ""
    # A JSON line carries the partition, offset and delivery count.
    await ok(broker, "produce", "jobs", "late", "one more")
    [line] = (await ok(broker, *args, "--json")).splitlines()
    record = json.loads(line)
    assert (record["value"], record["delivery_count"], record["key"]) == ("one more", 1, "late")
    # A share group reads every partition: a PARTITION argument is refused.
    bad = await cli(broker, "consume", "--share", "workers", "jobs", "0")
    assert bad.returncode != 0 and "takes GROUP TOPIC" in bad.stderr
