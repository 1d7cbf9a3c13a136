"""The Kafka front-end's listeners and connection rules, over real sockets on 127.0.0.1.

What is checked here is the connection level of docs/kafka.md: which port serves
which protocol (the shared `listen` port, `kafka_listen` endpoints, the
`kafka_enabled` switch), what Metadata advertises, the cluster id across a
restart, what an unsupported API key or version does to a connection, and the
output budget of a client that pipelines Fetches and never reads, and the
hang-up after the answers of a failed handler or a graceful close.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, threads
from twisted.protocols.basic import Int32StringReceiver

from rustka.kafka import messages
from rustka.kafka.apis import HANDLERS
from rustka.kafka.client import KafkaClientProtocol, connect_kafka
from rustka.kafka.context import Body, RequestContext
from rustka.kafka.errors import ErrorCode
from rustka.kafka.server import KafkaFactory, KafkaProtocol
from rustka.native import codec as p
from tests.conftest import RunningBroker, reactor_turns, within

PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18


class RawKafka(Int32StringReceiver):
    """Frames by hand: whatever bytes a test wants to send, every frame it gets back."""

    MAX_LENGTH = 64 * 1024 * 1024

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.lost: defer.Deferred[None] = defer.Deferred()
        self._waiting: list[tuple[int, defer.Deferred[list[bytes]]]] = []

    def stringReceived(self, frame: bytes) -> None:
        self.frames.append(frame)
        self._check()

    def connectionLost(self, reason: Any = None) -> None:
        self.lost.callback(None)

    def expect(self, count: int) -> defer.Deferred[list[bytes]]:
        """Fires with the first ``count`` frames once they are all in."""
        d: defer.Deferred[list[bytes]] = defer.Deferred()
        self._waiting.append((count, d))
        self._check()
        return within(d)

    def _check(self) -> None:
        for item in list(self._waiting):
            if len(self.frames) >= item[0]:
                self._waiting.remove(item)
                item[1].callback(self.frames[: item[0]])


async def raw(port: int) -> RawKafka:
    from twisted.internet import reactor
    from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

    proto = RawKafka()
    await within(connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), proto))
    return proto


def header_v1(api_key: int, version: int, correlation_id: int, client_id: bytes = b"t") -> bytes:
    """A request header v1 (key, version, correlation id, client id), as any client writes."""
    return struct.pack("!hhih", api_key, version, correlation_id, len(client_id)) + client_id


def framed(payload: bytes) -> bytes:
    return struct.pack("!I", len(payload)) + payload


async def kafka_client(port: int, client_id: str = "rustka-test") -> KafkaClientProtocol:
    from twisted.internet import reactor

    return await within(
        defer.ensureDeferred(connect_kafka(reactor, f"127.0.0.1:{port}", client_id=client_id))
    )


async def metadata(port: int, topics: list[str] | None = None) -> dict[str, Any]:
    k = await kafka_client(port)
    try:
        body = {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": True,
        }
        return await within(k.request(METADATA, body))
    finally:
        await within(k.close())


def native_hello() -> bytes:
    return framed(p.encode_request(p.Hello(2, "native-test")))


# -- listeners --------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_kafka_off_closes_a_kafka_client_at_its_first_request(
    broker_factory: Callable[..., Any],
) -> None:
    """kafka_enabled=false: Kafka's first frame gets a hang-up, never a native Error."""
    running = await broker_factory(kafka_enabled=False)
    try:
        assert running.top.kafka_factory is None
        c = await raw(running.port)
        c.transport.write(framed(header_v1(API_VERSIONS, 0, 1)))
        await within(c.lost)
        assert c.frames == []
        assert running.top.serving_factory.kafka_refused == 1
        # The port still serves the native protocol.
        n = await raw(running.port)
        n.transport.write(native_hello())
        [welcome] = await n.expect(1)
        assert type(p.decode_response(welcome)) is p.Welcome
        n.transport.loseConnection()
        await within(n.lost)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_kafka_listen_serves_kafka_only(broker_factory: Callable[..., Any]) -> None:
    """A kafka_listen endpoint answers Kafka and closes a native client unanswered."""
    running = await broker_factory(kafka_listen=["tcp:0:interface=127.0.0.1"])
    try:
        kport = running.top.kafka_listeners[0].port.getHost().port
        n = await raw(kport)
        n.transport.write(native_hello())
        await within(n.lost)
        assert n.frames == []
        assert running.top.kafka_factory.bad_requests == 1
        k = await kafka_client(kport)
        assert k.versions[API_VERSIONS] == (0, 4)
        await within(k.close())
        # The shared port still speaks both.
        both = await raw(running.port)
        both.transport.write(native_hello())
        [welcome] = await both.expect(1)
        assert type(p.decode_response(welcome)) is p.Welcome
        both.transport.loseConnection()
        await within(both.lost)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_metadata_advertises_the_address_each_client_reached(
    broker_factory: Callable[..., Any],
) -> None:
    """Node 0 at the host:port the connection came in on; it leads everything, ISR [0]."""
    running = await broker_factory(kafka_listen=["tcp:0:interface=127.0.0.1"])
    try:
        c = await running.client()
        await c.create_topic("meta", 3)
        await c.close()
        kport = running.top.kafka_listeners[0].port.getHost().port
        for port in (running.port, kport):
            answer = await metadata(port, ["meta"])
            assert answer["brokers"] == [
                {"node_id": 0, "host": "127.0.0.1", "port": port, "rack": None}
            ]
            assert answer["controller_id"] == 0
            [topic] = answer["topics"]
            assert topic["error_code"] == 0
            assert [
                (q["partition_index"], q["leader_id"], q["replica_nodes"], q["isr_nodes"])
                for q in topic["partitions"]
            ] == [(i, 0, [0], [0]) for i in range(3)]
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_metadata_advertises_the_configured_address(
    broker_factory: Callable[..., Any],
) -> None:
    running = await broker_factory(advertised_host="kafka.example.net", advertised_port=19092)
    try:
        answer = await metadata(running.port, [])
        assert answer["brokers"] == [
            {"node_id": 0, "host": "kafka.example.net", "port": 19092, "rack": None}
        ]
    finally:
        await running.stop()


def _admin_view(
    bootstrap: str, topic: str
) -> tuple[str, list[tuple[int, int, list[int], list[int]]]]:
    """confluent-kafka's AdminClient: the cluster id and each partition's leader, replicas, ISR."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
    meta = admin.list_topics(topic=topic, timeout=15)
    parts = sorted(
        (pid, pm.leader, list(pm.replicas), list(pm.isrs))
        for pid, pm in meta.topics[topic].partitions.items()
    )
    return meta.cluster_id, parts


@pytest_twisted.ensureDeferred
async def test_cluster_id_is_stable_across_a_restart(
    broker_factory: Callable[..., Any], data_dir: Path
) -> None:
    """The same data dir gives the same cluster id after a restart; a real client sees it."""
    running = await broker_factory(default_partitions=2)
    try:
        c = await running.client()
        await c.create_topic("ids", 2)
        await c.close()
        first, parts = await within(threads.deferToThread(_admin_view, running.address, "ids"), 60)
    finally:
        await running.stop()
    assert first and parts == [(0, 0, [0], [0]), (1, 0, [0], [0])]
    assert (data_dir / "cluster-id").exists()
    again = await broker_factory(default_partitions=2)
    try:
        second, _ = await within(threads.deferToThread(_admin_view, again.address, "ids"), 60)
        assert second == first
        assert (await metadata(again.port, ["ids"]))["cluster_id"] == first
    finally:
        await again.stop()


# -- unsupported keys and versions ---------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_unsupported_api_versions_gets_the_table_and_the_connection_stays(
    broker: RunningBroker,
) -> None:
    """ApiVersions v9 gets a v0-layout UNSUPPORTED_VERSION answer with the full table."""
    c = await raw(broker.port)
    c.transport.write(framed(header_v1(API_VERSIONS, 9, 7) + b"\x00\x00\x00"))
    [answer] = await c.expect(1)
    cid, body = messages.decode_response(API_VERSIONS, 0, answer)
    assert cid == 7
    assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    table = {e["api_key"]: (e["min_version"], e["max_version"]) for e in body["api_keys"]}
    assert table[API_VERSIONS] == (0, 4) and table[FETCH] == (4, 11)
    # The same connection goes on: a v0 ApiVersions is answered normally.
    c.transport.write(framed(messages.encode_request(API_VERSIONS, 0, 8, "t", {})))
    frames = await c.expect(2)
    cid, body = messages.decode_response(API_VERSIONS, 0, frames[1])
    assert (cid, body["error_code"]) == (8, 0)
    assert not c.lost.called
    c.transport.loseConnection()
    await within(c.lost)


@pytest_twisted.ensureDeferred
async def test_unknown_key_or_unadvertised_version_closes_only_that_connection(
    broker: RunningBroker,
) -> None:
    """Key 57 or Metadata v13 closes the connection; a client beside it is still served.

    Each goes behind an ApiVersions: as a first frame it would not be Kafka's at all
    (docs/protocol.md, "Which first frames go to Kafka").
    """
    bystander = await kafka_client(broker.port)
    factory = broker.top.kafka_factory
    for request in (
        header_v1(57, 0, 1) + b"\x00" * 8,
        header_v1(METADATA, 13, 2) + b"\x00" * 8,
        header_v1(METADATA, -1, 3),
    ):
        before = factory.bad_requests
        c = await raw(broker.port)
        c.transport.write(framed(header_v1(API_VERSIONS, 0, 9)) + framed(request))
        await within(c.lost)
        [versions] = c.frames
        assert messages.decode_response(API_VERSIONS, 0, versions)[0] == 9
        assert factory.bad_requests == before + 1
        answer = await within(bystander.request(METADATA, {"topics": []}))
        assert answer["brokers"][0]["port"] == broker.port
    await within(bystander.close())


@pytest_twisted.ensureDeferred
async def test_produce_v0_to_v2_are_listed_but_a_request_of_them_closes_the_connection(
    broker: RunningBroker,
) -> None:
    """ApiVersions lists Produce from v0, as Kafka 4.0 does, since librdkafka up to 2.11
    compresses only for a broker that lists Produce v0; a Produce v0-2 actually sent is
    refused like any version rustka does not accept (RecordBatch v2 needs Produce v3+)."""
    factory = broker.top.kafka_factory
    c = await raw(broker.port)
    c.transport.write(framed(messages.encode_request(API_VERSIONS, 0, 1, "t", {})))
    [answer] = await c.expect(1)
    _, body = messages.decode_response(API_VERSIONS, 0, answer)
    table = {e["api_key"]: (e["min_version"], e["max_version"]) for e in body["api_keys"]}
    assert table[PRODUCE] == (0, 8)
    before = factory.bad_requests
    # Produce v2's body: acks, timeout, an empty topic array (no transactional id before v3).
    c.transport.write(framed(header_v1(PRODUCE, 2, 2) + struct.pack("!hii", 1, 1000, 0)))
    await within(c.lost)
    assert len(c.frames) == 1
    assert factory.bad_requests == before + 1


# -- the output budget of a client that never reads ---------------------------------


def _fetch_frame(correlation_id: int, topic: str) -> bytes:
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 64 * 1024 * 1024,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "log_start_offset": -1,
                        "partition_max_bytes": 64 * 1024 * 1024,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return framed(messages.encode_request(FETCH, 11, correlation_id, "slow-reader", body))


def _read_frames(sock: socket.socket, count: int) -> list[int]:
    """Blocking: read ``count`` response frames; their correlation ids."""
    sock.settimeout(60)
    buf = bytearray()
    ids: list[int] = []
    while len(ids) < count:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise AssertionError(f"closed after {len(ids)} responses")
        buf += chunk
        while len(buf) >= 8:
            (size,) = struct.unpack_from("!I", buf)
            if len(buf) < 4 + size:
                break
            ids.append(struct.unpack_from("!i", buf, 4)[0])
            del buf[: 4 + size]
    return ids


def _buffered(proto: KafkaProtocol) -> int:
    """Bytes the broker holds in the connection's write buffer, not yet sent."""
    t = proto.transport
    return len(t.dataBuffer) + t._tempDataLen


@pytest_twisted.ensureDeferred
async def test_pipelined_fetches_of_a_client_that_never_reads_stay_within_the_budget(
    broker_factory: Callable[..., Any],
) -> None:
    """300 pipelined Fetches of a 128 KiB record, nothing read: the broker holds at most
    about twice the 512 KiB budget, stops serving, and serves them all once read."""

    budget = 512 * 1024
    running = await broker_factory(max_output_bytes_per_connection=budget, flush="never")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        c = await running.client()
        await c.create_topic("big", 1)
        await c.produce("big", b"k", b"x" * (128 * 1024))
        await c.close()
        count = 300
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", running.port))
        sock.sendall(b"".join(_fetch_frame(i, "big") for i in range(count)))
        local_port = sock.getsockname()[1]
        factory = running.top.kafka_factory
        proto: KafkaProtocol | None = None
        peak_buffered = peak_reserved = 0

        def settled() -> bool:
            """Whether the broker stopped serving the client; samples the peaks on the way."""
            nonlocal proto, peak_buffered, peak_reserved
            matches = [k for k in factory.connections if k.transport.getPeer().port == local_port]
            if not matches:
                return False
            proto = matches[0]
            peak_buffered = max(peak_buffered, _buffered(proto))
            peak_reserved = max(peak_reserved, proto.budget.reserved)
            return proto._paused_by_client and not proto.pending

        await reactor_turns(settled)
        assert proto is not None
        served = factory.request_stats.of(FETCH).answered
        # Each answer is ~128 KiB: all 300 would be ~38 MiB.
        assert served < count
        assert proto.budget.reserved == 0
        assert peak_reserved <= budget
        assert peak_buffered <= 2 * budget, peak_buffered
        ids = await within(threads.deferToThread(_read_frames, sock, count), 60)
        assert ids == list(range(count))
        assert factory.request_stats.of(FETCH).answered == count
    finally:
        sock.close()
        await running.stop()


# -- hanging up after the answers -----------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_handler_that_fails_later_hangs_up_after_the_answers_before_it(
    broker: RunningBroker,
) -> None:
    """A handler whose Deferred fails has no answer to give: the answers before it go
    out, then the connection closes, and the request behind it is never read."""
    from twisted.internet import reactor

    def failing(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body | None]:
        d: defer.Deferred[Body | None] = defer.Deferred()
        reactor.callLater(0, d.errback, RuntimeError("the handler broke"))
        return d

    factory = KafkaFactory(
        broker.broker, broker.config, reactor, handlers={**HANDLERS, METADATA: failing}
    )
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    try:
        c = await raw(port.getHost().port)
        c.transport.write(
            framed(messages.encode_request(API_VERSIONS, 0, 1, "t", {}))
            + framed(messages.encode_request(METADATA, 1, 2, "t", {"topics": []}))
            + framed(messages.encode_request(API_VERSIONS, 0, 3, "t", {}))
        )
        await within(c.lost)
        [versions] = c.frames
        assert messages.decode_response(API_VERSIONS, 0, versions)[0] == 1
        assert factory.request_stats.of(API_VERSIONS).answered == 1
        assert not factory.connections
    finally:
        await port.stopListening()


def _read_until_closed(sock: socket.socket) -> list[int]:
    """Blocking: read response frames until the broker hangs up; their correlation ids."""
    sock.settimeout(20)
    buf = bytearray()
    while chunk := sock.recv(1 << 20):
        buf += chunk
    ids: list[int] = []
    while buf:
        (size,) = struct.unpack_from("!I", buf)
        ids.append(struct.unpack_from("!i", buf, 4)[0])
        del buf[: 4 + size]
    return ids


@pytest_twisted.ensureDeferred
async def test_a_graceful_close_of_a_client_that_stopped_reading_closes_once_it_reads(
    broker_factory: Callable[..., Any],
) -> None:
    """Shutdown reaches a connection whose client stopped reading, so its transport has
    paused it: once the client reads what it was sent, the connection closes then, not
    at the idle timeout."""

    running = await broker_factory(
        max_output_bytes_per_connection=512 * 1024, flush="never", idle_timeout_ms=600_000
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        c = await running.client()
        await c.create_topic("big", 1)
        await c.produce("big", b"k", b"x" * (128 * 1024))
        await c.close()
        count = 60
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", running.port))
        sock.sendall(b"".join(_fetch_frame(i, "big") for i in range(count)))
        local_port = sock.getsockname()[1]
        factory = running.top.kafka_factory

        def ours() -> list[KafkaProtocol]:
            return [k for k in factory.connections if k.transport.getPeer().port == local_port]

        await reactor_turns(lambda: any(k._paused_by_client and not k.pending for k in ours()))
        [proto] = ours()
        closed = proto.finish_and_close()
        ids = await within(threads.deferToThread(_read_until_closed, sock), 30)
        await within(closed)
        assert 0 < len(ids) < count
        assert ids == list(range(len(ids)))
        assert proto not in factory.connections
    finally:
        sock.close()
        await running.stop()


@pytest.mark.usefixtures("force_fast_paths")
@pytest_twisted.ensureDeferred
async def test_answers_leave_on_the_socket_in_the_call_that_makes_them(
    broker: RunningBroker,
) -> None:
    """Pipelined requests answered as they are read are each sent at once
    (rustka.eager_write), in order, none through Twisted's write buffer."""
    from rustka.eager_write import EagerWriter

    c = await raw(broker.port)
    count = 20
    c.transport.write(
        b"".join(
            framed(messages.encode_request(API_VERSIONS, 0, 100 + i, "t", {})) for i in range(count)
        )
    )
    frames = await c.expect(count)
    assert [messages.decode_response(API_VERSIONS, 0, f)[0] for f in frames] == [
        100 + i for i in range(count)
    ]
    [proto] = [k for k in broker.top.kafka_factory.connections]
    writer = proto._out
    assert isinstance(writer, EagerWriter)
    assert (writer.sent_now, writer.handed_on) == (count, 0)
    c.transport.loseConnection()
    await within(c.lost)
