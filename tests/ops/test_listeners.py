"""Listeners: endpoint strings with a backlog, and binds gated on a Deferred."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import defer
from twisted.internet.error import CannotListenError
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure

from rustka.config import ConfigError
from rustka.ops.listeners import Listener, effective_backlog, somaxconn, with_backlog


@pytest.mark.parametrize(
    ("description", "expected"),
    [
        ("tcp:9092", "tcp:9092:backlog=1024"),
        ("tcp:9092:interface=127.0.0.1", "tcp:9092:interface=127.0.0.1:backlog=1024"),
        ("TCP6:9092:interface=\\:\\:1", "TCP6:9092:interface=\\:\\:1:backlog=1024"),
        (
            "ssl:9093:privateKey=k.pem:certKey=c.pem",
            "ssl:9093:privateKey=k.pem:certKey=c.pem:backlog=1024",
        ),
        ("unix:/run/rustka.sock:mode=660", "unix:/run/rustka.sock:mode=660:backlog=1024"),
        ("tcp:9092:backlog=50", "tcp:9092:backlog=50"),
        ("tcp:9092:interface=127.0.0.1:backlog=4096", "tcp:9092:interface=127.0.0.1:backlog=4096"),
        ("systemd:domain=INET:name=rustka", "systemd:domain=INET:name=rustka"),
        ("unix:/tmp/backlog=5", "unix:/tmp/backlog=5:backlog=1024"),
        ("unix:/tmp/a\\:backlog=5", "unix:/tmp/a\\:backlog=5:backlog=1024"),
    ],
)
def test_with_backlog_adds_it_only_where_missing(description: str, expected: str) -> None:
    """tcp/tcp6/ssl/unix strings without backlog= get one; named ones and systemd stay."""
    assert with_backlog(description, 1024) == expected


def test_effective_backlog_is_capped_by_somaxconn(tmp_path: Path) -> None:
    """The configured value is cut to the kernel's cap; without a readable cap it stands."""
    assert effective_backlog(1024, cap=128) == 128
    assert effective_backlog(100, cap=4096) == 100
    proc = tmp_path / "somaxconn"
    proc.write_text("4096\n")
    assert somaxconn(proc) == 4096
    assert somaxconn(tmp_path / "missing") is None
    real = somaxconn()
    if real is not None:
        assert effective_backlog(10**6) == real


def _listen_queue(port: int) -> int:
    """The backlog the kernel keeps for a listening TCP port: Send-Q in `ss -l`."""
    import subprocess

    out = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[2])


@pytest_twisted.ensureDeferred
async def test_listener_binds_with_the_backlog() -> None:
    """The kernel's accept queue of the bound port is the backlog we asked for."""
    from twisted.internet import reactor

    listener = Listener(
        "tcp:0:interface=127.0.0.1", "listen", Factory.forProtocol(Protocol), reactor, backlog=77
    )
    listener.privilegedStartService()
    listener.startService()
    port = await listener.listening
    try:
        assert _listen_queue(port.getHost().port) == 77
    finally:
        await listener.stopService()


@pytest_twisted.ensureDeferred
async def test_gated_listener_binds_only_after_the_gate() -> None:
    """With ``after``, nothing listens until the gate fires; then the port accepts."""
    from twisted.internet import reactor

    gate: defer.Deferred[None] = defer.Deferred()
    listener = Listener(
        "tcp:0:interface=127.0.0.1",
        "listen",
        Factory.forProtocol(Protocol),
        reactor,
        after=lambda: gate,
    )
    listener.privilegedStartService()
    listener.startService()
    assert listener.port is None and not listener.listening.called
    gate.callback(None)
    port = await listener.listening
    try:
        assert listener.port is port
        with socket.create_connection(("127.0.0.1", port.getHost().port), timeout=5):
            pass
    finally:
        await listener.stopService()
    assert listener.port is None


@pytest_twisted.ensureDeferred
async def test_failed_gate_binds_nothing_and_reports_once() -> None:
    """A failing gate leaves nothing bound; ``listening`` and ``on_failure`` get the cause."""
    from twisted.internet import reactor

    gate: defer.Deferred[None] = defer.Deferred()
    failures: list[Failure] = []
    listener = Listener(
        "tcp:0:interface=127.0.0.1",
        "listen",
        Factory.forProtocol(Protocol),
        reactor,
        after=lambda: gate,
        on_failure=failures.append,
    )
    listener.startService()
    gate.errback(OSError("storage is gone"))
    with pytest.raises(OSError, match="storage is gone"):
        await listener.listening
    assert [f.getErrorMessage() for f in failures] == ["storage is gone"]
    assert listener.port is None
    await listener.stopService()


@pytest_twisted.ensureDeferred
async def test_stopping_before_the_gate_cancels_quietly() -> None:
    """Stopped while still waiting: no bind ever happens, and on_failure is not called."""
    from twisted.internet import reactor

    gate: defer.Deferred[None] = defer.Deferred()
    failures: list[Failure] = []
    listener = Listener(
        "tcp:0:interface=127.0.0.1",
        "listen",
        Factory.forProtocol(Protocol),
        reactor,
        after=lambda: gate,
        on_failure=failures.append,
    )
    listener.startService()
    await listener.stopService()
    with pytest.raises(defer.CancelledError):
        await listener.listening
    gate.callback(None)
    assert listener.port is None and failures == []


@pytest_twisted.ensureDeferred
async def test_port_in_use_is_reported() -> None:
    """Binding a port that is taken fails ``listening`` and calls ``on_failure``."""
    from twisted.internet import reactor

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        failures: list[Failure] = []
        listener = Listener(
            f"tcp:{busy}:interface=127.0.0.1",
            "listen",
            Factory.forProtocol(Protocol),
            reactor,
            on_failure=failures.append,
        )
        listener.privilegedStartService()
        with pytest.raises(CannotListenError, match=r"Address already in use"):
            await listener.listening
        assert len(failures) == 1
        await listener.stopService()


def test_bad_endpoint_names_the_setting() -> None:
    """An unparseable string is a ConfigError naming the setting it came from."""
    from twisted.internet import reactor

    with pytest.raises(ConfigError, match=r"^metrics: bad endpoint 'bogus:1'"):
        Listener("bogus:1", "metrics", Factory.forProtocol(Protocol), reactor)
