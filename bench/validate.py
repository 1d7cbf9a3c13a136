"""Produce-validator throughput: how many MB/s ``validate_batches`` checks.

    .venv/bin/python bench/validate.py [--quick] [--mib 1]

Every produce path runs ``validate_batches`` on the client's bytes before
anything is stored (docs/protocol.md, ProduceBatch), so its cost is paid per
produced byte. The payload is ``--mib`` MiB of 116-byte records (16-byte key,
100-byte value, the shape bench/_common.py uses for every system) in one batch,
and also split into 64 KiB batches; compressed variants show what decompressing
to validate costs. Each figure is the best of several repetitions.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import RECORD_SIZE, VALUE, key_for
from rustka.record.batch import Record, compress_batch, encode_batch, validate_batches


def payload(total_bytes: int, batch_bytes: int) -> bytes:
    """Batches of 116-byte records adding up to about ``total_bytes``."""
    per_batch = max(1, batch_bytes // (RECORD_SIZE + 8))
    count = max(1, total_bytes // (RECORD_SIZE + 8))
    parts: list[bytes] = []
    for start in range(0, count, per_batch):
        n = min(per_batch, count - start)
        records = [Record(key_for(start + i), VALUE) for i in range(n)]
        parts.append(encode_batch(records, timestamp=1_700_000_000_000))
    return b"".join(parts)


def best_seconds(f: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - started)
    return best


def compressed_payload(total_bytes: int, codec: str) -> bytes:
    """The same records, compressed the way Kafka clients compress them."""
    plain = payload(total_bytes, total_bytes + 1)
    return compress_batch(plain, codec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--mib", type=float, default=1.0, help="payload size in MiB")
    args = parser.parse_args(argv)
    repeat = 5 if args.quick else 20
    total = int(args.mib * 1024 * 1024)
    cases: list[tuple[str, bytes]] = [
        ("one batch, uncompressed", payload(total, total + 1)),
        ("64 KiB batches, uncompressed", payload(total, 64 * 1024)),
    ]
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        cases.append((f"one batch, {codec}", compressed_payload(total, codec)))
    print(f"validate_batches, {args.mib:g} MiB of {RECORD_SIZE}-byte records, best of {repeat}")
    for name, data in cases:
        batches = validate_batches(data)
        records = sum(h.record_count for _, h in batches)
        seconds = best_seconds(lambda data=data: validate_batches(data), repeat)
        mb_per_s = total / seconds / 1e6
        print(
            f"  {name:32s} {len(data):>9d} bytes {records:>6d} records "
            f"{seconds * 1000:8.2f} ms {mb_per_s:8.1f} MB/s (uncompressed MB)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
