"""Who is asking the registry, and whether the broker's ACLs let them
(docs/schema-registry.md, "Authentication" and "Authorization").

HTTP Basic credentials are checked against the broker's own SCRAM users: the password
is salted and hashed as SCRAM does (SaltedPassword, ClientKey, StoredKey) and the
StoredKey compared in constant time with the stored one, so the registry keeps no
password of its own. A success is remembered (by a hash of the password, per stored
credential) so the key derivation runs once per user and password, not per request.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Any

from twisted.web import server

from rustka.schema_registry.model import RegistryError
from rustka.security.acl import Operation, ResourceType
from rustka.security.scram import MECHANISMS, salted_password

ANONYMOUS = "User:ANONYMOUS"
_REMEMBERED = 1024


def unauthorized(message: str) -> RegistryError:
    return RegistryError(401, 401, message)


def verify_password(credentials: dict[str, Any], password: str) -> bool:
    """Whether ``password`` is the one behind any of the user's SCRAM credentials."""
    ok = False
    for name, credential in credentials.items():
        mechanism = MECHANISMS.get(name)
        if mechanism is None:
            continue
        salted = salted_password(mechanism, password, credential.salt, credential.iterations)
        stored = mechanism.digest(mechanism.hmac(salted, b"Client Key"))
        ok = hmac.compare_digest(stored, credential.stored_key) or ok
    return ok


class Guard:
    """Authentication (when ``basic``) and, with the broker's authorizer on, ACLs."""

    def __init__(self, store: Any, access: Any, *, basic: bool) -> None:
        self.store = store
        self.access = access
        self.basic = basic
        self._remembered: dict[tuple[str, bytes], tuple[bytes, ...]] = {}

    @property
    def authorizing(self) -> bool:
        return bool(self.access is not None and self.access.enabled)

    def principal(self, request: server.Request) -> str:
        """``User:NAME`` of verified Basic credentials; without ``basic``, anonymous."""
        if not self.basic:
            return ANONYMOUS
        raw = request.getHeader(b"authorization") or b""
        header = raw.decode("latin-1") if isinstance(raw, bytes) else raw
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic" or not token:
            raise unauthorized("Unauthorized: HTTP Basic credentials are required")
        try:
            user, sep, password = (
                base64.b64decode(token.strip(), validate=True).decode().partition(":")
            )
        except (binascii.Error, UnicodeDecodeError):
            raise unauthorized("Unauthorized: malformed Basic credentials") from None
        if not sep or not user:
            raise unauthorized("Unauthorized: malformed Basic credentials")
        credentials = self.store.credentials_of(user)
        if not credentials:
            raise unauthorized("Unauthorized: wrong user name or password")
        stamp = tuple(c.stored_key for _, c in sorted(credentials.items()))
        key = (user, hashlib.sha256(password.encode()).digest())
        if self._remembered.get(key) != stamp:
            if not verify_password(credentials, password):
                raise unauthorized("Unauthorized: wrong user name or password")
            if len(self._remembered) >= _REMEMBERED:
                self._remembered.clear()
            self._remembered[key] = stamp
        return f"User:{user}"

    def allows(
        self,
        request: server.Request,
        principal: str | None,
        operation: Operation,
        rtype: ResourceType,
        name: str,
        quiet: bool = True,
    ) -> bool:
        if not self.authorizing:
            return True
        address = request.getClientAddress()
        gate = self.access.gate(principal or ANONYMOUS, getattr(address, "host", "127.0.0.1"))
        return bool(gate.allows(operation, rtype, name, quiet=quiet))

    def require(
        self,
        request: server.Request,
        principal: str | None,
        operation: Operation,
        rtype: ResourceType,
        name: str,
    ) -> None:
        if not self.allows(request, principal, operation, rtype, name, quiet=False):
            raise RegistryError(
                403,
                40301,
                f"User {principal or ANONYMOUS} is denied operation {operation.name} on "
                f"{rtype.name} {name!r}",
            )
