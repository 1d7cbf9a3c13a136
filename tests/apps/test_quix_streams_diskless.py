"""The Quix Streams word counter (tests/apps/quix_counter.py) on a `twistd rustka` with a
diskless catalog: its input and output are diskless topics, in the bucket and the
catalog and on no disk; its changelog is compacted, which diskless topics refuse, so
Quix creates it as a local topic of the broker, as docs/diskless.md says."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import psycopg
import pytest

from tests.apps.programs import (
    START_S,
    app_python,
    committed,
    end_offsets,
    exact_counts,
    read_counts,
    start_program,
    stop_program,
    topic_configs,
    words,
)
from tests.diskless.test_diskless_clients import create_topic, diskless_settings
from tests.kafka.real_clients import confluent_produce
from tests.services.seaweed import S3Place
from tools.twistd_process import start_broker

pytestmark = pytest.mark.apps

GROUP = "word-counter"
INPUT = "words"
OUTPUT = "word-counts"
PARTITIONS = 2
CHANGELOG = f"changelog__{GROUP}--{INPUT}--default"
COUNTS = {"apple": 3, "banana": 1, "cherry": 4, "damson": 2}


def test_quix_streams_counts_from_a_diskless_topic_into_a_diskless_topic(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    python = app_python("quixstreams")
    data_dir = tmp_path / "data"
    config = tmp_path / "rustka.toml"
    config.write_text(
        "".join(
            f"{key} = {json.dumps(value)}\n"
            for key, value in diskless_settings(postgres_dsn, s3_bucket).items()
        )
    )
    daemon = start_broker(data_dir, "--config", str(config))
    try:
        bootstrap = f"127.0.0.1:{daemon.port}"
        # Quix's output is read as one partition (tests/apps/programs.py, read_counts).
        for topic, count in ((INPUT, PARTITIONS), (OUTPUT, 1)):
            assert create_topic(bootstrap, topic, count, {"diskless.enable": "true"}) is None
        confluent_produce(bootstrap, INPUT, words(COUNTS), partition=-1)
        env = {
            "BOOTSTRAP": bootstrap,
            "GROUP": GROUP,
            "STATE_DIR": str(tmp_path / "state"),
            "INPUT": INPUT,
            "OUTPUT": OUTPUT,
            "COMMIT_EVERY": "1",
        }
        with start_program(python, "quix_counter.py", [], env, tmp_path) as app:
            app.wait_for("The application started", START_S)
            counts = read_counts(bootstrap, OUTPUT, sum(COUNTS.values()))
            assert stop_program(app) == 0, "".join(app.output)
        assert counts == exact_counts(COUNTS)
        fed = end_offsets(bootstrap, INPUT, PARTITIONS)
        assert sum(fed) == sum(COUNTS.values())
        assert committed(bootstrap, GROUP, INPUT, PARTITIONS) == fed
        assert topic_configs(bootstrap, CHANGELOG)["cleanup.policy"][0] == "compact"
        # Stored: input and output in the catalog, only the changelog on the disk.
        with psycopg.connect(postgres_dsn) as conn:
            rows = conn.execute(
                "SELECT t.name, sum(p.high_watermark) FROM partitions p JOIN topics t "
                "USING (topic_id) GROUP BY t.name ORDER BY t.name"
            ).fetchall()
        assert rows == [(OUTPUT, sum(COUNTS.values())), (INPUT, sum(COUNTS.values()))]
        assert not (data_dir / INPUT).exists() and not (data_dir / OUTPUT).exists()
        assert (data_dir / CHANGELOG).is_dir()
        assert daemon.stop() in (0, -signal.SIGTERM), "".join(daemon.output)
    finally:
        daemon.kill()
