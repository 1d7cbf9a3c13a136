"""Two brokers sharing a catalog share one ``_schemas`` (a diskless topic): each one's
registry sees the other's schemas, and ids allocated at the same moment on both never
name two schemas (docs/schema-registry.md, "In a cluster")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import defer

from tests.conftest import reactor_turns, within
from tests.diskless.test_cluster import LEASE_MS, all_live
from tests.diskless.test_diskless_clients import diskless_settings
from tests.schema_registry.conftest import Registry, start_registry
from tests.services.seaweed import S3Place

pytestmark = pytest.mark.clients


def schema(name: str) -> str:
    """A record named ``name``; P and Q are two compatible versions of record S."""
    if name == "P":
        return json.dumps({"type": "record", "name": "S", "fields": []})
    if name == "Q":
        field = {"name": "q", "type": "int", "default": 0}
        return json.dumps({"type": "record", "name": "S", "fields": [field]})
    return json.dumps({"type": "record", "name": name, "fields": []})


@pytest_twisted.ensureDeferred
async def test_two_brokers_share_schemas_and_never_reuse_an_id(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    settings = diskless_settings(postgres_dsn, s3_bucket, cluster_lease_ms=LEASE_MS)
    one: Registry = await start_registry(tmp_path / "b1", **settings, broker_id=1)
    two: Registry = await start_registry(tmp_path / "b2", **settings, broker_id=2)
    try:
        await all_live([one.running, two.running], (1, 2))
        topic = one.running.broker.topic("_schemas")
        assert topic.partitions[0].config.diskless_enable
        status, _ = await one.call("POST", "/subjects/a/versions", {"schema": schema("A")})
        assert status == 200
        await reactor_turns(lambda: 1 in two.service.store.registry.by_id, 30)
        assert await two.call("GET", "/subjects") == (200, ["a"])
        # both register different schemas at once: distinct ids, each seen by both
        results = await within(
            defer.gatherResults(
                [
                    defer.Deferred.fromCoroutine(
                        one.call("POST", "/subjects/x/versions", {"schema": schema("X")})
                    ),
                    defer.Deferred.fromCoroutine(
                        two.call("POST", "/subjects/y/versions", {"schema": schema("Y")})
                    ),
                    defer.Deferred.fromCoroutine(
                        one.call("POST", "/subjects/same/versions", {"schema": schema("P")})
                    ),
                    defer.Deferred.fromCoroutine(
                        two.call("POST", "/subjects/same/versions", {"schema": schema("Q")})
                    ),
                ]
            ),
            60,
        )
        assert all(status == 200 for status, _ in results), results
        ids = [body["id"] for _, body in results]
        assert len(set(ids)) == 4, results
        versions = sorted(body["version"] for _, body in results[2:])
        assert versions == [1, 2]
        await reactor_turns(
            lambda: all(set(ids) <= set(r.service.store.registry.by_id) for r in (one, two)),
            30,
        )
        for r in (one, two):
            for (_, body), name in zip(results, "XYPQ", strict=True):
                status, got = await r.call("GET", f"/schemas/ids/{body['id']}")
                assert got["schema"] == json.dumps(
                    json.loads(body["schema"]), separators=(",", ":")
                )
                assert json.loads(got["schema"])["name"] == ("S" if name in "PQ" else name)
    finally:
        await two.running.stop()
        await one.running.stop()
