"""What transactions cost: K1 from a transactional producer (a commit every 1,000
records) against plain K1, in the same run (docs/performance.md, "Transactions").

    .venv/bin/python bench/txn_bench.py [--quick] [--rounds N] [--json PATH]

Each round starts a fresh `twistd rustka` (flush = always, as the harness's
rustka) and runs bench/kafka_driver.py's K1 and K1T into new topics, alternating
which goes first; the table shows medians and K1T over K1. Issue 20's target
is at least 0.7.
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

COUNTS = {"K1": (1_000_000, 100_000), "K1T": (1_000_000, 100_000)}


def run_round(work: Path, order: list[str], counts: dict[str, int]) -> dict[str, float]:
    data_dir = work / "data"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    broker = TwistdBroker(data_dir, {"flush": "always"})
    try:
        rates = {}
        for workload in order:
            spec = broker.spec(workload, f"bench-{workload.lower()}", counts[workload])
            result = run_driver("kafka_driver.py", spec)
            if not result.get("ok", True):
                raise RuntimeError(f"{workload}: {result.get('note')}")
            rates[workload] = result["records"] / result["seconds"]
        return rates
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts, one round")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 3, quick 1)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    counts = {w: c[1] if args.quick else c[0] for w, c in COUNTS.items()}
    rates: dict[str, list[float]] = {w: [] for w in counts}
    with tempfile.TemporaryDirectory(prefix="rustka-txn-bench-") as tmp:
        for round_number in range(rounds):
            order = list(counts) if round_number % 2 == 0 else list(reversed(counts))
            got = run_round(Path(tmp), order, counts)
            for workload, rate in got.items():
                rates[workload].append(rate)
            line = ", ".join(f"{w} {r / 1000:.1f} K rec/s" for w, r in got.items())
            print(f"  round {round_number + 1}: {line}", file=sys.stderr)
    medians = {w: statistics.median(r) for w, r in rates.items()}
    ratio = medians["K1T"] / medians["K1"]
    for workload, median in medians.items():
        print(f"{workload:4} {median / 1000:8.1f} K rec/s")
    print(f"K1T / K1 = {ratio:.2f} (counts {counts}, {rounds} rounds, medians)")
    if args.json:
        table: dict[str, Any] = {"counts": counts, "rounds": rounds, "rates": rates}
        table["ratio"] = ratio
        args.json.write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
