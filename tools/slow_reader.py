"""Measure what a client that never reads costs the broker in memory.

Usage::

    .venv/bin/python -m tools.slow_reader                    # 512 KiB x 2,000 seed Fetches
    .venv/bin/python -m tools.slow_reader --record-kib 64 --fetches 500 --clients 4

A `twistd rustka` subprocess (default config, so a 32 MiB
``max_output_bytes_per_connection``) gets one record of ``--record-kib``. Each
client then pipelines ``--fetches`` seed Fetches of it over one socket with a
small receive buffer and reads nothing. The broker's RSS is sampled from /proc
while they hold (``--hold`` seconds), then the clients go and it is sampled
again. Printed: RSS before, the peak growth, the growth as a multiple of the
budget, and the growth left after the clients went. docs/reliability.md
promises a connection at most about twice its budget.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import time
from pathlib import Path

from rustka.config import Config
from rustka.native import codec as p
from tools.twistd_process import call_many, start_broker

TOPIC = "slow-reader"


def _frame(request: p.Request) -> bytes:
    return b"".join(p.request_frame(request))


def _sample(broker: object, seconds: float, step: float = 0.05) -> int:
    """The largest RSS (KiB) seen over ``seconds``."""
    peak = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        peak = max(peak, broker.rss_kib())  # type: ignore[attr-defined]
        time.sleep(step)
    return peak


def measure(
    record_kib: int, fetches: int, clients: int, hold: float, after: float
) -> dict[str, float]:
    """Run one broker through the scenario; the figures in MiB."""
    budget = Config().max_output_bytes_per_connection
    with tempfile.TemporaryDirectory(prefix="rustka-slow-reader-") as tmp:
        broker = start_broker(Path(tmp) / "data")
        with broker:
            port = broker.port
            value = bytes(range(256)) * (record_kib * 1024 // 256)
            [info, produced] = call_many(
                port, [p.CreateTopic(TOPIC, 1), p.Produce(TOPIC, b"k", value)]
            )
            if not isinstance(produced, p.Produced):
                raise SystemExit(f"setup failed: {info} {produced}")
            before = _sample(broker, 1.0)
            request = _frame(p.Fetch(TOPIC, 0, produced.offset)) * fetches
            socks = []
            for _ in range(clients):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect(("127.0.0.1", port))
                sock.sendall(request)
                socks.append(sock)
            peak = _sample(broker, hold)
            for sock in socks:
                sock.close()
            _sample(broker, after)
            settled = broker.rss_kib()  # type: ignore[attr-defined]
            broker.stop()
    mib = 1024.0
    return {
        "record_kib": record_kib,
        "fetches": fetches,
        "clients": clients,
        "budget_mib": budget / 1024 / 1024,
        "rss_before_mib": before / mib,
        "peak_growth_mib": (peak - before) / mib,
        "peak_growth_per_client_in_budgets": (peak - before) * 1024 / budget / clients,
        "growth_after_clients_left_mib": (settled - before) / mib,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--record-kib", type=int, default=512, help="record size (default 512)")
    ap.add_argument("--fetches", type=int, default=2000, help="seed Fetches per client")
    ap.add_argument("--clients", type=int, default=1, help="clients that never read")
    ap.add_argument("--hold", type=float, default=8.0, help="seconds the clients stay")
    ap.add_argument("--after", type=float, default=4.0, help="seconds sampled after they go")
    ap.add_argument("--runs", type=int, default=1, help="runs, each with a fresh broker")
    ap.add_argument("--json", action="store_true", help="print JSON lines")
    args = ap.parse_args(argv)
    for run in range(1, args.runs + 1):
        result = measure(args.record_kib, args.fetches, args.clients, args.hold, args.after)
        if args.json:
            print(json.dumps(result))
            continue
        print(
            f"run {run}: {args.clients} x {args.fetches} Fetches of {args.record_kib} KiB, "
            f"budget {result['budget_mib']:.0f} MiB: RSS {result['rss_before_mib']:.0f} MiB "
            f"before, peak +{result['peak_growth_mib']:.1f} MiB "
            f"({result['peak_growth_per_client_in_budgets']:.2f} budgets per client), "
            f"+{result['growth_after_clients_left_mib']:.1f} MiB after the clients left"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
