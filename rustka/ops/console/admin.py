"""The console's admin actions and what guards them.

An action (create a topic, add partitions, delete a topic, reset a group's
offsets) is a POST that must pass, in order (docs/console.md, "Admin actions"):

1. the same-origin check: an ``Origin`` header, when the browser sends one, names
   this very host (``Host``), and ``Sec-Fetch-Site``, when sent, is same-origin;
2. the admin token (``Authorization: Bearer``), compared in constant time with
   the first line of ``console_token_file``; without that file there are no
   admin actions;
3. the session's CSRF token (``X-Console-CSRF``), an HMAC of the session
   cookie under a secret drawn at start, so a page on another site can neither
   read nor forge it;
4. with ``authorizer_enabled``, the ACLs: ``console_principal`` must be allowed
   the Kafka operation the action stands for (CREATE on the cluster or topic,
   ALTER and DELETE on the topic, READ on the group and topic).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import secrets
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from twisted.web import server

from rustka.config import ConfigError
from rustka.errors import GroupHasActiveMembers
from rustka.ops.console.api import ApiError
from rustka.ops.console.sessions import LOGIN_COOKIE, Session, SessionTable
from rustka.security.acl import Operation, ResourceType

SESSION_COOKIE = b"rustka_console"
CSRF_HEADER = b"x-console-csrf"
MAX_BODY = 64 * 1024
CLUSTER = "kafka-cluster"
MAX_NEW_PARTITIONS = 1000


def read_token(path: str | None) -> bytes | None:
    """The admin token from its file's first line; a missing or empty file is a
    config error at start, never a console that silently takes any token."""
    if path is None:
        return None
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"console_token_file: cannot read {path}: {e}") from None
    token = lines[0].strip() if lines else ""
    if len(token) < 16:
        raise ConfigError(f"console_token_file: {path} must hold a token of 16 characters or more")
    return token.encode("utf-8")


def _header(request: server.Request, name: bytes) -> str | None:
    value = request.getHeader(name)
    return value.decode("latin-1") if isinstance(value, bytes) else value


def host_name(host: str) -> str:
    """``Host``'s name without its port, lower-cased (``[::1]:80`` is ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Guard:
    """The checks every request (the Host) and every admin POST (the rest) passes."""

    def __init__(
        self,
        token: bytes | None,
        principal: str,
        access: Any,
        allowed_hosts: Iterable[str] = (),
        users: SessionTable | None = None,
        clock: Any = None,
    ) -> None:
        self.token = token
        self.principal = principal
        self.access = access
        self.users = users
        """The signed-in sessions with ``console_authentication = "users"``, else None."""
        self.clock = clock
        self._secret = secrets.token_bytes(32)
        self.allowed_hosts = {"localhost", socket.gethostname().lower()}
        self.allowed_hosts.update(h.strip().lower() for h in allowed_hosts if h.strip())

    def host_allowed(self, request: server.Request) -> bool:
        """DNS rebinding: a page of another site whose name now points here is still
        that other site to the browser, so it could read the API unless answers go
        only to the names this console is known by (an IP address, localhost, this
        machine's name, ``console_allowed_hosts``)."""
        name = host_name(_header(request, b"host") or "")
        if not name:
            return False
        if name in self.allowed_hosts or name.endswith(".localhost"):
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def csrf_for(self, session: bytes) -> str:
        return hmac.new(self._secret, session, hashlib.sha256).hexdigest()

    def signed_in(self, request: server.Request) -> Session | None:
        """The caller's sign-in (users mode), from its cookie."""
        if self.users is None:
            return None
        return self.users.find(request.getCookie(LOGIN_COOKIE), self.clock.seconds())

    def principal_of(self, request: server.Request) -> str:
        """Who a request acts as: the signed-in user, else ``console_principal``."""
        session = self.signed_in(request)
        return session.principal if session is not None else self.principal

    def viewer(self, request: server.Request) -> Any:
        """What a read may see: None when everything (no authorizer), else a question
        ``(operation, resource type, name, quiet) -> bool`` answered for the signed-in
        user (401 in users mode without a sign-in); ``quiet`` leaves a denial unlogged."""
        if self.users is not None and self.signed_in(request) is None:
            raise ApiError(401, "sign in first (POST /api/login)")
        if self.users is None or not self.access.enabled:
            return None
        host = getattr(request.getClientAddress(), "host", "127.0.0.1")
        gate = self.access.gate(self.principal_of(request), host)
        return lambda op, rtype, name, quiet: bool(gate.allows(op, rtype, name, quiet=quiet))

    def session(self, request: server.Request) -> dict[str, Any]:
        """The caller's session (a new cookie if it has none) and its CSRF token."""
        if self.users is not None:
            signed = self.signed_in(request)
            return {
                "authentication": "users",
                "user": signed.user if signed is not None else None,
                "csrf": signed.csrf if signed is not None else None,
                "admin": signed is not None,
                "authorization": bool(self.access.enabled),
                "principal": signed.principal if signed is not None else None,
            }
        session = request.getCookie(SESSION_COOKIE)
        if not session or len(session) > 64:
            session = secrets.token_urlsafe(24).encode("ascii")
            request.addCookie(SESSION_COOKIE, session, path=b"/", httpOnly=True, sameSite=b"strict")
        return {
            "authentication": "none",
            "csrf": self.csrf_for(session),
            "admin": self.token is not None,
            "authorization": bool(self.access.enabled),
            "principal": self.principal,
        }

    def check_origin(self, request: server.Request) -> None:
        host = _header(request, b"host")
        origin = _header(request, b"origin")
        if origin is not None and (
            host is None or origin not in (f"http://{host}", f"https://{host}")
        ):
            raise ApiError(403, "cross-origin request refused")
        site = _header(request, b"sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            raise ApiError(403, "cross-site request refused")

    def check(self, request: server.Request) -> None:
        self.check_origin(request)
        if self.users is not None:
            signed = self.signed_in(request)
            if signed is None:
                raise ApiError(401, "sign in first (POST /api/login)")
            sent = (_header(request, CSRF_HEADER) or "").encode("latin-1")
            if not hmac.compare_digest(sent, signed.csrf.encode("ascii")):
                raise ApiError(403, "missing or wrong CSRF token (GET /api/session first)")
            return
        if self.token is None:
            raise ApiError(403, "admin actions are off (no console_token_file)")
        given = _header(request, b"authorization") or ""
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            value.strip().encode("latin-1"), self.token
        ):
            raise ApiError(401, "a valid admin token is required (Authorization: Bearer)")
        session = request.getCookie(SESSION_COOKIE) or b""
        csrf = (_header(request, CSRF_HEADER) or "").encode("latin-1")
        if not session or not hmac.compare_digest(csrf, self.csrf_for(session).encode("ascii")):
            raise ApiError(403, "missing or wrong CSRF token (GET /api/session first)")

    def authorize(
        self, request: server.Request, operation: Operation, rtype: ResourceType, name: str
    ) -> bool:
        """Whether the ACLs allow the console principal (always, with authorization off)."""
        if not self.access.enabled:
            return True
        host = request.getClientAddress()
        gate = self.access.gate(self.principal_of(request), getattr(host, "host", "127.0.0.1"))
        return bool(gate.allows(operation, rtype, name))

    def require(
        self, request: server.Request, operation: Operation, rtype: ResourceType, name: str
    ) -> None:
        if not self.authorize(request, operation, rtype, name):
            raise ApiError(
                403,
                f"{self.principal_of(request)} is not allowed "
                f"{operation.name} on {rtype.name} {name!r}",
            )


def json_body(request: server.Request) -> dict[str, Any]:
    content = request.content
    assert content is not None
    content.seek(0)
    raw = content.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise ApiError(413, f"the body may be at most {MAX_BODY} bytes")
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise ApiError(400, "the body must be a JSON object") from None
    if not isinstance(value, dict):
        raise ApiError(400, "the body must be a JSON object")
    return value


def _whole(body: dict[str, Any], name: str, low: int, high: int) -> int:
    value = body.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ApiError(400, f"{name}: a whole number from {low} to {high}")
    return value


def _name(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise ApiError(400, f"{key}: a non-empty string")
    return value


class AdminApi:
    """The actions, each after `Guard.check` and its ACL question."""

    def __init__(self, broker: Any, guard: Guard) -> None:
        self.broker = broker
        self.guard = guard

    async def create_topic(self, request: server.Request) -> dict[str, Any]:
        body = json_body(request)
        name = _name(body, "name")
        partitions = _whole(body, "partitions", 1, MAX_NEW_PARTITIONS)
        configs = body.get("configs") or {}
        if not isinstance(configs, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in configs.items()
        ):
            raise ApiError(400, "configs: an object of string values")
        if not self.guard.authorize(request, Operation.CREATE, ResourceType.CLUSTER, CLUSTER):
            self.guard.require(request, Operation.CREATE, ResourceType.TOPIC, name)
        info = await self.broker.create_topic(name, partitions, configs)
        return {"created": info.name, "partitions": len(info.partitions)}

    async def add_partitions(self, request: server.Request, topic: str) -> dict[str, Any]:
        body = json_body(request)
        count = _whole(body, "partitions", 1, MAX_NEW_PARTITIONS)
        self.guard.require(request, Operation.ALTER, ResourceType.TOPIC, topic)
        current = len(self.broker.topic(topic).partitions)
        if count <= current:
            raise ApiError(400, f"partitions: more than the {current} the topic has")
        info = await self.broker.alter_topic(topic, count)
        return {"topic": topic, "partitions": len(info.partitions)}

    async def delete_topic(self, request: server.Request, topic: str) -> dict[str, Any]:
        body = json_body(request)
        if body.get("confirm") != topic:
            raise ApiError(400, "confirm: the topic's name, to delete it")
        self.guard.require(request, Operation.DELETE, ResourceType.TOPIC, topic)
        self.broker.topic(topic)
        await self.broker.delete_topic(topic)
        return {"deleted": topic}

    async def reset_offsets(self, request: server.Request, group: str) -> dict[str, Any]:
        """Kafka's ``kafka-consumer-groups --reset-offsets``: only for a group
        without live members, to the earliest, the latest or a given offset."""
        body = json_body(request)
        topic = _name(body, "topic")
        to = body.get("to")
        self.guard.require(request, Operation.READ, ResourceType.GROUP, group)
        self.guard.require(request, Operation.READ, ResourceType.TOPIC, topic)
        desc = self.broker.groups.describe(group)
        if desc.members:
            raise GroupHasActiveMembers(
                f"group {group!r} has {len(desc.members)} live members; stop them first"
            )
        count = len(self.broker.topic(topic).partitions)
        wanted = body.get("partitions")
        if wanted is None:
            partitions = list(range(count))
        elif isinstance(wanted, list) and all(
            isinstance(p, int) and not isinstance(p, bool) and 0 <= p < count for p in wanted
        ):
            partitions = sorted(set(wanted))
        else:
            raise ApiError(400, f"partitions: a list of partitions from 0 to {count - 1}")
        offsets: dict[tuple[str, int], int] = {}
        for partition in partitions:
            start, end = self.broker.bounds(topic, partition)
            if to == "earliest":
                offsets[(topic, partition)] = start
            elif to == "latest":
                offsets[(topic, partition)] = end
            elif isinstance(to, int) and not isinstance(to, bool):
                offsets[(topic, partition)] = min(max(to, start), end)
            else:
                raise ApiError(400, 'to: "earliest", "latest" or an offset')
        await self.broker.commit_offsets(group, offsets)
        return {
            "group": group,
            "offsets": [
                {"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())
            ],
        }
