"""The broker over real TCP with hand-built frames: docs/protocol.md byte for byte.

These tests deliberately avoid rustka.client.protocol so that the wire format is checked
against the spec, not against our own codec.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer
from twisted.internet.protocol import Protocol

from rustka.partitioner import partition_for_key
from rustka.record.batch import Record, encode_batch
from tests.conftest import RunningBroker, within


def s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("!I", len(raw)) + raw


def b(raw: bytes) -> bytes:
    return struct.pack("!I", len(raw)) + raw


def frame(payload: bytes) -> bytes:
    return struct.pack("!I", len(payload)) + payload


def produce(topic: str, key: bytes, value: bytes) -> bytes:
    return frame(b"\x01" + s(topic) + b(key) + b(value))


def fetch(topic: str, partition: int, offset: int) -> bytes:
    return frame(b"\x02" + s(topic) + struct.pack("!IQ", partition, offset))


def commit(group: str, topic: str, partition: int, offset: int) -> bytes:
    return frame(b"\x03" + s(group) + s(topic) + struct.pack("!IQ", partition, offset))


def offset_fetch(group: str, topic: str, partition: int) -> bytes:
    return frame(b"\x04" + s(group) + s(topic) + struct.pack("!I", partition))


def produced(partition: int, offset: int) -> bytes:
    return b"\x01" + struct.pack("!IQ", partition, offset)


def record(offset: int, key: bytes, value: bytes) -> bytes:
    return b"\x02" + struct.pack("!Q", offset) + b(key) + b(value)


NOT_FOUND = b"\x03"
COMMIT_OK = b"\x05"


def error_message(payload: bytes) -> str:
    assert payload[0] == 4, payload
    (length,) = struct.unpack_from("!I", payload, 1)
    assert len(payload) == 5 + length
    return payload[5:].decode()


class RawClient(Protocol):
    """Collects response payloads; `expect(n)` waits for n more of them."""

    def __init__(self) -> None:
        self.buffer = b""
        self.frames: list[bytes] = []
        self._want: list[tuple[int, defer.Deferred[list[bytes]]]] = []
        self.lost: defer.Deferred[None] = defer.Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 4:
            (n,) = struct.unpack_from("!I", self.buffer)
            if len(self.buffer) < 4 + n:
                break
            self.frames.append(self.buffer[4 : 4 + n])
            self.buffer = self.buffer[4 + n :]
        self._check()

    def _check(self) -> None:
        for item in list(self._want):
            count, d = item
            if len(self.frames) >= count:
                self._want.remove(item)
                got, self.frames = self.frames[:count], self.frames[count:]
                d.callback(got)

    def connectionLost(self, reason: Any = None) -> None:
        self.lost.callback(None)

    def expect(self, count: int) -> defer.Deferred[list[bytes]]:
        from twisted.internet import reactor

        d: defer.Deferred[list[bytes]] = defer.Deferred()
        self._want.append((count, d))
        self._check()
        return d.addTimeout(15, reactor)

    async def ask(self, *frames: bytes) -> list[bytes]:
        self.transport.write(b"".join(frames))
        return await self.expect(len(frames))


async def connect_raw(broker: RunningBroker) -> RawClient:
    from twisted.internet import reactor
    from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

    proto = RawClient()
    await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", broker.port), proto)
    return proto


async def close(proto: RawClient) -> None:
    proto.transport.loseConnection()
    await proto.lost


@pytest_twisted.ensureDeferred
async def test_seed_round_trip_byte_for_byte(broker: RunningBroker) -> None:
    """Produce, Fetch, Commit and OffsetFetch answer with exactly the seed's bytes."""
    c = await connect_raw(broker)
    part = partition_for_key(b"user-1", 3)
    assert await c.ask(produce("orders", b"user-1", b"placed order")) == [produced(part, 0)]
    assert await c.ask(produce("orders", b"user-1", b"paid")) == [produced(part, 1)]
    assert await c.ask(fetch("orders", part, 0), fetch("orders", part, 1)) == [
        record(0, b"user-1", b"placed order"),
        record(1, b"user-1", b"paid"),
    ]
    assert await c.ask(fetch("orders", part, 2)) == [NOT_FOUND]
    assert await c.ask(offset_fetch("analytics", "orders", part)) == [NOT_FOUND]
    assert await c.ask(commit("analytics", "orders", part, 2)) == [COMMIT_OK]
    assert await c.ask(offset_fetch("analytics", "orders", part)) == [
        b"\x06" + struct.pack("!Q", 2)
    ]
    await close(c)


@pytest_twisted.ensureDeferred
async def test_auto_create_makes_default_partitions(broker: RunningBroker, data_dir: Path) -> None:
    """The first Produce creates the topic with three numbered partition folders."""
    c = await connect_raw(broker)
    await c.ask(produce("events", b"", b"x"))
    assert sorted(p.name for p in (data_dir / "events").iterdir()) == ["0", "1", "2"]
    await close(c)


@pytest_twisted.ensureDeferred
async def test_empty_key_routes_like_kafka(broker: RunningBroker) -> None:
    """An empty key is hashed like any other key (docs/protocol.md, section 4)."""
    c = await connect_raw(broker)
    [resp] = await c.ask(produce("t", b"", b"v"))
    assert resp == produced(partition_for_key(b"", 3), 0)
    await close(c)


@pytest_twisted.ensureDeferred
async def test_pipelined_requests_are_answered_in_order(broker: RunningBroker) -> None:
    """Hundreds of requests sent in one write come back one each, in arrival order."""
    c = await connect_raw(broker)
    await c.ask(produce("p", b"k", b"seed"))
    part = partition_for_key(b"k", 3)
    frames = []
    expected = []
    for i in range(300):
        frames.append(produce("p", b"k", f"v{i}".encode()))
        expected.append(produced(part, i + 1))
        frames.append(fetch("p", part, i // 2))
        expected.append(None)
        frames.append(b"\x00\x00\x00\x01\x63")
        expected.append("bad")
    answers = await c.ask(*frames)
    assert len(answers) == len(frames)
    for got, want in zip(answers, expected, strict=True):
        if want == "bad":
            assert "unknown op 99" in error_message(got)
        elif want is None:
            assert got[0] == 2
        else:
            assert got == want
    await close(c)


@pytest_twisted.ensureDeferred
async def test_bad_requests_get_errors_and_the_connection_lives(
    broker: RunningBroker, data_dir: Path
) -> None:
    """Malformed frames are answered with Error and later requests still work."""
    c = await connect_raw(broker)
    cases = {
        b"": "empty",
        b"\x63": "unknown op",
        b"\x01\x00\x00": "truncated",
        b"\x01" + s("t") + b(b"k") + b(b"v") + b"junk": "trailing",
        b"\x01\x00\x00\x00\x02\xff\xfe" + b(b"k") + b(b"v"): "UTF-8",
        b"\x02" + s("t") + b"\x00\x00\x00\x00": "truncated",
        b"\x01\xff\xff\xff\xff": "truncated",
    }
    for payload, words in cases.items():
        [answer] = await c.ask(frame(payload))
        assert words.lower() in error_message(answer).lower(), (payload, answer)
    assert await c.ask(produce("ok", b"k", b"v")) == [produced(partition_for_key(b"k", 3), 0)]
    assert sorted(p.name for p in data_dir.iterdir() if not p.name.startswith(".")) == [
        "__offsets",
        "ok",
    ]
    await close(c)


@pytest_twisted.ensureDeferred
async def test_invalid_topic_names_create_nothing(broker: RunningBroker, data_dir: Path) -> None:
    """Traversal, separators, reserved and oversized names get Error and touch no disk."""
    c = await connect_raw(broker)
    for name in ["", ".", "..", "../evil", "a/b", "a\\b", "__offsets", "__x", "x" * 250, "sp ace"]:
        [answer] = await c.ask(produce(name, b"k", b"v"))
        assert "invalid topic name" in error_message(answer)
        [answer] = await c.ask(fetch(name, 0, 0))
        assert "invalid topic name" in error_message(answer)
    entries = {p.name for p in data_dir.iterdir()} - {".clean-shutdown"}
    assert entries == {"__offsets"}
    assert not (data_dir.parent / "evil").exists()
    await close(c)


@pytest_twisted.ensureDeferred
async def test_unknown_topic_and_partition(broker: RunningBroker) -> None:
    """Fetch and Commit never create topics; unknown partitions are named in the error."""
    c = await connect_raw(broker)
    [a] = await c.ask(fetch("nope", 0, 0))
    assert "unknown topic" in error_message(a)
    [a] = await c.ask(commit("g", "nope", 0, 1))
    assert "unknown topic" in error_message(a)
    await c.ask(produce("yes", b"k", b"v"))
    [a] = await c.ask(fetch("yes", 7, 0))
    assert "unknown partition 7" in error_message(a)
    [a] = await c.ask(commit("g", "yes", 3, 0))
    assert "unknown partition 3" in error_message(a)
    await close(c)


@pytest_twisted.ensureDeferred
async def test_oversized_frame_is_refused_before_buffering(broker_factory: Any) -> None:
    """A frame longer than max_frame_bytes gets one Error and a close; others are unaffected."""
    running = await broker_factory(max_frame_bytes=4096)
    try:
        victim = await connect_raw(running)
        bystander = await connect_raw(running)
        victim.transport.write(struct.pack("!I", 1 << 30) + b"x" * 100)
        [answer] = await victim.expect(1)
        assert "exceeds the maximum of 4096" in error_message(answer)
        await victim.lost
        assert await bystander.ask(produce("t", b"k", b"v")) == [
            produced(partition_for_key(b"k", 3), 0)
        ]
        await close(bystander)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_frames_split_into_single_bytes(broker: RunningBroker) -> None:
    """A request dribbled one byte per write is reassembled correctly."""
    from twisted.internet import reactor, task

    c = await connect_raw(broker)
    data = produce("drip", b"k", b"v" * 50)
    waiting = c.expect(1)
    for i in range(len(data)):
        c.transport.write(data[i : i + 1])
        await task.deferLater(reactor, 0, lambda: None)
    assert await waiting == [produced(partition_for_key(b"k", 3), 0)]
    await close(c)


@pytest_twisted.ensureDeferred
async def test_concurrent_producers_get_contiguous_distinct_offsets(
    broker: RunningBroker,
) -> None:
    """Ten connections producing to one partition get every offset exactly once."""
    clients = [await connect_raw(broker) for _ in range(10)]
    await clients[0].ask(produce("c", b"same", b"first"))
    part = partition_for_key(b"same", 3)
    results = await defer.gatherResults(
        [
            defer.ensureDeferred(
                c.ask(*[produce("c", b"same", f"{i}-{j}".encode()) for j in range(50)])
            )
            for i, c in enumerate(clients)
        ]
    )
    offsets = []
    for answers in results:
        for answer in answers:
            got_part, off = struct.unpack("!IQ", answer[1:])
            assert answer[0] == 1 and got_part == part
            offsets.append(off)
        assert [struct.unpack("!Q", a[5:])[0] for a in answers] == sorted(
            struct.unpack("!Q", a[5:])[0] for a in answers
        )
    assert sorted(offsets) == list(range(1, 501))
    for c in clients:
        await close(c)


@pytest_twisted.ensureDeferred
async def test_restart_keeps_records_and_commits(broker_factory: Any, data_dir: Path) -> None:
    """After a clean stop and start, every record and committed offset is there."""
    first = await broker_factory()
    c = await connect_raw(first)
    answers = await c.ask(*[produce("r", f"k{i}".encode(), f"v{i}".encode()) for i in range(60)])
    placed = [struct.unpack("!IQ", a[1:]) for a in answers]
    await c.ask(commit("g", "r", 1, 5))
    await close(c)
    await first.stop()
    assert (data_dir / ".clean-shutdown").exists()

    second = await broker_factory()
    try:
        assert not second.broker.logs.recovered
        c = await connect_raw(second)
        for i, (part, off) in enumerate(placed):
            assert await c.ask(fetch("r", part, off)) == [
                record(off, f"k{i}".encode(), f"v{i}".encode())
            ]
        assert await c.ask(offset_fetch("g", "r", 1)) == [b"\x06" + struct.pack("!Q", 5)]
        await close(c)
    finally:
        await second.stop()


@pytest_twisted.ensureDeferred
async def test_fetch_below_log_start_names_the_earliest_offset(broker_factory: Any) -> None:
    """A Fetch of an offset deleted by retention is out of range and names the earliest one."""
    running = await broker_factory(segment_bytes=200, retention_bytes=400)
    try:
        c = await connect_raw(running)
        for i in range(40):
            await c.ask(produce("ret", b"k", f"value-{i:04d}".encode()))
        await running.broker.enforce_retention()
        part = partition_for_key(b"k", 3)
        start = running.broker.logs.topic("ret").partition(part).log_start_offset
        assert start > 0
        [answer] = await c.ask(fetch("ret", part, 0))
        message = error_message(answer)
        assert "out of range" in message and f"earliest available offset is {start}" in message
        assert (await c.ask(fetch("ret", part, start)))[0][0] == 2
        await close(c)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_batch_between_seed_produces_keeps_its_place(broker: RunningBroker) -> None:
    """Produce, ProduceBatch, Produce in one write land at offsets 0, 1, 2 of the partition."""
    from twisted.internet import reactor

    from rustka.client.protocol import connect

    setup = await within(defer.ensureDeferred(connect(reactor, broker.address)))
    await within(setup.create_topic("mixed", 1))
    await within(setup.close())
    batch = encode_batch([Record(b"middle", b"from a batch")])
    produce_batch = frame(b"\x06" + s("mixed") + struct.pack("!II", 0, len(batch)) + batch)
    c = await connect_raw(broker)
    answers = await c.ask(
        produce("mixed", b"a", b"first"), produce_batch, produce("mixed", b"c", b"last")
    )
    assert answers[0] == produced(0, 0)
    assert answers[1][0] == 8 and struct.unpack_from("!IQQ", answers[1], 1) == (0, 1, 1)
    assert answers[2] == produced(0, 2)
    await close(c)


def failure(payload: bytes) -> tuple[int, str]:
    """The (code, message) of a tag 14 Failure payload."""
    assert payload[0] == 14, payload
    (code, length) = struct.unpack_from("!HI", payload, 1)
    assert len(payload) == 7 + length
    return code, payload[7:].decode()


@pytest_twisted.ensureDeferred
async def test_delete_topic_removes_its_data_and_name(
    broker: RunningBroker, data_dir: Path
) -> None:
    """Op 13 (docs/protocol.md 7.9): answered with tag 16 once the files are gone."""
    c = await connect_raw(broker)
    [created] = await c.ask(frame(b"\x09" + s("doomed") + struct.pack("!I", 2)))
    assert created == b"\x0b" + s("doomed") + struct.pack("!I", 2)
    await c.ask(produce("doomed", b"k", b"v"), produce("kept", b"k", b"v"))
    assert any(path.name.startswith("doomed") for path in data_dir.iterdir())
    answers = await c.ask(
        frame(b"\x0d" + s("doomed")),
        fetch("doomed", partition_for_key(b"k", 2), 0),
        frame(b"\x0d" + s("doomed")),
        frame(b"\x0d" + s("__offsets")),
        frame(b"\x0d" + s("no/such")),
    )
    assert answers[0] == b"\x10" + s("doomed")
    assert "unknown topic" in error_message(answers[1])
    assert failure(answers[2])[0] == 4
    assert failure(answers[3])[0] == 3
    assert failure(answers[4])[0] == 3
    assert not any(path.name.startswith("doomed") for path in data_dir.iterdir())
    [kept] = await c.ask(fetch("kept", partition_for_key(b"k", 3), 0))
    assert kept == record(0, b"k", b"v")
    await close(c)


@pytest_twisted.ensureDeferred
async def test_client_delete_topic(broker: RunningBroker) -> None:
    """RustkaClientProtocol.delete_topic fires once deleted and raises UnknownTopic after."""
    from rustka.errors import UnknownTopic

    client = await within(defer.ensureDeferred(broker.client()))
    try:
        await within(client.create_topic("short-lived", 1))
        assert await within(client.delete_topic("short-lived")) is None
        assert await within(client.metadata()) == []
        with pytest.raises(UnknownTopic):
            await within(client.delete_topic("short-lived"))
    finally:
        await within(client.close())


async def connect_unread_after(broker: RunningBroker, first: bytes) -> RawClient:
    """A client with a tiny receive buffer that sends ``first`` and then reads nothing.

    The first bytes make the listener pick the native protocol (it decides on
    the first frame), so the broker's side of the connection exists on return.
    """
    from twisted.internet import reactor

    from tests.conftest import reactor_turns
    from tests.test_limits import _OneProtocol, server_has

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", broker.port))
    sock.setblocking(False)
    proto = RawClient()
    reactor.adoptStreamConnection(sock.fileno(), socket.AF_INET, _OneProtocol(proto))
    sock.close()
    proto.transport.pauseProducing()
    proto.transport.write(first)
    await reactor_turns(lambda: server_has(broker, proto))
    return proto


def _queued_in_transport(transport: Any) -> int:
    """Bytes a Twisted TCP transport holds in its write buffer, not yet given to the kernel."""
    return len(transport.dataBuffer) - transport.offset + transport._tempDataLen


@pytest_twisted.ensureDeferred
async def test_seed_fetches_of_a_reader_that_never_reads_stay_within_the_budget(
    broker_factory: Any,
) -> None:
    """Pipelined seed Fetches of a big record reserve output before they are built.

    The reader sends 200 Fetches of a 16 KiB record and reads nothing. The
    broker must stop reading its requests once the 128 KiB budget is spoken
    for, hold at most about twice the budget in responses, and serve all 200
    once the client reads.
    """
    from tests.conftest import reactor_turns
    from tests.test_limits import server_side

    budget, size, total = 128 * 1024, 16 * 1024, 200
    running = await broker_factory(
        max_output_bytes_per_connection=budget, idle_timeout_ms=120_000, flush="never"
    )
    reader = None
    try:
        admin = await connect_raw(running)
        await admin.ask(frame(b"\x09" + s("big") + struct.pack("!I", 1)))
        value = bytes(range(256)) * (size // 256)
        await admin.ask(produce("big", b"k", value))
        reader = await connect_unread_after(running, frame(b"\x0b"))
        proto = await server_side(running, reader)
        # Small kernel buffers on the broker's side too, so its own write buffer fills.
        proto.transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        reader.transport.write(fetch("big", 0, 0) * total)
        # Settled: every started Fetch was answered and handed to the transport,
        # which is full, and the next one waits for the budget.
        await reactor_turns(lambda: proto.budget.reserved == 0 and "output" in proto.reading_paused)
        assert "budget" in proto.reading_paused
        assert proto.requests <= 3 * budget // size  # of 201 sent
        queued = _queued_in_transport(proto.transport)
        assert size <= queued <= 2 * budget + size
        # The admin connection is served meanwhile.
        [answer] = await admin.ask(fetch("big", 0, 0))
        assert answer == record(0, b"k", value)
        reader.transport.resumeProducing()
        [groups, *answers] = await reader.expect(1 + total)
        assert groups == b"\x0c" + struct.pack("!I", 0)
        assert answers == [record(0, b"k", value)] * total
        assert proto.requests == 1 + total and proto.budget.reserved == 0
        assert proto.reading_paused == frozenset()
        await close(admin)
    finally:
        if reader is not None:
            reader.transport.abortConnection()
        await running.stop()


@pytest.mark.usefixtures("force_fast_paths")
@pytest_twisted.ensureDeferred
async def test_answers_leave_on_the_socket_in_the_reactor_pass_that_makes_them(
    broker: RunningBroker,
) -> None:
    """With nothing buffered, an answer is sent by the call that writes it
    (rustka.eager_write), not on a later reactor pass; pipelined produces and
    fetches still answer in request order."""
    from rustka.eager_write import EagerWriter
    from tests.test_limits import server_side

    c = await connect_raw(broker)
    assert await c.ask(frame(b"\x09" + s("eager") + struct.pack("!I", 1))) != []
    proto = await server_side(broker, c)
    writer = proto._out
    assert isinstance(writer, EagerWriter)
    sent_before = writer.sent_now
    requests = []
    for i in range(40):
        requests.append(produce("eager", b"k", b"v%d" % i))
        if i % 10 == 9:
            requests.append(fetch("eager", 0, i))
    answers = await c.ask(*requests)
    expected = []
    for i in range(40):
        expected.append(produced(0, i))
        if i % 10 == 9:
            expected.append(record(i, b"k", b"v%d" % i))
    assert answers == expected
    # Every answer went out whole from the writer: none waited in Twisted's buffer.
    assert writer.sent_now > sent_before
    assert writer.handed_on == 0
    await close(c)


@pytest.mark.usefixtures("force_fast_paths")
@pytest_twisted.ensureDeferred
async def test_an_io_thread_answers_a_stored_produce_itself_in_order(
    broker: RunningBroker,
) -> None:
    """One produce at a time: the lane's thread sends the answer right after the write
    (`BrokerProtocol._answer_early`), and the offsets come back in order."""
    from tests.conftest import reactor_turns
    from tests.test_limits import server_side

    c = await connect_raw(broker)
    assert await c.ask(frame(b"\x09" + s("direct") + struct.pack("!I", 1))) != []
    proto = await server_side(broker, c)
    for i in range(30):
        assert await c.ask(produce("direct", b"k", b"v%d" % i)) == [produced(0, i)]
    # The answers went out from the thread (the reactor may take one over when it holds
    # the connection's output at that moment).
    assert proto.answered_early > 0
    # The thread takes its slots out of the queue after its send, so the client may
    # read the last answer a moment before.
    await reactor_turns(lambda: proto.pending == 0)
    await close(c)


@pytest.mark.usefixtures("force_fast_paths")
@pytest_twisted.ensureDeferred
async def test_pipelined_answers_from_io_threads_and_the_reactor_never_interleave(
    broker: RunningBroker,
) -> None:
    """Four real clients pipeline produces to four partitions with fetches and
    metadata in between. Produce answers are sent by the lanes' threads where they own
    the connection's output and by the reactor otherwise; fetches and metadata always by
    the reactor. Each client gets every answer whole and in request order: offsets per
    partition contiguous, each fetch the record it asked for."""
    from tests.test_limits import server_side

    admin = await connect_raw(broker)
    await admin.ask(frame(b"\x09" + s("mixed") + struct.pack("!I", 4)))
    clients = [await within(defer.ensureDeferred(broker.client())) for _ in range(4)]
    keys = {}
    for n in range(64):
        key = b"key-%d" % n
        keys.setdefault(partition_for_key(key, 4), key)
        if len(keys) == 4:
            break
    rounds = 6
    per_round = 50
    offsets: dict[tuple[int, int], list[int]] = {}
    for _ in range(rounds):
        pending = []
        for ci, c in enumerate(clients):
            for i in range(per_round):
                part = (ci + i) % 4
                pending.append((ci, "p", part, c.produce("mixed", keys[part], b"%d-%d" % (ci, i))))
                if i % 7 == 6:
                    pending.append((ci, "f", part, c.fetch("mixed", part, 0)))
                if i % 17 == 16:
                    pending.append((ci, "m", part, c.metadata(["mixed"])))
        results = await within(defer.gatherResults([d for *_, d in pending]))
        for (ci, kind, part, _), result in zip(pending, results, strict=True):
            if kind == "p":
                assert result[0] == part
                offsets.setdefault((ci, part), []).append(result[1])
            elif kind == "f":
                assert result is not None and result.offset == 0 and result.key == keys[part]
            else:
                assert [t.name for t in result] == ["mixed"]
    for part in range(4):
        mine = [offsets[(ci, part)] for ci in range(4)]
        # Each client's produces to a partition were stored in the order it sent them...
        assert all(o == sorted(o) for o in mine)
        # ...and together they are every offset of the partition exactly once.
        together = sorted(o for each in mine for o in each)
        assert together == list(range(len(together)))
    assert sum(len(o) for o in offsets.values()) == rounds * per_round * len(clients)
    protos = [await server_side(broker, c) for c in clients]
    early = sum(proto.answered_early for proto in protos)
    reactor_written = sum(proto._out.sent_now + proto._out.handed_on for proto in protos)
    assert early > 0, "no produce was answered by a lane's thread"
    assert reactor_written > 0
    for c in clients:
        await within(c.close())
    await close(admin)


@pytest_twisted.ensureDeferred
async def test_a_reader_that_stops_reading_still_pauses_with_answers_from_io_threads(
    broker_factory: Any,
) -> None:
    """A client pipelines produces and 80 KiB fetches and reads nothing: the lanes'
    threads send while the kernel takes the answers, then the transport buffers the
    rest and pauses the connection; once the client reads, every answer arrives in
    order."""
    from tests.conftest import reactor_turns
    from tests.test_limits import server_side

    running = await broker_factory(idle_timeout_ms=120_000, flush="never")
    reader = None
    try:
        admin = await connect_raw(running)
        await admin.ask(frame(b"\x09" + s("slow") + struct.pack("!I", 1)))
        # Each fetch answer alone overfills Twisted's 64 KiB buffer: the pause comes after
        # a few round trips through the pool, not dozens.
        value = bytes(range(256)) * 320
        await admin.ask(produce("slow", b"k", value))
        reader = await connect_unread_after(running, frame(b"\x0b"))
        proto = await server_side(running, reader)
        proto.transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        pairs = 40
        reader.transport.write((produce("slow", b"k", b"small") + fetch("slow", 0, 0)) * pairs)
        await reactor_turns(lambda: "output" in proto.reading_paused)
        assert _queued_in_transport(proto.transport) > 0
        reader.transport.resumeProducing()
        [groups, *answers] = await reader.expect(1 + 2 * pairs)
        assert groups == b"\x0c" + struct.pack("!I", 0)
        expected = []
        for i in range(pairs):
            expected += [produced(0, 1 + i), record(0, b"k", value)]
        assert answers == expected
        assert proto.reading_paused == frozenset()
        await close(admin)
    finally:
        if reader is not None:
            reader.transport.abortConnection()
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_connection_reset_while_its_produces_are_answered(broker: RunningBroker) -> None:
    """A client pipelines produces and resets the connection before reading: whichever
    thread is answering finds it gone, the connection goes, nothing is stuck, and the
    next client's produces land after every record stored."""
    from twisted.internet import reactor
    from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

    admin = await connect_raw(broker)
    await admin.ask(frame(b"\x09" + s("reset") + struct.pack("!I", 1)))
    for attempt in range(5):
        proto = RawClient()
        await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", broker.port), proto)
        proto.transport.write(b"".join(produce("reset", b"k", b"v") for _ in range(200)))
        proto.transport.socket.setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
        )
        if attempt % 2:
            await within(proto.expect(1))
        proto.transport.abortConnection()
        await within(proto.lost)
    from tests.conftest import reactor_turns

    await reactor_turns(lambda: len(broker.factory.connections) == 1)
    # Whatever of the reset clients' produces was stored, the offsets stay contiguous.
    [answer] = await admin.ask(produce("reset", b"k", b"after"))
    (offset,) = struct.unpack("!Q", answer[5:13])
    [last] = await admin.ask(fetch("reset", 0, offset))
    assert last == record(offset, b"k", b"after")
    if offset:
        [before] = await admin.ask(fetch("reset", 0, offset - 1))
        assert before == record(offset - 1, b"k", b"v")
    await close(admin)


@pytest.mark.usefixtures("force_fast_paths")
@pytest_twisted.ensureDeferred
async def test_twisted_closes_the_socket_only_under_the_connections_output_lock(
    broker: RunningBroker,
) -> None:
    """An I/O thread answering a produce sends under the connection's output lock;
    Twisted's own close of the socket takes the same lock, so the descriptor cannot
    be closed (and given to a new connection) between the thread's check and its
    send."""
    import threading
    import types

    from rustka.eager_write import _LockedCloseSocket, close_under_lock

    client = await connect_raw(broker)
    # The connection serves with the moved descriptor.
    [answer] = await client.ask(produce("locked", b"k", b"v"))
    assert answer[:1] == b"\x01"
    port = client.transport.getHost().port
    [server] = [c for c in broker.factory.connections if c.transport.getPeer().port == port]
    sock = server.transport.socket
    assert isinstance(sock, _LockedCloseSocket) and sock.lock is server._out_lock
    assert server.transport.fileno() == sock.fileno() >= 0

    # Its close waits for the lock (shown on a socket of its own, not the served one).
    a, b = socket.socketpair()
    b.close()
    holder_of = types.SimpleNamespace(socket=a, fileno=a.fileno)
    lock = threading.RLock()
    close_under_lock(lock, holder_of)
    moved = holder_of.socket
    assert isinstance(moved, _LockedCloseSocket) and holder_of.fileno() == moved.fileno()
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with lock:
            held.set()
            release.wait(30)

    holding = threading.Thread(target=holder)
    holding.start()
    assert held.wait(30)
    closing = threading.Thread(target=moved.close)
    closing.start()
    closing.join(0.2)
    assert closing.is_alive() and moved.fileno() >= 0  # waits for the lock
    release.set()
    closing.join(30)
    holding.join(30)
    assert moved.fileno() == -1


@pytest_twisted.ensureDeferred
async def test_thousands_of_pipelined_requests_that_fail_at_once_are_all_answered(
    broker: RunningBroker,
) -> None:
    """Reads held behind a write start one after another as it ends; each of these is
    answered at once (a bad topic name), so starting the next one must not nest a call
    per request: all 3,000 are answered, in order, and the connection still serves."""
    client = await connect_raw(broker)
    pairs = 1500
    client.transport.write(
        b"".join(produce("bad name!", b"k", b"v") + fetch("bad name!", 0, 0) for _ in range(pairs))
    )
    answers = await within(client.expect(2 * pairs), 60)
    assert len(answers) == 2 * pairs
    assert all(a[:1] == b"\x04" and b"name" in a for a in answers), answers[:2]
    [answer] = await client.ask(produce("fine", b"k", b"v"))
    assert answer[:1] == b"\x01" and answer[5:] == struct.pack("!Q", 0)
