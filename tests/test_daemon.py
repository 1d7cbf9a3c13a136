"""The daemon as users run it: `twistd -n rustka`, driven by the `rustka` CLI.

Real processes, real signals, a real data dir. The broker listens on port 0
and the test reads the bound port from its log, so nothing waits on a sleep.
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.twistd_process import BIN, LISTENING, Twistd, start_broker

pytestmark = pytest.mark.system


def start_daemon(data_dir: Path, started: list[Twistd]) -> tuple[Twistd, int]:
    """`twistd --nodaemon rustka` on an ephemeral port, serving once storage is ready."""
    daemon = start_broker(data_dir)
    started.append(daemon)
    assert daemon.port is not None
    return daemon, daemon.port


@pytest.fixture
def run_daemon() -> Iterator[list[Twistd]]:
    started: list[Twistd] = []
    yield started
    for daemon in started:
        daemon.__exit__(None, None, None)


def cli(port: int, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(BIN / "rustka"), *args[:1], "--broker", f"127.0.0.1:{port}", *args[1:]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_twistd_lists_the_plugin() -> None:
    """`twistd --help` shows rustka after installation."""
    out = subprocess.run([str(BIN / "twistd"), "--help"], capture_output=True, text=True).stdout
    assert re.search(r"^\s+rustka\s+Kafka-style", out, re.M)


def test_seed_cli_story_under_twistd(tmp_path: Path, run_daemon: list[Twistd]) -> None:
    """produce / fetch / consume behave as the seed says, and survive a restart."""
    data = tmp_path / "data"
    daemon, port = start_daemon(data, run_daemon)

    out = cli(port, "produce", "orders", "user-1", "placed order").stdout
    m = re.fullmatch(r"produced to orders partition (\d) at offset 0\n", out)
    assert m, out
    part = m.group(1)
    cli(port, "produce", "orders", "user-1", "paid")

    assert cli(port, "fetch", "orders", part, "0").stdout == "0\tuser-1\tplaced order\n"
    missing = cli(port, "fetch", "orders", part, "9").stdout
    assert "no record" in missing

    first = cli(port, "consume", "analytics", "orders", part).stdout
    assert first == "0\tuser-1\tplaced order\n1\tuser-1\tpaid\n"
    assert cli(port, "consume", "analytics", "orders", part).stdout == ""
    cli(port, "produce", "orders", "user-1", "shipped")
    assert cli(port, "consume", "analytics", "orders", part).stdout == "2\tuser-1\tshipped\n"
    other = cli(port, "consume", "audit", "orders", part).stdout
    assert other.count("\n") == 3

    status = daemon.stop()
    assert status in (0, -signal.SIGTERM), daemon.output
    assert (data / ".clean-shutdown").exists()

    again, port = start_daemon(data, run_daemon)
    assert cli(port, "fetch", "orders", part, "2").stdout == "2\tuser-1\tshipped\n"
    assert cli(port, "consume", "analytics", "orders", part).stdout == ""
    cli(port, "produce", "orders", "user-1", "delivered")
    assert cli(port, "consume", "analytics", "orders", part).stdout == "3\tuser-1\tdelivered\n"
    again.stop()
    assert not any("recover" in line.lower() for line in again.output), again.output


def test_cli_reports_unreachable_broker_in_one_line(tmp_path: Path) -> None:
    """A client command against a closed port exits 1 with a one-line message."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = cli(port, "produce", "orders", "k", "v", check=False)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "cannot reach the broker" in result.stderr


def test_cli_reports_broker_errors(tmp_path: Path, run_daemon: list[Twistd]) -> None:
    """An Error answer becomes exit status 1 and the broker's message."""
    daemon, port = start_daemon(tmp_path / "data", run_daemon)
    result = cli(port, "fetch", "nosuchtopic", "0", "0", check=False)
    assert result.returncode == 1
    assert "unknown topic" in result.stderr and result.stderr.count("\n") == 1
    daemon.stop()


def test_cli_help_teaches_by_example() -> None:
    """Each client command's --help carries runnable examples."""
    for command, example in [
        ("produce", 'rustka produce orders user-1 "placed order"'),
        ("fetch", "rustka fetch orders 2 0"),
        ("consume", "rustka consume analytics orders 2"),
        ("serve", "rustka serve 1000000 50000000"),
    ]:
        out = subprocess.run(
            [str(BIN / "rustka"), command, "--help"], capture_output=True, text=True
        ).stdout
        assert example in out, command
        if command != "serve":
            assert "--broker" in out


def test_rustka_serve_positional_sizes(tmp_path: Path) -> None:
    """`rustka serve MAX_SEGMENT_BYTES RETENTION_BYTES` starts with those limits."""
    proc = subprocess.Popen(
        [
            str(BIN / "rustka"),
            "serve",
            "1000",
            "5000",
            "--data-dir",
            str(tmp_path / "d"),
            "--listen",
            "tcp:0:interface=127.0.0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = None
        for line in proc.stdout:
            m = LISTENING.search(line)
            if m:
                port = int(m.group(1))
                break
        assert port is not None
        for i in range(30):
            cli(port, "produce", "sized", "k", f"value-{i:03d}-" + "x" * 100)
        out = cli(port, "topics", "describe", "sized", "--json").stdout
        assert '"log_start": 0' in out
        segments = list((tmp_path / "d" / "sized").glob("*/*.log"))
        assert len(segments) > 3
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


@pytest.mark.parametrize("runner", ["twistd", "serve"])
def test_storage_that_cannot_open_exits_1_without_listening(tmp_path: Path, runner: str) -> None:
    """A data dir that cannot be opened: the reason is logged, nothing listens, status 1.

    Before, the port opened first and the process stayed up answering nothing.
    """
    data = tmp_path / "data"
    data.write_text("a regular file where the data directory should be\n")
    args = ["--data-dir", str(data), "--listen", "tcp:0:interface=127.0.0.1"]
    command = (
        [str(BIN / "twistd"), "--nodaemon", "--pidfile=", "rustka", *args]
        if runner == "twistd"
        else [str(BIN / "rustka"), "serve", *args]
    )
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert f"cannot open the storage in {data}: FileExistsError" in output, output
    assert not LISTENING.search(output), output
    assert data.read_text().startswith("a regular file"), "the file was left alone"


def test_metrics_listen_before_storage_and_broker_after(tmp_path: Path) -> None:
    """Metrics bind first (reachable during recovery); the broker port only after storage."""
    args = [
        "--data-dir",
        str(tmp_path / "data"),
        "--listen",
        "tcp:0:interface=127.0.0.1",
        "--metrics",
        "tcp:0:interface=127.0.0.1",
    ]
    with Twistd(args) as daemon:
        metrics_port = daemon.wait_port()
        daemon.wait_for("storage ready")
        broker_port = daemon.wait_port()
        assert metrics_port != broker_port
        assert cli(broker_port, "topics", "list").returncode == 0
        assert daemon.stop() in (0, -signal.SIGTERM)
    lines = "".join(daemon.output)
    storage = lines.index("storage ready")
    assert lines.index(f"port={metrics_port})") < storage
    assert storage < lines.index(f"port={broker_port})")
