"""The "one declaration per API" rule of docs/architecture.md, "Adding an API".

Each Kafka API is declared by exactly one `api(...)` call in its family's module, right
after its own request and response structs; `APIS`, and through it ApiVersions' table,
hold what those calls say and nothing else.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import rustka.kafka.messages as messages
from rustka.kafka.messages import APIS, ApiKey, api_versions_table
from rustka.kafka.messages.registry import api, msg

PACKAGE = Path(messages.__file__).parent


def _declarations() -> list[tuple[str, ast.Call, list[str]]]:
    """Every top-level `api(...)` call: (module, call, names assigned before it there)."""
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        assigned: list[str] = []
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign):
                assigned += [t.id for t in node.targets if isinstance(t, ast.Name)]
            call = node.value if isinstance(node, ast.Expr) else None
            if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "api":
                found.append((path.stem, call, list(assigned)))
    return found


def test_every_api_key_has_exactly_one_declaration() -> None:
    keys = [ast.unparse(call.args[0]) for _, call, _ in _declarations()]
    assert sorted(keys) == sorted(f"ApiKey.{k.name}" for k in ApiKey)


def test_each_declaration_follows_its_own_structs_and_carries_its_versions() -> None:
    for module, call, assigned in _declarations():
        key = getattr(ApiKey, ast.unparse(call.args[0]).removeprefix("ApiKey."))
        spec = APIS[key]
        request, response = (ast.unparse(a) for a in call.args[4:6])
        # The structs are this module's, and the response is the statement just before.
        assert request in assigned and assigned[-1] == response, (module, spec.name)
        assert ast.literal_eval(call.args[2]) == (spec.min_version, spec.max_version)
        assert ast.literal_eval(call.args[3]) == spec.flexible_from
        assert ast.literal_eval(call.args[1]) == spec.name
        assert getattr(messages, module).__dict__[request] is spec.request
        # The key's enum name is the API's name in Kafka's spelling, upper snake case.
        assert key.name == re.sub(r"(?<!^)(?=[A-Z])", "_", spec.name).upper()


def test_the_advertised_table_is_derived_from_the_declarations() -> None:
    assert api_versions_table() == [
        {"api_key": k, "min_version": APIS[k].min_version, "max_version": APIS[k].max_version}
        for k in sorted(ApiKey)
    ]


def test_a_key_declared_twice_is_refused() -> None:
    st = msg("Nothing")
    with pytest.raises(ValueError, match="declared twice"):
        api(ApiKey.HEARTBEAT, "Heartbeat", (0, 0), None, st, st)
    assert APIS[ApiKey.HEARTBEAT].request is not st


def test_a_name_that_is_not_its_keys_is_refused() -> None:
    st = msg("Nothing")
    with pytest.raises(ValueError, match=r"'Heartbeats' is declared under ApiKey\.HEARTBEAT"):
        api(ApiKey.HEARTBEAT, "Heartbeats", (0, 0), None, st, st)
    assert APIS[ApiKey.HEARTBEAT].name == "Heartbeat"
