"""One seed Produce at a time against rustka trees run alternately: latency and server CPU.

    .venv/bin/python bench/pingpong.py [--trees DIR,DIR...] [--flush interval]
                                       [--count 6000] [--rounds 3] [--strace]
                                       [--profile FILE]

The harness's W2 also measures the Twisted client; this client is a blocking
socket in this process, so what changes between two trees is the broker. Each
tree (a checkout or a ``git archive`` of a commit; default: this one) runs under
its own ``twistd rustka`` with ``PYTHONPATH`` set to the tree, on a fresh data dir,
one round of every tree after the other, so the machine's load hits them alike.
Per run it prints p50 and p99 of the round trip, the server's user and system
CPU per request from ``/proc`` (all threads, over the measured requests only)
and the load average; ``--strace`` attaches ``strace -c -f`` for the measured
requests and prints the system calls per request (the latencies are then
strace's, not the broker's); ``--profile FILE`` runs the broker under twistd's
cProfile (the reactor thread only: where the per-request Python goes) and
prints its top functions by own time, the stats saved in ``FILE.<round>.<tree>``.
docs/performance.md, "Latency (issue 21)".
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TWISTD = str(Path(sys.executable).parent / "twistd")
TOPIC = b"pingpong"


def _frame(payload: bytes) -> bytes:
    return struct.pack("!I", len(payload)) + payload


def _string(raw: bytes) -> bytes:
    return struct.pack("!I", len(raw)) + raw


def _ask(sock: socket.socket, request: bytes) -> None:
    sock.sendall(request)
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack_from("!I", buf)[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("the broker closed the connection")
        buf += chunk


def _cpu_ticks(pid: int) -> tuple[int, int]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def run(tree: Path, flush: str, count: int, strace: bool, profile: Path | None = None) -> str:
    data = Path(tempfile.mkdtemp(prefix="pingpong-"))
    log_path = data / "log"
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [TWISTD, "--nodaemon", "--pidfile="]
    if profile is not None:
        cmd += [f"--profile={profile}", "--profiler=cprofile", "--savestats"]
    cmd += ["rustka", "--data-dir", str(data / "d")]
    cmd += ["--listen", "tcp:0:interface=127.0.0.1", "--flush", flush]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tree, env=env)
    tracer = None
    try:
        port = None
        for _ in range(600):
            found = re.search(rb"listening on .*port=(\d+)", log_path.read_bytes())
            if found:
                port = int(found.group(1))
                break
            if proc.poll() is not None:
                raise RuntimeError(f"rustka exited: {log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        if port is None:
            raise RuntimeError("rustka did not report its port")
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _ask(sock, _frame(b"\x09" + _string(TOPIC) + struct.pack("!I", 1)))
        requests = [
            _frame(b"\x01" + _string(TOPIC) + _string(b"k%015d" % i) + _string(b"v" * 100))
            for i in range(count + 200)
        ]
        for request in requests[:200]:  # warm the connection and the lane
            _ask(sock, request)
        if strace:
            out = data / "strace"
            tracer = subprocess.Popen(
                ["strace", "-c", "-f", "-p", str(proc.pid), "-o", str(out)],
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)
        user0, sys0 = _cpu_ticks(proc.pid)
        samples = []
        clock = time.perf_counter_ns
        for request in requests[200:]:
            t0 = clock()
            _ask(sock, request)
            samples.append(clock() - t0)
        user1, sys1 = _cpu_ticks(proc.pid)
        sock.close()
        samples.sort()
        tick = os.sysconf("SC_CLK_TCK")
        line = (
            f"p50 {samples[len(samples) // 2] / 1000:.0f} us  "
            f"p99 {samples[int(len(samples) * 0.99)] / 1000:.0f} us  "
            f"srv user {(user1 - user0) / tick / count * 1e6:.0f} us/req  "
            f"sys {(sys1 - sys0) / tick / count * 1e6:.0f} us/req  "
            f"load {os.getloadavg()[0]:.2f}"
        )
        if tracer is not None:
            tracer.terminate()
            tracer.wait(timeout=30)
            tracer = None
            calls = []
            for row in (data / "strace").read_text().splitlines():
                parts = row.split()
                if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
                    calls.append(f"{parts[-1]} {int(parts[3]) / count:.2f}")
            line += "\n    syscalls per request: " + ", ".join(calls)
        if profile is not None:
            proc.terminate()
            proc.wait(timeout=60)
            line += "\n" + _top_functions(profile, count)
        return line
    finally:
        if tracer is not None:
            tracer.kill()
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)


def _top_functions(stats_file: Path, count: int, top: int = 25) -> str:
    """The reactor thread's busiest functions by own time, in µs per request."""
    import pstats

    stats = pstats.Stats(str(stats_file))
    rows = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)  # type: ignore[attr-defined]
    total = sum(row[1][2] for row in rows)
    lines = [f"    reactor thread own time {total / count * 1e6:.0f} us/req (under the profiler):"]
    for (path, lineno, name), (_, calls, own, cumulative, _) in rows[:top]:
        lines.append(
            f"    {own / count * 1e6:7.1f} us own {cumulative / count * 1e6:7.1f} cum "
            f"{calls / count:5.2f} calls  {name} {Path(path).name}:{lineno}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", default=str(ROOT), help="comma-separated rustka trees")
    parser.add_argument("--flush", default="interval")
    parser.add_argument("--count", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--strace", action="store_true")
    parser.add_argument("--profile", type=Path, help="cProfile the reactor thread into FILE.<n>")
    args = parser.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    for number in range(1, args.rounds + 1):
        for index, tree in enumerate(trees):
            profile = None
            if args.profile is not None:
                profile = args.profile.with_name(f"{args.profile.name}.{number}.{index}")
            result = run(tree, args.flush, args.count, args.strace, profile)
            print(f"round {number} {tree}: {result}", flush=True)


if __name__ == "__main__":
    main()
