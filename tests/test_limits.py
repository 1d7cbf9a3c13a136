"""Every per-connection and per-request limit, each proven enforced over real TCP.

Limits are set tiny (milliseconds, kilobytes) so the tests run fast; nothing
sleeps: each waits on a Deferred (a connection closing, a log event, a
response) bounded by ``addTimeout``.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import defer
from twisted.internet.protocol import Factory

from rustka.native import codec as p
from rustka.native.server import BrokerProtocol
from rustka.record.batch import Record, encode_batch, validate_batches
from tests.conftest import LogWatcher, RunningBroker, reactor_turns
from tests.native.test_server import RawClient, close, connect_raw, frame

TIMEOUT = 15


def request(req: p.Request) -> bytes:
    return frame(p.encode_request(req))


def decoded(payloads: list[bytes]) -> list[p.Response]:
    return [p.decode_response(payload) for payload in payloads]


def tree(data_dir: Path) -> set[str]:
    """Every path under the data dir except the clean-shutdown marker."""
    return {
        str(path.relative_to(data_dir))
        for path in data_dir.rglob("*")
        if path.name != ".clean-shutdown"
    }


def with_timeout(d: defer.Deferred[Any], seconds: float = TIMEOUT) -> defer.Deferred[Any]:
    from twisted.internet import reactor

    return d.addTimeout(seconds, reactor)


async def server_side(running: RunningBroker, client: RawClient) -> BrokerProtocol:
    """The broker's native protocol for ``client``'s connection, matched by port.

    The listener picks the protocol on a connection's first frame (docs/kafka.md,
    "Listeners"), so this waits until the client's first bytes have arrived.
    """
    port = client.transport.getHost().port

    def found() -> list[BrokerProtocol]:
        return [c for c in running.factory.connections if c.transport.getPeer().port == port]

    await reactor_turns(lambda: bool(found()))
    [proto] = found()
    return proto


async def connect_unread(running: RunningBroker) -> RawClient:
    """A client with a tiny receive buffer that never reads what it is sent.

    The receive buffer is shrunk before connecting so the broker's output backs
    up after a few KiB instead of the megabytes loopback autotuning allows. It
    sends one small Metadata request first: the listener picks the protocol on
    the first frame, so the broker's side of the connection exists on return.
    """
    from twisted.internet import reactor

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", running.port))
    sock.setblocking(False)
    proto = RawClient()
    factory = _OneProtocol(proto)
    reactor.adoptStreamConnection(sock.fileno(), socket.AF_INET, factory)
    sock.close()
    proto.transport.pauseProducing()
    proto.transport.write(request(p.Metadata(())))
    await reactor_turns(lambda: server_has(running, proto))
    return proto


def server_has(running: RunningBroker, client: RawClient) -> bool:
    port = client.transport.getHost().port
    return any(c.transport.getPeer().port == port for c in running.factory.connections)


class _OneProtocol(Factory):
    """Hands out one prebuilt protocol (for adoptStreamConnection)."""

    def __init__(self, proto: RawClient) -> None:
        self.proto = proto

    def buildProtocol(self, addr: Any) -> RawClient:
        self.proto.factory = self
        return self.proto


async def create_topic(client: RawClient, topic: str, partitions: int = 1) -> None:
    [answer] = decoded(await client.ask(request(p.CreateTopic(topic, partitions))))
    assert answer == p.TopicInfo(topic, partitions)


def big_batch(size: int, chunk: int = 64 * 1024) -> bytes:
    """One record batch of about ``size`` bytes of values."""
    records = [Record(key=None, value=bytes([i % 251]) * chunk) for i in range(size // chunk)]
    return encode_batch(records, timestamp=1)


@pytest_twisted.ensureDeferred
async def test_frame_limit_is_checked_on_the_length_prefix(
    broker_factory: Any, data_dir: Path
) -> None:
    """A bare 4-byte header declaring a huge frame is refused at once, without its payload."""
    running = await broker_factory(max_frame_bytes=4096)
    try:
        before = tree(data_dir)
        c = await connect_raw(running)
        c.transport.write(struct.pack("!I", 2**32 - 1))
        [answer] = decoded(await c.expect(1))
        assert isinstance(answer, p.Error)
        assert "4294967295 bytes exceeds the maximum of 4096" in answer.message
        await with_timeout(c.lost)
        assert tree(data_dir) == before
        ok = await connect_raw(running)
        [answer] = decoded(await ok.ask(request(p.Hello(2, "t"))))
        assert isinstance(answer, p.Welcome)
        await close(ok)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_in_flight_limit_stops_reading_until_responses_drain(broker_factory: Any) -> None:
    """Behind a parked long-poll the broker reads at most the in-flight limit, then all drain."""
    running = await broker_factory(max_in_flight_per_connection=4, fetch_max_wait_ms=60_000)
    try:
        admin = await connect_raw(running)
        await create_topic(admin, "inflight")
        c = await connect_raw(running)
        frames = [request(p.FetchBatch("inflight", 0, 0, 1 << 20, 600_000))]
        frames += [request(p.Metadata(("inflight",))) for _ in range(99)]
        answered = c.expect(len(frames))
        c.transport.write(b"".join(frames))
        proto = await server_side(running, c)
        await reactor_turns(lambda: proto.requests >= 4)
        for _ in range(3):
            await admin.ask(request(p.Metadata(("inflight",))))
        assert proto.requests <= 4
        assert proto.pending <= 4
        [produced] = decoded(
            await admin.ask(
                request(p.ProduceBatch("inflight", 0, encode_batch([Record(b"k", b"v")])))
            )
        )
        assert produced == p.BatchProduced(0, 0, 0)
        answers = decoded(await answered)
        assert isinstance(answers[0], p.Batches) and answers[0].high_watermark == 1
        assert all(isinstance(a, p.MetadataResult) for a in answers[1:])
        assert proto.requests == 100 and proto.pending == 0
        await close(c)
        await close(admin)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_output_limit_drops_a_client_that_never_reads(
    broker_factory: Any, log_watcher: LogWatcher
) -> None:
    """Responses piling up past max_output_bytes_per_connection get the reader dropped."""
    running = await broker_factory(
        max_output_bytes_per_connection=256 * 1024, idle_timeout_ms=300, flush="never"
    )
    reader = None
    try:
        admin = await connect_raw(running)
        await create_topic(admin, "out")
        await admin.ask(request(p.ProduceBatch("out", 0, big_batch(1 << 20))))
        reader = await connect_unread(running)
        fetch = request(p.FetchBatch("out", 0, 0, 2 << 20, 0))
        reader.transport.write(fetch * 30)
        await log_watcher.wait_for("it stopped reading its responses")
        assert running.factory.slow_readers_dropped == 1
        await reactor_turns(lambda: not server_has(running, reader))
        # a new connection: the admin one has been idle for longer than idle_timeout_ms
        fresh = await connect_raw(running)
        [answer] = decoded(await fresh.ask(request(p.Metadata(("out",)))))
        assert answer == p.MetadataResult((p.TopicMetadata("out", (p.PartitionMetadata(0, 16),)),))
        await close(fresh)
    finally:
        if reader is not None:
            reader.transport.abortConnection()
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_reading_client_is_not_dropped_by_the_output_limit(broker_factory: Any) -> None:
    """A client that reads its responses gets every large one, whatever their total size."""
    running = await broker_factory(
        max_output_bytes_per_connection=256 * 1024, idle_timeout_ms=60_000, flush="never"
    )
    try:
        admin = await connect_raw(running)
        await create_topic(admin, "big")
        await admin.ask(request(p.ProduceBatch("big", 0, big_batch(1 << 20))))
        c = await connect_raw(running)
        got = c.expect(30)
        c.transport.write(request(p.FetchBatch("big", 0, 0, 2 << 20, 0)) * 30)
        await with_timeout(
            defer.DeferredList([got, c.lost], fireOnOneCallback=True, consumeErrors=True)
        )
        assert running.factory.slow_readers_dropped == 0
        answers = decoded(got.result)
        assert all(isinstance(a, p.Batches) and len(a.batches) > 1 << 20 for a in answers)
        await close(c)
        await close(admin)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_connections_beyond_the_limit_are_refused_and_logged_once(
    broker_factory: Any, log_watcher: LogWatcher
) -> None:
    """Past max_connections clients are closed unanswered, logged once per burst; others work."""
    running = await broker_factory(max_connections=3)
    try:
        kept = [await connect_raw(running) for _ in range(3)]
        for c in kept:
            assert isinstance(decoded(await c.ask(request(p.Hello(2, "k"))))[0], p.Welcome)
        refused = [await connect_raw(running) for _ in range(5)]
        for c in refused:
            c.transport.write(request(p.Hello(2, "r")))
        await with_timeout(defer.gatherResults([c.lost for c in refused]))
        assert all(c.frames == [] and c.buffer == b"" for c in refused)
        assert running.factory.refused == 5
        assert len(log_watcher.messages("refusing connections")) == 1
        for c in kept:
            assert isinstance(decoded(await c.ask(request(p.Hello(2, "k"))))[0], p.Welcome)
        await close(kept.pop())
        await reactor_turns(lambda: len(running.factory.connections) == 2)
        again = await connect_raw(running)
        assert isinstance(decoded(await again.ask(request(p.Hello(2, "a"))))[0], p.Welcome)
        assert len(log_watcher.messages("accepting connections again (5 refused)")) == 1
        late = await connect_raw(running)
        await with_timeout(late.lost)
        assert len(log_watcher.messages("refusing connections")) == 2
        for c in [*kept, again]:
            await close(c)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_idle_connection_is_closed_but_a_long_poll_is_not_idle(broker_factory: Any) -> None:
    """A silent connection is dropped after idle_timeout_ms; one awaiting a long-poll is kept."""
    running = await broker_factory(idle_timeout_ms=100, fetch_max_wait_ms=400)
    try:
        admin = await connect_raw(running)
        await create_topic(admin, "idle")
        await close(admin)
        silent = await connect_raw(running)
        polling = await connect_raw(running)
        started = time.monotonic()
        answer = defer.ensureDeferred(
            polling.ask(request(p.FetchBatch("idle", 0, 0, 1024, 60_000)))
        )
        await with_timeout(silent.lost)
        assert silent.frames == [] and silent.buffer == b""
        [batches] = decoded(await answer)
        assert batches == p.Batches(0, 0, b"")
        assert time.monotonic() - started >= 0.35
        assert not polling.lost.called
        await close(polling)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_long_poll_wait_is_capped_by_fetch_max_wait_ms(broker_factory: Any) -> None:
    """A FetchBatch asking for a ten-minute wait returns after the configured cap."""
    running = await broker_factory(fetch_max_wait_ms=50)
    try:
        c = await connect_raw(running)
        await create_topic(c, "wait")
        started = time.monotonic()
        [answer] = decoded(await c.ask(request(p.FetchBatch("wait", 0, 0, 1024, 600_000))))
        elapsed = time.monotonic() - started
        assert answer == p.Batches(0, 0, b"")
        assert 0.04 <= elapsed < 5
        await close(c)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_fetch_response_is_capped_by_fetch_max_bytes(broker_factory: Any) -> None:
    """A FetchBatch asking for 1 GiB gets whole batches totalling at most fetch_max_bytes."""
    running = await broker_factory(fetch_max_bytes=4096)
    try:
        c = await connect_raw(running)
        await create_topic(c, "cap")
        batch = encode_batch([Record(None, b"x" * 900)])
        for _ in range(20):
            await c.ask(request(p.ProduceBatch("cap", 0, batch)))
        [answer] = decoded(await c.ask(request(p.FetchBatch("cap", 0, 0, 1 << 30, 0))))
        assert isinstance(answer, p.Batches) and answer.high_watermark == 20
        assert len(batch) < len(answer.batches) <= 4096
        assert len(validate_batches(bytes(answer.batches))) == len(answer.batches) // len(batch)
        await close(c)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_partition_cap_bounds_topic_creation(broker_factory: Any) -> None:
    """Valid but greedy creates stop at max_partitions; existing topics keep working."""
    running = await broker_factory(max_partitions=10)
    try:
        c = await connect_raw(running)
        await create_topic(c, "a", 6)
        [refused] = decoded(await c.ask(request(p.CreateTopic("b", 5))))
        assert isinstance(refused, p.Failure) and "limit of 10 partitions" in refused.message
        [refused] = decoded(await c.ask(request(p.AlterTopic("a", 11))))
        assert isinstance(refused, p.Failure)
        [auto] = decoded(await c.ask(request(p.Produce("auto", b"k", b"v"))))
        assert isinstance(auto, p.Produced)
        [refused] = decoded(await c.ask(request(p.Produce("more", b"k", b"v"))))
        assert isinstance(refused, p.Error) and "limit of 10 partitions" in refused.message
        assert sorted(running.broker.logs.topics) == ["a", "auto"]
        await close(c)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_oversized_frame_closes_even_with_output_backed_up(broker_factory: Any) -> None:
    """Answers queued before an oversized frame are delivered, then the connection closes."""
    running = await broker_factory(max_frame_bytes=64 * 1024, flush="never")
    try:
        admin = await connect_raw(running)
        await create_topic(admin, "o")
        await admin.ask(request(p.ProduceBatch("o", 0, big_batch(60 * 1024, chunk=60 * 1024))))
        c = await connect_raw(running)
        got = c.expect(201)
        fetch = request(p.FetchBatch("o", 0, 0, 1 << 20, 0))
        c.transport.write(fetch * 200 + struct.pack("!I", 1 << 20))
        answers = decoded(await with_timeout(got))
        assert all(isinstance(a, p.Batches) for a in answers[:200])
        assert isinstance(answers[200], p.Error) and "exceeds the maximum" in answers[200].message
        await with_timeout(c.lost)
        await close(admin)
    finally:
        await running.stop()
