"""The web console: pages and a JSON API served by the broker (docs/console.md).

`console_service` builds its listener (the ``console_listen`` setting) and the
rate sampler behind the charts. The pages are static files shipped in the
package (``static/``), read once at start; nothing is built or fetched at run
time. Everything a page shows comes from the JSON API under ``/api/``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from twisted.application import service
from twisted.internet import task
from twisted.web import resource, server

from rustka.http_bodies import bounded_request
from rustka.ops.console.admin import MAX_BODY, AdminApi, Guard, json_body, read_token
from rustka.ops.console.api import (
    ApiError,
    ReadApi,
    path_segments,
    query,
    respond,
    security_headers,
    send_json,
    start_tail,
)
from rustka.ops.console.rates import DEFAULT_INTERVAL_S, RateSampler
from rustka.ops.console.records import ValueDecoder
from rustka.ops.console.sessions import LOGIN_COOKIE, SessionTable, check_password
from rustka.ops.listeners import Listener
from rustka.security.acl import Operation, ResourceType
from rustka.security.credentials import CredentialStore, check_user_name
from rustka.settings import split_list

MAX_SIGN_INS = 4
"""Sign-ins checked at once (each a PBKDF2 on the broker's I/O pool)."""

ClientMetrics = Callable[[], dict[str, Any]]
"""Client telemetry (KIP-714) as the Clients page shows it (docs/console.md)."""

_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
}
CONTENT_SECURITY_POLICY = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""No inline script or style at all: even markup slipped into the page would not run."""


def static_files() -> dict[str, tuple[bytes, bytes]]:
    """Each shipped asset's name, content type and bytes."""
    files: dict[str, tuple[bytes, bytes]] = {}
    for entry in resources.files(__package__).joinpath("static").iterdir():
        suffix = entry.name[entry.name.rfind(".") :]
        if entry.is_file() and suffix in _TYPES:
            files[entry.name] = (_TYPES[suffix], entry.read_bytes())
    return files


async def _raise(error: ApiError) -> None:
    raise error


class ConsoleResource(resource.Resource):
    """Routes every path: ``/`` and ``/static/NAME`` to the pages, ``/api/...`` to the API."""

    isLeaf = True

    def __init__(
        self,
        api: ReadApi,
        admin: AdminApi,
        guard: Guard,
        client_metrics: ClientMetrics | None = None,
        credentials: CredentialStore | None = None,
        failure_delay_s: float = 0.0,
    ) -> None:
        super().__init__()
        self.api = api
        self.admin = admin
        self.guard = guard
        self.client_metrics = client_metrics
        self.credentials = credentials
        """The broker's SCRAM users, with ``console_authentication = "users"``."""
        self.failure_delay_s = failure_delay_s
        """A refused sign-in answers this late, so guessing passwords is slow."""
        self.checking = 0
        """Password checks on the pool now: each is a PBKDF2, and the pool is the
        broker's, so at most `MAX_SIGN_INS` at once."""
        self.files = static_files()

    def _file(self, request: server.Request, name: str) -> bytes:
        found = self.files.get(name)
        security_headers(request)
        if found is None:
            request.setResponseCode(404)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return b"not found\n"
        content_type, body = found
        request.setHeader(b"content-type", content_type)
        request.setHeader(b"content-security-policy", CONTENT_SECURITY_POLICY)
        return body

    def render(self, request: server.Request) -> Any:
        if not self.guard.host_allowed(request):
            request.setResponseCode(421)
            security_headers(request)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return b"unknown Host: add it to console_allowed_hosts\n"
        return super().render(request)

    def render_GET(self, request: server.Request) -> Any:
        parts = path_segments(request)
        if not parts:
            return self._file(request, "index.html")
        if parts[0] == "static" and len(parts) == 2:
            return self._file(request, parts[1])
        if parts[0] != "api":
            return self._file(request, "")
        route = parts[1:]
        api = self.api
        if route == ["session"]:
            return respond(request, _value, self.guard.session(request))
        try:
            may = _Viewer(self.guard.viewer(request))
        except ApiError as e:
            return respond(request, _raise, e)
        match route:
            case ["overview"]:
                return respond(request, api.overview)
            case ["topics"]:
                return respond(request, _visible, api.topics(), "topics", "name", may.listed_topic)
            case ["topics", topic]:
                return respond(request, may.then, api.topic, topic, Operation.DESCRIBE, topic)
            case ["topics", topic, "partitions", number, "messages"]:
                return respond(
                    request,
                    may.then,
                    _messages,
                    (api, topic, number, query(request)),
                    Operation.READ,
                    topic,
                )
            case ["topics", topic, "partitions", number, "tail"]:
                partition = _partition(number)
                if partition is None:
                    send_json(request, 400, {"error": "partition: a whole number"})
                    return server.NOT_DONE_YET
                if not may.topic(topic, Operation.READ):
                    send_json(request, 403, {"error": may.refusal(Operation.READ, topic)})
                    return server.NOT_DONE_YET
                return start_tail(api, request, topic, partition)
            case ["groups"]:
                return respond(request, _visible, api.groups(), "groups", "group", may.listed_group)
            case ["groups", group]:
                if not may.group(group):
                    return respond(
                        request, _raise, ApiError(403, may.refusal(Operation.DESCRIBE, group))
                    )
                return respond(request, api.group, group)
            case ["clients"]:
                return respond(request, _clients, self.client_metrics, may)
        return respond(request, _raise, ApiError(404, "no such API path"))

    def render_POST(self, request: server.Request) -> Any:
        route = path_segments(request)
        if route in (["api", "login"], ["api", "logout"]) and self.guard.users is not None:
            try:
                self.guard.check_origin(request)
            except ApiError as e:
                return respond(request, _raise, e)
            if route[1] == "logout":
                return respond(request, _value, self._sign_out(request))
            return respond(request, self._sign_in, request)
        try:
            self.guard.check(request)
        except ApiError as e:
            return respond(request, _raise, e)
        admin = self.admin
        match route:
            case ["api", "admin", "topics"]:
                return respond(request, admin.create_topic, request)
            case ["api", "admin", "topics", topic, "partitions"]:
                return respond(request, admin.add_partitions, request, topic)
            case ["api", "admin", "topics", topic, "delete"]:
                return respond(request, admin.delete_topic, request, topic)
            case ["api", "admin", "groups", group, "reset-offsets"]:
                return respond(request, admin.reset_offsets, request, group)
        return respond(request, _raise, ApiError(404, "no such admin action"))

    async def _sign_in(self, request: server.Request) -> dict[str, Any]:
        """Check the user's password against its SCRAM keys on the pool (PBKDF2 is
        CPU work, the credential file is read there), then start a session."""
        users, store = self.guard.users, self.credentials
        assert users is not None and store is not None
        body = json_body(request)
        user, password = body.get("user"), body.get("password")
        if not isinstance(user, str) or not isinstance(password, str):
            raise ApiError(400, "user and password: strings")
        if self.checking >= MAX_SIGN_INS:
            raise ApiError(429, "too many sign-ins at once; try again")
        self.checking += 1
        try:
            good = check_user_name(user) is None and await self.api.broker.io.run(
                _password_matches, store, user, password
            )
        finally:
            self.checking -= 1
        if not good:
            await task.deferLater(self.guard.clock, self.failure_delay_s, lambda: None)
            raise ApiError(401, "wrong user name or password")
        token, session = users.start(user, self.guard.clock.seconds())
        request.addCookie(
            LOGIN_COOKIE,
            token,
            path=b"/",
            max_age=str(int(users.ttl_s)).encode(),
            httpOnly=True,
            sameSite=b"strict",
            secure=request.isSecure(),
        )
        return {"user": user, "csrf": session.csrf, "principal": session.principal}

    def _sign_out(self, request: server.Request) -> dict[str, Any]:
        assert self.guard.users is not None
        self.guard.users.end(request.getCookie(LOGIN_COOKIE))
        request.addCookie(
            LOGIN_COOKIE,
            b"",
            path=b"/",
            max_age=b"0",
            httpOnly=True,
            sameSite=b"strict",
            secure=request.isSecure(),
        )
        return {"signed_out": True}


def _password_matches(store: CredentialStore, user: str, password: str) -> bool:
    return check_password(store.credentials_of(user), password)


class _Viewer:
    """The read questions of one request: everything is visible unless ``ask`` (a
    signed-in user's ACL gate, `Guard.viewer`) says otherwise."""

    def __init__(self, ask: Callable[[Operation, ResourceType, str, bool], bool] | None) -> None:
        self.ask = ask

    def topic(self, name: str, operation: Operation = Operation.DESCRIBE) -> bool:
        return self.ask is None or self.ask(operation, ResourceType.TOPIC, name, False)

    def listed_topic(self, name: str) -> bool:
        """Listings leave out what may not be seen without logging each as a denial."""
        return self.ask is None or self.ask(Operation.DESCRIBE, ResourceType.TOPIC, name, True)

    def group(self, name: str) -> bool:
        return self.ask is None or self.ask(Operation.DESCRIBE, ResourceType.GROUP, name, False)

    def listed_group(self, name: str) -> bool:
        return self.ask is None or self.ask(Operation.DESCRIBE, ResourceType.GROUP, name, True)

    def cluster(self) -> bool:
        return self.ask is None or self.ask(
            Operation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster", False
        )

    @staticmethod
    def refusal(operation: Operation, name: str) -> str:
        return f"not allowed {operation.name} on {name!r}"

    async def then(self, handler: Any, args: Any, operation: Operation, topic: str) -> Any:
        """Run ``handler`` if the user may ``operation`` the topic (403 if not)."""
        if not self.topic(topic, operation):
            raise ApiError(403, self.refusal(operation, topic))
        return await handler(*(args if isinstance(args, tuple) else (args,)))


async def _visible(
    answer: Any, rows_key: str, name_key: str, allowed: Callable[[str], bool]
) -> dict[str, Any]:
    """A listing without the rows the signed-in user may not DESCRIBE."""
    body = await answer
    body[rows_key] = [row for row in body[rows_key] if allowed(row[name_key])]
    return dict(body)


async def _clients(source: ClientMetrics | None, may: _Viewer) -> dict[str, Any]:
    """Client telemetry (KIP-714) for the Clients page; DESCRIBE on the cluster when
    reads are authorized, as the clients' principals and addresses are in it."""
    if source is None:
        raise ApiError(404, "client telemetry is off")
    if not may.cluster():
        raise ApiError(403, may.refusal(Operation.DESCRIBE, "kafka-cluster"))
    return dict(source())


def _partition(text: str) -> int | None:
    return int(text) if text.isdigit() and len(text) < 10 else None


async def _value(value: Any) -> Any:
    return value


async def _messages(
    api: ReadApi, topic: str, number: str, params: dict[str, str]
) -> dict[str, Any]:
    partition = _partition(number)
    if partition is None:
        raise ApiError(400, "partition: a whole number")
    return await api.messages(topic, partition, params)


ConsoleRequest = bounded_request(MAX_BODY, "ConsoleRequest")
"""Bodies over `MAX_BODY` are hung up on as they arrive (Twisted would buffer them)."""


class ConsoleSite(server.Site):
    """No access log: the pages poll every few seconds."""

    requestFactory = ConsoleRequest

    def log(self, request: server.Request) -> None:
        pass


class ConsoleService(service.MultiService):
    """The console's listener and its sampler, started and stopped together."""

    def __init__(self, listener: Listener, sampler: RateSampler, site: ConsoleSite) -> None:
        super().__init__()
        self.listener = listener
        self.sampler = sampler
        self.site = site
        sampler.setServiceParent(self)
        listener.setServiceParent(self)

    @property
    def listening(self) -> Any:
        return self.listener.listening

    @property
    def port(self) -> Any:
        return self.listener.port


def console_service(
    config: Any,
    broker: Any,
    factory: Any,
    reactor: Any,
    backlog: int | None = None,
    kafka_factory: Any = None,
    *,
    sample_interval_s: float = DEFAULT_INTERVAL_S,
    decode_value: ValueDecoder | None = None,
    client_metrics: ClientMetrics | None = None,
) -> ConsoleService:
    """The console on ``config.console_listen``; the token file is read now, so a
    missing one stops the start with a clear error.

    ``decode_value`` is the schema registry's decoder of framed values (shown with
    their schema id on the Messages page); ``client_metrics`` the client telemetry
    (KIP-714) the Clients page lists. Either may be None: the feature is then off."""
    token = read_token(config.console_token_file)
    sampler = RateSampler(broker, reactor, sample_interval_s)
    api = ReadApi(broker, factory, kafka_factory, sampler, time.time(), decode_value)
    users = SessionTable() if config.console_authentication == "users" else None
    credentials = None
    if users is not None:
        path = config.credentials_file or str(Path(config.data_dir) / "credentials")
        credentials = CredentialStore(path)
    guard = Guard(
        token,
        config.console_principal,
        broker.access,
        split_list(config.console_allowed_hosts),
        users=users,
        clock=reactor,
    )
    resource_ = ConsoleResource(
        api,
        AdminApi(broker, guard),
        guard,
        client_metrics,
        credentials,
        config.connection_failed_authentication_delay_ms / 1000,
    )
    site = ConsoleSite(resource_)
    listener = Listener(config.console_listen, "console_listen", site, reactor, backlog=backlog)
    return ConsoleService(listener, sampler, site)
