"""librdkafka's own integration test suite against a real rustka broker (issue 16).

The suite is the one of the librdkafka Debian ships (2.0.2), built by
tools/librdkafka_suite.py into .cache/librdkafka/ against Debian's librdkafka,
the library kcat uses. Which of its tests run, and which are known to fail and
why, is docs/kafka.md's "librdkafka's test suite": this test runs that set
against one broker and insists on exactly the documented outcome, so a fix shows
up as a known failure that passes (to be struck from the list) and a regression
as a new failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import threads

from tests.conftest import start_broker, within
from tools import librdkafka_suite as suite

pytestmark = pytest.mark.clients

#: Wall-clock bound of the whole run; the tests themselves take about 3 minutes.
RUN_BOUND_S = 1200


@pytest.fixture
def runner() -> Path:
    """The built test runner, or a failure that says how to build it."""
    try:
        version = suite.installed_version()
    except suite.SuiteError as exc:
        pytest.fail(f"{exc} (scripts/test installs it)")
    path = suite.runner_path(version)
    if not path.exists():
        pytest.fail(
            f"librdkafka {version}'s test runner is not built ({path}): run "
            "tools/librdkafka_suite.py build (scripts/test does, after adding a deb-src entry)"
        )
    return path


def source_of(runner: Path) -> Path:
    return runner.parents[1]


#: The deb822 file of a fresh Debian bookworm image, comments and all.
BOOKWORM_SOURCES = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def test_deb_src_entries_mirror_the_archives_the_machine_uses() -> None:
    assert suite.deb_src_stanzas(BOOKWORM_SOURCES) == [
        "Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg",
        "Types: deb-src\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg",
    ]
    # A stanza that already has sources, or is disabled, gets no twin.
    assert (
        suite.deb_src_stanzas(BOOKWORM_SOURCES.replace("Types: deb\n", "Types: deb deb-src\n"))
        == []
    )
    assert suite.deb_src_stanzas("Types: deb\nURIs: http://x\nSuites: s\nEnabled: no\n") == []
    one_line = "deb http://deb.debian.org/debian bookworm main\n# deb http://old stretch main\n"
    assert suite.deb_src_lines(one_line) == ["deb-src http://deb.debian.org/debian bookworm main"]
    assert (
        suite.deb_src_lines(one_line + "deb-src http://deb.debian.org/debian bookworm main\n") == []
    )


def test_a_runners_output_gives_each_test_its_state() -> None:
    """Banners as the runner prints them (colours included); a failure line wins."""
    green, red, off = "\x1b[32m", "\x1b[31m", "\x1b[0m"
    aborted = (
        f'[0044_partition_cnt / 0.2s] {red}### Test "0044_partition_cnt" failed at '
        "test.c:4877:test_admin_create_partitions() at Tue Dec  1 22:08:46 2026: ###\n"
    )
    assert suite.parse_states(aborted, ["0044_partition_cnt"]) == {"0044_partition_cnt": "FAILED"}
    sub_failed = (
        f'{red}### Test "0055_producer_latency (test_producer_latency:185: transactions)" '
        "failed at 0055-producer_latency.c:209\n"
        f"[0055_producer_latency / 1s] {green}================= Test 0055_producer_latency "
        f"PASSED ================={off}\n"
    )
    assert suite.parse_states(sub_failed, ["0055_producer_latency"]) == {
        "0055_producer_latency": "FAILED"
    }
    summary = (
        f"[0045_subscribe_update / 15s] {green}================= Test 0045_subscribe_update "
        f"PASSED ================={off}\n"
        "#==================================================================#\n"
        f"|{green} 0045_subscribe_update                    |     PASSED |  15.061s {off}|\n"
        "| 0045_subscribe_update_mock               |    SKIPPED |   0.000s | Filtered\n"
    )
    names = ["0045_subscribe_update", "0045_subscribe_update_mock", "0045_other"]
    assert suite.parse_states(summary, names) == {
        "0045_subscribe_update": "PASSED",
        "0045_subscribe_update_mock": "SKIPPED",
    }


def test_a_failure_is_reported_with_the_reason_the_runner_gave() -> None:
    """The runner prints the place of a failure in a banner and the reason on the
    line after it; a report without that line says nothing about the cause."""
    red, off = "\x1b[31m", "\x1b[0m"
    log = (
        "[0061_consumer_lag / 3s] Consuming topic rdkafkatest_0061\n"
        f'{red}### Test "0061_consumer_lag (do_test_consumer_lag:176: Test consumer lag '
        'with transactions)" failed at testcpp.h:77:() at Wed Dec  2 14:16:13 2026: ###\n'
        f"Stats consumer_lag 6, expected >= 8\n{off}\n"
        f'{red}### Test "<MAIN>" failed at test.c:1596:test_wait_exit() at Wed Dec  2: ###\n'
        f'### Test "<MAIN>" failed at test.c:1597:x() at Wed Dec  2: ###{off}\n'
        "test-runner: test.c:6716: test_fail0: Assertion `0' failed.\n"
    )
    outcome = suite.Outcome("0061", "plaintext", {}, 3.0, -6, log)
    lines = outcome.failure_lines()
    assert lines[1] == "Stats consumer_lag 6, expected >= 8"
    assert lines[0].startswith('### Test "0061_consumer_lag') and len(lines) == 5
    assert lines[-1].endswith("Assertion `0' failed.")
    assert outcome.failure_lines(2) == lines[:2]


def test_a_timing_test_that_fails_is_run_once_more_and_the_second_run_decides(
    tmp_path: Path,
) -> None:
    """`run` on a stand-in runner (the real one cannot be made to fail on demand)
    whose tests fail the first time and pass the second (0110's fails every time):
    a timing test run alone passes on its second run and keeps its first log, one
    failing twice fails, and any other test is run once."""
    runner = tmp_path / "src" / "tests" / "test-runner"
    runner.parent.mkdir(parents=True)
    runner.write_text(
        "#!/bin/sh\n"
        'seen="../seen-$TESTS"\n'
        'if [ -e "$seen" ] && [ "$TESTS" != 0110 ]; then\n'
        '  echo "= Test ${TESTS}_t PASSED ="; exit 0\n'
        "fi\n"
        'touch "$seen"\n'
        'echo "### Test \\"${TESTS}_t\\" failed at t.c:1:f() at now: ###"\n'
        'echo "too few wakeups"\n'
        "exit 1\n"
    )
    runner.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    tests = [suite.SuiteTest(f"{n}_t", "0") for n in ("0055", "0110", "0001")]
    outcomes = suite.run(runner, tests, {"default": "127.0.0.1:9"}, work, parallel=1)
    states = {name: o.states[name] for o in outcomes for name in o.states}
    assert states == {"0001_t": "FAILED", "0055_t": "PASSED", "0110_t": "FAILED"}
    timing = next(o for o in outcomes if o.number == "0055")
    assert timing.first_run[1] == "too few wakeups"
    assert (work / "0055-default.first.log").read_text().count("too few wakeups") == 1
    assert "PASSED" in (work / "0055-default.log").read_text()
    assert not (work / "0001-default.first.log").exists()


def test_the_documented_lists_name_broker_tests_of_the_suite_with_a_reason(
    runner: Path,
) -> None:
    tests = {t.name: t for t in suite.suite_tests(source_of(runner))}
    not_run, known = suite.not_run(), suite.known_failures()
    assert not_run and known, "docs/kafka.md lost a table of librdkafka's test suite"
    assert sorted(set(not_run) - set(tests)) == [], "not-run entries the suite does not have"
    assert sorted(set(known) - set(tests)) == [], "known failures the suite does not have"
    assert sorted(set(not_run) & set(known)) == [], "listed both as not run and as failing"
    # Broker-less and manual tests never run, so listing them would only be noise.
    assert sorted(n for n in not_run if not tests[n].runs_against_a_broker) == []
    assert sorted(n for n, why in {**not_run, **known}.items() if len(why) < 10) == [], (
        "every entry needs its reason"
    )


@pytest_twisted.ensureDeferred
async def test_librdkafka_suite_passes_but_for_the_documented_failures(
    tmp_path: Path, runner: Path
) -> None:
    chosen = suite.chosen(suite.suite_tests(source_of(runner)), suite.not_run())
    known = suite.known_failures()
    scenarios = sorted({t.scenario for t in chosen})
    assert set(scenarios) <= set(suite.SCENARIO_SETTINGS), "a scenario without broker settings"
    brokers = []
    try:
        for scenario in scenarios:
            settings = suite.SCENARIO_SETTINGS[scenario]
            brokers.append(await start_broker(tmp_path / f"data-{scenario}", **settings))
        work = tmp_path / "runner"
        work.mkdir()
        bootstraps = {s: b.address for s, b in zip(scenarios, brokers, strict=True)}
        outcomes = await within(
            threads.deferToThread(suite.run, runner, chosen, bootstraps, work), RUN_BOUND_S
        )
    finally:
        for running in brokers:
            await running.stop()

    states = {name: state for o in outcomes for name, state in o.states.items()}
    assert sorted(states) == sorted(t.name for t in chosen)
    outcome_of = {name: o for o in outcomes for name in o.states}
    problems: list[str] = []
    for name, state in sorted(states.items()):
        if name in known and state == "PASSED":
            problems.append(
                f"{name} passes now: remove it from docs/kafka.md's known failures "
                f"(listed because: {known[name]})"
            )
        elif name not in known and state != "PASSED":
            details = "\n      ".join(outcome_of[name].failure_lines())
            problems.append(
                f"{name} {state}, and it is not a documented known failure:\n      {details}"
            )
    assert not problems, "librdkafka's test suite against rustka:\n  " + "\n  ".join(problems)
