"""A broker core behind a Kafka listener on 127.0.0.1 and rustka's own Kafka client, for
the tests that send handlers raw requests over a real socket."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.conftest import RunningBroker, start_broker, within


@contextlib.asynccontextmanager
async def kafka_wire(
    tmp_path: Path, topic: str, partitions: int = 2, *, client_id: str = "wire", **settings: Any
) -> AsyncIterator[tuple[RunningBroker, Any]]:
    """The running broker (with ``topic`` made) and a connected client, both closed after."""
    from twisted.internet import defer, reactor

    from rustka.kafka.client import connect_kafka
    from rustka.kafka.server import KafkaFactory

    running = await start_broker(tmp_path, **settings)
    factory = KafkaFactory(running.broker, running.config, reactor)
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    await within(running.broker.create_topic(topic, partitions))
    address = f"127.0.0.1:{port.getHost().port}"
    client = await within(
        defer.ensureDeferred(connect_kafka(reactor, address, client_id=client_id))
    )
    try:
        yield running, client
    finally:
        await client.close()
        await port.stopListening()
        running.broker.groups.close()
        await running.stop()


async def call(client: Any, api_key: int, body: dict[str, Any], version: int = 1) -> Any:
    """One request; its decoded answer."""
    return await within(client.request(api_key, body, version))
