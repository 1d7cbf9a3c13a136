"""One port, two protocols: the first frame picks the protocol, however it arrives.

A first frame goes to Kafka only when it is a whole Kafka request the front-end
serves (docs/protocol.md, "One port, two protocols"); every other first frame,
0x00 first byte or not, is a native frame and gets the native protocol's answer.
"""

from __future__ import annotations

import re
import struct
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, task

from rustka.kafka import messages
from rustka.native import codec as p
from rustka.ops.protocol_switch import first_frame_protocol, is_kafka_request
from tests.conftest import RunningBroker, start_broker, within
from tests.native.test_server import RawClient, close, connect_raw, frame

DOCS = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
API_VERSIONS = messages.ApiKey.API_VERSIONS
SENTINEL_CID = 0x7FFF0001
SENTINEL = messages.encode_request(API_VERSIONS, 0, SENTINEL_CID, "switch-test", {})
CLIENT_IDS = (None, "", "switch-test")
NATIVE_PROBE = frame(p.encode_request(p.Metadata(())))


@pytest_twisted.async_yield_fixture
async def broker(data_dir: Path) -> AsyncIterator[RunningBroker]:
    """With client telemetry on, so every declared Kafka API is served (the telemetry APIs
    are only with it, docs/kafka.md)."""
    running = await start_broker(data_dir, client_telemetry_metrics="*")
    try:
        yield running
    finally:
        await running.stop()


async def trickle(client: object, data: bytes) -> None:
    """Send ``data`` one byte per reactor turn, so every split of the first frame occurs."""
    from twisted.internet import reactor

    for i in range(len(data)):
        client.transport.write(data[i : i + 1])  # type: ignore[attr-defined]
        await task.deferLater(reactor, 0, lambda: None)


def declared_versions() -> Iterator[tuple[int, int]]:
    """Every (API key, version) the Kafka front-end serves, from its declarations."""
    for key in messages.ApiKey:
        api = messages.APIS[key]
        for version in range(api.min_version, api.max_version + 1):
            yield key, version


def first_request(key: int, version: int, correlation_id: int, client_id: str | None) -> bytes:
    """A well-formed request with the declaration's defaults, answered without side effects.

    Produce gets acks=1 so that it is answered (the default 0 is not).
    """
    body: dict[str, Any] = {"acks": 1, "timeout_ms": 1000} if key == messages.ApiKey.PRODUCE else {}
    return messages.encode_request(key, version, correlation_id, client_id, body)


async def kafka_answers(c: RawClient, first_cid: int) -> list[int]:
    """The correlation ids answered up to the sentinel's, which must be a Kafka ApiVersions v0.

    A native answer (tag 4 Error, say) can never carry the sentinel's id, so the
    wait ends only if Kafka served the connection.
    """
    seen: list[int] = []
    while not seen or seen[-1] != SENTINEL_CID:
        [answer] = await within(c.expect(1))
        (cid,) = struct.unpack_from("!i", answer)
        assert cid in (first_cid, SENTINEL_CID), answer[:40]
        if cid == SENTINEL_CID:
            assert messages.decode_response(API_VERSIONS, 0, answer)[1]["error_code"] == 0
        seen.append(cid)
    return seen


async def answer_or_hang_up(c: RawClient) -> bytes:
    """The next response frame; fails at once if the broker hangs up instead."""
    answered = c.expect(1)
    either = defer.DeferredList([answered, c.lost], fireOnOneCallback=True, consumeErrors=True)
    await within(either)
    if not answered.called:
        answered.cancel()
        raise AssertionError("the broker closed the connection without an answer")
    [answer] = await answered
    return answer


async def assert_native_error_then_usable(c: RawClient) -> None:
    """The first frame got a native Error and the connection still serves native requests."""
    answer = await answer_or_hang_up(c)
    assert type(p.decode_response(answer)) is p.Error, answer
    [again] = await c.ask(NATIVE_PROBE)
    assert isinstance(p.decode_response(again), p.MetadataResult)
    assert not c.lost.called


def _h(key: int, version: int, client_id: bytes = b"t", cid: int = 1) -> bytes:
    """A request header v1 (key, version, correlation id, client id), written by hand."""
    return struct.pack("!hhih", key, version, cid, len(client_id)) + client_id


#: First frames that begin with 0x00 and are not a request the Kafka front-end serves:
#: malformed native frames (op 0), each answered with a native Error.
MALFORMED_OP_0: dict[str, bytes] = {
    "op 0 alone": b"\x00",
    "op 0 then a native Metadata's fields": b"\x00"
    + p.encode_request(p.Metadata(("orders", "payments")))[1:],
    "shorter than a Kafka header": struct.pack("!hhi", API_VERSIONS, 0, 1),
    "a key no Kafka API has (200)": _h(200, 1, b"kcat") + b"\x00\x05PLAIN",
    "a version no Kafka API has (Metadata 40)": _h(3, 40) + b"\xff\xff\xff\xff\x00\x00",
    "a negative ApiVersions version": _h(API_VERSIONS, -1),
    "a client id longer than the frame": struct.pack("!hhih", API_VERSIONS, 0, 1, 50) + b"abc",
    "a client id of length -2": struct.pack("!hhih", API_VERSIONS, 0, 1, -2),
    "a client id that is not UTF-8": _h(API_VERSIONS, 0, b"\xff\xfe"),
    "a flexible header whose tag section is cut": _h(API_VERSIONS, 3) + b"\x01",
    "a newer ApiVersions whose tag section is cut": _h(API_VERSIONS, 9) + b"\x02\x00",
    "a body cut short (Metadata 1)": messages.encode_request(
        3, 1, 1, "t", {"topics": [{"name": "abc"}]}
    )[:-1],
    "a byte after a whole request (ApiVersions 0)": messages.encode_request(
        API_VERSIONS, 0, 1, "t", {}
    )
    + b"\x00",
    # Found by the native fuzzer: a mutated native frame that reads as ListGroups v0
    # (empty body) with bytes left over.
    "an empty-bodied request followed by more (ListGroups 0)": bytes.fromhex(
        "00100000016700000004667a5f330000000200000000000027782011780004"
    ),
}


def test_every_advertised_request_and_only_its_whole_frame_decides_for_kafka() -> None:
    """No prefix of a Kafka request decides; the whole frame does, with more bytes behind."""
    for key, version in declared_versions():
        for client_id in CLIENT_IDS:
            data = frame(first_request(key, version, 9, client_id))
            for cut in range(len(data)):
                assert first_frame_protocol(data[:cut], 1 << 20) is None, (key, version, cut)
            assert first_frame_protocol(data, 1 << 20) == "kafka", (key, version, client_id)
            assert first_frame_protocol(data + NATIVE_PROBE, 1 << 20) == "kafka"


def test_a_kafka_request_rustka_does_not_serve_goes_to_kafka_to_be_closed() -> None:
    """A whole Kafka header of an API or version rustka does not serve is a Kafka
    client's (a newer client opening with a SaslHandshake v2 a Fetch v17 or a Metadata v13): the
    Kafka front-end closes it, as Kafka does, instead of the native protocol
    answering with an Error frame the client would misread."""
    unserved = [(1, 17), (17, 2), (36, 3), (3, 13), (127, 31)]
    assert not any(k in messages.APIS and messages.APIS[k].supports(v) for k, v in unserved)
    for key, version in unserved:
        request = _h(key, version) + b"\x00\x05PLAIN"
        assert is_kafka_request(request), (key, version)
        assert first_frame_protocol(frame(request), 1 << 20) == "kafka", (key, version)
    for key, version in ((128, 0), (3, 32), (3, -1), (0, 0x7FFF)):
        request = _h(key, version) + b"\x00\x05PLAIN"
        assert not is_kafka_request(request), (key, version)
        assert first_frame_protocol(frame(request)[:8], 1 << 20) == "native", (key, version)


def test_an_op_0_frame_with_a_native_produces_fields_stays_native() -> None:
    """docs/protocol.md: op 0 then a native Produce's fields reads as a Produce v0
    header (key 0, version 0, a correlation id, an empty client id); Produce v0 is
    served, so its body must decode whole (rule 7), which these bytes do not: the
    frame stays native and is answered with an Error. No native client sends op 0."""
    payload = b"\x00" + p.encode_request(p.Produce("abc", b"k", b"v"))[1:]
    assert payload[:4] == b"\x00\x00\x00\x00"  # key 0, version 0: Produce v0
    assert not is_kafka_request(payload)
    assert first_frame_protocol(frame(payload), 1 << 20) == "native"


def test_native_frames_decide_at_their_first_byte_and_op_0_frames_do_not_pass() -> None:
    """A native request is native from its first payload byte; the op-0 cases never pass."""
    for request in (p.Metadata(("orders",)), p.Produce("t", b"", b""), p.Fetch("t", 0, 0)):
        data = frame(p.encode_request(request))
        assert first_frame_protocol(data[:4], 1 << 20) is None
        assert first_frame_protocol(data[:5], 1 << 20) == "native"
    for name, payload in MALFORMED_OP_0.items():
        assert payload[:1] == b"\x00", name
        assert not is_kafka_request(payload), name
        assert first_frame_protocol(frame(payload), 1 << 20) == "native", name
    # A key or version no Kafka client sends is ruled out before the rest of a long
    # frame arrives.
    assert first_frame_protocol(frame(_h(200, 1) + bytes(1000))[:10], 1 << 20) == "native"
    assert first_frame_protocol(frame(_h(3, 40) + bytes(1000))[:8], 1 << 20) == "native"


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


@pytest_twisted.ensureDeferred
async def test_every_advertised_api_and_version_switches_with_and_without_client_id(
    broker: RunningBroker,
) -> None:
    """Each key of the ApiVersions table at each of its versions, client id null, empty
    or set, as the whole first frame: Kafka answers it and the sentinel behind it."""
    cid = 0
    for key, version in declared_versions():
        for client_id in CLIENT_IDS:
            cid += 1
            c = await connect_raw(broker)
            c.transport.write(frame(first_request(key, version, cid, client_id)) + frame(SENTINEL))
            assert await kafka_answers(c, cid) == [cid, SENTINEL_CID], (key, version)
            await close(c)


@pytest_twisted.ensureDeferred
async def test_every_advertised_api_and_version_switches_when_sent_a_byte_at_a_time(
    broker: RunningBroker,
) -> None:
    for cid, (key, version) in enumerate(declared_versions(), start=1):
        client_id = CLIENT_IDS[cid % len(CLIENT_IDS)]
        c = await connect_raw(broker)
        await trickle(c, frame(first_request(key, version, cid, client_id)))
        c.transport.write(frame(SENTINEL))
        assert await kafka_answers(c, cid) == [cid, SENTINEL_CID], (key, version)
        await close(c)


@pytest_twisted.ensureDeferred
async def test_a_newer_api_versions_than_advertised_still_switches(
    broker: RunningBroker,
) -> None:
    """A client probing with ApiVersions v5 or v127 gets the table (UNSUPPORTED_VERSION)."""
    for version in (5, 127):
        c = await connect_raw(broker)
        # Header v2 (flexible): the client id, then an empty tag section; then a body
        # of a layout rustka does not know.
        payload = _h(API_VERSIONS, version, b"newer", cid=3) + b"\x00" + b"\x04next\x02\x31\x00"
        await trickle(c, frame(payload))
        [answer] = await within(c.expect(1))
        cid, body = messages.decode_response(API_VERSIONS, 0, answer)
        assert (cid, body["error_code"]) == (3, 35)
        await close(c)


@pytest.mark.parametrize("name", list(MALFORMED_OP_0))
@pytest.mark.parametrize("how", ["whole", "byte by byte", "pipelined"])
@pytest_twisted.ensureDeferred
async def test_a_malformed_first_frame_starting_with_0_gets_a_native_error(
    broker: RunningBroker, name: str, how: str
) -> None:
    """Op 0 is a malformed native frame: Error, and the connection goes on (docs/protocol.md)."""
    c = await connect_raw(broker)
    data = frame(MALFORMED_OP_0[name])
    if how == "whole":
        c.transport.write(data)
    elif how == "byte by byte":
        await trickle(c, data)
    else:
        # A valid request right behind it in the same write is answered after the Error.
        [error, metadata] = await c.ask(data, NATIVE_PROBE)
        assert type(p.decode_response(error)) is p.Error
        assert isinstance(p.decode_response(metadata), p.MetadataResult)
        c.transport.write(frame(b"\x00"))
    await assert_native_error_then_usable(c)
    await close(c)


@pytest_twisted.ensureDeferred
async def test_with_kafka_off_only_a_kafka_request_is_closed(broker_factory: Any) -> None:
    """kafka_enabled=false: op-0 garbage is still answered natively; a Kafka request is cut."""
    running = await broker_factory(kafka_enabled=False)
    try:
        for payload in MALFORMED_OP_0.values():
            c = await connect_raw(running)
            c.transport.write(frame(payload))
            await assert_native_error_then_usable(c)
            await close(c)
        assert running.top.serving_factory.kafka_refused == 0
        c = await connect_raw(running)
        await trickle(c, frame(first_request(3, 1, 5, None)))
        await within(c.lost)
        assert c.frames == []
        assert running.top.serving_factory.kafka_refused == 1
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_an_oversized_first_frame_is_native_however_it_is_split(
    broker_factory: Any,
) -> None:
    """A length over the limit gets the native Error and a hang-up, even with a 0x00 behind it."""
    running = await broker_factory(max_frame_bytes=4096)
    try:
        for data in (struct.pack("!I", 4097), struct.pack("!I", 4097) + b"\x00\x12\x00\x00"):
            c = await connect_raw(running)
            answered = c.expect(1)
            c.transport.write(data)
            [answer] = await answered
            response = p.decode_response(answer)
            assert type(response) is p.Error and "exceeds the maximum" in response.message
            await within(c.lost)
    finally:
        await running.stop()


def doc_examples(kind: str) -> list[bytes]:
    """The ``hex <kind>`` blocks of docs/protocol.md: whole frames, length prefix included."""
    text = DOCS.read_text()
    blocks = re.findall(rf"```hex {kind}\n(.*?)```", text, flags=re.DOTALL)
    return [
        bytes.fromhex("".join(line.split("#", 1)[0] for line in block.splitlines()))
        for block in blocks
    ]


@pytest_twisted.ensureDeferred
async def test_the_documented_first_frames_go_where_the_docs_say(broker: RunningBroker) -> None:
    kafka, native = doc_examples("kafka-first-frame"), doc_examples("native-first-frame")
    assert len(kafka) >= 4 and len(native) >= 3
    closed = 0
    for data in kafka:
        (length,) = struct.unpack_from("!I", data)
        assert length == len(data) - 4, data.hex()
        key, version, cid = struct.unpack_from("!hhi", data, 4)
        c = await connect_raw(broker)
        c.transport.write(data + frame(SENTINEL))
        api = messages.APIS.get(key)
        if api is not None and api.supports(version):
            assert (await kafka_answers(c, cid))[-1] == SENTINEL_CID
            await close(c)
        else:
            # Not served: the Kafka front-end hangs up, as Kafka does, with no answer.
            await within(c.lost)
            assert c.frames == [] and c.buffer == b"", data.hex()
            closed += 1
    assert closed >= 2
    for data in native:
        (length,) = struct.unpack_from("!I", data)
        assert length == len(data) - 4 and data[4] == 0, data.hex()
        c = await connect_raw(broker)
        c.transport.write(data)
        await assert_native_error_then_usable(c)
        await close(c)
