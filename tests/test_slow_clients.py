"""Clients that stop reading, vanish mid-request or stall mid-frame.

Each must cost the broker bounded memory, leave no half-done effect, and
never disturb the other clients.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import defer
from twisted.logger import LogLevel

from rustka.native import codec as p
from rustka.record.batch import Record, decode_records, encode_batch, scan_batches
from tests.conftest import LogWatcher, reactor_turns
from tests.native.test_server import close, connect_raw
from tests.test_limits import (
    big_batch,
    connect_unread,
    create_topic,
    decoded,
    request,
    server_has,
    server_side,
    tree,
    with_timeout,
)


@pytest_twisted.ensureDeferred
async def test_long_polling_consumer_that_never_reads_is_bounded_then_dropped(
    broker_factory: Any, log_watcher: LogWatcher
) -> None:
    """Large fetches queued behind a long-poll stay within the in-flight limit; the reader goes."""
    running = await broker_factory(
        max_in_flight_per_connection=8,
        fetch_max_bytes=1 << 20,
        max_output_bytes_per_connection=256 * 1024,
        idle_timeout_ms=1000,
        fetch_max_wait_ms=60_000,
        flush="never",
    )
    reader = None
    try:
        admin = await connect_raw(running)
        await create_topic(admin, "slow", 2)
        for _ in range(4):
            await admin.ask(request(p.ProduceBatch("slow", 0, big_batch(1 << 20))))
        reader = await connect_unread(running)
        frames = [request(p.FetchBatch("slow", 1, 0, 1 << 20, 600_000))]
        frames += [request(p.FetchBatch("slow", 0, 0, 64 << 20, 0))] * 40
        reader.transport.write(b"".join(frames))
        proto = await server_side(running, reader)
        # Reading stops at the in-flight limit, or sooner when the output budget is spent.
        await reactor_turns(lambda: proto.requests >= 8 or proto.framing_paused())
        await admin.ask(request(p.Metadata(("slow",))))
        assert proto.pending <= 8
        assert proto.requests <= 8
        await admin.ask(request(p.ProduceBatch("slow", 1, encode_batch([Record(b"k", b"v")]))))
        await log_watcher.wait_for("it stopped reading its responses")
        assert running.factory.slow_readers_dropped == 1
        await reactor_turns(lambda: not server_has(running, reader))
        fresh = await connect_raw(running)
        [answer] = decoded(await fresh.ask(request(p.Fetch("slow", 0, 63))))
        assert answer == p.FetchedRecord(63, b"", bytes([15]) * 65536)
        await close(fresh)
    finally:
        if reader is not None:
            reader.transport.abortConnection()
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_client_vanishing_with_produces_in_flight_leaves_whole_effects(
    broker_factory: Any, log_watcher: LogWatcher
) -> None:
    """Produces cut off by a disconnect are each wholly in the log or absent, quietly."""
    running = await broker_factory()
    try:
        admin = await connect_raw(running)
        await create_topic(admin, "gone")
        values = [f"value-{i:04d}".encode() * 8 for i in range(300)]
        batches = [encode_batch([Record(b"k", v)]) for v in values]
        c = await connect_raw(running)
        await c.ask(request(p.Metadata(("gone",))))
        proto = await server_side(running, c)
        closed: defer.Deferred[None] = defer.Deferred()
        lost = proto.connectionLost

        def observed(reason: Any = None) -> None:
            lost(reason)
            closed.callback(None)

        proto.connectionLost = observed  # type: ignore[method-assign]
        c.transport.write(b"".join(request(p.ProduceBatch("gone", 0, b)) for b in batches))
        c.transport.loseConnection()
        await with_timeout(closed)
        await with_timeout(running.broker.lane("gone", 0).when_idle())
        assert running.broker.lane("gone", 0).depth == 0
        [answer] = decoded(await admin.ask(request(p.FetchBatch("gone", 0, 0, 8 << 20, 0))))
        assert isinstance(answer, p.Batches)
        data = bytes(answer.batches)
        found, end = scan_batches(data)
        assert end == len(data)
        records = [r for pos, _ in found for r in decode_records(data, pos, verify=True)]
        assert [r.offset for r in records] == list(range(answer.high_watermark))
        assert [r.value for r in records] == values[: len(records)]
        assert all(r.key == b"k" for r in records)
        assert log_watcher.at_least(LogLevel.warn) == []
        await close(admin)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_producer_stalling_mid_frame_is_dropped_and_writes_nothing(
    broker_factory: Any, data_dir: Path, log_watcher: LogWatcher
) -> None:
    """Half a Produce frame then silence: dropped after idle_timeout_ms, no topic created."""
    running = await broker_factory(idle_timeout_ms=100)
    try:
        before = tree(data_dir)
        whole = request(p.Produce("stalled", b"key", b"v" * 200))
        c = await connect_raw(running)
        c.transport.write(whole[: len(whole) // 2])
        await with_timeout(c.lost)
        assert c.frames == [] and c.buffer == b""
        assert log_watcher.messages("dropping idle connection")
        assert tree(data_dir) == before
        bystander = await connect_raw(running)
        [answer] = decoded(await bystander.ask(request(p.Metadata())))
        assert isinstance(answer, p.MetadataResult)
        assert "stalled" not in [t.name for t in answer.topics]
        await close(bystander)
    finally:
        await running.stop()
