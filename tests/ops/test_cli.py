"""The `rustka` console script as a subprocess against an in-process broker.

The CLI runs in a thread (deferToThread) so the reactor keeps serving the
broker while the subprocess talks to it.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet.threads import deferToThread

from rustka.ops.progress import Progress, format_duration
from rustka.storage.record_batch import Record
from tests.conftest import RunningBroker

RUSTKA = str(Path(sys.executable).parent / "rustka")


async def cli(
    broker: RunningBroker, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `rustka COMMAND --broker ADDR ARGS...` without blocking the reactor."""
    argv = [RUSTKA, args[0], "--broker", broker.address, *args[1:]]
    result: subprocess.CompletedProcess[str] = await deferToThread(
        subprocess.run, argv, capture_output=True, text=True, timeout=60, input=input
    )
    return result


async def ok(broker: RunningBroker, *args: str, input: str | None = None) -> str:
    result = await cli(broker, *args, input=input)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


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
async def test_broker_error_is_one_line_and_status_1(broker: RunningBroker) -> None:
    """An Error answer exits 1 with a single line on stderr and nothing on stdout."""
    result = await cli(broker, "fetch", "nosuchtopic", "0", "0")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "unknown topic" in result.stderr
    missing = await cli(broker, "produce", "t", "--file", "/nonexistent/input.tsv")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1


@pytest_twisted.ensureDeferred
async def test_usage_errors_exit_2(broker: RunningBroker) -> None:
    """Bad arguments are argparse usage errors: status 2, nothing sent."""
    for args in (
        ("produce", "t", "key-without-value"),
        ("produce", "t", "k", "v", "--file", "x"),
        ("produce", "t", "--file", "-", "--format", "xml"),
        ("fetch", "t", "zero", "0"),
        ("topics", "create", "t"),
        ("groups", "describe"),
    ):
        result = await cli(broker, *args)
        assert result.returncode == 2, args
        assert "usage:" in result.stderr
    assert await ok(broker, "topics", "list") == ""


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


class FakeTTY(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class Clock:
    """A settable clock so redraw throttling and rates are deterministic."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_draws_rate_bar_and_eta_on_a_tty() -> None:
    """On a TTY the line shows records, rate, a bar and an ETA, redrawn in place."""
    stream, clock = FakeTTY(), Clock()
    progress = Progress(stream, label="produce t", total=1000, clock=clock, interval=0.5)
    clock.now += 2
    progress.update(500, 250)
    assert stream.getvalue() == (
        "\rproduce t  500 records  250 records/s  [#####...............]  25%  ETA 0:06"
    )
    clock.now += 0.1
    progress.update(600, 300)
    assert stream.getvalue().count("\r") == 1  # throttled
    clock.now += 2
    progress.update(1000, 1000)
    progress.finish()
    final = stream.getvalue().rsplit("\r", 1)[1]
    assert "100%" in final and "ETA" not in final and final.endswith("\n")


def test_progress_without_total_has_no_eta() -> None:
    """With nothing known ahead, only counts and rate are shown."""
    stream, clock = FakeTTY(), Clock()
    progress = Progress(stream, clock=clock, interval=0)
    clock.now += 4
    progress.update(1000)
    assert stream.getvalue() == "\r1,000 records  250 records/s"


def test_progress_is_silent_off_a_tty() -> None:
    """A stream that is not a terminal gets nothing, not even on finish()."""
    stream = io.StringIO()
    progress = Progress(stream, total=10, interval=0)
    progress.update(5, 5)
    progress.finish()
    assert stream.getvalue() == "" and not progress.enabled


def test_format_duration() -> None:
    """ETAs read as M:SS under an hour and H:MM:SS above."""
    assert format_duration(0) == "0:00"
    assert format_duration(65.4) == "1:05"
    assert format_duration(3 * 3600 + 61) == "3:01:01"


def test_stream_without_isatty_counts_as_piped() -> None:
    """An object whose isatty() raises (a closed stream) disables progress."""
    closed = io.StringIO()
    closed.close()
    assert not Progress(closed).enabled


@pytest_twisted.ensureDeferred
async def test_timeout_covers_requests_not_only_the_connect() -> None:
    """A server that accepts and never answers: the CLI gives up after --timeout, in one line."""
    from twisted.internet import reactor
    from twisted.internet.protocol import Factory, Protocol

    port = reactor.listenTCP(0, Factory.forProtocol(Protocol), interface="127.0.0.1")
    try:
        argv = [RUSTKA, "fetch", "--broker", f"127.0.0.1:{port.getHost().port}"]
        result: subprocess.CompletedProcess[str] = await deferToThread(
            subprocess.run,
            [*argv, "--timeout", "0.5", "orders", "0", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        await port.stopListening()
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (
        "rustka: no answer from the broker within 0.5 s (plus any long-poll wait); "
        "the connection was closed\n"
    )
