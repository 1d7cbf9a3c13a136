"""One port, two protocols: the first frame picks the protocol, however it arrives."""

from __future__ import annotations

import struct

import pytest_twisted
from twisted.internet import task

from rustka.kafka import messages
from rustka.native import codec as p
from tests.conftest import RunningBroker
from tests.native.test_server import close, connect_raw, frame


async def trickle(client: object, data: bytes) -> None:
    """Send ``data`` one byte per reactor turn, so every split of the first frame occurs."""
    from twisted.internet import reactor

    for i in range(len(data)):
        client.transport.write(data[i : i + 1])  # type: ignore[attr-defined]
        await task.deferLater(reactor, 0, lambda: None)


@pytest_twisted.ensureDeferred
async def test_a_native_request_arriving_byte_by_byte_is_served_natively(
    broker: RunningBroker,
) -> None:
    c = await connect_raw(broker)
    answered = c.expect(1)
    await trickle(c, frame(p.encode_request(p.Metadata(()))))
    [answer] = await answered
    assert isinstance(p.decode_response(answer), p.MetadataResult)
    await close(c)


@pytest_twisted.ensureDeferred
async def test_a_kafka_request_arriving_byte_by_byte_is_served_by_kafka(
    broker: RunningBroker,
) -> None:
    c = await connect_raw(broker)
    request = messages.encode_request(18, 0, 7, "trickle", {})
    answered = c.expect(1)
    await trickle(c, struct.pack("!I", len(request)) + request)
    [answer] = await answered
    correlation_id, body = messages.decode_response(18, 0, answer)
    assert correlation_id == 7 and body["error_code"] == 0
    assert {entry["api_key"] for entry in body["api_keys"]} >= {0, 1, 2, 3, 18}
    await close(c)


@pytest_twisted.ensureDeferred
async def test_an_empty_first_frame_is_the_native_protocols_to_answer(
    broker: RunningBroker,
) -> None:
    c = await connect_raw(broker)
    [answer] = await c.ask(frame(b""))
    assert isinstance(p.decode_response(answer), p.Error)
    # and the connection stays native and usable
    [again] = await c.ask(frame(p.encode_request(p.Metadata(()))))
    assert isinstance(p.decode_response(again), p.MetadataResult)
    await close(c)
