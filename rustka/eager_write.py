"""Send on the socket at once when nothing waits before it (issue 21, latency).

Both front-ends write their answers through it, and the client library its
requests while none is in flight (`rustka.client.protocol`).

Twisted's ``transport.write`` never sends: it appends to the transport's buffer
and registers the socket for writing, and the bytes leave on the reactor's next
pass, which then unregisters it again (docs/performance.md, "The I/O pool
without Twisted's ThreadPool": 3 ``epoll_wait`` and 2 ``epoll_ctl`` per
one-record request). When the transport holds nothing, a non-blocking
``send`` now puts the answer in the kernel in one system call and the same
reactor pass.

Only what ``send`` did not take is handed to the transport, so everything
Twisted does with output still happens to every byte it ever holds: its
buffering and order (a later write goes behind what it buffered, and while it
buffers anything, nothing is sent here), the streaming producer's pause when
its buffer is full (back-pressure), and the close after the last byte. The
output budget (`rustka.output_budget`) is released when an answer is handed to
the writer, as it was when it was handed to the transport.

Only a plain TCP connection is written here: a TLS transport (the TLS wrapper
protocol, or ``startTLS``) must encrypt what it sends, and a UNIX socket may
carry file descriptors, so those get the transport itself (`writer_for`).
Everything runs on the reactor thread, like the transport's own writes (the
native server's lane threads send only under the connection's lock, which
the reactor takes around its own writes, `rustka.native.server`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twisted.internet import tcp

from rustka.fast_paths import tcp_transport_supported

__all__ = ["EagerWriter", "writer_for"]

# Linux's IOV_MAX: more parts than this are joined and sent as one.
_MAX_PARTS = 1024


def writer_for(transport: Any) -> Any:
    """What a connection writes its answers to: an `EagerWriter` over a plain TCP
    transport while the fast paths are on (`rustka.fast_paths`), else the transport
    itself (same ``writeSequence``, ``write``, ``unregisterProducer`` and
    ``loseConnection``)."""
    if tcp_transport_supported(transport):
        return EagerWriter(transport)
    return transport


class EagerWriter:
    """A plain TCP transport's writes, sent at once while the transport buffers nothing.

    ``sent_now`` and ``handed_on`` count answers (calls) sent whole here and
    answers whose bytes (all or the rest) went to the transport, for tests and
    the admin views.
    """

    __slots__ = ("_socket", "handed_on", "sent_now", "transport")

    def __init__(self, transport: tcp.Connection) -> None:
        self.transport = transport
        self._socket = transport.socket
        self.sent_now = 0
        self.handed_on = 0

    def writeSequence(self, parts: Sequence[bytes]) -> None:
        if len(parts) == 1:
            self.write(parts[0])
            return
        if not parts:
            return
        t = self.transport
        if t._tempDataLen or t.dataBuffer or t.disconnecting or not t.connected:
            self.handed_on += 1
            t.writeSequence(parts)
            return
        if len(parts) > _MAX_PARTS:
            self.write(b"".join(parts))
            return
        # sendmsg gathers the parts in the kernel: a large answer is not joined first.
        sent = self._send(self._socket.sendmsg, parts)
        if sent == sum(map(len, parts)):
            self.sent_now += 1
            return
        self.handed_on += 1
        rest = list(parts)
        while sent and sent >= len(rest[0]):
            sent -= len(rest.pop(0))
        if sent:
            rest[0] = rest[0][sent:]
        t.writeSequence(rest)

    def write(self, data: bytes) -> None:
        t = self.transport
        if t._tempDataLen or t.dataBuffer or t.disconnecting or not t.connected:
            # Something is queued before it, or the transport is closing: its order
            # and its close rule decide.
            self.handed_on += 1
            t.write(data)
            return
        sent = self._send(self._socket.send, data)
        if sent == len(data):
            self.sent_now += 1
            return
        self.handed_on += 1
        t.write(data[sent:] if sent else data)

    @staticmethod
    def _send(send: Any, data: Any) -> int:
        """Bytes the kernel took now: none when its buffer is full, or when the peer is
        gone (EPIPE, ECONNRESET...), which the transport then finds on its own write and
        closes the connection the way it always does."""
        try:
            return send(data)  # type: ignore[no-any-return]
        except OSError:
            # BlockingIOError (EAGAIN) included; EINTR is retried by Python itself.
            return 0

    def unregisterProducer(self) -> None:
        self.transport.unregisterProducer()

    def loseConnection(self) -> None:
        self.transport.loseConnection()
