"""One port, two protocols: the first frame decides who serves the connection.

Every request of both protocols is a 4-byte length then a payload. A Kafka
payload starts with its 2-byte API key, whose first byte is 0x00 for every API
rustka serves; a native payload starts with its 1-byte op, and no native op is
0 (docs/protocol.md, "Ops"). So byte 4 of the stream tells them apart, and the
connection is handed, with what it sent so far, to that protocol's factory.
The switch works on any transport, TLS included, because it sits where the
application protocol does.

With the Kafka protocol turned off (`kafka_enabled = false`), a connection
whose first frame is a Kafka request is closed at once instead of being fed to
the native protocol, whose Error frame a Kafka client could only misread
(docs/kafka.md, "Listeners"). Until its first frame has arrived a connection
is subject to the same idle timeout as a served one, so a client that connects
and says nothing is dropped after `idle_timeout_ms`.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IAddress, ITransport
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.protocols.policies import TimeoutMixin
from twisted.python.failure import Failure

#: Byte offset of the first payload byte (after the u32 length).
_FIRST_PAYLOAD_BYTE = 4
_EMPTY_FRAME = b"\x00\x00\x00\x00"


class ProtocolSwitch(Protocol, TimeoutMixin):
    """Buffers the first bytes, then forwards everything to the protocol chosen."""

    log = Logger()

    def __init__(self, factory: ProtocolSwitchFactory, addr: IAddress) -> None:
        self.factory = factory
        self.addr = addr
        self.inner: Protocol | None = None
        self._head = b""

    def connectionMade(self) -> None:
        self.setTimeout(self.factory.idle_timeout)

    def timeoutConnection(self) -> None:
        self.transport.abortConnection()

    def dataReceived(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.dataReceived(data)
            return
        if self.transport.disconnecting:
            return
        self._head += data
        # An empty frame decides too: no Kafka request is empty (its header alone is
        # 10 bytes), and the native protocol answers it with an Error.
        empty = self._head == _EMPTY_FRAME
        if len(self._head) <= _FIRST_PAYLOAD_BYTE and not self._oversized() and not empty:
            self.resetTimeout()
            return
        self.setTimeout(None)
        kafka = len(self._head) > _FIRST_PAYLOAD_BYTE and self._head[_FIRST_PAYLOAD_BYTE] == 0
        if kafka and self.factory.kafka is None:
            self.factory.kafka_refused += 1
            self.log.info(
                "closing a Kafka client's connection from {peer}: kafka_enabled is false",
                peer=str(self.transport.getPeer()),
            )
            self._head = b""
            self.transport.loseConnection()
            return
        chosen = self.factory.native
        if kafka and self.factory.kafka is not None:
            chosen = self.factory.kafka
        inner = chosen.buildProtocol(self.addr)
        if inner is None:
            # The chosen side refuses (its connection limit): hang up at once.
            self.transport.loseConnection()
            return
        self.inner = inner
        head, self._head = self._head, b""
        if getattr(self.transport, "protocol", None) is self:
            # A plain TCP transport calls its protocol directly: let it call the chosen
            # one from now on, so the switch costs nothing per read.
            self.transport.protocol = inner
        inner.makeConnection(self.transport)
        inner.dataReceived(head)

    def _oversized(self) -> bool:
        """A length prefix over the frame limit: no payload byte will follow to decide on.

        The native protocol answers it with its Error and hangs up
        (docs/protocol.md), so it gets the connection.
        """
        limit = self.factory.max_frame_bytes
        if limit is None or len(self._head) < _FIRST_PAYLOAD_BYTE:
            return False
        return int.from_bytes(self._head[:_FIRST_PAYLOAD_BYTE], "big") > limit

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.setTimeout(None)
        if self.inner is not None:
            self.inner.connectionLost(reason)


class ProtocolSwitchFactory(Factory):
    """Serves the native protocol and, unless it is turned off, Kafka's on one port.

    ``kafka_refused`` counts the Kafka connections closed because Kafka is off.
    """

    def __init__(self, native: Factory, kafka: Factory | None) -> None:
        self.native = native
        self.kafka = kafka
        self.kafka_refused = 0
        config = getattr(native, "config", None)
        idle_ms = getattr(config, "idle_timeout_ms", None)
        self.idle_timeout: float | None = None if idle_ms is None else idle_ms / 1000
        self.max_frame_bytes: int | None = getattr(config, "max_frame_bytes", None)

    def buildProtocol(self, addr: IAddress) -> Protocol | None:
        """Refuse at accept while the native side is full, as a native-only port would.

        The native factory counts and logs the refusal, so a client that
        connects and waits is closed at once instead of at its first frame.
        """
        config = getattr(self.native, "config", None)
        limit = getattr(config, "max_connections", None)
        connections = getattr(self.native, "connections", ())
        if limit is not None and len(connections) >= limit:
            return self.native.buildProtocol(addr)
        return ProtocolSwitch(self, addr)

    def doStart(self) -> None:
        super().doStart()
        self.native.doStart()
        if self.kafka is not None:
            self.kafka.doStart()

    def doStop(self) -> None:
        self.native.doStop()
        if self.kafka is not None:
            self.kafka.doStop()
        super().doStop()


def unwrap(transport: ITransport) -> Any:
    """The protocol really serving ``transport`` (for admin views)."""
    proto = getattr(transport, "protocol", None)
    return proto.inner if isinstance(proto, ProtocolSwitch) else proto
