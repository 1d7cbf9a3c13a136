"""The package table of docs/architecture.md, enforced: no layer imports one above it."""

from __future__ import annotations

import ast
import re
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
    "eager_write",
    "fast_paths",
    "http_bodies",
}
LAYERS = (
    "record",
    "storage",
    "broker",
    "security",
    "native",
    "kafka",
    "client",
    "ops",
    "schema_registry",
)


def documented_rules() -> dict[str, set[str]]:
    """docs/architecture.md's "Who may import whom" table: package -> what it may import
    ("top" for the top-level modules, "native.codec" for that one module)."""
    text = (ROOT.parent / "docs" / "architecture.md").read_text()
    section = text.split("## Who may import whom", 1)[1].split("\n## ", 1)[0]
    rules: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("package", "---"):
            continue
        package, allowed = cells
        # Asides in parentheses name what a package may *not* import, or why.
        named = set(re.findall(r"`([a-z_.]+)`", re.sub(r"\([^)]*\)", "", allowed)))
        key = "top" if package.startswith("top level") else package.strip("`")
        may = {n for n in named if n in LAYERS or n == "native.codec"}
        if "top level" in allowed or key == "top":
            may.add("top")
        rules[key] = may
    return rules


ALLOWED: dict[str, set[str]] = {k: v for k, v in documented_rules().items() if k != "ops"}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "rustka":
        return "external"
    if parts[1] in TOP_LEVEL or parts[1] in ("__init__", "producer", "consumer"):
        return "top" if parts[1] in TOP_LEVEL or parts[1] == "__init__" else "shim"
    # The codec's engine and declarations are the codec: what it re-exports to the client.
    if parts[1] == "native" and len(parts) > 2 and parts[2] in ("codec", "wire", "messages"):
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


@pytest.mark.parametrize("package", ["record", "storage"])
def test_the_lowest_layers_never_import_the_configuration(package: str) -> None:
    """Settings are read above storage and handed down (a `LogConfig`, a check
    function), so storage runs in tools and a second engine without the config."""
    for path in sorted((ROOT / package).rglob("*.py")):
        found = {n for n in imports_of(path) if n.startswith(("rustka.config", "rustka.settings"))}
        assert not found, f"{path} imports {sorted(found)}"


def test_the_documented_table_is_the_one_enforced() -> None:
    """What docs/architecture.md says is exactly what these tests check: every layer has
    a row, and the rows read as the rules the package structure was built on."""
    assert {
        "top": {"top", "storage"},
        "record": {"top", "record"},
        "storage": {"top", "record", "storage"},
        "broker": {"top", "record", "storage", "broker", "security"},
        "native": {"top", "record", "storage", "broker", "native", "security"},
        "kafka": {"top", "record", "storage", "broker", "kafka", "security"},
        "client": {"top", "record", "native.codec", "client", "security"},
        "security": {"top", "storage", "security"},
        "schema_registry": {"top", "record", "storage", "broker", "security", "schema_registry"},
    } == ALLOWED
    assert "ops" in documented_rules()


def test_the_table_covers_every_package() -> None:
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == {
        "record",
        "storage",
        "broker",
        "native",
        "kafka",
        "client",
        "ops",
        "security",
        "schema_registry",
    }


@pytest.mark.parametrize(
    "helper",
    [
        "produce",
        "maintenance",
        "partition_lanes",
        "groups",
        "coordinator",
        "reads",
        "fetch_policy",
        "topic_admin",
        "committed_offsets",
        "identity",
        "markers",
        "deferreds",
    ],
)
def test_the_cores_helpers_do_not_import_the_core(helper: str) -> None:
    """They state what they need of it as a Protocol instead, so the core can own and
    build them without an import cycle (not even one for type checking only)."""
    imported = imports_of(ROOT / "broker" / f"{helper}.py")
    assert not {name for name in imported if name.startswith("rustka.broker.core")}


# -- no import cycles ------------------------------------------------------------------
#
# Two modules that import each other must change together, whether the import runs at
# load time, inside a function or only for the type checker: every import statement
# counts, ``if TYPE_CHECKING:`` blocks included.


def module_files() -> dict[str, Path]:
    """Every rustka module by its dotted name (a package by its own name)."""
    out: dict[str, Path] = {}
    for path in modules():
        parts = ["rustka", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imported_modules(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The rustka modules one module's source imports, anywhere in it.

    ``from X import name`` imports the module X.name when there is one, else X; a
    name that is no rustka module is followed up to the nearest enclosing one, and
    imports of the module's own parent packages (``from rustka import errors`` in a
    module imports ``rustka.errors``, but ``from rustka import __version__``
    imports only ``rustka``, a parent) are left out, as is the module itself.
    """
    package = module.split(".") if is_package else module.split(".")[:-1]
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                base = node.module or ""
            for alias in node.names:
                names.append(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    out: set[str] = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module and not module.startswith(name + "."):
            out.add(name)
    return out


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {
        module: imported_modules(path.read_text(), module, path.name == "__init__.py", known)
        for module, path in files.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one node (Tarjan), each
    sorted: every set of modules that reach one another through their imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_cycles_finds_every_cycle_and_nothing_else() -> None:
    graph = {
        "a": {"b"},
        "b": {"c", "d"},
        "c": {"a"},
        "d": {"e"},
        "e": {"d", "f"},
        "f": set(),
        "g": {"a"},
    }
    assert cycles(graph) == [["a", "b", "c"], ["d", "e"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_every_import_statement_counts_where_it_is_and_what_it_names() -> None:
    known = {"rustka", "rustka.kafka", "rustka.kafka.server", "rustka.kafka.messages", "rustka.x"}
    source = """
from __future__ import annotations
from typing import TYPE_CHECKING
import rustka
from rustka import x, __version__
from rustka.kafka.messages import ApiKey
from . import server
if TYPE_CHECKING:
    from rustka.kafka.server import KafkaFactory
def later():
    import rustka.kafka.messages
"""
    got = imported_modules(source, "rustka.kafka.handlers", False, known)
    assert got == {"rustka.x", "rustka.kafka.messages", "rustka.kafka.server"}
    only_typing = "if TYPE_CHECKING:\n    from rustka.kafka import server\n"
    assert imported_modules(only_typing, "rustka.kafka.handlers", False, known) == {
        "rustka.kafka.server"
    }


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert "rustka.kafka.server" in graph["rustka.ops.tap"]
    found = cycles(graph)
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in found)
