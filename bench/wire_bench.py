"""Micro-benchmark of the codecs, per record: where a client or broker CPU goes.

    .venv/bin/python bench/wire_bench.py [--quick]

Seed Produce (op 1) costs a request decode, its share of the batch its burst
is stored as, and a response encode per record; batched produce costs validate_batches per
batch; the consumer pays decode_records per record. Knowing each cost tells
which path can reach a million records per second in CPython and which cannot.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rustka.broker.produce import seed_batches
from rustka.native import codec as p
from rustka.partitioner import partition_for_key
from rustka.record.batch import (
    Record,
    decode_records,
    encode_batch,
    parse_header,
    validate_batches,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import VALUE, key_for

BATCH = 1000


def bench(label: str, per_call_records: int, fn: Callable[[], object], seconds: float) -> None:
    """Run fn repeatedly for about `seconds`; print ns per record and records/s."""
    calls = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(10):
            fn()
        calls += 10
    elapsed = time.perf_counter() - start
    per_record = elapsed / (calls * per_call_records)
    print(f"{label:<52}{per_record * 1e9:>10.0f} ns/record{1 / per_record:>14,.0f} records/s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="0.2 s per case instead of 1 s")
    args = ap.parse_args(argv)
    seconds = 0.2 if args.quick else 1.0

    records = [Record(key_for(i), VALUE) for i in range(BATCH)]
    batch = encode_batch(records)
    produce = p.encode_request(p.Produce("bench", key_for(1), VALUE))
    produce_batch = p.encode_request(p.ProduceBatch("bench", 0, batch))
    fetched = p.encode_response(p.Batches(0, BATCH, batch))
    produced = p.encode_response(p.Produced(0, 1))
    one = [Record(key_for(1), VALUE)]

    print(f"116-byte records (16-byte key, 100-byte value); batches of {BATCH}")
    bench("seed Produce: decode_request", 1, lambda: p.decode_request(produce), seconds)
    bench("seed Produce: encode_batch of one record", 1, lambda: encode_batch(one), seconds)
    burst = [p.Produce("bench", key_for(i), VALUE) for i in range(256)]
    bench("seed Produce: a burst of 256 as one batch", 256, lambda: seed_batches(burst), seconds)
    bench(
        "seed Produce: response_parts(Produced)",
        1,
        lambda: p.response_parts(p.Produced(0, 1)),
        seconds,
    )
    key = key_for(1)
    bench("routing: partition_for_key (murmur2)", 1, lambda: partition_for_key(key, 3), seconds)
    bench(
        "client: request_parts(Produce)",
        1,
        lambda: p.request_parts(p.Produce("bench", key_for(1), VALUE)),
        seconds,
    )
    bench("client: decode_response(Produced)", 1, lambda: p.decode_response(produced), seconds)
    bench("producer: Record(key, value)", 1, lambda: Record(key, VALUE), seconds)
    bench(
        "producer: Record() + encode_batch",
        BATCH,
        lambda: encode_batch([Record(key_for(1), VALUE) for _ in range(BATCH)]),
        seconds,
    )
    bench("producer: encode_batch of built records", BATCH, lambda: encode_batch(records), seconds)
    bench("broker: parse_header (BatchHeader)", 1, lambda: parse_header(batch), seconds)
    bench(
        "broker: decode_request(ProduceBatch)",
        BATCH,
        lambda: p.decode_request(produce_batch),
        seconds,
    )
    bench("broker: validate_batches (CRC-32C)", BATCH, lambda: validate_batches(batch), seconds)
    bench("client: decode_response(Batches)", BATCH, lambda: p.decode_response(fetched), seconds)
    bench(
        "consumer: decode_records (CRC + Record objects)",
        BATCH,
        lambda: decode_records(batch, 0),
        seconds,
    )
    bench(
        "consumer: decode_records, verify=False",
        BATCH,
        lambda: decode_records(batch, 0, verify=False),
        seconds,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
