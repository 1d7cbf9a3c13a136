"""`rustka mirror` copies ``_schemas`` like any other topic, and a registry replaying the
copy answers with the same subjects, versions and ids (docs/schema-registry.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import threads

from tests.conftest import start_broker, within
from tests.ops.test_mirror import run_cli
from tests.schema_registry.conftest import start_registry

pytestmark = pytest.mark.clients

SCHEMA = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
SCHEMA_2 = json.dumps(
    {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 1}],
    }
)


@pytest_twisted.ensureDeferred
async def test_schemas_travel_with_the_mirror(tmp_path: Path) -> None:
    source = await start_registry(tmp_path / "source")
    try:
        await source.call("POST", "/subjects/orders-value/versions", {"schema": SCHEMA})
        await source.call("POST", "/subjects/orders-value/versions", {"schema": SCHEMA_2})
        await source.call("DELETE", "/subjects/orders-value/versions/1")
        await source.call("PUT", "/config/orders-value", {"compatibility": "FULL"})
        target = await start_broker(tmp_path / "target")
        try:
            code, _out, err = await within(
                threads.deferToThread(
                    run_cli,
                    "mirror",
                    "--broker",
                    source.running.address,
                    "--to",
                    target.address,
                    "--state",
                    str(tmp_path / "state.json"),
                    "--json",
                ),
                120,
            )
            assert code == 0, err
        finally:
            await target.stop()
    finally:
        await source.running.stop()
    copy = await start_registry(tmp_path / "target")
    try:
        assert await copy.call("GET", "/subjects/orders-value/versions?deleted=true") == (
            200,
            [1, 2],
        )
        assert await copy.call("GET", "/subjects/orders-value/versions") == (200, [2])
        _status, latest = await copy.call("GET", "/subjects/orders-value/versions/latest")
        assert (latest["id"], latest["version"]) == (2, 2)
        assert await copy.call("GET", "/config/orders-value") == (
            200,
            {"compatibilityLevel": "FULL"},
        )
    finally:
        await copy.running.stop()
