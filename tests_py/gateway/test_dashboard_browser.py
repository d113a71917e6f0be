"""The dashboard in a real headless Chromium (Debian's, driven by Playwright): signed in
through its form, the numbers on each page equal the ledger's query and `Guard.usage`, the
charts draw their lines, a user name full of markup stays text, there are no console errors,
and it fits a phone's width. Screenshots go to the test's tmp dir (and to docs/img/ when
UG_DOC_SCREENSHOT=1). Skipped only when Chromium or Playwright is not installed."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug
from test_dashboard_api import EVIL, POLICY, TOKEN, seeded, spend, token  # noqa: F401
from usage_guard.cli.usage import _cost

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
playwright = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium")
ROOT = Path(__file__).resolve().parents[2]
# The series colour of the first line (dashboard.js COLORS[0], #2f6fdd).
FIRST_LINE = (0x2F, 0x6F, 0xDD)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


class Page:
    """A page that records console errors and uncaught exceptions."""

    def __init__(self, browser: Any, width: int, height: int) -> None:
        self.context = browser.new_context(viewport={"width": width, "height": height})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, url: str, loaded: str) -> None:
        self.page.goto(url)
        self.wait(loaded)

    def wait(self, loaded: str) -> None:
        self.page.wait_for_selector(f'body[data-loaded="{loaded}"]', timeout=15000)

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Each body row of a table: its data attributes and its cells (text, data-value)."""
        return list(
            self.page.eval_on_selector_all(
                f"#{table} tbody tr",
                """rows => rows.map(r => ({data: {...r.dataset},
                    cells: [...r.cells].map(c => [c.textContent, c.dataset.value ?? null])}))""",
            )
        )

    def line_pixels(self, chart: str) -> int:
        """Pixels of the first series' colour on the chart's canvas."""
        return int(
            self.page.eval_on_selector(
                f"#{chart} canvas",
                """(c, rgb) => { const d = c.getContext('2d').getImageData(0, 0, c.width,
                    c.height).data; let n = 0; for (let i = 0; i < d.length; i += 4)
                    if (Math.abs(d[i] - rgb[0]) < 8 && Math.abs(d[i + 1] - rgb[1]) < 8 &&
                        Math.abs(d[i + 2] - rgb[2]) < 8 && d[i + 3] > 200) n++; return n; }""",
                list(FIRST_LINE),
            )
        )

    def shot(self, path: Path) -> None:
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 10_000


def test_the_dashboard_shows_the_ledger_and_the_counters(
    browser: Any,
    seeded: Any,  # noqa: F811
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG")
    guard, gateway, _ = seeded
    p = Page(browser, 1280, 900)
    p.page.goto(gateway.url + "/dashboard")
    p.page.wait_for_selector("#login-form", state="visible")
    p.page.fill("#token", TOKEN)
    p.page.click("#login-form button")
    p.wait("usage")

    # usage per user over the last 24 hours: the ledger's query, to the token and micro-dollar
    since, until = (p.page.get_attribute("#totals", k) for k in ("data-since", "data-until"))
    want = guard.ledger.query(since=since, until=until, group_by=["user"])
    rows = p.rows("totals")
    assert [r["data"]["key"] for r in rows] == [g["user"] for g in want] == [EVIL, "alice", "bob"]
    for row, g in zip(rows, want):
        values = [int(v) for _, v in row["cells"][1:]]
        assert values == [g[k] for k in ("requests", "tokens", "input_tokens", "output_tokens")] + [
            g["cost_micros"]
        ]
        assert row["cells"][5][0] == _cost(g["cost_micros"])
    assert p.line_pixels("usage-chart") > 20
    # markup in a user name is shown as text, never run
    assert rows[0]["cells"][0][0] == EVIL
    assert p.page.evaluate("window.__xss") is None
    assert p.page.locator("main img").count() == 0
    p.shot(tmp_path / "usage.png")

    # every rule's live counter equals Guard.usage, the open hold included
    p.page.click('nav a[href="#/rules"]')
    p.wait("rules")
    rules = p.rows("counters")
    assert len(rules) == 6
    for row in rules:
        view = guard.usage(row["data"]["principal"], row["data"]["model"])
        numbers = [int(v) for _, v in row["cells"][5:9]]
        assert any(
            numbers == [r["used"], r["reserved"], r["left"], r["amount"]] for r in view["rules"]
        ), row
    alice = [r for r in rules if r["data"]["principal"] == "alice"][0]
    assert alice["cells"][6][1] == "150"

    p.page.click('nav a[href="#/refusals"]')
    p.wait("refusals")
    assert "No refusals" in p.page.inner_text("#refusal-table")
    p.page.click('nav a[href="#/providers"]')
    p.wait("providers")
    assert "not reported" in p.page.inner_text("#health")

    # a user's page: what alice has left on each model, and her usage chart
    p.page.fill("#user-name", "alice")
    p.page.press("#user-name", "Enter")
    p.wait("user")
    assert p.page.inner_text("#user-title") == "alice"
    left = p.rows("user-left")
    want_left = [
        (m, r["left"]) for m in ("gpt-4o", "gpt-4o-mini") for r in guard.usage("alice", m)["rules"]
    ]
    assert [(r["data"]["model"], int(r["cells"][4][1])) for r in left] == want_left
    assert p.line_pixels("user-chart") > 20
    p.shot(tmp_path / "user.png")

    assert p.errors == []
    # the token stays in the tab: not in the address, not in any log line
    assert TOKEN not in p.page.url
    assert p.page.evaluate("sessionStorage.getItem('usage-guard-admin-token')") == TOKEN
    assert all(TOKEN not in r.getMessage() for r in caplog.records)
    p.context.close()


def test_a_phone_width_fits_and_a_wrong_token_asks_again(
    browser: Any,
    seeded: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    guard, gateway, _ = seeded
    p = Page(browser, 390, 844)
    p.open(f"{gateway.url}/dashboard#token={TOKEN}", "usage")
    assert TOKEN not in p.page.url
    width = p.page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width} px wide on a 390 px screen"
    canvas = p.page.eval_on_selector("#usage-chart canvas", "c => c.getBoundingClientRect().width")
    assert 200 < canvas <= 390
    assert p.line_pixels("usage-chart") > 20
    p.page.select_option("#metric", "cost_micros")
    p.wait("usage")
    p.page.click('nav a[href="#/rules"]')
    p.wait("rules")
    assert p.page.evaluate("document.documentElement.scrollWidth") <= 390
    p.shot(tmp_path / "phone.png")
    assert p.errors == []

    p.page.click("#sign-out")
    assert p.page.is_visible("#login-form")
    p.page.fill("#token", "wrong")
    p.page.click("#login-form button")
    p.page.wait_for_selector("text=Incorrect admin token")
    assert p.page.is_visible("#login-form") and not p.page.is_visible("#usage")
    p.context.close()
    assert isinstance(guard, ug.Guard)


@pytest.mark.skipif(
    os.environ.get("UG_DOC_SCREENSHOT") != "1", reason="rewrites docs/img/dashboard.png"
)
def test_the_docs_screenshot(browser: Any, token: str, tmp_path: Path) -> None:  # noqa: F811
    """docs/img/dashboard.png: a day of calls by three people (UG_DOC_SCREENSHOT=1)."""
    policy = dict(POLICY, teams={"research": {"members": ["alice", "bob", "dave"]}})
    clock = ug.ManualClock("2026-11-29T11:00:00Z")
    guard = ug.Guard(
        ug.Policy.from_dict(policy), clock=clock, ledger=ug.SqliteLedger(str(tmp_path / "u.db"))
    )
    for hour in range(24):
        for user, model, n, size in [
            ("alice", "gpt-4o", 1 + hour % 3, 900),
            ("bob", "gpt-4o-mini", 2 + (hour // 4) % 3, 700),
            ("dave", "gpt-4o-mini", 1 + (hour * 7) % 4, 500),
        ]:
            if 8 <= (hour + 11) % 24 <= 20 or user == "dave":
                spend(guard, user, model, n, size, size // 4)
        clock.advance(hours=1)
    clock.advance(hours=-1)
    guard.ledger.flush()
    gateway = ug.Gateway(guard, "127.0.0.1:0", dashboard_only=True)
    try:
        p = Page(browser, 1100, 760)
        p.open(f"{gateway.url}/dashboard#token={TOKEN}", "usage")
        p.shot(ROOT / "docs" / "img" / "dashboard.png")
        assert p.errors == []
        p.context.close()
    finally:
        gateway.shutdown()
        assert gateway.wait(10)
