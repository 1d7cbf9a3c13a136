"""The epoll reactor's poll step without a logging context per event (issue 21, latency).

Twisted's epoll reactor runs every ready descriptor's read or write inside
``log.callWithLogger``: a legacy log context (``{"system": logPrefix()}``) pushed
through ``context.call`` for each event, and a catch-all that logs. With two
events per one-record request (the socket and the thread waker), those wrappers
were about a tenth of the reactor thread's time under W2 (docs/performance.md,
"Latency (issue 21)").

`install` replaces the reactor's ``doIteration`` on the instance with a poll
step that hands each event straight to the reactor's own ``_doReadOrWrite``,
which already turns a failing ``doRead``/``doWrite`` into a lost connection; a
failure outside it (a protocol's ``connectionLost`` raising) is logged here
and the other events of the same poll are still served. What changes is only
the legacy ``system`` prefix of lines that Twisted's old ``log.msg`` writes
while an event runs (``-`` instead of the protocol's log prefix); rustka's own
events use ``twisted.logger`` and carry their namespace as before.

Only Twisted's ``EPollReactor`` (the default on Linux) is changed, and only while
the fast paths are on (`rustka.fast_paths`); any other reactor
(``--reactor=asyncio``, poll, select) is left as it is.
"""

from __future__ import annotations

import errno
import types
from typing import Any

from twisted.logger import Logger

from rustka.fast_paths import epoll_reactor_supported

__all__ = ["install"]

_log = Logger()


def install(reactor: Any) -> bool:
    """Use the lean poll step on ``reactor`` if it is an epoll reactor with the parts the
    step uses and the fast paths are on (`rustka.fast_paths`); True if it is now."""
    if not epoll_reactor_supported(reactor):
        return False
    if getattr(reactor.doIteration, "__func__", None) is not _poll:
        reactor.doIteration = types.MethodType(_poll, reactor)
    return True


def _poll(reactor: Any, timeout: float | None) -> None:
    """One pass: wait for ready descriptors (up to ``timeout`` s), serve each event."""
    selectables = reactor._selectables
    try:
        ready = reactor._poller.poll(-1 if timeout is None else timeout, len(selectables))
    except InterruptedError:
        return
    except OSError as e:
        if e.errno == errno.EINTR:
            return
        raise
    serve = reactor._doReadOrWrite
    for fd, event in ready:
        selectable = selectables.get(fd)
        if selectable is None:
            # Removed by an earlier event of this same pass.
            continue
        try:
            serve(selectable, fd, event)
        except Exception:
            _log.failure("an I/O event of {selectable!r} failed", selectable=selectable)
