"""Graceful shutdown: nothing left hanging, a clean marker, and no recovery scan next time.

In-process for the request-level guarantees (every client Deferred fires, every
acknowledged record survives), and real `twistd` processes for the signal-level
ones (SIGTERM is clean, SIGKILL leads to a logged recovery).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twisted.internet import defer

from rustka.client.protocol import BrokerError, ConnectionClosed
from rustka.errors import BrokerUnavailable
from rustka.native import codec as p
from rustka.storage.log_files import CLEAN_SHUTDOWN_MARKER
from tools.twistd_process import Twistd, call_many

TIMEOUT = 20
JOURNAL = ("--logger", "rustka.ops.logs.journal_observer")


def _outcome(d: defer.Deferred[Any]) -> defer.Deferred[tuple[str, Any]]:
    """("ok", result) or ("failed", exception); a hung Deferred becomes a TimeoutError."""
    from twisted.internet import reactor

    d.addTimeout(TIMEOUT, reactor)
    return d.addCallbacks(lambda r: ("ok", r), lambda f: ("failed", f.value))


async def read_all(client: Any, topic: str, partition: int) -> dict[int, bytes]:
    """Every record of one partition, by offset."""
    from twisted.internet import reactor

    records: dict[int, bytes] = {}
    offset = 0
    while True:
        result = await client.fetch_batch(topic, partition, offset).addTimeout(TIMEOUT, reactor)
        for record in result.records:
            records[record.offset] = record.value
        if result.next_offset >= result.high_watermark:
            return records
        offset = result.next_offset


async def test_stop_with_requests_in_flight(
    data_dir: Path, broker_factory: Callable[..., Any]
) -> None:
    """Stopping mid-traffic answers or fails every call, marks the log clean, keeps acked data."""
    running = await broker_factory()
    producer = await running.client()
    poller = await running.client()
    await producer.create_topic("events", 1)
    await producer.create_topic("quiet", 1)

    parked = _outcome(poller.fetch_batch("quiet", 0, 0, max_wait_ms=30_000))
    produces = [
        _outcome(producer.produce("events", b"k", f"value-{i}".encode())) for i in range(600)
    ]
    # auto-created topics: their creation is disk work outside any partition lane
    creates = [_outcome(producer.produce(f"fresh-{i}", b"k", b"v")) for i in range(10)]
    first_acked: defer.Deferred[str] = defer.Deferred()
    produces[0].addBoth(lambda outcome: (first_acked.callback(outcome[0]), outcome)[1])
    assert await first_acked.addTimeout(TIMEOUT, running.factory.reactor) == "ok"

    stopping = running.top.stopService()
    outcomes = await defer.gatherResults([parked, *produces, *creates])
    await defer.maybeDeferred(lambda: stopping).addTimeout(TIMEOUT, running.factory.reactor)

    allowed = (ConnectionClosed, BrokerUnavailable, BrokerError)
    failures = [value for kind, value in outcomes if kind == "failed"]
    assert all(isinstance(value, allowed) for value in failures), failures
    acked = {
        value[1]: f"value-{i}".encode()
        for i, (kind, value) in enumerate(outcomes[1 : 1 + len(produces)])
        if kind == "ok"
    }
    fresh_acked = [i for i, (kind, _) in enumerate(outcomes[1 + len(produces) :]) if kind == "ok"]
    assert acked, "at least the first produce was acknowledged"
    assert (data_dir / CLEAN_SHUTDOWN_MARKER).exists()

    again = await broker_factory()
    try:
        assert again.broker.logs.recovered is False
        reader = await again.client()
        stored = await read_all(reader, "events", 0)
        assert {offset: stored.get(offset) for offset in acked} == acked
        # in-flight requests were answered before the connection closed: nothing was
        # stored without its acknowledgement reaching the client
        assert set(stored) == set(acked)
        for i in fresh_acked:
            topic = again.broker.logs.topics[f"fresh-{i}"]
            assert sum(plog.end_offset for plog in topic.partitions) == 1
        await reader.close()
    finally:
        await again.stop()


async def test_requests_after_stop_are_refused(broker_factory: Callable[..., Any]) -> None:
    """Once shutdown has begun the broker answers BrokerUnavailable rather than queueing work."""
    running = await broker_factory()
    broker = running.broker
    stopping = running.top.stopService()
    response = await running.factory.handler.handle(p.Produce("late", b"k", b"v")).addTimeout(
        TIMEOUT, running.factory.reactor
    )
    await defer.maybeDeferred(lambda: stopping).addTimeout(TIMEOUT, running.factory.reactor)
    assert isinstance(response, p.Error)
    assert "shutting down" in response.message
    assert "late" not in broker.logs.topics


def produce_then_stop(args: list[str], sig: int) -> Twistd:
    """Run twistd, store 50 acknowledged records in "orders", then stop it with ``sig``."""
    with Twistd(args, twistd_args=JOURNAL) as daemon:
        port = daemon.wait_port()
        responses = call_many(port, [p.Produce("orders", b"k", b"v%d" % i) for i in range(50)])
        assert all(isinstance(r, p.Produced) for r in responses)
        daemon.stop(sig)
    return daemon


def test_sigterm_leaves_no_recovery_for_the_next_start(tmp_path: Path) -> None:
    """After SIGTERM the next start finds the clean marker and logs no recovery."""
    data = tmp_path / "data"
    args = ["--data-dir", str(data), "--listen", "tcp:0:interface=127.0.0.1"]
    first = produce_then_stop(args, signal.SIGTERM)
    assert first.proc.returncode in (0, -signal.SIGTERM)
    assert any("broker stopped" in line for line in first.output), first.output
    assert (data / CLEAN_SHUTDOWN_MARKER).exists()

    with Twistd(args, twistd_args=JOURNAL) as second:
        second.wait_for("storage ready")
        port = second.wait_port()
        stored = call_many(port, [p.Metadata(("orders",))])[0]
        assert isinstance(stored, p.MetadataResult)
        assert sum(part.high_watermark for part in stored.topics[0].partitions) == 50
        second.stop()
    warnings = [line for line in second.output if "#warn]" in line or "#error]" in line]
    assert warnings == []
    assert not any("unclean shutdown" in line or "recovery:" in line for line in second.output)


def test_sigkill_makes_the_next_start_recover(tmp_path: Path) -> None:
    """After SIGKILL there is no marker, and the next start logs that recovery ran."""
    data = tmp_path / "data"
    args = ["--data-dir", str(data), "--listen", "tcp:0:interface=127.0.0.1"]
    first = produce_then_stop(args, signal.SIGKILL)
    assert first.proc.returncode == -signal.SIGKILL
    assert not (data / CLEAN_SHUTDOWN_MARKER).exists()

    with Twistd(args, twistd_args=JOURNAL) as second:
        line = second.wait_for("unclean shutdown detected")
        port = second.wait_port()
        assert line.string.startswith("[rustka.broker.core.Broker#warn] ")
        stored = call_many(port, [p.Metadata(("orders",))])[0]
        assert isinstance(stored, p.MetadataResult)
        assert sum(part.high_watermark for part in stored.topics[0].partitions) == 50
        second.stop()
    assert (data / CLEAN_SHUTDOWN_MARKER).exists()
