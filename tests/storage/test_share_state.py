"""The durable share-state log: replay, a torn tail, compaction, forgetting."""

from __future__ import annotations

from pathlib import Path

from rustka.storage.share_partition import ACCEPT, ARCHIVED, AVAILABLE, REJECT, SharePartition
from rustka.storage.share_state import LOG_NAME, SHARE_STATE_DIR, ShareStateLog

KEY = ("g", "t", 0)


def replayed(data_dir: Path) -> SharePartition:
    log = ShareStateLog.open(data_dir)
    try:
        st = log.state[KEY]
        return SharePartition.restore(st.start_offset, st.records or {})
    finally:
        log.close()


def test_a_crash_mid_way_loses_no_acknowledgement_and_keeps_delivery_counts(
    tmp_path: Path,
) -> None:
    log = ShareStateLog.open(tmp_path)
    p = SharePartition()
    log.append([(KEY, p.initialize(0))])
    _, delta = p.acquire("a", range(10), 10, now_ms=0)
    log.append([(KEY, delta)])
    log.append([(KEY, p.acknowledge("a", 0, 3, [ACCEPT]))])
    log.append([(KEY, p.acknowledge("a", 5, 5, [REJECT]))])
    # The broker dies here: records 4 and 6..9 are acquired and unacknowledged.
    log.close()
    q = replayed(tmp_path)
    assert q.start_offset == 4
    assert q.state_of(4) == (AVAILABLE, 1) and q.state_of(5) == (ARCHIVED, 1)
    got, _ = q.acquire("b", range(12), 100, now_ms=0)
    assert [(r.first, r.last, r.delivery_count) for r in got] == [
        (4, 4, 2),
        (6, 9, 2),
        (10, 11, 1),
    ]


def test_a_torn_tail_is_cut_and_later_appends_follow_intact_frames(tmp_path: Path) -> None:
    log = ShareStateLog.open(tmp_path)
    p = SharePartition()
    log.append([(KEY, p.initialize(0))])
    _, delta = p.acquire("a", range(4), 10, now_ms=0)
    log.append([(KEY, delta)])
    log.append([(KEY, p.acknowledge("a", 0, 1, [ACCEPT]))])
    log.close()
    path = tmp_path / SHARE_STATE_DIR / LOG_NAME
    whole = path.read_bytes()
    path.write_bytes(whole[:-5])  # the last acknowledgement torn mid-write
    log = ShareStateLog.open(tmp_path)
    assert log.torn_bytes > 0 and log.frames == 2
    assert log.state[KEY].start_offset == 0
    q = SharePartition.restore(log.state[KEY].start_offset, log.state[KEY].records or {})
    log.append([(KEY, q.move_start(1))])
    log.close()
    again = ShareStateLog.open(tmp_path)
    assert again.torn_bytes == 0 and again.state[KEY].start_offset == 1
    again.close()


def test_compaction_keeps_the_state_and_shrinks_the_log(tmp_path: Path) -> None:
    log = ShareStateLog.open(tmp_path)
    p = SharePartition(delivery_count_limit=1000)
    log.append([(KEY, p.initialize(0))])
    for _ in range(50):
        _, delta = p.acquire("a", range(20), 20, now_ms=0)
        log.append([(KEY, delta)])
        log.append([(KEY, p.release_member("a"))])
    log.append([(KEY, p.move_start(3))])
    before = (tmp_path / SHARE_STATE_DIR / LOG_NAME).stat().st_size
    log.compact()
    after = (tmp_path / SHARE_STATE_DIR / LOG_NAME).stat().st_size
    assert after < before / 10 and log.frames == 1
    log.close()
    q = replayed(tmp_path)
    assert q.start_offset == 3 and q.state_of(5) == (AVAILABLE, 50)


def test_reset_and_forget(tmp_path: Path) -> None:
    log = ShareStateLog.open(tmp_path)
    p = SharePartition()
    log.append([(KEY, p.initialize(7))])
    log.append([(("g", "t", 1), SharePartition().initialize(2))])
    log.append([(("h", "t", 0), SharePartition().initialize(2))])
    log.reset(KEY, 42)
    log.forget("g", "t", 1)
    log.forget("h")
    log.close()
    log = ShareStateLog.open(tmp_path)
    assert set(log.state) == {KEY} and log.state[KEY].start_offset == 42
    log.close()


def test_the_log_is_made_by_its_first_write_not_by_opening(tmp_path: Path) -> None:
    """A broker whose clients never use share groups keeps no share-state directory."""
    log = ShareStateLog.open(tmp_path)
    assert log.state == {} and not (tmp_path / SHARE_STATE_DIR).exists()
    log.append([(KEY, SharePartition().initialize(7))])
    log.close()
    assert (tmp_path / SHARE_STATE_DIR / LOG_NAME).stat().st_size > 0
    assert replayed(tmp_path).start_offset == 7
