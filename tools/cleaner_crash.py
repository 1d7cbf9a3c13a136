"""SIGKILL a process in the middle of cleaning a log, reopen the log, and check what it holds.

A clean (docs/kafka.md, "Log compaction") writes a cleaned segment, swaps it in
and deletes the old ones, one group of segments at a time. Whatever the moment
of the kill, the reopened log must hold exactly the records of a state between
two whole swaps: the segments below some old segment boundary cleaned, the rest
as before (for one group: the pre-clean or the post-clean state), never a mix
within a group, and never without the latest record of a key.

A child process (``python -m tools.cleaner_crash child DIR``) opens the log
the way a restart does, says so on stdout, and runs one cleaning round. The
parent kills it with SIGKILL either at a random moment of the round, or, with
``--die-at N``, the child kills itself just before its Nth file operation of
the round (an open, rename or unlink, seen through an audit hook), which
reaches every step of the swap in turn. Each cycle continues on the state the
previous kill left; a final round without a kill must reach the fully cleaned
state.

    .venv/bin/python -m tools.cleaner_crash                  # 40 random kills + every step
    .venv/bin/python -m tools.cleaner_crash --quick
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rustka.record.batch import Record, decode_records, encode_batch, parse_header
from rustka.storage import inspect
from rustka.storage.cleaner import Cleaning
from rustka.storage.log_config import LogConfig
from rustka.storage.log_files import CLEANED_SUFFIX, CLEANER_SWAP_FILE
from rustka.storage.partition_log import PartitionLog

NOW = 1_700_000_000_000
MAP_BYTES = 8 << 20
STEP_BYTES = 16 * 1024
CONFIG = LogConfig(
    cleanup_policy="compact",
    segment_bytes=6000,
    segment_ms=None,
    retention_ms=None,
    index_interval_bytes=512,
    flush="never",
    delete_retention_ms=3_600_000,
)
# What the child counts (and may die before): every file operation of a round.
AUDITED = frozenset(("open", "os.rename", "os.remove"))
READY = "cleaning"


# --------------------------------------------------------------------------- the child


def child(directory: Path, die_at: int | None) -> int:
    """Open the log as a restart would, then clean it once (dying at a file operation)."""
    log = PartitionLog.open(directory, CONFIG, recover=True, clock=lambda: NOW)
    cleaning = Cleaning(log, map_bytes=MAP_BYTES, now_ms=NOW, chunk_bytes=4096)
    events = 0

    def hook(event: str, args: tuple[Any, ...]) -> None:
        nonlocal events
        if event in AUDITED:
            events += 1
            if events == die_at:
                os.kill(os.getpid(), signal.SIGKILL)

    sys.addaudithook(hook)
    print(READY, flush=True)
    while not cleaning.done:
        cleaning.step(STEP_BYTES)
    log.close()
    print(f"done {events}", flush=True)
    return 0


# --------------------------------------------------------------------------- the parent


RecordKey = tuple[int, bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...]]


def records_of(log: PartitionLog) -> list[RecordKey]:
    """(offset, key, value, timestamp, headers) of every stored record, as a fetch reads them."""
    out: list[RecordKey] = []
    offset = log.log_start_offset
    while offset < log.end_offset:
        data = log.read(offset, 1 << 20)
        pos = 0
        while pos < len(data):
            header = parse_header(data, pos)
            for r in decode_records(data, pos):
                assert r.offset is not None and r.timestamp is not None
                out.append((r.offset, r.key, r.value, r.timestamp, r.headers))
            pos += header.size
            offset = header.next_offset
    return out


@dataclass
class Expected:
    """The log before cleaning, after a whole round, and where swaps may end."""

    before: list[RecordKey]
    after: list[RecordKey]
    boundaries: list[int]
    round_seconds: float
    events: int = 0

    def states(self) -> list[list[RecordKey]]:
        """Every state a crash may leave: cleaned below a boundary, untouched above it."""
        return [
            [r for r in self.after if r[0] < b] + [r for r in self.before if r[0] >= b]
            for b in self.boundaries
        ]


def prepare(directory: Path, rng: random.Random, writes: int = 3000, keys: int = 150) -> Expected:
    """A compacted log of random versions (a tenth tombstones) and what cleaning makes of it."""
    log = PartitionLog.open(directory, CONFIG, clock=lambda: NOW)
    for i in range(writes):
        key = b"key-%d" % rng.randrange(keys)
        value = None if rng.random() < 0.1 else b"value-%d-" % i + b"x" * rng.randrange(40)
        headers = (("i", b"%d" % i),) if i % 5 == 0 else ()
        log.append(encode_batch([Record(key, value, headers, NOW - 1000 + i)]))
    log.roll()
    before = records_of(log)
    boundaries = [seg.base_offset for seg in log.segments]
    log.close()
    scratch = Path(tempfile.mkdtemp(prefix="cleaner-expected-"))
    try:
        copy = scratch / "topic" / "0"
        shutil.copytree(directory, copy)
        cleaned = PartitionLog.open(copy, CONFIG, clock=lambda: NOW)
        started = time.perf_counter()
        cleaning = Cleaning(cleaned, map_bytes=MAP_BYTES, now_ms=NOW, chunk_bytes=4096)
        while not cleaning.done:
            cleaning.step(STEP_BYTES)
        seconds = time.perf_counter() - started
        after = records_of(cleaned)
        cleaned.close()
    finally:
        shutil.rmtree(scratch)
    return Expected(before, after, boundaries, seconds)


@dataclass
class Outcome:
    """One cycle: how the child ended and what the reopened log held."""

    killed: bool
    problem: str | None
    state: int | None = None
    notes: list[str] = field(default_factory=list)


def run_child(
    directory: Path, *, die_at: int | None = None, kill_after: float | None = None
) -> bool:
    """Run one child round; True if it died of SIGKILL (by itself or by us)."""
    cmd = [sys.executable, "-m", "tools.cleaner_crash", "child", str(directory)]
    if die_at is not None:
        cmd += ["--die-at", str(die_at)]
    root = Path(__file__).resolve().parent.parent
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=root, text=True
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            line = proc.stdout.readline()
            if line.strip() == READY and kill_after is not None:
                time.sleep(kill_after)
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
            _, errors = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        if line.strip() != READY:
            raise RuntimeError(f"child failed to start: {line!r} {errors[-2000:]}")
        if proc.returncode not in (0, -signal.SIGKILL):
            raise RuntimeError(f"child exited {proc.returncode}: {errors[-2000:]}")
    return proc.returncode == -signal.SIGKILL


def count_events(directory: Path) -> int:
    """The file operations one round makes, counted by a child on a copy of ``directory``."""
    scratch = Path(tempfile.mkdtemp(prefix="cleaner-count-"))
    try:
        copy = scratch / "topic" / "0"
        shutil.copytree(directory, copy)
        root = Path(__file__).resolve().parent.parent
        done = subprocess.run(
            [sys.executable, "-m", "tools.cleaner_crash", "child", str(copy)],
            capture_output=True,
            text=True,
            cwd=root,
            timeout=300,
            check=True,
        )
        return int(done.stdout.split()[-1])
    finally:
        shutil.rmtree(scratch)


def check(directory: Path, expected: Expected) -> Outcome:
    """Reopen like a restart and compare the records with every allowed state.

    ``directory`` is a partition of a data dir (``data/topic/0``), which `rustka
    check` must find sound as well.
    """
    log = PartitionLog.open(directory, CONFIG, recover=True, clock=lambda: NOW)
    try:
        held = records_of(log)
    finally:
        log.close()
    leftovers = [
        n for n in os.listdir(directory) if n.endswith(CLEANED_SUFFIX) or n == CLEANER_SWAP_FILE
    ]
    if leftovers:
        return Outcome(True, f"leftovers after reopening: {leftovers}")
    report = inspect.check_data_dir(directory.parent.parent)
    if report.problems:
        return Outcome(True, f"rustka check: {[str(p) for p in report.problems]}")
    states = expected.states()
    for index, state in enumerate(states):
        if held == state:
            return Outcome(True, None, index)
    latest = {r[1]: r for r in expected.after}
    missing = [r for r in latest.values() if r not in held]
    return Outcome(
        True,
        f"the log holds {len(held)} records, matching no state between swaps "
        f"({len(missing)} latest records of their key missing)",
    )


def finished(directory: Path, expected: Expected) -> bool:
    """Whether the log holds exactly the fully cleaned records."""
    outcome = check(directory, expected)
    return outcome.problem is None and expected.states()[outcome.state or 0] == expected.after


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="mode")
    c = sub.add_parser("child")
    c.add_argument("directory", type=Path)
    c.add_argument("--die-at", type=int, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if args.mode == "child":
        return child(args.directory, args.die_at)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        pristine = Path(tmp) / "pristine" / "topic" / "0"
        expected = prepare(pristine, rng)
        events = count_events(pristine)
        print(f"{events} file operations per round; a round takes {expected.round_seconds:.2f} s")
        failures = 0
        points = (
            range(1, events + 1) if not args.quick else sorted(rng.sample(range(1, events + 1), 10))
        )
        work = Path(tmp) / "work" / "topic" / "0"
        for n in points:
            shutil.rmtree(work.parent.parent, ignore_errors=True)
            shutil.copytree(pristine, work)
            run_child(work, die_at=n)
            outcome = check(work, expected)
            failures += outcome.problem is not None
            print(f"die at operation {n}: state {outcome.state} {outcome.problem or 'ok'}")
        for cycle in range(4 if args.quick else 20):
            shutil.rmtree(work.parent.parent, ignore_errors=True)
            shutil.copytree(pristine, work)
            # Two kills in a row: the second round starts from what the first left.
            for kill in range(2):
                killed = run_child(work, kill_after=rng.uniform(0, expected.round_seconds * 1.5))
                outcome = check(work, expected)
                failures += outcome.problem is not None
                print(
                    f"random kill {cycle}.{kill}: killed={killed} state {outcome.state} "
                    f"{outcome.problem or 'ok'}"
                )
            run_child(work)
            if not finished(work, expected):
                failures += 1
                print(f"cycle {cycle}: the round after the kills did not clean the log fully")
        print("ok" if not failures else f"{failures} failures")
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
