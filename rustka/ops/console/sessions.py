"""Signing in to the console with a broker user (``console_authentication = "users"``).

A person signs in with a SCRAM user's name and password (docs/security.md,
"Users"); the console checks the password the way a SCRAM server checks a proof,
from the stored keys alone: SaltedPassword -> ClientKey -> StoredKey, compared in
constant time with the stored one. The password is never kept. A signed-in
person gets a random session id in an HttpOnly, SameSite=Strict cookie that
expires; every API call is then made as ``User:<name>`` (docs/console.md,
"Signing in").

`check_password` is pure CPU (PBKDF2) and `SessionTable` is pure state with the
clock passed in; the console runs the first on the I/O pool.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

from rustka.security.scram import MECHANISMS, MIN_ITERATIONS, Mechanism, salted_password

AUTHENTICATION_MODES: Final = ("none", "users")
LOGIN_COOKIE: Final = b"rustka_console_user"
SESSION_TTL_S: Final = 8 * 3600.0
"""How long a sign-in lasts; the cookie expires with it."""
MAX_SESSIONS: Final = 10_000
"""Sessions kept at once; past it the oldest are dropped (their people sign in again)."""
MAX_PASSWORD: Final = 1024

_DECOY_SALT: Final = secrets.token_bytes(32)


def stored_key(mechanism: Mechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """StoredKey of RFC 5802: H(HMAC(SaltedPassword, "Client Key"))."""
    salted = salted_password(mechanism, password, salt, iterations)
    return mechanism.digest(mechanism.hmac(salted, b"Client Key"))


def check_password(credentials: dict[str, Any], password: str) -> bool:
    """Whether ``password`` is the one behind any of a user's SCRAM credentials
    (mechanism name -> `ScramCredential`). A user without credentials costs the same
    PBKDF2 as one with, so the time taken does not tell which names exist."""
    if len(password) > MAX_PASSWORD:
        return False
    matched = False
    for name, credential in sorted(credentials.items()):
        mechanism = MECHANISMS.get(name)
        if mechanism is None:
            continue
        key = stored_key(mechanism, password, credential.salt, credential.iterations)
        matched |= hmac.compare_digest(key, credential.stored_key)
    if not credentials:
        stored_key(MECHANISMS["SCRAM-SHA-256"], password, _DECOY_SALT, MIN_ITERATIONS)
    return matched


@dataclass(frozen=True, slots=True)
class Session:
    """One signed-in person."""

    user: str
    expires_at: float
    csrf: str
    """Sent back with each admin action (X-Console-CSRF), as the cookie cannot be read."""

    @property
    def principal(self) -> str:
        return f"User:{self.user}"


class SessionTable:
    """The signed-in sessions by id; ids are 32 random bytes, looked up by their
    SHA-256 so the table holds nothing a cookie could be made from."""

    def __init__(self, ttl_s: float = SESSION_TTL_S, limit: int = MAX_SESSIONS) -> None:
        self.ttl_s = ttl_s
        self.limit = limit
        self._sessions: OrderedDict[bytes, Session] = OrderedDict()

    @staticmethod
    def _key(token: bytes) -> bytes:
        return hashlib.sha256(token).digest()

    def start(self, user: str, now: float) -> tuple[bytes, Session]:
        """A new session for ``user``: its cookie value and the session."""
        self.expire(now)
        while len(self._sessions) >= self.limit:
            self._sessions.popitem(last=False)
        token = secrets.token_urlsafe(32).encode("ascii")
        session = Session(user, now + self.ttl_s, secrets.token_urlsafe(24))
        self._sessions[self._key(token)] = session
        return token, session

    def find(self, token: bytes | None, now: float) -> Session | None:
        if not token or len(token) > 128:
            return None
        session = self._sessions.get(self._key(token))
        if session is None:
            return None
        if session.expires_at <= now:
            del self._sessions[self._key(token)]
            return None
        return session

    def end(self, token: bytes | None) -> None:
        if token:
            self._sessions.pop(self._key(token), None)

    def expire(self, now: float) -> None:
        for key in [k for k, s in self._sessions.items() if s.expires_at <= now]:
            del self._sessions[key]

    def __len__(self) -> int:
        return len(self._sessions)
