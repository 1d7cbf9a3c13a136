"""`rustka.ops.lean_poll` on the running epoll reactor: connections are read, written and
closed as before, a failure outside the reactor's own handling is logged and the other
events of the pass are still served, and other reactors are left alone."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import LogLevel, globalLogPublisher

from rustka.ops import lean_poll
from tests.conftest import within

# These test the fast paths themselves: on even in a run with RUSTKA_FAST_PATHS=off.
pytestmark = pytest.mark.usefixtures("force_fast_paths")


class Echo(Protocol):
    def dataReceived(self, data: bytes) -> None:
        self.transport.write(data)


class Client(Protocol):
    def __init__(self) -> None:
        self.data = b""
        self.got: defer.Deferred[bytes] = defer.Deferred()
        self.lost: defer.Deferred[None] = defer.Deferred()
        self.want = 0

    def dataReceived(self, data: bytes) -> None:
        self.data += data
        if len(self.data) >= self.want and not self.got.called:
            self.got.callback(self.data)

    def connectionLost(self, reason: Any = None) -> None:
        self.lost.callback(None)


class Raising(Protocol):
    def connectionLost(self, reason: Any = None) -> None:
        raise RuntimeError("a connectionLost that fails")


async def _client(port: int) -> Client:
    from twisted.internet import reactor
    from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

    c = Client()
    await within(connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), c))
    return c


def _is_epoll(reactor: Any) -> bool:
    from twisted.internet.epollreactor import EPollReactor

    return isinstance(reactor, EPollReactor)


@pytest_twisted.ensureDeferred
async def test_the_epoll_reactor_serves_connections_through_the_lean_poll() -> None:
    """Under the suite's default reactor (epoll) the poll step is replaced; under
    ``--reactor=asyncio`` nothing is, and connections are served either way."""
    from twisted.internet import reactor

    epoll = _is_epoll(reactor)
    assert lean_poll.install(reactor) is epoll
    assert (getattr(reactor.doIteration, "__func__", None) is lean_poll._poll) is epoll
    assert lean_poll.install(reactor) is epoll  # twice is once
    port = reactor.listenTCP(0, Factory.forProtocol(Echo), interface="127.0.0.1")
    try:
        c = await _client(port.getHost().port)
        c.want = 300_000
        c.transport.write(b"x" * 300_000)
        assert await within(c.got) == b"x" * 300_000
        c.transport.loseConnection()
        await within(c.lost)
    finally:
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_a_failure_outside_the_reactors_handling_is_logged_and_the_pass_goes_on() -> None:
    from twisted.internet import reactor

    lean_poll.install(reactor)
    failures: list[dict[str, Any]] = []

    def observe(event: dict[str, Any]) -> None:
        if event.get("log_level") is LogLevel.critical and "log_failure" in event:
            failures.append(event)

    globalLogPublisher.addObserver(observe)
    raising = reactor.listenTCP(0, Factory.forProtocol(Raising), interface="127.0.0.1")
    echo = reactor.listenTCP(0, Factory.forProtocol(Echo), interface="127.0.0.1")
    try:
        doomed = await _client(raising.getHost().port)
        served = await _client(echo.getHost().port)
        doomed.transport.loseConnection()
        await within(doomed.lost)
        served.want = 5
        served.transport.write(b"still")
        assert await within(served.got) == b"still"
        served.transport.loseConnection()
        await within(served.lost)
    finally:
        globalLogPublisher.removeObserver(observe)
        await raising.stopListening()
        await echo.stopListening()
    if _is_epoll(reactor):
        # Logged once by the poll step; nothing escaped the pass.
        [failed] = failures
        assert "a connectionLost that fails" in str(failed["log_failure"].value)


def test_other_reactors_are_left_alone() -> None:
    from twisted.internet.pollreactor import PollReactor

    other = PollReactor()
    before = other.doIteration
    assert lean_poll.install(other) is False
    assert other.doIteration == before
