"""bench/stage_budget.py's smallest run goes end to end and writes a usable budget.

The numbers depend on the machine, so nothing here is timed: the run must count
the broker's own requests, sample the broker, give every sample to one stage,
and write the JSON that ``--compare`` reads. The attribution rules themselves
are checked on hand-written py-spy stacks, where the right stage is known.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "stage_budget.py"
sys.path.insert(0, str(ROOT / "bench"))

import stage_budget  # noqa: E402

SITE = "/venv/lib/python3.11/site-packages"
RUSTKA = "/tree/rustka"
QUICK_W2 = [sys.executable, str(SCRIPT), "--quick", "--only", "W2", "--flush", "interval"]


def _stack(*frames: str, count: int = 1) -> str:
    return ";".join(frames) + f" {count}"


def test_each_sample_goes_to_the_stage_of_its_innermost_matching_frame() -> None:
    reactor = f"run ({SITE}/twisted/internet/base.py:1)"
    read = f"doRead ({SITE}/twisted/internet/tcp.py:2)"
    received = f"stringReceived ({RUSTKA}/kafka/server.py:181)"
    text = "\n".join(
        [
            # The request's codec, inside the dispatcher's frame: decode, not route.
            _stack(reactor, read, received, "_dec3 (<kafka codec _dec3>:4)", count=7),
            # The dispatcher's own time: route.
            _stack(reactor, read, received, count=2),
            # The socket read itself, with no rustka frame inside: decode.
            _stack(reactor, read, count=3),
            # A pool thread writing the segment: append, though lanes called it.
            _stack(
                "_bootstrap (/py/lib/python3.11/threading.py:1)",
                f"_work ({RUSTKA}/broker/lanes.py:113)",
                f"write_batches ({RUSTKA}/broker/produce.py:389)",
                f"append_many ({RUSTKA}/storage/local_log.py:237)",
                count=5,
            ),
            # A Deferred firing inside the completion chain: hand-off.
            _stack(reactor, f"_runCallbacks ({SITE}/twisted/internet/defer.py:9)", count=4),
            # The response's encoding: answer.
            _stack(reactor, received, "_enc9 (<kafka codec _enc9>:2)", count=6),
            # Twisted's loop alone: reactor.
            _stack(f"doPoll ({SITE}/twisted/internet/epollreactor.py:1)", count=1),
            # A rustka module no rule names: other, and listed as such.
            _stack(reactor, f"mystery ({RUSTKA}/unknown_module.py:1)", count=2),
        ]
    )
    found = stage_budget.attribute(text)
    assert found.samples == {
        "decode": 10,
        "route": 2,
        "validate": 0,
        "hand-off": 4,
        "append": 5,
        "answer": 6,
        "reactor": 1,
        "other": 2,
    }
    assert found.unmatched == {"rustka.unknown_module.mystery": 2}


def test_a_thread_blocked_in_its_wait_is_idle_and_in_no_stage() -> None:
    lanes = ROOT / "rustka" / "broker" / "lanes.py"
    lines = lanes.read_text().splitlines()
    waits = [i + 1 for i, line in enumerate(lines) if line.strip() == "wait()"]
    busy = [i + 1 for i, line in enumerate(lines) if line.strip() == "result = f(*args)"]
    assert waits and busy, "WorkerPool._work changed: update WAITS in bench/stage_budget.py"
    pool = "_bootstrap (/py/lib/python3.11/threading.py:1)"
    text = "\n".join(
        [
            _stack(pool, f"WorkerPool._work ({lanes}:{waits[0]})", count=9),
            _stack(pool, f"WorkerPool._work ({lanes}:{busy[0]})", count=2),
        ]
    )
    found = stage_budget.attribute(text)
    assert found.idle == 9
    assert found.total == 2
    assert found.samples["hand-off"] == 2


@pytest.mark.system
def test_quick_w2_run_writes_a_budget_whose_stages_add_up(tmp_path: Path) -> None:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    assert Path(exe).exists(), "py-spy is missing: pip install -e '.[test]'"
    out = tmp_path / "budget.json"
    proc = subprocess.run(
        [*QUICK_W2, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (
        f"stage_budget failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    result = json.loads(out.read_text())
    assert result["stages"] == list(stage_budget.STAGES)
    (run,) = result["runs"]
    assert (run["workload"], run["flush"], run["unit"]) == ("W2", "interval", "request")
    # The broker counted every request the driver's one-record loop sent, and more.
    assert run["units"] >= run["records"] > 0
    assert run["broker_cpu_s"] > 0
    assert run["cpu_us_per_unit"] > 0
    assert run["samples"] > 0
    # The pool threads' and the reactor's waits are recognised and left out.
    assert run["idle_samples"] > 0
    stages = run["stages"]
    assert set(stages) == set(stage_budget.STAGES)
    assert sum(s["samples"] for s in stages.values()) == run["samples"]
    assert sum(s["share"] for s in stages.values()) == pytest.approx(1.0)
    assert sum(s["us_per_unit"] for s in stages.values()) == pytest.approx(run["cpu_us_per_unit"])
    # The samples saw the broker's request path, not only its loop. (A quick run has a
    # few dozen such samples, too few to ask for each stage.)
    path = ("decode", "route", "validate", "hand-off", "append", "answer")
    assert sum(stages[stage]["samples"] for stage in path) > 0, stages
    # The table for docs/performance.md, and --compare of the file against itself.
    assert "| decode |" in proc.stdout
    same = subprocess.run(
        [sys.executable, str(SCRIPT), "--compare", str(out), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert same.returncode == 0, same.stderr
    assert "W2 flush=interval" in same.stdout
    assert "+0.0" in same.stdout
