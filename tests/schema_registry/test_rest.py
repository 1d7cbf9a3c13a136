"""The REST API over a real socket, against Confluent's answers and error codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest_twisted

from tests.conftest import RunningBroker
from tests.schema_registry.conftest import Registry, start_registry

USER = json.dumps(
    {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
)
USER_AGE = json.dumps(
    {
        "type": "record",
        "name": "User",
        "fields": [
            {"name": "name", "type": "string"},
            {"name": "age", "type": "int", "default": 0},
        ],
    }
)
USER_NO_DEFAULT = json.dumps(
    {
        "type": "record",
        "name": "User",
        "fields": [{"name": "name", "type": "string"}, {"name": "email", "type": "string"}],
    }
)


@pytest_twisted.ensureDeferred
async def test_register_read_and_list(registry: Registry) -> None:
    assert await registry.call("GET", "/") == (200, {})
    status, body = await registry.call("POST", "/subjects/users-value/versions", {"schema": USER})
    assert status == 200 and body["id"] == 1 and body["version"] == 1
    # the same schema again: same id and version, nothing new
    again = await registry.call("POST", "/subjects/users-value/versions", {"schema": USER})
    assert again[1]["id"] == 1 and again[1]["version"] == 1
    # under another subject: a new version there, the same global id
    other = await registry.call("POST", "/subjects/other-value/versions", {"schema": USER})
    assert other[1]["id"] == 1 and other[1]["version"] == 1
    second = await registry.call("POST", "/subjects/users-value/versions", {"schema": USER_AGE})
    assert second[1]["id"] == 2 and second[1]["version"] == 2
    assert await registry.call("GET", "/subjects") == (200, ["other-value", "users-value"])
    assert await registry.call("GET", "/subjects?subjectPrefix=us") == (200, ["users-value"])
    assert await registry.call("GET", "/subjects/users-value/versions") == (200, [1, 2])
    status, latest = await registry.call("GET", "/subjects/users-value/versions/latest")
    assert status == 200 and latest["version"] == 2 and latest["id"] == 2
    assert json.loads(latest["schema"])["fields"][1]["name"] == "age"
    status, raw = await registry.call("GET", "/subjects/users-value/versions/1/schema")
    assert status == 200 and raw["name"] == "User"
    status, by_id = await registry.call("GET", "/schemas/ids/1")
    assert status == 200 and json.loads(by_id["schema"])["name"] == "User"
    assert await registry.call("GET", "/schemas/ids/1/subjects") == (
        200,
        ["other-value", "users-value"],
    )
    assert await registry.call("GET", "/schemas/ids/1/versions") == (
        200,
        [{"subject": "other-value", "version": 1}, {"subject": "users-value", "version": 1}],
    )
    assert await registry.call("GET", "/schemas/types") == (200, ["AVRO", "JSON", "PROTOBUF"])
    status, found = await registry.call("POST", "/subjects/users-value", {"schema": USER})
    assert status == 200 and found["version"] == 1 and found["id"] == 1


@pytest_twisted.ensureDeferred
async def test_errors_carry_confluent_codes(registry: Registry) -> None:
    assert (await registry.call("GET", "/subjects/nope/versions"))[1]["error_code"] == 40401
    await registry.call("POST", "/subjects/s/versions", {"schema": USER})
    assert (await registry.call("GET", "/subjects/s/versions/7"))[1]["error_code"] == 40402
    status, body = await registry.call("GET", "/subjects/s/versions/zero")
    assert (status, body["error_code"]) == (422, 42202)
    assert (await registry.call("GET", "/schemas/ids/99"))[1]["error_code"] == 40403
    status, body = await registry.call("POST", "/subjects/s/versions", {"schema": "{not json"})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = await registry.call("POST", "/subjects/s/versions", b"{broken")
    assert status == 422 and "JSON" in body["message"]
    status, body = await registry.call("PUT", "/config", {"compatibility": "SIDEWAYS"})
    assert (status, body["error_code"]) == (422, 42203)
    status, body = await registry.call("POST", "/subjects/s/versions", {"schema": USER_NO_DEFAULT})
    assert (status, body["error_code"]) == (409, 409)
    status, body = await registry.call(
        "POST",
        "/compatibility/subjects/s/versions/latest?verbose=true",
        {"schema": USER_NO_DEFAULT},
    )
    assert status == 200 and body["is_compatible"] is False and body["messages"]
    status, body = await registry.call(
        "POST", "/compatibility/subjects/s/versions", {"schema": USER_AGE}
    )
    assert status == 200 and body == {"is_compatible": True}
    assert (await registry.call("GET", "/no/such/path"))[0] == 404
    status, body = await registry.call(
        "POST",
        "/subjects/s/versions",
        {"schema": USER},
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert (status, body["error_code"]) == (415, 415)
    plain = await registry.call(
        "POST", "/subjects/s", {"schema": USER}, {"Content-Type": "application/json"}
    )
    assert plain[0] == 200


@pytest_twisted.ensureDeferred
async def test_soft_and_hard_delete(registry: Registry) -> None:
    await registry.call("POST", "/subjects/s/versions", {"schema": USER})
    await registry.call("POST", "/subjects/s/versions", {"schema": USER_AGE})
    status, body = await registry.call("DELETE", "/subjects/s/versions/1?permanent=true")
    assert (status, body["error_code"]) == (404, 40407)
    assert await registry.call("DELETE", "/subjects/s/versions/1") == (200, 1)
    assert await registry.call("GET", "/subjects/s/versions") == (200, [2])
    assert await registry.call("GET", "/subjects/s/versions?deleted=true") == (200, [1, 2])
    # a soft-deleted version's id still resolves: records written with it must decode
    assert (await registry.call("GET", "/schemas/ids/1"))[0] == 200
    assert await registry.call("DELETE", "/subjects/s/versions/1?permanent=true") == (200, 1)
    assert await registry.call("GET", "/subjects/s/versions?deleted=true") == (200, [2])
    status, body = await registry.call("DELETE", "/subjects/s?permanent=true")
    assert (status, body["error_code"]) == (404, 40405)
    assert await registry.call("DELETE", "/subjects/s") == (200, [2])
    assert await registry.call("GET", "/subjects") == (200, [])
    assert await registry.call("GET", "/subjects?deleted=true") == (200, ["s"])
    status, body = await registry.call("DELETE", "/subjects/s")
    assert (status, body["error_code"]) == (404, 40404)
    assert await registry.call("DELETE", "/subjects/s?permanent=true") == (200, [2])
    assert await registry.call("GET", "/subjects?deleted=true") == (200, [])
    assert (await registry.call("GET", "/schemas/ids/2"))[1]["error_code"] == 40403


@pytest_twisted.ensureDeferred
async def test_references(registry: Registry) -> None:
    address = json.dumps(
        {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
    )
    await registry.call("POST", "/subjects/address/versions", {"schema": address})
    person = json.dumps(
        {"type": "record", "name": "Person", "fields": [{"name": "home", "type": "Address"}]}
    )
    refs = [{"name": "Address", "subject": "address", "version": 1}]
    status, body = await registry.call(
        "POST", "/subjects/person/versions", {"schema": person, "references": refs}
    )
    assert status == 200, body
    assert await registry.call("GET", "/subjects/address/versions/1/referencedby") == (
        200,
        [body["id"]],
    )
    status, got = await registry.call("GET", f"/schemas/ids/{body['id']}")
    assert got["references"] == refs
    status, refused = await registry.call("DELETE", "/subjects/address/versions/1")
    assert (status, refused["error_code"]) == (422, 42206)
    status, missing = await registry.call(
        "POST",
        "/subjects/p2/versions",
        {"schema": person, "references": [{"name": "A", "subject": "nope", "version": 1}]},
    )
    assert (status, missing["error_code"]) == (422, 42201)


@pytest_twisted.ensureDeferred
async def test_config_and_mode(registry: Registry) -> None:
    assert await registry.call("GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert await registry.call("PUT", "/config", {"compatibility": "FULL"}) == (
        200,
        {"compatibility": "FULL"},
    )
    status, body = await registry.call("GET", "/config/s")
    assert (status, body["error_code"]) == (404, 40408)
    assert await registry.call("GET", "/config/s?defaultToGlobal=true") == (
        200,
        {"compatibilityLevel": "FULL"},
    )
    await registry.call("POST", "/subjects/s/versions", {"schema": USER})
    assert await registry.call("PUT", "/config/s", {"compatibility": "NONE"}) == (
        200,
        {"compatibility": "NONE"},
    )
    # NONE lets anything in
    ok = await registry.call("POST", "/subjects/s/versions", {"schema": USER_NO_DEFAULT})
    assert ok[0] == 200
    assert await registry.call("DELETE", "/config/s") == (200, {"compatibilityLevel": "NONE"})
    assert await registry.call("DELETE", "/config") == (200, {"compatibilityLevel": "FULL"})
    assert await registry.call("GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert await registry.call("GET", "/mode") == (200, {"mode": "READWRITE"})
    assert await registry.call("PUT", "/mode", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    status, body = await registry.call("POST", "/subjects/t/versions", {"schema": USER})
    assert (status, body["error_code"]) == (422, 42205)
    await registry.call("PUT", "/mode", {"mode": "IMPORT"})
    status, body = await registry.call(
        "POST", "/subjects/imported/versions", {"schema": USER_AGE, "id": 100, "version": 5}
    )
    assert status == 200 and (body["id"], body["version"]) == (100, 5)
    await registry.call("PUT", "/mode", {"mode": "READWRITE"})
    status, body = await registry.call("POST", "/subjects/x/versions", {"schema": USER, "id": 7})
    assert (status, body["error_code"]) == (422, 42205)
    # the next id after an import is above it
    fresh = json.dumps({"type": "record", "name": "Fresh", "fields": []})
    status, body = await registry.call("POST", "/subjects/fresh/versions", {"schema": fresh})
    assert body["id"] == 101


@pytest_twisted.ensureDeferred
async def test_a_body_over_the_bound_is_refused_unread(registry: Registry) -> None:
    import socket

    from twisted.internet import threads

    def send() -> bytes:
        with socket.create_connection(("127.0.0.1", registry.port), timeout=20) as s:
            s.sendall(
                b"POST /subjects/s/versions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Length: 999999999\r\n\r\n"
            )
            return s.recv(100)

    assert await threads.deferToThread(send) == b""
    assert await registry.call("GET", "/subjects") == (200, [])


@pytest_twisted.ensureDeferred
async def test_state_survives_a_restart(data_dir: Path) -> None:
    first = await start_registry(data_dir)
    try:
        await first.call("POST", "/subjects/s/versions", {"schema": USER})
        await first.call("POST", "/subjects/s/versions", {"schema": USER_AGE})
        await first.call("DELETE", "/subjects/s/versions/1")
        await first.call("PUT", "/config/s", {"compatibility": "FULL"})
    finally:
        await first.running.stop()
    second = await start_registry(data_dir)
    try:
        assert await second.call("GET", "/subjects/s/versions") == (200, [2])
        assert await second.call("GET", "/subjects/s/versions?deleted=true") == (200, [1, 2])
        assert await second.call("GET", "/config/s") == (200, {"compatibilityLevel": "FULL"})
        fresh = json.dumps({"type": "record", "name": "Fresh", "fields": []})
        _status, body = await second.call("POST", "/subjects/f/versions", {"schema": fresh})
        assert body["id"] == 3
        topic = second.running.broker.topic("_schemas")
        assert topic.partitions[0].config.compact
    finally:
        await second.running.stop()


@pytest_twisted.ensureDeferred
async def test_503_until_schemas_is_replayed(broker: RunningBroker) -> None:
    from twisted.internet import reactor, threads

    from rustka.schema_registry.rest import site
    from rustka.schema_registry.store import SchemaStore
    from tests.schema_registry.conftest import http

    store = SchemaStore(broker.broker, reactor)
    port = reactor.listenTCP(0, site(store), interface="127.0.0.1")
    url = f"http://127.0.0.1:{port.getHost().port}"
    try:
        status, body = await threads.deferToThread(http, "GET", url + "/subjects", None, {})
        assert (status, body["error_code"]) == (503, 50003)
        assert await threads.deferToThread(http, "GET", url + "/", None, {}) == (200, {})
        await store.open()
        assert await threads.deferToThread(http, "GET", url + "/subjects", None, {}) == (200, [])
    finally:
        await port.stopListening()
