"""ACLs seen by real Kafka clients: what each is allowed, refused, and shown.

The connections here do not authenticate, so each is User:ANONYMOUS; the ACLs
are seeded in the data directory's ACL file before the broker starts (as an
operator's `rustka acls` would leave them) and then changed with confluent-kafka's
and kafka-python's admin clients. tests/security/ covers the SASL principals.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import threads

from rustka.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from rustka.security.acl_store import ACL_FILE, save_acls
from tests.conftest import RunningBroker, start_broker, within

ANON = "User:ANONYMOUS"
T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def acl(
    rtype: ResourceType,
    name: str,
    op: Operation,
    perm: Permission = ALLOW,
    pattern: PatternType = LIT,
    principal: str = ANON,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


def in_thread(f: Callable[..., Any], *args: Any) -> Any:
    return within(threads.deferToThread(f, *args), 90)


async def start_with_acls(data_dir: Path, acls: list[AclBinding], **settings: Any) -> RunningBroker:
    data_dir.mkdir(parents=True, exist_ok=True)
    save_acls(data_dir / ACL_FILE, acls)
    return await start_broker(data_dir, authorizer_enabled=True, **settings)


# The grants the tests share: this client may create topics and alter ACLs, write
# "in-*" topics, read "out" but not write it, use group "readers" only, and is
# denied every "secret-" topic whatever else allows it.
GRANTS = [
    acl(C, "kafka-cluster", Operation.CREATE),
    acl(C, "kafka-cluster", Operation.ALTER),
    acl(C, "kafka-cluster", Operation.DESCRIBE),
    acl(T, "in-", Operation.WRITE, pattern=PRE),
    acl(T, "out", Operation.READ),
    acl(G, "readers", Operation.READ),
    acl(T, "*", Operation.DESCRIBE),
    acl(T, "secret-", Operation.ALL, DENY, pattern=PRE),
]


def produce_each(bootstrap: str, topics: list[str]) -> dict[str, str | None]:
    """Produce one record to each topic with confluent-kafka; each delivery's error."""
    from confluent_kafka import Producer

    results: dict[str, str | None] = {}
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "message.timeout.ms": 20000,
            "enable.idempotence": False,
            "allow.auto.create.topics": False,
        }
    )

    def report(err: Any, msg: Any) -> None:
        results[msg.topic()] = None if err is None else err.name()

    for topic in topics:
        producer.produce(topic, b"value", on_delivery=report)
    producer.flush(30)
    return results


def consume_error(bootstrap: str, topic: str, group: str) -> str | None:
    """Subscribe with confluent-kafka; the first error the consumer reports (or None
    once a record arrives)."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                return msg.error().name()
            return None
        return "TIMED_OUT"
    finally:
        consumer.close()


def create_topics(bootstrap: str, names: list[str]) -> dict[str, str | None]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, 1, 1) for n in names])
    out: dict[str, str | None] = {}
    for name, future in futures.items():
        try:
            future.result(30)
            out[name] = None
        except Exception as e:
            out[name] = e.args[0].name()
    return out


def listed_topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


@pytest_twisted.ensureDeferred
async def test_each_topic_of_a_request_gets_its_own_answer(data_dir: Path) -> None:
    running = await start_with_acls(
        data_dir, [*GRANTS, acl(T, "out", Operation.DESCRIBE, DENY, principal="User:nobody")]
    )
    try:
        created = await in_thread(
            create_topics, running.address, ["in-a", "out", "secret-x", "in-b"]
        )
        assert created == {"in-a": None, "out": None, "secret-x": None, "in-b": None}
        produced = await in_thread(produce_each, running.address, ["in-a", "out", "secret-x"])
        assert produced == {
            "in-a": None,
            "out": "TOPIC_AUTHORIZATION_FAILED",
            "secret-x": "TOPIC_AUTHORIZATION_FAILED",
        }
        # What was refused was not written: only in-a holds a record.
        ends = {name: running.top.broker.bounds(name, 0) for name in ("in-a", "out", "secret-x")}
        assert ends == {"in-a": (0, 1), "out": (0, 0), "secret-x": (0, 0)}
        # Metadata of all topics leaves out what may not be described.
        assert await in_thread(listed_topics, running.address) == {"in-a", "in-b", "out"}
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_group_and_a_topic_must_both_be_allowed_to_consume(data_dir: Path) -> None:
    # The records come from the native client, which the same ACLs govern.
    running = await start_with_acls(data_dir, [*GRANTS, acl(T, "out", Operation.WRITE)])
    try:
        await in_thread(create_topics, running.address, ["out", "in-a"])
        c = await running.client()
        try:
            await within(c.produce("out", b"k", b"v"))
        finally:
            await c.close()
        assert await in_thread(consume_error, running.address, "out", "readers") is None
        assert (
            await in_thread(consume_error, running.address, "out", "writers")
            == "GROUP_AUTHORIZATION_FAILED"
        )
        assert (
            await in_thread(consume_error, running.address, "in-a", "readers")
            == "TOPIC_AUTHORIZATION_FAILED"
        )
    finally:
        await running.stop()
