"""Shared fixtures: a real broker on 127.0.0.1, port 0, in a temp data dir.

The reactor is imported inside fixtures, never at module level, so the suite
also runs under ``--reactor=asyncio``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer
from twisted.logger import LogLevel, formatEvent, globalLogPublisher

from rustka.config import Config

# Real servers for the diskless tests (tests/services/), started only when a test asks.
from tests.services.postgres import postgres_dsn, postgres_server  # noqa: F401
from tests.services.seaweed import s3_bucket, s3_server  # noqa: F401


class RunningBroker:
    """A broker service tree started in-process, with its bound port."""

    def __init__(self, top: Any, config: Config) -> None:
        self.top = top
        self.config = config
        self.broker = top.broker
        self.factory = top.factory
        self.port: int = top.listeners[0].port.getHost().port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self.top.running:
            await self.top.stopService()

    async def client(self) -> Any:
        from twisted.internet import reactor

        from rustka.client.protocol import connect

        return await connect(reactor, self.address)


async def start_broker(data_dir: Path, **settings: Any) -> RunningBroker:
    """Start a broker on an ephemeral port; settings override the test defaults."""
    from twisted.internet import reactor

    from rustka.ops.tap import build_service

    config = Config().updated(
        {"data_dir": str(data_dir), "listen": ["tcp:0:interface=127.0.0.1"], **settings}
    )
    top = build_service(config, reactor)
    top.startService()
    await top.broker.when_ready()
    await top.listeners[0].listening
    return RunningBroker(top, config)


@pytest.fixture
def force_fast_paths() -> Iterator[None]:
    """For the tests of the fast paths themselves (`rustka.fast_paths`): on for this test
    even when the suite runs with RUSTKA_FAST_PATHS=off, as it does to prove that
    everything else is green without them."""
    from rustka import fast_paths

    saved = fast_paths._from_environment
    fast_paths._from_environment = True
    fast_paths.set_enabled(True)
    try:
        yield
    finally:
        fast_paths._from_environment = saved
        fast_paths.set_enabled(True)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest_twisted.async_yield_fixture
async def broker(data_dir: Path) -> AsyncIterator[RunningBroker]:
    running = await start_broker(data_dir)
    try:
        yield running
    finally:
        await running.stop()


def within(d: Any, seconds: float = 20) -> Any:
    """Fail instead of hanging the suite if a Deferred never fires."""
    from twisted.internet import reactor

    return d.addTimeout(seconds, reactor)


async def reactor_turns(until: Callable[[], bool], seconds: float = 20) -> None:
    """Yield to the reactor until ``until()`` holds, failing after ``seconds``.

    The bound is time, not a count of turns: a condition that waits on the pool's
    threads took anywhere from 1,000 to 30,000 turns on an idle machine, so a count
    failed on a busy one. After the first thousand turns each poll lets a millisecond
    pass, so a spinning reactor does not starve the threads it is waiting for of the GIL.
    """
    from twisted.internet import reactor, task

    deadline = time.monotonic() + seconds
    turns = 0
    while not until():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition never became true in {seconds} s")
        turns += 1
        await task.deferLater(reactor, 0 if turns < 1_000 else 0.001, lambda: None)


@pytest_twisted.async_yield_fixture
async def client(broker: RunningBroker) -> AsyncIterator[Any]:
    """A client library connection to the ``broker`` fixture, closed afterwards."""
    from twisted.internet import defer

    c = await within(defer.ensureDeferred(broker.client()))
    try:
        yield c
    finally:
        await within(c.close())


@pytest.fixture
def broker_factory(data_dir: Path) -> Callable[..., Any]:
    """For tests that need custom settings or restarts: ``await broker_factory(**settings)``."""
    return lambda **settings: start_broker(data_dir, **settings)


class LogWatcher:
    """Records every log event while installed; `wait_for` fires on a matching one."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._waiting: list[tuple[Callable[[str], bool], defer.Deferred[str]]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        text = formatEvent(event)
        for item in list(self._waiting):
            if item[0](text):
                self._waiting.remove(item)
                item[1].callback(text)

    def messages(self, needle: str) -> list[str]:
        return [text for text in map(formatEvent, self.events) if needle in text]

    def at_least(self, level: LogLevel) -> list[str]:
        return [formatEvent(e) for e in self.events if e.get("log_level", LogLevel.info) >= level]

    def wait_for(self, needle: str) -> defer.Deferred[str]:
        d: defer.Deferred[str] = defer.Deferred()
        for text in self.messages(needle):
            d.callback(text)
            return d
        self._waiting.append((lambda text: needle in text, d))
        return within(d, 15)


@pytest_twisted.async_yield_fixture
async def log_watcher() -> Any:
    watcher = LogWatcher()
    globalLogPublisher.addObserver(watcher)
    try:
        yield watcher
    finally:
        globalLogPublisher.removeObserver(watcher)
