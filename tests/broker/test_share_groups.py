"""The share-group coordinator on a running broker core: membership, acquire, acknowledge,
lock expiry on the coordinator's clock, durability across a new coordinator."""

from __future__ import annotations

from pathlib import Path

import pytest_twisted
from twisted.internet.task import Clock

from rustka.broker.share_groups import (
    E,
    ShareGroupCoordinator,
    ShareSettings,
    _simple_assignment,
)
from rustka.record.batch import Record, encode_batch, ms_now
from rustka.storage.share_partition import ACCEPT, REJECT, RELEASE
from rustka.storage.share_state import ShareStateLog
from tests.conftest import RunningBroker, within


def batch(*values: bytes) -> bytes:
    return encode_batch([Record(b"k", v) for v in values], timestamp=ms_now())


def test_simple_assignment_covers_every_partition_and_shares_when_short() -> None:
    few = _simple_assignment({"a": ["t"], "b": ["t"]}, {"t": 3})
    assert few == {"a": {"t": [0, 2]}, "b": {"t": [1]}}
    many = _simple_assignment({m: ["t"] for m in "abc"}, {"t": 2})
    assert many == {"a": {"t": [0]}, "b": {"t": [1]}, "c": {"t": [0]}}


def coordinator(
    broker: RunningBroker, clock: Clock, **settings: object
) -> tuple[ShareGroupCoordinator, ShareStateLog]:
    state_log = ShareStateLog.open(Path(broker.config.data_dir))
    s = ShareSettings(auto_offset_reset="earliest", **settings)  # type: ignore[arg-type]
    return ShareGroupCoordinator(clock, broker.broker, state_log, settings=s), state_log


@pytest_twisted.ensureDeferred
async def test_membership_epochs_and_classic_groups_are_refused(broker: RunningBroker) -> None:
    core = broker.broker
    await within(core.create_topic("q", 2))
    clock = Clock()
    state_log = ShareStateLog.open(Path(broker.config.data_dir))
    c = ShareGroupCoordinator(clock, core, state_log, classic_has_members=lambda g: g == "classic")
    assert c.heartbeat("classic", "", 0, ["q"]).error == E.GROUP_ID_NOT_FOUND
    a = c.heartbeat("g", "", 0, ["q"])
    assert a.error == E.NONE and a.member_epoch == 1 and a.assignment == {"q": [0, 1]}
    assert c.is_share_group("g") and not c.is_share_group("classic")
    b = c.heartbeat("g", "mb", 0, ["q"])
    assert b.member_epoch == 2 and b.assignment == {"q": [1]}
    assert c.heartbeat("g", a.member_id, 1, None).error == E.FENCED_MEMBER_EPOCH
    assert c.heartbeat("g", "nobody", 3, None).error == E.UNKNOWN_MEMBER_ID
    described = c.describe("g")
    assert described.state == "Stable" and len(described.members) == 2
    clock.advance(46)  # both sessions time out
    assert c.describe("g").members == () and c.list_groups() == [("g", "Empty")]
    c.close()
    state_log.close()


@pytest_twisted.ensureDeferred
async def test_acquire_acknowledge_expire_and_survive_a_new_coordinator(
    broker: RunningBroker,
) -> None:
    core = broker.broker
    await within(core.create_topic("q", 1))
    await within(core.append("q", 0, batch(*[b"%d" % i for i in range(10)]), auto_create=False))
    clock = Clock()
    c, state_log = coordinator(broker, clock, lock_duration_ms=1000, delivery_count_limit=2)
    a = await within(c.acquire("g", "a", "q", 0, 4))
    b = await within(c.acquire("g", "b", "q", 0, 100))
    assert [(r.first, r.last, r.delivery_count) for r in a.acquired] == [(0, 3, 1)]
    assert [(r.first, r.last, r.delivery_count) for r in b.acquired] == [(4, 9, 1)]
    assert a.chunks and a.records == 4 and b.records == 6
    assert await within(c.acknowledge("g", "b", "q", 0, [(0, 0, [ACCEPT])])) == (
        E.INVALID_RECORD_STATE
    )
    assert await within(c.acknowledge("g", "a", "q", 0, [(0, 1, [ACCEPT]), (2, 2, [REJECT])])) == 0
    assert await within(c.acknowledge("g", "a", "q", 0, [(3, 3, [RELEASE])])) == 0
    clock.advance(1.0)  # b's lock runs out
    again = await within(c.acquire("g", "a", "q", 0, 100))
    assert [(r.first, r.last, r.delivery_count) for r in again.acquired] == [(3, 9, 2)]
    counts = c.counts
    assert (counts.acquired, counts.accepted, counts.rejected, counts.lock_expiries) == (
        17,
        2,
        1,
        6,
    )
    assert c.describe_offsets("g") == {("q", 0): 3}
    await within(c.acknowledge("g", "a", "q", 0, [(3, 4, [ACCEPT])]))
    # The broker dies: a new coordinator replays the log. 5..9 come back counted.
    c.close()
    state_log.close()
    c2, log2 = coordinator(broker, Clock(), lock_duration_ms=1000, delivery_count_limit=3)
    after = await within(c2.acquire("g", "z", "q", 0, 100))
    assert [(r.first, r.last, r.delivery_count) for r in after.acquired] == [(5, 9, 3)]
    assert c2.is_share_group("g")
    assert await within(c2.alter_offsets("g", {("q", 0): 8})) == 0
    assert c2.describe_offsets("g") == {("q", 0): 8}
    assert await within(c2.delete_offsets("g")) == 0
    assert not c2.is_share_group("g")
    c2.close()
    log2.close()


@pytest_twisted.ensureDeferred
async def test_the_broker_core_builds_the_share_coordinator_on_its_state_log(
    broker: RunningBroker,
) -> None:
    core = broker.broker
    share = core.share_groups
    assert share is not None and core.share_state is not None
    await within(core.create_topic("w", 1))
    await within(core.append("w", 0, batch(b"a", b"b"), auto_create=False))
    share.set_auto_offset_reset("g", "earliest")
    got = await within(share.acquire("g", "m", "w", 0, 10))
    assert got.records == 2
    assert core.share_state.state[("g", "w", 0)].records == {0: (0, 1), 1: (0, 1)}
