"""A client certificate's subject to a principal name, as Kafka's ssl.principal.mapping.rules.

The subject is written as Java's ``X500Principal.getName()`` writes it (RFC 2253:
the most specific attribute first, ``CN=alice,OU=eng,O=example``), because that
is the string Kafka's rules are written against. The rules are a comma-separated
list tried in order; the first whose pattern matches the whole subject decides:

- ``DEFAULT``: the subject itself is the name;
- ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last
  slash to lower- or upper-case the result; ``$1`` in the replacement is the
  pattern's first group (Java's spelling), a slash inside either part is ``\\/``.

No matching rule is an authentication failure, as in Kafka.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = ["MappingError", "PrincipalMapper", "rfc2253"]

_RULE: Final = re.compile(
    r"\s*(?:(?P<default>DEFAULT)|RULE:(?P<pattern>(?:\\/|[^/])*)/"
    r"(?P<replacement>(?:\\/|[^/])*)/(?P<case>[LU]?))\s*(?:,|$)"
)
_SPECIAL: Final = re.compile(r'([,+"\\<>;])')
_JAVA_GROUP: Final = re.compile(r"\$(\d)")


class MappingError(Exception):
    """The rules do not parse, or none applies to a subject."""


def rfc2253(components: Sequence[tuple[str, str]]) -> str:
    """``[("C","US"), ("O","example"), ("CN","alice")]`` (a certificate's order) as
    ``CN=alice,O=example,C=US``, with RFC 2253's escapes."""
    parts = []
    for key, value in reversed(components):
        escaped = _SPECIAL.sub(r"\\\1", value)
        if escaped.startswith(("#", " ")):
            escaped = "\\" + escaped
        if escaped.endswith(" ") and not escaped.endswith("\\ "):
            escaped = escaped[:-1] + "\\ "
        parts.append(f"{key}={escaped}")
    return ",".join(parts)


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: str = ""

    def apply(self, subject: str) -> str | None:
        if self.pattern is None:
            return subject
        m = self.pattern.fullmatch(subject)
        if m is None:
            return None
        name = m.expand(self.replacement)
        if self.case == "L":
            return name.lower()
        if self.case == "U":
            return name.upper()
        return name


class PrincipalMapper:
    """Parsed ``ssl_principal_mapping_rules``; `name` maps one subject."""

    def __init__(self, rules: str) -> None:
        self.text = rules
        self._rules: list[_Rule] = []
        pos = 0
        text = rules.strip()
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise MappingError(f"invalid rule at {text[pos:]!r}")
            pos = m.end()
            if m["default"]:
                self._rules.append(_Rule(None))
                continue
            pattern = m["pattern"].replace("\\/", "/")
            replacement = _JAVA_GROUP.sub(r"\\g<\1>", m["replacement"].replace("\\/", "/"))
            try:
                compiled = re.compile(pattern)
            except re.error as e:
                raise MappingError(f"invalid pattern {pattern!r}: {e}") from None
            if compiled.groups < max(
                (int(g) for g in re.findall(r"\\g<(\d)>", replacement)), default=0
            ):
                raise MappingError(f"replacement {m['replacement']!r} names a missing group")
            self._rules.append(_Rule(compiled, replacement, m["case"]))
        if not self._rules:
            raise MappingError("no rules (use DEFAULT for the subject itself)")

    def name(self, subject: str) -> str:
        for rule in self._rules:
            result = rule.apply(subject)
            if result is not None:
                if not result:
                    raise MappingError(f"the rules map {subject!r} to an empty name")
                return result
        raise MappingError(f"no rule applies to {subject!r}")
