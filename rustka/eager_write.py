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
Everything runs on the reactor thread, like the transport's own writes, with
one exception: an I/O thread that has just stored a produce may send its
answer itself (`send_early`), only under the connection's lock, which the
reactor takes around its own writes and which Twisted's close of the socket
takes too (`close_under_lock`).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence
from typing import Any

from twisted.internet import tcp

from rustka.fast_paths import tcp_transport_supported

__all__ = ["EagerWriter", "close_under_lock", "send_early", "writer_for", "writer_under_lock"]

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


class _LockedCloseSocket(socket.socket):
    """A connection's socket whose close waits for its lock (`close_under_lock`)."""

    __slots__ = ("lock",)

    def close(self) -> None:
        with self.lock:
            super().close()


def close_under_lock(lock: threading.RLock, transport: Any) -> None:
    """Make Twisted's close of the transport's socket take ``lock``.

    An I/O thread answering a produce itself sends on the socket under the lock,
    but Twisted closes its socket on the reactor without it: a thread between
    reading the socket's number and its send() could then write to a new
    connection given the same number. The same descriptor moves into a socket
    object whose close() takes the lock; the transport's ``socket`` and
    ``fileno`` follow it. Call it before `writer_for`, which keeps the socket.
    """
    old = transport.socket
    sock = _LockedCloseSocket(old.family, old.type, old.proto, fileno=old.detach())
    sock.lock = lock
    sock.setblocking(False)
    transport.socket = sock
    transport.fileno = sock.fileno


def writer_under_lock(transport: Any, lock: threading.RLock) -> Any:
    """`writer_for`, for a connection whose I/O threads may answer with `send_early`
    under ``lock``: a plain TCP socket's close is made to take the lock first
    (`close_under_lock`)."""
    if writer_for(transport) is not transport:
        close_under_lock(lock, transport)
    return writer_for(transport)


_NOTHING_MORE: tuple[bytes, ...] = ()


def send_early(
    queue: Any, slots: Sequence[Any], transport: Any, writer: EagerWriter, data: bytes
) -> bool:
    """From an I/O thread, under the connection's lock: send ``data``, the answers of
    ``slots`` (`rustka.connections.Slot`), now if this is the moment; True when it
    went whole.

    Twisted's transport is not thread-safe, so the thread writes only while the
    reactor cannot (the caller holds the lock the reactor takes around every
    write and every pop of ``queue``), with these slots at the head of the queue
    (every answer before them handed out already, so order holds) and nothing in
    the transport's buffer (so nothing queued there is overtaken), the
    connection neither closing nor closed. Answers sent whole leave the queue;
    after a partial send the rest becomes the head slot's answer, which the
    reactor writes before anything else; otherwise nothing changes and the
    reactor answers as it always does. The slots must have reserved nothing in
    the output budget (a produce does not).
    """
    if queue.closing or len(queue) < len(slots):
        return False
    for i, slot in enumerate(slots):
        if queue[i] is not slot or slot.parts is not None:
            return False
    t = transport
    if t._tempDataLen or t.dataBuffer or t.disconnecting or not t.connected:
        return False
    try:
        # The socket is closed only under the lock (`close_under_lock`), so its
        # number cannot have gone to another connection meanwhile.
        sent = writer._socket.send(data)
    except OSError:
        return False
    if not sent:
        return False
    for slot in slots:
        slot.parts = _NOTHING_MORE
    if sent < len(data):
        slots[0].parts = (data[sent:],)
        return False
    popleft = queue.popleft
    for _ in slots:
        popleft()
    return True
