"""The native protocol's authentication (docs/protocol.md, 7.12), with the real client
library against a real broker on 127.0.0.1: SCRAM and PLAIN, what a connection may do
before it authenticates, wrong and unknown credentials, listeners that require nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer

from rustka.client.protocol import BrokerError, ConnectionClosed, connect
from rustka.errors import AuthenticationFailed, AuthenticationRequired
from rustka.security.credentials import CredentialStore
from rustka.security.principal import Principal
from rustka.security.scram import MECHANISMS, derive_credential
from tests.conftest import RunningBroker, start_broker, within

PASSWORD = "correct horse battery staple"


def add_user(data_dir: Path, user: str, password: str) -> None:
    store = CredentialStore(data_dir / "credentials")
    for name, mechanism in MECHANISMS.items():
        store.upsert(user, name, derive_credential(mechanism, password))


@pytest_twisted.async_yield_fixture
async def sasl_broker(data_dir: Path) -> Any:
    add_user(data_dir, "alice", PASSWORD)
    running = await start_broker(
        data_dir,
        listen_security="sasl",
        connection_failed_authentication_delay_ms=50,
    )
    try:
        yield running
    finally:
        await running.stop()


async def client(broker: RunningBroker, **auth: Any) -> Any:
    from twisted.internet import reactor

    return await within(defer.ensureDeferred(connect(reactor, broker.address, **auth)))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
@pytest_twisted.ensureDeferred
async def test_an_authenticated_client_is_served_as_its_user(
    sasl_broker: RunningBroker, mechanism: str
) -> None:
    c = await client(sasl_broker, user="alice", password=PASSWORD, mechanism=mechanism)
    await within(c.create_topic("orders", 1))
    assert await within(c.produce("orders", b"k", b"v")) == (0, 0)
    [connection] = sasl_broker.factory.connections
    assert connection.principal == Principal("User", "alice")
    assert sasl_broker.top.authenticator.stats.successes == {mechanism: 1}
    await c.close()


@pytest_twisted.ensureDeferred
async def test_a_produce_before_authenticating_is_refused_and_the_connection_closed(
    sasl_broker: RunningBroker,
) -> None:
    c = await client(sasl_broker)
    welcome = await within(c.hello())  # Hello is served before authentication
    assert 18 in welcome.ops and 19 in welcome.ops
    with pytest.raises(BrokerError, match="requires authentication"):
        await within(c.produce("orders", b"k", b"v"))
    with pytest.raises(ConnectionClosed):
        await within(c.metadata())
    assert not sasl_broker.broker.topics, "nothing was created"


@pytest_twisted.ensureDeferred
async def test_an_extension_op_before_authenticating_gets_failure_21(
    sasl_broker: RunningBroker,
) -> None:
    c = await client(sasl_broker)
    with pytest.raises(AuthenticationRequired, match="requires authentication"):
        await within(c.create_topic("orders", 1))
    assert not sasl_broker.broker.topics


@pytest.mark.parametrize(
    ("user", "password", "mechanism"),
    [
        ("alice", "wrong", "SCRAM-SHA-256"),
        ("alice", "wrong", "SCRAM-SHA-512"),
        ("alice", "wrong", "PLAIN"),
        ("mallory", PASSWORD, "SCRAM-SHA-256"),
        ("mallory", PASSWORD, "PLAIN"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_wrong_or_unknown_credentials_fail_and_close(
    sasl_broker: RunningBroker, user: str, password: str, mechanism: str
) -> None:
    with pytest.raises(AuthenticationFailed, match="Authentication failed"):
        await client(sasl_broker, user=user, password=password, mechanism=mechanism)
    assert sasl_broker.top.authenticator.stats.failures == {mechanism: 1}
    assert sasl_broker.top.authenticator.stats.successes == {}


@pytest_twisted.ensureDeferred
async def test_an_unsupported_mechanism_is_refused(data_dir: Path) -> None:
    add_user(data_dir, "alice", PASSWORD)
    running = await start_broker(
        data_dir, listen_security="sasl", sasl_enabled_mechanisms="SCRAM-SHA-512"
    )
    try:
        with pytest.raises(AuthenticationFailed, match="enabled: SCRAM-SHA-512"):
            await client(running, user="alice", password=PASSWORD, mechanism="SCRAM-SHA-256")
        c = await client(running, user="alice", password=PASSWORD, mechanism="SCRAM-SHA-512")
        await c.close()
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_user_added_while_the_broker_runs_can_log_in(sasl_broker: RunningBroker) -> None:
    with pytest.raises(AuthenticationFailed):
        await client(sasl_broker, user="bob", password="pw-bob")
    add_user(Path(sasl_broker.config.data_dir), "bob", "pw-bob")
    c = await client(sasl_broker, user="bob", password="pw-bob")
    await c.close()


@pytest_twisted.ensureDeferred
async def test_a_listener_without_security_needs_nothing_and_refuses_sasl(
    data_dir: Path,
) -> None:
    add_user(data_dir, "alice", PASSWORD)
    running = await start_broker(
        data_dir,
        listen=["tcp:0:interface=127.0.0.1", "tcp:0:interface=127.0.0.1"],
        listen_security="none,sasl",
    )
    try:
        c = await client(running)
        await within(c.create_topic("open", 1))
        [connection] = running.factory.connections
        assert str(connection.principal) == "User:ANONYMOUS"
        with pytest.raises(AuthenticationFailed, match="does not take SASL"):
            await within(c.authenticate("alice", PASSWORD))
        port = running.top.listeners[1].port.getHost().port
        from twisted.internet import reactor

        guarded = await within(defer.ensureDeferred(connect(reactor, f"127.0.0.1:{port}")))
        with pytest.raises(AuthenticationRequired):
            await within(guarded.create_topic("closed", 1))
        assert sorted(running.broker.topics) == ["open"]
    finally:
        await running.stop()


@pytest.mark.filterwarnings(
    "ignore:Passing pyOpenSSL X509 objects is deprecated:DeprecationWarning",
    "ignore:Passing pyOpenSSL PKey objects is deprecated:DeprecationWarning",
)
@pytest_twisted.ensureDeferred
async def test_a_client_certificate_names_the_native_principal(tmp_path: Path) -> None:
    """On an mtls listener the native client's certificate is its login: no SASL op,
    the subject mapped by the rule; without a certificate the handshake fails."""
    from tests.security.pki import make_pki

    pki = make_pki(tmp_path / "pki")
    roots = tmp_path / "roots"
    roots.mkdir()
    (roots / "ca.pem").write_bytes(pki["ca"].read_bytes())
    tls = f"privateKey={pki['server_key']}:certKey={pki['server_cert']}"
    running = await start_broker(
        tmp_path / "data",
        listen=[f"ssl:0:interface=127.0.0.1:{tls}"],
        listen_security="mtls",
        ssl_client_ca_file=str(pki["ca"]),
        ssl_principal_mapping_rules="RULE:^CN=([^,]*),O=rustka$/$1/",
    )
    from twisted.internet import reactor

    endpoint = f"tls:127.0.0.1:{running.port}:trustRoots={roots}"
    try:
        c = await within(
            defer.ensureDeferred(
                connect(
                    reactor,
                    f"{endpoint}:certificate={pki['client_cert']}:privateKey={pki['client_key']}",
                )
            )
        )
        await within(c.create_topic("certified", 1))
        [connection] = running.factory.connections
        assert connection.principal == Principal("User", "carol")
        await c.close()
        with pytest.raises((ConnectionClosed, AuthenticationRequired, BrokerError)):
            anonymous = await within(defer.ensureDeferred(connect(reactor, endpoint)))
            await within(anonymous.create_topic("uncertified", 1))
        assert list(running.broker.topics) == ["certified"]
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_the_authenticated_principal_is_what_the_acls_see(data_dir: Path) -> None:
    """With authorization on, a native client's SASL user is the principal its ACLs name:
    alice may write the topic, bob (also logged in) may not."""
    from rustka.errors import NotAuthorized
    from rustka.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType

    add_user(data_dir, "alice", PASSWORD)
    add_user(data_dir, "bob", PASSWORD)
    running = await start_broker(
        data_dir, listen_security="sasl", authorizer_enabled=True, super_users="User:root"
    )
    try:
        allow = [
            AclBinding(
                ResourceType.TOPIC,
                "orders",
                PatternType.LITERAL,
                "User:alice",
                "*",
                op,
                Permission.ALLOW,
            )
            for op in (Operation.CREATE, Operation.WRITE, Operation.DESCRIBE)
        ]
        await within(running.broker.access.create(allow, "User:root"))
        alice = await client(running, user="alice", password=PASSWORD)
        await within(alice.create_topic("orders", 1))
        assert await within(alice.produce("orders", b"k", b"v")) == (0, 0)
        bob = await client(running, user="bob", password=PASSWORD)
        with pytest.raises(NotAuthorized, match=r"User:bob|not authorized"):
            await within(bob.create_topic("orders2", 1))
        principals = sorted(str(c.principal) for c in running.factory.connections)
        assert principals == ["User:alice", "User:bob"]
        await alice.close()
        await bob.close()
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_the_client_logs_in_again_before_its_session_ends(data_dir: Path) -> None:
    """With connections_max_reauth_ms the library re-authenticates at 85% of the
    lifetime on the same connection (its clock is a fake one here, advanced by hand),
    and goes on being served; without it, the broker would close the connection."""
    from twisted.internet import reactor, task
    from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

    from rustka.client.protocol import RustkaClientProtocol

    add_user(data_dir, "alice", PASSWORD)
    running = await start_broker(data_dir, listen_security="sasl", connections_max_reauth_ms=60_000)
    clock = task.Clock()
    try:
        proto = RustkaClientProtocol(clock)
        await within(connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", running.port), proto))
        assert await within(proto.authenticate("alice", PASSWORD)) == 60_000
        [due] = clock.getDelayedCalls()
        assert due.getTime() == pytest.approx(51.0)
        clock.advance(51)
        assert proto.reauthentication is not None
        assert await within(proto.reauthentication) == 60_000
        assert proto.logins == 2
        assert running.top.authenticator.stats.successes == {"SCRAM-SHA-256": 2}
        assert await within(proto.metadata()) == []
        await proto.close()
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_plain_login_is_checked_off_the_reactor(data_dir: Path) -> None:
    """A PLAIN login against a 1,000,000-iteration credential (~0.3 s of PBKDF2) runs on
    a thread: its connection reads nothing meanwhile, another client logs in and is
    served, then the slow login completes as its user."""
    from tests.conftest import reactor_turns

    add_user(data_dir, "alice", PASSWORD)
    CredentialStore(data_dir / "credentials").upsert(
        "slow",
        "SCRAM-SHA-256",
        derive_credential(MECHANISMS["SCRAM-SHA-256"], "pw", iterations=1_000_000),
    )
    running = await start_broker(data_dir, listen_security="sasl")
    try:
        slow = defer.ensureDeferred(client(running, user="slow", password="pw", mechanism="PLAIN"))
        await reactor_turns(
            lambda: any("authenticating" in c.reading_paused for c in running.factory.connections)
        )
        other = await client(running, user="alice", password=PASSWORD, mechanism="SCRAM-SHA-256")
        await within(other.create_topic("t", 1))
        assert await within(other.produce("t", b"k", b"v")) == (0, 0)
        assert not slow.called, "the PLAIN check held the reactor"
        c = await within(slow)
        assert await within(c.produce("t", b"k", b"w")) == (0, 1)
        principals = {conn.principal for conn in running.factory.connections}
        assert principals == {Principal("User", "alice"), Principal("User", "slow")}
        await within(c.close())
        await within(other.close())
    finally:
        await running.stop()
