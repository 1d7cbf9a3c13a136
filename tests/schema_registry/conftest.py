"""A live broker with its schema registry on 127.0.0.1, port 0, and an HTTP helper."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import threads

from tests.conftest import RunningBroker, start_broker, within

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class Registry:
    """A running broker and its registry's address."""

    def __init__(self, running: RunningBroker) -> None:
        self.running = running
        self.service = running.top.schema_registry

    @property
    def port(self) -> int:
        return int(self.service.listener.port.getHost().port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """One HTTP request from a thread (a real socket, as a client sends it)."""
        return await within(
            threads.deferToThread(http, method, self.url + path, body, headers or {})
        )


def http(method: str, url: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", CONTENT_TYPE)
    for name, value in headers.items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


async def start_registry(data_dir: Path, **settings: Any) -> Registry:
    settings.setdefault("schema_registry_listen", "tcp:0:interface=127.0.0.1")
    running = await start_broker(data_dir, **settings)
    registry = Registry(running)
    await within(registry.service.listener.listening)
    await within(registry.service.when_ready())
    return registry


@pytest_twisted.async_yield_fixture
async def registry(data_dir: Path) -> AsyncIterator[Registry]:
    made = await start_registry(data_dir)
    try:
        yield made
    finally:
        await made.running.stop()
