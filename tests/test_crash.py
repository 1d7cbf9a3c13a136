"""SIGKILL a real `twistd rustka` mid-traffic and prove nothing acknowledged was lost.

The long version is `python -m tools.crash_cycles` (100 cycles); this runs
three cycles on one data dir, so later cycles also re-check the records of
earlier ones after a second and third recovery.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tools.crash_cycles import Ledger, crash_cycle, final_check

pytestmark = pytest.mark.system


def test_sigkill_cycles_lose_no_acknowledged_record(tmp_path: Path) -> None:
    """Three kill/restart cycles: acked records, offsets, commits all survive; recovery runs."""
    data_dir = tmp_path / "data"
    ledger = Ledger()
    rng = random.Random(20260303)
    results = []
    for cycle in range(3):
        result, check = crash_cycle(data_dir, ledger, rng, "always", max_acks=1000)
        assert check.ok, check
        assert result.recovered == (cycle > 0), result
        assert result.acked_records > 0
        results.append((result, check))
    known = sum(len(offsets) for offsets in ledger.acked.values())
    recovered, check = final_check(data_dir, ledger, "always")
    assert recovered
    assert check.ok, check
    assert check.lost == 0 and check.mismatched == 0
    assert check.records_checked == known
    assert ledger.acked_commits > 0
    # the kill landed with requests in flight in at least one cycle (the seed guarantees it)
    assert any(result.in_flight_at_kill > 0 for result, _ in results)
    partitions = {key for key in ledger.acked if ledger.acked[key]}
    assert len(partitions) >= 6, partitions
    assert not check.not_continuing
