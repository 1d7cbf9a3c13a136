"""`rustka.native.server.BrokerProtocol` over Twisted's in-memory transport: answer
order, the in-flight bound, a client that stops reading, and the close after a bad
frame, read straight from the transport (tests/native/test_server.py has the same
rules over real sockets, with the fast paths of a TCP transport)."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest_twisted
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from rustka.native.server import BrokerProtocol
from tests.conftest import RunningBroker, reactor_turns
from tests.native.test_server import fetch, offset_fetch, produce

Connect = Callable[..., Any]


@pytest_twisted.async_yield_fixture
async def connect(broker_factory: Any) -> AsyncIterator[Connect]:
    """``await connect(**settings)``: a broker with those settings and one connection
    to it over an in-memory transport; both go at the end."""
    made: list[tuple[RunningBroker, BrokerProtocol]] = []

    async def connect_with(**settings: Any) -> tuple[BrokerProtocol, StringTransport]:
        running = await broker_factory(**settings)
        peer = IPv4Address("TCP", "127.0.0.1", 1)
        proto = running.top.factory.buildProtocol(peer)
        transport = StringTransport(peerAddress=peer)
        proto.makeConnection(transport)
        made.append((running, proto))
        return proto, transport

    yield connect_with
    for running, proto in made:
        proto.connectionLost(Failure(ConnectionDone()))
        await running.stop()


def answers(transport: StringTransport) -> list[bytes]:
    """Each whole answer's payload the transport was given, in order."""
    data, out, pos = transport.value(), [], 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from("!I", data, pos)
        if pos + 4 + size > len(data):
            break
        out.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return out


def tags(transport: StringTransport) -> list[int]:
    return [payload[0] for payload in answers(transport)]


@pytest_twisted.ensureDeferred
async def test_answers_leave_in_request_order(connect: Connect) -> None:
    """A produce goes to the I/O pool and the reads behind it wait for it: Produced,
    then the record it stored, then the group's (absent) offset."""
    proto, transport = await connect()
    proto.dataReceived(produce("mem", b"", b"v") + fetch("mem", 0, 0) + offset_fetch("g", "mem", 0))
    await reactor_turns(lambda: len(answers(transport)) == 3)
    assert tags(transport) == [1, 2, 3]
    assert answers(transport)[1].endswith(b"v")


@pytest_twisted.ensureDeferred
async def test_reading_stops_at_the_in_flight_bound_and_resumes_when_answered(
    connect: Connect,
) -> None:
    proto, transport = await connect(max_in_flight_per_connection=4)
    proto.dataReceived(b"".join(produce("mem", b"", b"%d" % i) for i in range(10)))
    assert transport.producerState == "paused"
    await reactor_turns(lambda: len(answers(transport)) == 10)
    assert transport.producerState == "producing"
    offsets = [struct.unpack_from("!IQ", a, 1)[1] for a in answers(transport)]
    assert tags(transport) == [1] * 10 and offsets == list(range(10))


@pytest_twisted.ensureDeferred
async def test_a_client_that_stops_reading_gets_nothing_new_served(connect: Connect) -> None:
    proto, transport = await connect()
    proto.pauseProducing()
    assert transport.producerState == "paused"
    proto.dataReceived(offset_fetch("g", "mem", 0) + offset_fetch("g", "mem", 1))
    await reactor_turns(lambda: True)
    assert transport.value() == b""
    proto.resumeProducing()
    await reactor_turns(lambda: len(answers(transport)) == 2)
    assert transport.producerState == "producing"


@pytest_twisted.ensureDeferred
async def test_a_bad_frame_is_answered_in_its_place_and_the_connection_goes_on(
    connect: Connect,
) -> None:
    """docs/protocol.md, "Bad frames do not kill the connection": an unknown op gets
    its Error between the answers around it."""
    proto, transport = await connect()
    unknown_op = struct.pack("!I", 2) + b"\xee\x00"
    proto.dataReceived(produce("mem", b"", b"v") + unknown_op + offset_fetch("g", "mem", 0))
    await reactor_turns(lambda: len(answers(transport)) == 3)
    assert tags(transport) == [1, 4, 3]
    assert b"unknown op 238" in answers(transport)[1]
    assert not transport.disconnecting


@pytest_twisted.ensureDeferred
async def test_a_frame_over_the_limit_closes_after_the_answers_before_it(
    connect: Connect,
) -> None:
    """The one bad frame that closes: its length is over max_frame_bytes, so nothing
    after it can be framed; what came before it is answered, then its Error."""
    proto, transport = await connect(max_frame_bytes=1024)
    proto.dataReceived(produce("mem", b"", b"v") + struct.pack("!I", 4096) + b"\x01" * 64)
    await reactor_turns(lambda: transport.disconnecting)
    assert tags(transport) == [1, 4]
    assert b"4096" in answers(transport)[1]
