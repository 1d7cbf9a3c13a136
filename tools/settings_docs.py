"""Write (or check) what is derived from the settings' declarations in rustka/config.py.

    python tools/settings_docs.py --write   # regenerate etc/rustka.toml and the docs table
    python tools/settings_docs.py           # exit 1 if either is out of date

etc/rustka.toml is generated whole; docs/operations.md holds the settings table
between the ``settings:begin``/``settings:end`` comment markers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rustka.config import TOML_PREAMBLE, Config  # noqa: E402
from rustka.settings import render_table, render_toml  # noqa: E402

TOML = ROOT / "etc" / "rustka.toml"
DOCS = ROOT / "docs" / "operations.md"
BEGIN = "<!-- settings:begin (tools/settings_docs.py --write) -->\n"
END = "<!-- settings:end -->\n"


def expected_toml() -> str:
    return render_toml(Config, TOML_PREAMBLE)


def expected_docs(current: str) -> str:
    """docs/operations.md with the table between the markers replaced."""
    if BEGIN not in current or END not in current:
        raise SystemExit(f"{DOCS}: the settings markers are missing")
    head, rest = current.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + render_table(Config) + END + tail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--write", action="store_true", help="rewrite the files instead of checking")
    args = ap.parse_args(argv)
    stale = []
    for path, want in ((TOML, expected_toml()), (DOCS, expected_docs(DOCS.read_text()))):
        if path.read_text() != want:
            if args.write:
                path.write_text(want)
                print(f"wrote {path.relative_to(ROOT)}")
            else:
                stale.append(str(path.relative_to(ROOT)))
    if stale:
        print(f"out of date: {', '.join(stale)}; run tools/settings_docs.py --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
