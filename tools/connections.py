"""Hold N concurrent connections to a real broker and report what each one costs.

Usage::

    .venv/bin/python -m tools.connections                # 10,000 connections
    .venv/bin/python -m tools.connections --target max   # the fd hard limit minus headroom
    .venv/bin/python -m tools.connections --quick        # 2,000, for a smoke run
    .venv/bin/python -m tools.connections --burst        # every connect at once
    .venv/bin/python -m tools.connections --burst --backlog 50   # Twisted's old default

The broker is a `twistd rustka` subprocess with its own temp data dir and a
config file setting max_connections above N. Clients are plain non-blocking
sockets driven by `selectors` in several processes, because one process's
open-files limit cannot hold both ends of 19,000 connections; the sockets bind
to several loopback source addresses (127.0.0.2, 127.0.0.3, ...) so the
ephemeral port range is never the limit. Each connection produces one record
and fetches it back, then all are held open while the broker's RSS is read
from /proc.

By default each client process keeps at most 256 connects in flight. With
``--burst`` every process opens all its sockets at once, the way clients
reconnect after a broker restart; that is what the listen backlog is for
(docs/operations.md, "Listen backlog").
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import resource
import selectors
import socket
import struct
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from rustka.native import codec as p
from tools.twistd_process import start_broker
from tools.wire import SyncClient, frame

TOPIC = "conns"
PARTITIONS = 8
HEADROOM = 1000
PER_PROCESS = 6000
CONNECTS_IN_FLIGHT = 256
_LENGTH = struct.Struct("!I")
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)


def raise_nofile() -> int:
    """Lift this process's soft open-files limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class _Conn:
    __slots__ = ("inbuf", "index", "offset", "out", "partition", "sock", "stage", "value")

    def __init__(self, sock: socket.socket, index: int, value: bytes) -> None:
        self.sock = sock
        self.index = index
        self.out = b""
        self.inbuf = bytearray()
        self.stage = "connecting"
        self.partition = 0
        self.offset = 0
        self.value = value


def _client(
    worker: int,
    count: int,
    port: int,
    sources: int,
    pipe: Connection,
    deadline_s: float,
    burst: bool = False,
) -> None:
    """One client process: connect ``count`` sockets, produce+fetch on each, hold them.

    With ``burst`` every connect is started before the first is waited for.
    """
    raise_nofile()
    in_flight = count if burst else CONNECTS_IN_FLIGHT
    sel = selectors.DefaultSelector()
    conns: list[_Conn] = []
    failures: dict[str, int] = {}
    pending = list(range(count))
    connecting = 0
    done = 0
    started = time.monotonic()
    connected_at: float | None = None
    deadline = started + deadline_s

    def fail(c: _Conn, why: str) -> None:
        nonlocal done
        failures[why] = failures.get(why, 0) + 1
        if c.stage == "connecting":
            nonlocal connecting
            connecting -= 1
        sel.unregister(c.sock)
        c.sock.close()
        c.stage = "failed"
        done += 1

    def send(c: _Conn, req: p.Request, stage: str) -> None:
        c.out = frame(p.encode_request(req))
        c.stage = stage
        sel.modify(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)

    connected = 0
    while done < count and time.monotonic() < deadline:
        while pending and connecting < in_flight:
            i = pending.pop()
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
                sock.bind((f"127.0.0.{2 + (worker * count + i) % sources}", 0))
                sock.setblocking(False)
                sock.connect_ex(("127.0.0.1", port))
            except OSError as e:
                sock.close()
                failures[f"socket: {e.strerror}"] = failures.get(f"socket: {e.strerror}", 0) + 1
                done += 1
                continue
            c = _Conn(sock, i, f"w{worker}-c{i}".encode())
            conns.append(c)
            sel.register(sock, selectors.EVENT_WRITE, c)
            connecting += 1
        for key, events in sel.select(1.0):
            c = key.data
            if c.stage == "connecting":
                err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    fail(c, f"connect: errno {err}")
                    continue
                connecting -= 1
                connected += 1
                if connected == count:
                    connected_at = time.monotonic()
                c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                send(c, p.Produce(TOPIC, c.value, c.value), "producing")
                continue
            if events & selectors.EVENT_WRITE and c.out:
                try:
                    sent = c.sock.send(c.out)
                except OSError as e:
                    fail(c, f"send: {e.strerror}")
                    continue
                c.out = c.out[sent:]
                if not c.out:
                    sel.modify(c.sock, selectors.EVENT_READ, c)
            if events & selectors.EVENT_READ:
                try:
                    chunk = c.sock.recv(65536)
                except OSError as e:
                    fail(c, f"recv: {e.strerror}")
                    continue
                if not chunk:
                    fail(c, f"closed by broker while {c.stage}")
                    continue
                c.inbuf += chunk
                if len(c.inbuf) < 4 or len(c.inbuf) < 4 + _LENGTH.unpack_from(c.inbuf)[0]:
                    continue
                resp = p.decode_response(bytes(c.inbuf[4:]))
                c.inbuf.clear()
                if c.stage == "producing" and isinstance(resp, p.Produced):
                    c.partition, c.offset = resp.partition, resp.offset
                    send(c, p.Fetch(TOPIC, c.partition, c.offset), "fetching")
                elif c.stage == "fetching" and resp == p.FetchedRecord(c.offset, c.value, c.value):
                    c.stage = "held"
                    sel.unregister(c.sock)
                    done += 1
                else:
                    fail(c, f"unexpected {type(resp).__name__} while {c.stage}")
    held = sum(1 for c in conns if c.stage == "held")
    if done < count:
        failures["timed out"] = count - done
    pipe.send(
        {
            "worker": worker,
            "held": held,
            "failures": failures,
            "connect_s": (connected_at or time.monotonic()) - started,
            "total_s": time.monotonic() - started,
        }
    )
    pipe.recv()
    for c in conns:
        c.sock.close()
    pipe.send("closed")


def default_max() -> int:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return hard - HEADROOM


def run(
    count: int,
    sources: int,
    timeout_s: float,
    *,
    burst: bool = False,
    backlog: int | None = None,
) -> dict[str, Any]:
    """Start a broker, hold ``count`` connections to it, return the figures.

    ``burst`` opens every connection at once; ``backlog`` overrides the broker's
    listen backlog setting (the default is the broker's own).
    """
    with tempfile.TemporaryDirectory(prefix="rustka-conns-") as tmp:
        config = Path(tmp) / "rustka.toml"
        config.write_text(
            f"max_connections = {count + 100}\n"
            'flush = "interval"\n'
            'idle_timeout_ms = "1h"\n'
            "default_partitions = 8\n" + (f"backlog = {backlog}\n" if backlog else "")
        )
        broker = start_broker(Path(tmp) / "data", "--config", str(config))
        try:
            admin = SyncClient("127.0.0.1", broker.port)
            admin.call(p.CreateTopic(TOPIC, PARTITIONS))
            admin.close()
            rss_before = broker.rss_kib()
            workers = max(1, math.ceil(count / PER_PROCESS))
            shares = [count // workers + (1 if w < count % workers else 0) for w in range(workers)]
            ctx = mp.get_context("fork")
            pipes = []
            procs = []
            started = time.monotonic()
            for w, share in enumerate(shares):
                parent, child = ctx.Pipe()
                proc = ctx.Process(
                    target=_client,
                    args=(w, share, broker.port, sources, child, timeout_s, burst),
                )
                proc.start()
                pipes.append(parent)
                procs.append(proc)
            reports = [pipe.recv() for pipe in pipes]
            elapsed = time.monotonic() - started
            rss_after = broker.rss_kib()
            admin = SyncClient("127.0.0.1", broker.port)
            [topic] = admin.call(p.Metadata((TOPIC,))).topics  # type: ignore[attr-defined]
            records = sum(part.high_watermark for part in topic.partitions)
            admin.close()
            for pipe in pipes:
                pipe.send("release")
            for pipe in pipes:
                pipe.recv()
            for proc in procs:
                proc.join(30)
            refused_logged = any("refusing connections" in line for line in broker.output)
        finally:
            broker.stop()
    held = sum(r["held"] for r in reports)
    failures: dict[str, int] = {}
    for r in reports:
        for why, n in r["failures"].items():
            failures[why] = failures.get(why, 0) + n
    connect_s = max(r["connect_s"] for r in reports)
    return {
        "target": count,
        "mode": "burst" if burst else f"{CONNECTS_IN_FLIGHT} connects in flight per process",
        "backlog": backlog or "broker default",
        "held": held,
        "failures": failures,
        "client_processes": len(shares),
        "source_addresses": sources,
        "records_produced": records,
        "seconds_all_done": round(elapsed, 2),
        "seconds_all_connected": round(connect_s, 2),
        "connects_per_second": round(count / connect_s) if connect_s else None,
        "broker_rss_before_kib": rss_before,
        "broker_rss_after_kib": rss_after,
        "rss_per_connection_bytes": round((rss_after - rss_before) * 1024 / held) if held else None,
        "refusals_logged": refused_logged,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument(
        "--target", choices=["max"], help="open the fd hard limit minus headroom instead"
    )
    parser.add_argument("--quick", action="store_true", help="2,000 connections")
    parser.add_argument("--sources", type=int, default=4, help="loopback source addresses")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--burst", action="store_true", help="open every connection at once")
    parser.add_argument("--backlog", type=int, help="the broker's listen backlog setting")
    args = parser.parse_args(argv)
    count = 2000 if args.quick else default_max() if args.target == "max" else args.connections
    raise_nofile()
    result = run(count, args.sources, args.timeout, burst=args.burst, backlog=args.backlog)
    width = max(map(len, result))
    for key, value in result.items():
        sys.stdout.write(f"{key:<{width}}  {value}\n")
    return 0 if result["held"] == count else 1


if __name__ == "__main__":
    sys.exit(main())
