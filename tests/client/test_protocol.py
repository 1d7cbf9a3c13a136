"""The Twisted client against a real broker over TCP on 127.0.0.1.

A few cases need a broker that misbehaves (unsolicited responses, unknown
error codes, oversized frames); those run against a small scripted server
that speaks real frames over a real socket, never against a mocked transport.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer
from twisted.internet.protocol import Factory, Protocol

from rustka.client.protocol import (
    DEFAULT_PORT,
    BrokerError,
    ConnectionClosed,
    FetchResult,
    RustkaClientProtocol,
    _error_from,
    _host_port,
    _unpack_batches,
    client_endpoint,
    connect,
)
from rustka.errors import (
    BrokerUnavailable,
    CorruptBatch,
    InvalidBatch,
    InvalidConfig,
    InvalidName,
    InvalidPartitionCount,
    InvalidRequest,
    OffsetOutOfRange,
    RustkaError,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)
from rustka.native import codec as p
from rustka.record.batch import Record, encode_batch
from tests.conftest import RunningBroker


def within(d: defer.Deferred[Any], seconds: float = 10) -> defer.Deferred[Any]:
    """Fail instead of hanging the suite if a Deferred never fires."""
    from twisted.internet import reactor

    return d.addTimeout(seconds, reactor)


async def connect_to(address: str, **kwargs: Any) -> RustkaClientProtocol:
    from twisted.internet import reactor

    return await within(defer.ensureDeferred(connect(reactor, address, **kwargs)))


@pytest_twisted.async_yield_fixture
async def client(broker: RunningBroker) -> AsyncIterator[RustkaClientProtocol]:
    c = await connect_to(broker.address)
    try:
        yield c
    finally:
        await within(c.close())


async def failure_of(d: defer.Deferred[Any]) -> BaseException:
    """The exception a Deferred fails with; a success is a test failure."""
    try:
        result = await within(d)
    except Exception as exc:
        return exc
    raise AssertionError(f"expected a failure, got {result!r}")


# --------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("localhost:9093", ("localhost", 9093)),
        ("localhost", ("localhost", DEFAULT_PORT)),
        (" 10.0.0.1:1 ", ("10.0.0.1", 1)),
        ("[::1]:9094", ("::1", 9094)),
        ("[::1]", ("::1", DEFAULT_PORT)),
        ("::1", ("::1", DEFAULT_PORT)),
    ],
)
def test_host_port_parsing(address: str, expected: tuple[str, int]) -> None:
    """HOST:PORT, bare hosts and IPv6 forms resolve to (host, port), 9092 by default."""
    assert _host_port(address) == expected


@pytest.mark.parametrize(
    "address", ["", ":9092", "host:0", "host:65536", "host:x", "[::1", "[::1]x"]
)
def test_bad_addresses_are_refused(address: str) -> None:
    """Malformed addresses raise RustkaError naming the address, before any connect."""
    with pytest.raises(RustkaError, match="invalid broker address"):
        _host_port(address)


def test_endpoint_strings_go_to_client_from_string() -> None:
    """Strings with '=' or an endpoint prefix are parsed as Twisted endpoint descriptions."""
    from twisted.internet import reactor
    from twisted.internet.endpoints import HostnameEndpoint, TCP4ClientEndpoint, UNIXClientEndpoint

    assert isinstance(client_endpoint(reactor, "tcp:host=127.0.0.1:port=9", 1), TCP4ClientEndpoint)
    assert isinstance(client_endpoint(reactor, "unix:path=/tmp/x.sock", 1), UNIXClientEndpoint)
    assert isinstance(client_endpoint(reactor, "example.com:9092", 1), HostnameEndpoint)
    with pytest.raises(RustkaError, match="invalid broker endpoint"):
        client_endpoint(reactor, "tcp:host=127.0.0.1:bogus=1", 1)


def test_error_tag_becomes_broker_error() -> None:
    """Tag 4 maps to BrokerError carrying the broker's message."""
    exc = _error_from(p.Error("unknown topic 'x'"), "Fetch")
    assert type(exc) is BrokerError and str(exc) == "unknown topic 'x'"


@pytest.mark.parametrize(
    ("code", "cls"),
    [(4, UnknownTopic), (5, UnknownPartition), (9, TopicExists), (2, InvalidRequest)],
)
def test_failure_tag_becomes_the_coded_class(code: int, cls: type[RustkaError]) -> None:
    """Tag 14 maps to the rustka.errors class whose code it carries."""
    exc = _error_from(p.Failure(code, "msg"), "op")
    assert type(exc) is cls and str(exc) == "msg"


def test_unknown_failure_code_falls_back_but_keeps_the_code() -> None:
    """A code this client does not know becomes RustkaError with that code preserved."""
    exc = _error_from(p.Failure(777, "from the future"), "op")
    assert type(exc) is RustkaError and exc.code == 777
    assert RustkaError.code == 1


def test_out_of_range_tag_becomes_offset_out_of_range() -> None:
    """Tag 15 maps to OffsetOutOfRange with the offset and both bounds."""
    exc = _error_from(p.OutOfRange(3, 10, 45), "FetchBatch")
    assert isinstance(exc, OffsetOutOfRange)
    assert (exc.offset, exc.log_start, exc.end) == (3, 10, 45)


def test_unexpected_success_tag_is_an_error() -> None:
    """A well-formed but wrong answer (CommitOk to Fetch) fails the call, naming both."""
    exc = _error_from(p.CommitOk(), "Fetch")
    assert "Fetch" in str(exc) and "CommitOk" in str(exc)


def _stored(records: list[Record], base: int) -> bytes:
    return encode_batch(records, base_offset=base, timestamp=1_700_000_000_000)


def test_unpack_batches_skips_records_before_the_requested_offset() -> None:
    """Records of the first batch below the asked offset are dropped; next_offset follows."""
    first = _stored([Record(b"a", b"0"), Record(b"b", b"1"), Record(b"c", b"2")], 10)
    second = _stored([Record(None, b"3"), Record(b"e", None)], 13)
    result = _unpack_batches(p.Batches(5, 15, first + second), 11)
    assert [(r.offset, r.key, r.value) for r in result.records] == [
        (11, b"b", b"1"),
        (12, b"c", b"2"),
        (13, None, b"3"),
        (14, b"e", None),
    ]
    assert (result.log_start, result.high_watermark, result.next_offset) == (5, 15, 15)


def test_unpack_empty_batches_keeps_the_offset() -> None:
    """An empty long-poll answer continues from the same offset."""
    assert _unpack_batches(p.Batches(0, 7, b""), 7) == FetchResult([], 0, 7, 7)


def test_unpack_batches_verifies_crc() -> None:
    """A flipped bit inside a batch is CorruptBatch, never silently wrong records."""
    data = bytearray(_stored([Record(b"k", b"value")], 0))
    data[-3] ^= 0x01
    with pytest.raises(CorruptBatch, match="CRC"):
        _unpack_batches(p.Batches(0, 1, bytes(data)), 0)


# --------------------------------------------------------------------------- seed ops


@pytest_twisted.ensureDeferred
async def test_produce_then_fetch(client: RustkaClientProtocol) -> None:
    """A produced record is fetched back at the partition and offset Produce returned."""
    partition, offset = await within(client.produce("orders", b"user-1", b"placed order"))
    assert 0 <= partition < 3 and offset == 0
    record = await within(client.fetch("orders", partition, offset))
    assert (record.key, record.value, record.offset) == (b"user-1", b"placed order", 0)


@pytest_twisted.ensureDeferred
async def test_fetch_at_the_end_is_none(client: RustkaClientProtocol) -> None:
    """Fetching at the high watermark answers None (NotFound), not an error."""
    partition, offset = await within(client.produce("orders", b"k", b"v"))
    assert await within(client.fetch("orders", partition, offset + 1)) is None


@pytest_twisted.ensureDeferred
async def test_seed_errors_are_broker_errors(client: RustkaClientProtocol) -> None:
    """Seed ops report failures as BrokerError with the broker's message."""
    exc = await failure_of(client.fetch("nope", 0, 0))
    assert type(exc) is BrokerError and "nope" in str(exc)
    exc = await failure_of(client.produce("../evil", b"k", b"v"))
    assert type(exc) is BrokerError and "invalid topic name" in str(exc)


@pytest_twisted.ensureDeferred
async def test_commit_and_committed(client: RustkaClientProtocol) -> None:
    """committed() is None before a commit and the committed value after it."""
    partition, _ = await within(client.produce("orders", b"k", b"v"))
    assert await within(client.committed("analytics", "orders", partition)) is None
    assert await within(client.commit("analytics", "orders", partition, 1)) is None
    assert await within(client.committed("analytics", "orders", partition)) == 1


@pytest_twisted.ensureDeferred
async def test_commit_to_unknown_topic_fails(client: RustkaClientProtocol) -> None:
    """Commit never creates topics: an unknown topic is a BrokerError."""
    exc = await failure_of(client.commit("g", "ghost", 0, 1))
    assert type(exc) is BrokerError


# --------------------------------------------------------------------------- extensions


@pytest_twisted.ensureDeferred
async def test_hello(client: RustkaClientProtocol) -> None:
    """Hello negotiates version 2 with all ops, or version 1 with the seed ops only."""
    welcome = await within(client.hello())
    assert welcome.version == 2 and welcome.ops == (*range(1, 20), *range(24, 38))
    assert welcome.broker.startswith("rustka")
    old = await within(client.hello(version=1, client="old-client"))
    assert (old.version, old.ops) == (1, (1, 2, 3, 4))


@pytest_twisted.ensureDeferred
async def test_produce_batch_and_fetch_batch(client: RustkaClientProtocol) -> None:
    """Records sent as one batch come back with keys, values, headers and timestamps."""
    await within(client.create_topic("events", 2))
    now = int(time.time() * 1000)
    records = [
        Record(b"a", b"1", headers=(("h", b"x"),), timestamp=now),
        Record(None, b"2", timestamp=now + 1),
        Record(b"c", None, timestamp=now + 2),
    ]
    assert await within(client.produce_batch("events", 1, records)) == (0, 2)
    assert await within(client.produce_batch("events", 1, records[:1])) == (3, 3)
    result = await within(client.fetch_batch("events", 1, 0))
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in result.records] == [
        (0, b"a", b"1", (("h", b"x"),), now),
        (1, None, b"2", (), now + 1),
        (2, b"c", None, (), now + 2),
        (3, b"a", b"1", (("h", b"x"),), now),
    ]
    assert (result.log_start, result.high_watermark, result.next_offset) == (0, 4, 4)


@pytest_twisted.ensureDeferred
async def test_consumer_loop_follows_next_offset(client: RustkaClientProtocol) -> None:
    """Following next_offset reads every record exactly once, one batch per fetch.

    max_bytes=1 still yields one whole batch per fetch (a consumer must never get
    stuck behind a batch larger than its limit), so five batches take five fetches.
    """
    for i in range(5):
        batch = [Record(b"k", b"%d-%d" % (i, j), timestamp=1_000_000 + i) for j in range(3)]
        await within(client.produce_batch("loop", 0, batch))
    offset, seen, fetches = 0, [], 0
    while True:
        result = await within(client.fetch_batch("loop", 0, offset, max_bytes=1))
        fetches += 1
        seen.extend((r.offset, r.value) for r in result.records)
        if result.next_offset == result.high_watermark:
            break
        offset = result.next_offset
    assert seen == [(3 * i + j, b"%d-%d" % (i, j)) for i in range(5) for j in range(3)]
    assert fetches == 5


@pytest_twisted.ensureDeferred
async def test_fetch_batch_from_the_middle_of_a_batch(client: RustkaClientProtocol) -> None:
    """Asking for an offset inside a stored batch returns only the records from there on."""
    await within(client.produce_batch("mid", 0, [Record(b"k", b"%d" % i) for i in range(5)]))
    result = await within(client.fetch_batch("mid", 0, 3))
    assert [(r.offset, r.value) for r in result.records] == [(3, b"3"), (4, b"4")]
    assert result.next_offset == 5


@pytest_twisted.ensureDeferred
async def test_produce_batch_accepts_raw_batch_bytes(client: RustkaClientProtocol) -> None:
    """Ready-made RecordBatch v2 bytes (two batches back to back) are stored as given."""
    data = encode_batch([Record(b"x", b"1")]) + encode_batch([Record(b"y", b"2")])
    assert await within(client.produce_batch("raw", 0, data)) == (0, 1)
    result = await within(client.fetch_batch("raw", 0, 0))
    assert [r.value for r in result.records] == [b"1", b"2"]


@pytest_twisted.ensureDeferred
async def test_produce_batch_rejects_bad_input(client: RustkaClientProtocol) -> None:
    """A corrupt batch is InvalidBatch from the broker; an empty record list fails locally."""
    data = bytearray(encode_batch([Record(b"x", b"1")]))
    data[-2] ^= 0xFF
    exc = await failure_of(client.produce_batch("raw", 0, bytes(data)))
    assert type(exc) is InvalidBatch and "CRC" in str(exc)
    exc = await failure_of(client.produce_batch("raw", 0, []))
    assert type(exc) is InvalidBatch


@pytest_twisted.ensureDeferred
async def test_fetch_batch_at_the_end_without_waiting(client: RustkaClientProtocol) -> None:
    """At the high watermark with max_wait_ms=0 the answer is empty and immediate."""
    await within(client.produce_batch("tail", 0, [Record(b"k", b"v")]))
    result = await within(client.fetch_batch("tail", 0, 1))
    assert result.records == [] and result.next_offset == 1 and result.high_watermark == 1


@pytest_twisted.ensureDeferred
async def test_fetch_batch_long_poll_wakes_on_produce(
    broker: RunningBroker, client: RustkaClientProtocol
) -> None:
    """A long poll parked at the end answers as soon as another client produces."""
    await within(client.create_topic("poll", 1))
    waiting = client.fetch_batch("poll", 0, 0, max_wait_ms=60_000)
    producer = await connect_to(broker.address)
    try:
        assert await within(producer.produce_batch("poll", 0, [Record(b"k", b"new")])) == (0, 0)
    finally:
        await within(producer.close())
    result = await within(waiting)
    assert [r.value for r in result.records] == [b"new"]


@pytest_twisted.ensureDeferred
async def test_fetch_batch_out_of_range(client: RustkaClientProtocol) -> None:
    """An offset past the high watermark raises OffsetOutOfRange carrying the bounds."""
    await within(client.produce_batch("oor", 0, [Record(b"k", b"v")] * 3))
    exc = await failure_of(client.fetch_batch("oor", 0, 9))
    assert isinstance(exc, OffsetOutOfRange)
    assert (exc.offset, exc.log_start, exc.end) == (9, 0, 3)


@pytest_twisted.ensureDeferred
async def test_fetch_batch_unknown_partition(client: RustkaClientProtocol) -> None:
    """Extension errors arrive as their coded class: here UnknownPartition."""
    await within(client.create_topic("two", 2))
    exc = await failure_of(client.fetch_batch("two", 2, 0))
    assert type(exc) is UnknownPartition


@pytest_twisted.ensureDeferred
async def test_topic_admin(client: RustkaClientProtocol) -> None:
    """create_topic and alter_topic return partition counts and refuse what they must."""
    assert await within(client.create_topic("admin", 2)) == 2
    assert type(await failure_of(client.create_topic("admin", 2))) is TopicExists
    assert await within(client.alter_topic("admin", 5)) == 5
    assert type(await failure_of(client.alter_topic("admin", 3))) is InvalidPartitionCount
    assert type(await failure_of(client.alter_topic("ghost", 3))) is UnknownTopic
    assert type(await failure_of(client.create_topic("__mine", 1))) is InvalidName


@pytest_twisted.ensureDeferred
async def test_metadata(client: RustkaClientProtocol) -> None:
    """metadata() reports each partition's bounds, for all topics or the named ones."""
    await within(client.create_topic("b-topic", 2))
    await within(client.create_topic("a-topic", 1))
    await within(client.produce_batch("b-topic", 1, [Record(b"k", b"v")] * 4))
    everything = await within(client.metadata())
    assert [t.name for t in everything] == ["a-topic", "b-topic"]
    [b_topic] = await within(client.metadata(["b-topic"]))
    assert b_topic == p.TopicMetadata(
        "b-topic", (p.PartitionMetadata(0, 0), p.PartitionMetadata(0, 4))
    )
    assert type(await failure_of(client.metadata(["ghost"]))) is UnknownTopic


@pytest_twisted.ensureDeferred
async def test_groups(client: RustkaClientProtocol) -> None:
    """list_groups names committing groups; describe_group gives offsets, bounds and lag."""
    await within(client.create_topic("g-topic", 2))
    await within(client.produce_batch("g-topic", 0, [Record(b"k", b"v")] * 10))
    await within(client.commit("beta", "g-topic", 0, 4))
    await within(client.commit("alpha", "g-topic", 1, 0))
    assert await within(client.list_groups()) == ["alpha", "beta"]
    [entry] = await within(client.describe_group("beta"))
    assert entry == p.GroupOffset("g-topic", 0, 4, 0, 10)
    assert entry.lag == 6
    assert await within(client.describe_group("nobody")) == []


# --------------------------------------------------------------------------- pipelining


@pytest_twisted.ensureDeferred
async def test_thousand_pipelined_produces_answer_in_order(
    client: RustkaClientProtocol,
) -> None:
    """1000 produces in flight at once complete with offsets in exactly the call order."""
    await within(client.create_topic("pipe", 1))
    calls = [client.produce("pipe", b"k", b"%d" % i) for i in range(1000)]
    assert client.pending == 1000
    results = await within(defer.gatherResults(calls), 30)
    assert results == [(0, i) for i in range(1000)]
    assert client.pending == 0


@pytest_twisted.ensureDeferred
async def test_thousand_pipelined_mixed_calls_match_their_answers(
    client: RustkaClientProtocol,
) -> None:
    """Interleaved fetches of different offsets and other ops each get their own answer."""
    await within(client.create_topic("mix", 1))
    await within(client.produce_batch("mix", 0, [Record(b"k", b"%d" % i) for i in range(500)]))
    calls: list[defer.Deferred[Any]] = []
    expected: list[Any] = []
    for i in reversed(range(500)):
        calls.append(client.fetch("mix", 0, i))
        expected.append(i)
        calls.append(client.committed("g", "mix", 0))
        expected.append(None)
    results = await within(defer.gatherResults(calls), 30)
    assert [r if r is None else int(r.value) for r in results] == expected
    assert [r.offset for r in results[::2]] == list(reversed(range(500)))


# --------------------------------------------------------------------------- connection


@pytest_twisted.ensureDeferred
async def test_tcp_nodelay_is_enabled(client: RustkaClientProtocol) -> None:
    """The client turns Nagle off on its TCP socket."""
    handle = client.transport.getHandle()
    assert handle.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


@pytest_twisted.ensureDeferred
async def test_connect_with_an_endpoint_string(broker: RunningBroker) -> None:
    """A Twisted client endpoint description connects as well as HOST:PORT does."""
    c = await connect_to(f"tcp:host=127.0.0.1:port={broker.port}")
    try:
        assert (await within(c.hello())).version == 2
    finally:
        await within(c.close())


@pytest_twisted.ensureDeferred
async def test_connect_over_a_unix_socket(
    broker_factory: Callable[..., Any], tmp_path: Path
) -> None:
    """unix:path=... reaches a broker listening on a UNIX socket."""
    path = tmp_path / "rustka.sock"
    running = await broker_factory(listen=["tcp:0:interface=127.0.0.1", f"unix:{path}"])
    try:
        await within(running.top.listeners[1].listening)
        c = await connect_to(f"unix:path={path}")
        try:
            assert await within(c.produce("sock", b"k", b"v")) is not None
        finally:
            await within(c.close())
    finally:
        await within(defer.ensureDeferred(running.stop()), 30)


@pytest_twisted.ensureDeferred
async def test_connect_refused_is_broker_unavailable() -> None:
    """Connecting where nothing listens raises BrokerUnavailable naming the address."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BrokerUnavailable, match=f"127.0.0.1:{port}"):
        await connect_to(f"127.0.0.1:{port}")


@pytest_twisted.ensureDeferred
async def test_close_then_calls_fail_at_once(broker: RunningBroker) -> None:
    """close() fires once the connection is gone; later calls fail with ConnectionClosed."""
    c = await connect_to(broker.address)
    assert c.is_open
    await within(c.close())
    assert not c.is_open
    exc = await failure_of(c.produce("orders", b"k", b"v"))
    assert type(exc) is ConnectionClosed and "closed" in str(exc)
    await within(c.close())


@pytest_twisted.ensureDeferred
async def test_pending_calls_fail_when_the_broker_drops_the_connection(
    broker: RunningBroker, client: RustkaClientProtocol
) -> None:
    """Calls in flight when the connection dies fail with ConnectionClosed, not hang."""
    await within(client.create_topic("drop", 1))
    waiting = [client.fetch_batch("drop", 0, 0, max_wait_ms=60_000) for _ in range(3)]
    for proto in list(broker.factory.connections):
        proto.transport.abortConnection()
    for d in waiting:
        exc = await failure_of(d)
        assert type(exc) is ConnectionClosed and "before the broker answered" in str(exc)
    assert type(await failure_of(client.list_groups())) is ConnectionClosed


@pytest_twisted.ensureDeferred
async def test_encode_errors_fail_the_call(client: RustkaClientProtocol) -> None:
    """Values that do not fit the wire (a negative partition) fail as InvalidRequest."""
    exc = await failure_of(client.fetch("orders", -1, 0))
    assert type(exc) is InvalidRequest and "partition" in str(exc)
    assert client.pending == 0


# --------------------------------------------------------------------------- scripted server


class _Scripted(Protocol):
    """Answers each incoming frame with the next canned payloads (real frames, real socket)."""

    def __init__(self, script: list[list[bytes]], on_connect: list[bytes]) -> None:
        self.script = script
        self.on_connect = on_connect
        self.buffer = b""

    def connectionMade(self) -> None:
        for payload in self.on_connect:
            self.transport.write(struct.pack("!I", len(payload)) + payload)

    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 4:
            (length,) = struct.unpack_from("!I", self.buffer)
            if len(self.buffer) < 4 + length:
                return
            self.buffer = self.buffer[4 + length :]
            for payload in self.script.pop(0) if self.script else []:
                self.transport.write(struct.pack("!I", len(payload)) + payload)


@pytest_twisted.async_yield_fixture
async def scripted() -> AsyncIterator[Callable[..., Any]]:
    """Start a scripted server: ``address = await scripted(script, on_connect=[])``."""
    from twisted.internet import reactor
    from twisted.internet.endpoints import TCP4ServerEndpoint

    ports: list[Any] = []

    async def start(script: list[list[bytes]], on_connect: list[bytes] | None = None) -> str:
        factory = Factory.forProtocol(lambda: _Scripted(script, on_connect or []))
        port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(factory)
        ports.append(port)
        return f"127.0.0.1:{port.getHost().port}"

    yield start
    for port in ports:
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_unsolicited_response_drops_the_connection(scripted: Callable[..., Any]) -> None:
    """A response with no request pending means the stream is out of step: disconnect."""
    extra = p.encode_response(p.CommitOk())
    address = await scripted([[p.encode_response(p.Offset(1)), extra]])
    c = await connect_to(address)
    assert await within(c.committed("g", "t", 0)) == 1
    await within(c.close())  # the unsolicited frame is already on its way: just wait
    exc = await failure_of(c.hello())
    assert type(exc) is ConnectionClosed and "no request" in str(exc)


@pytest_twisted.ensureDeferred
async def test_oversized_response_fails_pending_calls(scripted: Callable[..., Any]) -> None:
    """A frame over MAX_LENGTH closes the connection and fails the call, naming the limit."""
    big = p.encode_response(p.FetchedRecord(0, b"", b"x" * 1000))
    address = await scripted([[big]])
    c = await connect_to(address)
    c.MAX_LENGTH = 100
    exc = await failure_of(c.fetch("t", 0, 0))
    assert type(exc) is ConnectionClosed and "MAX_LENGTH" in str(exc)
    assert not c.is_open


@pytest_twisted.ensureDeferred
async def test_undecodable_response_fails_only_its_call(scripted: Callable[..., Any]) -> None:
    """A garbled payload fails that one call; the next answer still reaches its caller."""
    address = await scripted([[b"\x63"], [p.encode_response(p.Offset(7))]])
    c = await connect_to(address)
    try:
        exc = await failure_of(c.committed("g", "t", 0))
        assert type(exc) is InvalidRequest and "unknown tag 99" in str(exc)
        assert await within(c.committed("g", "t", 0)) == 7
    finally:
        await within(c.close())


@pytest_twisted.ensureDeferred
async def test_unknown_failure_code_from_a_newer_broker(scripted: Callable[..., Any]) -> None:
    """A Failure code unknown to this client surfaces as RustkaError with that code."""
    address = await scripted([[p.encode_response(p.Failure(4242, "new thing"))]])
    c = await connect_to(address)
    try:
        exc = await failure_of(c.list_groups())
        assert type(exc) is RustkaError and exc.code == 4242 and str(exc) == "new thing"
    finally:
        await within(c.close())


@pytest_twisted.ensureDeferred
async def test_large_response_is_received_whole(scripted: Callable[..., Any]) -> None:
    """A multi-MiB frame arriving in many reads is reassembled byte for byte."""
    value = bytes(range(256)) * (12 * 1024 * 4)  # 12 MiB
    address = await scripted([[p.encode_response(p.FetchedRecord(5, b"k", value))]])
    c = await connect_to(address)
    try:
        record = await within(c.fetch("t", 0, 5), 30)
        assert record.offset == 5 and record.value == value
    finally:
        await within(c.close())


@pytest_twisted.ensureDeferred
async def test_topic_configs(client: RustkaClientProtocol) -> None:
    """create_topic with configs, alter_topic_configs and describe_topic_configs."""
    assert await within(client.create_topic("cfg", 1, {"retention.ms": "-1"})) == 1
    configs = {c.name: c for c in await within(client.describe_topic_configs("cfg"))}
    assert (configs["retention.ms"].value, p.CONFIG_SOURCES[configs["retention.ms"].source]) == (
        "-1",
        "topic",
    )
    after = await within(
        client.alter_topic_configs("cfg", {"cleanup.policy": "compact"}, ["retention.ms"])
    )
    own = {c.name: c.value for c in after if p.CONFIG_SOURCES[c.source] == "topic"}
    assert own == {"cleanup.policy": "compact"}
    exc = await failure_of(client.alter_topic_configs("cfg", {"cleanup.policy": "x"}))
    assert type(exc) is InvalidConfig and "cleanup.policy" in str(exc)
    exc = await failure_of(client.create_topic("cfg2", 1, {"retention.ms": "never"}))
    assert type(exc) is InvalidConfig


@pytest_twisted.ensureDeferred
async def test_fetched_records_of_a_log_append_time_topic_read_as_the_brokers_time(
    client: RustkaClientProtocol,
) -> None:
    """As a Kafka consumer reads them: every record has the batch's maxTimestamp."""
    await within(client.create_topic("stamped", 1, {"message.timestamp.type": "LogAppendTime"}))
    batch = encode_batch([Record(b"k", b"a", timestamp=5), Record(b"k", b"b", timestamp=6)])
    await within(client.produce_batch("stamped", 0, batch))
    fetched = await within(client.fetch_batch("stamped", 0, 0))
    stamps = {r.timestamp for r in fetched.records}
    assert len(stamps) == 1 and stamps.pop() > 1_000_000_000_000  # type: ignore[operator]


@pytest_twisted.ensureDeferred
async def test_delete_records_moves_the_log_start(
    broker: Any, client: RustkaClientProtocol
) -> None:
    """DeleteRecords (op 27): the start moves (-1: to the high watermark), never back;
    reads below it and an offset past the high watermark are OffsetOutOfRange with the
    bounds; a topic that only compacts is PolicyViolation; an unknown partition is
    UnknownPartition."""
    from rustka.errors import PolicyViolation

    await within(client.create_topic("dr", 1))
    await within(client.create_topic("cmp", 1, {"cleanup.policy": "compact"}))
    for i in range(6):
        await within(client.produce("dr", b"k", b"v%d" % i))
    assert await within(client.delete_records("dr", 0, 4)) == 4
    assert await within(client.delete_records("dr", 0, 1)) == 4
    with pytest.raises(OffsetOutOfRange) as info:
        await within(client.fetch_batch("dr", 0, 3))
    assert (info.value.log_start, info.value.end) == (4, 6)
    # The seed Fetch (op 2) says where the log now starts (docs/protocol.md, section 3).
    with pytest.raises(BrokerError, match="earliest available offset is 4"):
        await within(client.fetch("dr", 0, 1))
    assert (await within(client.fetch("dr", 0, 4))).value == b"v4"  # type: ignore[union-attr]
    assert [r.value for r in (await within(client.fetch_batch("dr", 0, 4))).records] == [
        b"v4",
        b"v5",
    ]
    with pytest.raises(OffsetOutOfRange) as info:
        await within(client.delete_records("dr", 0, 7))
    assert (info.value.offset, info.value.log_start, info.value.end) == (7, 4, 6)
    with pytest.raises(PolicyViolation, match="policy"):
        await within(client.delete_records("cmp", 0, 0))
    with pytest.raises(UnknownPartition):
        await within(client.delete_records("dr", 3, 0))
    assert await within(client.delete_records("dr", 0, -1)) == 6
    assert broker.broker.bounds("dr", 0) == (6, 6)


def _frame(payload: bytes) -> bytes:
    return struct.pack("!I", len(payload)) + payload


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the client closed the connection")
        data += chunk
    return data


@pytest.mark.usefixtures("force_fast_paths")
@pytest_twisted.ensureDeferred
async def test_a_call_with_nothing_in_flight_is_on_the_socket_when_it_returns() -> None:
    """One request, one answer: the request is in the kernel before the reactor turns
    (rustka.eager_write), while pipelined calls queue in the transport and follow in
    order on its next pass, so the pipelining client still sends them in one write."""
    from twisted.internet import threads

    requests = [p.OffsetFetch("g", "t", n) for n in range(3)]
    frames = [_frame(b"".join(p.request_parts(r))) for r in requests]
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        c = await connect_to(f"127.0.0.1:{listener.getsockname()[1]}")
        server, _ = listener.accept()
        with server:
            server.setblocking(False)
            first = c.committed("g", "t", 0)
            assert server.recv(65536) == frames[0]
            rest = [c.committed("g", "t", 1), c.committed("g", "t", 2)]
            with pytest.raises(BlockingIOError):
                server.recv(65536)
            assert c.transport.dataBuffer or c.transport._tempDataLen
            server.setblocking(True)
            arrived = await within(
                threads.deferToThread(_recv_exactly, server, len(frames[1]) + len(frames[2]))
            )
            assert arrived == frames[1] + frames[2]
            server.sendall(b"".join(_frame(p.encode_response(p.Offset(10 + n))) for n in range(3)))
            assert [await within(d) for d in (first, *rest)] == [10, 11, 12]
            await within(c.close())
