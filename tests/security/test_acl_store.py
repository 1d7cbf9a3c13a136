"""The ACL file: round trip, stability, and damage refused with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from rustka.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from rustka.security.acl_store import (
    AclFileError,
    decode_acls,
    encode_acls,
    load_acls,
    save_acls,
)

ACLS = frozenset(
    {
        AclBinding(
            ResourceType.TOPIC,
            "orders",
            PatternType.LITERAL,
            "User:alice",
            "*",
            Operation.READ,
            Permission.ALLOW,
        ),
        AclBinding(
            ResourceType.GROUP,
            "app-\u00e9",
            PatternType.PREFIXED,
            "User:*",
            "10.0.0.1",
            Operation.ALL,
            Permission.DENY,
        ),
    }
)


def test_acls_survive_a_save_and_load(tmp_path: Path) -> None:
    path = tmp_path / "acls"
    assert load_acls(path) == frozenset()
    save_acls(path, ACLS)
    assert load_acls(path) == ACLS
    save_acls(path, [])
    assert load_acls(path) == frozenset()
    assert not list(tmp_path.glob("*.tmp"))


def test_the_same_set_gives_the_same_bytes() -> None:
    assert encode_acls(ACLS) == encode_acls(sorted(ACLS, reverse=True))
    assert encode_acls(ACLS).startswith(b"rustka-acls 1 ")


def test_every_flipped_byte_is_refused() -> None:
    data = encode_acls(ACLS)
    for i in range(len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 0x01
        with pytest.raises(AclFileError):
            decode_acls(bytes(damaged))


def test_a_truncated_file_is_refused() -> None:
    data = encode_acls(ACLS)
    for end in range(len(data)):
        with pytest.raises(AclFileError):
            decode_acls(data[:end])


def test_a_valid_checksum_over_an_invalid_acl_names_the_line() -> None:
    from crc32c import crc32c

    body = (
        b'{"host": "*", "operation": "ANY", "pattern_type": "LITERAL", "permission": "ALLOW",'
        b' "principal": "User:a", "resource_name": "t", "resource_type": "TOPIC"}\n'
    )
    data = f"rustka-acls 1 {crc32c(body):08x}\n".encode() + body
    with pytest.raises(AclFileError, match="line 2: operation ANY"):
        decode_acls(data)
