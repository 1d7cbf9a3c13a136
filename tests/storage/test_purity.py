"""rustka.storage and rustka.record are plain blocking Python: nothing in them imports Twisted.

The storage layer runs in the broker's I/O threads, in tools and in tests
without a reactor (docs/architecture.md, the layer table). Two checks: the
source of every module names no Twisted import, and importing every module in
a fresh interpreter leaves Twisted out of ``sys.modules`` (which also catches
an indirect import through a top-level module).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import rustka.record
import rustka.storage

STORAGE = Path(rustka.storage.__file__).parent
# The record format sits below storage and runs in the same threads: it is held to the same rule.
RECORD = Path(rustka.record.__file__).parent
ROOT = STORAGE.parent.parent


def _modules() -> list[Path]:
    return sorted([*STORAGE.rglob("*.py"), *RECORD.rglob("*.py")])


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _imported_names(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_storage_modules_exist() -> None:
    """The walk below really covers the storage modules (not an empty directory)."""
    names = {p.stem for p in _modules()}
    assert {
        "segment",
        "offset_index",
        "time_index",
        "partition_log",
        "batch",
        "compression",
    } <= names


def test_no_storage_source_imports_twisted() -> None:
    """No import statement in rustka/storage names twisted or a twisted submodule."""
    offenders = {
        str(path.relative_to(ROOT)): name
        for path in _modules()
        for name in _imported_names(path)
        if name == "twisted" or name.startswith("twisted.")
    }
    assert offenders == {}


def test_importing_storage_loads_no_twisted() -> None:
    """Every storage module imported in a fresh interpreter: twisted is not in sys.modules."""
    modules = [_module_name(p) for p in _modules() if p.stem != "__init__"]
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'twisted'"
        " or m.startswith('rustka.'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    loaded = json.loads(done.stdout)
    assert set(modules) <= set(loaded)
    assert [m for m in loaded if m.split(".")[0] == "twisted"] == []
