"""A connection's authentication state: what it may send, re-authentication, expiry."""

from __future__ import annotations

from pathlib import Path

import pytest

from rustka.security.credentials import CredentialStore
from rustka.security.mapping import PrincipalMapper
from rustka.security.principal import ANONYMOUS, Principal
from rustka.security.sasl import AuthenticationFailed, UnsupportedMechanism
from rustka.security.scram import MECHANISMS, ScramClient, derive_credential
from rustka.security.session import Authenticator, ConnectionAuth, ListenerSecurity

SHA256 = MECHANISMS["SCRAM-SHA-256"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def authn(tmp_path: Path) -> Authenticator:
    store = CredentialStore(tmp_path / "credentials")
    store.upsert("alice", "SCRAM-SHA-256", derive_credential(SHA256, "pw"))
    store.upsert("bob", "SCRAM-SHA-256", derive_credential(SHA256, "pw2"))
    events: list[tuple[str, dict[str, object]]] = []
    a = Authenticator(store, clock=Clock(), audit=lambda e, f: events.append((e, f)))
    a.events = events  # type: ignore[attr-defined]
    return a


def login(auth: ConnectionAuth, user: str, password: str) -> None:
    auth.start("SCRAM-SHA-256", "peer")
    client = ScramClient(SHA256, user, password)
    first = auth.step(client.first(), "peer")
    client.verify(auth.step(client.final(first), "peer"))


def test_a_listener_without_security_serves_anonymous_at_once(authn: Authenticator) -> None:
    auth = ConnectionAuth(ListenerSecurity(), authn)
    assert auth.may_serve() and auth.principal == ANONYMOUS
    with pytest.raises(UnsupportedMechanism):
        auth.start("PLAIN", "peer")


def test_nothing_is_served_before_authentication_then_the_principal_is_set(
    authn: Authenticator,
) -> None:
    auth = ConnectionAuth(ListenerSecurity("sasl"), authn)
    assert not auth.may_serve()
    login(auth, "alice", "pw")
    assert auth.may_serve() and auth.principal == Principal("User", "alice")
    assert str(auth.principal) == "User:alice"
    assert authn.stats.successes == {"SCRAM-SHA-256": 1}


def test_a_failure_is_counted_and_audited_with_the_claimed_user(authn: Authenticator) -> None:
    auth = ConnectionAuth(ListenerSecurity("sasl"), authn)
    with pytest.raises(AuthenticationFailed):
        login(auth, "alice", "wrong")
    assert not auth.may_serve() and auth.principal == ANONYMOUS
    assert authn.stats.failures == {"SCRAM-SHA-256": 1}
    event, fields = authn.events[-1]  # type: ignore[attr-defined]
    assert event == "authentication_failed" and fields["user"] == "alice"


def test_the_session_expires_and_re_authentication_renews_it(authn: Authenticator) -> None:
    authn.session_lifetime_ms = 10_000
    auth = ConnectionAuth(ListenerSecurity("sasl"), authn)
    login(auth, "alice", "pw")
    authn.clock.now += 9  # type: ignore[attr-defined]
    assert auth.may_serve()
    login(auth, "alice", "pw")
    authn.clock.now += 9  # type: ignore[attr-defined]
    assert auth.may_serve()
    authn.clock.now += 2  # type: ignore[attr-defined]
    assert not auth.may_serve()


def test_re_authentication_as_someone_else_fails(authn: Authenticator) -> None:
    auth = ConnectionAuth(ListenerSecurity("sasl"), authn)
    login(auth, "alice", "pw")
    with pytest.raises(AuthenticationFailed, match="change the principal"):
        login(auth, "bob", "pw2")
    assert auth.principal == Principal("User", "alice")


def test_a_certificate_subject_is_mapped_to_the_principal(authn: Authenticator) -> None:
    authn.mapper = PrincipalMapper("RULE:^CN=([^,]*).*$/$1/L")
    auth = ConnectionAuth(ListenerSecurity("mtls"), authn)
    assert auth.from_certificate("CN=Carol,O=x", "peer")
    assert auth.principal == Principal("User", "carol") and auth.may_serve()
    other = ConnectionAuth(ListenerSecurity("mtls"), authn)
    assert not other.from_certificate("O=x", "peer") and not other.may_serve()
    assert not other.from_certificate(None, "peer")
    assert authn.stats.failures == {"mtls": 2}


def test_a_plain_step_is_costly_and_can_be_settled_after_it_ran_elsewhere(
    authn: Authenticator,
) -> None:
    """`exchange`, `attempt`, `settle`: what a front-end does around a thread; the
    principal is set only by `settle`, on the connection's side."""
    from rustka.security.session import attempt

    auth = ConnectionAuth(ListenerSecurity("sasl"), authn)
    scram = auth.start("SCRAM-SHA-256", "peer")
    assert scram.costly is False
    auth.server = None
    server = auth.start("PLAIN", "peer")
    assert server.costly is True
    assert auth.exchange() is server
    outcome = attempt(server, b"\0alice\0pw")
    assert outcome == b"" and not auth.authenticated
    assert auth.settle(server, outcome, "peer") == b""
    assert auth.authenticated and auth.principal == Principal("User", "alice")
    with pytest.raises(AuthenticationFailed, match="no SASL exchange"):
        auth.exchange()
    failed = attempt(auth.start("PLAIN", "peer"), b"\0alice\0wrong")
    assert isinstance(failed, AuthenticationFailed)


def test_an_outcome_for_an_exchange_that_is_no_longer_current_fails(
    authn: Authenticator,
) -> None:
    """A second token arrived while the first was checked: even a correct password
    does not log the connection in."""
    from rustka.security.session import attempt

    auth = ConnectionAuth(ListenerSecurity("sasl"), authn)
    first = auth.start("PLAIN", "peer")
    outcome = attempt(first, b"\0alice\0pw")
    with pytest.raises(AuthenticationFailed):
        auth.step(b"\0alice\0pw", "peer")  # the same exchange's second message
    with pytest.raises(AuthenticationFailed, match="another token arrived"):
        auth.settle(first, outcome, "peer")
    assert not auth.authenticated and auth.principal == ANONYMOUS
    assert authn.stats.failures == {"PLAIN": 2} and authn.stats.successes == {}
