"""What every Kafka handler shares: the core-error mapping, and the two protocols the
server must keep satisfying for the handlers' sake."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.python.failure import Failure

from rustka import errors
from rustka.kafka.context import Connection, Server, error_code
from rustka.kafka.errors import ErrorCode as E
from rustka.record.batch import CorruptMessage, InvalidTimestamp
from tests.conftest import RunningBroker, within
from tests.kafka.test_server import kafka_client


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (errors.UnknownTopic("t"), E.UNKNOWN_TOPIC_OR_PARTITION),
        (errors.OffsetOutOfRange(9, 0, 5), E.OFFSET_OUT_OF_RANGE),
        # The most specific class wins: both of these are InvalidBatch too.
        (CorruptMessage("crc"), E.CORRUPT_MESSAGE),
        (InvalidTimestamp("log append time"), E.INVALID_TIMESTAMP),
        (errors.InvalidBatch("bad"), E.INVALID_RECORD),
        (errors.CorruptBatch("stored bytes"), E.CORRUPT_MESSAGE),
        (errors.StorageError("disk"), E.KAFKA_STORAGE_ERROR),
        (errors.BrokerUnavailable("stopping"), E.NOT_LEADER_OR_FOLLOWER),
        (RuntimeError("anything else"), E.UNKNOWN_SERVER_ERROR),
    ],
)
def test_error_code_maps_core_errors_bare_or_in_a_failure(exc: Exception, code: int) -> None:
    assert error_code(exc) == code
    assert error_code(Failure(exc)) == code


@pytest_twisted.ensureDeferred
async def test_the_server_is_what_handlers_are_typed_against(broker: RunningBroker) -> None:
    factory = broker.top.kafka_factory
    assert isinstance(factory, Server)
    client = await kafka_client(broker.port)
    try:
        [connection] = factory.connections
        assert isinstance(connection, Connection)
    finally:
        await within(client.close())
