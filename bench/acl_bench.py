"""What authorization costs: K1 and W5 with ACLs on against ACLs off, in the same run
(docs/performance.md, "Authorization").

    .venv/bin/python bench/acl_bench.py [--quick] [--rounds N] [--acls N] [--json PATH]

Authentication happens once per connection; authorization is on every request,
so the cost to measure is the ACL check on the request path. Two `twistd rustka`
broker variants (flush = always, as the harness's rustka):

- ACLs off: authorizer_enabled = false, the default;
- ACLs on: authorizer_enabled = true, with --acls ACLs in the data directory's
  ACL file (half literal, half prefixed, for other users and topics, and the
  one prefixed ALLOW that lets the benchmark's User:ANONYMOUS produce and create),
  so that every request is decided against a realistic set.

Each round runs K1 (bench/kafka_driver.py: confluent-kafka, 1 KB-ish batches of
116-byte records) and W5 (bench/rustka_driver.py: pipelined native seed Produce,
16 connections x 256 in flight) on a fresh broker of each variant, alternating
which goes first; the table shows medians and ACLs-on over ACLs-off.
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

from rustka.security.acl import (  # noqa: E402
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from rustka.security.acl_store import ACL_FILE, save_acls  # noqa: E402

COUNTS = {"K1": (1_000_000, 100_000), "W5": (200_000, 32_000)}
DRIVERS = {"K1": "kafka_driver.py", "W5": "rustka_driver.py"}


def acl_set(count: int) -> list[AclBinding]:
    """``count`` ACLs: the benchmark's grant plus others' literal and prefixed ones."""
    anonymous = "User:ANONYMOUS"
    acls = [
        AclBinding(
            ResourceType.TOPIC,
            "bench-",
            PatternType.PREFIXED,
            anonymous,
            "*",
            Operation.ALL,
            Permission.ALLOW,
        ),
        AclBinding(
            ResourceType.CLUSTER,
            "kafka-cluster",
            PatternType.LITERAL,
            anonymous,
            "*",
            Operation.CREATE,
            Permission.ALLOW,
        ),
    ]
    for i in range(max(0, count - len(acls))):
        pattern = PatternType.PREFIXED if i % 2 else PatternType.LITERAL
        name = f"team{i}-" if i % 2 else f"topic-{i}"
        operation = (Operation.READ, Operation.WRITE, Operation.DESCRIBE)[i % 3]
        acls.append(
            AclBinding(
                ResourceType.TOPIC,
                name,
                pattern,
                f"User:user{i % 50}",
                "*",
                operation,
                Permission.ALLOW,
            )
        )
    return acls


def run_round(
    work: Path,
    variant: str,
    settings: dict[str, Any],
    acls: list[AclBinding],
    counts: dict[str, int],
) -> dict[str, float]:
    data_dir = work / variant.replace(" ", "-")
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    if acls:
        save_acls(data_dir / ACL_FILE, acls)
    broker = TwistdBroker(data_dir, {"flush": "always", **settings})
    try:
        rates = {}
        for workload, count in counts.items():
            spec = broker.spec(workload, f"bench-{workload.lower()}", count)
            result = run_driver(DRIVERS[workload], spec)
            rates[workload] = result["records"] / result["seconds"]
        return rates
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts, one round")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 3, quick 1)")
    ap.add_argument("--acls", type=int, default=300, help="ACLs with authorization on")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    counts = {w: c[1] if args.quick else c[0] for w, c in COUNTS.items()}
    variants: dict[str, tuple[dict[str, Any], list[AclBinding]]] = {
        "ACLs off": ({"authorizer_enabled": False}, []),
        f"ACLs on ({args.acls})": ({"authorizer_enabled": True}, acl_set(args.acls)),
    }
    rates: dict[str, dict[str, list[float]]] = {v: {w: [] for w in counts} for v in variants}
    with tempfile.TemporaryDirectory(prefix="rustka-acl-bench-") as tmp:
        work = Path(tmp)
        for round_number in range(rounds):
            order = list(variants) if round_number % 2 == 0 else list(reversed(variants))
            for variant in order:
                settings, acls = variants[variant]
                got = run_round(work, variant, settings, acls, counts)
                for workload, rate in got.items():
                    rates[variant][workload].append(rate)
                line = ", ".join(f"{w} {r / 1000:.1f} K rec/s" for w, r in got.items())
                print(f"  round {round_number + 1} {variant}: {line}", file=sys.stderr)
    base = next(iter(variants))
    print(f"\n{'variant':20} " + " ".join(f"{w + ' K rec/s':>12} {'ratio':>6}" for w in counts))
    table: dict[str, Any] = {}
    for variant in variants:
        cells = []
        table[variant] = {}
        for workload in counts:
            median = statistics.median(rates[variant][workload])
            ratio = median / statistics.median(rates[base][workload])
            table[variant][workload] = {
                "median": median,
                "ratio": ratio,
                "all": rates[variant][workload],
            }
            cells.append(f"{median / 1000:>12.1f} {ratio:>6.2f}")
        print(f"{variant:20} " + " ".join(cells))
    print(f"\ncounts {counts}, {rounds} rounds, medians; ratio: over {base!r}")
    if args.json:
        args.json.write_text(
            json.dumps({"counts": counts, "rounds": rounds, "results": table}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
