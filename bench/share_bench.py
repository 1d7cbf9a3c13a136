"""A share group (KIP-932) against a classic consumer group reading the same records,
in the same run (docs/kafka.md, "Share groups (KIP-932)", "Figures").

    .venv/bin/python bench/share_bench.py [--quick] [--rounds N] [--json PATH]

Starts one ``twistd rustka`` (default settings), writes N records to a one-partition
topic with confluent-kafka, then reads them all, in turn, with confluent-kafka's
classic `Consumer` (a group, auto commit) and with its `ShareConsumer` (implicit
acknowledgement: each poll accepts the previous one's records, so every record costs
an acquisition and an acceptance, each fsynced in the share-state log), each with a
group of its own. Reported per reader: records/s from subscribing to the last record
(the broker starts without the initial rebalance delay, so a classic group's join
costs one round of JoinGroup/SyncGroup, as a share group's costs one heartbeat), the
broker's CPU per 100,000 records, and the share group's ratio to the classic group.
Each round alternates the order of the two readers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _common import TwistdBroker, process_cpu  # noqa: E402

TOPIC = "bench-share"


def _produce(bootstrap: str, count: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(count):
        producer.produce(TOPIC, b"v%09d" % i)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("records not delivered")


def _read(consumer: Any, count: int, batch: bool) -> None:
    """Poll until ``count`` records are in; a hard bound of 10 minutes."""
    got = 0
    deadline = time.monotonic() + 600
    while got < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"read {got} of {count} records in time")
        messages = consumer.poll(1.0) if batch else consumer.consume(500, 1.0)
        got += sum(1 for m in messages if m.error() is None)


def classic(bootstrap: str, count: int, group: str) -> float:
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
        }
    )
    t0 = time.perf_counter()
    c.subscribe([TOPIC])
    try:
        _read(c, count, batch=False)
        return time.perf_counter() - t0
    finally:
        c.close()


def share(bootstrap: str, count: int, group: str) -> float:
    from confluent_kafka import ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    t0 = time.perf_counter()
    c.subscribe([TOPIC])
    try:
        _read(c, count, batch=True)
        c.commit_sync(60)
        return time.perf_counter() - t0
    finally:
        c.close()


def measure(broker: TwistdBroker, reader: Any, count: int, group: str) -> dict[str, float]:
    bootstrap = f"127.0.0.1:{broker.port}"
    cpu0 = process_cpu(broker.proc.pid)
    seconds = reader(bootstrap, count, group)
    cpu = process_cpu(broker.proc.pid) - cpu0
    return {"rec_s": count / seconds, "broker_cpu_s_per_100k": cpu * 100_000 / count}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20,000 records, one round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    count = 20_000 if args.quick else args.count
    rounds = 1 if args.quick else args.rounds
    with tempfile.TemporaryDirectory(prefix="share-bench-") as work:
        data = Path(work) / "data"
        data.mkdir()
        # share.auto.offset.reset is latest by default: the bench reads what is there.
        settings = {"share_auto_offset_reset": "earliest", "group_initial_rebalance_delay_ms": 0}
        broker = TwistdBroker(data, settings)
        try:
            _produce(f"127.0.0.1:{broker.port}", count)
            rows: dict[str, list[dict[str, float]]] = {"classic": [], "share": []}
            for r in range(rounds):
                order = [("classic", classic), ("share", share)]
                for name, reader in order if r % 2 == 0 else order[::-1]:
                    rows[name].append(measure(broker, reader, count, f"{name}-{r}"))
        finally:
            broker.stop()
    result: dict[str, Any] = {"records": count, "rounds": rounds}
    for name, runs in rows.items():
        result[name] = {
            key: statistics.median(run[key] for run in runs)
            for key in ("rec_s", "broker_cpu_s_per_100k")
        }
    result["share_vs_classic_rec_s"] = result["share"]["rec_s"] / result["classic"]["rec_s"]
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
