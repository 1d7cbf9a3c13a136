"""Unmodified Kafka clients authenticating to a real rustka broker (issue 19 items 1, 2, 6).

kcat, confluent-kafka (librdkafka), kafka-python and aiokafka log in with
SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN over plain TCP (SASL_PLAINTEXT) and TLS
(SASL_SSL), and with a client certificate (SSL) on an mtls listener. What each
produced is read back from the broker's own log, and the connection's principal
from the broker's connections. Wrong passwords, unknown users, a mechanism the
broker does not enable, and a client that skips the handshake are refused.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, threads

from rustka.errors import BrokerUnavailable, RustkaError
from rustka.kafka.client import KafkaError, SaslLogin, connect_kafka
from rustka.kafka.errors import ErrorCode
from rustka.security.credentials import CredentialStore
from rustka.security.scram import MECHANISMS, derive_credential
from tests.conftest import RunningBroker, start_broker, within
from tests.kafka import real_clients as rc
from tests.kafka.stored import stored_batches
from tests.security.pki import make_pki

pytestmark = [
    pytest.mark.clients,
    pytest.mark.filterwarnings(
        "ignore:Passing pyOpenSSL X509 objects is deprecated:DeprecationWarning",
        "ignore:Passing pyOpenSSL PKey objects is deprecated:DeprecationWarning",
    ),
]

PASSWORD = "s3cret-alice"
SCRAM = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
ALL = [*SCRAM, "PLAIN"]
QUICK = {"socket.timeout.ms": 8000, "message.timeout.ms": 10000}


def in_thread(f: Any, *args: Any, **kwargs: Any) -> Any:
    return within(threads.deferToThread(f, *args, **kwargs), 90)


class Secured:
    """A broker with a SASL listener on TCP, and SASL and mtls listeners on TLS."""

    def __init__(self, running: RunningBroker, pki: dict[str, Path]) -> None:
        self.running = running
        self.pki = pki
        ports = [listener.port.getHost().port for listener in running.top.kafka_listeners]
        self.sasl_plaintext = running.address
        self.sasl_ssl = f"127.0.0.1:{ports[0]}"
        self.ssl = f"127.0.0.1:{ports[1]}"

    @property
    def authn(self) -> Any:
        return self.running.top.authenticator

    def principals(self) -> list[str]:
        factory = self.running.top.kafka_factory
        native = self.running.factory.connections
        return sorted(str(c.principal) for c in [*factory.connections, *native])


@pytest_twisted.async_yield_fixture
async def secured(tmp_path: Path) -> AsyncIterator[Secured]:
    data_dir = tmp_path / "data"
    store = CredentialStore(data_dir / "credentials")
    for name, mechanism in MECHANISMS.items():
        store.upsert("alice", name, derive_credential(mechanism, PASSWORD))
    pki = make_pki(tmp_path / "pki")
    tls = f"privateKey={pki['server_key']}:certKey={pki['server_cert']}"
    running = await start_broker(
        data_dir,
        listen_security="sasl",
        kafka_listen=[f"ssl:0:interface=127.0.0.1:{tls}", f"ssl:0:interface=127.0.0.1:{tls}"],
        kafka_listen_security="sasl,mtls",
        ssl_client_ca_file=str(pki["ca"]),
        ssl_principal_mapping_rules="RULE:^CN=([^,]*),O=rustka$/$1/L,DEFAULT",
        connection_failed_authentication_delay_ms=50,
    )
    for listener in running.top.kafka_listeners:
        await listener.listening
    try:
        yield Secured(running, pki)
    finally:
        await running.stop()


def sasl_conf(
    secured: Secured, protocol: str, mechanism: str, password: str = PASSWORD, user: str = "alice"
) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": secured.sasl_ssl if protocol == "SASL_SSL" else secured.sasl_plaintext,
        "security.protocol": protocol,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        **QUICK,
    }
    if protocol == "SASL_SSL":
        conf["ssl.ca.location"] = str(secured.pki["ca"])
    return conf


def confluent_roundtrip(conf: dict[str, Any], topic: str, values: list[bytes]) -> list[bytes]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer(conf)
    failures: list[str] = []
    for v in values:
        producer.produce(
            topic, value=v, partition=0, on_delivery=lambda e, m: e and failures.append(str(e))
        )
    left = producer.flush(30)
    if left or failures:
        raise AssertionError(f"{left} undelivered, {failures[:2]}")
    read_conf = {k: v for k, v in conf.items() if k != "message.timeout.ms"}
    consumer = Consumer({**read_conf, "group.id": "sasl-read", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        for _ in range(200):
            if len(out) >= len(values):
                break
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                out.append(msg.value())
        return out
    finally:
        consumer.close()


def confluent_error(conf: dict[str, Any]) -> str:
    """The errors librdkafka reports while it cannot log in (it keeps retrying)."""
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({**conf, "error_cb": lambda e: errors.append(str(e))})
    producer.produce("never", value=b"x")
    for _ in range(60):
        if errors:
            break
        producer.poll(0.1)
    producer.purge()
    producer.flush(1)
    return " | ".join(errors)


async def stored_values(secured: Secured, topic: str) -> list[bytes | None]:
    return [
        r.value for _, records in await stored_batches(secured.running, topic, 0) for r in records
    ]


# -- librdkafka: confluent-kafka and kcat ---------------------------------------------------


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", ALL)
@pytest_twisted.ensureDeferred
async def test_confluent_kafka_logs_in_produces_and_reads(
    secured: Secured, protocol: str, mechanism: str
) -> None:
    topic = f"c-{protocol}-{mechanism}".lower()
    values = [f"{mechanism}-{i}".encode() for i in range(5)]
    conf = sasl_conf(secured, protocol, mechanism)
    assert await in_thread(confluent_roundtrip, conf, topic, values) == values
    assert await stored_values(secured, topic) == values
    assert secured.authn.stats.successes.get(mechanism, 0) >= 1
    assert secured.authn.stats.failures == {}


@pytest.mark.parametrize("mechanism", ALL)
@pytest_twisted.ensureDeferred
async def test_kcat_logs_in_with_each_mechanism(secured: Secured, mechanism: str) -> None:
    auth = [
        "-X", "security.protocol=SASL_PLAINTEXT",
        "-X", f"sasl.mechanisms={mechanism}",
        "-X", "sasl.username=alice",
        "-X", f"sasl.password={PASSWORD}",
    ]  # fmt: skip
    topic = f"kcat-{mechanism}".lower()
    await in_thread(
        rc.kcat, "-b", secured.sasl_plaintext, *auth, "-P", "-t", topic, "-p", "0",
        stdin=b"one\ntwo\n",
    )  # fmt: skip
    read = await in_thread(
        rc.kcat, "-b", secured.sasl_plaintext, *auth, "-C", "-t", topic, "-p", "0",
        "-o", "beginning", "-e", "-J",
    )  # fmt: skip
    assert [json.loads(line)["payload"] for line in read.splitlines()] == ["one", "two"]
    assert await stored_values(secured, topic) == [b"one", b"two"]


@pytest_twisted.ensureDeferred
async def test_a_client_certificate_is_the_principal_on_the_mtls_listener(
    secured: Secured, log_watcher: Any
) -> None:
    """The subject O=rustka, CN=carol is CN=carol,O=rustka in RFC 2253, which the
    fixture's rule maps to "carol"; the broker logs each login with its principal."""
    conf = {
        "bootstrap.servers": secured.ssl,
        "security.protocol": "SSL",
        "ssl.ca.location": str(secured.pki["ca"]),
        "ssl.certificate.location": str(secured.pki["client_cert"]),
        "ssl.key.location": str(secured.pki["client_key"]),
        **QUICK,
    }
    delivered = await in_thread(
        rc.confluent_produce,
        secured.ssl,
        "mtls",
        [(None, b"carol")],
        **{k: v for k, v in conf.items() if k != "bootstrap.servers"},
    )
    assert delivered == [(0, 0)]
    line = await log_watcher.wait_for("authenticated as User:carol (mtls)")
    assert "127.0.0.1" in line
    assert secured.authn.stats.successes.get("mtls", 0) >= 1
    assert secured.authn.stats.failures == {}
    assert await stored_values(secured, "mtls") == [b"carol"]


@pytest_twisted.ensureDeferred
async def test_without_a_client_certificate_the_mtls_listener_refuses(secured: Secured) -> None:
    conf = {
        "bootstrap.servers": secured.ssl,
        "security.protocol": "SSL",
        "ssl.ca.location": str(secured.pki["ca"]),
        **QUICK,
    }
    error = await in_thread(confluent_error, conf)
    assert error, "librdkafka reported no failure"
    assert "mtls" not in secured.running.broker.topics


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [
        ("SCRAM-SHA-256", "alice", "wrong"),
        ("SCRAM-SHA-512", "alice", "wrong"),
        ("PLAIN", "alice", "wrong"),
        ("SCRAM-SHA-256", "mallory", PASSWORD),
    ],
)
@pytest_twisted.ensureDeferred
async def test_confluent_kafka_with_bad_credentials_gets_the_authentication_error(
    secured: Secured, mechanism: str, user: str, password: str
) -> None:
    conf = sasl_conf(secured, "SASL_PLAINTEXT", mechanism, password=password, user=user)
    error = await in_thread(confluent_error, conf)
    assert "Authentication failed" in error, error
    assert secured.authn.stats.failures.get(mechanism, 0) >= 1
    assert secured.authn.stats.successes == {}


# -- kafka-python and aiokafka ------------------------------------------------------------


def kafka_python_roundtrip(secured: Secured, mechanism: str, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    auth = {
        "bootstrap_servers": secured.sasl_plaintext,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "alice",
        "sasl_plain_password": PASSWORD,
    }
    producer = KafkaProducer(**auth)
    try:
        for i in range(3):
            producer.send(topic, value=f"kp-{i}".encode(), partition=0).get(timeout=30)
    finally:
        producer.close(5)
    consumer = KafkaConsumer(**auth, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        out: list[bytes] = []
        for _ in range(100):
            if len(out) >= 3:
                break
            for batch in consumer.poll(timeout_ms=200).values():
                out.extend(m.value for m in batch)
        return out
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", ALL)
@pytest_twisted.ensureDeferred
async def test_kafka_python_logs_in_with_each_mechanism(secured: Secured, mechanism: str) -> None:
    topic = f"kp-{mechanism}".lower()
    got = await in_thread(kafka_python_roundtrip, secured, mechanism, topic)
    assert got == [b"kp-0", b"kp-1", b"kp-2"]
    assert await stored_values(secured, topic) == got


def aiokafka_roundtrip(secured: Secured, mechanism: str, protocol: str, topic: str) -> list[bytes]:
    async def run() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
        from aiokafka.helpers import create_ssl_context

        auth: dict[str, Any] = {
            "bootstrap_servers": secured.sasl_ssl
            if protocol == "SASL_SSL"
            else secured.sasl_plaintext,
            "security_protocol": protocol,
            "sasl_mechanism": mechanism,
            "sasl_plain_username": "alice",
            "sasl_plain_password": PASSWORD,
        }
        if protocol == "SASL_SSL":
            auth["ssl_context"] = create_ssl_context(cafile=str(secured.pki["ca"]))
        producer = AIOKafkaProducer(**auth)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, f"ak-{i}".encode(), partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**auth, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            out: list[bytes] = []
            for _ in range(100):
                if len(out) >= 3:
                    break
                got = await consumer.getmany(tp, timeout_ms=200)
                out.extend(m.value for m in got.get(tp, []))
            return out
        finally:
            await consumer.stop()

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("mechanism", "protocol"),
    [("SCRAM-SHA-256", "SASL_PLAINTEXT"), ("SCRAM-SHA-512", "SASL_SSL"), ("PLAIN", "SASL_SSL")],
)
@pytest_twisted.ensureDeferred
async def test_aiokafka_logs_in(secured: Secured, mechanism: str, protocol: str) -> None:
    topic = f"ak-{mechanism}-{protocol}".lower()
    got = await in_thread(aiokafka_roundtrip, secured, mechanism, protocol, topic)
    assert got == [b"ak-0", b"ak-1", b"ak-2"]
    assert await stored_values(secured, topic) == got


def aiokafka_error(secured: Secured, **conf: Any) -> str:
    """What aiokafka's producer raises when it cannot start; it is stopped either way."""

    async def run() -> str:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(
            bootstrap_servers=secured.sasl_plaintext, request_timeout_ms=5000, **conf
        )
        try:
            await producer.start()
        except Exception as e:
            return f"{type(e).__name__}: {e}"
        finally:
            await producer.stop()
        return ""

    return asyncio.run(run())


@pytest_twisted.ensureDeferred
async def test_an_unsupported_mechanism_is_answered_with_the_enabled_list(
    secured: Secured,
) -> None:
    from twisted.internet import reactor

    conn = await within(defer.ensureDeferred(connect_kafka(reactor, secured.sasl_plaintext)))
    answer = await within(conn.request(17, {"mechanism": "GSSAPI"}, version=1))
    assert answer["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert answer["mechanisms"] == ALL
    await within(conn.closed)  # and then the broker hangs up, as Kafka does
    assert secured.authn.stats.failures == {"unsupported": 1}


@pytest_twisted.ensureDeferred
async def test_a_client_that_skips_the_handshake_is_closed_unserved(secured: Secured) -> None:
    """kcat configured for PLAINTEXT sends Metadata without a SASL handshake: the
    broker hangs up unserved, so kcat fails; so does a raw CreateTopics."""
    with pytest.raises(AssertionError, match="exited 1"):
        await in_thread(rc.kcat, "-b", secured.sasl_plaintext, "-L", "-m", "3")
    from twisted.internet import reactor

    conn = await within(defer.ensureDeferred(connect_kafka(reactor, secured.sasl_plaintext)))
    with pytest.raises(BrokerUnavailable, match="closed the connection"):
        await within(conn.request(19, {"topics": [{"name": "x", "num_partitions": 1,
                                                  "replication_factor": 1}]}))  # fmt: skip
    assert "x" not in secured.running.broker.topics
    assert secured.authn.stats.successes == {}


@pytest_twisted.ensureDeferred
async def test_aiokafka_with_a_wrong_password_fails(secured: Secured) -> None:
    error = await in_thread(
        aiokafka_error, secured, security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice", sasl_plain_password="no",
    )  # fmt: skip
    # aiokafka logs the broker's message and raises its bootstrap failure.
    assert "Unable to bootstrap" in error, error
    assert secured.authn.stats.failures.get("SCRAM-SHA-512", 0) >= 1
    assert secured.authn.stats.successes == {}


# -- the rustka Kafka client (rustka mirror), and re-authentication -----------------------


@pytest.mark.parametrize("mechanism", ALL)
@pytest_twisted.ensureDeferred
async def test_the_mirror_client_logs_in_and_checks_the_broker(
    secured: Secured, mechanism: str
) -> None:
    from twisted.internet import reactor

    login = SaslLogin("alice", PASSWORD, mechanism)
    conn = await within(
        defer.ensureDeferred(connect_kafka(reactor, secured.sasl_plaintext, sasl=login))
    )
    meta = await within(conn.request(3, {"topics": None}))
    assert meta["brokers"]
    assert "User:alice" in secured.principals()
    await conn.close()
    with pytest.raises(KafkaError, match="SASL_AUTHENTICATION_FAILED"):
        await within(
            defer.ensureDeferred(
                connect_kafka(
                    reactor, secured.sasl_plaintext, sasl=SaslLogin("alice", "x", mechanism)
                )
            )
        )


@pytest_twisted.ensureDeferred
async def test_a_session_lifetime_is_announced_and_re_authentication_keeps_the_connection(
    tmp_path: Path,
) -> None:
    """KIP-368: with connections_max_reauth_ms the client is told the lifetime, logs in
    again on the same connection and goes on; one that does not is closed after it."""
    from twisted.internet import reactor

    data_dir = tmp_path / "data"
    store = CredentialStore(data_dir / "credentials")
    store.upsert("alice", "SCRAM-SHA-256", derive_credential(MECHANISMS["SCRAM-SHA-256"], PASSWORD))
    running = await start_broker(data_dir, listen_security="sasl", connections_max_reauth_ms=1000)
    try:
        conn = await within(defer.ensureDeferred(connect_kafka(reactor, running.address)))
        lifetime = await within(
            defer.ensureDeferred(conn.authenticate("alice", PASSWORD, "SCRAM-SHA-256"))
        )
        assert lifetime == 1000
        assert (await within(conn.request(3, {"topics": []})))["brokers"]
        again = await within(
            defer.ensureDeferred(conn.authenticate("alice", PASSWORD, "SCRAM-SHA-256"))
        )
        assert again == 1000
        assert (await within(conn.request(3, {"topics": []})))["brokers"]
        [proto] = running.top.kafka_factory.connections
        proto.auth.expires_at = proto.auth.authenticator.clock() - 1  # the lifetime is over
        with pytest.raises(BrokerUnavailable):
            await within(conn.request(3, {"topics": []}))
        with pytest.raises(RustkaError):
            await within(
                defer.ensureDeferred(conn.authenticate("alice", PASSWORD, "SCRAM-SHA-256"))
            )
    finally:
        await running.stop()


def produce_until(address: str, done: Any) -> int:
    """Produce one record at a time on one producer until ``done()`` (bounded); the
    number of records delivered."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": address,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": PASSWORD,
            **QUICK,
        }
    )
    failures: list[str] = []
    for i in range(400):
        producer.produce(
            "reauth", value=f"r{i}".encode(), partition=0,
            on_delivery=lambda e, m: e and failures.append(str(e)),
        )  # fmt: skip
        if producer.flush(10) or failures:
            raise AssertionError(f"record {i} not delivered: {failures}")
        if done():
            return i + 1
        producer.poll(0.05)
    raise AssertionError("no connection logged in twice")


@pytest_twisted.ensureDeferred
async def test_librdkafka_re_authenticates_before_its_session_ends(
    tmp_path: Path, log_watcher: Any
) -> None:
    """KIP-368 with a real client: told a 1.5 s lifetime, librdkafka logs in again on
    a connection it keeps open (the same peer address logs in twice), and every record
    before and after is delivered."""
    data_dir = tmp_path / "data"
    store = CredentialStore(data_dir / "credentials")
    store.upsert("alice", "SCRAM-SHA-256", derive_credential(MECHANISMS["SCRAM-SHA-256"], PASSWORD))
    running = await start_broker(data_dir, listen_security="sasl", connections_max_reauth_ms=1500)

    def peers() -> list[str]:
        lines = log_watcher.messages("authenticated as User:alice")
        return [line.split(" authenticated as ")[0].split()[-1] for line in lines]

    def logged_in_twice() -> bool:
        seen = peers()
        return len(seen) != len(set(seen))

    try:
        delivered = await in_thread(produce_until, running.address, logged_in_twice)
        assert logged_in_twice(), peers()
        assert running.top.authenticator.stats.failures == {}
        stored = [r.value for _, rs in await stored_batches(running, "reauth", 0) for r in rs]
        assert stored == [f"r{i}".encode() for i in range(delivered)]
    finally:
        await running.stop()
