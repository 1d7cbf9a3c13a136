"""A faust-streaming application with a Table, run on `twistd rustka` as users run it (issue 18).

tests/apps/faust_counter.py counts words per key in a RocksDB-backed Table.
faust creates the table's changelog topic (compacted) and its assignor topic
through rustka's CreateTopics, joins rustka's group coordinator with its own
partition assignor, and commits there. The worker is stopped and the broker's
cleaner compacts the changelog (the broker runs with settings that clean
within seconds), leaving the latest count of each key at its offset; then the
worker's data dir (where the table lives) is deleted and the worker started
again: it must rebuild the table from the compacted changelog, reading across
its gaps, and go on counting where it stopped, which its output shows record
by record.

Each batch of words is produced once the worker says it is ready: a faust
worker fetches its source partitions while it recovers a table and may drop or
repeat records it received in that window (faust's own ordering of its seek and
its flow control, client-side; docs/kafka.md, "Stream-processing programs"), so
the test feeds it when it serves, as a running worker is fed.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
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

APP_ID = "word-counter"
INPUT = "words"
OUTPUT = "word-counts"
PARTITIONS = 2
#: The changelog faust names after the application and the table.
CHANGELOG = f"{APP_ID}-counts-changelog"
READY = r"\[\^Worker\]: Ready"
#: Logged at the end of each recovery: at start, and after every rebalance.
RECOVERY_READY = r"\[\^---Recovery\]: Worker ready"
RECOVERED = r"\[\^---Recovery\]: Done reading from changelog topics"

FIRST = {"apple": 3, "banana": 1, "cherry": 4, "damson": 2, "elder": 5, "fig": 1}
SECOND = {"apple": 2, "cherry": 1, "fig": 3, "grape": 2}


def test_faust_table_is_recovered_from_its_changelog(tmp_path: Path) -> None:
    python = app_python("faust")
    data_dir = tmp_path / "data"
    faust_dir = tmp_path / "faust"
    totals = {w: FIRST.get(w, 0) + SECOND.get(w, 0) for w in FIRST | SECOND}
    with start_compacting_broker(data_dir) as daemon:
        bootstrap = f"127.0.0.1:{daemon.port}"
        env = {
            "BOOTSTRAP": bootstrap,
            "APP_ID": APP_ID,
            "DATA_DIR": str(faust_dir),
            "INPUT": INPUT,
            "OUTPUT": OUTPUT,
        }
        worker = ["worker", "--without-web", "--loglevel", "info"]
        create_topics(bootstrap, {INPUT: PARTITIONS, OUTPUT: 1})

        with start_program(python, "faust_counter.py", worker, env, tmp_path) as app:
            app.wait_for(READY, START_S)
            confluent_produce(bootstrap, INPUT, words(FIRST), partition=-1)
            first = read_counts(bootstrap, OUTPUT, sum(FIRST.values()))
            assert stop_program(app) == 0, "".join(app.output)
        assert first == exact_counts(FIRST)

        # What rustka stored: the changelog faust created is compacted, a topic override,
        # with the table's partitions; the group committed everything the agent read.
        configs = topic_configs(bootstrap, CHANGELOG)
        assert configs["cleanup.policy"] == ("compact", "DYNAMIC_TOPIC_CONFIG")
        assert partitions_of(bootstrap, CHANGELOG) == PARTITIONS
        # The cleaner compacts it: of every version of every count (faust writes one per
        # update), the latest of each key is left, at its own offset; the recovery below
        # reads across the gaps.
        changelog = wait_compacted(bootstrap, CHANGELOG)
        assert changelog == {f'"{w}"': str(n) for w, n in FIRST.items()}
        assert sum(end_offsets(bootstrap, CHANGELOG, PARTITIONS)) == sum(FIRST.values())
        fed = end_offsets(bootstrap, INPUT, PARTITIONS)
        assert sum(fed) == sum(FIRST.values())
        assert committed(bootstrap, APP_ID, INPUT, PARTITIONS) == fed

        shutil.rmtree(faust_dir)
        with start_program(python, "faust_counter.py", worker, env, tmp_path) as app:
            app.wait_for(RECOVERED, START_S)
            app.wait_for(READY, START_S)
            confluent_produce(bootstrap, INPUT, words(SECOND), partition=-1)
            both = read_counts(bootstrap, OUTPUT, sum(totals.values()))
            assert stop_program(app) == 0, "".join(app.output)
        assert both == exact_counts(totals)
        fed = end_offsets(bootstrap, INPUT, PARTITIONS)
        assert committed(bootstrap, APP_ID, INPUT, PARTITIONS) == fed
        assert daemon.stop() in (0, -signal.SIGTERM), "".join(daemon.output)

    assert stored_topic_config(data_dir, CHANGELOG) == {"cleanup.policy": "compact"}
    assert stored_offsets(data_dir, APP_ID, INPUT, PARTITIONS) == fed


def test_faust_a_second_worker_takes_over_a_partition_with_its_table(tmp_path: Path) -> None:
    """Scaling out: a second worker with its own empty data dir joins the group, faust's
    assignor (run by the group's leader, carried by rustka's SyncGroup) gives it a
    partition, it rebuilds that partition of the table from the changelog, and no count
    is lost or repeated across the hand-over."""
    python = app_python("faust")
    totals = {w: FIRST.get(w, 0) + SECOND.get(w, 0) for w in FIRST | SECOND}
    with start_compacting_broker(tmp_path / "data") as daemon:
        bootstrap = f"127.0.0.1:{daemon.port}"
        env = {"BOOTSTRAP": bootstrap, "APP_ID": APP_ID, "INPUT": INPUT, "OUTPUT": OUTPUT}
        worker = ["worker", "--without-web", "--loglevel", "info"]
        create_topics(bootstrap, {INPUT: PARTITIONS, OUTPUT: 1})
        first_env = {**env, "DATA_DIR": str(tmp_path / "first")}
        second_env = {**env, "DATA_DIR": str(tmp_path / "second")}
        with start_program(python, "faust_counter.py", worker, first_env, tmp_path) as first:
            first.wait_for(READY, START_S)
            confluent_produce(bootstrap, INPUT, words(FIRST), partition=-1)
            assert read_counts(bootstrap, OUTPUT, sum(FIRST.values())) == exact_counts(FIRST)
            # faust commits every 2.8 s; a worker revoked before that commit sent none (no
            # OffsetCommit reached the broker), so its successor processed the partition
            # again: at-least-once, faust's own (docs/kafka.md). Scale out once committed.
            wait_committed(bootstrap, APP_ID, INPUT, PARTITIONS)
            with start_program(python, "faust_counter.py", worker, second_env, tmp_path) as second:
                second.wait_for(RECOVERED, START_S)
                second.wait_for(READY, START_S)
                first.wait_for(RECOVERY_READY, START_S)
                daemon.wait_for(rf"group {APP_ID}: generation \d+ with 2 member", START_S)
                confluent_produce(bootstrap, INPUT, words(SECOND), partition=-1)
                both = read_counts(bootstrap, OUTPUT, sum(totals.values()))
                # The same holds for the way back: stopping the second worker revokes the
                # first's partitions too, and faust drops what it processed and did not
                # commit yet (the broker sees no OffsetCommit for it), so stop once both
                # have committed; the final check shows the stops lost none of it.
                wait_committed(bootstrap, APP_ID, INPUT, PARTITIONS)
                assert stop_program(second) == 0, "".join(second.output)
            assert stop_program(first) == 0, "".join(first.output)
        assert both == exact_counts(totals)
        fed = end_offsets(bootstrap, INPUT, PARTITIONS)
        assert committed(bootstrap, APP_ID, INPUT, PARTITIONS) == fed


def changelog_counts(bootstrap: str, committed: bool) -> dict[str, list[int]]:
    """Every count the table's changelog holds, per word in order, as a consumer of that
    isolation level reads both partitions to the end it sees (bounded polls)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "changelog-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    seen: dict[str, list[int]] = {}
    try:
        consumer.assign([TopicPartition(CHANGELOG, p, 0) for p in range(PARTITIONS)])
        at_end: set[int] = set()
        for _ in range(300):
            if len(at_end) == PARTITIONS:
                break
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == -191, f"changelog reader: {msg.error()}"
                at_end.add(msg.partition())
                continue
            seen.setdefault(json.loads(msg.key()), []).append(json.loads(msg.value()))
        assert len(at_end) == PARTITIONS, "the changelog reader never reached the end"
    finally:
        consumer.close()
    return seen


def wait_changelog(bootstrap: str, expected: int, committed: bool) -> dict[str, list[int]]:
    """changelog_counts once it holds ``expected`` counts (bounded by START_S), and no more."""
    deadline = time.monotonic() + START_S
    while True:
        seen = changelog_counts(bootstrap, committed)
        held = sum(len(counts) for counts in seen.values())
        if held >= expected or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    level = "read_committed" if committed else "read_uncommitted"
    assert held == expected, f"{level}: {held} of {expected} counts: {seen}"
    return seen


def test_faust_exactly_once_counts_exactly_across_a_kill(tmp_path: Path) -> None:
    """faust's exactly-once (issue 20): a transactional producer per source partition whose
    transactions carry the table's changelog writes and the consumed offsets.

    The first worker commits once, after FIRST (``broker_commit_every`` is FIRST's size
    and the interval an hour, so its commit is the one the next record triggers), then
    counts one more word in a transaction it never ends: SIGKILL. The second worker
    fences the dead one (its InitProducerId aborts that transaction), rebuilds the table
    from the committed changelog (a memory store: nothing local survives), counts the
    extra word again and SECOND. A read_committed reader of the changelog sees every
    count exactly once, 1..n per word over both runs; a read_uncommitted one also sees
    the aborted count, so the transactions were real; the group's offsets are the
    input's end. (faust sends to a topic outside its topology, the counts topic here,
    with its plain idempotent producer, outside the transactions: docs/kafka.md,
    "Stream-processing programs".)
    """
    python = app_python("faust")
    extra = {"kiwi": 1}
    totals = {w: FIRST.get(w, 0) + SECOND.get(w, 0) for w in FIRST | SECOND}
    totals["kiwi"] = 1
    with start_broker(tmp_path / "data") as daemon:
        bootstrap = f"127.0.0.1:{daemon.port}"
        env = {
            "BOOTSTRAP": bootstrap,
            "APP_ID": APP_ID,
            "DATA_DIR": str(tmp_path / "faust"),
            "INPUT": INPUT,
            "OUTPUT": OUTPUT,
            "PROCESSING_GUARANTEE": "exactly_once",
            "STORE": "memory://",
        }
        worker = ["worker", "--without-web", "--loglevel", "info"]
        create_topics(bootstrap, {INPUT: PARTITIONS, OUTPUT: 1})
        n = sum(FIRST.values())
        once = {**env, "COMMIT_INTERVAL": "3600", "COMMIT_EVERY": str(n)}
        with start_program(python, "faust_counter.py", worker, once, tmp_path) as app:
            app.wait_for(READY, START_S)
            confluent_produce(bootstrap, INPUT, words(FIRST), partition=-1)
            assert wait_changelog(bootstrap, n, False) == exact_counts(FIRST)
            confluent_produce(bootstrap, INPUT, words(extra), partition=-1)
            first = wait_changelog(bootstrap, n, True)
            open_ = wait_changelog(bootstrap, n + 1, False)
            app.kill()
        assert first == exact_counts(FIRST)
        assert open_ == exact_counts({**FIRST, **extra})
        # Still open after the kill: the extra count is nobody's to read committed.
        assert wait_changelog(bootstrap, n, True) == exact_counts(FIRST)
        assert committed(bootstrap, APP_ID, INPUT, PARTITIONS) != end_offsets(
            bootstrap, INPUT, PARTITIONS
        )

        with start_program(python, "faust_counter.py", worker, env, tmp_path) as app:
            app.wait_for(READY, START_S)
            confluent_produce(bootstrap, INPUT, words(SECOND), partition=-1)
            both = wait_changelog(bootstrap, sum(totals.values()), True)
            fed = wait_committed(bootstrap, APP_ID, INPUT, PARTITIONS)
            assert stop_program(app) == 0, "".join(app.output)
        assert both == exact_counts(totals)
        assert sum(fed) == sum(totals.values())
        # The aborted count is stored, and dropped only by read_committed readers.
        uncommitted = wait_changelog(bootstrap, sum(totals.values()) + 1, False)
        assert uncommitted["kiwi"] == [1, 1]
        # Control batches sit between the counts: the partitions end past them.
        ends = end_offsets(bootstrap, CHANGELOG, PARTITIONS)
        assert sum(ends) > sum(totals.values()) + 1
        assert daemon.stop() in (0, -signal.SIGTERM), "".join(daemon.output)
