"""The console's pages in a real browser: Debian's headless Chromium, driven by selenium
through Debian's chromium-driver, against a live broker fed by confluent-kafka.

Each check is what a person would see on the page (text in the DOM, not the API's
JSON). A screenshot of every page is written under the test's tmp dir and copied
to .cache/console-screenshots/; the run prints where.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import pytest_twisted
from twisted.internet import threads

from tests.conftest import within
from tests.ops.console.conftest import EVIL, EVIL_GROUP, EVIL_HEADER, ORDERS, TOKEN, Console

pytestmark = pytest.mark.system

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
REPO = Path(__file__).resolve().parents[3]
WAIT_S = 20


def _driver(profile: Path) -> Any:
    for tool in (CHROMIUM, CHROMEDRIVER):
        if not Path(tool).exists():
            pytest.fail(f"{tool} is missing: install Debian's chromium and chromium-driver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is missing: pip install -e '.[test]' (scripts/test does)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


def _produce(bootstrap: str, partition: int, key: str, value: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    producer.produce("orders", key=key, value=value, partition=partition)
    assert producer.flush(30) == 0


def _produce_many(bootstrap: str, topic: str, first: int, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(first, first + count):
        producer.produce(topic, key=f"p-{i}", value=f"paged record {i}", partition=0)
    assert producer.flush(30) == 0


PAGED = 45
"""Records of the topic "paged" before the tail test adds `TAILED` more."""
TAILED = 30


def _unlabelled(driver: Any) -> list[str]:
    """Inputs and selects on the page without a label (label for= or aria-label)."""
    return list(
        driver.execute_script(
            """
            return [...document.querySelectorAll('input, select, textarea')]
              .filter(e => !e.classList.contains('offscreen'))
              .filter(e => !e.getAttribute('aria-label') &&
                !(e.id && document.querySelector('label[for="' + CSS.escape(e.id) + '"]')))
              .map(e => e.outerHTML);
            """
        )
    )


def _offsets(driver: Any) -> list[int]:
    """The offsets of the message rows, read in one go (the table is redrawn as a whole)."""
    return [
        int(offset)
        for offset in driver.execute_script(
            "return [...document.querySelectorAll('#messages-body tr[data-offset]')]"
            ".map(r => r.dataset.offset)"
        )
    ]


def browse(base: str, bootstrap: str, shots: Path, profile: Path) -> list[str]:
    """Runs in a thread (selenium blocks): every page, checked and photographed."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = _driver(profile)
    taken: list[str] = []

    def wait(what: str, check: Callable[[Any], Any]) -> Any:
        # a table redrawn while it is read is read again
        return WebDriverWait(
            driver, WAIT_S, ignored_exceptions=(StaleElementReferenceException,)
        ).until(check, f"waiting for {what}")

    def text(css: str) -> str:
        return str(driver.find_element(By.CSS_SELECTOR, css).text)

    def shot(name: str) -> None:
        path = shots / f"{name}.png"
        assert driver.save_screenshot(str(path)), f"screenshot {name}"
        taken.append(str(path))

    try:
        # overview: the cards, and the chart taking new points as the sampler runs
        driver.get(base + "/#/")
        wait("the version card", lambda d: text("#version") == "0.1.0")
        wait("a first chart point", lambda d: int(_points(d, "rate-chart")) >= 2)
        first = int(_points(driver, "rate-chart"))
        _produce(bootstrap, 1, "chart", "makes the rate move")
        wait("the chart to grow", lambda d: int(_points(d, "rate-chart")) > first)
        wait(
            "records in/s above zero",
            lambda d: _legend(d, "rate-chart", "records_in", "peak") > 0,
        )
        assert text("#topic-count") == "3"  # orders, jobs of the share group, and paged
        shot("overview")

        # the chart's values on hover: the time and each series' value
        from selenium.webdriver.common.action_chains import ActionChains

        ActionChains(driver).move_to_element(driver.find_element(By.ID, "rate-chart")).perform()
        tip = wait("the chart's tooltip", lambda d: text("#rate-chart-tip"))
        assert "records in/s: " in tip and "bytes out/s: " in tip
        assert not driver.find_element(By.ID, "rate-chart-empty").is_displayed()

        # topics list
        driver.get(base + "/#/topics")
        row = wait("the topic rows", lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-topic]"))
        assert [r.get_attribute("data-topic") for r in row] == ["jobs", "orders", "paged"]
        cells = [c.text for c in row[1].find_elements(By.TAG_NAME, "td")]
        assert cells[0] == "orders" and cells[1] == "2" and cells[3] == str(ORDERS + 3)
        assert _unlabelled(driver) == []
        shot("topics")
        # sorted by a column: records descending, then filtered
        records_head = driver.find_element(By.CSS_SELECTOR, "#topics-table th[data-key=records]")
        records_head.find_element(By.TAG_NAME, "button").click()
        assert records_head.get_attribute("aria-sort") == "ascending"
        records_head.find_element(By.TAG_NAME, "button").click()
        assert records_head.get_attribute("aria-sort") == "descending"
        wait(
            "the topics by records, most first",
            lambda d: (
                [r.get_attribute("data-topic") for r in d_rows(d, "tr[data-topic]")]
                == ["paged", "orders", "jobs"]
            ),
        )
        shot("topics-sorted")
        driver.find_element(By.ID, "topics-table-filter").send_keys("ord")
        wait(
            "the filtered topics",
            lambda d: (
                [r.get_attribute("data-topic") for r in d_rows(d, "tr[data-topic]")] == ["orders"]
            ),
        )
        assert text("#topics-table-count") == "1 of 3 topics"

        # one topic: its partitions
        driver.get(base + "/#/topic/orders")
        wait(
            "the partitions table",
            lambda d: d.find_elements(By.CSS_SELECTOR, "#partitions-table tbody tr"),
        )
        rows = driver.find_elements(By.CSS_SELECTOR, "#partitions-table tbody tr")
        ends = [r.find_elements(By.TAG_NAME, "td")[2].text for r in rows]
        assert ends == [str(ORDERS), "3"]
        wait("the topic's rate chart", lambda d: int(_points(d, "topic-chart")) >= 1)
        shot("topic")

        # messages: a record's value decoded as pretty-printed JSON
        driver.get(base + "/#/messages/orders/0")
        wait("records", lambda d: d.find_elements(By.CSS_SELECTOR, "#messages-body tr"))
        format_select = driver.find_element(By.ID, "format")
        format_select.find_element(By.CSS_SELECTOR, "option[value=json]").click()
        last = driver.find_element(
            By.CSS_SELECTOR, f"#messages-body tr[data-offset='{ORDERS - 1}']"
        )
        value = last.find_elements(By.TAG_NAME, "td")[3].text
        assert json.loads(value) == {"n": ORDERS - 1, "item": "widget"}
        assert '\n  "item": "widget"' in value, "pretty-printed"
        assert last.find_elements(By.TAG_NAME, "td")[2].text == f"order-{ORDERS - 1}"
        shot("messages")
        format_select.find_element(By.CSS_SELECTOR, "option[value=hex]").click()
        last = driver.find_element(
            By.CSS_SELECTOR, f"#messages-body tr[data-offset='{ORDERS - 1}']"
        )
        hex_key = last.find_elements(By.TAG_NAME, "td")[2].text
        assert hex_key == " ".join(f"{b:02x}" for b in f"order-{ORDERS - 1}".encode())
        stamp = driver.find_element(
            By.CSS_SELECTOR, "#messages-body tr[data-offset='3'] td:nth-child(2)"
        )
        at_ms = int(datetime.fromisoformat(stamp.text.replace("Z", "+00:00")).timestamp() * 1000)
        for mode, at, first in (("offset", "2", 2), ("timestamp", str(at_ms), None)):
            driver.find_element(By.CSS_SELECTOR, f"#mode option[value={mode}]").click()
            box = driver.find_element(By.ID, "at")
            box.clear()
            box.send_keys(at)
            # the page's answer replaces this marker, so the rows read next are the new ones
            driver.execute_script("document.getElementById('messages-info').textContent = '-'")
            driver.find_element(By.CSS_SELECTOR, "form.inline button[type=submit]").click()
            wait(f"records {mode} {at}", lambda d: text("#messages-info") not in ("-", ""))
            rows = driver.find_elements(By.CSS_SELECTOR, "#messages-body tr")
            offsets = [int(r.get_attribute("data-offset")) for r in rows]
            if first is not None:
                assert offsets[0] == first and offsets == sorted(offsets)
            else:
                assert offsets[0] <= 3 and offsets[-1] == ORDERS - 1

        # a value holding <script> is text on the page, and ran nothing
        driver.get(base + "/#/messages/orders/1")
        evil = wait(
            "the evil record",
            lambda d: d.find_elements(By.CSS_SELECTOR, "#messages-body tr[data-offset='0']"),
        )
        assert evil[0].find_elements(By.TAG_NAME, "td")[3].text == EVIL
        header = f"{EVIL_HEADER[0]}: {EVIL_HEADER[1].decode()}"
        assert evil[0].find_elements(By.TAG_NAME, "td")[4].text == header
        assert driver.find_elements(By.CSS_SELECTOR, "#main script, #main img") == []
        assert driver.execute_script("return window.pwned === undefined")
        shot("messages-script-as-text")

        # live tail: a record produced now appears without reloading
        driver.find_element(By.ID, "tail-button").click()
        wait("the tail to start", lambda d: text("#tail-button") == "Stop tail")
        _produce(bootstrap, 1, "tail", "live " + EVIL)
        arrived = wait(
            "the tailed record",
            lambda d: [
                r.find_elements(By.TAG_NAME, "td")[3].text
                for r in d.find_elements(By.CSS_SELECTOR, "#messages-body tr")
                if r.find_elements(By.TAG_NAME, "td")[2].text == "tail"
            ],
        )
        assert arrived == ["live " + EVIL]
        assert driver.execute_script("return window.pwned === undefined")
        shot("live-tail")

        # search on the broker: only the records whose value holds the text
        driver.get(base + "/#/messages/orders/0")
        wait("records", lambda d: len(_offsets(d)) == ORDERS)
        assert _unlabelled(driver) == []
        driver.find_element(By.ID, "search-value").send_keys('"n": 3')
        driver.find_element(By.CSS_SELECTOR, "form.inline button[type=submit]").click()
        wait("only the matching record", lambda d: _offsets(d) == [3])
        assert "matched 1" in text("#messages-info")
        driver.find_element(By.ID, "search-key").send_keys("order-")
        driver.find_element(By.CSS_SELECTOR, "form.inline button[type=submit]").click()
        wait("both filters", lambda d: _offsets(d) == [3] and "scanned" in text("#messages-info"))
        shot("messages-search")

        # one record in full, and copied as JSON
        driver.find_element(By.ID, "search-value").clear()
        driver.find_element(By.ID, "search-key").clear()
        driver.find_element(By.CSS_SELECTOR, "form.inline button[type=submit]").click()
        wait("every record again", lambda d: len(_offsets(d)) == ORDERS)
        driver.find_element(By.CSS_SELECTOR, "tr[data-offset='5'] button.expand").click()
        detail = wait(
            "the expanded record",
            lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-detail='5']"),
        )[0]
        pretty = detail.find_element(By.CSS_SELECTOR, ".detail-value pre.detail-json").text
        assert json.loads(pretty) == {"n": 5, "item": "widget"} and "\n" in pretty
        assert detail.find_element(By.CSS_SELECTOR, ".detail-value pre.detail-hex").text.startswith(
            "7b 22 6e"
        )
        detail.find_element(By.CSS_SELECTOR, "button.copy-record").click()
        toast = wait(
            "the copy's toast",
            lambda d: [
                t for t in d.find_elements(By.CSS_SELECTOR, ".toast") if "Record 5" in t.text
            ],
        )[0]
        assert toast.get_attribute("role") == "status" and "copied" in toast.text
        copied = json.loads(
            detail.find_element(By.CSS_SELECTOR, "button.copy-record").get_attribute("data-copied")
        )
        assert copied["offset"] == 5 and copied["key"] == "order-5"
        assert copied["value"] == {"json": {"n": 5, "item": "widget"}}
        assert copied["headers"] == [{"key": "source", "value": "test"}]
        shot("record-expanded")

        # paging: 45 records, 20 a page, forward to the end and back
        driver.get(base + "/#/messages/paged/0")
        wait("the latest page", lambda d: _offsets(d)[-1:] == [PAGED - 1])
        driver.find_element(By.CSS_SELECTOR, "#page-size option[value='20']").click()
        driver.find_element(By.CSS_SELECTOR, "#mode option[value=offset]").click()
        box = driver.find_element(By.ID, "at")
        box.clear()
        box.send_keys("0")
        driver.find_element(By.CSS_SELECTOR, "form.inline button[type=submit]").click()
        wait("the first page", lambda d: _offsets(d) == list(range(20)))
        assert not driver.find_element(By.ID, "page-prev").is_enabled()
        driver.find_element(By.ID, "page-next").click()
        wait("the second page", lambda d: _offsets(d) == list(range(20, 40)))
        driver.find_element(By.ID, "page-next").click()
        wait("the last page", lambda d: _offsets(d) == list(range(40, PAGED)))
        assert not driver.find_element(By.ID, "page-next").is_enabled()
        driver.find_element(By.ID, "page-prev").click()
        wait("back to the second page", lambda d: _offsets(d) == list(range(20, 40)))
        driver.find_element(By.CSS_SELECTOR, "#sort option[value='offset-desc']").click()
        wait("newest first", lambda d: _offsets(d) == list(range(39, 19, -1)))
        driver.find_element(By.CSS_SELECTOR, "#sort option[value='offset-asc']").click()
        driver.find_element(By.ID, "page-prev").click()
        wait("back to the first page", lambda d: _offsets(d) == list(range(20)))

        # the live tail keeps ascending order and, past the page size, drops the oldest
        driver.find_element(By.ID, "tail-button").click()
        wait("the tail to start", lambda d: text("#tail-button") == "Stop tail")
        _produce_many(bootstrap, "paged", PAGED, TAILED)
        newest = PAGED + TAILED - 1
        wait("the tailed records", lambda d: _offsets(d)[-1:] == [newest])
        offsets = _offsets(driver)
        assert offsets == list(range(newest - 19, newest + 1)), offsets
        driver.find_element(By.ID, "tail-button").click()

        # groups: the group's lag, then its page with the lag chart
        driver.get(base + "/#/groups")
        group = wait(
            "the billing row",
            lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-group='billing']"),
        )
        assert group[0].find_element(By.CSS_SELECTOR, "td.lag").text == str(ORDERS - 4)
        names = [r.find_element(By.TAG_NAME, "td").text for r in d_rows(driver, "tr[data-group]")]
        assert EVIL_GROUP in names, names
        assert driver.find_elements(By.CSS_SELECTOR, "#main img, #main script") == []
        shot("groups")
        driver.get(base + "/#/group/" + quote(EVIL_GROUP, safe=""))
        wait("the odd group's name", lambda d: text("#group-name") == EVIL_GROUP)
        # orders-1 holds the 2 seeded records, "chart" and "tail"; the group committed 1
        wait("the odd group's lag", lambda d: text("#group-lag") == "3")
        assert driver.execute_script("return window.pwned === undefined")
        shot("group-named-with-markup")
        driver.get(base + "/#/group/billing")
        wait("the group's lag", lambda d: text("#group-lag") == str(ORDERS - 4))
        wait("lag chart points", lambda d: int(_points(d, "lag-chart")) >= 1)
        assert _legend(driver, "lag-chart", "lag") == ORDERS - 4
        lag_cells = driver.find_elements(By.CSS_SELECTOR, "#offsets-table td.lag")
        assert [c.text for c in lag_cells] == [str(ORDERS - 4)]
        shot("group")

        # a share group: listed by type, its page the in-flight window of each partition
        driver.get(base + "/#/groups")
        share_row = wait(
            "the share group's row",
            lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-group='queue-workers']"),
        )
        assert share_row[0].get_attribute("data-type") == "share"
        driver.get(base + "/#/group/queue-workers")
        wait("the share group's type", lambda d: text("#group-type") == "share")
        acquired = wait(
            "the in-flight window",
            lambda d: d.find_elements(By.CSS_SELECTOR, "#share-table td.acquired"),
        )
        assert [c.text for c in acquired] == ["2"]
        assert text("#group-lag") == "3"
        shot("share-group")

        # an admin action: the token, a confirmation, then the new topic is listed
        driver.get(base + "/#/topics")
        wait("the topics table", lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-topic]"))
        token = driver.find_element(By.ID, "admin-token")
        token.send_keys(TOKEN)
        driver.find_element(By.CSS_SELECTOR, "form.inline input[name=name]").send_keys("made-here")
        driver.find_element(By.CSS_SELECTOR, "form.inline button").click()
        alert = wait("the confirmation", lambda d: d.switch_to.alert)
        assert "made-here" in alert.text
        alert.accept()
        wait(
            "the created topic",
            lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-topic='made-here']"),
        )
        done = wait("the success toast", lambda d: d.find_elements(By.CSS_SELECTOR, ".toast-ok"))
        assert "created topic made-here" in done[-1].text
        assert done[-1].get_attribute("role") == "status"
        assert driver.find_element(By.CSS_SELECTOR, "form.inline button").is_enabled()
        shot("topics-after-create")
        # the same again: the broker's refusal, in a toast that is an alert
        driver.find_element(By.CSS_SELECTOR, "form.inline button").click()
        wait("the confirmation", lambda d: d.switch_to.alert).accept()
        failed = wait("the error toast", lambda d: d.find_elements(By.CSS_SELECTOR, ".toast-error"))
        assert "already exists" in failed[-1].text
        assert failed[-1].get_attribute("role") == "alert"

        # deleting asks first; dismissed, nothing happens; accepted, the topic goes
        driver.get(base + "/#/topic/made-here")
        wait("the new topic's page", lambda d: text("#topic-name") == "made-here")
        delete = driver.find_element(By.CSS_SELECTOR, ".admin-box button.danger")
        delete.click()
        wait("the confirmation", lambda d: d.switch_to.alert).dismiss()
        delete.click()
        alert = wait("the confirmation", lambda d: d.switch_to.alert)
        assert "cannot be undone" in alert.text
        alert.accept()
        wait("the topics list", lambda d: d.current_url.endswith("#/topics"))
        wait(
            "the list without it",
            lambda d: (
                [r.get_attribute("data-topic") for r in d_rows(d, "tr[data-topic]")]
                == ["jobs", "orders", "paged"]
            ),
        )
    finally:
        driver.quit()
    return taken


def d_rows(driver: Any, css: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, css))


def _points(driver: Any, chart: str) -> str:
    return str(driver.execute_script(f"return document.getElementById('{chart}').dataset.points"))


def _legend(driver: Any, chart: str, key: str, which: str = "last") -> float:
    """A series' last or peak value as the chart's legend shows it."""
    from selenium.webdriver.common.by import By

    item = driver.find_element(By.CSS_SELECTOR, f"#{chart}-legend span[data-key='{key}']")
    shown = item.text.split(": ", 1)[1]
    last, peak = shown.removesuffix(")").split(" (peak ")
    assert float(item.get_attribute(f"data-{which}")) == pytest.approx(
        float(last if which == "last" else peak), abs=0.1
    )
    return float(last if which == "last" else peak)


@pytest_twisted.ensureDeferred
async def test_pages_in_a_real_browser(
    console: Console, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    profile = tmp_path / "chromium-profile"
    # A share group (a queue) of a one-partition topic of 4 records: three acquired, the
    # first of them accepted.
    client = await console.running.client()
    try:
        await within(client.create_topic("jobs", 1))
        for i in range(4):
            await within(client.produce("jobs", b"k", b"job-%d" % i))
        await within(client.share_fetch("queue-workers", "w", "jobs", 3, 0, 1))
        await within(client.share_acknowledge("queue-workers", "w", "jobs", [(0, 0, 1)]))
        await within(client.create_topic("paged", 1))
        for i in range(PAGED):
            await within(client.produce("paged", f"p-{i}".encode(), b"paged record %d" % i))
    finally:
        await client.close()
    taken = await within(
        threads.deferToThread(browse, console.base, console.running.address, shots, profile),
        240,
    )
    assert len(taken) == 14
    copy = REPO / ".cache" / "console-screenshots"
    copy.mkdir(parents=True, exist_ok=True)
    for path in taken:
        shutil.copy(path, copy / Path(path).name)
    with capsys.disabled():
        print(f"\nconsole screenshots: {shots} (copied to {copy})")


def browse_signed_in(base: str, shots: Path, profile: Path) -> list[str]:
    """Runs in a thread: the sign-in page, then what alice's ACLs let her see."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.ops.console.test_search import CLIENTS, SCHEMA_ID
    from tests.ops.console.test_signin import PASSWORD

    driver = _driver(profile)
    taken: list[str] = []

    def wait(what: str, check: Callable[[Any], Any]) -> Any:
        return WebDriverWait(
            driver, WAIT_S, ignored_exceptions=(StaleElementReferenceException,)
        ).until(check, f"waiting for {what}")

    def shot(name: str) -> None:
        path = shots / f"{name}.png"
        assert driver.save_screenshot(str(path)), f"screenshot {name}"
        taken.append(str(path))

    def sign_in(password: str) -> None:
        for field, value in (("sign-in-user", "alice"), ("sign-in-password", password)):
            box = driver.find_element(By.ID, field)
            box.clear()
            box.send_keys(value)
        driver.find_element(By.ID, "sign-in-button").click()

    try:
        driver.get(base + "/#/topics")
        wait("the sign-in form", lambda d: d.find_elements(By.ID, "sign-in-form"))
        assert _unlabelled(driver) == []
        assert not driver.find_element(By.ID, "admin-token").is_displayed()
        shot("sign-in")
        sign_in("not the password")
        refused = wait("the refusal", lambda d: d.find_elements(By.CSS_SELECTOR, ".toast-error"))
        assert "wrong user name or password" in refused[0].text
        assert refused[0].get_attribute("role") == "alert"
        sign_in(PASSWORD)
        wait(
            "signed in",
            lambda d: d.find_element(By.ID, "signed-in-as").text == "signed in as alice",
        )

        # the overview's chart has no rates yet (one sample an hour): it says so
        driver.get(base + "/#/")
        wait("the empty chart", lambda d: d.find_element(By.ID, "rate-chart-empty").is_displayed())
        assert driver.find_element(By.ID, "rate-chart-empty").text == "no data yet"

        # only the topic alice may read is listed
        driver.get(base + "/#/topics")
        wait(
            "alice's topics",
            lambda d: (
                [r.get_attribute("data-topic") for r in d_rows(d, "tr[data-topic]")] == ["visible"]
            ),
        )

        # a value framed with a known schema id is shown decoded, with its id
        driver.get(base + "/#/messages/visible/0")
        badge = wait(
            "the schema badge",
            lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-offset='0'] td.decoded .badge"),
        )
        assert badge[0].text == f"schema id {SCHEMA_ID}"
        decoded = driver.find_element(By.CSS_SELECTOR, "tr[data-offset='0'] td.decoded pre").text
        assert json.loads(decoded) == {"amount": 12}
        driver.get(base + "/#/messages/hidden/0")
        refusal = wait("the refusal", lambda d: d.find_elements(By.CSS_SELECTOR, ".toast-error"))
        assert "not allowed READ" in refusal[-1].text

        # the clients that push telemetry, each client's metrics on demand
        driver.get(base + "/#/clients")
        [client] = CLIENTS["clients"]
        row = wait("the client", lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-client]"))
        assert row[0].find_elements(By.TAG_NAME, "td")[0].text == client["client_id"]
        row[0].find_element(By.CSS_SELECTOR, "button.show-metrics").click()
        metric = wait(
            "the client's metrics",
            lambda d: d.find_elements(By.CSS_SELECTOR, ".metrics-table tbody td"),
        )
        assert metric[0].text == client["metrics"][0]["name"]
        assert driver.find_elements(By.CSS_SELECTOR, "#main b") == []
        shot("clients")
        driver.find_element(By.ID, "clients-table-filter").send_keys("nobody")
        wait("no client matches", lambda d: d_rows(d, "tr[data-client]") == [])

        # signed out, the page asks again
        driver.find_element(By.ID, "sign-out").click()
        wait("the sign-in form again", lambda d: d.find_elements(By.ID, "sign-in-form"))
    finally:
        driver.quit()
    return taken


@pytest_twisted.ensureDeferred
async def test_sign_in_page_in_a_real_browser(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rustka.security.acl import Operation, ResourceType
    from rustka.security.credentials import CredentialStore
    from rustka.security.scram import MECHANISMS, derive_credential
    from tests.ops.console.conftest import start_console
    from tests.ops.console.test_search import CLIENTS, SCHEMA_ID, decode_framed
    from tests.ops.console.test_signin import PASSWORD, allow

    data_dir.mkdir(parents=True, exist_ok=True)
    store = CredentialStore(data_dir / "credentials")
    store.upsert("alice", "SCRAM-SHA-256", derive_credential(MECHANISMS["SCRAM-SHA-256"], PASSWORD))
    made = await start_console(
        data_dir,
        None,
        decode_value=decode_framed,
        client_metrics=lambda: CLIENTS,
        sample_interval_s=3600,
        console_authentication="users",
        authorizer_enabled=True,
        super_users="User:root",
    )
    try:
        broker = made.running.broker
        for name in ("visible", "hidden"):
            await within(broker.create_topic(name, 1, {}))
        framed = b"\x00" + SCHEMA_ID.to_bytes(4, "big") + b'{"amount": 12}'
        await within(
            broker.access.create(
                [
                    allow("User:alice", ResourceType.TOPIC, "visible", Operation.READ),
                    allow("User:alice", ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE),
                    allow("User:ANONYMOUS", ResourceType.TOPIC, "visible", Operation.WRITE),
                ],
                "User:root",
            )
        )
        client = await made.running.client()
        try:
            await within(client.produce("visible", b"k", framed))
        finally:
            await client.close()
        shots = tmp_path / "screenshots"
        shots.mkdir()
        taken = await within(
            threads.deferToThread(browse_signed_in, made.base, shots, tmp_path / "profile"), 240
        )
    finally:
        await made.console.stopService()
        await made.running.stop()
    assert [Path(p).name for p in taken] == ["sign-in.png", "clients.png"]
    copy = REPO / ".cache" / "console-screenshots"
    copy.mkdir(parents=True, exist_ok=True)
    for path in taken:
        shutil.copy(path, copy / Path(path).name)
    with capsys.disabled():
        print(f"\nconsole screenshots: {shots} (copied to {copy})")
