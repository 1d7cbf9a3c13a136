"""A real `twistd rustka` process, for the tests and the tools alike.

The daemon's output is read by a thread into a queue, so a caller waits for
the line it needs (with a timeout) instead of sleeping, and the pipe never
fills (`OutputProcess`; the programs tests/apps/ runs are read the same way).
`start_broker` runs a broker on port 0 and returns once it serves: the storage
is open (the "storage ready" line) and the broker listener has bound (the next
"listening on" line; metrics and manhole listeners bind before the storage
opens, see docs/operations.md). `call_many` is a blocking
native-protocol client that pipelines requests over one socket.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from rustka.native import codec as p

BIN = Path(sys.executable).parent
LISTENING = re.compile(r"listening on .*port=(\d+)")
RECOVERY = re.compile(r"unclean shutdown detected")
STORAGE_READY = re.compile(r"storage ready in ")
_LENGTH = struct.Struct("!I")


class OutputProcess:
    """A child process whose output (stdout and stderr, merged) is read line by line.

    Use as a context manager: the process is killed on exit if it is still
    running. The programs tests/apps/ runs are these too, started with their
    own virtualenv's interpreter.
    """

    def __init__(
        self, command: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        self.proc = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            cwd=cwd,
        )
        self.pid = self.proc.pid
        self._lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        self._eof = False
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")

    def wait_for(self, pattern: re.Pattern[str] | str, timeout: float = 30) -> re.Match[str]:
        """The first match of ``pattern`` in the lines not read yet; fails if the process ends."""
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(
                    f"no line matched {compiled.pattern!r} within {timeout} s:\n"
                    + "".join(self.output)
                ) from None
            if line == "":
                self._eof = True
                raise AssertionError(
                    f"process exited before {compiled.pattern!r}:\n" + "".join(self.output)
                )
            self.output.append(line)
            match = compiled.search(line)
            if match:
                return match

    def logged(self, pattern: re.Pattern[str] | str) -> bool:
        """Whether any line read so far matches."""
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        return any(compiled.search(line) for line in self.output)

    def rss_kib(self) -> int:
        """The process's resident set size from /proc, in KiB."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError(f"no VmRSS for pid {self.pid}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Send ``sig`` (a clean stop by default), wait, collect the output; the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        status = self.proc.wait(timeout=timeout)
        self._drain()
        return status

    def kill(self) -> int:
        """SIGKILL: no shutdown code runs, exactly like a crash or the OOM killer."""
        return self.stop(signal.SIGKILL, timeout=30)

    def _drain(self) -> None:
        while not self._eof:
            line = self._lines.get(timeout=30)
            if line == "":
                self._eof = True
            else:
                self.output.append(line)
        if self.proc.stdout is not None and not self.proc.stdout.closed:
            self.proc.stdout.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        if self.proc.stdout is not None and not self.proc.stdout.closed:
            self._drain()


class Twistd(OutputProcess):
    """``[prefix...] twistd --nodaemon --pidfile= [twistd_args] rustka [args]``, output captured.

    ``port`` is the broker port once `wait_port` (or `start_broker`) has read it.
    """

    def __init__(
        self,
        args: Sequence[str],
        *,
        twistd_args: Sequence[str] = (),
        prefix: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        command = [
            *prefix,
            str(BIN / "twistd"),
            "--nodaemon",
            "--pidfile=",
            *twistd_args,
            "rustka",
            *args,
        ]
        super().__init__(command, env=env)
        self.port: int | None = None

    def wait_port(self, timeout: float = 30) -> int:
        """The port of the next 'listening on' line (kept as ``port`` if none was yet)."""
        port = int(self.wait_for(LISTENING, timeout).group(1))
        if self.port is None:
            self.port = port
        return port


def start_broker(
    data_dir: Path | str,
    *extra: str,
    timeout: float = 30.0,
    twistd_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> Twistd:
    """`twistd rustka` on 127.0.0.1 port 0 with ``data_dir``, returned once it serves.

    Recovery is logged before "storage ready", so `logged(RECOVERY)` answers
    whether this start ran it. The process is killed if it does not come up.
    """
    daemon = Twistd(
        ["--data-dir", str(data_dir), "--listen", "tcp:0:interface=127.0.0.1", *extra],
        twistd_args=twistd_args,
        env=env,
    )
    try:
        daemon.wait_for(STORAGE_READY, timeout)
        daemon.wait_port(timeout)
    except BaseException:
        daemon.kill()
        raise
    return daemon


def call_many(port: int, requests: Sequence[p.Request], timeout: float = 30) -> list[p.Response]:
    """Send every request pipelined on one connection; the responses, in order."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        frames = []
        for request in requests:
            payload = p.encode_request(request)
            frames.append(_LENGTH.pack(len(payload)) + payload)
        sock.sendall(b"".join(frames))
        responses: list[p.Response] = []
        buf = bytearray()
        while len(responses) < len(requests):
            chunk = sock.recv(65536)
            if not chunk:
                raise AssertionError(f"connection closed after {len(responses)} responses")
            buf += chunk
            while len(buf) >= 4:
                (size,) = _LENGTH.unpack_from(buf)
                if len(buf) < 4 + size:
                    break
                responses.append(p.decode_response(bytes(buf[4 : 4 + size])))
                del buf[: 4 + size]
        return responses
