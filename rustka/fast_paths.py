"""The fast paths that lean on Twisted's private parts, fenced in one place.

Three shortcuts bought most of the per-request latency of issue 21
(docs/performance.md), and each reaches past Twisted's public interfaces:

- `rustka.eager_write` sends an answer on a TCP transport's socket when the
  transport buffers nothing; it reads the transport's ``socket``,
  ``_tempDataLen``, ``dataBuffer``, ``connected`` and ``disconnecting`` and
  requires the transport's ``writeSomeData`` to be `tcp.Connection`'s own.
- the native server's early answer (`rustka.native.server`) sends a seed
  Produce's answer from the I/O thread under the connection's lock; it rides on
  the eager writer (no eager writer, no early answer) and moves the transport's
  socket into one whose close takes that lock.
- `rustka.ops.lean_poll` replaces the epoll reactor's poll step and uses its
  ``_poller``, ``_selectables`` and ``_doReadOrWrite``.

Each asks `enabled` (and checks the object in hand) before it takes its
shortcut; when it may not, the plain Twisted way is taken, which is always
correct and only slower. They are all off when the ``fast_paths`` setting is
false, when the environment says ``RUSTKA_FAST_PATHS=off`` (how the suite is
run without them), or when this Twisted lacks a part they use.
tests/test_fast_paths.py pins those parts on the Twisted that is installed,
and pyproject.toml bounds Twisted to the versions the suite was run on.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = [
    "EPOLL_REACTOR_PARTS",
    "TCP_TRANSPORT_PARTS",
    "enabled",
    "epoll_reactor_supported",
    "set_enabled",
    "tcp_transport_supported",
]

TCP_TRANSPORT_PARTS = ("socket", "_tempDataLen", "dataBuffer", "connected", "disconnecting")
"""What the eager writer and the early answer read on a `tcp.Connection`."""
EPOLL_REACTOR_PARTS = ("_poller", "_selectables", "_doReadOrWrite")
"""What the lean poll step uses of an `EPollReactor`."""

_OFF_WORDS = frozenset({"0", "off", "false", "no"})
_from_environment = os.environ.get("RUSTKA_FAST_PATHS", "on").strip().lower() not in _OFF_WORDS
_setting = True


def enabled() -> bool:
    """Whether the fast paths may be taken at all in this process."""
    return _from_environment and _setting


def set_enabled(flag: bool) -> None:
    """Apply the ``fast_paths`` setting; the environment's off still wins."""
    global _setting
    _setting = flag


def tcp_transport_supported(transport: Any) -> bool:
    """A plain TCP transport of a Twisted with every part the eager writer uses."""
    from twisted.internet import tcp

    return (
        enabled()
        and isinstance(transport, tcp.Connection)
        and type(transport).writeSomeData is tcp.Connection.writeSomeData
        and not getattr(transport, "TLS", False)
        and all(hasattr(transport, name) for name in TCP_TRANSPORT_PARTS)
    )


def epoll_reactor_supported(reactor: Any) -> bool:
    """An epoll reactor with every part the lean poll step uses."""
    try:
        from twisted.internet.epollreactor import EPollReactor
    except ImportError:  # not Linux
        return False
    return (
        enabled()
        and isinstance(reactor, EPollReactor)
        and all(hasattr(reactor, name) for name in EPOLL_REACTOR_PARTS)
    )
