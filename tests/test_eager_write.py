"""`rustka.eager_write` on real loopback connections: an answer leaves on the socket
in the call that writes it when the transport buffers nothing; what the kernel does not
take (a partial send, EAGAIN, a peer that is gone) goes to the transport, which keeps its
order, its push-back on the producer and its close; TLS and UNIX transports are written
as before.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, interfaces
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from rustka.eager_write import EagerWriter, writer_for
from tests.conftest import within
from tests.test_connections import Reader

# These test the fast paths themselves: on even in a run with RUSTKA_FAST_PATHS=off.
pytestmark = pytest.mark.usefixtures("force_fast_paths")


@implementer(interfaces.IPushProducer)
class Served(Protocol):
    """The server's side: a streaming producer on its transport, as the front-ends are."""

    def __init__(self, made: defer.Deferred[Served]) -> None:
        self.made = made
        self.paused = False
        self.pauses = 0
        self.lost: defer.Deferred[None] = defer.Deferred()

    def connectionMade(self) -> None:
        self.transport.registerProducer(self, True)
        self.made.callback(self)

    def connectionLost(self, reason: Failure | None = None) -> None:
        self.lost.callback(None)

    def pauseProducing(self) -> None:
        self.paused = True
        self.pauses += 1

    def resumeProducing(self) -> None:
        self.paused = False

    def stopProducing(self) -> None:
        self.paused = True


async def _connect(factory: Factory) -> tuple[Any, Reader, Any]:
    from twisted.internet import reactor
    from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    reader = Reader()
    endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port)
    await within(connectProtocol(endpoint, reader))
    return port, reader, reactor


@pytest_twisted.async_yield_fixture
async def pair() -> AsyncIterator[tuple[Served, Reader]]:
    made: defer.Deferred[Served] = defer.Deferred()
    port, reader, _ = await _connect(Factory.forProtocol(lambda: Served(made)))
    try:
        served = await within(made)
        yield served, reader
    finally:
        if reader.transport is not None and reader.transport.connected:
            reader.transport.abortConnection()
            await within(reader.closed)
        await port.stopListening()


def buffered(transport: Any) -> int:
    """Bytes the transport holds and has not sent."""
    return len(transport.dataBuffer) - transport.offset + transport._tempDataLen


def fill_kernel_buffers(sock: socket.socket) -> int:
    """Send on the raw socket until the kernel takes no more (the peer is not reading)."""
    total = 0
    for _ in range(100_000):
        try:
            total += sock.send(b"f" * 65536)
        except BlockingIOError:
            return total
    raise AssertionError("the kernel kept taking bytes from a peer that does not read")


@pytest_twisted.ensureDeferred
async def test_an_answer_leaves_in_the_call_that_writes_it(pair: tuple[Served, Reader]) -> None:
    served, reader = pair
    writer = writer_for(served.transport)
    assert isinstance(writer, EagerWriter)
    writer.writeSequence([b"\x00\x00\x00\x03", b"abc"])
    # Sent by the call: Twisted's write would still hold it until the next reactor pass.
    assert buffered(served.transport) == 0
    assert served.transport._tempDataBuffer == []
    writer.write(b"one more")
    assert buffered(served.transport) == 0
    assert (writer.sent_now, writer.handed_on) == (2, 0)
    assert await reader.received(15) == b"\x00\x00\x00\x03abcone more"


@pytest_twisted.ensureDeferred
async def test_a_later_transport_write_and_what_follows_keep_their_order(
    pair: tuple[Served, Reader],
) -> None:
    served, reader = pair
    writer = writer_for(served.transport)
    writer.write(b"<a>")
    served.transport.write(b"<b>")
    # <b> is buffered in the transport: <c> and <d> must go behind it, not past it.
    writer.write(b"<c>")
    writer.writeSequence([b"<d", b">"])
    assert buffered(served.transport) == 9
    assert (writer.sent_now, writer.handed_on) == (1, 2)
    assert await reader.received(12) == b"<a><b><c><d>"
    # Once the transport has sent everything, answers leave at once again.
    writer.write(b"<e>")
    assert buffered(served.transport) == 0
    assert await reader.received(15) == b"<a><b><c><d><e>"


@pytest_twisted.ensureDeferred
async def test_a_partial_send_leaves_the_rest_to_the_transport_which_pauses_the_producer(
    pair: tuple[Served, Reader],
) -> None:
    served, reader = pair
    server_socket = served.transport.socket
    server_socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    reader.transport.pauseProducing()
    writer = writer_for(served.transport)
    big = bytes(range(256)) * 8192  # 2 MiB: far more than the kernel buffers take
    tail = [b"head-", b"x" * 300_000, b"-tail"]
    writer.write(big)
    held = buffered(served.transport)
    assert 0 < held < len(big), "the kernel took part of it, the transport holds the rest"
    assert writer.handed_on == 1
    # Twisted's buffer is over its limit: the producer (the front-end) is paused.
    assert served.paused and served.pauses == 1
    writer.writeSequence(tail)
    assert buffered(served.transport) == held + sum(map(len, tail))
    reader.transport.resumeProducing()
    total = len(big) + sum(map(len, tail))
    got = await reader.received(total)
    assert got == big + b"".join(tail)
    # Drained: the transport resumed its producer.
    assert not served.paused


@pytest_twisted.ensureDeferred
async def test_a_partial_gathered_send_hands_on_exactly_the_unsent_parts(
    pair: tuple[Served, Reader],
) -> None:
    served, reader = pair
    served.transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    reader.transport.pauseProducing()
    writer = writer_for(served.transport)
    parts = [bytes([i]) * size for i, size in enumerate((10, 70_000, 3, 900_000, 5, 1))]
    writer.writeSequence(parts)
    assert 0 < buffered(served.transport) < sum(map(len, parts))
    reader.transport.resumeProducing()
    assert await reader.received(sum(map(len, parts))) == b"".join(parts)


@pytest_twisted.ensureDeferred
async def test_when_the_kernel_takes_nothing_the_whole_answer_goes_to_the_transport(
    pair: tuple[Served, Reader],
) -> None:
    served, reader = pair
    reader.transport.pauseProducing()
    filled = fill_kernel_buffers(served.transport.socket)
    writer = writer_for(served.transport)
    writer.writeSequence([b"<after", b" the fill>"])  # send() fails with EAGAIN
    assert buffered(served.transport) == 16
    assert (writer.sent_now, writer.handed_on) == (0, 1)
    reader.transport.resumeProducing()
    got = await reader.received(filled + 16)
    assert got == b"f" * filled + b"<after the fill>"


@pytest_twisted.ensureDeferred
async def test_a_peer_that_is_gone_closes_the_connection_through_the_transport(
    pair: tuple[Served, Reader],
) -> None:
    served, reader = pair
    # The server does not read, so it has not seen the close when it writes.
    served.transport.stopReading()
    client_socket = reader.transport.socket
    # Linger 0: the close resets the connection, so the server's send fails.
    client_socket.setsockopt(
        socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
    )
    reader.transport.abortConnection()
    await within(reader.closed)
    writer = writer_for(served.transport)
    for _ in range(3):
        writer.write(b"to nobody")
    await within(served.lost)
    assert not served.transport.connected


@pytest_twisted.ensureDeferred
async def test_a_closing_transport_keeps_its_own_close_rule(pair: tuple[Served, Reader]) -> None:
    served, reader = pair
    writer = writer_for(served.transport)
    served.transport.unregisterProducer()
    writer.write(b"last words")
    writer.loseConnection()
    # Twisted still sends what is written before its close goes out, after the rest:
    # once closing, the transport does the writing.
    writer.write(b" and a late one")
    assert (writer.sent_now, writer.handed_on) == (1, 1)
    await within(reader.closed)
    assert bytes(reader.data) == b"last words and a late one"


# Twisted 26.10's ssl: endpoint still hands pyOpenSSL X509 and PKey objects to pyOpenSSL (as in
# tests/test_tls.py).
@pytest.mark.filterwarnings(
    "ignore:Passing pyOpenSSL X509 objects is deprecated:DeprecationWarning",
    "ignore:Passing pyOpenSSL PKey objects is deprecated:DeprecationWarning",
)
@pytest_twisted.ensureDeferred
async def test_tls_and_unix_transports_are_written_by_twisted(tmp_path: Path) -> None:
    from twisted.internet import reactor, ssl
    from twisted.internet.endpoints import (
        SSL4ClientEndpoint,
        UNIXClientEndpoint,
        connectProtocol,
        serverFromString,
    )

    from tests.test_tls import make_certificate

    key, cert = make_certificate(tmp_path / "tls")
    made: defer.Deferred[Served] = defer.Deferred()
    # The listener rustka builds for an ssl: endpoint: Twisted's TLS wrapper protocol.
    server = serverFromString(reactor, f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}")
    port = await within(server.listen(Factory.forProtocol(lambda: Served(made))))
    reader = Reader()
    try:
        # The wrapped protocol is connected once the handshake is done.
        endpoint = SSL4ClientEndpoint(
            reactor, "127.0.0.1", port.getHost().port, ssl.CertificateOptions()
        )
        await within(connectProtocol(endpoint, reader))
        reader.transport.write(b"hello")
        served = await within(made)
        assert writer_for(served.transport) is served.transport
        writer_for(served.transport).writeSequence([b"enc", b"rypted"])
        assert await reader.received(9) == b"encrypted"
    finally:
        reader.transport.loseConnection()
        await within(reader.closed)
        await port.stopListening()

    made_unix: defer.Deferred[Served] = defer.Deferred()
    path = str(tmp_path / "s.sock")
    unix_port = reactor.listenUNIX(path, Factory.forProtocol(lambda: Served(made_unix)))
    unix_reader = Reader()
    try:
        await within(connectProtocol(UNIXClientEndpoint(reactor, path), unix_reader))
        served_unix = await within(made_unix)
        assert writer_for(served_unix.transport) is served_unix.transport
    finally:
        unix_reader.transport.abortConnection()
        await within(unix_reader.closed)
        await unix_port.stopListening()
