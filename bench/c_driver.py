"""The C client's side of the benchmark: bench/c/rdkafka_bench.c on librdkafka.

Run by bench/harness.py as ``python bench/c_driver.py SPEC_JSON``; prints a JSON
Result like the other drivers. The Python drivers cost more CPU per record than
the brokers they drive (docs/performance.md, "Kafka protocol"); this one hands the
records to a small C program, so its rows show what the broker does.

The program is compiled here at first use with Debian's ``librdkafka-dev``
(``cc ... -lrdkafka``) into ``.cache/bench-c/<hash>/``, keyed by the source, the
compiler and the headers, so an edit rebuilds it and nothing else does. At run
time it loads, by default, the newer librdkafka the confluent-kafka wheel ships
(a ``librdkafka.so.1`` link to it in ``.cache/bench-c/wheel-lib/``): Debian's
2.0.2 fails ApiVersions against Tansu 0.6 ("Read underflow"), and the same
library for every broker keeps the rows comparable. ``"librdkafka": "system"``
in the spec runs it on Debian's instead (rustka only).

Workloads (spec["workload"]), each checked by the C program itself:

- ``K1`` one producer, ``count`` records to partition 0, acks=all, linger 5 ms,
  1 MiB batches; every record acknowledged, offsets contiguous.
- ``K5`` ``producers`` producers (16) x ``partitions`` partitions (64): record i to
  partition i % 64, each producer its own connection and thread; every record
  acknowledged, each partition's offsets contiguous.
- ``K3`` / ``K6`` one consumer assigned every partition of a loaded topic (1 for
  K3, 64 for K6, so librdkafka asks for all 64 in each Fetch) from offset 0; each
  partition's offsets 0, 1, 2... in order, every value intact.
- ``LOAD`` fill the K3/K6 topic with the C producer (not measured).
- ``PROBE`` Kafka Metadata answered (bench/kafka_driver.py's probe).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, Result, driver_main

SOURCE = ROOT / "bench" / "c" / "rdkafka_bench.c"
CACHE = ROOT / ".cache" / "bench-c"
HEADER = Path("/usr/include/librdkafka/rdkafka.h")
PRODUCERS = 16
TIMEOUT = 60.0
IDLE_SECONDS = 30


class BuildError(RuntimeError):
    """The C program could not be built: says which package or tool is missing."""


def build() -> Path:
    """The compiled program, built once per (source, compiler, headers) under .cache/."""
    cc = shutil.which("cc")
    if cc is None:
        raise BuildError("no C compiler: apt-get install build-essential")
    if not HEADER.exists():
        raise BuildError(f"{HEADER} is missing: apt-get install librdkafka-dev")
    compiler = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    digest = hashlib.sha256()
    for part in (SOURCE.read_bytes(), compiler.encode(), HEADER.read_bytes()):
        digest.update(hashlib.sha256(part).digest())
    out = CACHE / digest.hexdigest()[:16] / "rdkafka_bench"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f"rdkafka_bench.{os.getpid()}.tmp")
    cmd = [cc, "-O2", "-Wall", "-o", str(partial), str(SOURCE), "-lrdkafka", "-lpthread"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BuildError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    partial.replace(out)  # atomic: a concurrent build never runs a half-written file
    return out


def wheel_library() -> Path | None:
    """The librdkafka shared object inside the installed confluent-kafka wheel, if any."""
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*")) if libs.is_dir() else []
    return found[0] if found else None


def environment(library: str) -> dict[str, str]:
    """The program's environment: ``wheel`` puts the wheel's librdkafka first in the path."""
    env = dict(os.environ)
    if library == "system":
        return env
    lib = wheel_library()
    if lib is None:
        raise BuildError("confluent-kafka's wheel has no bundled librdkafka to load")
    directory = CACHE / "wheel-lib"
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / "librdkafka.so.1"
    if not link.exists() or link.resolve() != lib:
        temp = directory / f"librdkafka.so.1.{os.getpid()}.tmp"
        temp.unlink(missing_ok=True)
        temp.symlink_to(lib)
        temp.replace(link)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(directory), env.get("LD_LIBRARY_PATH", "")) if p
    )
    return env


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """A topic of ``partitions`` partitions; an existing one must have that many."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
    )
    try:
        futures[topic].result(TIMEOUT)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
        have = len(admin.list_topics(topic, timeout=TIMEOUT).topics[topic].partitions)
        if have != partitions:
            raise RuntimeError(f"topic {topic} has {have} partitions, not {partitions}") from exc


def program(spec: dict[str, Any], args: list[str], stdin: str = "") -> Result:
    """Run the C program and take its JSON line as the result."""
    exe = build()
    env = environment(spec.get("librdkafka", "wheel"))
    done = subprocess.run(
        [str(exe), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT * 10,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = done.stderr.strip()[-400:]
        return Result(ok=False, note=f"rdkafka_bench exited {done.returncode}: {tail}")
    return Result(**json.loads(lines[-1]))


def produce(spec: dict[str, Any], partitions: int, producers: int) -> Result:
    bootstrap = f"{spec['host']}:{spec['port']}"
    ensure_topic(bootstrap, spec["name"], partitions)
    args = [
        "produce",
        bootstrap,
        spec["name"],
        str(partitions),
        str(spec["count"]),
        str(producers),
        str(spec["server_pid"]),
    ]
    return program(spec, args)


def consume(spec: dict[str, Any], partitions: int) -> Result:
    bootstrap = f"{spec['host']}:{spec['port']}"
    idle = spec.get("idle_seconds", IDLE_SECONDS)
    args = [
        "consume",
        bootstrap,
        spec["name"],
        str(partitions),
        str(spec["count"]),
        str(spec["server_pid"]),
        str(idle),
    ]
    return program(spec, args)


def probe(spec: dict[str, Any]) -> Result:
    import kafka_driver

    return kafka_driver.probe(spec)


def run(spec: dict[str, Any]) -> Result:
    workload = spec["workload"]
    partitions = spec.get("partitions", 1)
    if workload == "K1":
        return produce(spec, partitions, 1)
    if workload == "K5":
        return produce(spec, partitions, spec.get("producers", PRODUCERS))
    if workload == "LOAD":
        result = produce(spec, partitions, 1)
        result.seconds = 0.0  # not measured
        return result
    if workload in ("K3", "K6"):
        return consume(spec, partitions)
    if workload == "PROBE":
        return probe(spec)
    raise ValueError(f"unknown workload {workload!r}")


if __name__ == "__main__":
    driver_main(run)
