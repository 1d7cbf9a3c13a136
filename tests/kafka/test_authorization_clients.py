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

import pytest
import pytest_twisted
from twisted.internet import threads

from rustka.security.acl import (
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from rustka.security.acl_store import ACL_FILE, AclFileError, load_acls, save_acls
from tests.conftest import RunningBroker, start_broker, within

pytestmark = pytest.mark.clients

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


# -- with SASL principals -------------------------------------------------------------------


def add_users(data_dir: Path, passwords: dict[str, str]) -> None:
    from rustka.security.credentials import CredentialStore
    from rustka.security.scram import MECHANISMS, derive_credential

    data_dir.mkdir(parents=True, exist_ok=True)
    store = CredentialStore(data_dir / "credentials")
    for user, password in passwords.items():
        for name, mechanism in MECHANISMS.items():
            store.upsert(user, name, derive_credential(mechanism, password))


USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


def sasl(user: str, mechanism: str = "SCRAM-SHA-256") -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def alice_and_bob(bootstrap: str) -> dict[str, Any]:
    """alice may write orders (and so describe it), bob may read it in group bob-group
    only; what each client sees, with confluent-kafka and kafka-python."""
    from confluent_kafka import Consumer, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    seen: dict[str, Any] = {}
    admin = AdminClient({"bootstrap.servers": bootstrap, **sasl("admin")})
    for f in admin.create_topics([NewTopic("orders", 1, 1), NewTopic("secret", 1, 1)]).values():
        f.result(30)

    errors: list[str | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, **sasl("alice")})
    for topic in ("orders", "secret"):
        producer.produce(topic, b"v", on_delivery=lambda e, m: errors.append(e and e.name()))
    producer.flush(30)
    seen["alice_produce"] = sorted(str(e) for e in errors)
    alice_admin = AdminClient({"bootstrap.servers": bootstrap, **sasl("alice")})
    seen["alice_topics"] = sorted(alice_admin.list_topics(timeout=30).topics)

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bob-group",
            "auto.offset.reset": "earliest",
            **sasl("alice"),
        }
    )
    consumer.subscribe(["orders"])
    try:
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is not None:
                seen["alice_read"] = msg.error().name() if msg.error() else "read"
                break
    except KafkaException as e:
        seen["alice_read"] = e.args[0].name()
    finally:
        consumer.close()

    bob = KafkaConsumer(
        "orders",
        bootstrap_servers=bootstrap,
        group_id="bob-group",
        auto_offset_reset="earliest",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="bob",
        sasl_plain_password=USERS["bob"],
        consumer_timeout_ms=15000,
    )
    try:
        seen["bob_read"] = [m.value for m in bob][:1]
        bob.commit()
    finally:
        bob.close()
    other = KafkaConsumer(
        "orders",
        bootstrap_servers=bootstrap,
        group_id="other-group",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="bob",
        sasl_plain_password=USERS["bob"],
        consumer_timeout_ms=10000,
    )
    try:
        list(other)
        seen["bob_other_group"] = "read"
    except GroupAuthorizationFailedError:
        seen["bob_other_group"] = "GROUP_AUTHORIZATION_FAILED"
    finally:
        other.close()
    return seen


@pytest_twisted.ensureDeferred
async def test_users_see_what_their_acls_allow(data_dir: Path) -> None:
    add_users(data_dir, USERS)
    running = await start_with_acls(
        data_dir,
        [
            acl(T, "orders", Operation.WRITE, principal="User:alice"),
            acl(T, "orders", Operation.READ, principal="User:bob"),
            acl(G, "bob-group", Operation.READ, principal="User:bob"),
        ],
        listen_security="sasl",
        super_users="User:admin",
    )
    try:
        seen = await in_thread(alice_and_bob, running.address)
    finally:
        await running.stop()
    assert seen["alice_produce"] == ["None", "TOPIC_AUTHORIZATION_FAILED"]
    assert seen["alice_topics"] == ["orders"]
    # alice's WRITE does not let her read, even in a group she may not use either.
    assert seen["alice_read"] in ("TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED")
    assert seen["bob_read"] == [b"v"]
    assert seen["bob_other_group"] == "GROUP_AUTHORIZATION_FAILED"
    denials = running.top.broker.access.denials
    assert denials["DESCRIBE"] >= 1, denials  # alice asked for "secret"


def manage_acls(bootstrap: str) -> dict[str, Any]:
    """The admin's ACL round trip with confluent-kafka's and kafka-python's admin clients."""
    from confluent_kafka.admin import (
        AclBinding as CkBinding,
    )
    from confluent_kafka.admin import (
        AclBindingFilter as CkFilter,
    )
    from confluent_kafka.admin import (
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
    )
    from confluent_kafka.admin import (
        ResourceType as CkType,
    )
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
    )
    from kafka.admin import ResourceType as KpType

    seen: dict[str, Any] = {}
    admin = AdminClient({"bootstrap.servers": bootstrap, **sasl("admin")})
    bindings = [
        CkBinding(
            CkType.TOPIC,
            "app-",
            ResourcePatternType.PREFIXED,
            "User:alice",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        ),
        CkBinding(
            CkType.GROUP,
            "g1",
            ResourcePatternType.LITERAL,
            "User:bob",
            "*",
            AclOperation.READ,
            AclPermissionType.DENY,
        ),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(30)
    everything = CkFilter(
        CkType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    seen["ck_described"] = sorted(
        (
            b.restype.name,
            b.name,
            b.resource_pattern_type.name,
            b.principal,
            b.operation.name,
            b.permission_type.name,
        )
        for b in admin.describe_acls(everything).result(30)
    )
    kp = KafkaAdminClient(
        bootstrap_servers=bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="admin",
        sasl_plain_password=USERS["admin"],
    )
    try:
        kp.create_acls(
            [
                ACL(
                    "User:carol",
                    "*",
                    ACLOperation.WRITE,
                    ACLPermissionType.ALLOW,
                    ResourcePattern(KpType.TOPIC, "logs"),
                )
            ]
        )
        found, _error = kp.describe_acls(
            ACLFilter(
                None,
                None,
                ACLOperation.ANY,
                ACLPermissionType.ANY,
                ResourcePattern(KpType.TOPIC, "logs", ACLResourcePatternType.LITERAL),
            )
        )
        seen["kp_described"] = [(a.principal, a.operation.name) for a in found]
    finally:
        kp.close()
    deleted = admin.delete_acls(
        [
            CkFilter(
                CkType.GROUP,
                None,
                ResourcePatternType.ANY,
                None,
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
        ]
    )
    seen["ck_deleted"] = [[(b.name, b.principal) for b in f.result(30)] for f in deleted.values()]
    return seen


@pytest_twisted.ensureDeferred
async def test_admin_clients_manage_acls_and_they_survive_a_restart(data_dir: Path) -> None:
    add_users(data_dir, USERS)
    running = await start_with_acls(data_dir, [], listen_security="sasl", super_users="User:admin")
    try:
        seen = await in_thread(manage_acls, running.address)
    finally:
        await running.stop()
    assert seen["ck_described"] == [
        ("GROUP", "g1", "LITERAL", "User:bob", "READ", "DENY"),
        ("TOPIC", "app-", "PREFIXED", "User:alice", "READ", "ALLOW"),
    ]
    assert seen["kp_described"] == [("User:carol", "WRITE")]
    assert seen["ck_deleted"] == [[("g1", "User:bob")]]
    stored = load_acls(data_dir / ACL_FILE)
    assert stored == {
        acl(T, "app-", Operation.READ, pattern=PRE, principal="User:alice"),
        acl(T, "logs", Operation.WRITE, principal="User:carol"),
    }
    again = await start_broker(data_dir, authorizer_enabled=True, listen_security="sasl")
    try:
        assert again.top.broker.access.describe(AclBindingFilter()) == sorted(stored)
    finally:
        await again.stop()


@pytest_twisted.ensureDeferred
async def test_a_damaged_acl_file_stops_the_start(data_dir: Path) -> None:
    data_dir.mkdir(parents=True)
    save_acls(data_dir / ACL_FILE, [acl(T, "orders", Operation.READ)])
    path = data_dir / ACL_FILE
    path.write_bytes(path.read_bytes().replace(b"orders", b"ordexs"))
    with pytest.raises(AclFileError, match="checksum"):
        await start_broker(data_dir, authorizer_enabled=True)
