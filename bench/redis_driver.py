"""Redis Streams side of the benchmark, with redis-py (and redis-benchmark for W1).

A record is one stream entry whose single field is the 16-byte key and whose
value is the 100-byte value, so the bytes a client ships match rustka's record.
Run as ``python bench/redis_driver.py SPEC_JSON``; prints a JSON Result.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import VALUE, Clock, Result, driver_main, key_for, percentiles

PIPELINE = 1000
READ_COUNT = 1000


def _redis(spec: dict[str, Any]) -> Any:
    import redis

    return redis.Redis(host=spec["host"], port=spec["port"], decode_responses=False)


def _fill(r: Any, stream: str, n: int) -> None:
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(stream, {key_for(i): VALUE})
        if len(pipe) >= PIPELINE:
            pipe.execute()
    if len(pipe):
        pipe.execute()


def w1(spec: dict[str, Any]) -> Result:
    """redis-py pipelined XADD, PIPELINE commands per round trip."""
    r = _redis(spec)
    r.delete(spec["name"])
    clock = Clock(spec["server_pid"])
    clock.start()
    _fill(r, spec["name"], spec["count"])
    result = clock.stop(Result(records=spec["count"], note=f"redis-py pipeline {PIPELINE}"))
    result.ok = r.xlen(spec["name"]) == spec["count"]
    r.delete(spec["name"])
    return result


def w1_benchmark(spec: dict[str, Any]) -> Result:
    """redis-benchmark (C) pipelining XADD -P 1000: the best a Redis client can do."""
    exe = shutil.which("redis-benchmark")
    if exe is None:
        return Result(ok=False, note="redis-benchmark not installed")
    r = _redis(spec)
    r.delete(spec["name"])
    clients = spec.get("clients", 50)  # redis-benchmark's own default, as in the issue
    cmd = [
        exe,
        "-h",
        spec["host"],
        "-p",
        str(spec["port"]),
        "-n",
        str(spec["count"]),
        "-P",
        str(PIPELINE),
        "-c",
        str(clients),
        "-q",
        "XADD",
        spec["name"],
        "*",
        key_for(0).decode(),
        VALUE.hex()[: len(VALUE)],
    ]
    clock = Clock(spec["server_pid"])
    clock.start()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    result = clock.stop(
        Result(records=spec["count"], note=f"redis-benchmark -P {PIPELINE} -c {clients}")
    )
    result.ok = r.xlen(spec["name"]) == spec["count"]
    r.delete(spec["name"])
    return result


def w2(spec: dict[str, Any]) -> Result:
    """One XADD at a time."""
    r = _redis(spec)
    stream = spec["name"]
    r.delete(stream)
    for i in range(50):
        r.xadd(stream, {key_for(i): VALUE})
    samples: list[int] = []
    ns = time.perf_counter_ns
    clock = Clock(spec["server_pid"])
    clock.start()
    deadline = time.perf_counter() + spec.get("max_seconds", 5.0)
    for i in range(spec["count"]):
        t0 = ns()
        r.xadd(stream, {key_for(i): VALUE})
        samples.append(ns() - t0)
        if time.perf_counter() > deadline:
            break
    result = clock.stop(Result(records=len(samples)))
    result.p50_us, result.p99_us = percentiles(samples)
    r.delete(stream)
    return result


def load(spec: dict[str, Any]) -> Result:
    r = _redis(spec)
    r.delete(spec["name"])
    _fill(r, spec["name"], spec["count"])
    return Result(records=spec["count"], ok=r.xlen(spec["name"]) == spec["count"])


def w3(spec: dict[str, Any]) -> Result:
    """XREAD COUNT 1000 from the start of the stream into a callback."""
    r = _redis(spec)
    stream = spec["name"]
    n = spec["count"]
    seen = 0
    value_bytes = 0

    def on_record(fields: dict[bytes, bytes]) -> None:
        nonlocal seen, value_bytes
        seen += 1
        for v in fields.values():
            value_bytes += len(v)

    last = b"0-0"
    clock = Clock(spec["server_pid"])
    clock.start()
    while seen < n:
        reply = r.xread({stream: last}, count=READ_COUNT)
        if not reply:
            break
        entries = reply[0][1]
        for _entry_id, fields in entries:
            on_record(fields)
        last = entries[-1][0]
    result = clock.stop(Result(records=seen, note=f"XREAD COUNT {READ_COUNT}"))
    result.ok = seen == n and value_bytes == n * len(VALUE)
    return result


def w5(spec: dict[str, Any]) -> Result:
    """Many connections, each with a pipeline of `window` single XADDs in flight."""
    import redis.asyncio as aioredis

    conns = spec.get("connections", 16)
    window = spec.get("window", 256)
    stream = spec["name"]
    per_conn = spec["count"] // conns
    box: dict[str, Result] = {}

    async def main() -> None:
        clients = [
            aioredis.Redis(host=spec["host"], port=spec["port"], single_connection_client=True)
            for _ in range(conns)
        ]
        for c in clients:
            await c.ping()
        await clients[0].delete(stream)

        async def run(c: Any, base: int) -> int:
            acked = 0
            for start in range(base, base + per_conn, window):
                pipe = c.pipeline(transaction=False)
                for i in range(start, min(start + window, base + per_conn)):
                    pipe.xadd(stream, {key_for(i): VALUE})
                acked += len(await pipe.execute())
            return acked

        clock = Clock(spec["server_pid"])
        clock.start()
        acked = sum(await asyncio.gather(*(run(c, k * per_conn) for k, c in enumerate(clients))))
        result = clock.stop(Result(records=acked, note=f"{conns} connections x pipeline {window}"))
        result.ok = acked == per_conn * conns and await clients[0].xlen(stream) == acked
        await clients[0].delete(stream)
        for c in clients:
            await c.aclose()
        box["result"] = result

    asyncio.run(main())
    return box["result"]


WORKLOADS = {"W1": w1, "W1-bench": w1_benchmark, "W2": w2, "W3": w3, "W5": w5, "LOAD": load}


def run(spec: dict[str, Any]) -> Result:
    return WORKLOADS[spec["workload"]](spec)


if __name__ == "__main__":
    driver_main(run)
