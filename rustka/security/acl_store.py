"""The ACL file: every ACL the broker enforces, kept crash-safe in the data directory.

The file is text an operator can read: a first line ``rustka-acls 1 <crc32c>``
(format version, CRC-32C of the rest in hex), then one JSON object per ACL with
Kafka's enum names. It is only ever replaced whole (`file_io.replace_file`), so
a crash leaves the old set or the new one; a damaged file is refused with the
reason rather than read as "no ACLs", which with ``allow_if_no_acl`` would
open the broker (docs/security.md, "Authorization (ACLs)").
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from crc32c import crc32c

from rustka.security.acl import (
    AclBinding,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    validate_binding,
)
from rustka.storage.file_io import replace_file

__all__ = [
    "ACL_FILE",
    "AclFileError",
    "check_acl_file",
    "decode_acls",
    "encode_acls",
    "load_acls",
    "save_acls",
]

ACL_FILE: Final = "acls"
"""Its name in the data directory."""

_HEAD: Final = "rustka-acls"
_VERSION: Final = 1


class AclFileError(Exception):
    """The ACL file cannot be read as a whole set of valid ACLs."""


def encode_acls(acls: Iterable[AclBinding]) -> bytes:
    """The file's bytes for ``acls``, in a stable order (the same set, the same bytes)."""
    lines = [
        json.dumps(
            {
                "resource_type": a.resource_type.name,
                "resource_name": a.resource_name,
                "pattern_type": a.pattern_type.name,
                "principal": a.principal,
                "host": a.host,
                "operation": a.operation.name,
                "permission": a.permission.name,
            },
            ensure_ascii=False,
            sort_keys=True,
        )
        for a in sorted(set(acls))
    ]
    body = "".join(line + "\n" for line in lines).encode()
    return f"{_HEAD} {_VERSION} {crc32c(body):08x}\n".encode() + body


def decode_acls(data: bytes) -> frozenset[AclBinding]:
    """The ACLs in a file's bytes; AclFileError names the line that is wrong."""
    head, newline, body = data.partition(b"\n")
    parts = head.decode("ascii", "replace").split(" ")
    if not newline or len(parts) != 3 or parts[0] != _HEAD:
        raise AclFileError("not an ACL file (its first line is not 'rustka-acls VERSION CRC')")
    if parts[1] != str(_VERSION):
        raise AclFileError(f"ACL file version {parts[1]!r}; this rustka reads version {_VERSION}")
    if parts[2] != f"{crc32c(body):08x}":
        raise AclFileError("ACL file checksum mismatch: the file is damaged")
    acls: set[AclBinding] = set()
    for number, line in enumerate(body.decode("utf-8").splitlines(), start=2):
        try:
            fields = json.loads(line)
            acl = AclBinding(
                ResourceType[fields["resource_type"]],
                str(fields["resource_name"]),
                PatternType[fields["pattern_type"]],
                str(fields["principal"]),
                str(fields["host"]),
                Operation[fields["operation"]],
                Permission[fields["permission"]],
            )
            validate_binding(acl)
        except (ValueError, KeyError, TypeError, AclError) as e:
            raise AclFileError(f"ACL file line {number}: {e}") from None
        acls.add(acl)
    return frozenset(acls)


def load_acls(path: Path) -> frozenset[AclBinding]:
    """The stored ACLs; none when the file does not exist yet."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return frozenset()
    return decode_acls(data)


def save_acls(path: Path, acls: Iterable[AclBinding]) -> None:
    """Replace the file with ``acls``, durably (the broker's I/O pool calls this)."""
    replace_file(path, encode_acls(acls))


def check_acl_file(path: Path) -> tuple[list[str], list[str]]:
    """(problems, notes) for ``rustka check``: a damaged file is a problem (the broker
    would refuse to start with authorization on); an absent one, or a leftover of an
    interrupted write, a note."""
    notes: list[str] = []
    try:
        acls = load_acls(path) if path.exists() else None
    except AclFileError as e:
        return [f"{path}: {e}"], notes
    except OSError as e:
        return [f"{path}: cannot read: {e.strerror}"], notes
    if acls is None:
        notes.append(f"{path}: no ACL file (no ACLs)")
    else:
        notes.append(f"{path}: {len(acls)} ACLs")
    leftover = path.with_name(path.name + ".tmp")
    if leftover.exists():
        notes.append(f"{leftover}: leftover of an interrupted write (the file itself is whole)")
    return [], notes
