"""The embedded broker needs none of the optional extras: a broker that sets no catalog,
no schema registry and no client telemetry starts, serves and stops without importing
psycopg or boto3 (docs/diskless.md), the schema libraries (docs/schema-registry.md) or
opentelemetry-proto (docs/kafka.md, "Client telemetry (KIP-714)")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
from twisted.internet import reactor
from rustka.config import Config
from rustka.ops.tap import build_service

config = Config().updated({"data_dir": sys.argv[1], "listen": ["tcp:0:interface=127.0.0.1"]})
top = build_service(config, reactor)

def ready(_):
    top.stopService().addBoth(lambda _: reactor.stop())

def started():
    top.startService()
    top.broker.when_ready().addBoth(ready)

reactor.callWhenRunning(started)
reactor.run()
DRIVERS = ("psycopg", "psycopg_pool", "boto3", "botocore", "fastavro", "jsonschema",
           "grpc_tools", "opentelemetry", "google")
loaded = sorted(m for m in sys.modules if m.split(".")[0] in DRIVERS)
print("loaded:", loaded, "state:", top.broker.state)
"""


def test_a_broker_without_a_catalog_imports_no_optional_library(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr
    assert "loaded: [] state:" in done.stdout, done.stdout
