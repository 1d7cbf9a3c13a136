"""Native ops under ACLs (rustka/native/authorization.py), over TCP with the client library.

The client does not authenticate, so it is User:ANONYMOUS; the ACLs are seeded in
the data directory before the broker starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_twisted

from rustka.client.protocol import BrokerError
from rustka.errors import NotAuthorized
from rustka.native import codec as p
from rustka.native.authorization import RULES
from rustka.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from rustka.security.acl_store import ACL_FILE, save_acls
from tests.conftest import RunningBroker, start_broker, within

ANON = "User:ANONYMOUS"


def allow(
    rtype: ResourceType, name: str, op: Operation, pattern: PatternType = PatternType.LITERAL
) -> AclBinding:
    return AclBinding(rtype, name, pattern, ANON, "*", op, Permission.ALLOW)


async def start(data_dir: Path, acls: list[AclBinding]) -> RunningBroker:
    data_dir.mkdir(parents=True, exist_ok=True)
    save_acls(data_dir / ACL_FILE, acls)
    return await start_broker(data_dir, authorizer_enabled=True)


def test_every_declared_op_has_a_rule() -> None:
    from typing import get_args

    assert set(RULES) == set(get_args(p.Request))


@pytest_twisted.ensureDeferred
async def test_each_op_is_refused_in_its_place_and_the_connection_stays(data_dir: Path) -> None:
    running = await start(
        data_dir,
        [
            allow(ResourceType.CLUSTER, "kafka-cluster", Operation.CREATE),
            allow(ResourceType.TOPIC, "in-", Operation.WRITE, PatternType.PREFIXED),
            allow(ResourceType.TOPIC, "in-b", Operation.READ),
            allow(ResourceType.GROUP, "g", Operation.READ),
        ],
    )
    try:
        client = await running.client()
        try:
            await within(client.create_topic("in-a", 1))
            await within(client.create_topic("in-b", 1))
            await within(client.create_topic("other", 1))
            assert (await within(client.produce("in-a", b"k", b"v")))[1] == 0
            with pytest.raises(BrokerError, match=r"not authorized.*WRITE on topic 'other'"):
                await within(client.produce("other", b"k", b"v"))
            with pytest.raises(NotAuthorized, match="READ on topic 'in-a'"):
                await within(client.fetch_batch("in-a", 0, 0))
            await within(client.produce("in-b", b"k", b"v"))
            fetched = await within(client.fetch_batch("in-b", 0, 0))
            assert [r.value for r in fetched.records] == [b"v"]
            # Metadata of everything lists what may be described: WRITE and READ imply it.
            listed = await within(client.metadata([]))
            assert sorted(t.name for t in listed) == ["in-a", "in-b"]
            with pytest.raises(NotAuthorized, match="DESCRIBE on topic 'other'"):
                await within(client.metadata(["other"]))
            await within(client.commit("g", "in-b", 0, 1))
            with pytest.raises(BrokerError, match="READ on group 'h'"):
                await within(client.commit("h", "in-b", 0, 1))
            assert await within(client.list_groups()) == ["g"]
            # Share groups (Kafka's ShareFetch rule): READ on the group and the topic.
            taken = await within(client.share_fetch("g", "m", "in-b", 10, 0, 1))
            assert [r.record.value for r in taken] == [b"v"]
            with pytest.raises(NotAuthorized, match="READ on group 'h'"):
                await within(client.share_fetch("h", "m", "in-b", 10))
            with pytest.raises(NotAuthorized, match="READ on topic 'in-a'"):
                await within(client.share_acknowledge("g", "m", "in-a", [(0, 0, 1)]))
            with pytest.raises(NotAuthorized, match="READ on group 'h'"):
                await within(client.share_leave("h", "m"))
            assert await within(client.share_acknowledge("g", "m", "in-b", [(0, 0, 1)])) == {0: 0}
            with pytest.raises(NotAuthorized, match="DELETE on topic 'in-a'"):
                await within(client.delete_topic("in-a"))
            with pytest.raises(NotAuthorized, match="DESCRIBE on cluster"):
                await within(client.describe_acls())
            # Still the same connection, still served.
            assert (await within(client.produce("in-a", b"k", b"w")))[1] == 1
        finally:
            await client.close()
    finally:
        await running.stop()
    assert running.top.broker.access.denials["READ"] >= 2
