"""`rustka.kafka.server.KafkaProtocol` over Twisted's in-memory transport: what it
answers, in which order, and when it stops reading or hangs up, read straight from
the transport with no socket in between (tests/kafka/test_server.py has the same
rules over real sockets)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from rustka.kafka import messages
from rustka.kafka.messages import ApiKey
from rustka.kafka.server import KafkaProtocol
from rustka.record.batch import Record, encode_batch
from tests.conftest import RunningBroker, reactor_turns

_SIZE = struct.Struct(">i")


@pytest.fixture
def connected(broker: RunningBroker) -> Iterator[tuple[KafkaProtocol, StringTransport]]:
    """A Kafka connection of the running broker whose transport is in memory; it is
    lost at the end, as a socket's would be, so the broker's stop does not wait for it."""
    factory = broker.top.kafka_factory
    proto = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1))
    assert proto is not None
    transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 1))
    proto.makeConnection(transport)
    yield proto, transport
    proto.connectionLost(Failure(ConnectionDone()))


def frame(api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
    request = messages.encode_request(api_key, version, correlation_id, "memory", body)
    return _SIZE.pack(len(request)) + request


def api_versions(correlation_id: int) -> bytes:
    return frame(ApiKey.API_VERSIONS, 3, correlation_id, {})


def metadata(correlation_id: int) -> bytes:
    return frame(ApiKey.METADATA, 8, correlation_id, {"topics": []})


def produce(correlation_id: int, topic: str) -> bytes:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 10_000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [{"index": 0, "records": encode_batch([Record(b"k", b"v")])}],
            }
        ],
    }
    return frame(ApiKey.PRODUCE, 8, correlation_id, body)


def correlation_ids(transport: StringTransport) -> list[int]:
    """The correlation id of each whole answer the transport was given, in order."""
    data = transport.value()
    ids, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = _SIZE.unpack_from(data, pos)
        if pos + 4 + size > len(data):
            break
        ids.append(_SIZE.unpack_from(data, pos + 4)[0])
        pos += 4 + size
    return ids


@pytest_twisted.ensureDeferred
async def test_answers_leave_in_request_order_whatever_completes_first(
    connected: tuple[KafkaProtocol, StringTransport],
) -> None:
    """A Produce goes to the I/O pool; the Metadata and ApiVersions behind it could be
    answered at once, but each waits its turn: the answers are in request order."""
    proto, transport = connected
    proto.dataReceived(produce(1, "memory") + metadata(2) + api_versions(3))
    await reactor_turns(lambda: len(correlation_ids(transport)) == 3)
    assert correlation_ids(transport) == [1, 2, 3]
    assert not transport.disconnecting


@pytest_twisted.ensureDeferred
async def test_a_client_that_stops_reading_gets_nothing_new_served(
    connected: tuple[KafkaProtocol, StringTransport],
) -> None:
    """Paused by its transport (the client reads no answers), the connection takes no
    request; resumed, it serves what waited, in order."""
    proto, transport = connected
    proto.pauseProducing()
    assert transport.producerState == "paused"
    proto.dataReceived(api_versions(1) + api_versions(2))
    # ApiVersions is answered synchronously when served: nothing was.
    assert transport.value() == b"" and proto.requests == 0
    proto.resumeProducing()
    assert transport.producerState == "producing"
    assert correlation_ids(transport) == [1, 2]


@pytest_twisted.ensureDeferred
async def test_reading_stops_while_a_request_is_in_flight_and_too_much_waits(
    connected: tuple[KafkaProtocol, StringTransport],
) -> None:
    """More than the read-ahead buffered behind a request in flight pauses reading
    (the transport stops delivering); it resumes once the queue drains."""
    proto, transport = connected
    count = (1 << 20) // len(metadata(2)) + 2
    behind = b"".join(metadata(i) for i in range(2, 2 + count))
    proto.dataReceived(produce(1, "memory-ahead") + behind)
    assert transport.producerState == "paused"
    await reactor_turns(lambda: len(correlation_ids(transport)) == 1 + count)
    assert transport.producerState == "producing"
    assert correlation_ids(transport) == list(range(1, 2 + count))


@pytest_twisted.ensureDeferred
async def test_a_bad_request_closes_after_the_answers_before_it(
    connected: tuple[KafkaProtocol, StringTransport],
) -> None:
    """An unknown API key: what came before it is answered, nothing after it is read,
    and the connection is closed once those answers are out."""
    proto, transport = connected
    unknown = frame(ApiKey.API_VERSIONS, 3, 2, {})
    unknown = unknown[:4] + struct.pack(">h", 32_000) + unknown[6:]
    proto.dataReceived(produce(1, "memory-close") + unknown + api_versions(3))
    await reactor_turns(lambda: transport.disconnecting)
    assert correlation_ids(transport) == [1]
