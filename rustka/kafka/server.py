"""The Kafka front-end's connection: framing, request order and per-connection limits.

Kafka answers the requests of one connection in the order they arrived, and its
broker processes one request of a connection at a time (it "mutes" the channel).
rustka does the same with one relaxation that keeps producers fast: consecutive
Produce requests may run together, so the batches of a pipelining producer share
one group commit. Anything else waits for what is in flight, so a Fetch sent
after a Produce on the same connection sees its records (docs/kafka.md, "Order").

Requests are decoded with the declarations of `rustka.kafka.messages` and handed,
through `rustka.kafka.apis.dispatch`, to the handler its table lists for their
API key, which calls only the broker core. Answers leave in request order from
the connection's `rustka.connections.ResponseQueue`. A request that cannot be
parsed closes the connection, as Kafka does: the rest of the stream can no
longer be trusted.

Output is bounded per connection (docs/kafka.md, "Fetch and ListOffsets"): a
Fetch's answer is held within `max_output_bytes_per_connection` (its max_bytes
is capped by it; Kafka's first-batch rule may still exceed it by one batch) and
its bytes are reserved in the connection's `OutputBudget` from the moment it
starts until it is handed to the transport. While the transport says the
client is not reading (pauseProducing), no further request is taken from the
buffer and the socket is not read, so a client that pipelines Fetches and
never reads holds at most about one response plus the transport's buffer.
"""

from __future__ import annotations

import struct
import threading
import time
from typing import Any

from twisted.internet import defer, interfaces
from twisted.internet.protocol import Factory
from twisted.logger import Logger
from twisted.protocols.policies import TimeoutMixin
from twisted.python.failure import Failure
from zope.interface import implementer

from rustka.broker.core import Broker
from rustka.broker.stats import RequestStats
from rustka.config import Config
from rustka.connections import NO_ANSWER, ResponseQueue, Slot, close_all, start_serving
from rustka.eager_write import EagerWriter, send_early, writer_under_lock
from rustka.framing import LinearInt32StringReceiver
from rustka.kafka import messages
from rustka.kafka.apis import HANDLERS, dispatch
from rustka.kafka.context import Body, Handler, RequestContext
from rustka.kafka.errors import ErrorCode
from rustka.kafka.messages import ApiKey
from rustka.kafka.schema import KafkaCodecError, RequestHeader
from rustka.output_budget import OutputBudget
from rustka.security.principal import Principal
from rustka.security.session import (
    NO_SECURITY,
    Authenticator,
    ConnectionAuth,
    ListenerSecurity,
    authenticator_from_config,
    subject_of,
)

_LENGTH = struct.Struct("!I")
# Read once: looking a member up on an Enum class costs ~0.2 us in CPython 3.11, and these
# are compared for every frame.
_PRODUCE = ApiKey.PRODUCE
_FETCH = ApiKey.FETCH
# Bytes buffered behind a request in flight before the connection stops being read.
_READ_AHEAD = 1 << 20
# How many Produce requests of one connection may be in flight together.
_MAX_PIPELINED_PRODUCES = 16
# The place a bare SASL token (after SaslHandshake v0) holds in the queue.
_RAW_TOKEN = RequestHeader(ApiKey.SASL_AUTHENTICATE, 0, -1, None)
# What a connection may send before it has authenticated (docs/kafka.md, "Authentication").
_BEFORE_AUTHENTICATION = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
)


def _framed(header: RequestHeader, body: Body) -> tuple[list[bytes], int]:
    """A response's parts behind their length prefix, and the response's size."""
    parts = messages.encode_response_parts(
        header.api_key, header.api_version, header.correlation_id, body
    )
    size = sum(map(len, parts))
    parts.insert(0, _LENGTH.pack(size))
    return parts, size


@implementer(interfaces.IPushProducer)
class KafkaProtocol(LinearInt32StringReceiver, TimeoutMixin):
    """One Kafka client connection; see the module docstring."""

    log = Logger()
    factory: KafkaFactory
    security: ListenerSecurity = NO_SECURITY
    """What the listener requires; set on the connection by its listener's factory."""

    def __init__(self) -> None:
        super().__init__()
        self.budget = OutputBudget(0)
        # Each slot's request is its RequestHeader.
        self._queue = ResponseQueue(self.budget)
        self._closed = False
        self._paused_by_client = False
        self._reading_paused = False
        self.client_id: str | None = None
        self.software: tuple[str, str] | None = None
        self.auth = ConnectionAuth(NO_SECURITY, None)
        self.raw_sasl = False
        self.requests = 0
        self.connected_at = time.time()
        # Where answers are written: the socket at once when the transport buffers
        # nothing (rustka.eager_write), else the transport.
        self._out: Any = None
        # Taken by the reactor around every write and pop of the queue, and by an I/O
        # thread answering a Produce itself (`answer_early`): one writer at a time.
        self._out_lock = threading.RLock()
        self._eager = False
        self.answered_early = 0
        """Produce answers an I/O thread sent whole itself (for tests and admin views)."""

    # -- lifecycle ----------------------------------------------------------------

    @property
    def principal(self) -> Principal:
        """Who the connection acts as: User:ANONYMOUS until (or without) authentication."""
        return self.auth.principal

    def connectionMade(self) -> None:
        self.auth = ConnectionAuth(self.security, self.factory.authenticator)
        self._out = writer_under_lock(self.transport, self._out_lock)
        self._eager = isinstance(self._out, EagerWriter)
        start_serving(self, self.factory.config)

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        with self._out_lock:
            self._closed = True
            self._queue.clear()
        self.setTimeout(None)
        self.factory.connection_closed(self)

    def timeoutConnection(self) -> None:
        if self._queue:
            self.resetTimeout()
            return
        self.log.info("dropping idle Kafka connection from {peer}", peer=self.peer)
        self.transport.abortConnection()

    @property
    def peer(self) -> str:
        peer = self.transport.getPeer()
        host = getattr(peer, "host", None)
        return f"{host}:{peer.port}" if host is not None else str(peer)

    # -- receiving ----------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        self.resetTimeout()
        super().dataReceived(data)
        if self._queue and not self._reading_paused and len(self._buffer) > _READ_AHEAD:
            # Requests wait behind the one in flight: stop reading until it is answered,
            # so a pipelining client cannot make the broker buffer without bound.
            self._reading_paused = True
            self.transport.pauseProducing()

    def framing_paused(self) -> bool:
        """Hold buffered frames while the request in flight must finish first."""
        queue = self._queue
        if self._closed or queue.closing or self.transport.disconnecting:
            # After a request that closes the connection nothing behind it is read, even
            # frames already buffered in the same read.
            return True
        if self._paused_by_client:
            # The client is not reading its answers: take no new request meanwhile.
            return True
        if not queue:
            return False
        if len(queue) >= _MAX_PIPELINED_PRODUCES:
            return True
        # Only a Produce may join in-flight Produces; peek at the next frame's key.
        buf = self._buffer
        at = self.next_frame_at
        if len(buf) < at + 6:
            return False
        next_key = (buf[at + 4] << 8) | buf[at + 5]
        return next_key != _PRODUCE or any(s.request.api_key != _PRODUCE for s in queue)

    def lengthLimitExceeded(self, length: int) -> None:
        self.log.warn(
            "closing Kafka connection from {peer}: frame of {length} bytes exceeds {limit}",
            peer=self.peer,
            length=length,
            limit=self.MAX_LENGTH,
        )
        self.discard_buffer()
        self._close_after_answers()

    def stringReceived(self, frame: bytes) -> None:
        self.requests += 1
        if self.raw_sasl:
            self._raw_sasl_token(frame)
            return
        try:
            header, pos = messages.decode_request_header(frame)
        except KafkaCodecError as e:
            self._bad_request(f"unreadable request header: {e}")
            return
        self.client_id = header.client_id
        handler = self.factory.handlers.get(header.api_key)
        api = messages.APIS.get(header.api_key)
        if handler is None or api is None:
            self._bad_request(f"unsupported API key {header.api_key}")
            return
        auth = self.auth
        if auth.required and header.api_key not in _BEFORE_AUTHENTICATION:
            if not auth.authenticated and auth.security.mode == "mtls":
                auth.from_certificate(subject_of(self.transport), self.peer)
            if not auth.may_serve():
                self._bad_request(
                    f"{api.name} before authenticating"
                    if not auth.authenticated
                    else f"{api.name} after the session expired without re-authentication"
                )
                return
        if not api.min_version <= header.api_version <= api.max_version:
            if header.api_key == ApiKey.API_VERSIONS:
                # Kafka's answer: a v0-layout table with UNSUPPORTED_VERSION, so the
                # client can retry with a version it finds there.
                started = time.perf_counter()
                answer = messages.api_versions_error_response(header.correlation_id)
                self._queue.push_answer((_LENGTH.pack(len(answer)), answer))
                # Counted as what it is: an ApiVersions answer in v0's layout.
                self._count(
                    header._replace(api_version=0),
                    started,
                    {"error_code": ErrorCode.UNSUPPORTED_VERSION},
                )
                self._flush()
                return
            self._bad_request(
                f"unsupported version {header.api_version} of API key {header.api_key}"
            )
            return
        try:
            body = messages.decode_request(header.api_key, header.api_version, frame, pos)
        except KafkaCodecError as e:
            self._bad_request(f"malformed {api.name} v{header.api_version}: {e}")
            return
        cost = 0
        if header.api_key == _FETCH:
            cost = self._reserve_fetch(body)
        started = time.perf_counter()
        slot = self._queue.push(header, cost)
        try:
            result = dispatch(handler, RequestContext(self.factory, self, header), body)
        except Exception:
            self.log.failure("Kafka {api} handler failed", api=api.name)
            self._queue.withdraw(slot)
            self._bad_request(f"internal error in {api.name}")
            return
        if isinstance(result, defer.Deferred):
            result.addCallbacks(
                self._answered, self._handler_failed, (slot, started), None, (slot,)
            )
        else:
            self._answered(result, slot, started)

    def _raw_sasl_token(self, frame: bytes) -> None:
        """A SASL token after SaslHandshake v0: a bare frame, answered with a bare frame.

        It holds a place in the queue like a request, so nothing behind it is read
        until it is answered, even when its check runs on a thread.
        """
        from rustka.kafka.sasl_handlers import raw_token

        slot = self._queue.push(_RAW_TOKEN)
        raw_token(self, self.factory.reactor, frame).addCallbacks(
            self._raw_answered, self._handler_failed, (slot,), None, (slot,)
        )

    def _raw_answered(self, answer: bytes | None, slot: Slot) -> None:
        if self._closed:
            return
        if answer is None:
            # v0 has no way to say why: hang up, after the delay that slows guessing.
            self.discard_buffer()
            self._queue.withdraw(slot)
            self.transport.pauseProducing()
            delay = self.factory.authenticator.failure_delay_s
            self.factory.reactor.callLater(delay, self._close_after_answers)
            return
        self._queue.answer(slot, (_LENGTH.pack(len(answer)), answer))
        self._flush()

    def _reserve_fetch(self, body: Body) -> int:
        """Cap a Fetch's answer by the output budget and reserve what it may return."""
        limit = self.budget.limit
        if limit > 0:
            body["max_bytes"] = min(body.get("max_bytes", limit), limit)
        return self.budget.reserve(
            self.factory.broker.fetch_limits.reservation(body.get("max_bytes", 0))
        )

    def _handler_failed(self, failure: Failure, slot: Slot) -> None:
        header: RequestHeader = slot.request
        self.log.failure(
            "Kafka {api} handler failed", failure, api=messages.APIS[header.api_key].name
        )
        if self._closed:
            return
        # Its place answers nothing; the answers before it still go out, then the hang-up.
        self._queue.answer(slot, NO_ANSWER)
        self._close_after_answers()
        self._flush()

    def _answered(self, body: Body | None, slot: Slot, started: float) -> None:
        header: RequestHeader = slot.request
        if self._closed:
            return
        if slot.parts is not None:
            # An I/O thread answered it already (`answer_early`), whole or in part.
            pass
        elif body is None:
            self._queue.answer(slot, NO_ANSWER, 0)
        else:
            parts, size = _framed(header, body)
            # The answer exists: its real size replaces the reservation until it is written.
            self._queue.answer(slot, parts, size)
        self._count(header, started, body)
        self._flush()

    def answer_early(self, header: RequestHeader, body: Body) -> None:
        """On the I/O thread that stored a one-partition Produce: send its answer now when
        the connection's output is the thread's to take (`rustka.eager_write.send_early`
        says when). Otherwise nothing happens, and `_answered` answers it on the
        reactor as always; it runs for this request either way, for the statistics."""
        if not self._eager:
            return
        queue = self._queue
        if self._closed or not queue or queue[0].request is not header:
            # Answers before it are still to go out: the reactor keeps the order.
            return
        data = b"".join(_framed(header, body)[0])
        with self._out_lock:
            if self._closed or not queue or queue[0].request is not header:
                return
            if send_early(queue, (queue[0],), self.transport, self._out, data):
                self.answered_early += 1

    def _count(self, header: RequestHeader, started: float, body: Any) -> None:
        stats = self.factory.request_stats
        stats.answered(header.api_key, time.perf_counter() - started)
        if body:
            messages.count_response_errors(
                header.api_key, header.api_version, body, stats.of(header.api_key).error_codes
            )

    def _flush(self) -> None:
        """Write the answers at the head of the queue; read on once none is pending."""
        with self._out_lock:
            idle = self._queue.flush(self._out)
        if idle:
            if self._queue.closing:
                return
            if self._reading_paused and not self._paused_by_client:
                self._reading_paused = False
                self.transport.resumeProducing()
            if self._buffer:
                self.deframe()

    def _bad_request(self, why: str) -> None:
        self.log.info("closing Kafka connection from {peer}: {why}", peer=self.peer, why=why)
        self.factory.bad_requests += 1
        self.discard_buffer()
        self._close_after_answers()

    def close_after_answers(self, why: str) -> None:
        """Hang up once the requests in flight are answered, reading nothing more.

        For a handler whose client cannot be told of an error otherwise (a
        failed acks=0 Produce, docs/kafka.md).
        """
        self.log.info("closing Kafka connection from {peer}: {why}", peer=self.peer, why=why)
        self._close_after_answers()

    def _close_after_answers(self) -> None:
        self.transport.pauseProducing()
        self._queue.close_after_answers(self.transport)

    # -- IPushProducer: the client stops reading, we stop serving it --------------

    def pauseProducing(self) -> None:
        self._paused_by_client = True
        self.transport.pauseProducing()

    def resumeProducing(self) -> None:
        self._paused_by_client = False
        if not self._closed and not self._queue.closing:
            self._reading_paused = False
            self.transport.resumeProducing()
            if self._buffer:
                # Requests that waited in the buffer while the client was not reading.
                self.deframe()

    def stopProducing(self) -> None:
        self._closed = True

    @property
    def pending(self) -> int:
        """Requests received and not yet answered (for the admin views)."""
        return len(self._queue)

    def finish_and_close(self) -> defer.Deferred[None]:
        """Graceful shutdown: answer what is in flight, then hang up."""
        d: defer.Deferred[None] = defer.Deferred()
        self.factory.closing.setdefault(self, []).append(d)
        self._close_after_answers()
        return d


class KafkaFactory(Factory):
    """Builds Kafka connections over one broker core and keeps their statistics."""

    log = Logger()
    protocol = KafkaProtocol

    def __init__(
        self,
        broker: Broker,
        config: Config,
        reactor: Any = None,
        handlers: dict[int, Handler] | None = None,
        authenticator: Authenticator | None = None,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.broker = broker
        self.config = config
        self.reactor = reactor
        self.handlers: dict[int, Handler] = dict(HANDLERS if handlers is None else handlers)
        if broker.client_telemetry is None:
            # Kafka advertises the telemetry APIs only with a receiver configured.
            for key in (ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY):
                self.handlers.pop(key, None)
        self.authenticator = authenticator or authenticator_from_config(config)
        self.connections: set[KafkaProtocol] = set()
        self.closing: dict[KafkaProtocol, list[defer.Deferred[None]]] = {}
        self.request_stats = RequestStats()
        """This front-end's requests by API key; each answer's error codes counted."""
        self.refused = 0
        self.bad_requests = 0

    def advertised_versions(self) -> list[tuple[int, int, int]]:
        """(key, min, max) of every API this front-end implements, never more."""
        return [
            (key, messages.APIS[key].min_version, messages.APIS[key].max_version)
            for key in sorted(self.handlers)
            if key in messages.APIS
        ]

    def buildProtocol(self, addr: Any) -> KafkaProtocol | None:  # type: ignore[override]
        if len(self.connections) >= self.config.max_connections:
            self.refused += 1
            return None
        return super().buildProtocol(addr)  # type: ignore[return-value]

    def connection_opened(self, proto: KafkaProtocol) -> None:
        self.connections.add(proto)

    def connection_closed(self, proto: KafkaProtocol) -> None:
        self.connections.discard(proto)
        if self.broker.client_telemetry is not None:
            self.broker.client_telemetry.disconnected(proto)
        for d in self.closing.pop(proto, []):
            d.callback(None)

    def close_all(self, timeout: float) -> defer.Deferred[None]:
        """Answer what each connection already sent, then hang up; abort after ``timeout``."""
        return close_all(self.connections, self.reactor, timeout)
