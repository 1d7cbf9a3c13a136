"""A real `twistd rustka` broker process, as the crash and fuzz drivers need one.

The broker listens on port 0 and the bound port is read from its log line, so
nothing waits on a sleep; a thread pumps the output so the pipe never fills.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

BIN = Path(sys.executable).parent
LISTENING = re.compile(r"listening on .*port=(\d+)")
RECOVERY = re.compile(r"unclean shutdown detected")
STORAGE_READY = re.compile(r"storage ready in ")


class BrokerProcess:
    """One broker subprocess with its collected log lines."""

    def __init__(self, data_dir: Path, *extra: str, timeout: float = 30.0) -> None:
        self.proc = subprocess.Popen(
            [
                str(BIN / "twistd"),
                "--nodaemon",
                "--pidfile=",
                "rustka",
                "--data-dir",
                str(data_dir),
                "--listen",
                "tcp:0:interface=127.0.0.1",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.pid = self.proc.pid
        self._lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()
        try:
            self.port = int(self.wait_for(LISTENING, timeout).group(1))
            # twistd binds the listeners before the storage opens; recovery is
            # logged in between, so wait for the end of it
            self.wait_for(STORAGE_READY, timeout)
        except BaseException:
            self.kill()
            raise

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")

    def wait_for(self, pattern: re.Pattern[str], timeout: float = 30.0) -> re.Match[str]:
        """The first new log line matching ``pattern``; fails if the broker exits first."""
        while True:
            line = self._lines.get(timeout=timeout)
            self.output.append(line)
            if line == "":
                raise AssertionError("broker exited:\n" + "".join(self.output))
            match = pattern.search(line)
            if match:
                return match

    def logged(self, pattern: re.Pattern[str]) -> bool:
        """Whether any line read so far (through "storage ready") matches."""
        return any(pattern.search(line) for line in self.output)

    def rss_kib(self) -> int:
        """The broker's resident set size from /proc, in KiB."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError(f"no VmRSS for pid {self.pid}")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, exactly like a crash or the OOM killer."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._drain()

    def stop(self) -> int:
        """SIGTERM and wait: a clean shutdown."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        status = self.proc.wait(timeout=60)
        self._drain()
        return status

    def _drain(self) -> None:
        self._pump_thread.join(timeout=30)
        while not self._lines.empty():
            line = self._lines.get_nowait()
            if line:
                self.output.append(line)
        if self.proc.stdout is not None and not self.proc.stdout.closed:
            self.proc.stdout.close()
