"""bench/harness.py's documented default runs end to end.

docs/performance.md gives ``bench/harness.py --json results.json`` as the full
command; it once died with ``KeyError: 'W4'`` before running anything, because
NATS runs W3 but not W4 and the loader asked for a W4 count. Here the default
workload set runs with ``--quick`` against every peer the harness knows, and
the JSON it writes must hold a passing row for each workload and system.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "bench" / "harness.py"
TANSU = "tansu/memory (no disk)"
WORKLOADS = ("W1", "W2", "W3", "W4", "W5", "K1", "K2", "K3", "K4", "K1-C", "K3-C", "K5", "K6")

# What each peer needs; scripts/test installs all of it.
PEER_TOOLS = {
    "redis-server": "redis-server (Debian package redis-server)",
    "redis-benchmark": "redis-benchmark (Debian package redis-tools)",
    "nats-server": "nats-server (Debian package nats-server)",
}


def test_quick_run_of_the_default_workloads_passes_against_every_peer(tmp_path: Path) -> None:
    missing = [why for exe, why in PEER_TOOLS.items() if shutil.which(exe) is None]
    assert not missing, f"run scripts/test to install the benchmark peers: {', '.join(missing)}"
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, str(HARNESS), "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"harness failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    result = json.loads(out.read_text())
    assert result["skipped"] == [], f"peers were skipped: {result['skipped']}"
    rows = {(row["system"], row["workload"]): row for row in result["rows"]}
    for workload in WORKLOADS:
        assert ("rustka/always", workload) in rows, f"no rustka/always row for {workload}"
        assert ("rustka/interval", workload) in rows, f"no rustka/interval row for {workload}"
    # The C-client rows run against Tansu in the same rounds, each with its broker CPU per record.
    for workload in ("K1-C", "K3-C", "K5", "K6"):
        row = rows.get((TANSU, workload))
        assert row is not None, f"no Tansu row for {workload}"
        assert row["records"] == (64_000 if workload in ("K5", "K6") else 100_000)
        assert row["server_cpu_per_m"] is not None
    systems = {system for system, _ in rows}
    for peer in ("redis/always", "redis/everysec", "nats/file", "tansu/memory (no disk)"):
        assert peer in systems, f"peer {peer} has no row: {sorted(systems)}"
    assert rows[("nats/file", "W3")]["records_per_s"] > 0
    failed = [key for key, row in rows.items() if not row["ok"]]
    assert not failed, f"rows that did not pass their checks: {failed}"
    assert result["ratios"], "no rustka/peer ratios were computed"
