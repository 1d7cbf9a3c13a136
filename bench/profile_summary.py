"""Summarise py-spy raw (collapsed) stacks: where a broker's samples went.

    .venv/bin/python bench/profile_summary.py PROFILE.txt [--top 25]

``bench/harness.py --py-spy DIR`` leaves one such file per profiled run. A line
is ``frame;frame;...;leaf COUNT`` with frames like ``func (path/file.py:123)``.
Printed: samples per thread kind, self time per file, and the top functions by
self and by inclusive samples, which is enough to say what bounds a workload.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]+)(?::(?P<line>\d+))?\)$")


def _short(frame: str) -> tuple[str, str]:
    """(function label, file label) with the path cut to its last two parts."""
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip(), frame.strip()
    path = Path(match["file"])
    file_label = "/".join(path.parts[-2:])
    return f"{match['func']} ({file_label})", file_label


def summarise(path: Path, top: int) -> str:
    self_fn: Counter[str] = Counter()
    incl_fn: Counter[str] = Counter()
    self_file: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [_short(f) for f in stack.split(";") if f]
        if not frames:
            continue
        names = [f for f, _ in frames]
        # Pool threads start in threading's bootstrap; the reactor runs in the main thread.
        kind = "I/O pool threads" if "_bootstrap" in names[0] else "reactor thread"
        threads[kind] += count
        leaf, leaf_file = frames[-1]
        self_fn[leaf] += count
        self_file[leaf_file] += count
        for name in set(names):
            incl_fn[name] += count
    if not total:
        return f"{path}: no samples"
    out = [f"{path.name}: {total} samples"]
    shares = ", ".join(f"{k} {v / total:.0%}" for k, v in threads.most_common())
    out.append(f"  by thread: {shares}")
    out.append("  self time by file:")
    out += [f"    {v / total:6.1%}  {k}" for k, v in self_file.most_common(12)]
    out.append("  self time by function:")
    out += [f"    {v / total:6.1%}  {k}" for k, v in self_fn.most_common(top)]
    out.append("  inclusive time by function:")
    out += [f"    {v / total:6.1%}  {k}" for k, v in incl_fn.most_common(top)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("profiles", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    for profile in args.profiles:
        print(summarise(profile, args.top))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
