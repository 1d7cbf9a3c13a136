"""The broker's CPU per request, split by stage, from a profile of the broker alone.

    .venv/bin/python bench/stage_budget.py [--quick] [--only W2,K2,K5]
                                           [--flush interval,always] [--rate 1000]
                                           [--json PATH] [--profiles DIR]
    .venv/bin/python bench/stage_budget.py --compare OLD.json NEW.json

Issue 33 asks that every change to the small-request path show which stage of a
request it made cheaper. For each flush mode one ``twistd rustka`` is started
(bench/_common.py's TwistdBroker, metrics on a port of its own), and for each
workload:

1. its topic is created (so topic creation is outside the window),
2. py-spy starts sampling the broker (every thread, ``--nonblocking`` so the
   broker is never paused, ``--rate`` per second; a thread blocked in one of
   ``WAITS`` is left out, as py-spy here cannot tell it from a busy one),
3. the broker's CPU seconds (utime + stime from /proc/<pid>/stat, every
   thread) and its request counters (the metrics endpoint) are read,
4. the workload's driver runs (bench/rustka_driver.py W2, bench/kafka_driver.py
   K2, bench/c_driver.py K5), then CPU and counters are read again and py-spy
   stops.

The unit is what the broker counted, never what the client says it sent: a
Produce request for W2 (native ``produce`` op) and K2 (Kafka ``Produce``), and
for K5 a partition-batch, one partition's batch of one Produce request, counted
as the record batches stored in the topic's 64 partition logs after the run.

Each sample is given to ONE stage: the innermost frame of its stack that a rule
of ``RULES`` below matches (module and function). ``µs per unit`` is the stage's
share of the samples times the broker's CPU per unit. This is an estimate: the
shares rest on the sample counts printed beside them (the ``±`` column is two
binomial standard errors), a thread waiting for the GIL or a lock is idle and
not sampled at all, and time in C (crc32c, os.write, fsync, socket calls) is
counted to the Python frame that called it, fsync's wait for the disk
included (so ``append`` at ``flush=always`` is an upper bound). The CPU of
the waits themselves (the system calls that put a thread to sleep and wake it)
is in no stage: every stage's share grows by as much, which the user/system
split printed per run helps to judge. ``coverage`` is samples / rate over the
measured CPU, a sign of how thin (or, on a busy machine, where py-spy counts
runnable threads, how thick) the sampling was.

``--json`` writes every run (stage samples, shares, µs per unit, the CPU, the
counts, the unmatched frames), and ``--compare OLD NEW`` prints two such files
side by side, per workload, flush mode and stage: the trees before and after a
change, each measured on the same machine. docs/performance.md, "Per-request
budget (issue 33)", has the rules in words, and the measured table.
"""

from __future__ import annotations

import argparse
import json
import linecache
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _common import TwistdBroker, process_cpu, run_driver  # noqa: E402

from rustka.record.batch import scan_batches  # noqa: E402

STAGES = ("decode", "route", "validate", "hand-off", "append", "answer", "reactor", "other")

# A rule: (where, functions, stage). ``where`` is a dotted module (rustka.kafka.server,
# twisted.internet.defer, threading) or the start of a generated code object's file
# name (<kafka codec _dec...>); a module rule covers its submodules. ``functions`` is
# None for the whole module, else the function names it covers. For each frame of a
# stack, innermost first, the FIRST rule that matches decides the stage, so a
# module's specific functions come before the module-wide rule.
RULES: tuple[tuple[str, frozenset[str] | None, str], ...] = tuple(
    (where, None if functions is None else frozenset(functions.split()), stage)
    for where, functions, stage in (
        # ---- answer: encoding the response, queueing it, writing it to the socket
        ("<kafka codec _enc", None, "answer"),
        ("<kafka codec _tagw", None, "answer"),
        ("<rustka.native.codec parts", None, "answer"),
        ("rustka.kafka.schema.codegen", "encode_struct _finish _count_errors", "answer"),
        ("rustka.kafka.schema.apis", "_encode encode_response* response_error_counter", "answer"),
        ("rustka.kafka.schema.primitives", "_w_* write* _nbytes", "answer"),
        (
            "rustka.kafka.messages",
            "encode_response_parts encode_response count_response_errors",
            "answer",
        ),
        ("rustka.kafka.server", "_answered _count _flush _handler_failed answer_early", "answer"),
        (
            "rustka.kafka.handlers",
            "_produced _produce_answer _produce_body _produce_failed _answer_early",
            "answer",
        ),
        (
            "rustka.native.codec",
            "encode_response response_parts response_frame error_response",
            "answer",
        ),
        ("rustka.native.wire", "_write _check_int encode_slow _slow_parts _slow_frame", "answer"),
        (
            "rustka.native.server",
            "_send_burst _produced _release_held _respond_now _completed _answer_early _flush "
            "_payload_bytes",
            "answer",
        ),
        (
            "rustka.native.handlers",
            "_done _failed _error _produced _fire_first early_answer",
            "answer",
        ),
        ("rustka.connections", "answer push_answer flush _close", "answer"),
        ("rustka.eager_write", None, "answer"),
        ("rustka.output_budget", "settle release", "answer"),
        ("rustka.broker.stats", None, "answer"),
        ("twisted.internet.abstract", "write writeSequence doWrite _postLoseConnection", "answer"),
        ("twisted.internet.tcp", "writeSomeData doWrite _closeWriteConnection", "answer"),
        # ---- hand-off: reactor <-> I/O threads, lanes, Deferreds, the completion chain
        (
            "rustka.broker.produce",
            "_appended _records_appended _batches_appended _records_early _batches_early "
            "_append_result",
            "hand-off",
        ),
        ("rustka.broker.lanes", "write_then_early _write_then_early", "hand-off"),
        ("rustka.broker.lanes", None, "hand-off"),
        ("rustka.broker.partition_lanes", None, "hand-off"),
        ("rustka.broker.deferreds", None, "hand-off"),
        ("rustka.broker.waiters", None, "hand-off"),
        ("rustka.broker.core", "run _run _pool_work_done lane", "hand-off"),
        ("twisted.internet.defer", None, "hand-off"),
        # runUntilCurrent runs the calls the I/O threads queued (and timers, rarer here).
        ("twisted.internet.base", "callFromThread runUntilCurrent wakeUp", "hand-off"),
        ("twisted.internet._signals", None, "hand-off"),  # the waker the threads write to
        ("twisted.python.threadpool", None, "hand-off"),
        ("twisted._threads", None, "hand-off"),
        ("threading", None, "hand-off"),
        ("queue", None, "hand-off"),
        # ---- append: the partition log, its segments and indexes, fsync
        ("rustka.broker.produce", "write_batches lane_writer", "append"),
        ("rustka.broker.core", "_lane_writer flush_dirty", "append"),
        ("rustka.broker.maintenance", None, "append"),
        ("rustka.storage.producer_state", None, "validate"),
        ("rustka.storage.log_append", None, "validate"),
        ("rustka.storage", None, "append"),
        # ---- validate: the record batch's checks and CRC, the seed batch, idempotence
        (
            "rustka.broker.produce",
            "prepare_batches _unframed _topic_codec seed_batches",
            "validate",
        ),
        # ---- decode: socket read, framing, the request's codec
        ("<kafka codec _dec", None, "decode"),
        ("<kafka codec _tagr", None, "decode"),
        ("<rustka.native.codec fast", None, "decode"),
        (
            "rustka.record.batch",
            "parse_header decode_varint decode_varlong _read_varint_slow",
            "decode",
        ),
        ("rustka.record", None, "validate"),
        ("rustka.kafka.schema", None, "decode"),
        (
            "rustka.kafka.messages",
            "decode_request decode_request_header _spec is_flexible",
            "decode",
        ),
        ("rustka.native.codec", None, "decode"),
        ("rustka.native.wire", None, "decode"),
        ("rustka.native.messages", None, "decode"),
        ("rustka.framing", None, "decode"),
        ("rustka.native.server", "dataReceived deframe framing_paused", "decode"),
        ("rustka.kafka.server", "dataReceived deframe framing_paused", "decode"),
        ("twisted.protocols.basic", None, "decode"),
        ("twisted.internet.tcp", "doRead _dataReceived", "decode"),
        # ---- route: dispatch, handlers, authorization, the core's routing to a partition
        ("rustka.kafka", None, "route"),
        ("rustka.native", None, "route"),
        ("rustka.broker", None, "route"),
        ("rustka.security", None, "route"),
        ("rustka.connections", None, "route"),
        ("rustka.output_budget", None, "route"),
        # ---- reactor: Twisted's loop itself (epoll, timers) when no rule above matched
        ("rustka.ops.lean_poll", None, "reactor"),  # rustka's own poll step of that loop
        ("twisted", None, "reactor"),
    )
)

# Where a thread blocks: (module, functions, the blocking call on the frame's line). py-spy
# does not tell idle threads from busy ones in this container (samples of the pool threads
# in their queue's get() and of the reactor in epoll_wait came to 3x the CPU the broker
# used), so a sample whose innermost frame is on such a line is idle and left out. What
# those calls cost in CPU (the epoll_wait system call, the queue's wake-up) is then in no
# stage; the other stages' shares of the broker's CPU grow by as much.
WAITS: tuple[tuple[str, frozenset[str], re.Pattern[str]], ...] = (
    ("rustka.broker.lanes", frozenset({"_work"}), re.compile(r"^\s*wait\(\)")),
    ("rustka.ops.lean_poll", frozenset({"_poll"}), re.compile(r"\.poll\(")),
    ("twisted.internet.epollreactor", frozenset({"doPoll"}), re.compile(r"\.poll\(")),
    ("twisted.internet.pollreactor", frozenset({"doPoll"}), re.compile(r"\.poll\(")),
    ("twisted.internet.selectreactor", frozenset({"doSelect"}), re.compile(r"select\(")),
    (
        "threading",
        frozenset({"wait", "acquire", "join", "_wait_for_tstate_lock"}),
        re.compile(r"."),
    ),
    ("queue", frozenset({"get"}), re.compile(r"\b(wait|get)\(")),
    ("twisted._threads", frozenset({"work", "get"}), re.compile(r"\b(wait|get|acquire)\(")),
    ("twisted.python.threadpool", frozenset({"_worker"}), re.compile(r"\bget\(")),
)

# Workload -> (driver script, driver workload, partitions of its topic, unit).
WORKLOADS: dict[str, tuple[str, str, int, str]] = {
    "W2": ("rustka_driver.py", "W2", 1, "request"),
    "K2": ("kafka_driver.py", "K2", 1, "request"),
    "K5": ("c_driver.py", "K5", 64, "partition-batch"),
}
# Records per run: (full, quick). W2/K2 also stop after max_seconds.
COUNTS = {"W2": (20_000, 1_000), "K2": (20_000, 1_000), "K5": (1_000_000, 32_000)}
MAX_SECONDS = (8.0, 2.0)
# The broker counter of each workload's requests: (metric family, label).
REQUEST_COUNTERS = {
    "W2": ("rustka_requests_total", 'op="produce"'),
    "K2": ("rustka_kafka_requests_total", 'api="Produce"'),
    "K5": ("rustka_kafka_requests_total", 'api="Produce"'),
}

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def where_of(path: str) -> str:
    """A frame's file as a dotted module (rustka.kafka.server, twisted.internet.defer,
    threading), or the file name as it is for generated code (``<kafka codec _dec3>``)."""
    if path.startswith("<"):
        return path
    parts = path.replace("\\", "/").split("/")
    if parts[-1].endswith(".py"):
        parts[-1] = parts[-1][:-3]
    if parts[-1] == "__init__":
        parts.pop()
    for root in ("rustka", "twisted"):
        if root in parts:
            last = len(parts) - 1 - parts[::-1].index(root)
            return ".".join(parts[last:])
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return ".".join(parts[parts.index(marker) + 1 :])
    python = [i for i, p in enumerate(parts) if re.fullmatch(r"python3(\.\d+)?", p)]
    if python:
        return ".".join(parts[python[-1] + 1 :])
    return parts[-1]


def _matches(rule_where: str, functions: frozenset[str] | None, where: str, func: str) -> bool:
    """py-spy names a method ``Class.method`` and a closure ``outer.<locals>.inner``: a
    rule's function names any of those parts; ``_w_*`` names every part starting so."""
    if rule_where.startswith("<"):
        if not where.startswith(rule_where):
            return False
    elif where != rule_where and not where.startswith(rule_where + "."):
        return False
    if functions is None:
        return True
    parts = func.split(".")
    if not functions.isdisjoint(parts):
        return True
    prefixes = [f[:-1] for f in functions if f.endswith("*")]
    return any(part.startswith(prefix) for part in parts for prefix in prefixes)


def stage_of_frame(where: str, func: str) -> str | None:
    """The stage of one frame by the first rule that matches it, or None; the
    ``reactor`` rules are not asked here (`stage_of_stack` falls back on them)."""
    for rule_where, functions, stage in RULES:
        if stage != "reactor" and _matches(rule_where, functions, where, func):
            return stage
    return None


def in_reactor(where: str, func: str) -> bool:
    """Whether a frame is Twisted's loop (or rustka's poll step of it)."""
    return any(
        _matches(rule_where, functions, where, func)
        for rule_where, functions, stage in RULES
        if stage == "reactor"
    )


def parse_frame(frame: str) -> tuple[str, str]:
    """(where, function) of one py-spy frame ``func (path:line)``."""
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip(), frame.strip()
    return where_of(match["file"]), match["func"]


def stage_of_stack(frames: list[tuple[str, str]]) -> str:
    """The stage of the innermost frame a rule matches. When none does: ``reactor`` if
    the stack is Twisted's loop alone, ``other`` if it holds rustka code no rule names."""
    for where, func in reversed(frames):
        stage = stage_of_frame(where, func)
        if stage is not None:
            return stage
    if any(where.startswith("rustka.") and not in_reactor(where, func) for where, func in frames):
        return "other"
    return "reactor" if any(in_reactor(where, func) for where, func in frames) else "other"


@dataclass
class Attribution:
    """Samples per stage of one profile, and the innermost rustka frames of those
    ``other`` took (the rules to add when it grows)."""

    samples: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAGES, 0))
    unmatched: dict[str, int] = field(default_factory=dict)
    by_function: dict[str, dict[str, int]] = field(default_factory=dict)
    idle: int = 0

    @property
    def total(self) -> int:
        return sum(self.samples.values())


def waiting(frame: str) -> bool:
    """Whether a stack's innermost frame is a thread blocked in one of ``WAITS``: its
    source line (read from the file the frame names) makes the blocking call."""
    match = _FRAME.match(frame.strip())
    if not match or not match["line"]:
        return False
    where, func = where_of(match["file"]), match["func"]
    for wait_where, functions, call in WAITS:
        if (where == wait_where or where.startswith(wait_where + ".")) and not functions.isdisjoint(
            func.split(".")
        ):
            return call.search(linecache.getline(match["file"], int(match["line"]))) is not None
    return False


def attribute(text: str) -> Attribution:
    """Samples per stage from py-spy's raw (collapsed) stacks: ``f;f;...;leaf COUNT``;
    a thread blocked in one of ``WAITS`` is counted as idle, in no stage."""
    out = Attribution()
    unmatched: Counter[str] = Counter()
    functions: dict[str, Counter[str]] = {stage: Counter() for stage in STAGES}
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        raw = [f for f in stack.split(";") if f.strip()]
        if raw and waiting(raw[-1]):
            out.idle += count
            continue
        frames = [parse_frame(f) for f in raw]
        stage = stage_of_stack(frames)
        out.samples[stage] += count
        # The innermost matched (or, for other, innermost) frame names the top functions.
        label = ""
        for where, func in reversed(frames):
            if (
                stage == "other"
                or stage_of_frame(where, func) == stage
                or (stage == "reactor" and in_reactor(where, func))
            ):
                label = f"{where}.{func}"
                break
        functions[stage][label] += count
        if stage == "other":
            unmatched[label] += count
    out.unmatched = dict(unmatched.most_common(10))
    out.by_function = {s: dict(c.most_common(5)) for s, c in functions.items() if c}
    return out


# --------------------------------------------------------------------------- one run


class Sampler:
    """py-spy on the broker, from when it reports it is sampling until stop()."""

    def __init__(self, pid: int, out: Path, rate: int) -> None:
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if not Path(exe).exists():
            raise RuntimeError("py-spy is not installed (pip install -r bench/requirements.txt)")
        self.out = out
        self.log = out.with_suffix(".log")
        cmd = [exe, "record", "--pid", str(pid), "--format", "raw", "--rate", str(rate)]
        # Not pausing the broker keeps its timing as it is; pausing it did not help py-spy
        # tell idle threads here either (see WAITS).
        cmd += ["--nonblocking", "--full-filenames", "-o", str(out)]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while "Sampling process" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"py-spy did not start: {self.log.read_text()[-1000:]}")
            time.sleep(0.02)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.out.read_text(errors="replace") if self.out.exists() else ""


def user_system(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process: how much of its cost is in the kernel."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    fields = raw[raw.rindex(b")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def scrape(broker: TwistdBroker) -> dict[str, float]:
    """Every sample of the broker's metrics page, by its full name with labels."""
    url = f"http://127.0.0.1:{broker.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as page:
        text = page.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def requests_of(samples: dict[str, float], workload: str) -> float:
    family, label = REQUEST_COUNTERS[workload]
    return sum(v for k, v in samples.items() if k.startswith(family + "{") and label in k)


def all_requests(samples: dict[str, float]) -> float:
    return sum(
        v
        for k, v in samples.items()
        if k.startswith(("rustka_requests_total{", "rustka_kafka_requests_total{"))
    )


def stored_batches(data_dir: Path, topic: str) -> int:
    """Record batches in the topic's partition logs: one per partition per Produce."""
    total = 0
    for log in sorted((data_dir / topic).rglob("*.log")):
        batches, _ = scan_batches(log.read_bytes())
        total += len(batches)
    return total


def create_topic(port: int, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)


def run_one(
    broker: TwistdBroker,
    data_dir: Path,
    workload: str,
    flush: str,
    quick: bool,
    rate: int,
    profiles: Path,
) -> dict[str, Any]:
    script, driver_workload, partitions, unit = WORKLOADS[workload]
    topic = f"budget-{workload.lower()}"
    create_topic(broker.port, topic, partitions)
    count = COUNTS[workload][1 if quick else 0]
    spec = broker.spec(driver_workload, topic, count, max_seconds=MAX_SECONDS[int(quick)])
    if partitions > 1:
        spec["partitions"] = partitions
    profile = profiles / f"{workload}-{flush}.txt"
    pid = broker.proc.pid
    # The metrics page is read outside the sampled window: its rendering is no request's.
    before = scrape(broker)
    sampler = Sampler(pid, profile, rate)
    try:
        cpu0, t0, split0 = process_cpu(pid), time.monotonic(), user_system(pid)
        result = run_driver(script, spec)
        cpu1, t1, split1 = process_cpu(pid), time.monotonic(), user_system(pid)
    finally:
        text = sampler.stop()
    after = scrape(broker)
    produce = requests_of(after, workload) - requests_of(before, workload)
    units = stored_batches(data_dir, topic) if unit == "partition-batch" else produce
    if not units:
        raise RuntimeError(f"{workload}: the broker counted no {unit} (see {broker.log})")
    cpu = cpu1 - cpu0
    found = attribute(text)
    total = found.total
    per_unit_us = cpu / units * 1e6 if units else 0.0
    stages = {}
    for stage in STAGES:
        n = found.samples[stage]
        share = n / total if total else 0.0
        stages[stage] = {
            "samples": n,
            "share": share,
            "share_2se": 2 * math.sqrt(share * (1 - share) / total) if total else 0.0,
            "us_per_unit": share * per_unit_us,
        }
    return {
        "workload": workload,
        "flush": flush,
        "unit": unit,
        "units": units,
        "produce_requests": produce,
        "all_requests": all_requests(after) - all_requests(before),
        "records": result.get("records"),
        "wall_s": t1 - t0,
        "broker_cpu_s": cpu,
        "broker_user_s": split1[0] - split0[0],
        "broker_system_s": split1[1] - split0[1],
        "cpu_us_per_unit": per_unit_us,
        "samples": total,
        "idle_samples": found.idle,
        "rate": rate,
        "coverage": total / rate / cpu if cpu else 0.0,
        "driver": {k: result.get(k) for k in ("seconds", "server_cpu", "p50_us", "p99_us")},
        "stages": stages,
        "top_functions": found.by_function,
        "unmatched": found.unmatched,
        "profile": str(profile),
    }


# --------------------------------------------------------------------------- output


def print_run(run: dict[str, Any]) -> None:
    print(
        f"\n{run['workload']} flush={run['flush']}: {run['cpu_us_per_unit']:.0f} µs broker CPU"
        f" per {run['unit']} ({run['broker_cpu_s']:.2f} s over {run['units']:,.0f}"
        f" {run['unit'].replace('batch', 'batche')}s,"
        f" {run['all_requests']:,.0f} requests in all; user"
        f" {run['broker_user_s']:.2f} s, system {run['broker_system_s']:.2f} s);"
        f" {run['samples']:,} samples at {run['rate']}/s (and {run['idle_samples']:,} of"
        f" waiting threads, left out), coverage {run['coverage']:.0%}"
    )
    print(f"  {'stage':<10}{'samples':>9}{'share':>8}{'±':>7}{'µs/' + run['unit']:>20}")
    for stage in STAGES:
        s = run["stages"][stage]
        print(
            f"  {stage:<10}{s['samples']:>9,}{s['share']:>8.1%}{s['share_2se']:>7.1%}"
            f"{s['us_per_unit']:>20.1f}"
        )
    if run["unmatched"]:
        top = ", ".join(f"{k} {v}" for k, v in list(run["unmatched"].items())[:5])
        print(f"  other (no rule): {top}")


def markdown(runs: list[dict[str, Any]]) -> str:
    """One table of every run: a column per (workload, flush), µs per unit and share."""
    head = "| stage | " + " | ".join(f"{r['workload']} `{r['flush']}`" for r in runs) + " |"
    lines = [head, "|---" * (len(runs) + 1) + "|"]
    for stage in STAGES:
        cells = [
            f"{r['stages'][stage]['us_per_unit']:.0f} µs ({r['stages'][stage]['share']:.0%})"
            for r in runs
        ]
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    total = [f"**{r['cpu_us_per_unit']:.0f} µs** per {r['unit']}" for r in runs]
    lines.append("| broker CPU | " + " | ".join(total) + " |")
    lines.append("| samples | " + " | ".join(f"{r['samples']:,}" for r in runs) + " |")
    return "\n".join(lines)


def compare(old_path: Path, new_path: Path) -> str:
    """Before/after per workload, flush mode and stage: µs per unit and the change."""
    old = {(r["workload"], r["flush"]): r for r in json.loads(old_path.read_text())["runs"]}
    new = {(r["workload"], r["flush"]): r for r in json.loads(new_path.read_text())["runs"]}
    out = [f"before: {old_path}", f"after:  {new_path}"]
    for key in [k for k in old if k in new]:
        a, b = old[key], new[key]
        out.append(
            f"\n{key[0]} flush={key[1]}  µs per {a['unit']}"
            f"  (samples {a['samples']:,} -> {b['samples']:,})"
        )
        out.append(f"  {'stage':<10}{'before':>9}{'after':>9}{'change':>9}")
        rows = [(s, a["stages"][s]["us_per_unit"], b["stages"][s]["us_per_unit"]) for s in STAGES]
        rows.append(("total", a["cpu_us_per_unit"], b["cpu_us_per_unit"]))
        for stage, x, y in rows:
            out.append(f"  {stage:<10}{x:>9.1f}{y:>9.1f}{y - x:>+9.1f}")
    missing = sorted(set(old) ^ set(new))
    if missing:
        out.append(f"\nin one file only: {missing}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small counts (about a minute)")
    ap.add_argument("--only", default="W2,K2,K5", help="workloads: W2, K2, K5")
    ap.add_argument("--flush", default="interval,always", help="rustka flush modes")
    ap.add_argument("--rate", type=int, default=1000, help="py-spy samples per second")
    ap.add_argument("--json", type=Path, default=None, help="write every run here")
    ap.add_argument("--profiles", type=Path, default=None, help="keep py-spy's stacks here")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = ap.parse_args(argv)
    if args.compare:
        print(compare(*args.compare))
        return 0
    workloads = [w.strip().upper() for w in args.only.split(",") if w.strip()]
    flushes = [f.strip() for f in args.flush.split(",") if f.strip()]
    if any(w not in WORKLOADS for w in workloads) or any(
        f not in ("always", "interval", "never") for f in flushes
    ):
        ap.error(f"unknown workload or flush mode in {args.only!r} / {args.flush!r}")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rustka-budget-") as tmp:
        work = Path(tmp)
        profiles = args.profiles or work / "profiles"
        profiles.mkdir(parents=True, exist_ok=True)
        for flush in flushes:
            data_dir = work / f"data-{flush}"
            data_dir.mkdir()
            broker = TwistdBroker(data_dir, {"flush": flush})
            try:
                for workload in workloads:
                    run = run_one(
                        broker,
                        data_dir,
                        workload,
                        flush,
                        args.quick,
                        args.rate,
                        profiles,
                    )
                    runs.append(run)
                    print_run(run)
            finally:
                broker.stop()
    print()
    print(markdown(runs))
    if args.json:
        document = {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "quick": args.quick,
            "loadavg_1_5_15": os.getloadavg(),
            "stages": list(STAGES),
            "rules": [[w, None if f is None else sorted(f), s] for w, f, s in RULES],
            "runs": runs,
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
