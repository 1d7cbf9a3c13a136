"""The twistd entry point: options, and the shape and order of the service tree."""

from __future__ import annotations

from pathlib import Path

from twisted.application import service

from rustka.broker.core import BrokerService
from rustka.ops.notify import NotifyService
from rustka.ops.tap import ListenerService, Options, makeService


def test_service_tree_order(tmp_path: Path) -> None:
    """Broker (pool + storage) first, listeners next, readiness last: start order matters."""
    opts = Options()
    opts.parseOptions(["--data-dir", str(tmp_path), "--listen", "tcp:0:interface=127.0.0.1"])
    top = makeService(opts)
    assert isinstance(top, service.MultiService)
    children = list(top)
    assert isinstance(children[0], BrokerService)
    assert isinstance(children[1], ListenerService)
    assert isinstance(children[-1], NotifyService)


def test_plugin_is_one_statement() -> None:
    """The plugin file only names rustka.ops.tap, so twistd stays cheap to start."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "twisted" / "plugins" / "rustka_plugin.py").read_text()
    assert '"rustka.ops.tap"' in text
    assert "reactor" not in text
    assert not (root / "twisted" / "__init__.py").exists()
    assert not (root / "twisted" / "plugins" / "__init__.py").exists()


def test_optional_services_follow_flags(tmp_path: Path) -> None:
    """Metrics and manhole exist only when configured."""
    opts = Options()
    opts.parseOptions(["--data-dir", str(tmp_path), "--metrics", "tcp:0:interface=127.0.0.1"])
    top = makeService(opts)
    assert hasattr(top, "metrics") and not hasattr(top, "manhole")
