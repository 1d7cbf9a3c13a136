"""A synchronous, blocking client for the native protocol, for scripts and threads.

The crash and fuzz drivers talk to a broker that runs in another process (or
in the test's reactor while the driver runs in a thread), so plain sockets are
simpler than a second reactor. The codec is `rustka.native.codec`, shared with the
broker, so a frame means the same thing on both sides.
"""

from __future__ import annotations

import selectors
import socket
import struct
import time
from collections.abc import Sequence

from rustka.native import codec as p

_LENGTH = struct.Struct("!I")


def frame(payload: bytes) -> bytes:
    """Length-prefix one payload."""
    return _LENGTH.pack(len(payload)) + payload


class ConnectionDropped(Exception):
    """The broker closed the connection (or died) before the expected response arrived."""


class SyncClient:
    """One blocking connection; `call` for request/response, `send`/`recv` to pipeline.

    `send` and `recv` may run in two threads at once (one writer, one reader),
    which is how the crash driver keeps many requests in flight.
    """

    def __init__(self, host: str, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = bytearray()

    def send(self, request: p.Request) -> None:
        self.sock.sendall(frame(p.encode_request(request)))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_payload(self) -> bytes:
        """The next response payload; ConnectionDropped on EOF or reset."""
        while True:
            if len(self._buffer) >= 4:
                (length,) = _LENGTH.unpack_from(self._buffer)
                if len(self._buffer) >= 4 + length:
                    payload = bytes(self._buffer[4 : 4 + length])
                    del self._buffer[: 4 + length]
                    return payload
            try:
                chunk = self.sock.recv(1 << 20)
            except (ConnectionResetError, BrokenPipeError) as e:
                raise ConnectionDropped(str(e)) from e
            if not chunk:
                raise ConnectionDropped("the broker closed the connection")
            self._buffer += chunk

    def recv(self) -> p.Response:
        return p.decode_response(self.recv_payload())

    def call(self, request: p.Request) -> p.Response:
        self.send(request)
        return self.recv()

    def close(self) -> None:
        self.sock.close()


def exchange(
    host: str,
    port: int,
    writes: Sequence[bytes],
    expected: int,
    *,
    expect_close: bool = False,
    timeout: float = 60.0,
) -> tuple[list[bytes], bool]:
    """Write ``writes`` (one send each) while reading responses, on a non-blocking socket.

    Reading while writing is what keeps a pipelining client from deadlocking
    against a broker that stops reading once its replies back up. Returns the
    response payloads and whether the broker closed the connection. It stops
    after ``expected`` responses, or at EOF when ``expect_close`` is set; the
    deadline only turns a hang into a failure, it never paces anything.
    """
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(
        sock, selectors.EVENT_READ | selectors.EVENT_WRITE if writes else selectors.EVENT_READ
    )
    deadline = time.monotonic() + timeout
    responses: list[bytes] = []
    buffer = bytearray()
    index = 0
    pending = memoryview(writes[0]) if writes else None
    closed = False
    try:
        while True:
            if closed or (len(responses) >= expected and not expect_close and pending is None):
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"no progress: {len(responses)} of {expected} responses, "
                    f"{index} of {len(writes)} writes"
                )
            for _, events in sel.select(remaining):
                if events & selectors.EVENT_READ:
                    try:
                        chunk = sock.recv(1 << 20)
                    except (ConnectionResetError, BrokenPipeError):
                        chunk = b""
                    if not chunk:
                        closed = True
                    buffer += chunk
                    pos = 0
                    while len(buffer) - pos >= 4:
                        (length,) = _LENGTH.unpack_from(buffer, pos)
                        if len(buffer) - pos - 4 < length:
                            break
                        responses.append(bytes(buffer[pos + 4 : pos + 4 + length]))
                        pos += 4 + length
                    del buffer[:pos]
                if events & selectors.EVENT_WRITE and pending is not None and not closed:
                    try:
                        sent = sock.send(pending)
                    except (ConnectionResetError, BrokenPipeError):
                        closed = True
                        sent = 0
                    pending = pending[sent:]
                    if not len(pending):
                        index += 1
                        pending = memoryview(writes[index]) if index < len(writes) else None
                        if pending is None:
                            sel.modify(sock, selectors.EVENT_READ)
    finally:
        sel.close()
        sock.close()
    return responses, closed


def decode_all(payloads: Sequence[bytes]) -> list[p.Response]:
    return [p.decode_response(payload) for payload in payloads]
