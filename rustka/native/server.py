"""The TCP face of the broker: framing, ordering, and per-connection limits.

`BrokerProtocol` is an `Int32StringReceiver` (u32 big-endian length prefix,
checked against `MAX_LENGTH` before a byte of payload is buffered) with the
linear receive path of `rustka.framing`, so multi-MiB produce requests cost
time proportional to their size.

The protocol has no correlation ids, so responses must leave in request order
(docs/protocol.md, section 3, rule 1) even though the broker completes them out of order; each
request gets a slot in the connection's `rustka.connections.ResponseQueue`, which writes
answers from its head.

Pipelining must not reorder *effects* either: a Fetch sent after a Produce on
the same connection has to see that record, as it would in Kafka. Requests
therefore run in "runs" of one kind: consecutive writes (or consecutive reads)
are handed to the broker together, so a burst of produces still shares one
group commit, but a read waits for the writes before it and vice versa.

Answers go out through `rustka.eager_write` (sent in the call that writes
them while the transport buffers nothing), and a stored seed Produce is answered
by the lane's thread itself when it owns the connection's output
(`BrokerProtocol._answer_early`), so the answer does not wait for the hop back to
the reactor (docs/performance.md, "Latency (issue 21)").
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from twisted.internet import defer, interfaces, threads
from twisted.internet.protocol import Factory
from twisted.logger import Logger
from twisted.protocols.policies import TimeoutMixin
from twisted.python.failure import Failure
from zope.interface import implementer

from rustka.broker.access import Access, Gate
from rustka.broker.core import Broker
from rustka.config import Config
from rustka.connections import ResponseQueue, Slot, close_all, start_serving
from rustka.eager_write import EagerWriter, send_early, writer_under_lock
from rustka.errors import (
    AuthenticationFailed,
    AuthenticationRequired,
    InvalidRequest,
    NotAuthorized,
)
from rustka.framing import LinearInt32StringReceiver
from rustka.native import authorization
from rustka.native import codec as p
from rustka.native.authorization import Filter
from rustka.native.handlers import NativeHandler
from rustka.output_budget import OutputBudget
from rustka.security.principal import Principal
from rustka.security.sasl import AuthenticationFailed as SaslFailure
from rustka.security.sasl import SaslServer, UnsupportedMechanism
from rustka.security.session import (
    NO_SECURITY,
    Authenticator,
    ConnectionAuth,
    ListenerSecurity,
    attempt,
    authenticator_from_config,
    subject_of,
)

_SASL_OPS: frozenset[type] = frozenset({p.SaslAuthenticate, p.SaslContinue})
WRITES: frozenset[type] = frozenset(
    {p.Produce, p.ProduceBatch, p.Commit, p.CreateTopic, p.AlterTopic, p.DeleteTopic}
)


@implementer(interfaces.IPushProducer)
class BrokerProtocol(LinearInt32StringReceiver, TimeoutMixin):
    """One client connection; see the module docstring."""

    log = Logger()
    factory: BrokerFactory
    security: ListenerSecurity = NO_SECURITY
    """What the listener requires; set on the connection by its listener's factory."""

    def __init__(self) -> None:
        super().__init__()
        self.auth = ConnectionAuth(NO_SECURITY, None)
        self._reading_paused_by: set[str] = set()
        self._closed = False
        self._run_is_write = False
        self._run_pending = 0
        self._held: deque[tuple[bool, p.Request, Slot]] = deque()
        self._releasing = False
        self._stall_timer: Any = None
        self._held_close: defer.Deferred[None] | None = None
        # Response bytes reserved before they are built (rustka.output_budget).
        self.budget = OutputBudget(0)
        self._queue = ResponseQueue(self.budget)
        # Seed Produce requests started during this read, handed to the broker together.
        self._burst: list[p.Produce] = []
        self._burst_slots: list[Slot] = []
        self.requests = 0
        self._access: Access | None = None
        self._gate_principal: Principal | None = None
        self._gate_kept: Gate
        # Where answers are written: the socket at once when the transport buffers
        # nothing (rustka.eager_write), else the transport.
        self._out: Any = None
        # Taken by the reactor around every write and pop of the queue, and by an I/O
        # thread answering a produce itself (`_answer_early`): one writer at a time.
        self._out_lock = threading.RLock()
        self._early: Any = None
        self.answered_early = 0
        """Produce answers an I/O thread sent whole itself (for tests and admin views)."""

    # -- connection lifecycle ---------------------------------------------------

    @property
    def principal(self) -> Principal:
        """Who the connection acts as: User:ANONYMOUS until (or without) authentication."""
        return self.auth.principal

    def _gate(self, access: Access) -> Gate:
        """The connection's gate, kept while its principal stays the same."""
        principal = self.principal
        if self._gate_principal is not principal:
            self._gate_principal = principal
            self._gate_kept = access.gate(str(principal), self.peer_host)
        return self._gate_kept

    @property
    def peer_host(self) -> str:
        """The client's address as host ACLs name it; a UNIX socket's peer is "localhost"."""
        return getattr(self.transport.getPeer(), "host", "localhost")

    @property
    def peer(self) -> str:
        peer = self.transport.getPeer()
        host = getattr(peer, "host", None)
        return f"{host}:{peer.port}" if host is not None else str(peer)

    def connectionMade(self) -> None:
        self.auth = ConnectionAuth(self.security, self.factory.authenticator)
        access = self.factory.broker.access
        # None while authorization is off: the request path then pays one test.
        self._access = access if access.enabled else None
        self._out = writer_under_lock(self.transport, self._out_lock)
        if isinstance(self._out, EagerWriter):
            self._early = self.factory.handler.early_answer(self._answer_early)
        start_serving(self, self.factory.config)

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        with self._out_lock:
            self._closed = True
            self._queue.clear()
        self.setTimeout(None)
        self._cancel_stall_timer()
        self._held.clear()
        if self._held_close is not None and not self._held_close.called:
            self._held_close.callback(None)
        self.factory.connection_closed(self)

    def timeoutConnection(self) -> None:
        """Drop a connection that neither sends nor waits for anything.

        A half-sent frame counts as idle (its sender stalled); a request still
        being served does not (the client is waiting on us, e.g. a long-poll).
        """
        if self._queue:
            self.resetTimeout()
            return
        self.log.info("dropping idle connection from {peer}", peer=str(self.transport.getPeer()))
        self.transport.abortConnection()

    # -- receiving --------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        self.resetTimeout()
        super().dataReceived(data)

    def deframe(self) -> None:
        """Deframe what is buffered, then hand the Produce requests it held over at once."""
        super().deframe()
        if self._burst:
            self._send_burst()

    def framing_paused(self) -> bool:
        """Stop deframing as soon as a limit pauses reading: one 64 KiB read can hold
        thousands of small requests, and none of them may slip past the limit."""
        return bool(self._reading_paused_by) or self._closed or self.transport.disconnecting

    def lengthLimitExceeded(self, length: int) -> None:
        """Answer once, then close: the rest of the stream cannot be framed any more.

        Requests received before the oversized frame are still answered first,
        in order, so the Error is never lost behind them.
        """
        self._respond_now(
            p.Error(f"frame of {length} bytes exceeds the maximum of {self.MAX_LENGTH} bytes")
        )
        self.finish_and_close()

    def stringReceived(self, payload: bytes) -> None:
        self.requests += 1
        try:
            request = p.decode_request(payload)
        except InvalidRequest as e:
            self._respond_now(p.Error(f"bad request: {e}"))
            return
        kind = type(request)
        if kind in _SASL_OPS:
            self._authenticate(request, self._queue.push())
            return
        auth = self.auth
        if auth.required and kind is not p.Hello and not auth.may_serve():
            if not auth.authenticated and auth.security.mode == "mtls":
                auth.from_certificate(subject_of(self.transport), self.peer)
            if not auth.may_serve():
                why = (
                    "this listener requires authentication (ops 18 and 19) first"
                    if not auth.authenticated
                    else "the session expired: authenticate again (op 18)"
                )
                self.log.info(
                    "closing connection from {peer}: {op} before authenticating",
                    peer=self.peer,
                    op=kind.__name__,
                )
                self._respond_now(p.error_response(request, AuthenticationRequired(why)))
                self.finish_and_close()
                return
        slot = self._queue.push()
        if len(self._queue) >= self.factory.config.max_in_flight_per_connection:
            self._pause_reading("in-flight")
        is_write = type(request) in WRITES
        if self._held or not self._may_start(is_write, request):
            self._held.append((is_write, request, slot))
        else:
            self._start(is_write, request, slot)

    def _authenticate(self, request: p.SaslAuthenticate | p.SaslContinue, slot: Slot) -> None:
        """One step of the SASL exchange (docs/protocol.md, 7.12), answered in its place.

        A costly step (PLAIN's key derivation) runs on a thread, and nothing behind it is
        read meanwhile, so the requests after a login are served as its principal.
        """
        auth = self.auth
        try:
            if isinstance(request, p.SaslAuthenticate):
                auth.start(request.mechanism, self.peer)
            server = auth.exchange()
        except UnsupportedMechanism as e:
            self._auth_failed(slot, str(e), 0)
            return
        except SaslFailure as e:
            self._auth_failed(slot, str(e), self.factory.authenticator.failure_delay_s)
            return
        token = bytes(request.token)
        if not server.costly:
            self._authenticated(attempt(server, token), server, slot)
            return
        self._pause_reading("authenticating")
        reactor = self.factory.reactor
        d = threads.deferToThreadPool(reactor, reactor.getThreadPool(), attempt, server, token)
        d.addCallback(self._authenticated, server, slot)
        d.addErrback(self._auth_crashed, slot)

    def _authenticated(self, outcome: bytes | SaslFailure, server: SaslServer, slot: Slot) -> None:
        if self._closed:
            return
        try:
            answer = self.auth.settle(server, outcome, self.peer)
        except SaslFailure as e:
            self._auth_failed(slot, str(e), self.factory.authenticator.failure_delay_s)
        else:
            done = self.auth.server is None
            lifetime = self.auth.session_lifetime_ms if done else 0
            self._queue.answer(
                slot, p.RESPONSE_FRAMERS[p.SaslToken](p.SaslToken(answer, int(done), lifetime))
            )
            self._flush()
        if "authenticating" in self._reading_paused_by:
            # Only now, with the principal settled, is the next request read.
            self._resume_reading("authenticating")

    def _auth_crashed(self, failure: Failure, slot: Slot) -> None:
        self.log.failure("SASL step failed", failure)
        if not self._closed:
            self._auth_failed(slot, "Authentication failed: internal error", 0)
            self._resume_reading("authenticating")

    def _auth_failed(self, slot: Slot, why: str, delay: float) -> None:
        """Answer Failure 22 after ``delay`` (guessing is slow), then hang up; nothing the
        client sends meanwhile is read."""
        self.log.info("closing connection from {peer}: {why}", peer=self.peer, why=why)
        self._pause_reading("authentication failed")
        response = p.Failure(AuthenticationFailed.code, why)

        def answer() -> None:
            if self._closed:
                return
            self._queue.answer(slot, p.RESPONSE_FRAMERS[p.Failure](response))
            self._flush()
            self.finish_and_close()

        self.factory.reactor.callLater(delay, answer)

    def _output_cost(self, request: p.Request) -> int:
        """Bytes to reserve before a request runs: the reads, whose answers can be large.

        A batched fetch can return at most its (capped) ``max_bytes``; a seed
        Fetch's record size is unknown until it is read, so it reserves the
        budget's estimate and settles to the real size when answered.
        """
        kind = type(request)
        if kind is p.FetchBatch:
            return self.factory.broker.fetch_limits.reservation(request.max_bytes)
        if kind is p.Fetch:
            return self.budget.estimate()
        return 0

    def _may_start(self, is_write: bool, request: p.Request) -> bool:
        """Whether a request can run now without breaking order or the output budget.

        A run of one kind must finish before a run of the other starts; a read
        must fit the connection's output budget (one always may, so a single
        response larger than the budget is still served) and must not start
        while the client is not reading what it was already sent. A read that
        must wait for the budget also stops reading from the connection, until
        `_release_held` finds room.
        """
        if self._run_pending and is_write != self._run_is_write:
            return False
        if is_write:
            # Writes answer with a few bytes: they reserve nothing (`_output_cost` is 0).
            return True
        cost = self._output_cost(request)
        if cost and ("output" in self._reading_paused_by or not self.budget.admits(cost)):
            self._pause_reading("budget")
            return False
        return True

    def _start(self, is_write: bool, request: p.Request, slot: Slot) -> None:
        self._run_is_write = is_write
        self._run_pending += 1
        answer: Filter | None = None
        access = self._access
        if access is not None:
            decision = authorization.decide(self._gate(access), request)
            if isinstance(decision, str):
                # Refused in its place: the answers before it still go out first.
                self._completed(p.error_response(request, NotAuthorized(decision)), slot)
                return
            answer = decision
        if type(request) is p.Produce:
            # Started now, sent with the rest of this read's produces (see deframe).
            self._burst.append(request)
            self._burst_slots.append(slot)
            return
        if self._burst:
            # Whatever starts after them must reach the broker after them.
            self._send_burst()
        slot.cost = self.budget.reserve(self._output_cost(request))
        done = self.factory.handler.handle(request, str(self.principal))
        if answer is not None:
            done.addCallback(answer)
        done.addCallback(self._completed, slot)

    def _send_burst(self) -> None:
        requests, slots = self._burst, self._burst_slots
        self._burst = []
        self._burst_slots = []
        self.factory.handler.produce_many(requests, slots, self._produced, self._early)

    def _produced(self, slots: list[Slot], responses: list[p.Response]) -> None:
        self._run_pending -= len(slots)
        if self._closed:
            return
        # Produces reserve nothing, so their answers go straight into their slots: with no
        # reservation to settle, that is all `ResponseQueue.answer` would do. A slot an
        # I/O thread answered already (`_answer_early`) keeps what it has.
        framers = p.RESPONSE_FRAMERS
        for slot, response in zip(slots, responses, strict=True):
            if slot.parts is None:
                slot.parts = framers[type(response)](response)
        self._flush()
        if self._held:
            self._release_held()

    def _release_held(self) -> None:
        """Start the held requests that may now run, in arrival order.

        Reading resumes when the budget no longer holds the head back
        (`_may_start` pauses it again if it still does).
        """
        if self._releasing:
            # A held request answered at once, inside `_start` below: this call's
            # loop goes on with the next one instead of a call nested per request
            # (thousands of pipelined requests that fail at once would otherwise
            # exhaust the stack and leave the rest unanswered).
            return
        self._releasing = True
        held = self._held
        paused_for_budget = "budget" in self._reading_paused_by
        self._reading_paused_by.discard("budget")
        try:
            while True:
                while held and not self._closed:
                    is_write, request, _ = held[0]
                    if not self._may_start(is_write, request):
                        break
                    self._start(*held.popleft())
                if not self._burst:
                    break
                # Answered at once, the burst's produces may let more held ones start.
                self._send_burst()
        finally:
            self._releasing = False
        if paused_for_budget and "budget" not in self._reading_paused_by:
            self._reading_paused_by.add("budget")
            self._resume_reading("budget")

    # -- sending, in order --------------------------------------------------------

    def _respond_now(self, response: p.Response) -> None:
        # The codec frames each response, prefix included (one struct call for a Produced).
        self._queue.push_answer(p.RESPONSE_FRAMERS[type(response)](response))
        self._flush()

    def _completed(self, response: p.Response, slot: Slot) -> None:
        self._run_pending -= 1
        if self._closed:
            return
        self._queue.answer(
            slot, p.RESPONSE_FRAMERS[type(response)](response), _payload_bytes(response)
        )
        self._flush()
        if self._held:
            self._release_held()

    def _answer_early(self, tokens: list[Any], data: bytes) -> None:
        """On an I/O thread, right after the write: send these produces' answers (framed
        by the handler, `NativeHandler.early_answer`) on the socket now, when this
        connection's output is the thread's to take (`rustka.eager_write.send_early`,
        which says when that is). The reactor's `_produced` still runs for these
        slots (its bookkeeping) and keeps what the thread set.
        """
        with self._out_lock:
            if self._closed:
                return
            if send_early(self._queue, tokens, self.transport, self._out, data):
                self.answered_early += len(tokens)

    def _flush(self) -> None:
        """Write the answers at the head of the queue; resume reading below the in-flight limit."""
        queue = self._queue
        with self._out_lock:
            idle = queue.flush(self._out)
        if "in-flight" in self._reading_paused_by and (
            len(queue) < self.factory.config.max_in_flight_per_connection // 2
        ):
            self._resume_reading("in-flight")
        if idle:
            self.resetTimeout()

    # -- backpressure (IPushProducer, driven by the transport's write buffer) -----

    def pauseProducing(self) -> None:
        """The client is not reading its responses: stop reading its requests.

        Reads it already sent wait too (see `_may_start`), so its buffered
        output stays within about twice its output budget. If it has
        not drained its responses after the idle timeout, it is dropped.
        """
        self._pause_reading("output")
        if self._stall_timer is None or not self._stall_timer.active():
            self._stall_timer = self.factory.reactor.callLater(
                self.factory.config.idle_timeout_ms / 1000, self._drop_stalled_reader
            )

    def resumeProducing(self) -> None:
        self._cancel_stall_timer()
        self._resume_reading("output")
        if self._held:
            self._release_held()

    def _cancel_stall_timer(self) -> None:
        if self._stall_timer is not None and self._stall_timer.active():
            self._stall_timer.cancel()
        self._stall_timer = None

    def _drop_stalled_reader(self) -> None:
        self._stall_timer = None
        if self._closed:
            return
        self._closed = True
        self.factory.slow_readers_dropped += 1
        self.log.info(
            "dropping {peer}: it stopped reading its responses",
            peer=str(self.transport.getPeer()),
        )
        self.transport.abortConnection()

    def stopProducing(self) -> None:
        self._closed = True

    def _pause_reading(self, reason: str) -> None:
        if not self._reading_paused_by and not self._closed:
            self.transport.pauseProducing()
        self._reading_paused_by.add(reason)

    def _resume_reading(self, reason: str) -> None:
        self._reading_paused_by.discard(reason)
        if not self._reading_paused_by and not self._closed:
            self.transport.resumeProducing()
            self.deframe()

    def finish_and_close(self) -> defer.Deferred[None]:
        """Stop reading; close once every request received so far has its answer written."""
        if self._closed:
            return defer.succeed(None)
        self._pause_reading("shutdown")
        self._held_close = defer.Deferred()
        with self._out_lock:
            self._queue.close_after_answers(self.transport)
        return self._held_close

    @property
    def reading_paused(self) -> frozenset[str]:
        """Why reading from this client is paused now (empty while reading), for admin views."""
        return frozenset(self._reading_paused_by)

    @property
    def pending(self) -> int:
        """Requests received and not yet answered (for the admin views)."""
        return len(self._queue)


def _payload_bytes(response: p.Response) -> int:
    """The bulk of a read's answer: what its budget reservation settles to."""
    kind = type(response)
    if kind is p.Batches:
        return len(response.batches)
    if kind is p.FetchedRecord:
        return len(response.key) + len(response.value)
    return 0


class BrokerFactory(Factory):
    """Builds connections, enforces the connection limit and tracks who is connected."""

    log = Logger()
    protocol = BrokerProtocol

    def __init__(
        self,
        broker: Broker,
        config: Config,
        reactor: Any = None,
        authenticator: Authenticator | None = None,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.authenticator = authenticator or authenticator_from_config(config)
        self.broker = broker
        self.handler = NativeHandler(broker)
        self.request_stats = self.handler.stats
        self.config = config
        self.reactor = reactor
        self.connections: set[BrokerProtocol] = set()
        self.refused = 0
        self.slow_readers_dropped = 0
        self._refusing = False

    def buildProtocol(self, addr: Any) -> BrokerProtocol | None:  # type: ignore[override]
        if len(self.connections) >= self.config.max_connections:
            self.refused += 1
            if not self._refusing:
                self._refusing = True
                self.log.warn(
                    "refusing connections: the limit of {limit} connections is reached",
                    limit=self.config.max_connections,
                )
            return None
        if self._refusing:
            self._refusing = False
            self.log.info("accepting connections again ({refused} refused)", refused=self.refused)
        return super().buildProtocol(addr)  # type: ignore[return-value]

    def connection_opened(self, proto: BrokerProtocol) -> None:
        self.connections.add(proto)

    def connection_closed(self, proto: BrokerProtocol) -> None:
        self.connections.discard(proto)

    def close_all(self, timeout: float) -> defer.Deferred[None]:
        """Answer what each connection already sent, then hang up; abort after ``timeout``."""
        return close_all(self.connections, self.reactor, timeout)
