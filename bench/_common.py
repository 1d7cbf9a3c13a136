"""Shared pieces of the benchmark drivers: the record shape, CPU clocks, result rows.

Every driver runs in its own process so that a system's client library (Twisted,
redis-py, asyncio for nats-py) never shares an event loop or an interpreter with
another one, and so the client CPU time it reports is its own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

KEY_SIZE = 16
VALUE_SIZE = 100
RECORD_SIZE = KEY_SIZE + VALUE_SIZE

# A fixed, incompressible-looking value: the same bytes for every system.
VALUE = bytes((i * 131 + 17) % 251 for i in range(VALUE_SIZE))

_TICKS = os.sysconf("SC_CLK_TCK")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def key_for(i: int) -> bytes:
    """A 16-byte key that is unique per record, so routing and dedup checks are meaningful."""
    return b"key-%012d" % i


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a whole process (all threads) from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return 0.0
    # The command name may contain spaces; fields after it are positional.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def own_cpu() -> float:
    """This process's CPU seconds plus those of children it waited for (redis-benchmark)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass
class Result:
    """One measured run of one workload against one system."""

    records: int = 0
    seconds: float = 0.0
    client_cpu: float = 0.0
    server_cpu: float = 0.0
    p50_us: float | None = None
    p99_us: float | None = None
    ok: bool = True
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Clock:
    """Wall time and both CPU clocks over the measured region only (not setup)."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.wall = self.client = self.server = 0.0

    def start(self) -> None:
        self.server = process_cpu(self.server_pid)
        self.client = own_cpu()
        self.wall = time.perf_counter()

    def stop(self, result: Result) -> Result:
        result.seconds = time.perf_counter() - self.wall
        result.client_cpu = own_cpu() - self.client
        result.server_cpu = process_cpu(self.server_pid) - self.server
        return result


def percentiles(samples_ns: list[int]) -> tuple[float, float]:
    """p50 and p99 in microseconds (nearest rank)."""
    if not samples_ns:
        return 0.0, 0.0
    ordered = sorted(samples_ns)
    n = len(ordered)

    def rank(q: float) -> float:
        return ordered[min(n - 1, max(0, int(q * n + 0.5) - 1))] / 1000

    return rank(0.50), rank(0.99)


def driver_main(run: Callable[[dict[str, Any]], Result]) -> None:
    """Entry point of a driver process: spec as JSON in argv[1], result as JSON on stdout."""
    spec = json.loads(sys.argv[1])
    try:
        result = run(spec)
    except Exception as exc:  # a failed run is a row saying why, not a dead harness
        result = Result(ok=False, note=f"{type(exc).__name__}: {exc}")
    sys.stdout.write(json.dumps(asdict(result)) + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------- a twistd broker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TwistdBroker:
    """``twistd rustka`` on a data dir with a TOML config of ``settings``, its metrics on a
    port of its own; stopped by SIGTERM (the benches that compare broker variants)."""

    def __init__(self, data_dir: Path, settings: dict[str, Any]) -> None:
        self.metrics_port = free_port()
        config = data_dir.parent / f"{data_dir.name}.toml"
        lines = [
            f'data_dir = "{data_dir}"',
            'listen = ["tcp:0:interface=127.0.0.1"]',
            f'metrics = "tcp:{self.metrics_port}:interface=127.0.0.1"',
        ]
        for key, value in settings.items():
            lines.append(f"{key} = {json.dumps(value)}")
        config.write_text("\n".join(lines) + "\n")
        self.log = data_dir.parent / f"{data_dir.name}.log"
        out = self.log.open("wb")
        twistd = str(Path(sys.executable).parent / "twistd")
        self.proc = subprocess.Popen(
            [twistd, "--nodaemon", "--pidfile=", "rustka", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        out.close()
        pattern = re.compile(r"rustka.*listening on .*port=(\d+)")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            ports = [int(p) for p in pattern.findall(text) if int(p) != self.metrics_port]
            if "storage ready" in text and ports:
                self.port = ports[-1]
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"rustka exited early: {text[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"rustka did not start; see {self.log}")

    def spec(self, workload: str, topic: str, count: int, **extra: Any) -> dict[str, Any]:
        """A driver spec for this broker."""
        return {
            "workload": workload,
            "host": "127.0.0.1",
            "port": self.port,
            "server_pid": self.proc.pid,
            "name": topic,
            "count": count,
            **extra,
        }

    def metric(self, name: str) -> float:
        page = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10)
        for line in page.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_driver(script: str, spec: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    """Run ``bench/SCRIPT SPEC_JSON`` and return its result row; RuntimeError if it failed."""
    done = subprocess.run(
        [sys.executable, str(HERE / script), json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"{spec['workload']} driver failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    if not result.get("ok", False):
        raise RuntimeError(f"{spec['workload']} failed: {result.get('note')}")
    return result
