"""Logs: machine-readable under twistd, one line per important event, none per request."""

from __future__ import annotations

import io
import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.logger import Logger, eventFromJSON, formatEvent, globalLogPublisher

from rustka.native import codec as p
from rustka.ops.logs import journal_observer, json_observer
from tools.twistd_process import Twistd, call_many

JSON = ("--logger", "rustka.ops.logs.json_stdout_observer")


def test_daemon_logs_json_events_and_nothing_per_request(tmp_path: Path) -> None:
    """Under twistd each line is a JSON event: start, listening, stop; none for 200 requests."""
    args = ["--data-dir", str(tmp_path / "data"), "--listen", "tcp:0:interface=127.0.0.1"]
    with Twistd(args, twistd_args=JSON) as daemon:
        daemon.wait_for("storage ready")
        port = daemon.wait_port()
        responses = call_many(port, [p.Produce("clicks", b"k", b"v%d" % i) for i in range(150)])
        for _ in range(50):
            responses += call_many(port, [p.Produce("clicks", b"k", b"one more")])
        assert len(responses) == 200
        assert all(isinstance(r, p.Produced) for r in responses)
        assert daemon.stop(signal.SIGTERM) in (0, -signal.SIGTERM)

    events = [eventFromJSON(line) for line in daemon.output]
    assert all(json.loads(line)["log_format"] for line in daemon.output)
    texts = [formatEvent(event) for event in events]
    # serving starts after the storage opened and the listeners bound, in either order
    started = ("storage ready in ", "listening on ")
    ready = max(i for i, t in enumerate(texts) if t.startswith(started))
    sigterm = next(i for i, t in enumerate(texts) if t == "Received SIGTERM, shutting down.")
    assert texts[ready + 1 : sigterm] == [], "no log lines while serving requests"
    assert any(t.startswith("listening on IPv4Address(type='TCP', host='127.0.0.1'") for t in texts)
    assert "broker stopped" in texts[sigterm:]
    by_text = {formatEvent(e): e for e in events}
    assert by_text["broker stopped"]["log_namespace"] == "rustka.broker.service.BrokerService"
    assert by_text["broker stopped"]["log_level"].name == "info"
    stored = next(e for e in events if e["log_format"].startswith("storage ready"))
    assert stored["topics"] == 0 and stored["data_dir"] == str((tmp_path / "data").resolve())
    assert not [e for e in events if e["log_level"].name in ("error", "critical")], texts


def test_json_observer_writes_one_parseable_object_per_line() -> None:
    """json_observer keeps the event's fields, so log shippers need not parse prose."""
    stream = io.StringIO()
    log = Logger(namespace="rustka.test", observer=json_observer(stream))
    log.info("retention deleted {count} segment(s) of {topic}", count=2, topic="orders")
    log.warn("disk is {state}", state="full")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first["count"] == 2 and first["topic"] == "orders"
    assert first["log_namespace"] == "rustka.test"
    assert formatEvent(eventFromJSON(lines[1])) == "disk is full"


def test_journal_observer_leaves_timestamps_to_journald(capsys: pytest.CaptureFixture[str]) -> None:
    """journal_observer prints `[namespace#level] message` with no timestamp of its own."""
    log = Logger(namespace="rustka.test", observer=journal_observer())
    log.info("listening on {address}", address="127.0.0.1:9092")
    assert capsys.readouterr().out == "[rustka.test#info] listening on 127.0.0.1:9092\n"


@pytest.fixture
def captured_events() -> Iterator[list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(events.append)
    yield events
    globalLogPublisher.removeObserver(events.append)


async def test_retention_deletion_is_one_line_per_partition(
    broker_factory: Callable[..., Any], captured_events: list[dict[str, Any]]
) -> None:
    """A retention pass that deletes several segments logs once for the partition, with counts."""
    running = await broker_factory(segment_bytes=1000, retention_bytes=1500)
    try:
        client = await running.client()
        await client.create_topic("short", 1)
        for i in range(40):
            await client.produce("short", b"k", b"x" * 100 + b"%d" % i)
        await client.close()
        captured_events.clear()
        await running.broker.enforce_retention()
        lines = [
            formatEvent(e)
            for e in captured_events
            if e.get("log_namespace", "").startswith("rustka")
        ]
        assert len(lines) == 1, lines
        assert lines[0].startswith("retention deleted ")
        assert "of short/0" in lines[0]
        deleted = next(e for e in captured_events if "count" in e)["count"]
        assert deleted == running.broker.stats.retention_deleted_segments > 1
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_repeated_corruption_is_logged_once(broker_factory: Any) -> None:
    """A corrupt batch refused to many readers produces one error line, not one per request."""
    from twisted.logger import globalLogPublisher

    from rustka.client.protocol import BrokerError

    running = await broker_factory()
    lines: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(lines.append)
    try:
        client = await running.client()
        partition, offset = await client.produce("c", b"k", b"value-to-corrupt")
        plog = running.broker.logs.topic("c").partition(partition)
        segment = plog.segments[-1]
        with open(segment.log_path, "r+b") as f:
            f.seek(segment.size - 3)
            f.write(b"XYZ")
        for _ in range(20):
            with pytest.raises(BrokerError):
                await client.fetch("c", partition, offset)
        corrupt = [e for e in lines if "corrupt data refused" in e.get("log_format", "")]
        assert len(corrupt) == 1
        assert running.broker.stats.corrupt_batches == 20
        await client.close()
    finally:
        globalLogPublisher.removeObserver(lines.append)
        await running.stop()
