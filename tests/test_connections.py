"""`rustka.connections.ResponseQueue` on a real loopback connection: answers leave in
arrival order whatever order they complete in, each request's share of the output
budget is settled when answered and released when written, and a connection closed
after its answers closes once the last one is out, even after its client stopped
reading.

The queue is driven directly, the way both front-ends drive it; what the transport
was handed in the current reactor turn is read from its write buffer, what the
client got from the socket.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_twisted
from twisted.internet import defer, interfaces
from twisted.internet.protocol import Factory, Protocol
from zope.interface import implementer

from rustka.connections import NO_ANSWER, ResponseQueue
from rustka.output_budget import OutputBudget
from tests.conftest import within


@implementer(interfaces.IPushProducer)
class Served(Protocol):
    """The broker's side of the connection: the queue writes to its transport."""

    def __init__(self, made: defer.Deferred[Served]) -> None:
        self.made = made
        self.paused = False

    def connectionMade(self) -> None:
        self.made.callback(self)

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False

    def stopProducing(self) -> None:
        self.paused = True


class Reader(Protocol):
    """The client's side: every byte it is sent, and when the broker hangs up."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed: defer.Deferred[None] = defer.Deferred()
        self._waiting: list[tuple[int, defer.Deferred[bytes]]] = []

    def dataReceived(self, data: bytes) -> None:
        self.data += data
        for item in list(self._waiting):
            if len(self.data) >= item[0]:
                self._waiting.remove(item)
                item[1].callback(bytes(self.data))

    def connectionLost(self, reason: Any = None) -> None:
        self.closed.callback(None)

    def received(self, count: int) -> defer.Deferred[bytes]:
        """Fires with everything received once at least ``count`` bytes are in."""
        d: defer.Deferred[bytes] = defer.Deferred()
        self._waiting.append((count, d))
        self.dataReceived(b"")
        return within(d)


@pytest_twisted.async_yield_fixture
async def pair() -> AsyncIterator[tuple[Served, Reader]]:
    from twisted.internet import reactor
    from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

    made: defer.Deferred[Served] = defer.Deferred()
    factory = Factory.forProtocol(lambda: Served(made))
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    reader = Reader()
    try:
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port)
        await within(connectProtocol(endpoint, reader))
        served = await within(made)
        yield served, reader
    finally:
        if reader.transport is not None:
            reader.transport.abortConnection()
            await within(reader.closed)
        await port.stopListening()


def handed(transport: Any) -> bytes:
    """What the transport was given to send and has not sent yet (this reactor turn's
    writes are all still there: the socket is written on a later turn)."""
    return transport.dataBuffer[transport.offset :] + b"".join(transport._tempDataBuffer)


@pytest_twisted.ensureDeferred
async def test_answers_leave_in_arrival_order_whatever_order_they_complete_in(
    pair: tuple[Served, Reader],
) -> None:
    served, reader = pair
    t = served.transport
    queue = ResponseQueue(OutputBudget(1 << 20))
    slots = [queue.push(f"request {i}") for i in range(6)]
    assert [s.request for s in queue] == [f"request {i}" for i in range(6)]
    for i in (3, 1, 5):
        queue.answer(slots[i], [f"<{i}>".encode()])
        assert queue.flush(t) is False
    # The head has no answer yet: nothing may pass it.
    assert handed(t) == b""
    assert len(queue) == 6
    # Request 4 is answered with nothing (a Kafka acks=0 Produce): it keeps its place.
    queue.answer(slots[4], NO_ANSWER)
    queue.answer(slots[0], [b"<0>"])
    assert queue.flush(t) is False
    assert handed(t) == b"<0><1>"
    assert [s.request for s in queue] == ["request 2", "request 3", "request 4", "request 5"]
    queue.answer(slots[2], [b"<2", b">"])
    assert queue.flush(t) is True
    assert len(queue) == 0
    assert handed(t) == b"<0><1><2><3><5>"
    assert await reader.received(15) == b"<0><1><2><3><5>"


@pytest_twisted.ensureDeferred
async def test_a_reservation_is_settled_when_answered_and_released_when_written(
    pair: tuple[Served, Reader],
) -> None:
    served, reader = pair
    budget = OutputBudget(1000)
    queue = ResponseQueue(budget)
    head = queue.push("metadata")
    big = queue.push("fetch", budget.reserve(600))
    small = queue.push("fetch", budget.reserve(300))
    assert budget.reserved == 900
    # Settled to the answer's real size, which the budget now knows as its largest.
    queue.answer(big, [b"x" * 40], 40)
    assert (big.cost, budget.reserved, budget.largest) == (40, 340, 40)
    # Without a size the reservation stays as it was until the answer is written.
    queue.answer(small, [b"y" * 10])
    assert (small.cost, budget.reserved) == (300, 340)
    # Answered but held behind the head: still counted.
    assert queue.flush(served.transport) is False
    assert budget.reserved == 340
    queue.answer(head, [b"m"])
    assert queue.flush(served.transport) is True
    assert budget.reserved == 0
    assert await reader.received(51) == b"m" + b"x" * 40 + b"y" * 10


@pytest_twisted.ensureDeferred
async def test_a_withdrawn_request_gives_back_its_place_and_its_reservation(
    pair: tuple[Served, Reader],
) -> None:
    served, reader = pair
    budget = OutputBudget(1000)
    queue = ResponseQueue(budget)
    failed = queue.push("fetch", budget.reserve(100))
    after = queue.push("fetch", budget.reserve(200))
    queue.withdraw(failed)
    assert list(queue) == [after]
    assert budget.reserved == 200
    queue.answer(after, [b"after"], 5)
    assert queue.flush(served.transport) is True
    assert budget.reserved == 0
    assert await reader.received(5) == b"after"


@pytest_twisted.ensureDeferred
async def test_a_refusal_answered_on_arrival_waits_for_the_answers_before_it(
    pair: tuple[Served, Reader],
) -> None:
    served, reader = pair
    queue = ResponseQueue(OutputBudget(1000))
    first = queue.push("produce")
    queue.push_answer([b"<refused>"])
    assert queue.flush(served.transport) is False
    assert handed(served.transport) == b""
    queue.answer(first, [b"<produced>"])
    assert queue.flush(served.transport) is True
    assert await reader.received(19) == b"<produced><refused>"


@pytest_twisted.ensureDeferred
async def test_close_after_answers_waits_for_the_last_answer(
    pair: tuple[Served, Reader],
) -> None:
    served, reader = pair
    t = served.transport
    queue = ResponseQueue(OutputBudget(1000))
    first, second = queue.push(), queue.push()
    queue.close_after_answers(t)
    assert queue.closing
    queue.answer(second, [b"second"])
    queue.flush(t)
    assert not t.disconnecting
    queue.answer(first, [b"first "])
    assert queue.flush(t) is True
    assert t.disconnecting
    await within(reader.closed)
    assert reader.data == b"first second"


@pytest_twisted.ensureDeferred
async def test_close_after_answers_with_nothing_pending_closes_at_once(
    pair: tuple[Served, Reader],
) -> None:
    served, reader = pair
    queue = ResponseQueue(OutputBudget(1000))
    queue.close_after_answers(served.transport)
    assert served.transport.disconnecting
    await within(reader.closed)
    assert reader.data == b""


@pytest_twisted.ensureDeferred
async def test_close_after_answers_closes_a_connection_whose_client_stopped_reading(
    pair: tuple[Served, Reader],
) -> None:
    """The last answers fill the transport's buffer, so it has paused its producer (the
    connection): once the client reads them all, the connection must still close, not
    wake the producer up and stay open."""
    served, reader = pair
    t = served.transport
    t.registerProducer(served, True)
    reader.transport.pauseProducing()
    size = 4 << 20
    queue = ResponseQueue(OutputBudget(1000))
    queue.answer(queue.push(), [b"z" * size])
    assert queue.flush(t) is True
    assert served.paused
    queue.close_after_answers(t)
    reader.transport.resumeProducing()
    await within(reader.closed, 30)
    assert len(reader.data) == size
