"""The twistd entry point: options, and the shape and order of the service tree."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.application import service
from twisted.application.internet import StreamServerEndpointService
from twisted.python import usage

from rustka.broker.service import BrokerService
from rustka.ops.listeners import Listener
from rustka.ops.notify import NotifyService
from rustka.ops.tap import BrokerTree, Options, makeService


def test_service_tree_order(tmp_path: Path) -> None:
    """Broker (pool + storage) first, listeners next, readiness last: start order matters."""
    opts = Options()
    opts.parseOptions(["--data-dir", str(tmp_path), "--listen", "tcp:0:interface=127.0.0.1"])
    top = makeService(opts)
    assert isinstance(top, BrokerTree)
    children = list(top)
    assert isinstance(children[0], BrokerService)
    assert isinstance(children[1], Listener)
    assert isinstance(children[1], StreamServerEndpointService)
    assert isinstance(children[-1], NotifyService)
    assert top.listeners == [children[1]]


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
    assert isinstance(top, BrokerTree)
    assert top.metrics is not None and top.manhole is None
    assert top.metrics in list(top)


def test_positional_sizes_mix_with_options(tmp_path: Path) -> None:
    """`serve 1000 5000 --data-dir D` (the seed's form) parses like the flags, in any order."""
    opts = Options()
    opts.parseOptions(["1000", "--data-dir", str(tmp_path), "5000", "--flush", "never"])
    assert opts.config.segment_bytes == 1000
    assert opts.config.retention_bytes == 5000
    assert opts.config.flush == "never"
    assert opts.config.data_dir == str(tmp_path)


def test_flags_override_the_config_file(tmp_path: Path) -> None:
    """The file sets, a flag wins; --port adds a loopback listener."""
    config = tmp_path / "rustka.toml"
    config.write_text('flush = "interval"\nbacklog = 200\nsegment_bytes = "2MiB"\n')
    opts = Options()
    opts.parseOptions(["--config", str(config), "--flush", "never", "--port", "19092"])
    assert opts.config.flush == "never"
    assert opts.config.backlog == 200
    assert opts.config.segment_bytes == 2 * 1024 * 1024
    assert opts.config.listen == ["tcp:19092:interface=127.0.0.1"]
    again = Options()
    again.parseOptions(["--config", str(config), "--backlog", "300"])
    assert again.config.backlog == 300


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--flush", "sometimes"], "flush: expected one of"),
        (["1", "2", "3"], "Wrong number of arguments"),
        (["--backlog", "0"], "backlog: must be at least 1"),
        (["--no-such-flag"], "no-such-flag"),
        (["--port", "x"], "--port: expected a whole number, got 'x'"),
    ],
)
def test_bad_options_are_usage_errors(argv: list[str], message: str) -> None:
    """Every bad argument is a UsageError naming what is wrong, for twistd and serve alike."""
    with pytest.raises(usage.UsageError, match=message):
        Options().parseOptions(argv)


def test_broker_listeners_carry_the_backlog(tmp_path: Path) -> None:
    """Every configured TCP listener gets the backlog setting unless its string names one."""
    opts = Options()
    opts.parseOptions(
        [
            "--data-dir",
            str(tmp_path),
            "--backlog",
            "700",
            "--listen",
            "tcp:0:interface=127.0.0.1",
            "--listen",
            "tcp:0:interface=127.0.0.1:backlog=20",
            "--metrics",
            "tcp:0:interface=127.0.0.1",
        ]
    )
    top = makeService(opts)
    assert isinstance(top, BrokerTree)
    assert [listener.description for listener in top.listeners] == [
        "tcp:0:interface=127.0.0.1:backlog=700",
        "tcp:0:interface=127.0.0.1:backlog=20",
    ]
    assert top.metrics is not None
    assert top.metrics.description == "tcp:0:interface=127.0.0.1:backlog=700"


def test_top_is_a_multiservice(tmp_path: Path) -> None:
    """twistd only needs an IService; the tree is an ordinary MultiService."""
    opts = Options()
    opts.parseOptions(["--data-dir", str(tmp_path)])
    assert isinstance(makeService(opts), service.MultiService)
