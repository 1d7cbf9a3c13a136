"""Startup time with a big log: after a clean stop, and after a crash.

    .venv/bin/python bench/startup.py [--quick] [--gib 1.0] [--segment-bytes 1GiB]

Builds a data dir holding one partition with at least ``--gib`` GiB of record
batches (written in-process through the storage layer, then closed cleanly so
the clean-shutdown marker exists), and times a real ``twistd rustka`` from exec
to "storage ready":

- empty: a fresh data dir (the cost of Python, Twisted and the plugin alone);
- clean: the marker is present, so only the index files and a bounded tail of
  the active segment are read;
- crash: the broker was SIGKILLed, so the segments after the recovery point
  (the active one) are scanned batch by batch with their CRC-32C checked.

With the default 1 GiB segments the whole log is the active segment, which is
the worst case for crash recovery. The log sits in the page cache after it is
written; a cold-cache start would add the time to read it from disk.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rustka.config import parse_size
from rustka.record.batch import Record, encode_batch
from rustka.storage.log_config import LogConfig
from rustka.storage.log_manager import LogManager
from tools.twistd_process import RECOVERY, Twistd, start_broker

VALUE = b"v" * 1000


def build(
    data_dir: Path, target_bytes: int, segment_bytes: int, batch_records: int
) -> tuple[int, int, float]:
    """Write at least ``target_bytes`` of log; return (bytes, records, seconds)."""
    started = time.perf_counter()
    config = LogConfig(
        segment_bytes=segment_bytes, segment_ms=None, retention_ms=None, flush="never"
    )
    logs = LogManager.open(data_dir, config)
    plog = logs.get_or_create("big", 1).partition(0)
    batch = encode_batch(
        [Record(key=b"key-%06d" % i, value=VALUE) for i in range(batch_records)], timestamp=1
    )
    while plog.size_bytes < target_bytes:
        plog.append(batch)
    size, records = plog.size_bytes, plog.end_offset
    logs.close()
    return size, records, time.perf_counter() - started


def timed_start(data_dir: Path) -> tuple[float, Twistd]:
    started = time.perf_counter()
    broker = start_broker(data_dir, timeout=600)
    return time.perf_counter() - started, broker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.0, help="log size to build (GiB)")
    parser.add_argument("--segment-bytes", default="1GiB", help="segment size (default 1GiB)")
    parser.add_argument("--quick", action="store_true", help="a 128 MiB log instead")
    parser.add_argument("--keep", type=Path, help="build the data dir here and keep it")
    parser.add_argument(
        "--batch-records",
        type=int,
        default=16,
        help="records of ~1 KiB per stored batch (default 16: ~16 KiB batches, the size a "
        "busy batching producer sends); recovery works per batch, so smaller is slower",
    )
    args = parser.parse_args(argv)
    target = 128 * 1024**2 if args.quick else int(args.gib * 1024**3)
    segment_bytes = parse_size("--segment-bytes", args.segment_bytes)

    root = args.keep or Path(tempfile.mkdtemp(prefix="rustka-startup-"))
    try:
        empty_s, broker = timed_start(root / "empty")
        broker.stop()

        data = root / "data"
        size, records, build_s = build(data, target, segment_bytes, args.batch_records)
        print(f"built {size / 1024**3:.2f} GiB, {records:,} records in {build_s:.1f} s")

        clean_s, broker = timed_start(data)
        clean_recovered = broker.logged(RECOVERY)
        broker.kill()

        crash_s, broker = timed_start(data)
        crash_recovered = broker.logged(RECOVERY)
        broker.stop()

        segments = len(list((data / "big" / "0").glob("*.log")))
        batches = records // args.batch_records
        print(f"\nlog: {size:,} bytes, {segments} segment(s), ", end="")
        print(f"{records:,} records, {batches:,} batches")
        print(f"{'start':<32}{'seconds':>10}  recovery scan")
        print(f"{'empty data dir (baseline)':<32}{empty_s:>10.2f}  -")
        print(f"{'after a clean stop':<32}{clean_s:>10.2f}  {'yes' if clean_recovered else 'no'}")
        print(f"{'after SIGKILL':<32}{crash_s:>10.2f}  {'yes' if crash_recovered else 'no'}")
        scanned = crash_s - clean_s
        if scanned > 0:
            rate = size / scanned / 1024**2
            print(f"\ncrash recovery cost {scanned:.2f} s more: ~{rate:,.0f} MiB/s scanned")
        if clean_recovered or not crash_recovered:
            print("unexpected: a clean start scanned, or a crash start did not", file=sys.stderr)
            return 1
        return 0
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
