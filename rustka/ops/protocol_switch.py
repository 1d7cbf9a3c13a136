"""One port, two protocols: the first frame decides who serves the connection.

Every request of both protocols is a 4-byte length then a payload. A Kafka
payload starts with its 2-byte API key, whose first byte is 0x00 for every API
rustka serves; a native payload starts with its 1-byte op, and no native op is
0 (docs/protocol.md, "Ops"). So byte 4 of the stream tells them apart, and the
connection is handed, with what it sent so far, to that protocol's factory.
The switch works on any transport, TLS included, because it sits where the
application protocol does.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IAddress, ITransport
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure

#: Byte offset of the first payload byte (after the u32 length).
_FIRST_PAYLOAD_BYTE = 4


class ProtocolSwitch(Protocol):
    """Buffers the first bytes, then forwards everything to the protocol chosen."""

    def __init__(self, factory: ProtocolSwitchFactory, addr: IAddress) -> None:
        self.factory = factory
        self.addr = addr
        self.inner: Protocol | None = None
        self._head = b""

    def dataReceived(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.dataReceived(data)
            return
        self._head += data
        if len(self._head) <= _FIRST_PAYLOAD_BYTE:
            return
        kafka = self._head[_FIRST_PAYLOAD_BYTE] == 0 and self.factory.kafka is not None
        chosen: Factory = self.factory.kafka if kafka else self.factory.native
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

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        if self.inner is not None:
            self.inner.connectionLost(reason)


class ProtocolSwitchFactory(Factory):
    """Serves the native protocol and, unless it is turned off, Kafka's on one port."""

    def __init__(self, native: Factory, kafka: Factory | None) -> None:
        self.native = native
        self.kafka = kafka

    def buildProtocol(self, addr: IAddress) -> Protocol:
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
