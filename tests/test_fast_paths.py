"""`rustka.fast_paths`: the one switch and the one capability check of the shortcuts
past Twisted's public interfaces, and the Twisted internals they use, pinned on the
Twisted that is installed."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest_twisted
from packaging.requirements import Requirement
from twisted.internet import defer
from twisted.internet.protocol import Factory, Protocol

from rustka import fast_paths
from rustka.eager_write import EagerWriter, writer_for
from rustka.ops import lean_poll
from tests.conftest import within

ROOT = Path(__file__).resolve().parents[1]


class _Made(Protocol):
    def __init__(self, made: defer.Deferred[Any]) -> None:
        self.made = made

    def connectionMade(self) -> None:
        self.made.callback(self)


async def _tcp_pair() -> tuple[Any, Any, Any]:
    """The server side's transport of a real loopback connection, the port, the client."""
    from twisted.internet import reactor
    from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

    made: defer.Deferred[Any] = defer.Deferred()
    port = reactor.listenTCP(0, Factory.forProtocol(lambda: _Made(made)), interface="127.0.0.1")
    client = await connectProtocol(
        TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port), Protocol()
    )
    server = await within(made)
    return server.transport, port, client


@pytest_twisted.ensureDeferred
async def test_the_twisted_internals_the_fast_paths_use_are_there(force_fast_paths: None) -> None:
    """If a Twisted release renames one of these, this fails here first; in production
    the fast paths then switch themselves off (tests below)."""
    from twisted.internet import reactor, tcp

    transport, port, client = await _tcp_pair()
    try:
        assert isinstance(transport, tcp.Connection)
        missing = [n for n in fast_paths.TCP_TRANSPORT_PARTS if not hasattr(transport, n)]
        assert missing == []
        assert fast_paths.tcp_transport_supported(transport)
        assert isinstance(writer_for(transport), EagerWriter)
        missing = [n for n in fast_paths.EPOLL_REACTOR_PARTS if not hasattr(reactor, n)]
        assert missing == []
        assert fast_paths.epoll_reactor_supported(reactor)
    finally:
        client.transport.loseConnection()
        await port.stopListening()


def test_the_installed_twisted_is_in_the_tested_range() -> None:
    """pyproject.toml bounds Twisted to the releases the suite has run on."""
    text = (ROOT / "pyproject.toml").read_text()
    line = next(x for x in text.splitlines() if x.strip().startswith('"twisted['))
    requirement = Requirement(line.strip().strip(",").strip('"'))
    assert "<" in str(requirement.specifier), "Twisted needs an upper bound"
    assert requirement.specifier.contains(metadata.version("twisted"))


@pytest_twisted.ensureDeferred
async def test_switched_off_every_fast_path_takes_the_plain_way(force_fast_paths: None) -> None:
    from twisted.internet import reactor

    transport, port, client = await _tcp_pair()
    try:
        fast_paths.set_enabled(False)
        assert writer_for(transport) is transport
        assert not fast_paths.epoll_reactor_supported(reactor)
        assert lean_poll.install(reactor) is False
        fast_paths.set_enabled(True)
        assert isinstance(writer_for(transport), EagerWriter)
    finally:
        fast_paths.set_enabled(True)
        client.transport.loseConnection()
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_a_broker_with_fast_paths_off_answers_through_the_transport(
    broker_factory: Any, force_fast_paths: None
) -> None:
    """The setting reaches every connection the broker makes: no eager writer, no
    early answer, and the broker still answers."""
    running = await broker_factory(fast_paths=False)
    try:
        assert not fast_paths.enabled()
        client = await within(defer.ensureDeferred(running.client()))
        try:
            assert (await within(client.produce("plain", b"k", b"v")))[1] == 0
            [conn] = running.top.factory.connections
            assert conn._out is conn.transport and conn._early is None
        finally:
            await within(client.close())
    finally:
        await running.stop()
        fast_paths.set_enabled(True)


def test_the_environment_turns_them_off_whatever_the_setting() -> None:
    code = (
        "from rustka import fast_paths; fast_paths.set_enabled(True); print(fast_paths.enabled())"
    )
    for value, expected in (("off", "False"), ("0", "False"), ("on", "True")):
        env = {**os.environ, "RUSTKA_FAST_PATHS": value}
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        assert out.stdout.strip() == expected, value
