"""SASL servers for the mechanisms rustka offers, behind one small interface.

A front-end (the Kafka SaslHandshake/SaslAuthenticate APIs, the native
Authenticate ops) asks `new_server` for the mechanism the client named, feeds it
the client's tokens with ``step`` and, once ``complete``, takes its ``user``.
Any failure is `AuthenticationFailed`, whose message is what the client is told
and the log says; it never reveals whether the user exists.

PLAIN (RFC 4616) is checked against the same SCRAM credentials: the password is
derived with the stored salt and iteration count and compared, in constant time,
with the stored key, so the broker never keeps a password in any form it could
give back. That costs one PBKDF2 per login (4096 iterations by default, a few
milliseconds), so `PlainServer` is ``costly``: the front-ends run its step on a
thread, never on the reactor; SCRAM logins cost only HMACs and run inline.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

from rustka.security.scram import (
    MECHANISMS,
    ScramCredential,
    ScramError,
    ScramServer,
    salted_password,
)

__all__ = [
    "ALL_MECHANISMS",
    "AuthStats",
    "AuthenticationFailed",
    "PlainServer",
    "SaslServer",
    "UnsupportedMechanism",
    "new_server",
    "verify_password",
]

PLAIN: Final = "PLAIN"
ALL_MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512", PLAIN)
MAX_TOKEN_BYTES: Final = 8192
"""A SASL token longer than this is refused unread (none of these mechanisms needs 1KiB)."""

Lookup = Callable[[str, str], "ScramCredential | None"]


class AuthenticationFailed(Exception):
    """The client did not prove who it is; the message is safe to send it."""


class UnsupportedMechanism(Exception):
    """The client asked for a mechanism this listener does not offer."""


class SaslServer(Protocol):
    mechanism: str
    complete: bool
    user: str | None
    claimed_user: str | None
    costly: bool
    """Whether a step derives a key (milliseconds of CPU): run it off the reactor."""

    def step(self, token: bytes) -> bytes: ...


class _Scram:
    costly = False

    def __init__(self, mechanism: str, lookup: Lookup) -> None:
        self.mechanism = mechanism
        self._server = ScramServer(MECHANISMS[mechanism], lookup)
        self.complete = False
        self.user: str | None = None

    @property
    def claimed_user(self) -> str | None:
        return self._server.claimed_user

    def step(self, token: bytes) -> bytes:
        if len(token) > MAX_TOKEN_BYTES:
            raise AuthenticationFailed(
                f"Authentication failed: a {len(token)}-byte SASL token is too long"
            )
        try:
            answer = self._server.step(token)
        except ScramError as e:
            raise AuthenticationFailed(
                f"Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.mechanism}: {e}"
            ) from None
        if self._server.complete:
            self.complete = True
            self.user = self._server.user
        return answer


def verify_password(lookup: Lookup, user: str, password: str) -> bool:
    """Whether ``password`` is ``user``'s, by any SCRAM credential stored for them."""
    for name in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        credential = lookup(user, name)
        if credential is None:
            continue
        mechanism = MECHANISMS[name]
        salted = salted_password(mechanism, password, credential.salt, credential.iterations)
        stored = mechanism.digest(mechanism.hmac(salted, b"Client Key"))
        return hmac.compare_digest(stored, credential.stored_key)
    # Unknown: spend the same time, so the answer's delay does not tell.
    salted_password(MECHANISMS["SCRAM-SHA-256"], password, b"rustka-no-such-user", 4096)
    return False


class PlainServer:
    """PLAIN: one message, ``authzid NUL authcid NUL password``, and an empty answer."""

    mechanism = PLAIN
    costly = True

    def __init__(self, lookup: Lookup) -> None:
        self._lookup = lookup
        self.complete = False
        self.user: str | None = None
        self.claimed_user: str | None = None
        self._done = False

    def step(self, token: bytes) -> bytes:
        if self._done:
            raise AuthenticationFailed("Authentication failed: PLAIN takes one message")
        self._done = True
        if len(token) > MAX_TOKEN_BYTES:
            raise AuthenticationFailed("Authentication failed: the PLAIN message is too long")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed(
                "Invalid SASL/PLAIN response: expected 3 tokens separated by NUL"
            )
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        self.claimed_user = user or None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        if not verify_password(self._lookup, user, password):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.complete = True
        self.user = user
        return b""


def new_server(mechanism: str, enabled: tuple[str, ...], lookup: Lookup) -> SaslServer:
    """A server for ``mechanism`` if the listener enables it; UnsupportedMechanism if not."""
    if mechanism not in enabled:
        raise UnsupportedMechanism(
            f"Unsupported SASL mechanism {mechanism}; enabled: {', '.join(enabled)}"
        )
    if mechanism == PLAIN:
        return PlainServer(lookup)
    if mechanism in MECHANISMS:
        return _Scram(mechanism, lookup)
    raise UnsupportedMechanism(f"Unsupported SASL mechanism {mechanism}")


@dataclass
class AuthStats:
    """Authentication outcomes by mechanism, read by the metrics endpoint."""

    successes: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)

    def succeeded(self, mechanism: str) -> None:
        self.successes[mechanism] = self.successes.get(mechanism, 0) + 1

    def failed(self, mechanism: str) -> None:
        self.failures[mechanism] = self.failures.get(mechanism, 0) + 1
