"""systemd notifications, received on a real AF_UNIX datagram socket."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from twisted.internet import defer

from rustka.ops.notify import NotifyService, notify


def _receive(sock: socket.socket) -> bytes:
    return sock.recv(4096)


def _nothing_waiting(sock: socket.socket) -> bool:
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        sock.recv(4096)
    except BlockingIOError:
        return True
    finally:
        sock.settimeout(timeout)
    return False


@pytest.fixture
def listener(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A datagram socket standing in for systemd, named by NOTIFY_SOCKET."""
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    try:
        yield sock
    finally:
        sock.close()


def test_ready_and_stopping_datagrams(listener: socket.socket) -> None:
    """startService sends READY=1 with a STATUS, stopService sends STOPPING=1."""
    svc = NotifyService(status="serving on 127.0.0.1:9092")
    svc.startService()
    assert _receive(listener) == b"READY=1\nSTATUS=serving on 127.0.0.1:9092"
    svc.stopService()
    assert _receive(listener) == b"STOPPING=1\nSTATUS=shutting down"
    assert _nothing_waiting(listener)


def test_abstract_namespace_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    """A NOTIFY_SOCKET starting with @ reaches the abstract-namespace socket of that name."""
    name = f"rustka-test-notify-{os.getpid()}-{id(monkeypatch)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify("READY=1") is True
        assert sock.recv(4096) == b"READY=1"


def test_no_notify_socket_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without NOTIFY_SOCKET nothing is sent and the service still starts and stops."""
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify("READY=1") is False
    svc = NotifyService()
    svc.startService()
    assert svc.running
    assert svc.ready is not None and svc.ready.result is False
    svc.stopService()
    assert not svc.running


def test_unreachable_socket_is_not_fatal(tmp_path: Path) -> None:
    """A NOTIFY_SOCKET that nobody listens on makes notify return False instead of raising."""
    environ = {"NOTIFY_SOCKET": str(tmp_path / "missing")}
    assert notify("READY=1", environ) is False
    svc = NotifyService(environ=environ)
    svc.startService()
    assert svc.ready is not None and svc.ready.result is False
    svc.stopService()


def test_ready_waits_for_listeners(listener: socket.socket) -> None:
    """READY=1 is held back until every awaited Deferred has fired, and their results pass on."""
    first: defer.Deferred[str] = defer.Deferred()
    second: defer.Deferred[str] = defer.Deferred()
    svc = NotifyService(wait_for=[first, second])
    svc.startService()
    first.callback("port-1")
    assert _nothing_waiting(listener)
    second.callback("port-2")
    assert _receive(listener) == b"READY=1\nSTATUS=serving"
    seen: list[str] = []
    first.addCallback(seen.append)
    second.addCallback(seen.append)
    assert seen == ["port-1", "port-2"]
    svc.stopService()
    assert _receive(listener) == b"STOPPING=1\nSTATUS=shutting down"


def test_failed_listener_means_no_ready(listener: socket.socket) -> None:
    """If an awaited listener fails, READY=1 is never sent and the failure stays with its owner."""
    listening: defer.Deferred[str] = defer.Deferred()
    svc = NotifyService(wait_for=[listening])
    svc.startService()
    listening.errback(OSError("address in use"))
    assert svc.ready is not None and svc.ready.result is False
    assert _nothing_waiting(listener)
    errors: list[BaseException] = []
    listening.addErrback(lambda f: errors.append(f.value))
    assert isinstance(errors[0], OSError)
    svc.stopService()
    assert _receive(listener) == b"STOPPING=1\nSTATUS=shutting down"
