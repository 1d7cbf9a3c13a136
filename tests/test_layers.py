"""The package table of docs/architecture.md, enforced: no layer imports one above it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "rustka"
TOP_LEVEL = {
    "config",
    "settings",
    "errors",
    "names",
    "partitioner",
    "framing",
    "output_budget",
    "allocation",
    "connections",
}
ALLOWED: dict[str, set[str]] = {
    "top": {"top", "storage"},
    "record": {"top", "record"},
    "storage": {"top", "record", "storage"},
    "broker": {"top", "record", "storage", "broker"},
    "native": {"top", "record", "storage", "broker", "native"},
    "kafka": {"top", "record", "storage", "broker", "kafka"},
    "client": {"top", "record", "native.codec", "client"},
}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "rustka":
        return "external"
    if parts[1] in TOP_LEVEL or parts[1] in ("__init__", "producer", "consumer"):
        return "top" if parts[1] in TOP_LEVEL or parts[1] == "__init__" else "shim"
    if parts[1] == "native" and len(parts) > 2 and parts[2] == "codec":
        return "native.codec"
    return parts[1]


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # "from rustka.native import codec" imports rustka.native.codec.
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_a_layer_above_its_own(path: Path) -> None:
    module = "rustka." + ".".join(path.relative_to(ROOT).with_suffix("").parts)
    own = layer_of(module)
    if own in ("ops", "shim"):
        return  # ops assembles everything; the two app shims re-export the client
    allowed = ALLOWED[own if own != "native.codec" else "native"]
    for imported in imports_of(path):
        target = layer_of(imported)
        if target == "external":
            continue
        if target == "native.codec" and ("native" in allowed or "native.codec" in allowed):
            continue
        assert target in allowed, f"{module} ({own}) imports {imported} ({target})"


def test_the_table_covers_every_package() -> None:
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == {"record", "storage", "broker", "native", "kafka", "client", "ops"}


@pytest.mark.parametrize(
    "helper", ["produce", "maintenance", "partition_lanes", "groups", "coordinator"]
)
def test_the_cores_helpers_do_not_import_the_core(helper: str) -> None:
    """They state what they need of it as a Protocol instead, so the core can own and
    build them without an import cycle (not even one for type checking only)."""
    imported = imports_of(ROOT / "broker" / f"{helper}.py")
    assert not {name for name in imported if name.startswith("rustka.broker.core")}
