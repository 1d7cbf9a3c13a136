"""A small Kafka-protocol client on Twisted, built on the same declarations as the server.

`rustka mirror` uses it to copy stored batches, byte for byte, into any
Kafka-protocol cluster, and to read rustka's own Kafka face; tests use it to
speak raw Kafka to the broker. It is not a general Kafka client (no partition
leadership handling, no retries): it speaks to one broker connection and picks,
for each API, the highest version both sides support, within the versions
`rustka.kafka.messages` declares.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from twisted.internet import defer
from twisted.internet.endpoints import HostnameEndpoint, connectProtocol
from twisted.internet.error import ConnectError
from twisted.python.failure import Failure

from rustka.errors import BrokerUnavailable, RustkaError
from rustka.framing import LinearInt32StringReceiver
from rustka.kafka import messages
from rustka.kafka.errors import ErrorCode
from rustka.security.scram import MECHANISMS, ScramClient, ScramError

_LENGTH = struct.Struct("!I")
_API_VERSIONS = 18
_SASL_HANDSHAKE = 17
_SASL_AUTHENTICATE = 36
_CLIENT_ID = "rustka-mirror"


class KafkaError(RustkaError):
    """A Kafka broker answered with an error code."""

    def __init__(self, code: int, what: str) -> None:
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = f"error {code}"
        super().__init__(f"{what}: {name} ({code})")
        self.kafka_code = code


class KafkaClientProtocol(LinearInt32StringReceiver):
    """One connection; requests are answered in order, matched by correlation id."""

    MAX_LENGTH = 256 * 1024 * 1024

    def __init__(self, client_id: str = _CLIENT_ID) -> None:
        super().__init__()
        self.client_id = client_id
        self._next_id = 0
        self._pending: dict[int, tuple[int, int, defer.Deferred[dict[str, Any]]]] = {}
        self.versions: dict[int, tuple[int, int]] = {}
        self.closed: defer.Deferred[None] = defer.Deferred()
        self._lost = False

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        # Set first: a caller woken by the errbacks below may send again at once.
        self._lost = True
        pending, self._pending = self._pending, {}
        for _key, _ver, d in pending.values():
            d.errback(BrokerUnavailable("the Kafka broker closed the connection"))
        if not self.closed.called:
            self.closed.callback(None)

    def stringReceived(self, frame: bytes) -> None:
        (correlation_id,) = struct.unpack_from("!i", frame)
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            self.transport.loseConnection()
            return
        api_key, version, d = entry
        try:
            _cid, body = messages.decode_response(api_key, version, frame)
        except messages.KafkaCodecError as e:
            d.errback(RustkaError(f"unreadable response to API {api_key} v{version}: {e}"))
            return
        d.callback(body)

    def request(
        self, api_key: int, body: Mapping[str, Any], version: int | None = None
    ) -> defer.Deferred[dict[str, Any]]:
        """Send one request; its Deferred fires with the decoded response body."""
        if self._lost:
            return defer.fail(BrokerUnavailable("the Kafka broker closed the connection"))
        if version is None:
            version = self.version_for(api_key)
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        cid = self._next_id
        frame = messages.encode_request(api_key, version, cid, self.client_id, body)
        d: defer.Deferred[dict[str, Any]] = defer.Deferred()
        self._pending[cid] = (api_key, version, d)
        self.transport.writeSequence([_LENGTH.pack(len(frame)), frame])
        return d

    def send_only(self, api_key: int, body: Mapping[str, Any], version: int) -> None:
        """A request that gets no response (Produce with acks=0)."""
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        frame = messages.encode_request(api_key, version, self._next_id, self.client_id, body)
        self.transport.writeSequence([_LENGTH.pack(len(frame)), frame])

    async def negotiate(self) -> None:
        """ApiVersions v0 (every broker answers it), then remember the usable ranges."""
        body = await self.request(_API_VERSIONS, {}, version=0)
        if body.get("error_code"):
            raise KafkaError(body["error_code"], "ApiVersions")
        for entry in body["api_keys"]:
            key = entry["api_key"]
            ours = messages.APIS.get(key)
            if ours is None:
                continue
            lo = max(entry["min_version"], ours.min_version)
            hi = min(entry["max_version"], ours.max_version)
            if lo <= hi:
                self.versions[key] = (lo, hi)

    async def authenticate(self, user: str, password: str, mechanism: str) -> int:
        """SASL SCRAM-SHA-256/512 or PLAIN, as a Kafka client does it: SaslHandshake v1,
        then SaslAuthenticate requests; the session lifetime in ms (0: none).

        For SCRAM the broker's signature is checked, so a broker that does not hold
        the credential cannot pass for one that does.
        """
        handshake = await self.request(_SASL_HANDSHAKE, {"mechanism": mechanism}, version=1)
        if handshake["error_code"]:
            enabled = ", ".join(handshake.get("mechanisms") or []) or "none"
            raise KafkaError(
                handshake["error_code"], f"SaslHandshake {mechanism} (enabled: {enabled})"
            )

        async def step(token: bytes) -> tuple[bytes, int]:
            answer = await self.request(_SASL_AUTHENTICATE, {"auth_bytes": token})
            if answer["error_code"]:
                why = answer.get("error_message") or "SaslAuthenticate"
                raise KafkaError(answer["error_code"], why)
            return bytes(answer["auth_bytes"]), answer.get("session_lifetime_ms", 0)

        if mechanism == "PLAIN":
            _, lifetime = await step(b"\0" + user.encode() + b"\0" + password.encode())
            return lifetime
        if mechanism not in MECHANISMS:
            raise RustkaError(f"unsupported SASL mechanism {mechanism!r}")
        scram = ScramClient(MECHANISMS[mechanism], user, password)
        try:
            server_first, _ = await step(scram.first())
            server_final, lifetime = await step(scram.final(server_first))
            scram.verify(server_final)
        except ScramError as e:
            self.transport.loseConnection()
            raise RustkaError(f"SCRAM with the Kafka broker failed: {e}") from None
        return lifetime

    def version_for(self, api_key: int) -> int:
        usable = self.versions.get(api_key)
        if usable is None:
            name = messages.APIS[api_key].name if api_key in messages.APIS else api_key
            raise RustkaError(f"the Kafka broker does not offer {name} in a version rustka speaks")
        return usable[1]

    def close(self) -> defer.Deferred[None]:
        self.transport.loseConnection()
        return self.closed


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` as Kafka clients write it."""
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise RustkaError(f"bad bootstrap address {item!r}: expected HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise RustkaError("no bootstrap address given")
    return out


@dataclass(frozen=True, slots=True)
class SaslLogin:
    """What a client needs to log in to a SASL-protected Kafka listener."""

    user: str
    password: str = field(repr=False)
    mechanism: str = "SCRAM-SHA-512"


async def connect_kafka(
    reactor: Any,
    bootstrap: str,
    *,
    timeout: float = 10,
    client_id: str = _CLIENT_ID,
    sasl: SaslLogin | None = None,
) -> KafkaClientProtocol:
    """Connect to the first reachable bootstrap address, negotiate versions and, with
    ``sasl``, authenticate (SASL_PLAINTEXT)."""
    last: Exception | None = None
    for host, port in parse_bootstrap(bootstrap):
        endpoint = HostnameEndpoint(reactor, host, port, timeout=timeout)
        try:
            d = connectProtocol(endpoint, KafkaClientProtocol(client_id))
            d.addTimeout(timeout, reactor)
            proto: KafkaClientProtocol = await d
        except (ConnectError, OSError, defer.TimeoutError) as e:
            last = e
            continue
        negotiation = defer.ensureDeferred(proto.negotiate())
        negotiation.addTimeout(timeout, reactor)
        await negotiation
        if sasl is not None:
            login = defer.ensureDeferred(
                proto.authenticate(sasl.user, sasl.password, sasl.mechanism)
            )
            login.addTimeout(timeout, reactor)
            try:
                await login
            except BaseException:
                proto.transport.loseConnection()
                raise
        return proto
    raise BrokerUnavailable(f"could not connect to any of {bootstrap}: {last}")
