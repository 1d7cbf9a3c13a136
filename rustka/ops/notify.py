"""systemd readiness (``Type=notify``) without libsystemd.

With ``Type=notify`` systemd holds back units ordered after the broker until it
says READY=1, so clients started by systemd never meet a closed port. The
protocol is one datagram of ``KEY=value`` lines to the AF_UNIX socket named by
``$NOTIFY_SOCKET``; outside systemd the variable is unset and all of this is a
no-op. A failed notification is logged, never fatal: readiness reporting must
not be the thing that takes a healthy broker down.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from twisted.application import service
from twisted.internet import defer
from twisted.logger import Logger

_log = Logger(namespace="rustka.ops.notify")


def notify(state: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` (newline-separated ``KEY=value``) to $NOTIFY_SOCKET; True if sent."""
    env = os.environ if environ is None else environ
    address = env.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        # a leading @ names a socket in the abstract namespace, spelled with a NUL
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(state.encode("utf-8"), address)
    except OSError as e:
        _log.warn(
            "cannot notify systemd at {address!r}: {error}",
            address=env.get("NOTIFY_SOCKET"),
            error=e.strerror or str(e),
        )
        return False
    return True


class NotifyService(service.Service):
    """Reports READY=1 once started and STOPPING=1 when shutdown begins.

    Add it *last* to the top service: children start in order, so by then every
    listener has bound its port and the storage is open; children stop in
    reverse, so STOPPING=1 goes out before anything else winds down.
    ``wait_for`` holds READY back until those Deferreds fire (for example each
    listener's ``listening``); if one fails, READY is never sent and the failed
    listener's own error handling takes over.
    """

    def __init__(
        self,
        status: str = "serving",
        wait_for: Iterable[defer.Deferred[Any]] = (),
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self._wait_for = list(wait_for)
        self._environ = environ
        self.ready: defer.Deferred[bool] | None = None

    def startService(self) -> None:
        super().startService()
        waiting: defer.Deferred[Any] = defer.gatherResults(
            [_observe(d) for d in self._wait_for], consumeErrors=True
        )
        self.ready = waiting.addCallbacks(self._announce, lambda _: False)

    def _announce(self, _: object) -> bool:
        if not self.running:
            return False
        return notify(f"READY=1\nSTATUS={self.status}", self._environ)

    def stopService(self) -> None:
        super().stopService()
        notify("STOPPING=1\nSTATUS=shutting down", self._environ)


def _observe(d: defer.Deferred[Any]) -> defer.Deferred[None]:
    """A Deferred that follows ``d`` without altering the result ``d`` passes on."""
    mirror: defer.Deferred[None] = defer.Deferred()

    def passed(result: Any) -> Any:
        mirror.callback(None)
        return result

    def failed(failure: Any) -> Any:
        mirror.errback(failure)
        return failure

    d.addCallbacks(passed, failed)
    return mirror
