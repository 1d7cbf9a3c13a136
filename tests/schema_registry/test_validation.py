"""confluent.value.schema.validation: a real producer's framed records with a registered
id are stored; unframed ones and unknown ids are refused with INVALID_RECORD."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from tests.conftest import within
from tests.schema_registry.conftest import Registry

pytestmark = pytest.mark.clients

SCHEMA = json.dumps({"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]})


def produce_each(bootstrap: str, topic: str, values: list[bytes]) -> list[str | None]:
    """Each value in its own produce, with the error each got (None: stored)."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0, "acks": "all"}
    )
    outcomes: list[str | None] = []
    for value in values:
        got: list[Any] = []
        producer.produce(
            topic, value=value, partition=0, on_delivery=lambda e, _m, got=got: got.append(e)
        )
        assert producer.flush(30) == 0
        outcomes.append(None if got[0] is None else got[0].name())
    return outcomes


@pytest_twisted.ensureDeferred
async def test_only_framed_records_with_known_ids_are_stored(registry: Registry) -> None:
    broker = registry.running.broker
    await within(broker.create_topic("checked", 1, {"confluent.value.schema.validation": "true"}))
    await within(broker.create_topic("free", 1))
    status, body = await registry.call(
        "POST", "/subjects/checked-value/versions", {"schema": SCHEMA}
    )
    assert status == 200
    known = struct.pack(">bI", 0, body["id"]) + b"\x02"
    unknown = struct.pack(">bI", 0, 999) + b"\x02"
    outcomes = await within(
        threads.deferToThread(
            produce_each, registry.running.address, "checked", [known, b"plain", unknown, known]
        ),
        60,
    )
    assert outcomes == [None, "INVALID_RECORD", "INVALID_RECORD", None]
    assert broker.bounds("checked", 0) == (0, 2)
    free = await within(
        threads.deferToThread(produce_each, registry.running.address, "free", [b"plain"]), 60
    )
    assert free == [None]


@pytest_twisted.ensureDeferred
async def test_key_validation_checks_keys(registry: Registry) -> None:
    broker = registry.running.broker
    await within(broker.create_topic("keyed", 1, {"confluent.key.schema.validation": "true"}))
    status, body = await registry.call("POST", "/subjects/keyed-key/versions", {"schema": SCHEMA})
    assert status == 200
    from rustka.errors import InvalidBatch
    from rustka.record.batch import Record, encode_batch

    framed = struct.pack(">bI", 0, body["id"]) + b"\x02"
    await within(broker.append("keyed", 0, encode_batch([Record(framed, b"v")]), auto_create=False))
    with pytest.raises(InvalidBatch, match="key"):
        await within(
            broker.append("keyed", 0, encode_batch([Record(b"k", framed)]), auto_create=False)
        )
