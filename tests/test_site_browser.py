"""The history site in a real browser: Debian's chromium, driven by Playwright, loading the
site from disk (file://), as the person who opens it every morning does.

Skips, saying why, where chromium (``apt-get install chromium``) or Playwright's Python
package (the dev extra) is missing; ``.ci/run`` installs chromium. One browser serves every
test of the module, in one xdist group.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy", reason="the history needs its extra: pip install -e '.[history]'")
pytest.importorskip("otava", reason="change points need Apache Otava (the history extra)")
playwright = pytest.importorskip("playwright.sync_api", reason="no Playwright: pip install -e '.[dev]'")

import triage_history as th  # noqa: E402
from test_site import NIGHTS, SLOW_NODE, build_history  # noqa: E402

from perfsuite.commands.main import main  # noqa: E402

pytestmark = pytest.mark.xdist_group("site-browser")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRAWN = ".plot[data-drawn='true']"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("browser")
    url = build_history(folder / "history.db")
    assert main(["history", "site", str(folder / "site"), "--history", url, "--at", th.at(NIGHTS)]) == 0
    return folder / "site"


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).is_file():
        pytest.skip("no chromium to load the site in: apt-get install chromium (.ci/run does)")
    with playwright.sync_playwright() as p:
        try:
            launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        except playwright.Error as exc:
            pytest.skip(f"chromium at {CHROMIUM} does not start: {str(exc).splitlines()[0]}")
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    """A fresh tab that records every console error, uncaught exception and failed request."""
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    tab.errors = []
    tab.on("console", lambda m: tab.errors.append(f"console: {m.text}") if m.type == "error" else None)
    tab.on("pageerror", lambda e: tab.errors.append(f"uncaught: {e}"))
    tab.on("requestfailed", lambda r: tab.errors.append(f"request failed: {r.url}"))
    yield tab
    tab.close()


def test_the_front_page_shows_the_flagged_node(site, page):
    page.goto((site / "index.html").as_uri())
    flagged = page.locator("h2#flagged + .scroll table")
    assert SLOW_NODE in flagged.inner_text()
    assert page.locator("h2#incidents + ul.callouts li").count() >= 1
    assert page.errors == []


def test_a_link_of_the_grid_reaches_a_key_page_that_draws_one_line_per_node(site, page):
    page.goto((site / "index.html").as_uri())
    link = page.locator("tr.key a").first
    key = link.inner_text()
    link.click()
    page.wait_for_selector(DRAWN)
    assert "/key/" in page.url
    assert page.locator("h1").inner_text() == key
    lines = page.evaluate("document.getElementById('trend').data.filter(t => t.meta === 'node').length")
    assert lines == 8
    assert page.locator("#trend g.scatterlayer g.trace").count() >= lines  # drawn, not only given
    assert page.errors == []


def test_every_page_loads_without_an_error(site, page):
    for path in sorted(site.rglob("*.html")):
        page.goto(path.as_uri())
        if page.locator(".plot").count():
            page.wait_for_selector(DRAWN)
        assert page.errors == [], path.relative_to(site)
