"""A live broker with the web console, topics and a group made by real Kafka clients."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, protocol, threads

from tests.conftest import RunningBroker, start_broker, within

TIMEOUT = 20
TOKEN = "console-admin-token-0123456789"
EVIL = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
"""A value a page would run if it ever inserted data as markup."""
EVIL_GROUP = '<img src=x onerror="window.pwned=3">/team'
"""A legal group id (any printable characters), with a slash for the paths too."""
EVIL_HEADER = ("<b onclick=x>h</b>", b"<svg onload=window.pwned=4>")
ORDERS = 10
"""Records produced to orders-0; the group commits 4 of them, so its lag is 6."""


def seed(bootstrap: str) -> None:
    """Runs in a thread: confluent-kafka (librdkafka) produces and commits as a user would."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(ORDERS):
        producer.produce(
            "orders",
            key=f"order-{i}",
            value=json.dumps({"n": i, "item": "widget"}),
            partition=0,
            headers=[("source", b"test")],
        )
    producer.produce("orders", key="evil", value=EVIL, partition=1, headers=[EVIL_HEADER])
    producer.produce("orders", key=b"\x00\xff", value=b"\x00\x01\xfe\xff", partition=1)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "billing", "enable.auto.commit": False}
    )
    try:
        consumer.commit(offsets=[TopicPartition("orders", 0, 4)], asynchronous=False)
    finally:
        consumer.close()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": EVIL_GROUP})
    try:
        consumer.commit(offsets=[TopicPartition("orders", 1, 1)], asynchronous=False)
    finally:
        consumer.close()


class Console:
    """A running broker, its console's port, and the data made for the tests."""

    def __init__(self, running: RunningBroker, console: Any) -> None:
        self.running = running
        self.console = console

    @property
    def port(self) -> int:
        return int(self.console.port.getHost().port)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def start_console(
    data_dir: Path,
    token_file: Path | None,
    console_allowed_hosts: str = "",
    *,
    decode_value: Callable[[bytes], Any] | None = None,
    client_metrics: Callable[[], Any] | None = None,
    sample_interval_s: float = 0.2,
    console_listen: str = "tcp:0:interface=127.0.0.1",
    **settings: Any,
) -> Console:
    """The broker with its console built as tap builds it, sampling every 0.2 s; the
    schema decoder and client telemetry are the test's own small functions."""
    from twisted.internet import reactor

    from rustka.ops.console import console_service

    running = await start_broker(data_dir, default_partitions=1, **settings)
    config = running.config.updated(
        {
            "console_listen": console_listen,
            "console_token_file": str(token_file) if token_file else None,
            "console_allowed_hosts": console_allowed_hosts,
        }
    )
    console = console_service(
        config,
        running.broker,
        running.factory,
        reactor,
        kafka_factory=running.top.kafka_factory,
        sample_interval_s=sample_interval_s,
        decode_value=decode_value,
        client_metrics=client_metrics,
    )
    console.startService()
    await within(console.listening)
    return Console(running, console)


async def make_data(running: RunningBroker) -> None:
    client = await running.client()
    try:
        await within(client.create_topic("orders", 2))
    finally:
        await client.close()
    await within(threads.deferToThread(seed, running.address), 90)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "console_token"
    path.write_text(TOKEN + "\n")
    return path


@pytest_twisted.async_yield_fixture
async def console(data_dir: Path, token_file: Path) -> AsyncIterator[Console]:
    made = await start_console(data_dir, token_file)
    try:
        await make_data(made.running)
        yield made
    finally:
        await made.console.stopService()
        await made.running.stop()


class _Collect(protocol.Protocol):
    def __init__(self) -> None:
        self.data = b""
        self.done: defer.Deferred[bytes] = defer.Deferred()
        self._waits: list[tuple[bytes, defer.Deferred[bytes]]] = []

    def dataReceived(self, data: bytes) -> None:
        self.data += data
        for needle, d in list(self._waits):
            if needle in self.data:
                self._waits.remove((needle, d))
                d.callback(self.data)

    def connectionLost(self, reason: Any = None) -> None:
        if not self.done.called:
            self.done.callback(self.data)

    def wait_for(self, needle: bytes) -> defer.Deferred[bytes]:
        d: defer.Deferred[bytes] = defer.Deferred()
        if needle in self.data:
            d.callback(self.data)
        else:
            self._waits.append((needle, d))
        return d


async def http(
    console: Console,
    path: str,
    method: str = "GET",
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, bytes]:
    """One real HTTP request to the console: (status, headers, body)."""
    from twisted.internet import reactor
    from twisted.web.client import Agent, FileBodyProducer, readBody
    from twisted.web.http_headers import Headers

    sent = {name: [value] for name, value in (headers or {}).items()}
    producer = None
    if body is not None:
        import io

        producer = FileBodyProducer(io.BytesIO(json.dumps(body).encode()))
        sent.setdefault("Content-Type", ["application/json"])
    response = await within(
        Agent(reactor).request(
            method.encode(), (console.base + path).encode(), Headers(sent), producer
        ),
        TIMEOUT,
    )
    data = await within(readBody(response), TIMEOUT)
    return response.code, response.headers, data


async def get_json(console: Console, path: str) -> Any:
    code, _, body = await http(console, path)
    assert code == 200, body
    return json.loads(body)


async def stream(console: Console, path: str) -> tuple[Any, _Collect]:
    """A streamed GET (the live tail): the response and what has arrived so far."""
    from twisted.internet import reactor
    from twisted.web.client import Agent

    response = await within(Agent(reactor).request(b"GET", (console.base + path).encode()), TIMEOUT)
    collected = _Collect()
    response.deliverBody(collected)
    return response, collected


async def until(check: Callable[[], Any], what: str, attempts: int = 100) -> Any:
    """Ask again every 0.1 s until ``check`` answers something true (bounded)."""
    from twisted.internet import reactor
    from twisted.internet.task import deferLater

    for _ in range(attempts):
        value = await check()
        if value:
            return value
        await deferLater(reactor, 0.1, lambda: None)
    raise AssertionError(f"timed out waiting for {what}")
