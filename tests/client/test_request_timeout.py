"""The client's request timeout, against a real socket that accepts and never answers.

A broker that hangs (it accepted the connection, then its storage never opened)
must not hang its clients: a call with no answer fails with RequestTimedOut
and the connection is closed. The tests drive the timeout with a `task.Clock`
over a real TCP connection, so they need no sleeps and cannot be flaky.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, task
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure

from rustka.client.protocol import (
    ConnectionClosed,
    RequestTimedOut,
    RustkaClientProtocol,
    connect,
)
from tests.conftest import RunningBroker, within


class Silent(Protocol):
    """Reads every request and answers none; records what it got and when it was dropped."""

    def __init__(self, server: SilentServer) -> None:
        self.server = server
        self.received = b""

    def connectionMade(self) -> None:
        self.server.connections.append(self)

    def dataReceived(self, data: bytes) -> None:
        self.received += data
        if not self.server.got_data.called:
            self.server.got_data.callback(None)

    def connectionLost(self, reason: Failure | None = None) -> None:
        if not self.server.lost.called:
            self.server.lost.callback(None)


class SilentServer(Factory):
    def __init__(self) -> None:
        self.connections: list[Silent] = []
        self.lost: defer.Deferred[None] = defer.Deferred()
        self.got_data: defer.Deferred[None] = defer.Deferred()

    def buildProtocol(self, addr: Any) -> Silent:
        return Silent(self)


@pytest_twisted.async_yield_fixture
async def silent() -> AsyncIterator[tuple[SilentServer, int]]:
    from twisted.internet import reactor

    server = SilentServer()
    port = reactor.listenTCP(0, server, interface="127.0.0.1")
    try:
        yield server, port.getHost().port
    finally:
        await port.stopListening()


async def _client(port: int, clock: task.Clock, timeout: float) -> RustkaClientProtocol:
    from twisted.internet import reactor

    proto = RustkaClientProtocol(clock, timeout)
    await within(connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), proto))
    return proto


@pytest_twisted.ensureDeferred
async def test_unanswered_call_times_out_and_closes(silent: tuple[SilentServer, int]) -> None:
    """Every pending call fails with RequestTimedOut at the deadline; the socket is closed."""
    server, port = silent
    clock = task.Clock()
    client = await _client(port, clock, 2.0)
    first = client.produce("t", b"k", b"v")
    await within(server.got_data)
    clock.advance(1.0)
    second = client.fetch("t", 0, 0)
    clock.advance(0.99)
    assert not first.called and not second.called and client.is_open
    clock.advance(0.01)
    for d in (first, second):
        with pytest.raises(RequestTimedOut, match=r"no answer from the broker within 2 s"):
            await d
    await within(server.lost)
    assert not client.is_open
    assert server.connections[0].received.startswith(b"\x00\x00\x00")
    later = client.produce("t", b"k", b"v")
    with pytest.raises(ConnectionClosed):
        await later


@pytest_twisted.ensureDeferred
async def test_long_poll_wait_extends_the_deadline(silent: tuple[SilentServer, int]) -> None:
    """A FetchBatch may wait max_wait_ms at the broker: its deadline is timeout + wait."""
    _, port = silent
    clock = task.Clock()
    client = await _client(port, clock, 1.0)
    polling = client.fetch_batch("t", 0, 0, max_wait_ms=5000)
    clock.advance(5.9)
    assert not polling.called
    clock.advance(0.1)
    with pytest.raises(RequestTimedOut):
        await polling


@pytest_twisted.ensureDeferred
async def test_no_timeout_by_default(silent: tuple[SilentServer, int]) -> None:
    """Without request_timeout a call waits as long as the connection lives."""
    _, port = silent
    from twisted.internet import reactor

    client = await connect(reactor, f"127.0.0.1:{port}", timeout=5)
    assert client.request_timeout is None
    pending = client.produce("t", b"k", b"v")
    await client.close()
    with pytest.raises(ConnectionClosed) as caught:
        await pending
    assert not isinstance(caught.value, RequestTimedOut)


@pytest_twisted.ensureDeferred
async def test_answered_calls_never_time_out(broker: RunningBroker) -> None:
    """Against a real broker, calls answered in time succeed and leave no timer behind."""
    from twisted.internet import reactor

    client = await connect(reactor, broker.address, timeout=5, request_timeout=5)
    try:
        partitions = await within(client.create_topic("timely", 1))
        assert partitions == 1
        results = await within(
            defer.gatherResults([client.produce("timely", b"k", b"%d" % i) for i in range(50)])
        )
        assert [offset for _, offset in results] == list(range(50))
        assert client.pending == 0 and client.is_open
    finally:
        await client.close()
    assert client._timer is None or not client._timer.active()


def test_timeout_needs_a_clock_and_positive_seconds() -> None:
    """A request timeout without a clock, or of zero seconds, is refused up front."""
    with pytest.raises(ValueError, match="request_timeout"):
        RustkaClientProtocol(None, 1.0)
    with pytest.raises(ValueError, match="request_timeout"):
        RustkaClientProtocol(task.Clock(), 0)
