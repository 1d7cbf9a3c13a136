"""The login benchmark (bench/sasl_bench.py) runs and checks what it claims.

Its ``--flood`` mode drives `twistd rustka` with a sasl listener: the probe must log
in with SCRAM and have every record acknowledged, and every flooding PLAIN login with
a wrong password must be refused (the flooder fails the run if one is accepted).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_quick_flood_measures_the_probe_alone_and_under_failing_plain_logins(
    tmp_path: Path,
) -> None:
    out = tmp_path / "flood.json"
    done = subprocess.run(
        [sys.executable, str(BENCH / "sasl_bench.py"), "--flood", "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["failed_logins"] > 0
    for phase in ("alone", "flooded"):
        assert 0 < result[phase]["p50_us"] <= result[phase]["p99_us"]
    assert result["p50_ratio"] > 0
    assert "failing PLAIN logins" in done.stdout
