"""A real `twistd rustka` process for tests, plus a blocking native-protocol client.

The daemon's output is read by a thread into a queue, so a test waits for the
line it needs (with a timeout) instead of sleeping. The blocking client lets a
plain (non-reactor) test pipeline many requests over one socket.
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

from rustka.native import codec as p

BIN = Path(sys.executable).parent
LISTENING = re.compile(r"listening on .*port=(\d+)")
_LENGTH = struct.Struct("!I")


class Twistd:
    """``[prefix...] twistd --nodaemon --pidfile= [twistd_args] rustka [args]``, output captured.

    Use as a context manager: the process is killed on exit if a test left it running.
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
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
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

    def port(self) -> int:
        """The port of the next 'listening on' line."""
        return int(self.wait_for(LISTENING).group(1))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Send ``sig``, wait for the exit, collect the remaining output; the exit status."""
        self.proc.send_signal(sig)
        status = self.proc.wait(timeout=timeout)
        self._drain()
        return status

    def _drain(self) -> None:
        while not self._eof:
            line = self._lines.get(timeout=30)
            if line == "":
                self._eof = True
            else:
                self.output.append(line)
        assert self.proc.stdout is not None
        self.proc.stdout.close()

    def __enter__(self) -> Twistd:
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
