"""HTTP Basic against the broker's SCRAM users, and the broker's ACLs by subject
(docs/schema-registry.md, "Authentication" and "Authorization")."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_twisted

from rustka.config import Config, ConfigError
from rustka.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from rustka.security.credentials import CredentialStore
from rustka.security.scram import MECHANISMS, derive_credential
from tests.conftest import within
from tests.schema_registry.conftest import Registry, start_registry

SCHEMA = json.dumps({"type": "record", "name": "R", "fields": []})


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


ALICE = basic("alice", "alice-secret")
BOB = basic("bob", "bob-secret")


@pytest_twisted.async_yield_fixture
async def secured(data_dir: Path) -> AsyncIterator[Registry]:
    data_dir.mkdir(parents=True)
    store = CredentialStore(data_dir / "credentials")
    store.upsert(
        "alice", "SCRAM-SHA-256", derive_credential(MECHANISMS["SCRAM-SHA-256"], "alice-secret")
    )
    store.upsert(
        "bob", "SCRAM-SHA-512", derive_credential(MECHANISMS["SCRAM-SHA-512"], "bob-secret")
    )
    made = await start_registry(
        data_dir,
        schema_registry_authentication="basic",
        authorizer_enabled=True,
        super_users="User:admin",
    )
    allow = [
        ("alice", ResourceType.TOPIC, "orders", Operation.WRITE),
        ("alice", ResourceType.TOPIC, "orders", Operation.READ),
        ("bob", ResourceType.TOPIC, "orders", Operation.READ),
        ("alice", ResourceType.CLUSTER, "kafka-cluster", Operation.ALTER_CONFIGS),
    ]
    acls = [
        AclBinding(rtype, name, PatternType.LITERAL, f"User:{user}", "*", op, Permission.ALLOW)
        for user, rtype, name, op in allow
    ]
    assert await within(made.running.broker.access.create(acls, "User:admin")) == [None] * 4
    try:
        yield made
    finally:
        await made.running.stop()


@pytest_twisted.ensureDeferred
async def test_basic_credentials_are_checked_against_scram_users(secured: Registry) -> None:
    status, body = await secured.call("GET", "/subjects")
    assert (status, body["error_code"]) == (401, 401)
    status, body = await secured.call("GET", "/subjects", headers=basic("alice", "wrong"))
    assert status == 401
    status, body = await secured.call("GET", "/subjects", headers=basic("nobody", "x"))
    assert status == 401
    assert await secured.call("GET", "/subjects", headers=ALICE) == (200, [])
    assert await secured.call("GET", "/subjects", headers=BOB) == (200, [])


@pytest_twisted.ensureDeferred
async def test_subject_acls_follow_the_topic(secured: Registry) -> None:
    status, body = await secured.call(
        "POST", "/subjects/orders-value/versions", {"schema": SCHEMA}, ALICE
    )
    assert status == 200
    # bob reads orders but may not write its subjects
    status, denied = await secured.call(
        "POST", "/subjects/orders-value/versions", {"schema": SCHEMA}, BOB
    )
    assert (status, denied["error_code"]) == (403, 40301)
    assert (await secured.call("GET", "/subjects/orders-value/versions", headers=BOB))[0] == 200
    assert (await secured.call("GET", f"/schemas/ids/{body['id']}", headers=BOB))[0] == 200
    # nobody may touch payments' subjects
    status, denied = await secured.call(
        "POST", "/subjects/payments-value/versions", {"schema": SCHEMA}, ALICE
    )
    assert status == 403
    # global config needs ALTER_CONFIGS on the cluster
    assert (await secured.call("PUT", "/config", {"compatibility": "FULL"}, BOB))[0] == 403
    assert (await secured.call("PUT", "/config", {"compatibility": "FULL"}, ALICE))[0] == 200


def test_basic_without_tls_off_loopback_is_refused(data_dir: Path) -> None:
    from twisted.internet import reactor

    from rustka.ops.tap import build_service

    config = Config().updated(
        {
            "data_dir": str(data_dir),
            "listen": ["tcp:0:interface=127.0.0.1"],
            "schema_registry_listen": "tcp:0",
            "schema_registry_authentication": "basic",
        }
    )
    with pytest.raises(ConfigError, match="ssl: endpoint or bound to loopback"):
        build_service(config, reactor)


def tls_client_round_trip(url: str, ca: str) -> tuple[int, list[str], str]:
    """confluent-kafka's client over HTTPS with Basic credentials, as an application."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    conf = {"url": url, "ssl.ca.location": ca, "basic.auth.user.info": "alice:alice-secret"}
    with SchemaRegistryClient(conf) as client:
        schema_id = client.register_schema("orders-value", Schema(SCHEMA, "AVRO"))
        subjects = client.get_subjects()
    wrong = dict(conf, **{"basic.auth.user.info": "alice:wrong"})
    with SchemaRegistryClient(wrong) as client:
        try:
            client.get_subjects()
            refusal = "accepted"
        except SchemaRegistryError as e:
            refusal = str(e.http_status_code)
    return schema_id, subjects, refusal


@pytest.mark.clients
# Twisted's ssl: endpoint still hands pyOpenSSL X509 objects over (as tests/test_tls.py says).
@pytest.mark.filterwarnings(
    "ignore:Passing pyOpenSSL X509 objects is deprecated:DeprecationWarning",
    "ignore:Passing pyOpenSSL PKey objects is deprecated:DeprecationWarning",
)
@pytest_twisted.ensureDeferred
async def test_basic_over_tls_with_confluent_kafkas_client(tmp_path: Path) -> None:
    from twisted.internet import threads

    from tests.test_tls import make_certificate

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    store = CredentialStore(data_dir / "credentials")
    store.upsert(
        "alice", "SCRAM-SHA-512", derive_credential(MECHANISMS["SCRAM-SHA-512"], "alice-secret")
    )
    key, cert = make_certificate(tmp_path / "tls")
    made = await start_registry(
        data_dir,
        schema_registry_listen=f"ssl:0:interface=0.0.0.0:privateKey={key}:certKey={cert}",
        schema_registry_authentication="basic",
    )
    try:
        url = f"https://127.0.0.1:{made.port}"
        schema_id, subjects, refusal = await within(
            threads.deferToThread(tls_client_round_trip, url, str(cert)), 60
        )
        assert (schema_id, subjects, refusal) == (1, ["orders-value"], "401")
    finally:
        await made.running.stop()
