"""The audit log: one structured line per user change and failed authentication.

Lines go to the broker's log under the ``rustka.audit`` namespace with their fields
as event keys, so ``log_format = "json"`` writes them as JSON objects a log
pipeline can filter on ``audit_event``.
"""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger

__all__ = ["audit", "authenticated"]

_log = Logger(namespace="rustka.audit")
_auth_log = Logger(namespace="rustka.security")


def audit(event: str, fields: dict[str, Any]) -> None:
    described = " ".join(f"{key}={value!r}" for key, value in fields.items())
    _log.info(
        "audit {audit_event}: {audit_details}",
        audit_event=event,
        audit_details=described,
        **{f"audit_{key}": value for key, value in fields.items()},
    )


def authenticated(mechanism: str, principal: object, peer: str) -> None:
    """A successful login, at info level: who is connected, from where, and how."""
    _auth_log.info(
        "{peer} authenticated as {principal} ({mechanism})",
        peer=peer,
        principal=str(principal),
        mechanism=mechanism,
    )
