"""A Quix Streams application with state, run on `twistd rustka` as its users run it (issue 18).

tests/apps/quix_counter.py counts words per key with ``State``. Quix creates its
output topic and the state store's changelog topic (compacted) through
rustka's CreateTopics and checks them with DescribeConfigs; its consumer
group commits on rustka's coordinator. The application is stopped and the
broker's cleaner compacts the changelog (the broker runs with settings that
clean within seconds), leaving the latest count of each key at its offset;
then the local state directory is emptied and the application started again:
it must restore the store from the compacted changelog, reading across its
gaps, and go on counting where it stopped, which its output shows record by
record.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from tests.apps.programs import (
    START_S,
    app_python,
    committed,
    create_topics,
    end_offsets,
    exact_counts,
    partitions_of,
    read_counts,
    start_compacting_broker,
    start_program,
    stop_program,
    stored_offsets,
    stored_topic_config,
    topic_configs,
    wait_committed,
    wait_compacted,
    words,
)
from tests.kafka.real_clients import confluent_produce
from tools.twistd_process import start_broker

pytestmark = pytest.mark.apps

GROUP = "word-counter"
INPUT = "words"
OUTPUT = "word-counts"
PARTITIONS = 2
#: The changelog Quix names after the group, the source topic and the store.
CHANGELOG = f"changelog__{GROUP}--{INPUT}--default"

FIRST = {"apple": 3, "banana": 1, "cherry": 4, "damson": 2, "elder": 5, "fig": 1}
SECOND = {"apple": 2, "cherry": 1, "fig": 3, "grape": 2}


def test_quix_streams_state_is_restored_from_its_changelog(tmp_path: Path) -> None:
    python = app_python("quixstreams")
    data_dir = tmp_path / "data"
    state_dir = tmp_path / "state"
    totals = {w: FIRST.get(w, 0) + SECOND.get(w, 0) for w in FIRST | SECOND}
    with start_compacting_broker(data_dir) as daemon:
        bootstrap = f"127.0.0.1:{daemon.port}"
        env = {
            "BOOTSTRAP": bootstrap,
            "GROUP": GROUP,
            "STATE_DIR": str(state_dir),
            "INPUT": INPUT,
            "OUTPUT": OUTPUT,
            "COMMIT_EVERY": "1",
        }
        create_topics(bootstrap, {INPUT: PARTITIONS})
        confluent_produce(bootstrap, INPUT, words(FIRST), partition=-1)

        with start_program(python, "quix_counter.py", [], env, tmp_path) as app:
            app.wait_for("The application started", START_S)
            first = read_counts(bootstrap, OUTPUT, sum(FIRST.values()))
            assert stop_program(app) == 0, "".join(app.output)
        assert first == exact_counts(FIRST)

        # What rustka stored: the changelog Quix created is compacted, a topic override,
        # with a partition per input partition; the group committed everything it read.
        configs = topic_configs(bootstrap, CHANGELOG)
        assert configs["cleanup.policy"] == ("compact", "DYNAMIC_TOPIC_CONFIG")
        assert configs["retention.bytes"] == ("-1", "DYNAMIC_TOPIC_CONFIG")
        assert partitions_of(bootstrap, CHANGELOG) == PARTITIONS
        # The cleaner compacts it: of every version of every count (one checkpoint per
        # record), the latest of each key is left, at its own offset; the restore below
        # reads across the gaps.
        changelog = wait_compacted(bootstrap, CHANGELOG)
        assert changelog == {f'"{w}"|"count"': str(n) for w, n in FIRST.items()}
        versions = end_offsets(bootstrap, CHANGELOG, PARTITIONS)
        assert sum(versions) == sum(FIRST.values())
        fed = end_offsets(bootstrap, INPUT, PARTITIONS)
        assert sum(fed) == sum(FIRST.values())
        assert committed(bootstrap, GROUP, INPUT, PARTITIONS) == fed

        shutil.rmtree(state_dir)
        state_dir.mkdir()
        confluent_produce(bootstrap, INPUT, words(SECOND), partition=-1)
        with start_program(python, "quix_counter.py", [], env, tmp_path) as app:
            both = read_counts(bootstrap, OUTPUT, sum(totals.values()))
            assert stop_program(app) == 0, "".join(app.output)
            assert app.logged("Recovery successful"), "".join(app.output)
        assert both == exact_counts(totals)
        fed = end_offsets(bootstrap, INPUT, PARTITIONS)
        assert committed(bootstrap, GROUP, INPUT, PARTITIONS) == fed
        assert daemon.stop() in (0, -signal.SIGTERM), "".join(daemon.output)

    assert stored_topic_config(data_dir, CHANGELOG) == {
        "cleanup.policy": "compact",
        "retention.bytes": "-1",
        "retention.ms": "604800000",
    }
    assert stored_offsets(data_dir, GROUP, INPUT, PARTITIONS) == fed


def committed_counts(bootstrap: str, expected: int) -> dict[str, list[int]]:
    """The counts a read_committed consumer gets from the output, once ``expected`` are
    there (bounded), per word in order: a count written twice would be one more."""
    import json
    import time

    from tests.kafka.test_transactions_clients import read_all

    deadline = time.monotonic() + START_S
    values: list[bytes] = []
    while time.monotonic() < deadline:
        values = read_all(bootstrap, OUTPUT, True)
        if len(values) >= expected:
            break
        time.sleep(0.5)
    seen: dict[str, list[int]] = {}
    for value in values:
        count = json.loads(value)
        seen.setdefault(count["word"], []).append(count["count"])
    assert len(values) == expected, f"{len(values)} of {expected} counts: {seen}"
    return seen


def test_quix_streams_exactly_once_counts_exactly_across_a_kill(tmp_path: Path) -> None:
    """Quix's exactly-once (issue 20): its transactional producer commits each checkpoint's
    output with the consumed offsets. Killed with SIGKILL after its first input and
    started again on more input, a read_committed reader of its output sees every count
    exactly once, 1, 2, ... n per word over both runs, and the group's offsets are the
    input's end; aborted or unfinished work never shows."""
    python = app_python("quixstreams")
    totals = {w: FIRST.get(w, 0) + SECOND.get(w, 0) for w in FIRST | SECOND}
    with start_broker(tmp_path / "data") as daemon:
        bootstrap = f"127.0.0.1:{daemon.port}"
        env = {
            "BOOTSTRAP": bootstrap,
            "GROUP": GROUP,
            "STATE_DIR": str(tmp_path / "state"),
            "INPUT": INPUT,
            "OUTPUT": OUTPUT,
            "COMMIT_EVERY": "1",
            "PROCESSING_GUARANTEE": "exactly-once",
        }
        create_topics(bootstrap, {INPUT: PARTITIONS})
        confluent_produce(bootstrap, INPUT, words(FIRST), partition=-1)
        with start_program(python, "quix_counter.py", [], env, tmp_path) as app:
            app.wait_for("The application started", START_S)
            first = committed_counts(bootstrap, sum(FIRST.values()))
            app.kill()
        assert first == exact_counts(FIRST)
        confluent_produce(bootstrap, INPUT, words(SECOND), partition=-1)
        with start_program(python, "quix_counter.py", [], env, tmp_path) as app:
            both = committed_counts(bootstrap, sum(totals.values()))
            assert stop_program(app) == 0, "".join(app.output)
        assert both == exact_counts(totals)
        fed = end_offsets(bootstrap, INPUT, PARTITIONS)
        assert committed(bootstrap, GROUP, INPUT, PARTITIONS) == fed
        # The output partition holds the counts and the transactions' control batches.
        [end] = end_offsets(bootstrap, OUTPUT, 1)
        assert end > sum(totals.values())


def test_quix_streams_a_second_instance_takes_over_a_partition_with_its_state(
    tmp_path: Path,
) -> None:
    """Scaling out: a second instance with its own empty state dir joins the group, rustka's
    coordinator rebalances the two partitions between them, and the newcomer restores its
    partition's store from the changelog before counting on; no count is lost or repeated
    across the hand-over."""
    python = app_python("quixstreams")
    totals = {w: FIRST.get(w, 0) + SECOND.get(w, 0) for w in FIRST | SECOND}
    with start_compacting_broker(tmp_path / "data") as daemon:
        bootstrap = f"127.0.0.1:{daemon.port}"
        env = {
            "BOOTSTRAP": bootstrap,
            "GROUP": GROUP,
            "INPUT": INPUT,
            "OUTPUT": OUTPUT,
            "COMMIT_EVERY": "1",
        }
        create_topics(bootstrap, {INPUT: PARTITIONS})
        confluent_produce(bootstrap, INPUT, words(FIRST), partition=-1)
        first_env = {**env, "STATE_DIR": str(tmp_path / "first")}
        second_env = {**env, "STATE_DIR": str(tmp_path / "second")}
        with start_program(python, "quix_counter.py", [], first_env, tmp_path) as first:
            assert read_counts(bootstrap, OUTPUT, sum(FIRST.values())) == exact_counts(FIRST)
            wait_committed(bootstrap, GROUP, INPUT, PARTITIONS)
            with start_program(python, "quix_counter.py", [], second_env, tmp_path) as second:
                second.wait_for("Recovery process complete", START_S)
                daemon.wait_for(rf"group {GROUP}: generation \d+ with 2 member", START_S)
                confluent_produce(bootstrap, INPUT, words(SECOND), partition=-1)
                both = read_counts(bootstrap, OUTPUT, sum(totals.values()))
                assert stop_program(second) == 0, "".join(second.output)
            assert stop_program(first) == 0, "".join(first.output)
        assert both == exact_counts(totals)
        recovered = [line for line in second.output if "Recovery successful" in line]
        assert len(recovered) == 1, recovered
        fed = end_offsets(bootstrap, INPUT, PARTITIONS)
        assert committed(bootstrap, GROUP, INPUT, PARTITIONS) == fed
