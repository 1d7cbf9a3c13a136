"""Every curl example of docs/schema-registry.md, run with the real curl against a live
registry in the order the page shows them, each output checked against the page's."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import threads

from tests.conftest import within
from tests.schema_registry.conftest import Registry

DOC = Path(__file__).resolve().parents[2] / "docs" / "schema-registry.md"
SHOWN = "http://localhost:8081"


def examples(text: str) -> list[tuple[str, str]]:
    """(command, shown output) from every ```sh block: a command starts with ``$ `` and
    continues over lines ending in a backslash; the lines up to the next command are
    what it prints."""
    found: list[tuple[str, str]] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                i += 1
                continue
            command = lines[i][2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            i += 1
            output = []
            while i < len(lines) and not lines[i].startswith("$ "):
                output.append(lines[i])
                i += 1
            found.append((command, "\n".join(output).strip()))
    return found


def same(shown: str, got: str) -> bool:
    try:
        return bool(json.loads(shown) == json.loads(got))
    except ValueError:
        return shown.strip() == got.strip()


def run_all(url: str, found: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """Each command run by the shell (the page's own text, pointed at the live registry)."""
    out: list[tuple[str, str, str]] = []
    for command, shown in found:
        assert command.startswith("curl "), command
        done = subprocess.run(
            command.replace(SHOWN, url),
            shell=True,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, (command, done.stderr)
        out.append((command, shown, done.stdout))
    return out


def test_the_page_has_curl_examples_of_every_endpoint() -> None:
    found = examples(DOC.read_text())
    paths = " ".join(command for command, _ in found)
    for endpoint in (
        "/subjects ",
        "/subjects/orders-value/versions ",
        "/subjects/orders-value/versions/1 ",
        "/versions/latest/schema",
        "/referencedby",
        "/schemas/ids/1 ",
        "/schemas/ids/1/schema",
        "/schemas/ids/1/subjects",
        "/schemas/ids/1/versions",
        "/schemas/types",
        "/compatibility/subjects/orders-value/versions/latest",
        "/compatibility/subjects/orders-value/versions?",
        "/config ",
        "/config/orders-value",
        "/mode ",
        "/mode/orders-value",
        "-X DELETE",
        "permanent=true",
    ):
        assert endpoint in paths + " ", endpoint


@pytest_twisted.ensureDeferred
async def test_every_curl_example_prints_what_the_page_shows(registry: Registry) -> None:
    assert shutil.which("curl"), "curl is missing: scripts/test installs it (Debian's curl)"
    found = examples(DOC.read_text())
    assert len(found) > 20
    results = await within(threads.deferToThread(run_all, registry.url, found), 120)
    transcript = os.environ.get("RUSTKA_DOC_TRANSCRIPT")
    if transcript:
        Path(transcript).write_text("\n".join(f"$ {c}\n{got}\n" for c, _, got in results))
    wrong: list[Any] = [(c, shown, got) for c, shown, got in results if not same(shown, got)]
    assert not wrong, wrong[0]
