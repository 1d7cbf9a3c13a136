"""The log cleaner's costs: how fast it cleans, the memory of its key map, and what it takes
from produce while it runs (docs/performance.md, "Log cleaner").

    .venv/bin/python bench/cleaner_bench.py [--quick] [--rounds N] [--json PATH]

1. Cleaner throughput: a compacted partition log of K1-shaped records (16-byte
   keys, 100-byte values, 1000-record batches) with 8 versions of each key is
   cleaned in this process with storage's `Cleaning` and no rate limit; MB of
   log cleaned per second (the log's size over the round's wall time), with the
   bytes read and written.
2. Key map memory: one million 16-byte keys (200,000 with --quick, scaled) put
   into an `OffsetMap`; what tracemalloc sees (current and peak), next to what
   the map counts against cleaner_dedupe_buffer_bytes.
3. K1 with and without the cleaner, in the same run: a `twistd rustka` broker
   (flush = always, the broker-wide cleanup_policy = "compact") whose data dir
   holds a dirty partition (the churn topic, written here before the broker
   starts) runs bench/kafka_driver.py's K1 into a new topic, once with
   cleaner_enabled = false and once with the cleaner cleaning the churn topic
   the whole time (its bytes are read from /metrics before and after K1 to
   show it was), at the default cleaner_io_max_bytes_per_second and with no
   limit. Rounds alternate the broker variants; the table shows medians and
   each variant's K1 rate as a ratio of the one without the cleaner.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _common import VALUE, TwistdBroker, key_for, process_cpu, run_driver  # noqa: E402

from rustka.config import Config  # noqa: E402
from rustka.record.batch import Record, encode_batch, ms_now  # noqa: E402
from rustka.storage.cleaner import Cleaning, OffsetMap, map_entry_bytes  # noqa: E402
from rustka.storage.log_config import LogConfig  # noqa: E402
from rustka.storage.partition_log import PartitionLog  # noqa: E402

SEGMENT_BYTES = 16 * 1024 * 1024
BATCH = 1000
MB = 1_000_000


def churn_log(directory: Path, megabytes: int, keys: int) -> int:
    """A compacted log of ``megabytes`` of K1-shaped records over ``keys`` keys; its bytes."""
    config = LogConfig(
        cleanup_policy="compact", segment_bytes=SEGMENT_BYTES, segment_ms=None, flush="never"
    )
    log = PartitionLog.open(directory, config)
    now = ms_now()
    i = 0
    while log.size_bytes < megabytes * MB:
        records = [Record(key_for((i + j) % keys), VALUE, timestamp=now) for j in range(BATCH)]
        log.append(encode_batch(records))
        i += BATCH
    log.roll()
    size = log.size_bytes
    log.close()
    return size


def cleaner_throughput(megabytes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "churn" / "0"
        records = megabytes * MB // 130
        size = churn_log(directory, megabytes, max(1, records // 8))
        config = LogConfig(
            cleanup_policy="compact", segment_bytes=SEGMENT_BYTES, segment_ms=None, flush="never"
        )
        log = PartitionLog.open(directory, config)
        cleaning = Cleaning(log, map_bytes=Config().cleaner_dedupe_buffer_bytes, now_ms=ms_now())
        started = time.perf_counter()
        cpu = time.process_time()
        while not cleaning.done:
            cleaning.step(1 << 20)
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu
        stats = cleaning.stats
        after = log.size_bytes
        log.close()
    return {
        "log_mb": size / MB,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "mb_per_s": size / MB / seconds,
        "read_mb_per_s": stats.bytes_read / MB / seconds,
        "written_mb": stats.bytes_written / MB,
        "kept_mb": after / MB,
        "keys": stats.keys_mapped,
        "records": stats.records_read,
    }


def key_map_memory(keys: int) -> dict[str, Any]:
    tracemalloc.start()
    offset_map = OffsetMap(1 << 40)
    for i in range(keys):
        offset_map.put(key_for(i), 1_000_000 + i)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    scale = 1_000_000 / keys
    return {
        "keys": keys,
        "mb_per_million_keys": current * scale / MB,
        "peak_mb_per_million_keys": peak * scale / MB,
        "counted_mb_per_million_keys": offset_map.memory_used * scale / MB,
        "bound_bytes_per_key": map_entry_bytes(16),
    }


# --------------------------------------------------------------------------- K1


def moved(broker: TwistdBroker) -> float:
    """Bytes the cleaner read and wrote so far."""
    read = broker.metric("rustka_cleaner_bytes_read_total")
    return read + broker.metric("rustka_cleaner_bytes_written_total")


def k1(broker: TwistdBroker, count: int, topic: str) -> dict[str, Any]:
    return run_driver("kafka_driver.py", broker.spec("K1", topic, count))


def variants(limits: list[str]) -> dict[str, dict[str, Any]]:
    """The broker variants: no cleaner, then the cleaner at each rate limit ("default",
    "none", or a size such as "4MiB")."""
    out: dict[str, dict[str, Any]] = {"no cleaner": {"cleaner_enabled": False}}
    for limit in limits:
        if limit == "default":
            default = Config().cleaner_io_max_bytes_per_second or 0
            out[f"cleaner (default, {default / MB:.1f} MB/s)"] = {"cleaner_enabled": True}
        elif limit == "none":
            out["cleaner (no limit)"] = {
                "cleaner_enabled": True,
                "cleaner_io_max_bytes_per_second": -1,
            }
        else:
            out[f"cleaner ({limit}/s)"] = {
                "cleaner_enabled": True,
                "cleaner_io_max_bytes_per_second": limit,
            }
    return out


def k1_with_and_without(
    base: Path, churn_mb: int, count: int, rounds: int, limits: list[str]
) -> dict[str, Any]:
    pristine = base / "pristine"
    churn_log(pristine / "churn" / "0", churn_mb, max(1, churn_mb * MB // 130 // 8))
    common = {
        "cleanup_policy": "compact",
        "segment_bytes": SEGMENT_BYTES,
        "flush": "always",
        "cleaner_backoff_ms": 50,
    }
    chosen = variants(limits)
    rates: dict[str, list[float]] = {name: [] for name in chosen}
    cleaned: dict[str, list[float]] = {name: [] for name in chosen}
    cpu_per_mb: dict[str, list[float]] = {name: [] for name in chosen}
    for round_number in range(rounds):
        for name, settings in chosen.items():
            data_dir = base / f"data-{round_number}-{len(rates[name])}-{abs(hash(name))}"
            shutil.copytree(pristine, data_dir)
            broker = TwistdBroker(data_dir, {**common, **settings})
            try:
                if settings["cleaner_enabled"]:
                    # Wait until the cleaner is on the churn topic, so K1 runs beside it.
                    deadline = time.monotonic() + 60
                    while broker.metric("rustka_cleaner_bytes_read_total") == 0:
                        if time.monotonic() > deadline:
                            raise RuntimeError("the cleaner did not start")
                        time.sleep(0.05)
                    # The cleaner alone for a while: its CPU per MB it moves, which
                    # the load of other processes on the machine does not change.
                    moved0, cpu0 = moved(broker), process_cpu(broker.proc.pid)
                    time.sleep(3)
                    moved1, cpu1 = moved(broker), process_cpu(broker.proc.pid)
                    if moved1 > moved0:
                        cpu_per_mb[name].append((cpu1 - cpu0) / ((moved1 - moved0) / MB))
                before = moved(broker)
                rounds_before = broker.metric("rustka_cleaner_rounds_total")
                started = time.monotonic()
                try:
                    result = k1(broker, count, "k1")
                except RuntimeError as e:
                    tail = broker.log.read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"{name}: {e}\nbroker log:\n{tail}") from None
                window = time.monotonic() - started
                after = moved(broker)
                rounds_after = broker.metric("rustka_cleaner_rounds_total")
            finally:
                broker.stop()
                shutil.rmtree(data_dir, ignore_errors=True)
            rate = result["records"] / result["seconds"]
            rates[name].append(rate)
            # Over the driver process's whole life (start-up and topic creation too):
            # the cleaner's rate around K1, which is what the limit bounds.
            mb_s = (after - before) / MB / window
            cleaned[name].append(mb_s)
            if settings["cleaner_enabled"] and rounds_after != rounds_before:
                print(f"  note: {name}: the churn round ended during K1", file=sys.stderr)
            print(
                f"  round {round_number + 1} {name}: K1 {rate / 1000:.1f} K records/s, "
                f"cleaner read+wrote {mb_s:.1f} MB/s meanwhile",
                file=sys.stderr,
            )
    base_rate = statistics.median(rates["no cleaner"])
    rows = []
    for name in chosen:
        rate = statistics.median(rates[name])
        rows.append(
            {
                "variant": name,
                "k1_records_per_s": rate,
                "ratio": rate / base_rate,
                "cleaner_mb_per_s": statistics.median(cleaned[name]),
                "cleaner_cpu_s_per_mb": (
                    statistics.median(cpu_per_mb[name]) if cpu_per_mb[name] else None
                ),
                "paired_ratios": [
                    r / b for r, b in zip(rates[name], rates["no cleaner"], strict=True)
                ],
                "runs": rates[name],
            }
        )
    return {
        "churn_mb": churn_mb,
        "k1_records": count,
        "default_limit_bytes_per_s": Config().cleaner_io_max_bytes_per_second,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, one round (a few minutes)")
    ap.add_argument("--rounds", type=int, default=None, help="K1 rounds (default 3, quick 1)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--k1-records", type=int, default=None, help="K1 records per run")
    ap.add_argument("--churn-mb", type=int, default=None, help="the dirty partition's size")
    ap.add_argument(
        "--limits",
        default="default,none",
        help='cleaner rate limits to run beside "no cleaner": default, none, or sizes (4MiB)',
    )
    args = ap.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    print("cleaner throughput ...", file=sys.stderr)
    throughput = cleaner_throughput(20 if args.quick else 100)
    print("key map memory ...", file=sys.stderr)
    memory = key_map_memory(200_000 if args.quick else 1_000_000)
    print("K1 with and without the cleaner ...", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        produce = k1_with_and_without(
            Path(tmp),
            args.churn_mb or (150 if args.quick else 600),
            args.k1_records or (100_000 if args.quick else 1_000_000),
            rounds,
            args.limits.split(","),
        )
    results = {"throughput": throughput, "memory": memory, "k1": produce}
    t = throughput
    print(
        f"\ncleaner: {t['log_mb']:.0f} MB log cleaned in {t['seconds']:.1f} s = "
        f"{t['mb_per_s']:.1f} MB/s of log ({t['read_mb_per_s']:.1f} MB/s read, "
        f"{t['written_mb']:.1f} MB written, {t['keys']} keys, cpu {t['cpu_seconds']:.1f} s)"
    )
    m = memory
    print(
        f"key map: {m['mb_per_million_keys']:.0f} MB per million 16-byte keys "
        f"(peak {m['peak_mb_per_million_keys']:.0f} MB; counted against the bound: "
        f"{m['counted_mb_per_million_keys']:.0f} MB, {m['bound_bytes_per_key']} bytes per key)"
    )
    print(f"\nK1 ({produce['k1_records']} records) beside a {produce['churn_mb']} MB dirty log:")
    print(
        f"{'variant':32} {'K1 K rec/s':>11} {'ratio':>7} {'paired':>7} "
        f"{'cleaner r+w MB/s':>17} {'cleaner CPU s/MB':>17}"
    )
    for row in produce["rows"]:
        cpu = row["cleaner_cpu_s_per_mb"]
        print(
            f"{row['variant']:32} {row['k1_records_per_s'] / 1000:11.1f} {row['ratio']:7.2f} "
            f"{statistics.median(row['paired_ratios']):7.2f} {row['cleaner_mb_per_s']:17.1f} "
            f"{'-' if cpu is None else f'{cpu:.3f}':>17}"
        )
    print(
        "ratio: median K1 rate over the median without the cleaner; paired: median of each "
        "round's ratio to that round's run without it"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
