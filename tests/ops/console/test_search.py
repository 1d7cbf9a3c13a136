"""Message search, schema-decoded values and the clients endpoint over real HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest_twisted

from rustka.ops.console.search import MAX_SCAN
from tests.conftest import within
from tests.ops.console.conftest import (
    EVIL_HEADER,
    ORDERS,
    Console,
    get_json,
    http,
    make_data,
    start_console,
)

SCHEMA_ID = 7


def decode_framed(value: bytes) -> dict[str, Any] | None:
    """A small schema registry: Confluent's framing (magic 0, a 4-byte schema id) of a
    JSON payload, known only for `SCHEMA_ID`."""
    if len(value) < 5 or value[0] != 0:
        return None
    schema_id = int.from_bytes(value[1:5], "big")
    if schema_id != SCHEMA_ID:
        return None
    return {
        "schema_id": schema_id,
        "schema_type": "JSON",
        "subject": "framed-value",
        "value": json.loads(value[5:]),
    }


CLIENTS = {
    "enabled": True,
    "clients": [
        {
            "client_instance_id": "4b1c1a9e-0000-4000-8000-000000000001",
            "client_id": "<b>billing</b>",
            "software_name": "librdkafka",
            "software_version": "2.16.1",
            "principal": "User:ANONYMOUS",
            "address": "127.0.0.1",
            "last_push_ms": 1764633600000,
            "metrics": [
                {
                    "name": "org.apache.kafka.producer.record.queue.time.avg",
                    "kind": "gauge",
                    "value": 1.5,
                    "labels": {"topic": "orders"},
                }
            ],
        }
    ],
}


@pytest_twisted.async_yield_fixture
async def searchable(data_dir: Path, token_file: Path) -> AsyncIterator[Console]:
    made = await start_console(
        data_dir, token_file, decode_value=decode_framed, client_metrics=lambda: CLIENTS
    )
    try:
        await make_data(made.running)
        yield made
    finally:
        await made.console.stopService()
        await made.running.stop()


async def search(console: Console, partition: int = 0, **params: Any) -> dict[str, Any]:
    path = f"/api/topics/orders/partitions/{partition}/messages?" + urlencode(params)
    return dict(await get_json(console, path))


def offsets(page: dict[str, Any]) -> list[int]:
    return [r["offset"] for r in page["records"]]


@pytest_twisted.ensureDeferred
async def test_search_by_key_value_and_header(searchable: Console) -> None:
    exact = await search(searchable, key="order-3", key_match="exact")
    assert offsets(exact) == [3]
    assert exact["scanned"] == ORDERS and exact["matched"] == 1
    assert exact["truncated"] is False and exact["next_offset"] == ORDERS
    assert offsets(await search(searchable, key="order-", key_match="exact")) == []
    assert offsets(await search(searchable, key="der-")) == list(range(ORDERS))
    assert offsets(await search(searchable, value='"n": 7')) == [7]
    assert offsets(await search(searchable, header="source")) == list(range(ORDERS))
    assert offsets(await search(searchable, header="source=test")) == list(range(ORDERS))
    assert offsets(await search(searchable, header="source=other")) == []
    # the name ends at the first "=": a name holding one is found by the value
    name = EVIL_HEADER[0]
    assert "=" in name
    evil = await search(searchable, partition=1, value="window.pwned")
    assert offsets(evil) == [0]
    assert evil["records"][0]["headers"][0]["key"] == name
    # the filters combine: every part must match
    assert offsets(await search(searchable, key="order-", value='"n": 2')) == [2]
    limited = await search(searchable, key="order-", limit=3)
    assert offsets(limited) == [0, 1, 2] and limited["next_offset"] == 3


@pytest_twisted.ensureDeferred
async def test_search_by_time_range(searchable: Console) -> None:
    every = (await search(searchable, offset=0))["records"]
    stamps = [r["timestamp"] for r in every]
    at = stamps[4]
    later = await search(searchable, from_ts=at)
    assert all(r["timestamp"] >= at for r in later["records"])
    assert offsets(later) == [r["offset"] for r in every if r["timestamp"] >= at]
    earlier = await search(searchable, to_ts=at)
    assert offsets(earlier) == [r["offset"] for r in every if r["timestamp"] <= at]
    assert offsets(await search(searchable, from_ts=max(stamps) + 1)) == []


@pytest_twisted.ensureDeferred
async def test_search_is_bounded_and_resumes(searchable: Console) -> None:
    first = await search(searchable, key="order-9", max_scan=4)
    assert first["records"] == [] and first["truncated"] is True
    assert first["scanned"] == 4 and first["matched"] == 0 and first["next_offset"] == 4
    second = await search(searchable, key="order-9", max_scan=4, offset=first["next_offset"])
    assert second["records"] == [] and second["next_offset"] == 8
    third = await search(searchable, key="order-9", max_scan=4, offset=second["next_offset"])
    assert offsets(third) == [9] and third["truncated"] is False
    assert third["scanned"] == 2
    huge = await search(searchable, key="x", max_scan=10**9)
    assert huge["scanned"] <= MAX_SCAN
    for query, needle in (
        ({"key": "a", "key_match": "regex"}, "key_match"),
        ({"from_ts": "soon"}, "from_ts"),
        ({"from_ts": 5, "to_ts": 4}, "to_ts"),
        ({"key": "a", "max_scan": 0}, "max_scan"),
    ):
        path = "/api/topics/orders/partitions/0/messages?" + urlencode(query)
        code, _, body = await http(searchable, path)
        assert code == 400 and needle in json.loads(body)["error"], body


@pytest_twisted.ensureDeferred
async def test_values_decoded_with_their_schema(searchable: Console) -> None:
    client = await searchable.running.client()
    try:
        await within(client.create_topic("framed", 1))
        payload = {"amount": 12, "note": "<i>x</i>"}
        framed = b"\x00" + SCHEMA_ID.to_bytes(4, "big") + json.dumps(payload).encode()
        unknown = b"\x00" + (99).to_bytes(4, "big") + b"{}"
        broken = b"\x00" + SCHEMA_ID.to_bytes(4, "big") + b"not json"
        for value in (framed, unknown, b"plain", broken):
            await within(client.produce("framed", b"k", value))
    finally:
        await client.close()
    page = await get_json(searchable, "/api/topics/framed/partitions/0/messages?offset=0")
    known, other, plain, failed = page["records"]
    assert known["decoded"] == {
        "schema_id": SCHEMA_ID,
        "schema_type": "JSON",
        "subject": "framed-value",
        "value": payload,
    }
    assert known["value"]["size"] == len(framed)
    assert "decoded" not in other and "decoded" not in plain
    # a decoder that fails on one value says so on that record; the page is served
    assert failed["decoded"]["error"].startswith("JSONDecodeError")
    assert failed["value"]["text"].endswith("not json")
    # a search page decodes the same way
    found = await get_json(
        searchable, "/api/topics/framed/partitions/0/messages?" + urlencode({"value": "amount"})
    )
    assert [r["decoded"]["schema_id"] for r in found["records"]] == [SCHEMA_ID]


@pytest_twisted.ensureDeferred
async def test_clients_endpoint(searchable: Console, tmp_path: Path) -> None:
    assert await get_json(searchable, "/api/clients") == CLIENTS
    plain = await start_console(tmp_path / "without-telemetry", None)
    try:
        code, _, body = await http(plain, "/api/clients")
        assert code == 404 and json.loads(body) == {"error": "client telemetry is off"}
    finally:
        await plain.console.stopService()
        await plain.running.stop()


def test_filter_parts_all_must_match() -> None:
    from rustka.ops.console.search import FilterError, RecordFilter, parse_filter

    headers = [("trace", b"abc"), ("empty", None)]
    assert parse_filter({}).empty
    assert parse_filter({"key": "ab", "key_match": "exact"}) == RecordFilter(
        key=b"ab", key_exact=True
    )
    every = RecordFilter()
    assert every.matches(None, None, (), 0)
    assert not RecordFilter(key=b"a").matches(None, b"a", (), 0), "no key matches no key text"
    assert RecordFilter(header_name="empty").matches(b"k", b"v", headers, 0)
    assert RecordFilter(header_name="empty", header_value=b"").matches(b"k", b"v", headers, 0)
    assert not RecordFilter(header_name="trace", header_value=b"ab").matches(b"k", b"v", headers, 0)
    assert parse_filter({"header": "trace=a=b"}).header_value == b"a=b"
    ranged = RecordFilter(from_ts=10, to_ts=20)
    assert [t for t in (9, 10, 20, 21) if ranged.matches(b"k", b"v", (), t)] == [10, 20]
    both = parse_filter({"key": "k", "value": "v"})
    assert both.matches(b"k1", b"v1", (), 0) and not both.matches(b"k1", b"x", (), 0)
    for bad in ({"key_match": "glob"}, {"to_ts": "x"}):
        try:
            parse_filter(bad)
        except FilterError:
            continue
        raise AssertionError(f"{bad} was taken")


@pytest_twisted.ensureDeferred
async def test_a_filtered_tail_sends_only_matching_records(searchable: Console) -> None:
    from tests.ops.console.conftest import stream

    path = "/api/topics/orders/partitions/0/tail?" + urlencode({"offset": 0, "key": "order-4"})
    response, got = await stream(searchable, path)
    try:
        assert response.code == 200
        data = await within(got.wait_for(b"event: records"))
        event = data.split(b"event: records\ndata: ", 1)[1].split(b"\n\n", 1)[0]
        found = json.loads(event)
        assert [r["offset"] for r in found["records"]] == [4]
        assert found["next_offset"] == ORDERS
    finally:
        response._transport.loseConnection()
        await within(got.done)
    code, _, body = await http(searchable, "/api/topics/orders/partitions/0/tail?key_match=regex")
    assert code == 400 and "key_match" in json.loads(body)["error"]
