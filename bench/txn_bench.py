"""What transactions cost: K1 from a transactional producer (a commit every 1,000
records) against plain K1, in the same run (docs/performance.md, "Transactions").

    .venv/bin/python bench/txn_bench.py [--quick] [--rounds N] [--flush always,interval]
                                        [--no-peers] [--json PATH]

Each round starts, for each system, a fresh broker: `twistd rustka` once per
``--flush`` mode (``always`` is the harness's rustka), and Tansu (memory
storage, no disk; tools/tansu.py) when it is installed, as the same client's
ratio against a broker with nothing to fsync. It runs bench/kafka_driver.py's K1
and K1T into new topics, alternating which goes first. The table shows medians,
K1T over K1 per system, and for rustka the broker's mean time per request of
the transaction's three requests (from its request-duration metrics). Issue
20's target is K1T at 0.7 of K1 or better.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _common import TwistdBroker, run_driver  # noqa: E402

from tools import tansu  # noqa: E402

COUNTS = {"K1": (1_000_000, 100_000), "K1T": (1_000_000, 100_000)}

#: The requests of a transaction, whose time in the broker the table shows.
APIS = ("AddPartitionsToTxn", "Produce", "EndTxn")


def _request_totals(broker: TwistdBroker) -> dict[str, tuple[float, float]]:
    """(seconds, count) the broker has spent on each of APIS so far."""
    family = "rustka_kafka_request_duration_seconds"
    return {
        api: (
            broker.metric(f'{family}_sum{{api="{api}"}}'),
            broker.metric(f'{family}_count{{api="{api}"}}'),
        )
        for api in APIS
    }


def _run(spec: dict[str, Any]) -> float:
    result = run_driver("kafka_driver.py", spec)
    if not result.get("ok", True):
        raise RuntimeError(f"{spec['workload']}: {result.get('note')}")
    return float(result["records"] / result["seconds"])


def rustka_round(
    work: Path, flush: str, order: list[str], counts: dict[str, int]
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Each workload's records/s, and the broker's mean ms per request of each API."""
    data_dir = work / f"data-{flush}"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    broker = TwistdBroker(data_dir, {"flush": flush})
    try:
        rates, in_broker = {}, {}
        for workload in order:
            before = _request_totals(broker)
            rates[workload] = _run(
                broker.spec(workload, f"bench-{workload.lower()}", counts[workload])
            )
            after = _request_totals(broker)
            in_broker[workload] = {
                api: (after[api][0] - before[api][0]) * 1000 / (after[api][1] - before[api][1])
                for api in APIS
                if after[api][1] > before[api][1]
            }
        return rates, in_broker
    finally:
        broker.stop()


def tansu_round(
    work: Path, exe: str, round_number: int, order: list[str], counts: dict[str, int]
) -> dict[str, float]:
    proc, port = tansu.start(exe, work / "tansu.log")
    try:
        return {
            workload: _run(
                {
                    "workload": workload,
                    "host": "127.0.0.1",
                    "port": port,
                    "server_pid": proc.pid,
                    "name": f"bench-{workload.lower()}-{round_number}",
                    "count": counts[workload],
                }
            )
            for workload in order
        }
    finally:
        tansu.stop(proc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts, one round")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 3, quick 1)")
    ap.add_argument("--flush", default="always,interval", help="rustka's flush modes")
    ap.add_argument("--no-peers", action="store_true", help="rustka only (no Tansu)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    counts = {w: c[1] if args.quick else c[0] for w, c in COUNTS.items()}
    systems = [f"rustka/{mode}" for mode in args.flush.split(",") if mode]
    exe = None if args.no_peers else tansu.binary()
    if exe is not None:
        systems.append("tansu (no disk)")
    rates: dict[str, dict[str, list[float]]] = {s: {w: [] for w in counts} for s in systems}
    times: dict[str, dict[str, list[float]]] = {s: {} for s in systems}
    with tempfile.TemporaryDirectory(prefix="rustka-txn-bench-") as tmp:
        for round_number in range(rounds):
            order = list(counts) if round_number % 2 == 0 else list(reversed(counts))
            # The systems' order rotates too, so the machine's noise hits each alike.
            turn = systems[round_number % len(systems) :] + systems[: round_number % len(systems)]
            for system in turn:
                if system.startswith("rustka/"):
                    got, in_broker = rustka_round(Path(tmp), system[7:], order, counts)
                    for api, ms in in_broker["K1T"].items():
                        times[system].setdefault(api, []).append(ms)
                else:
                    assert exe is not None
                    got = tansu_round(Path(tmp), exe, round_number, order, counts)
                for workload, rate in got.items():
                    rates[system][workload].append(rate)
                line = ", ".join(f"{w} {r / 1000:.1f}K" for w, r in got.items())
                print(f"  round {round_number + 1}: {system}: {line} rec/s", file=sys.stderr)
    print(
        f"{'system':18} {'K1 rec/s':>10} {'K1T rec/s':>10} {'K1T/K1':>7}  broker ms per K1T request"
    )
    table: dict[str, Any] = {"counts": counts, "rounds": rounds, "systems": {}}
    for system in systems:
        k1 = statistics.median(rates[system]["K1"])
        k1t = statistics.median(rates[system]["K1T"])
        spent = ", ".join(
            f"{api} {statistics.median(ms):.2f}" for api, ms in sorted(times[system].items())
        )
        print(f"{system:18} {k1:10,.0f} {k1t:10,.0f} {k1t / k1:7.2f}  {spent}")
        table["systems"][system] = {
            "rates": rates[system],
            "ratio": k1t / k1,
            "broker_ms_per_request": times[system],
        }
    print(f"(counts {counts}, {rounds} rounds, medians)")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
