"""What every client command shares (rustka/ops/cli/common.py): errors, exit codes, timeouts."""

from __future__ import annotations

import subprocess

import pytest_twisted
from twisted.internet.threads import deferToThread

from tests.conftest import RunningBroker
from tests.ops.cli import RUSTKA, cli, ok


@pytest_twisted.ensureDeferred
async def test_broker_error_is_one_line_and_status_1(broker: RunningBroker) -> None:
    """An Error answer exits 1 with a single line on stderr and nothing on stdout."""
    result = await cli(broker, "fetch", "nosuchtopic", "0", "0")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "unknown topic" in result.stderr
    missing = await cli(broker, "produce", "t", "--file", "/nonexistent/input.tsv")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1


@pytest_twisted.ensureDeferred
async def test_usage_errors_exit_2(broker: RunningBroker) -> None:
    """Bad arguments are argparse usage errors: status 2, nothing sent."""
    for args in (
        ("produce", "t", "key-without-value"),
        ("produce", "t", "k", "v", "--file", "x"),
        ("produce", "t", "--file", "-", "--format", "xml"),
        ("fetch", "t", "zero", "0"),
        ("topics", "create", "t"),
        ("groups", "describe"),
    ):
        result = await cli(broker, *args)
        assert result.returncode == 2, args
        assert "usage:" in result.stderr
    assert await ok(broker, "topics", "list") == ""


@pytest_twisted.ensureDeferred
async def test_timeout_covers_requests_not_only_the_connect() -> None:
    """A server that accepts and never answers: the CLI gives up after --timeout, in one line."""
    from twisted.internet import reactor
    from twisted.internet.protocol import Factory, Protocol

    port = reactor.listenTCP(0, Factory.forProtocol(Protocol), interface="127.0.0.1")
    try:
        argv = [RUSTKA, "fetch", "--broker", f"127.0.0.1:{port.getHost().port}"]
        result: subprocess.CompletedProcess[str] = await deferToThread(
            subprocess.run,
            [*argv, "--timeout", "0.5", "orders", "0", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        await port.stopListening()
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (
        "rustka: no answer from the broker within 0.5 s (plus any long-poll wait); "
        "the connection was closed\n"
    )
