"""The web console: pages and a JSON API served by the broker (docs/console.md).

`console_service` builds its listener (the ``console_listen`` setting) and the
rate sampler behind the charts. The pages are static files shipped in the
package (``static/``), read once at start; nothing is built or fetched at run
time. Everything a page shows comes from the JSON API under ``/api/``.
"""

from __future__ import annotations

import time
from importlib import resources
from typing import Any

from twisted.application import service
from twisted.web import resource, server

from rustka.ops.console.admin import MAX_BODY, AdminApi, Guard, read_token
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
from rustka.ops.listeners import Listener
from rustka.settings import split_list

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

    def __init__(self, api: ReadApi, admin: AdminApi, guard: Guard) -> None:
        super().__init__()
        self.api = api
        self.admin = admin
        self.guard = guard
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
        match route:
            case ["overview"]:
                return respond(request, api.overview)
            case ["session"]:
                return respond(request, _value, self.guard.session(request))
            case ["topics"]:
                return respond(request, api.topics)
            case ["topics", topic]:
                return respond(request, api.topic, topic)
            case ["topics", topic, "partitions", number, "messages"]:
                return respond(request, _messages, api, topic, number, query(request))
            case ["topics", topic, "partitions", number, "tail"]:
                partition = _partition(number)
                if partition is None:
                    send_json(request, 400, {"error": "partition: a whole number"})
                    return server.NOT_DONE_YET
                return start_tail(api, request, topic, partition)
            case ["groups"]:
                return respond(request, api.groups)
            case ["groups", group]:
                return respond(request, api.group, group)
        return respond(request, _raise, ApiError(404, "no such API path"))

    def render_POST(self, request: server.Request) -> Any:
        route = path_segments(request)
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


class ConsoleRequest(server.Request):
    """A request whose body may not outgrow `MAX_BODY`: Twisted would buffer any size
    (to a temp file) before the resource sees it, so a bigger one hangs up at once."""

    body_bytes = 0

    def gotLength(self, length: int | None) -> None:
        if length is not None and length > MAX_BODY:
            self.body_bytes = length
            self.channel.transport.loseConnection()  # type: ignore[union-attr]
            length = 0
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        self.body_bytes += len(data)
        if self.body_bytes > MAX_BODY:
            if self.channel is not None:
                self.channel.transport.loseConnection()  # type: ignore[union-attr]
            return
        super().handleContentChunk(data)


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
) -> ConsoleService:
    """The console on ``config.console_listen``; the token file is read now, so a
    missing one stops the start with a clear error."""
    token = read_token(config.console_token_file)
    sampler = RateSampler(broker, reactor, sample_interval_s)
    api = ReadApi(broker, factory, kafka_factory, sampler, time.time())
    guard = Guard(
        token, config.console_principal, broker.access, split_list(config.console_allowed_hosts)
    )
    site = ConsoleSite(ConsoleResource(api, AdminApi(broker, guard), guard))
    listener = Listener(config.console_listen, "console_listen", site, reactor, backlog=backlog)
    return ConsoleService(listener, sampler, site)
