"""What every server connection does alike, whichever protocol it speaks.

Both front-ends (`rustka.native.server`, `rustka.kafka.server`) frame with the
linear receiver, answer in request order, budget their output, push back on
slow readers and shut down the same way; the shared steps live here so they
cannot drift apart.

`ResponseQueue` is the order: each request takes a `Slot` when it arrives, its
answer is put in the slot whenever the broker finishes it (out of order), and
answers leave from the head only, so a pipelining client reads them in the
order it asked (docs/protocol.md, section 3, rule 1; Kafka's rule is the same).
The queue also carries each request's share of the output budget
(`rustka.output_budget`: reserved before, settled when answered, released when
written) and the connection's close-after-answers state.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Sequence
from typing import Any

from twisted.internet import defer

from rustka.output_budget import OutputBudget

__all__ = ["NO_ANSWER", "ResponseQueue", "Slot", "close_all", "start_serving"]

NO_ANSWER: Sequence[Any] = ()
"""The answer of a request the protocol does not answer (a Kafka acks=0 Produce): it
leaves its place in order and writes nothing."""


class Slot:
    """One request's place in a `ResponseQueue`, from its arrival until its answer is written.

    ``parts`` is None until the answer exists, then the bytes to write, framing
    included (`NO_ANSWER` writes nothing). ``cost`` is what the request holds
    in the output budget: its reservation until answered, the answer's real
    size after. ``request`` is the front-end's own (Kafka keeps the header: a
    Produce may join in-flight requests only when they are all Produces).

    Made by `ResponseQueue.push`, which sets every field: a class without an
    ``__init__`` is built without a Python frame, a saving on every request.
    A front-end may store the answer of a slot that reserved nothing into
    ``parts`` itself (a burst of produces); `ResponseQueue.answer` is that
    plus the settling of a reservation.
    """

    __slots__ = ("cost", "parts", "request")

    request: Any
    cost: int
    parts: Sequence[Any] | None


class ResponseQueue(deque[Slot]):
    """A connection's requests in arrival order, each waiting for its answer; see the module
    docstring.

    A deque of `Slot` itself, so the per-request checks of both front-ends
    (``len``, truth, the head) stay C calls: the queue is on the hot path of
    every request (docs/performance.md).
    """

    __slots__ = ("budget", "closing")

    def __init__(self, budget: OutputBudget) -> None:
        super().__init__()
        self.budget = budget
        self.closing = False
        """Set by `close_after_answers`: nothing more is taken, the last answer closes."""

    def push(self, request: Any = None, cost: int = 0) -> Slot:
        """A place for a request that has started; ``cost`` is what it reserved in the budget."""
        slot = Slot()
        slot.request = request
        slot.cost = cost
        slot.parts = None
        self.append(slot)
        return slot

    def push_answer(self, parts: Sequence[Any]) -> None:
        """A request answered as it arrives (a refusal): its answer waits for those before it."""
        slot = Slot()
        slot.request = None
        slot.cost = 0
        slot.parts = parts
        self.append(slot)

    def answer(self, slot: Slot, parts: Sequence[Any], size: int | None = None) -> None:
        """``slot``'s answer exists: keep it until every answer before it is written.

        With ``size`` (the answer's bulk, as its front-end counts it), the slot's
        reservation becomes that real size (`OutputBudget.settle`); without it
        the reservation stays as it was until the answer is written.
        """
        slot.parts = parts
        if size is not None and slot.cost:
            slot.cost = self.budget.settle(slot.cost, size)

    def withdraw(self, slot: Slot) -> None:
        """A request that will never be answered (its handler raised): its place and its
        reservation go."""
        self.remove(slot)
        if slot.cost:
            self.budget.release(slot.cost)
            slot.cost = 0

    def flush(self, transport: Any) -> bool:
        """Write every answer at the head, in order, in one writeSequence; True once nothing
        is pending.

        Each answer's bytes leave the budget as they are handed to the transport.
        When the queue empties after `close_after_answers`, the connection closes.
        """
        out: list[Any] = []
        budget = self.budget
        popleft = self.popleft
        while self and self[0].parts is not None:
            slot = popleft()
            if slot.cost:
                budget.release(slot.cost)
            out += slot.parts
        if out:
            transport.writeSequence(out)
        if self:
            return False
        if self.closing:
            _close(transport)
        return True

    def close_after_answers(self, transport: Any) -> None:
        """Hang up once every request received so far has its answer written.

        The front-end stops reading first; this closes now when nothing is
        pending, else `flush` does once the last answer is out.
        """
        self.closing = True
        if not self:
            _close(transport)


def _close(transport: Any) -> None:
    # Unregister first: a paused streaming producer would otherwise be resumed when the
    # write buffer drains, instead of the connection closing (Twisted's FileDescriptor
    # closes only once no paused producer is registered).
    transport.unregisterProducer()
    transport.loseConnection()


def start_serving(proto: Any, config: Any) -> None:
    """The start of a connection: limits from the config, no Nagle delay, push-back,
    the idle timer, and the factory's bookkeeping (connection counts, admin views)."""
    proto.MAX_LENGTH = config.max_frame_bytes
    proto.budget.set_limit(config.max_output_bytes_per_connection)
    set_no_delay = getattr(proto.transport, "setTcpNoDelay", None)
    if set_no_delay is not None:
        set_no_delay(True)
    proto.transport.registerProducer(proto, True)
    proto.setTimeout(config.idle_timeout_ms / 1000)
    proto.factory.connection_opened(proto)


def close_all(connections: Collection[Any], reactor: Any, timeout: float) -> defer.Deferred[None]:
    """Graceful shutdown: answer what each client already sent, then hang up.

    Every connection stops reading; each one closes as soon as its last pending
    response is written. Whatever is still open after ``timeout`` seconds is
    aborted, so a stuck client cannot hold the shutdown. ``connections`` is the
    factory's live set, read again when the timeout strikes.
    """
    closing = [proto.finish_and_close() for proto in list(connections)]
    if not closing:
        return defer.succeed(None)
    done = defer.gatherResults(closing)

    def abort_stragglers() -> None:
        for proto in list(connections):
            proto.transport.abortConnection()

    timer = reactor.callLater(timeout, abort_stragglers)

    def finished(_: object) -> None:
        if timer.active():
            timer.cancel()

    return done.addBoth(finished)  # type: ignore[return-value]
