"""The console's JSON API over real HTTP, against a live broker fed by confluent-kafka."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import pytest_twisted
from twisted.internet import protocol

from rustka.config import ConfigError
from rustka.ops.console.api import MAX_RECORDS
from rustka.record.batch import parse_header
from tests.conftest import start_broker, within
from tests.ops import join_consumer_group
from tests.ops.console.conftest import (
    EVIL,
    EVIL_GROUP,
    EVIL_HEADER,
    ORDERS,
    TOKEN,
    Console,
    get_json,
    http,
    make_data,
    start_console,
    stream,
)


@pytest_twisted.ensureDeferred
async def test_overview_counts_and_rates(console: Console) -> None:
    sampler = console.console.sampler
    sampler.sample()
    client = await console.running.client()
    try:
        for i in range(5):
            await within(client.produce("orders", b"k", b"more-%d" % i))
    finally:
        await client.close()
    sampler.sample()
    overview = await get_json(console, "/api/overview")
    assert overview["version"] == "0.1.0"
    assert overview["uptime_s"] >= 0
    assert overview["data_dir_bytes"] > 0 and overview["disk_free_bytes"] > 0
    assert set(overview["connections"]) == {"native", "kafka"}
    assert overview["topics"] == 1 and overview["partitions"] == 2
    assert overview["totals"]["records_in"] >= ORDERS + 2 + 5
    assert "retention" in overview["background_failures"]
    # A broker alone is the cluster's one broker and leads every partition.
    assert overview["brokers"] == [
        {"node_id": 0, "address": "", "this": True, "coordinator": True, "leads": 2}
    ]
    assert overview["rates"], "two samples make at least one rate"
    # the sampler also runs on its own every 0.2 s: the burst is in one of the points
    assert max(point["records_in"] for point in overview["rates"]) > 0


@pytest_twisted.ensureDeferred
async def test_topics_and_one_topic(console: Console) -> None:
    topics = (await get_json(console, "/api/topics"))["topics"]
    [orders] = [t for t in topics if t["name"] == "orders"]
    assert orders["partitions"] == 2
    assert orders["end_offset"] == ORDERS + 2 and orders["records"] == ORDERS + 2
    assert orders["size_bytes"] > 0
    topic = await get_json(console, "/api/topics/orders")
    assert [
        (p["partition"], p["log_start_offset"], p["end_offset"]) for p in topic["partitions"]
    ] == [
        (0, 0, ORDERS),
        (1, 0, 2),
    ]
    assert any(c["name"] == "cleanup.policy" for c in topic["effective_configs"])
    code, _, body = await http(console, "/api/topics/nosuch")
    assert code == 404 and "nosuch" in json.loads(body)["error"]


@pytest_twisted.ensureDeferred
async def test_messages_latest_offset_and_timestamp(console: Console) -> None:
    base = "/api/topics/orders/partitions/0/messages"
    latest = await get_json(console, base + "?latest=3")
    assert [r["offset"] for r in latest["records"]] == [7, 8, 9]
    record = latest["records"][0]
    assert record["key"]["text"] == "order-7"
    assert json.loads(record["value"]["text"]) == {"n": 7, "item": "widget"}
    assert record["headers"] == [{"key": "source", "value": {"size": 4, "text": "test"}}]
    assert record["timestamp_type"] == "CreateTime"
    assert abs(record["timestamp"] - time.time() * 1000) < 600_000
    page = await get_json(console, base + "?offset=2&limit=2&format=json")
    assert [r["offset"] for r in page["records"]] == [2, 3]
    assert page["records"][0]["value"]["json"] == {"n": 2, "item": "widget"}
    assert page["next_offset"] == 4
    at = page["records"][1]["timestamp"]
    by_time = await get_json(console, base + f"?timestamp={at}&limit=1")
    assert by_time["records"][0]["timestamp"] >= at
    assert by_time["records"][0]["offset"] <= 3
    future = await get_json(console, base + f"?timestamp={int(time.time() * 1000) + 10**8}")
    assert future["records"] == []
    binary = await get_json(console, "/api/topics/orders/partitions/1/messages?offset=1")
    assert binary["records"][0]["key"] == {"size": 2, "hex": "00ff"}
    assert binary["records"][0]["value"] == {"size": 4, "hex": "0001feff"}
    hexed = await get_json(console, base + "?offset=0&limit=1&format=hex")
    assert hexed["records"][0]["key"]["hex"] == b"order-0".hex()


@pytest_twisted.ensureDeferred
async def test_bad_parameters_are_clear_errors(console: Console) -> None:
    base = "/api/topics/orders/partitions/0/messages"
    for query, needle in (
        ("?offset=abc", "offset"),
        ("?format=html", "format"),
        ("?limit=0", "limit"),
        ("?offset=1&latest=2", "one of"),
    ):
        code, _, body = await http(console, base + query)
        assert code == 400, query
        assert needle in json.loads(body)["error"]
    code, _, body = await http(console, "/api/topics/orders/partitions/9/messages")
    assert code == 404
    code, _, _ = await http(console, "/api/nothing")
    assert code == 404


@pytest_twisted.ensureDeferred
async def test_reads_are_bounded(console: Console) -> None:
    client = await console.running.client()
    try:
        for _ in range(3):
            await within(client.produce("big", b"k", b"x" * 5000))
    finally:
        await client.close()
    base = "/api/topics/big/partitions/0/messages"
    many = await get_json(console, base + "?offset=0&limit=100000")
    assert many["limit"] == MAX_RECORDS and len(many["records"]) == 3
    capped = await get_json(console, base + "?offset=0&max_bytes=6000")
    assert [r["offset"] for r in capped["records"]] == [0]
    assert capped["truncated"] is True and capped["next_offset"] == 1
    cut = await get_json(console, base + "?offset=0&max_bytes=100")
    [only] = cut["records"]
    assert only["value"]["size"] == 5000 and only["value"]["truncated"] is True
    assert len(only["value"]["text"]) <= 100
    assert cut["bytes"] <= 100


@pytest_twisted.ensureDeferred
async def test_script_value_is_escaped_json(console: Console) -> None:
    code, headers, body = await http(
        console, "/api/topics/orders/partitions/1/messages?offset=0&limit=1"
    )
    assert code == 200
    assert headers.getRawHeaders("content-type") == ["application/json; charset=utf-8"]
    assert headers.getRawHeaders("x-content-type-options") == ["nosniff"]
    assert b"<script>" not in body and b"<img" not in body
    assert b"\\u003cscript\\u003e" in body
    [record] = json.loads(body)["records"]
    assert record["value"]["text"] == EVIL
    assert record["headers"] == [
        {
            "key": EVIL_HEADER[0],
            "value": {"size": len(EVIL_HEADER[1]), "text": EVIL_HEADER[1].decode()},
        }
    ]


@pytest_twisted.ensureDeferred
async def test_groups_lag_per_partition(console: Console) -> None:
    groups = (await get_json(console, "/api/groups"))["groups"]
    [billing] = [g for g in groups if g["group"] == "billing"]
    assert billing["lag"] == ORDERS - 4 and billing["state"] == "Empty"
    group = await get_json(console, "/api/groups/billing")
    assert group["offsets"] == [
        {
            "topic": "orders",
            "partition": 0,
            "committed": 4,
            "log_start_offset": 0,
            "end_offset": ORDERS,
            "lag": ORDERS - 4,
        }
    ]
    console.console.sampler.sample()
    group = await get_json(console, "/api/groups/billing")
    assert group["lag_history"][-1]["lag"] == ORDERS - 4
    code, _, _ = await http(console, "/api/groups/nobody")
    assert code == 404
    client = await console.running.client()
    try:
        await within(client.commit("native-readers", "orders", 0, 2))
    finally:
        await client.close()
    groups = (await get_json(console, "/api/groups"))["groups"]
    [native] = [g for g in groups if g["group"] == "native-readers"]
    assert (native["state"], native["lag"]) == ("Empty", ORDERS - 2), "a native protocol group"
    evil = await get_json(console, "/api/groups/" + quote(EVIL_GROUP, safe=""))
    assert evil["group"] == EVIL_GROUP and evil["lag"] == 2 - 1


@pytest_twisted.ensureDeferred
async def test_live_tail_streams_new_records(console: Console) -> None:
    response, got = await stream(console, "/api/topics/orders/partitions/0/tail")
    assert response.code == 200
    assert response.headers.getRawHeaders("content-type") == ["text/event-stream; charset=utf-8"]
    await within(got.wait_for(b"event: hello"))
    client = await console.running.client()
    try:
        partition, offset = await within(client.produce("orders", b"live", EVIL.encode()))
    finally:
        await client.close()
    data = await within(got.wait_for(b"event: records"))
    event = data.split(b"event: records\ndata: ", 1)[1].split(b"\n\n", 1)[0]
    assert b"<script>" not in event
    records = json.loads(event)["records"]
    assert (partition, records[0]["offset"]) == (0, ORDERS), "key 'live' hashes to 0"
    assert offset == ORDERS
    assert records[0]["value"]["text"] == EVIL
    assert len(console.console.site.resource.api.tails) == 1
    response._transport.loseConnection()
    await within(got.done)
    api = console.console.site.resource.api
    for _ in range(50):
        if not api.tails:
            break
        from twisted.internet import reactor
        from twisted.internet.task import deferLater

        await deferLater(reactor, 0.05, lambda: None)
    assert not api.tails, "a hung-up tail is ended"


# -- admin actions ---------------------------------------------------------------------


async def _session(console: Console) -> tuple[str, str]:
    code, headers, body = await http(console, "/api/session")
    assert code == 200
    [cookie] = headers.getRawHeaders("set-cookie")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    return cookie.split(";", 1)[0], json.loads(body)["csrf"]


def _admin_headers(console: Console, cookie: str, csrf: str, token: str = TOKEN) -> dict[str, str]:
    return {
        "Cookie": cookie,
        "X-Console-CSRF": csrf,
        "Authorization": f"Bearer {token}",
        "Origin": console.base,
    }


@pytest_twisted.ensureDeferred
async def test_admin_refused_without_token_csrf_or_same_origin(console: Console) -> None:
    cookie, csrf = await _session(console)
    good = _admin_headers(console, cookie, csrf)
    body = {"name": "made", "partitions": 1}
    cases = [
        ({k: v for k, v in good.items() if k != "Authorization"}, 401),
        ({**good, "Authorization": "Bearer " + "x" * len(TOKEN)}, 401),
        ({k: v for k, v in good.items() if k != "X-Console-CSRF"}, 403),
        ({**good, "X-Console-CSRF": "0" * 64}, 403),
        ({k: v for k, v in good.items() if k != "Cookie"}, 403),
        ({**good, "Origin": "http://evil.example"}, 403),
        ({**good, "Sec-Fetch-Site": "cross-site"}, 403),
    ]
    for headers, status in cases:
        code, _, answer = await http(console, "/api/admin/topics", "POST", body, headers)
        assert code == status, (headers, answer)
    code, _, _ = await http(console, "/api/admin/topics", "GET")
    assert code == 404
    assert "made" not in console.running.broker.topics


@pytest_twisted.ensureDeferred
async def test_admin_actions_with_token(console: Console) -> None:
    cookie, csrf = await _session(console)
    headers = _admin_headers(console, cookie, csrf)
    code, _, body = await http(
        console, "/api/admin/topics", "POST", {"name": "made", "partitions": 2}, headers
    )
    assert code == 200, body
    assert len(console.running.broker.topic("made").partitions) == 2
    code, _, body = await http(
        console, "/api/admin/topics/made/partitions", "POST", {"partitions": 3}, headers
    )
    assert code == 200, body
    assert len(console.running.broker.topic("made").partitions) == 3
    code, _, body = await http(
        console, "/api/admin/groups/billing/reset-offsets", "POST",
        {"topic": "orders", "to": "earliest"}, headers,
    )  # fmt: skip
    assert code == 200, body
    assert console.running.broker.committed_offsets("billing") == {
        ("orders", 0): 0,
        ("orders", 1): 0,
    }
    code, _, body = await http(
        console, "/api/admin/topics/made/delete", "POST", {"confirm": "wrong"}, headers
    )
    assert code == 400
    code, _, body = await http(
        console, "/api/admin/topics/made/delete", "POST", {"confirm": "made"}, headers
    )
    assert code == 200, body
    assert "made" not in console.running.broker.topics
    code, _, body = await http(
        console, "/api/admin/topics", "POST", {"name": "orders", "partitions": 1}, headers
    )
    assert code == 409


@pytest_twisted.ensureDeferred
async def test_read_only_without_token_file(data_dir: Path) -> None:
    made = await start_console(data_dir, None)
    try:
        session = await get_json(made, "/api/session")
        assert session["admin"] is False
        cookie, csrf = await _session(made)
        code, _, body = await http(
            made, "/api/admin/topics", "POST", {"name": "x", "partitions": 1},
            _admin_headers(made, cookie, csrf),
        )  # fmt: skip
        assert code == 403 and b"console_token_file" in body
    finally:
        await made.console.stopService()
        await made.running.stop()


@pytest.mark.parametrize(("super_users", "status"), [("", 403), ("User:console", 200)])
@pytest_twisted.ensureDeferred
async def test_admin_needs_acls_when_authorization_is_on(
    data_dir: Path, token_file: Path, super_users: str, status: int
) -> None:
    made = await start_console(
        data_dir, token_file, authorizer_enabled=True, super_users=super_users
    )
    try:
        cookie, csrf = await _session(made)
        code, _, body = await http(
            made, "/api/admin/topics", "POST", {"name": "acl-made", "partitions": 1},
            _admin_headers(made, cookie, csrf),
        )  # fmt: skip
        assert code == status, body
        if status == 403:
            assert b"User:console" in body
        assert ("acl-made" in made.running.broker.topics) == (status == 200)
    finally:
        await made.console.stopService()
        await made.running.stop()


# -- served by the broker ------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_tap_serves_the_console_pages(data_dir: Path, token_file: Path) -> None:
    running = await start_broker(
        data_dir, console_listen="tcp:0:interface=127.0.0.1", console_token_file=str(token_file)
    )
    try:
        made = Console(running, running.top.console)
        await within(made.console.listening)
        await make_data(running)
        code, headers, body = await http(made, "/")
        assert code == 200 and b"/static/console.js" in body
        csp = headers.getRawHeaders("content-security-policy")[0]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        code, headers, body = await http(made, "/static/console.js")
        assert code == 200 and b"innerHTML" not in body
        assert headers.getRawHeaders("content-type") == ["text/javascript; charset=utf-8"]
        code, _, _ = await http(made, "/static/../../config.py")
        assert code == 404
        topics = await get_json(made, "/api/topics")
        assert [t["name"] for t in topics["topics"]] == ["orders"]
    finally:
        await running.stop()


def test_a_missing_token_file_stops_the_start(data_dir: Path, tmp_path: Path) -> None:
    from rustka.config import Config
    from rustka.ops.tap import build_service

    config = Config().updated(
        {
            "data_dir": str(data_dir),
            "console_listen": "tcp:0:interface=127.0.0.1",
            "console_token_file": str(tmp_path / "absent"),
        }
    )
    with pytest.raises(ConfigError, match="console_token_file"):
        build_service(config)
    short = tmp_path / "short"
    short.write_text("abc\n")
    with pytest.raises(ConfigError, match="16 characters"):
        build_service(config.updated({"console_token_file": str(short)}))


def _hold_group(bootstrap: str, joined: threading.Event, leave: threading.Event) -> None:
    """Runs in a thread: a confluent-kafka consumer in group live-readers until told."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "live-readers",
            "client.id": "console-test",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe(["orders"])
        for _ in range(600):
            consumer.poll(0.1)
            if consumer.assignment():
                joined.set()
            if leave.is_set():
                break
    finally:
        consumer.close()


@pytest_twisted.ensureDeferred
async def test_a_live_group_shows_members_and_refuses_a_reset(console: Console) -> None:
    from twisted.internet import threads

    joined, leave = threading.Event(), threading.Event()
    held = threads.deferToThread(_hold_group, console.running.address, joined, leave)
    try:
        assert await within(threads.deferToThread(joined.wait, 60), 70), "never assigned"
        group = await get_json(console, "/api/groups/live-readers")
        assert group["state"] == "Stable" and group["protocol_type"] == "consumer"
        [member] = group["members"]
        assert member["client_id"] == "console-test"
        assert member["assignment"] == [{"topic": "orders", "partitions": [0, 1]}]
        cookie, csrf = await _session(console)
        code, _, body = await http(
            console, "/api/admin/groups/live-readers/reset-offsets", "POST",
            {"topic": "orders", "to": 0}, _admin_headers(console, cookie, csrf),
        )  # fmt: skip
        assert code == 409 and b"live members" in body
    finally:
        leave.set()
        await within(held, 60)


@pytest.mark.clients
@pytest_twisted.ensureDeferred
async def test_reset_to_an_offset_and_compressed_records(console: Console) -> None:
    from twisted.internet import threads

    def produce_lz4(bootstrap: str) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4"})
        for i in range(20):
            producer.produce("orders", key=b"z", value=b"squeezed %d " % i * 20, partition=1)
        assert producer.flush(30) == 0

    await within(threads.deferToThread(produce_lz4, console.running.address), 60)
    page = await get_json(console, "/api/topics/orders/partitions/1/messages?offset=2&limit=20")
    assert [r["offset"] for r in page["records"]] == list(range(2, 22))
    assert page["records"][5]["value"]["text"] == "squeezed 5 " * 20
    stored = await within(console.running.broker.read("orders", 1, 2, 1 << 20))
    assert parse_header(stored.chunks[0]).attributes & 0x07 == 3, "kept as lz4 batches"
    cookie, csrf = await _session(console)
    code, _, body = await http(
        console, "/api/admin/groups/billing/reset-offsets", "POST",
        {"topic": "orders", "to": 7, "partitions": [0]}, _admin_headers(console, cookie, csrf),
    )  # fmt: skip
    assert code == 200, body
    group = await get_json(console, "/api/groups/billing")
    assert [(o["partition"], o["committed"], o["lag"]) for o in group["offsets"]] == [
        (0, 7, ORDERS - 7)
    ]
    for bad in ({"topic": "orders", "to": "soon"}, {"topic": "orders", "to": 1, "partitions": [5]}):
        code, _, _ = await http(
            console, "/api/admin/groups/billing/reset-offsets", "POST", bad,
            _admin_headers(console, cookie, csrf),
        )  # fmt: skip
        assert code == 400, bad


@pytest_twisted.ensureDeferred
async def test_only_known_host_names_are_answered(console: Console) -> None:
    """DNS rebinding: evil.example resolving to 127.0.0.1 must not get the data."""
    port = console.port
    for host, status in (
        (f"evil.example:{port}", 421),
        ("evil.example", 421),
        (f"localhost:{port}", 200),
        (f"127.0.0.1:{port}", 200),
        (f"[::1]:{port}", 200),
    ):
        code, _, body = await http(console, "/api/topics", headers={"Host": host})
        assert code == status, (host, body)
    code, _, body = await http(
        console, "/api/admin/topics", "POST", {"name": "x", "partitions": 1},
        {"Host": "evil.example", "Origin": "http://evil.example"},
    )  # fmt: skip
    assert code == 421 and b"orders" not in body


@pytest_twisted.ensureDeferred
async def test_a_configured_host_name_is_answered(data_dir: Path) -> None:
    made = await start_console(data_dir, None, console_allowed_hosts="console.example.com")
    try:
        code, _, _ = await http(made, "/", headers={"Host": "console.example.com:8080"})
        assert code == 200
        code, _, _ = await http(made, "/", headers={"Host": "other.example.com"})
        assert code == 421
    finally:
        await made.console.stopService()
        await made.running.stop()


@pytest_twisted.ensureDeferred
async def test_a_tail_resumes_from_its_last_event_id(console: Console) -> None:
    from twisted.internet import reactor
    from twisted.web.client import Agent
    from twisted.web.http_headers import Headers

    from tests.ops.console.conftest import _Collect

    response = await within(
        Agent(reactor).request(
            b"GET",
            (console.base + "/api/topics/orders/partitions/0/tail").encode(),
            Headers({"Last-Event-ID": ["8"]}),
        )
    )
    got = _Collect()
    response.deliverBody(got)
    data = await within(got.wait_for(b"event: records"))
    assert b"id: 10\n" in data
    event = data.split(b"event: records\ndata: ", 1)[1].split(b"\n\n", 1)[0]
    assert [r["offset"] for r in json.loads(event)["records"]] == [8, 9]
    response._transport.loseConnection()
    await within(got.done)


@pytest_twisted.ensureDeferred
async def test_before_the_storage_opens_the_api_says_so(data_dir: Path) -> None:
    """The console binds at start, like /metrics, so a long recovery can be watched."""
    from twisted.internet import reactor

    from rustka.config import Config
    from rustka.ops.console import console_service
    from rustka.ops.tap import build_service

    config = Config().updated(
        {"data_dir": str(data_dir), "console_listen": "tcp:0:interface=127.0.0.1"}
    )
    top = build_service(config, reactor)
    console = console_service(config, top.broker, top.factory, reactor)
    console.startService()
    try:
        await within(console.listening)
        made = Console(None, console)  # type: ignore[arg-type]
        for path in ("/api/topics", "/api/groups", "/api/topics/orders/partitions/0/messages"):
            code, _, body = await http(made, path)
            assert code == 503, (path, body)
            assert "error" in json.loads(body)
        code, _, _ = await http(made, "/")
        assert code == 200
    finally:
        await console.stopService()


@pytest_twisted.ensureDeferred
async def test_live_tails_are_capped(console: Console) -> None:
    from rustka.ops.console.api import MAX_TAILS

    opened = []
    try:
        for _ in range(MAX_TAILS):
            response, got = await stream(console, "/api/topics/orders/partitions/0/tail")
            await within(got.wait_for(b"event: hello"))
            opened.append((response, got))
        code, _, body = await http(console, "/api/topics/orders/partitions/0/tail")
        assert code == 503 and str(MAX_TAILS).encode() in body
    finally:
        for response, got in opened:
            response._transport.loseConnection()
            await within(got.done)


class _SlowReader(protocol.Protocol):
    """A tail reader that stops reading (the socket fills) until told to go on."""

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.data = bytearray()

    def connectionMade(self) -> None:
        # a fixed receive buffer: the kernel's autotuning could otherwise take MBs
        self.transport.getHandle().setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        self.transport.write(self.request)
        self.transport.pauseProducing()

    def dataReceived(self, data: bytes) -> None:
        self.data += data


@pytest_twisted.ensureDeferred
async def test_a_tail_whose_reader_stops_reading_is_paused(console: Console) -> None:
    """Backpressure, not buffering: ~30 MB of backlog to a reader that reads nothing
    leaves the tail paused part-way; once the reader reads, it gets everything."""
    from twisted.internet import reactor
    from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
    from twisted.internet.task import deferLater

    count, size = 150, 200_000
    client = await console.running.client()
    try:
        for i in range(count):
            await within(client.produce("bulk", b"k", bytes([65 + i % 26]) * size))
    finally:
        await client.close()
    api = console.console.site.resource.api
    reader = _SlowReader(
        b"GET /api/topics/bulk/partitions/0/tail?offset=0 HTTP/1.1\r\n"
        b"Host: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    await within(connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", console.port), reader))
    try:
        for _ in range(200):
            tail = next(iter(api.tails), None)
            if tail is not None and tail._paused is not None:
                break
            await deferLater(reactor, 0.05, lambda: None)
        assert tail is not None and tail._paused is not None, "the tail never paused"
        assert tail.offset < count, "paused before reading the whole backlog"
        reader.transport.resumeProducing()
        for _ in range(400):
            if b"id: %d\n" % count in reader.data:
                break
            await deferLater(reactor, 0.05, lambda: None)
        assert b"id: %d\n" % count in reader.data, "the reader got the whole backlog"
    finally:
        reader.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_a_huge_body_is_refused_unread(console: Console) -> None:
    from twisted.web.client import ResponseFailed, ResponseNeverReceived

    from rustka.ops.console.admin import MAX_BODY

    cookie, csrf = await _session(console)
    headers = _admin_headers(console, cookie, csrf)
    big = {"name": "x" * (MAX_BODY + 10), "partitions": 1}
    with pytest.raises((ResponseFailed, ResponseNeverReceived)):
        await http(console, "/api/admin/topics", "POST", big, headers)
    code, _, body = await http(
        console, "/api/admin/topics", "POST", {"name": "small", "partitions": 1}, headers
    )
    assert code == 200, body


JOBS = 7


@pytest_twisted.ensureDeferred
async def test_a_share_group_is_listed_by_type_with_its_in_flight_window(console: Console) -> None:
    """Share groups (docs/kafka.md, "Share groups (KIP-932)") are listed with type
    "share"; their page is each started partition's in-flight window."""
    client = await console.running.client()
    try:
        await within(client.create_topic("jobs", 1))
        for i in range(JOBS):
            await within(client.produce("jobs", b"k", b"job-%d" % i))
        taken = await within(client.share_fetch("queue-workers", "w", "jobs", 3, 0, 1))
        assert [r.record.offset for r in taken] == [0, 1, 2]
        await within(client.share_acknowledge("queue-workers", "w", "jobs", [(0, 0, 1)]))
    finally:
        await client.close()
    groups = (await get_json(console, "/api/groups"))["groups"]
    [queue] = [g for g in groups if g["group"] == "queue-workers"]
    assert (queue["type"], queue["partitions"], queue["lag"]) == ("share", 1, JOBS - 1)
    [billing] = [g for g in groups if g["group"] == "billing"]
    assert billing["type"] == "classic"
    group = await get_json(console, "/api/groups/queue-workers")
    assert (group["type"], group["state"], group["members"]) == ("share", "Empty", [])
    assert group["partitions"] == [
        {
            "topic": "jobs",
            "partition": 0,
            "start_offset": 1,
            "end_offset": 3,
            "log_end_offset": JOBS,
            "available": 0,
            "acquired": 2,
            "acknowledged": 0,
            "archived": 0,
            "undelivered": JOBS - 1,
        }
    ]


@pytest_twisted.ensureDeferred
async def test_a_consumer_protocol_group_shows_its_epochs_and_each_members_target(
    console: Console,
) -> None:
    """A KIP-848 group is listed with type "consumer"; its page has the group epoch and
    each member's epoch, assignment and target assignment."""
    k, joined = await join_consumer_group(
        console.running.address, "modern", "m-1", ["orders"], server_assignor="range"
    )
    await k.close()
    assert joined["error_code"] == 0
    groups = (await get_json(console, "/api/groups"))["groups"]
    [modern] = [g for g in groups if g["group"] == "modern"]
    assert (modern["type"], modern["members"]) == ("consumer", 1)
    group = await get_json(console, "/api/groups/modern")
    assert (group["type"], group["protocol"], group["generation"]) == (
        "consumer",
        "range",
        joined["member_epoch"],
    )
    [member] = group["members"]
    assert (member["member_id"], member["member_epoch"]) == ("m-1", joined["member_epoch"])
    assert member["target_assignment"] == [{"topic": "orders", "partitions": [0, 1]}]
