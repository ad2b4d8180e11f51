"""The history site in a real browser: Debian's chromium, driven by Playwright, loading the
site from disk (file://), as the person who opens it every morning does.

Skips, saying why, where chromium (``apt-get install chromium``) or Playwright's Python
package (the dev extra) is missing; ``.ci/run`` installs chromium. One browser serves every
test of the module, in one xdist group.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy", reason="the history needs its extra: pip install -e '.[history]'")
pytest.importorskip("otava", reason="change points need Apache Otava (the history extra)")
playwright = pytest.importorskip("playwright.sync_api", reason="no Playwright: pip install -e '.[dev]'")

import test_site_kinds as kinds  # noqa: E402
import triage_history as th  # noqa: E402
from memory_folder import memory_folder  # noqa: E402
from test_site import NIGHTS, SLOW_NODE, build_history  # noqa: E402

from perfsuite.commands.main import main  # noqa: E402
from perfsuite.workloads import unit_of_key  # noqa: E402

pytestmark = pytest.mark.xdist_group("site-browser")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRAWN = ".plot[data-drawn='true']"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    folder = memory_folder(tmp_path_factory, "browser")
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


@pytest.fixture(scope="module")
def tab(browser):
    """One tab for the module (a new one costs chromium more than the page it then loads) that
    records every console error, uncaught exception and failed request."""
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    tab.errors = []
    tab.on("console", lambda m: tab.errors.append(f"console: {m.text}") if m.type == "error" else None)
    tab.on("pageerror", lambda e: tab.errors.append(f"uncaught: {e}"))
    tab.on("requestfailed", lambda r: tab.errors.append(f"request failed: {r.url}"))
    yield tab
    tab.close()


@pytest.fixture
def page(tab):
    """The tab, blank and with no errors recorded: each test's errors are its pages' own."""
    tab.goto("about:blank")
    tab.errors.clear()
    return tab


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


def _hover(page, curve: int, point: int) -> str:
    """The hover label of the trend's point: the previous one taken away first (plotly draws a
    hover that follows another within 50 ms later, and keeps the old label till then)."""
    page.evaluate(
        f"""() => {{
            const plot = document.getElementById('trend');
            Plotly.Fx.unhover(plot);
            Plotly.Fx.hover(plot, [{{curveNumber: {curve}, pointNumber: {point}}}]);
        }}"""
    )
    return page.locator("#trend .hoverlayer .hovertext").first.text_content() or ""


@pytest.fixture(scope="module")
def both_kinds(tmp_path_factory) -> Path:
    """The site of a history of image and token models, one node slow in the token keys only."""
    return kinds.build_site(memory_folder(tmp_path_factory, "kinds"))


@pytest.mark.parametrize("key", [kinds.IMAGE, kinds.TOKENS[0]])
def test_a_points_hover_says_the_figure_its_row_of_the_table_says(both_kinds, page, key):
    manifest = json.loads((both_kinds / "manifest.json").read_text())
    (slug,) = [s for s, v in manifest["keys"].items() if v["key"] == key]
    page.goto((both_kinds / "key" / f"{slug}.html").as_uri())
    page.wait_for_selector(DRAWN)
    shown = 0
    for row in page.locator("h2:has-text('Runs') + .scroll tbody tr").all()[:12]:
        cells = row.locator("td").all_inner_texts()
        night, node, figure = cells[0], cells[1], cells[5]
        line = page.evaluate(
            "(node) => document.getElementById('trend').data.findIndex(t => t.meta === 'node' && t.name === node)", node
        )
        label = _hover(page, line, page.evaluate(f"document.getElementById('trend').data[{line}].x.indexOf('{night}')"))
        assert label.startswith(node) and f": {figure} {unit_of_key(key)}" in label, (night, figure, label)
        shown += 1
    assert shown == 12 and page.errors == []


def test_a_hover_rounds_a_figure_once_as_the_table_does(tmp_path, page):
    """Figures whose second rounding would differ: 94.18496 (94.185 to 5 digits, then 94.19),
    94.125 (a half, which Python rounds to even and a browser up), 12345.6 (all its integer digits)."""
    import datetime

    import numpy as np

    from perfsuite.site import assets, pages
    from perfsuite.site.data import OK, KeyData, SiteData

    nights = ["2026-01-01", "2026-01-02", "2026-01-03"]
    figures = np.array([[94.18496, 94.125, 12345.6], [100.0, 100.0, 100.0], [99.0, 99.0, 99.0]])
    k = KeyData(None, kinds.IMAGE, "k", ["n1", "n2", "n3"], figures, np.arange(9).reshape(3, 3),
                [99.0, 99.0, 100.0], None, "the nights before", None, OK, [], [], [])  # fmt: skip
    at = datetime.datetime(2026, 1, 3, 6)
    site = SiteData("h", at, nights, 0.05, {}, [k], [], [], [])
    (tmp_path / "key").mkdir()
    (tmp_path / "assets").mkdir()
    for name, content in assets.files().items():
        (tmp_path / "assets" / name).write_bytes(content)
    (tmp_path / "key" / "k.html").write_text(pages.key_page(site, k))
    page.goto((tmp_path / "key" / "k.html").as_uri())
    page.wait_for_selector(DRAWN)
    table = page.locator("h2:has-text('Runs') + .scroll").inner_text()
    for night, text in enumerate(["94.18", "94.12", "12346"]):
        assert "\tn1\t" in table and f"\t{text}\t" in table
        label = _hover(page, 0, night)
        assert f": {text} img/s" in label, label
    assert page.errors == []
