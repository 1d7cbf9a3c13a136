"""The identity a connection acts as, shared by authentication and authorization.

Kafka's ``KafkaPrincipal`` is a (type, name) pair printed ``User:alice``; ACLs name
principals in that form, so rustka keeps the same shape. A connection that has not
authenticated (a listener without security) is ``User:ANONYMOUS``, as in Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ANONYMOUS", "USER_TYPE", "Principal", "parse_principal"]

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class Principal:
    """A principal: its type (always ``User`` for now, as Kafka's) and its name."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"


ANONYMOUS = Principal(USER_TYPE, "ANONYMOUS")
"""What every connection is before (or without) authentication."""


def parse_principal(text: str) -> Principal:
    """``User:alice`` as ACL requests and the CLI write it; ValueError if not that form."""
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"a principal is TYPE:NAME, such as User:alice, not {text!r}")
    return Principal(kind, name)
