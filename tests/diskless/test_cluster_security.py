"""SCRAM users and ACLs in a cluster are the cluster's: a single broker's users and ACLs
become the cluster's when it first joins, and a user or an ACL made through one broker
is in force at the other (docs/diskless.md, "Security in a cluster")."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from rustka.security.acl import Operation
from rustka.security.acl_store import ACL_FILE, save_acls
from tests.conftest import start_broker, within
from tests.diskless.test_cluster import all_live
from tests.diskless.test_diskless_clients import diskless_settings
from tests.kafka.test_authorization_clients import T, acl, add_users
from tests.services.seaweed import S3Place

pytestmark = pytest.mark.clients

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "carol": "carol-secret"}


def as_user(user: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
    }


def produce_as(bootstrap: str, user: str, topic: str) -> str | None:
    """One record produced by ``user`` through ``bootstrap``; its error, or None."""
    from confluent_kafka import Producer

    errors: list[str | None] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "message.timeout.ms": 8000,
            "socket.timeout.ms": 5000,
            **as_user(user),
        }
    )
    producer.produce(topic, b"v", on_delivery=lambda err, _m: errors.append(err and err.name()))
    producer.flush(15)
    return errors[0] if errors else "undelivered"


def until_produced(bootstrap: str, user: str, topic: str, timeout_s: float = 60) -> str | None:
    """Produce until it succeeds (a change reaches a broker on its next heartbeat)."""
    deadline = time.monotonic() + timeout_s
    while True:
        error = produce_as(bootstrap, user, topic)
        if error is None or time.monotonic() > deadline:
            return error


def admin_changes(bootstrap: str) -> None:
    """Through one broker: the topic, a new user carol, and her right to write it."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, **as_user("admin")})
    for future in admin.create_topics(
        [NewTopic("orders", 2, 1, config={"diskless.enable": "true"})]
    ).values():
        future.result(30)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    upsert = UserScramCredentialUpsertion("carol", info, PASSWORDS["carol"].encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    binding = AclBinding(
        ResourceType.TOPIC,
        "orders",
        ResourcePatternType.LITERAL,
        "User:carol",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([binding]).values():
        future.result(30)


@pytest_twisted.ensureDeferred
async def test_users_and_acls_made_through_one_broker_hold_at_the_other(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    settings = diskless_settings(
        postgres_dsn,
        s3_bucket,
        cluster_lease_ms=2000,
        authorizer_enabled=True,
        super_users="User:admin",
        listen_security="sasl",
    )
    first_dir = tmp_path / "b1"
    add_users(first_dir, {u: PASSWORDS[u] for u in ("admin", "alice")})
    save_acls(first_dir / ACL_FILE, [acl(T, "orders", Operation.WRITE, principal="User:alice")])
    one = await start_broker(first_dir, **settings, broker_id=1)
    brokers = [one]
    try:
        await all_live(brokers, (1,))
        # Broker 2 starts with no users and no ACLs of its own.
        two = await start_broker(tmp_path / "b2", **settings, broker_id=2)
        brokers.append(two)
        await all_live(brokers, (1, 2))
        await within(threads.deferToThread(admin_changes, two.address), 90)
        # alice and her ACL came from broker 1's files; carol and hers through broker 2.
        assert (
            await within(threads.deferToThread(until_produced, two.address, "alice", "orders"), 90)
            is None
        )
        assert (
            await within(threads.deferToThread(until_produced, one.address, "carol", "orders"), 90)
            is None
        )
        # What is not granted is still refused, at either broker.
        denied: Any = await within(
            threads.deferToThread(produce_as, one.address, "alice", "secret"), 60
        )
        assert denied == "TOPIC_AUTHORIZATION_FAILED"
        assert sorted(one.broker.access.authorizer.acls) == sorted(
            two.broker.access.authorizer.acls
        )
        assert len(one.broker.access.authorizer.acls) == 2
    finally:
        for b in reversed(brokers):
            await b.stop()
