#!/usr/bin/env python3
"""The virtualenvs of the stream-processing programs tests/apps/ runs against rustka.

    tools/app_venvs.py build [NAME ...]   # build each missing or stale one (all by default)
    tools/app_venvs.py python NAME        # print its interpreter, or why it is not usable

Each program (Quix Streams, faust-streaming) pins client libraries of its own
(quixstreams its confluent-kafka, faust its aiokafka range) that may disagree
with the project's test extras, so each gets its own virtualenv in the
git-ignored cache, ``.cache/apps/<name>/``, installed from
``tests/apps/requirements-<name>.txt`` (every package pinned with ``==``).

A venv counts as built only when its ``complete`` stamp holds the digest of
the requirements file and the Python it was made with: a half-built venv (pip
interrupted) or one for older pins is rebuilt from scratch, and one that is
complete is reused as it is, so scripts/test costs nothing the second time.

Only the standard library is used: scripts/test runs this with the system
Python, beside the project's venv rather than inside it.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "apps"
REQUIREMENTS = REPO / "tests" / "apps"

#: The programs, by the name of their venv and requirements file.
APPS = ("quixstreams", "faust")

STAMP = "complete"


class AppVenvError(Exception):
    """A venv that is not there or not usable; the message says how to build it."""


def requirements_of(name: str) -> Path:
    if name not in APPS:
        raise AppVenvError(f"unknown program {name!r}: one of {', '.join(APPS)}")
    return REQUIREMENTS / f"requirements-{name}.txt"


def venv_of(name: str) -> Path:
    return CACHE / name


def expected_stamp(name: str, python: str | None = None) -> str:
    """What ``complete`` says once the venv is built: the pins' digest and the base Python."""
    digest = hashlib.sha256(requirements_of(name).read_bytes()).hexdigest()
    version = python or ".".join(map(str, sys.version_info[:3]))
    return f"requirements sha256 {digest}\npython {version}\n"


def python_of(name: str) -> Path:
    """The interpreter of a complete venv for the current pins, or AppVenvError saying why not."""
    pinned = expected_stamp(name).splitlines()[0]
    venv = venv_of(name)
    python = venv / "bin" / "python"
    how = f"build it with `python3 tools/app_venvs.py build {name}` (scripts/test does)"
    stamp = venv / STAMP
    if not stamp.exists() or not python.exists():
        raise AppVenvError(f"the {name} virtualenv is not built ({venv}): {how}")
    recorded = stamp.read_text()
    pins = recorded.splitlines()[0] if recorded else ""
    if pins != pinned:
        raise AppVenvError(
            f"the {name} virtualenv ({venv}) was built for other pins than "
            f"{requirements_of(name).relative_to(REPO)}: {how}"
        )
    return python


def build(name: str) -> Path:
    """Build the venv unless a complete one for these pins is there; its interpreter."""
    requirements = requirements_of(name)
    try:
        return python_of(name)
    except AppVenvError:
        pass
    venv = venv_of(name)
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    print(f"app_venvs: building {venv}", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "install", "-r", str(requirements)], check=True)
    (venv / STAMP).write_text(expected_stamp(name))
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build_cmd = sub.add_parser("build", help="build the missing or stale venvs")
    build_cmd.add_argument("names", nargs="*", metavar="NAME", help=", ".join(APPS))
    python_cmd = sub.add_parser("python", help="print a built venv's interpreter")
    python_cmd.add_argument("name", choices=APPS)
    args = parser.parse_args(argv)
    try:
        if args.command == "python":
            print(python_of(args.name))
            return 0
        failed = []
        for name in args.names or APPS:
            try:
                build(name)
            except subprocess.CalledProcessError as exc:
                print(f"app_venvs: building {name} failed: {exc}", file=sys.stderr)
                failed.append(name)
        return 1 if failed else 0
    except AppVenvError as exc:
        print(f"app_venvs: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
