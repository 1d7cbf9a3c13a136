"""The local segment log satisfies `PartitionStore`, the protocol the broker talks to.

Nothing type-checks the code in CI, so the structural match is checked here at
run time: every member the protocol declares exists on `PartitionLog` with
the same kind (property or method) and the same parameters, annotations and
return annotation. Removing or reshaping a member of either side fails.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from rustka.record.batch import Record, encode_batch
from rustka.storage.log_config import LogConfig
from rustka.storage.partition_log import PartitionLog
from rustka.storage.partition_store import PartitionStore


def _members() -> dict[str, object]:
    """The members PartitionStore declares (not those every Protocol class has)."""
    return {
        name: value
        for name, value in vars(PartitionStore).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }


def _end_of(store: PartitionStore) -> int:
    """Typed to take the protocol: a PartitionLog is passed to it below."""
    store.append(encode_batch([Record(b"k", b"v")]))
    return store.end_offset


def test_protocol_declares_what_the_broker_uses() -> None:
    """The walk below covers the members (not an empty or mis-read protocol)."""
    assert {
        "append_many",
        "append_marker",
        "read_committed",
        "last_stable_offset",
        "delete_records",
        "enforce_retention",
        "close",
    } <= set(_members())


def test_partition_log_is_a_partition_store(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", LogConfig())
    try:
        assert isinstance(log, PartitionStore)
        assert _end_of(log) == 1
        assert log.read_committed(0, 1 << 20)[1] == 1
    finally:
        log.close()


@pytest.mark.parametrize("name", sorted(_members()))
def test_partition_log_member_matches_the_protocol(name: str) -> None:
    declared = vars(PartitionStore)[name]
    implemented = inspect.getattr_static(PartitionLog, name, None)
    if isinstance(declared, property):
        if name == "config":
            # An instance attribute of the log, declared on its class.
            assert any("config" in inspect.get_annotations(c) for c in PartitionLog.__mro__)
            return
        assert isinstance(implemented, property), f"PartitionLog.{name} is not a property"
        return
    assert callable(implemented), f"PartitionLog has no method {name}"
    want = inspect.signature(declared)
    got = inspect.signature(implemented)
    assert list(got.parameters) == list(want.parameters)
    for param_name, param in want.parameters.items():
        other = got.parameters[param_name]
        assert (other.kind, other.annotation) == (param.kind, param.annotation), param_name
        assert (other.default is inspect.Parameter.empty) == (
            param.default is inspect.Parameter.empty
        ), param_name
    assert got.return_annotation == want.return_annotation
