"""What one produce round trip costs under each way of keeping the disk write off the reactor.

    .venv/bin/python bench/hop.py [--count 5000] [--designs reactor,pool,lane,direct,spin]

W2 (one record at a time, ``flush=interval``) spends most of its time on the
reactor -> I/O pool -> reactor hop, not on the write (docs/performance.md,
"W2"). This measures the hop designs in isolation, outside rustka, so they can
be compared without changing the broker: a Twisted server (one subprocess per
design) reads a 4-byte length + 116-byte request, appends the request to a
file with ``os.write`` (page cache, as ``flush=interval`` does between
fsyncs) and answers 16 bytes; a blocking socket client in this process sends
the next request only after the answer, and reports p50 and p99.

Designs:

- ``echo``    no file write at all: the floor (TCP ping-pong through the reactor).
- ``reactor`` the write on the reactor thread: no hop, but disk I/O on the reactor.
- ``pool``    today's path: Twisted ``ThreadPool.callInThreadWithCallback`` for
  the write, ``callFromThread`` back, ``transport.write`` on the reactor.
- ``lane``    a dedicated writer thread per lane fed by a ``SimpleQueue``, back
  through ``callFromThread``: two wake-ups, without ThreadPool's layers.
- ``direct``  the lane's thread writes the file and then sends the answer bytes
  on the socket itself (one hop: the reactor is never woken for the answer).
- ``spin``    ``lane``, but the writer spins on its queue for up to 50 µs before
  blocking, so a request arriving soon after the last finds it awake.
"""

from __future__ import annotations

import argparse
import os
import queue
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RECORD_SIZE, percentiles

DESIGNS = ("echo", "reactor", "pool", "lane", "direct", "spin")
ANSWER = b"\0" * 16
SPIN_SECONDS = 50e-6


def serve(design: str, path: str) -> None:
    """The server process: listen on a free port, print it, answer until the client hangs up."""
    from twisted.internet import protocol, reactor
    from twisted.python.threadpool import ThreadPool

    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pool = ThreadPool(1, 4)
    work: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def lane_thread() -> None:
        while True:
            if design == "spin":
                deadline = time.perf_counter() + SPIN_SECONDS
                item = None
                while item is None and time.perf_counter() < deadline:
                    try:
                        item = work.get_nowait()
                    except queue.Empty:
                        item = None
                if item is None:
                    item = work.get()
            else:
                item = work.get()
            if item is None:
                return
            data, proto = item
            os.write(fd, data)
            if design == "direct":
                proto.sock.sendall(ANSWER)
            else:
                reactor.callFromThread(proto.transport.write, ANSWER)

    class Server(protocol.Protocol):
        def connectionMade(self) -> None:
            self.transport.setTcpNoDelay(True)
            self.buffer = b""
            # ``direct`` answers from the lane thread on a dup of the socket; the
            # reactor never writes to this connection, so the two cannot interleave.
            self.sock = socket.socket(fileno=os.dup(self.transport.getHandle().fileno()))

        def dataReceived(self, data: bytes) -> None:
            self.buffer += data
            while len(self.buffer) >= 4:
                (size,) = struct.unpack_from(">I", self.buffer)
                if len(self.buffer) < 4 + size:
                    return
                frame, self.buffer = self.buffer[4 : 4 + size], self.buffer[4 + size :]
                self.handle(frame)

        def handle(self, frame: bytes) -> None:
            if design == "echo":
                self.transport.write(ANSWER)
            elif design == "reactor":
                os.write(fd, frame)
                self.transport.write(ANSWER)
            elif design == "pool":
                write = self.transport.write

                def done(ok: bool, _result: object) -> None:
                    reactor.callFromThread(write, ANSWER)

                pool.callInThreadWithCallback(done, os.write, fd, frame)
            else:
                work.put((frame, self))

        def connectionLost(self, reason: object = None) -> None:
            self.sock.close()
            reactor.stop()

    factory = protocol.Factory.forProtocol(Server)
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    if design == "pool":
        pool.start()
    if design in ("lane", "direct", "spin"):
        threading.Thread(target=lane_thread, daemon=True).start()
    print(port.getHost().port, flush=True)
    reactor.run()
    pool.stop()


def measure(design: str, count: int) -> tuple[float, float]:
    """Start the server for ``design``, ping-pong ``count`` requests, return (p50, p99) µs."""
    with tempfile.TemporaryDirectory(prefix="rustka-hop-") as tmp:
        path = str(Path(tmp) / "log")
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", design, path], stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None
            port = int(proc.stdout.readline())
            request = struct.pack(">I", RECORD_SIZE) + bytes(RECORD_SIZE)
            samples: list[int] = []
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                ns = time.perf_counter_ns
                for i in range(count + 200):
                    t0 = ns()
                    sock.sendall(request)
                    got = 0
                    while got < len(ANSWER):
                        chunk = sock.recv(len(ANSWER) - got)
                        if not chunk:
                            raise RuntimeError("server hung up")
                        got += len(chunk)
                    if i >= 200:  # the first 200 warm the threads and the page cache
                        samples.append(ns() - t0)
            written = os.path.getsize(path)
        finally:
            proc.wait(10)
        expected = 0 if design == "echo" else (count + 200) * RECORD_SIZE
        if written != expected:
            raise RuntimeError(f"{design}: wrote {written} bytes, expected {expected}")
        return percentiles(samples)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--designs", default=",".join(DESIGNS))
    ap.add_argument("--rounds", type=int, default=3, help="rounds, designs interleaved")
    ap.add_argument("--serve", nargs=2, metavar=("DESIGN", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve(*args.serve)
        return 0
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    if any(d not in DESIGNS for d in designs):
        ap.error(f"designs are {', '.join(DESIGNS)}")
    results: dict[str, list[tuple[float, float]]] = {d: [] for d in designs}
    for rnd in range(args.rounds):
        shift = rnd % len(designs)
        for design in designs[shift:] + designs[:shift]:
            results[design].append(measure(design, args.count))
    print(f"{'design':<10}{'p50 us':>9}{'p99 us':>9}   (median of {args.rounds} rounds)")
    for design in designs:
        p50 = sorted(r[0] for r in results[design])[len(results[design]) // 2]
        p99 = sorted(r[1] for r in results[design])[len(results[design]) // 2]
        print(f"{design:<10}{p50:>9.0f}{p99:>9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
