"""What a listener requires, and each connection's authentication state.

Both front-ends hold one `ConnectionAuth` per connection and ask it, before every
request, whether the request may be served (`may_serve`); they drive it with the
client's SASL tokens (`start`, `step`; or `exchange`, `attempt` and `settle`
when a step must run off the reactor) or, on an mtls listener, with the peer
certificate's subject (`from_certificate`). The broker-wide `Authenticator`
holds what connections share: the credential store, the enabled mechanisms,
the statistics, the delay after a failure, the session lifetime, the subject
mapping, and where audit lines go. Nothing here knows a wire format; the clock
is passed in, so the rules are tested without a reactor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from rustka.security.credentials import CredentialStore
from rustka.security.mapping import MappingError, PrincipalMapper
from rustka.security.principal import ANONYMOUS, USER_TYPE, Principal
from rustka.security.sasl import (
    ALL_MECHANISMS,
    AuthenticationFailed,
    AuthStats,
    SaslServer,
    UnsupportedMechanism,
    new_server,
)

__all__ = [
    "NO_SECURITY",
    "Authenticator",
    "ConnectionAuth",
    "ListenerSecurity",
    "attempt",
]

NONE: Final = "none"
SASL: Final = "sasl"
MTLS: Final = "mtls"

Audit = Callable[[str, dict[str, Any]], None]
"""``audit(event, fields)``: one structured audit line."""


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """What one listener requires of its clients before serving them."""

    mode: str = NONE

    @property
    def required(self) -> bool:
        return self.mode != NONE


NO_SECURITY: Final = ListenerSecurity()


@dataclass
class Authenticator:
    """The broker-wide half of authentication, shared by every connection."""

    store: CredentialStore
    mechanisms: tuple[str, ...] = ALL_MECHANISMS
    failure_delay_s: float = 0.1
    session_lifetime_ms: int = 0
    mapper: PrincipalMapper = field(default_factory=lambda: PrincipalMapper("DEFAULT"))
    audit: Audit = lambda event, fields: None
    on_success: Callable[[str, Principal, str], None] = lambda mechanism, principal, peer: None
    """``(mechanism, principal, peer)`` of each login, for the broker's log."""
    stats: AuthStats = field(default_factory=AuthStats)
    clock: Callable[[], float] = time.monotonic

    def succeeded(self, mechanism: str, principal: Principal, peer: str) -> None:
        self.stats.succeeded(mechanism)
        self.on_success(mechanism, principal, peer)

    def failed(self, mechanism: str, user: str | None, peer: str, why: str) -> None:
        self.stats.failed(mechanism)
        self.audit(
            "authentication_failed",
            {"mechanism": mechanism, "user": user, "peer": peer, "reason": why},
        )


class ConnectionAuth:
    """One connection's authentication: who it is, and what it may send now."""

    def __init__(self, security: ListenerSecurity, authenticator: Authenticator | None) -> None:
        self.security = security
        self.authenticator = authenticator
        self.principal: Principal = ANONYMOUS
        self.mechanism: str | None = None
        self.authenticated = not security.required
        self.server: SaslServer | None = None
        self.expires_at: float | None = None

    @property
    def required(self) -> bool:
        return self.security.required

    def expired(self) -> bool:
        if self.expires_at is None or self.authenticator is None:
            return False
        return self.authenticator.clock() >= self.expires_at

    def may_serve(self) -> bool:
        """Whether a request other than the authentication ones may be served now."""
        return self.authenticated and not self.expired()

    # -- SASL ---------------------------------------------------------------------------

    def start(self, mechanism: str, peer: str) -> SaslServer:
        """Begin an exchange (a first one, or a re-authentication); UnsupportedMechanism if
        the listener does not take SASL or not this mechanism."""
        authn = self.authenticator
        if self.security.mode != SASL or authn is None:
            raise UnsupportedMechanism("this listener does not take SASL")
        try:
            self.server = new_server(mechanism, authn.mechanisms, authn.store.lookup)
        except UnsupportedMechanism as e:
            authn.failed("unsupported", None, peer, str(e))
            raise
        return self.server

    def step(self, token: bytes, peer: str) -> bytes:
        """The answer to the client's next token; AuthenticationFailed ends the exchange
        (and is counted and audited). Completion sets the principal.

        This is `exchange`, `attempt` and `settle` in one call; a front-end whose
        exchange is `SaslServer.costly` runs `attempt` on a thread between the other two.
        """
        server = self.exchange()
        return self.settle(server, attempt(server, token), peer)

    def exchange(self) -> SaslServer:
        """The exchange the client's next token goes to; AuthenticationFailed if none."""
        if self.server is None or self.authenticator is None:
            raise AuthenticationFailed("no SASL exchange is in progress: send a handshake first")
        return self.server

    def settle(self, server: SaslServer, outcome: bytes | AuthenticationFailed, peer: str) -> bytes:
        """Apply what ``server`` made of a token (`attempt`'s result): the answer to send,
        or AuthenticationFailed, counted and audited. An outcome for an exchange that is
        no longer this connection's (a second token came while the first was checked)
        is a failure, whatever it says."""
        authn = self.authenticator
        assert authn is not None
        if self.server is not server and not isinstance(outcome, AuthenticationFailed):
            outcome = AuthenticationFailed(
                "Authentication failed: another token arrived while this one was checked"
            )
        if isinstance(outcome, AuthenticationFailed):
            if self.server is server:
                self.server = None
            authn.failed(server.mechanism, _user_of(server), peer, str(outcome))
            raise outcome
        if server.complete:
            self.server = None
            assert server.user is not None
            principal = Principal(USER_TYPE, server.user)
            if self.mechanism is not None and principal != self.principal:
                why = "re-authentication must not change the principal"
                authn.failed(server.mechanism, server.user, peer, why)
                raise AuthenticationFailed(f"Authentication failed: {why}")
            self.principal = principal
            self.mechanism = server.mechanism
            self.authenticated = True
            lifetime = authn.session_lifetime_ms
            self.expires_at = authn.clock() + lifetime / 1000 if lifetime else None
            authn.succeeded(server.mechanism, principal, peer)
        return outcome

    @property
    def session_lifetime_ms(self) -> int:
        return self.authenticator.session_lifetime_ms if self.authenticator else 0

    # -- mutual TLS -----------------------------------------------------------------------

    def from_certificate(self, subject: str | None, peer: str) -> bool:
        """Take the principal from a verified client certificate's subject (RFC 2253)."""
        authn = self.authenticator
        if authn is None:
            return False
        if subject is None:
            authn.failed("mtls", None, peer, "no client certificate")
            return False
        try:
            name = authn.mapper.name(subject)
        except MappingError as e:
            authn.failed("mtls", subject, peer, str(e))
            return False
        self.principal = Principal(USER_TYPE, name)
        self.mechanism = "mtls"
        self.authenticated = True
        authn.succeeded("mtls", self.principal, peer)
        return True


def attempt(server: SaslServer, token: bytes) -> bytes | AuthenticationFailed:
    """``server``'s answer to ``token``, or the failure it raised, as a value.

    It touches only ``server`` and the credential store, so it may run on a thread;
    `ConnectionAuth.settle` applies its result on the connection's own.
    """
    try:
        return server.step(token)
    except AuthenticationFailed as e:
        return e


def _user_of(server: SaslServer) -> str | None:
    return server.user or server.claimed_user


def subject_of(transport: Any) -> str | None:
    """The verified peer certificate's subject, RFC 2253, of a TLS transport (or None)."""
    from rustka.security.mapping import rfc2253

    get = getattr(transport, "getPeerCertificate", None)
    if get is None:
        return None
    try:
        cert = get()
    except Exception:
        return None
    if cert is None:
        return None
    subject = cert.to_cryptography().subject
    components: Sequence[tuple[str, str]] = [
        (attribute.rfc4514_attribute_name, str(attribute.value))
        for rdn in subject.rdns
        for attribute in rdn
    ]
    return rfc2253(components)


def authenticator_from_config(
    config: Any,
    audit: Audit | None = None,
    on_success: Callable[[str, Principal, str], None] | None = None,
) -> Authenticator:
    """The broker's one Authenticator, from its settings (rustka.config.Config)."""
    from pathlib import Path

    from rustka.config import ConfigError
    from rustka.settings import split_list

    try:
        mapper = PrincipalMapper(config.ssl_principal_mapping_rules)
    except MappingError as e:
        raise ConfigError(f"ssl_principal_mapping_rules: {e}") from None
    path = config.credentials_file or str(Path(config.data_dir) / "credentials")
    return Authenticator(
        store=CredentialStore(path),
        mechanisms=tuple(split_list(config.sasl_enabled_mechanisms)),
        failure_delay_s=config.connection_failed_authentication_delay_ms / 1000,
        session_lifetime_ms=config.connections_max_reauth_ms,
        mapper=mapper,
        audit=audit or (lambda event, fields: None),
        on_success=on_success or (lambda mechanism, principal, peer: None),
    )
