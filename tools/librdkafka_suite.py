#!/usr/bin/env python3
"""librdkafka's own integration test suite, from Debian's source package, against rustka.

    sudo tools/librdkafka_suite.py deb-src       # once per machine, if apt has no deb-src
    tools/librdkafka_suite.py build              # once: fetch, configure, build test-runner
    tools/librdkafka_suite.py list               # the tests a run runs, one name a line
    tools/librdkafka_suite.py run HOST:PORT [NNNN ...]   # run them against a broker

`build` takes the source of the librdkafka that is installed (``apt-get source
librdkafka=<version of librdkafka-dev>``, adding a deb-src entry for the
archive the machine already uses if there is none) and builds only the test
runner, linked against Debian's librdkafka1/librdkafka++1: the library under
test is the very one kcat uses, and building it is not needed. The result lives
in a git-ignored cache (``.cache/librdkafka/<version>/``) and is reused while the
installed version stays the same.

Which tests run, and which fail today, is decided in docs/kafka.md ("librdkafka's
test suite"): two tables this module parses, so the documentation is the one
list. A run runs every broker test of the suite's table in tests/test.c (not the
broker-less TEST_F_LOCAL ones, not the manual ones, not those the suite itself
flags as known issues) except those of the "not run" table, each test number in
a test-runner process of its own, so a test that hangs or kills its process
takes only itself down.

Only the standard library is used: scripts/test runs `build` with the system
Python before or without the project's venv.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "librdkafka"
DOC = REPO / "docs" / "kafka.md"
DEV_PACKAGE = "librdkafka-dev"
SOURCE_PACKAGE = "librdkafka"
DEB_SRC_FILE = Path("/etc/apt/sources.list.d/rustka-deb-src.sources")
DEB822_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
ONE_LINE_SOURCES = Path("/etc/apt/sources.list")

#: What the runner is told the broker is. rustka's API versions are those of Kafka
#: 2.4 (Produce 8, Fetch 11, Metadata 8, JoinGroup 5), and 2.4.0 is the runner's
#: own default; tests needing a newer broker are skipped by the runner itself.
BROKER_VERSION = "2.4.0"

#: configure switches: the library is not built, so these only shape config.h for
#: the test sources. No SSL/SASL/OIDC (their tests are not run), the bundled LZ4
#: (no liblz4-dev needed), and no optimisation or debug info, which halves the
#: compile time of ~170 test files.
CONFIGURE_FLAGS = (
    "--no-download",
    "--disable-ssl",
    "--disable-gssapi",
    "--disable-curl",
    "--disable-lz4-ext",
    "--disable-optimization",
    "--disable-debug-symbols",
)

#: Headers configure must find (they become WITH_ZLIB, WITH_ZSTD and WITH_RAPIDJSON in
#: config.h) and their packages: the codecs Debian's library has are then tested,
#: and RapidJSON lets the statistics tests (0053_stats, 0110_batch_size) check the
#: JSON they parse instead of skipping.
INCLUDE = Path("/usr/include")
HEADERS = {"zlib.h": "zlib1g-dev", "zstd.h": "libzstd-dev", "rapidjson/schema.h": "rapidjson-dev"}

#: The runner's test.conf, as the suite's own trivup harness writes it for a
#: PLAINTEXT cluster (tests/LibrdkafkaTestApp.py), with our broker.
TEST_CONF = """\
bootstrap.servers={bootstrap}
broker.address.family=v4
security.protocol=PLAINTEXT
test.timeout.multiplier=2
broker.version.fallback=0.10.0.0
api.version.fallback.ms=0
"""

#: Broker settings per trivup scenario (tests/scenarios/*.json): "default" auto-creates
#: topics with 4 partitions, "noautocreate" creates none.
SCENARIO_SETTINGS: dict[str, dict[str, object]] = {
    "default": {"default_partitions": 4, "auto_create_topics": True},
    "noautocreate": {"default_partitions": 4, "auto_create_topics": False},
}

#: Runner processes at once. The tests mostly wait (timers, session timeouts), so
#: six share the broker and two cores without timing out: a run takes under 3
#: minutes instead of the ~17 of one at a time (4 minutes with four).
PARALLEL = 6

#: Runner options for single test numbers: extra arguments and environment.
RUNNER_OPTIONS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    # The suite's quick mode runs subtests a-c; the full run adds o_java_interop,
    # which needs Kafka's Java client, and some 30 more subtests (minutes).
    "0113": (("-Q",), {}),
    # Told 2.0, the test skips its first step, a topic denied with Kafka's
    # kafka-acls.sh (rustka has no ACLs, and no Kafka tools are installed).
    "0109": ((), {"TEST_KAFKA_VERSION": "2.0.0"}),
}

#: Numbers that take longest alone (30-120 s), started first so that they overlap.
SLOW_FIRST = (
    "0113",
    "0076",
    "0091",
    "0094",
    "0026",
    "0033",
    "0122",
    "0018",
    "0093",
    "0068",
    "0030",
    "0088",
    "0049",
    "0114",
    "0084",
    "0123",
)

#: Numbers whose assertion measures the client's own timing, run alone after the
#: others, one at a time. 0110_batch_size checks the average size of the batches
#: librdkafka formed, and with five other runners starving it of CPU librdkafka
#: sends some batches of one to three records (seen as an average of 3,588-3,756
#: bytes against the 3,900 it demands; alone it forms 4,097-byte batches every
#: time). 0055_producer_latency checks each delivery's latency against linger.ms
#: plus the measured round trip plus 5 ms; with acks=0 no broker answer is awaited
#: at all, so what it times is the client's own send loop, and a starved client
#: missed it once in CI (librdkafka's newer suite skips the test on CI for this).
#: Alone, 0055 still depends on when the client samples itself: its "low linger.ms"
#: and "no acks" cases demand at least 10 wakeups of the client's broker thread in
#: the statistics it takes every 100 ms, and ten deliveries done in 16 ms were once
#: counted as 9. So a failed run of these is run once more, its first log kept as
#: ``NNNN-SCENARIO.first.log``, and the second run decides. 0102_static_group_rebalance
#: waits for each rebalance within a few seconds of its static members' session
#: timeouts; among five other runners on two cores a member starved past its session
#: once, the broker rebalanced as Kafka would, and the test saw a revocation it did not
#: expect (alone it passed every run), so it runs alone too.
ALONE = ("0110", "0055", "0102")

#: A test-runner process is killed after this long; the runner's own per-test
#: timeouts are shorter, so this only catches a runner that hangs outright.
PROCESS_TIMEOUT_S = 300

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SUMMARY_ROW = re.compile(
    r"^\|\s*(\d{4}_\w+)\s*\|\s*(PASSED|FAILED|SKIPPED|RUNNING|NOT STARTED)\s*\|"
)


class SuiteError(Exception):
    """A set-up step failed; the message says what to do."""


# --------------------------------------------------------------------------- build


def installed_version() -> str:
    """The Debian version of the librdkafka the runner links against."""
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", DEV_PACKAGE],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise SuiteError(f"{DEV_PACKAGE} is not installed: apt-get install {DEV_PACKAGE}")
    return done.stdout.strip()


def build_dir(version: str, cache: Path = CACHE) -> Path:
    return cache / version


def runner_path(version: str, cache: Path = CACHE) -> Path:
    return build_dir(version, cache) / "src" / "tests" / "test-runner"


def deb_src_stanzas(deb822: str) -> list[str]:
    """deb-src twins of the ``Types: deb`` stanzas of a deb822 sources file.

    Each keeps its URIs, Suites, Components and Signed-By; comments are dropped.
    A stanza that already lists deb-src needs no twin.
    """
    out: list[str] = []
    for stanza in re.split(r"\n\s*\n", deb822):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, value = line.split(":", 1)
            fields[key.strip()] = value.strip()
        types = fields.get("Types", "").split()
        if "deb" not in types or "deb-src" in types or fields.get("Enabled") == "no":
            continue
        lines = ["Types: deb-src"]
        lines += [f"{k}: {fields[k]}" for k in ("URIs", "Suites", "Components") if k in fields]
        if "Signed-By" in fields:
            lines.append(f"Signed-By: {fields['Signed-By']}")
        out.append("\n".join(lines))
    return out


def deb_src_lines(one_line: str) -> list[str]:
    """deb-src twins of the ``deb ...`` lines of a one-line-style sources.list."""
    lines = [line.strip() for line in one_line.splitlines()]
    have = {line.split(None, 1)[1] for line in lines if line.startswith("deb-src ")}
    return [
        "deb-src " + line.split(None, 1)[1]
        for line in lines
        if line.startswith("deb ") and line.split(None, 1)[1] not in have
    ]


def add_deb_src() -> Path:
    """Write a deb-src file for the archive(s) the machine uses, then apt-get update.

    The system's own files are left as they are; the new file mirrors their deb
    entries (deb822 debian.sources on bookworm, or an old one-line sources.list).
    """
    stanzas: list[str] = []
    if DEB822_SOURCES.exists():
        stanzas = deb_src_stanzas(DEB822_SOURCES.read_text())
    if not stanzas and ONE_LINE_SOURCES.exists():
        lines = deb_src_lines(ONE_LINE_SOURCES.read_text())
        if lines:
            target = DEB_SRC_FILE.with_suffix(".list")
            target.write_text("\n".join(lines) + "\n")
            _apt_update()
            return target
    if not stanzas:
        raise SuiteError(
            f"no deb entry found in {DEB822_SOURCES} or {ONE_LINE_SOURCES} to add "
            "a deb-src twin for; add a deb-src entry yourself"
        )
    DEB_SRC_FILE.write_text("\n\n".join(stanzas) + "\n")
    _apt_update()
    return DEB_SRC_FILE


def _apt_update() -> None:
    _run(["apt-get", "update", "-qq"], env={"DEBIAN_FRONTEND": "noninteractive"})


def _run(argv: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        list(argv),
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise SuiteError(f"{' '.join(argv)} exited {done.returncode}:\n{tail}")
    return done.stdout


def source_available() -> bool:
    """Whether apt knows a source package to fetch (some deb-src entry lists it)."""
    done = subprocess.run(
        ["apt-cache", "showsrc", SOURCE_PACKAGE], capture_output=True, text=True, check=False
    )
    return done.returncode == 0 and bool(done.stdout.strip())


def ensure_deb_src() -> str:
    """Add the deb-src entry (root only) unless apt already finds the source package."""
    if source_available():
        return "a deb-src entry already lists " + SOURCE_PACKAGE
    if os.geteuid() != 0:
        raise SuiteError(
            "adding a deb-src entry needs root: sudo tools/librdkafka_suite.py deb-src"
        )
    return f"added {add_deb_src()}"


def fetch_source(version: str, into: Path) -> Path:
    """``apt-get source librdkafka=VERSION`` into ``into``; the unpacked tree."""
    if not source_available():
        raise SuiteError(
            f"apt finds no source package {SOURCE_PACKAGE}: add a deb-src entry with "
            "`sudo tools/librdkafka_suite.py deb-src` (scripts/test does)"
        )
    into.mkdir(parents=True, exist_ok=True)
    _run(["apt-get", "source", "-qq", f"{SOURCE_PACKAGE}={version}"], cwd=into)
    trees = [p for p in into.iterdir() if p.is_dir() and p.name.startswith(SOURCE_PACKAGE)]
    if len(trees) != 1:
        raise SuiteError(f"apt-get source left {sorted(p.name for p in into.iterdir())}")
    return trees[0]


def recipe() -> str:
    """What a build depends on besides the version; a cached build with another is redone."""
    return " ".join(CONFIGURE_FLAGS) + "\n" + " ".join(sorted(HEADERS)) + "\n"


def is_built(version: str, cache: Path = CACHE) -> bool:
    stamp = build_dir(version, cache) / "recipe"
    return runner_path(version, cache).exists() and stamp.exists() and stamp.read_text() == recipe()


def build(version: str | None = None, cache: Path = CACHE, jobs: int | None = None) -> Path:
    """Build the test runner for the installed librdkafka unless it is already built."""
    version = version or installed_version()
    runner = runner_path(version, cache)
    if is_built(version, cache):
        return runner
    for tool in ("gcc", "g++", "make", "dpkg-source"):
        if shutil.which(tool) is None:
            raise SuiteError(f"{tool} is missing: apt-get install build-essential dpkg-dev")
    missing = [pkg for header, pkg in HEADERS.items() if not (INCLUDE / header).exists()]
    if missing:
        raise SuiteError(
            "headers the suite's config.h looks for are missing: "
            f"apt-get install {' '.join(missing)}"
        )
    top = build_dir(version, cache)
    shutil.rmtree(top, ignore_errors=True)
    scratch = top / "fetch"
    tree = fetch_source(version, scratch)
    src = top / "src"
    tree.rename(src)
    shutil.rmtree(scratch)
    _run(["./configure", *CONFIGURE_FLAGS], cwd=src)
    # Only the runner: the prerequisites naming the in-tree libraries and the
    # interceptor plugin (a local test's) are declared up to date, so -lrdkafka
    # and -lrdkafka++ resolve to Debian's shared libraries.
    _run(
        [
            "make",
            f"-j{jobs or os.cpu_count() or 2}",
            "-C",
            "tests",
            "-o",
            "../src/librdkafka.a",
            "-o",
            "../src-cpp/librdkafka++.a",
            "-o",
            "interceptor_test",
            "test-runner",
        ],
        cwd=src,
    )
    if not runner.exists():
        raise SuiteError(f"make finished without {runner}")
    (top / "recipe").write_text(recipe())
    return runner


# --------------------------------------------------------------------------- the test set


@dataclass(frozen=True)
class SuiteTest:
    """One entry of the suite's test table (tests/test.c)."""

    name: str
    flags: str
    #: The cluster set-ups (trivup scenarios) the test runs in, e.g. ("default",).
    scenarios: tuple[str, ...] = ("default",)

    @property
    def number(self) -> str:
        return self.name[:4]

    @property
    def scenario(self) -> str:
        """The one set-up a run uses for it: ``default`` wherever that is allowed."""
        return "default" if "default" in self.scenarios else self.scenarios[0]

    @property
    def runs_against_a_broker(self) -> bool:
        """Not broker-less (TEST_F_LOCAL), manual, or flagged a known issue by librdkafka."""
        flags = set(re.findall(r"TEST_F_\w+", self.flags))
        return not flags & {"TEST_F_LOCAL", "TEST_F_MANUAL", "TEST_F_KNOWN_ISSUE"}


def _entries(table: str) -> Iterable[str]:
    """The argument text of each ``_TEST(...)`` in the table, parentheses balanced."""
    at = table.find("_TEST(")
    while at >= 0:
        depth, i = 0, at + len("_TEST")
        for i in range(at + len("_TEST"), len(table)):
            depth += {"(": 1, ")": -1}.get(table[i], 0)
            if depth == 0:
                break
        yield table[at + len("_TEST(") : i]
        at = table.find("_TEST(", i)


def suite_tests(source: Path) -> list[SuiteTest]:
    """The test table of tests/test.c, in its order."""
    text = (source / "tests" / "test.c").read_text()
    start = text.index("struct test tests[]")
    end = text.index("{NULL}", start)
    tests: list[SuiteTest] = []
    for entry in _entries(text[start:end]):
        name, _, rest = entry.partition(",")
        flags = rest.split(",", 1)[0]
        scenario = re.search(r'\.scenario\s*=\s*"([^"]*)"', rest)
        scenarios = tuple(scenario[1].split(",")) if scenario else ("default",)
        tests.append(SuiteTest(name.strip(), " ".join(flags.split()), scenarios))
    return tests


def doc_table(heading: str, doc: Path = DOC) -> dict[str, str]:
    """``| test | reason |`` rows of the first table after a heading of docs/kafka.md."""
    text = doc.read_text()
    at = text.find(heading)
    if at < 0:
        raise SuiteError(f"{doc} has no heading {heading!r}")
    rows: dict[str, str] = {}
    started = False
    for line in text[at:].splitlines()[1:]:
        if not line.startswith("|"):
            if started:
                break
            continue
        started = True
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = cells[0].strip("`")
        if re.fullmatch(r"\d{4}_\w+", name):
            if name in rows:
                raise SuiteError(f"{doc}: {name} is listed twice under {heading!r}")
            rows[name] = cells[1] if len(cells) > 1 else ""
    return rows


NOT_RUN_HEADING = "### librdkafka tests not run"
KNOWN_FAILING_HEADING = "### librdkafka tests known to fail"


def not_run(doc: Path = DOC) -> dict[str, str]:
    return doc_table(NOT_RUN_HEADING, doc)


def known_failures(doc: Path = DOC) -> dict[str, str]:
    return doc_table(KNOWN_FAILING_HEADING, doc)


def chosen(tests: Iterable[SuiteTest], skipped: Iterable[str]) -> list[SuiteTest]:
    """The broker tests of the suite minus the documented not-run ones."""
    leave = set(skipped)
    return [t for t in tests if t.runs_against_a_broker and t.name not in leave]


# --------------------------------------------------------------------------- running


@dataclass
class Outcome:
    """What one test-runner process said about the tests of one number and scenario."""

    number: str
    scenario: str
    states: dict[str, str]
    seconds: float
    exit_code: int | None
    log: str = field(repr=False)
    #: A timing test run twice (ALONE): the failure lines of its failed first run.
    first_run: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(state == "PASSED" for state in self.states.values())

    def failure_lines(self, limit: int = 8) -> list[str]:
        """The runner's own failure messages, for a report: each "failed at" banner
        with the line after it, which says why (the banner names only the place)."""
        lines = [line.strip() for line in _ANSI.sub("", self.log).splitlines()]
        keep: list[str] = []
        after_banner = False
        for line in lines:
            if (
                (after_banner and line and "###" not in line)
                or "failed at" in line
                or "timed out" in line
                or "Assertion" in line
                or line.startswith(("Test assertion", "Expected", "Lists did not match"))
            ):
                keep.append(line)
            after_banner = "failed at" in line
        return keep[:limit]


def parse_states(log: str, names: Iterable[str]) -> dict[str, str]:
    """Each test's state from a runner's output.

    A failure message naming the test wins; then the closing summary table (absent
    when the runner aborted), then the test's own PASSED/SKIPPED banner.
    """
    text = _ANSI.sub("", log)
    summary: dict[str, str] = {}
    for line in text.splitlines():
        m = _SUMMARY_ROW.match(line.strip())
        if m:
            summary[m[1]] = m[2]
    states: dict[str, str] = {}
    for name in names:
        if re.search(rf'### Test "{name}[" ]', text):
            states[name] = "FAILED"
        elif name in summary:
            states[name] = summary[name]
        elif f"= Test {name} PASSED =" in text:
            states[name] = "PASSED"
        elif f"= Test {name} SKIPPED =" in text:
            states[name] = "SKIPPED"
    return states


def run_number(
    runner: Path,
    number: str,
    names: Sequence[str],
    scenario: str,
    bootstrap: str,
    workdir: Path,
    timeout_s: float = PROCESS_TIMEOUT_S,
) -> Outcome:
    """Run the broker tests of one number and scenario in a runner process of their own.

    The runner's stats files and its output (``NNNN-SCENARIO.log``) go to
    ``workdir``. A runner still alive after
    ``timeout_s`` is killed and its unfinished tests count as TIMEOUT; one that
    exits non-zero although its tests passed (a leak check of the runner's main
    thread failed) fails them with its exit code.
    """
    # Tests open files relative to their directory (0053_stats reads
    # ../src/statistics_schema.json): run in workdir/tests beside a link to src/.
    cwd = workdir / "tests"
    cwd.mkdir(exist_ok=True)
    with contextlib.suppress(FileExistsError):  # another runner thread made it
        (workdir / "src").symlink_to(runner.parents[1] / "src")
    conf = workdir / f"test-{number}-{scenario}.conf"
    conf.write_text(TEST_CONF.format(bootstrap=bootstrap))
    extra_args, extra_env = RUNNER_OPTIONS.get(number, ((), {}))
    env = {
        **os.environ,
        "TESTS": number,
        "RDKAFKA_TEST_CONF": str(conf),
        "TEST_KAFKA_VERSION": BROKER_VERSION,
        **extra_env,
    }
    env.pop("CI", None)  # CI=1 would only raise the runner's timeouts and concurrency
    started = time.monotonic()
    exit_code: int | None
    try:
        done = subprocess.run(
            [str(runner), "-L", "-s", scenario, *extra_args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
        log = (done.stdout + done.stderr).decode(errors="replace")
        exit_code = done.returncode
    except subprocess.TimeoutExpired as exc:
        log = ((exc.stdout or b"") + (exc.stderr or b"")).decode(errors="replace")
        exit_code = None
    seconds = time.monotonic() - started
    (workdir / f"{number}-{scenario}.log").write_text(log)
    states = parse_states(log, names)
    for name in names:
        state = states.get(name, "TIMEOUT" if exit_code is None else "NO RESULT")
        if state == "PASSED" and exit_code != 0:
            state = "TIMEOUT" if exit_code is None else f"EXIT {exit_code}"
        states[name] = state
    return Outcome(number, scenario, states, seconds, exit_code, log)


def run(
    runner: Path,
    tests: Sequence[SuiteTest],
    bootstraps: dict[str, str],
    workdir: Path,
    parallel: int = PARALLEL,
) -> list[Outcome]:
    """Every test of ``tests``, one runner per number and scenario, ``parallel`` at once.

    ``bootstraps`` maps each scenario to the broker set up for it. The slowest
    numbers start first, so the run ends soon after the longest test.
    """
    groups: dict[tuple[str, str], list[str]] = {}
    for t in tests:
        groups.setdefault((t.scenario, t.number), []).append(t.name)
    order = sorted(
        groups,
        key=lambda key: SLOW_FIRST.index(key[1]) if key[1] in SLOW_FIRST else len(SLOW_FIRST),
    )

    def one(key: tuple[str, str]) -> Outcome:
        scenario, number = key
        return run_number(runner, number, groups[key], scenario, bootstraps[scenario], workdir)

    def alone(key: tuple[str, str]) -> Outcome:
        first = one(key)
        if first.passed:
            return first
        log = workdir / f"{key[1]}-{key[0]}.log"
        log.rename(log.with_suffix(".first.log"))
        second = one(key)
        second.first_run = first.failure_lines()
        return second

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        shared = list(pool.map(one, [key for key in order if key[1] not in ALONE]))
    return shared + [alone(key) for key in order if key[1] in ALONE]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("deb-src", help="add a deb-src entry for the archive in use (root)")
    sub.add_parser("build", help="build the test runner into .cache/librdkafka/")
    sub.add_parser("list", help="print the tests a run runs, with their scenario")
    runp = sub.add_parser("run", help="run the chosen tests against running brokers")
    runp.add_argument(
        "brokers",
        nargs="+",
        metavar="[SCENARIO=]HOST:PORT",
        help="the broker of each scenario (settings: SCENARIO_SETTINGS); tests of a "
        "scenario without one are left out",
    )
    runp.add_argument("--tests", nargs="*", default=(), help="only these numbers (NNNN)")
    runp.add_argument("--parallel", type=int, default=PARALLEL)
    runp.add_argument("--logs", type=Path, help="keep each runner's output in this directory")
    args = parser.parse_args(argv)
    try:
        if args.command == "deb-src":
            print(f"librdkafka_suite: {ensure_deb_src()}")
            return 0
        if args.command == "build":
            started = time.monotonic()
            version = installed_version()
            already = is_built(version)
            runner = build(version)
            took = "already built" if already else f"built in {time.monotonic() - started:.0f} s"
            print(f"librdkafka {version} test runner: {runner} ({took})")
            return 0
        version = installed_version()
        if not is_built(version):
            raise SuiteError("the test runner is not built: tools/librdkafka_suite.py build")
        runner = runner_path(version)
        tests = chosen(suite_tests(runner.parents[1]), not_run())
        if args.command == "list":
            print("\n".join(f"{t.name} ({t.scenario})" for t in tests))
            return 0
        bootstraps = dict(b.split("=", 1) if "=" in b else ("default", b) for b in args.brokers)
        tests = [
            t
            for t in tests
            if t.scenario in bootstraps and (not args.tests or t.number in args.tests)
        ]
        known = known_failures()
        with tempfile.TemporaryDirectory(prefix="librdkafka-suite-") as tmp:
            work = args.logs or Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            outcomes = run(runner, tests, bootstraps, work, args.parallel)
        unexpected = 0
        for outcome in sorted(outcomes, key=lambda o: o.number):
            for name, state in outcome.states.items():
                expected = "fails" if name in known else "passes"
                unexpected += (state == "PASSED") != (expected == "passes")
                print(f"{name:50} {state:9} {outcome.seconds:6.1f} s  expected: {expected}")
                if state != "PASSED":
                    for line in outcome.failure_lines(3):
                        print(f"    {line[:200]}")
            if outcome.first_run:
                print(f"    (run twice; the first run failed: {outcome.first_run[:2]})")
        print(f"{unexpected} unexpected outcome(s)")
        return 1 if unexpected else 0
    except SuiteError as exc:
        print(f"librdkafka_suite: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
