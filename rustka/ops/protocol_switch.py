"""One port, two protocols: the first frame decides who serves the connection.

Every request of both protocols is a 4-byte length then a payload. No native op
is 0, so every native request starts with a non-zero byte, while a Kafka
request starts with its 2-byte API key, whose first byte is 0x00 for every API
rustka serves. A first payload byte of 0 is therefore either Kafka's or a
malformed native frame, and the native protocol promises such a frame an Error
answer on a connection that stays usable (docs/protocol.md, "Bad frames do not
kill the connection"). So a first frame goes to the Kafka front-end only when
it is a complete request that front-end would serve: an API key it declares, a
version it serves (or, for ApiVersions, any newer one, which it answers with its
table), a client id that fits the frame, and a body that decodes and ends where
the frame ends; or when it is a whole Kafka request header (key 0-127, version
0-31, a client id that fits) of an API or version rustka does not serve, which
the front-end closes, as Kafka does, rather than leave a Kafka client to misread a
native Error. Anything else, op 0 included, is the native protocol's.
docs/protocol.md ("Which first frames go to Kafka") states the rule byte for
byte; `first_frame_protocol` is it.

The decision waits for as many bytes as it needs: a non-zero first byte, an
unknown key or version decide for the native protocol at once, and only a frame
that still looks like Kafka's is buffered whole (at most `max_frame_bytes`,
which both protocols enforce, so the switch never holds more than either would).
The connection is then handed, with what it sent so far, to that protocol's
factory. The switch works on any transport, TLS included, because it sits where
the application protocol does.

With the Kafka protocol turned off (`kafka_enabled = false`), a connection
whose first frame is a Kafka request is closed at once instead of being fed to
the native protocol, whose Error frame a Kafka client could only misread
(docs/kafka.md, "Listeners"). Until its first frame has been decided a
connection is subject to the same idle timeout as a served one, so a client
that connects and says nothing is dropped after `idle_timeout_ms`.
"""

from __future__ import annotations

import struct
from typing import Final, Literal

from twisted.internet.interfaces import IAddress
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.protocols.policies import TimeoutMixin
from twisted.python.failure import Failure

from rustka.kafka import messages
from rustka.kafka.messages import ApiKey, KafkaCodecError

Chosen = Literal["kafka", "native"]

_LENGTH: Final = struct.Struct("!I")
_KEY_VERSION: Final = struct.Struct("!hh")
#: Byte offset of the first payload byte (after the u32 length).
_FIRST_PAYLOAD_BYTE: Final = _LENGTH.size
#: The shortest Kafka request: header v1 (key, version, correlation id, client id
#: length) with a null or empty client id and an empty body (ApiVersions v0).
_SHORTEST_KAFKA_REQUEST: Final = struct.calcsize("!hhih")
#: The first byte of every declared API key (big-endian int16): all of them are 0x00.
_KEY_FIRST_BYTES: Final = frozenset(key.to_bytes(2, "big", signed=True)[0] for key in ApiKey)
#: Kafka's API keys (0 Produce ... SaslHandshake 17 ... the newest, in the 70s) and
#: versions (none above 20 so far) lie well inside these: a first request with a key
#: and version in them is a Kafka client's even when rustka does not serve it, and
#: the Kafka front-end closes that connection as Kafka does, instead of the native
#: protocol answering with an Error frame the client would misread.
_KAFKA_KEYS: Final = range(0, 128)
_KAFKA_VERSIONS: Final = range(0, 32)
#: What a generated decoder may raise besides KafkaCodecError on hostile bytes (the
#: codec's entry points translate the same ones; rustka/kafka/schema/).
_DECODE_ERRORS: Final = (struct.error, IndexError, ValueError)


def _kafka_client(api_key: int, version: int) -> bool:
    """Whether a key and version are a Kafka client's: served, or plausibly Kafka's."""
    return _kafka_version(api_key, version) or (
        api_key in _KAFKA_KEYS and version in _KAFKA_VERSIONS
    )


def _kafka_version(api_key: int, version: int) -> bool:
    """Whether the Kafka front-end serves this key at this version instead of closing.

    It serves each declared API's range (`ApiSpec.supports`); an ApiVersions newer
    than its range gets
    the table (docs/kafka.md, "Versions outside the table"), because a client
    probes with the newest version it knows.
    """
    api = messages.APIS.get(api_key)
    if api is None:
        return False
    if api.supports(version):
        return True
    return api_key == ApiKey.API_VERSIONS and version > api.max_version


def is_kafka_request(payload: bytes | bytearray | memoryview) -> bool:
    """Whether a whole first-frame payload is a request the Kafka front-end would serve.

    That is the front-end's own acceptance (header, key, version, body), plus
    that nothing follows the body, so a real client's first request passes and
    every frame the front-end would only close on is left to the native protocol,
    which answers it.
    """
    if len(payload) < _SHORTEST_KAFKA_REQUEST:
        return False
    try:
        header, pos = messages.decode_request_header(payload)
    except KafkaCodecError:
        return False
    key, version = header.api_key, header.api_version
    if not _kafka_version(key, version):
        # A Kafka client's request rustka does not serve (a newer client's version):
        # its header is whole, and the front-end closes the connection.
        return _kafka_client(key, version)
    if not messages.APIS[key].supports(version):
        return True  # a newer ApiVersions: the front-end answers without reading the body
    # The version's own decoder, for where the body ends: a first request must end
    # exactly there. Real clients never send more, and the bytes to spare are what
    # would make a malformed native frame pass for an empty-bodied request
    # (ApiVersions v0, ListGroups v0) followed by anything.
    decode = messages.APIS[key].codec(version, True)[0]
    try:
        _, end = decode(memoryview(payload), pos)
    except (KafkaCodecError, *_DECODE_ERRORS):
        return False
    return end == len(payload)


def first_frame_protocol(
    head: bytes | bytearray, max_frame_bytes: int | None = None
) -> Chosen | None:
    """Which protocol serves a connection that began with ``head``; None: not known yet.

    ``head`` is everything the connection sent so far (the first frame's length
    prefix and payload, maybe more). The answer is "native" as soon as the bytes
    rule Kafka out, and "kafka" only once the whole first frame is there and is
    a Kafka request (`is_kafka_request`).
    """
    if len(head) < _FIRST_PAYLOAD_BYTE:
        return None
    (length,) = _LENGTH.unpack_from(head)
    if max_frame_bytes is not None and length > max_frame_bytes:
        # No payload will follow: the native protocol answers it with its Error and
        # hangs up (docs/protocol.md, "Framing").
        return "native"
    if length < _SHORTEST_KAFKA_REQUEST:
        return "native"  # the empty frame included
    have = len(head) - _FIRST_PAYLOAD_BYTE
    if have >= 1 and head[_FIRST_PAYLOAD_BYTE] not in _KEY_FIRST_BYTES:
        return "native"
    if have >= _KEY_VERSION.size:
        key, version = _KEY_VERSION.unpack_from(head, _FIRST_PAYLOAD_BYTE)
        if not _kafka_client(key, version):
            return "native"
    if have < length:
        return None
    payload = memoryview(head)[_FIRST_PAYLOAD_BYTE : _FIRST_PAYLOAD_BYTE + length]
    return "kafka" if is_kafka_request(payload) else "native"


class ProtocolSwitch(Protocol, TimeoutMixin):
    """Buffers the first bytes, then forwards everything to the protocol chosen."""

    log = Logger()

    def __init__(self, factory: ProtocolSwitchFactory, addr: IAddress) -> None:
        self.factory = factory
        self.addr = addr
        self.inner: Protocol | None = None
        self._head = bytearray()

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
        chosen = first_frame_protocol(self._head, self.factory.max_frame_bytes)
        if chosen is None:
            self.resetTimeout()
            return
        self.setTimeout(None)
        if chosen == "kafka" and self.factory.kafka is None:
            self.factory.kafka_refused += 1
            self.log.info(
                "closing a Kafka client's connection from {peer}: kafka_enabled is false",
                peer=str(self.transport.getPeer()),
            )
            self._head = bytearray()
            self.transport.loseConnection()
            return
        factory = self.factory.kafka if chosen == "kafka" else self.factory.native
        assert factory is not None
        inner = factory.buildProtocol(self.addr)
        if inner is None:
            # The chosen side refuses (its connection limit): hang up at once.
            self.transport.loseConnection()
            return
        self.inner = inner
        security = getattr(self, "security", None)
        if security is not None:
            # What this connection's listener requires (set by its SecuredFactory).
            inner.security = security  # type: ignore[attr-defined]
        head, self._head = bytes(self._head), bytearray()
        if getattr(self.transport, "protocol", None) is self:
            # A plain TCP transport calls its protocol directly: let it call the chosen
            # one from now on, so the switch costs nothing per read.
            self.transport.protocol = inner
        inner.makeConnection(self.transport)
        inner.dataReceived(head)

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
