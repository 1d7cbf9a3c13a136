"""Length-prefixed framing with a linear receive path, for both ends of a connection.

`Int32StringReceiver` keeps its unread bytes in an immutable ``bytes`` and
rebuilds it on every read, so a frame of n bytes arriving in 64 KiB reads
costs O(n^2) (a 32 MiB frame took seconds). This subclass keeps the class's
contract (u32 big-endian length, `MAX_LENGTH` checked on the prefix before any
payload is buffered, `stringReceived`, `lengthLimitExceeded`) and appends to
one bytearray instead, trimming consumed frames once per read.

Subclasses say when to stop delivering frames by overriding `framing_paused`
(the server does so when a per-connection limit pauses reading) and call
`deframe` to pick up the buffered bytes again.
"""

from __future__ import annotations

import struct

from twisted.protocols.basic import Int32StringReceiver

_LENGTH = struct.Struct("!I")


class LinearInt32StringReceiver(Int32StringReceiver):
    """`Int32StringReceiver` whose receive path is linear in the bytes received."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._deframing = False
        self.next_frame_at = 0

    def framing_paused(self) -> bool:
        """Whether to stop delivering frames now (they stay buffered until `deframe`)."""
        return bool(self.transport is not None and self.transport.disconnecting)

    def dataReceived(self, data: bytes) -> None:
        self._buffer += data
        if not self._deframing:
            self.deframe()

    def deframe(self) -> None:
        """Deliver every complete buffered frame until `framing_paused` says stop."""
        if self._deframing:
            return
        self._deframing = True
        buf = self._buffer
        pos = 0
        size = len(buf)
        limit = self.MAX_LENGTH
        try:
            while size - pos >= 4:
                # Where the next frame starts, for a `framing_paused` that peeks at it.
                self.next_frame_at = pos
                if self.framing_paused():
                    break
                (length,) = _LENGTH.unpack_from(buf, pos)
                if length > limit:
                    self._buffer = bytearray()
                    self.lengthLimitExceeded(length)
                    return
                end = pos + 4 + length
                if end > size:
                    break
                with memoryview(buf) as view:
                    frame = bytes(view[pos + 4 : end])
                pos = end
                self.stringReceived(frame)
        finally:
            self._deframing = False
            self.next_frame_at = 0
            if pos and buf is self._buffer:
                del buf[:pos]

    def discard_buffer(self) -> None:
        """Forget unread bytes (after a fatal error the stream cannot be trusted)."""
        self._buffer = bytearray()
