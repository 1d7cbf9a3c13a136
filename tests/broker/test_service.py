"""BrokerService: storage opens on the I/O pool and whenReady reports the outcome."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from rustka.broker.service import BrokerService
from rustka.config import Config
from rustka.storage import log_manager
from tests.conftest import within


@pytest_twisted.ensureDeferred
async def test_storage_opens_off_the_reactor_then_when_ready_fires(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from twisted.internet import reactor

    threads: list[str] = []
    real_open = log_manager.LogManager.open.__func__  # type: ignore[attr-defined]

    def recording_open(cls: Any, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real_open(cls, *args, **kwargs)

    monkeypatch.setattr(log_manager.LogManager, "open", classmethod(recording_open))
    service = BrokerService(Config().updated({"data_dir": str(tmp_path / "d")}), reactor)
    service.startService()
    try:
        ready = service.whenReady()
        assert service.broker.state == "starting" and not ready.called
        await within(ready)
        assert service.broker.state == "serving"
        assert threads and threads[0] != threading.main_thread().name
        assert [loop.running for loop in service.loops] == [True]
    finally:
        await within(service.stopService())
    assert (tmp_path / "d" / log_manager.CLEAN_SHUTDOWN_MARKER).exists()


@pytest_twisted.ensureDeferred
async def test_when_ready_fails_with_the_cause(tmp_path: Path) -> None:
    from twisted.internet import reactor

    blocker = tmp_path / "file"
    blocker.write_text("")
    service = BrokerService(Config().updated({"data_dir": str(blocker / "d")}), reactor)
    service.startService()
    try:
        with pytest.raises(OSError):
            await within(service.whenReady())
        assert service.loops == []
    finally:
        await within(service.stopService())
