"""``python -m perfsuite history site``: what its pages say, and what ``--since`` rewrites.

The history: 8 nodes, 4 keys (one renamed to carry the characters HTML must escape), 30
nights built from a real ``--perf-json`` record (tests/triage_history.py); node gpu03 runs 15%
slower from night 24, and every node's driver goes 580.65 -> 580.95 on night 12.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sqlalchemy", reason="the history needs its extra: pip install -e '.[history]'")
pytest.importorskip("otava", reason="change points need Apache Otava (the history extra)")

import triage_history as th  # noqa: E402
from memory_folder import memory_folder, one_connection  # noqa: E402

from perfsuite.commands.main import main  # noqa: E402

NIGHTS, SLOW_NODE, SLOW_FROM, DRIVER_NIGHT = 30, "gpu03", 24, 12
ODD_KEY = "torch/odd<img src=x>&model/cpu1/nodes1/device/bs8/img32/fp32/a'b\"c"


def build_history(path: Path) -> str:
    """The history at ``path``, written over one connection (tests/memory_folder.py)."""
    keys = th.keys(4)
    url = f"sqlite:///{path}"
    engine = one_connection(url)
    try:
        th.build(
            engine,
            nights=NIGHTS,
            nodes=8,
            key_count=4,
            factor=lambda node, key, night: 0.85 if node == 2 and night >= SLOW_FROM else 1.0,
            env=lambda node, night: {"driver": "580.95" if night >= DRIVER_NIGHT else "580.65"},
            key_names=[*keys[:3], ODD_KEY],
        )
    finally:
        engine.dispose()
    return url


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> str:
    return build_history(memory_folder(tmp_path_factory, "site") / "history.db")


def _site(capsys, url: str, folder: Path, *argv: str) -> tuple[int, Any]:
    rc = main(["history", "site", str(folder), "--history", url, "--at", th.at(NIGHTS), "--json", *argv])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 else err)


@pytest.fixture(scope="module")
def site(history, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("built") / "site"
    rc = main(["history", "site", str(folder), "--history", history, "--at", th.at(NIGHTS)])
    assert rc == 0
    return folder


def _figure(page: str, element: str = "trend") -> dict:
    found = re.search(rf"<script type='application/json' id='{element}-data'>(.*?)</script>", page, re.S)
    assert found, f"no figure {element}"
    return json.loads(found.group(1))


def test_the_front_page_leads_with_the_open_incident_and_the_slow_node(site):
    front = (site / "index.html").read_text()
    incidents = front.index("Open incidents")
    flagged = front.index("Flagged nodes")
    grid = front.index("Every key")
    assert incidents < flagged < grid
    assert f"<b>{SLOW_NODE}</b>" in front[flagged:grid]
    assert "incident/1.html" in front[incidents:flagged]
    assert front.count("<svg class='spark'") == 4  # one line per key, no script needed


def test_every_key_of_the_grid_links_to_its_page(site):
    front = (site / "index.html").read_text()
    links = re.findall(r"<a href='(key/[^']+\.html)'>", front)
    assert len(links) == 4
    for link in links:
        assert (site / link).is_file()
    manifest = json.loads((site / "manifest.json").read_text())
    assert sorted(f"key/{s}.html" for s in manifest["keys"]) == sorted(links)


def test_what_users_named_is_escaped_everywhere(site):
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert "<img src=x>" not in text, page
    front = (site / "index.html").read_text()
    assert "odd&lt;img src=x&gt;&amp;model" in front


def test_a_key_page_draws_one_line_per_node_and_marks_the_driver_change(site):
    page = next(p for p in (site / "key").glob("*.html") if "resnet50" in p.name or "cifar10" in p.name).read_text()
    figure = _figure(page)
    nodes = [t["name"] for t in figure["data"] if t.get("meta") == "node"]
    assert sorted(nodes) == [f"gpu{n:02d}" for n in range(1, 9)]
    marks = " ".join(a["text"] for a in figure["layout"]["annotations"])
    assert "driver 580.65 → 580.95" in marks
    assert "driver 580.65 → 580.95" in page  # and in the page's words
    assert "Runs (240," in page  # 8 nodes x 30 nights


def test_the_fleet_page_names_the_slow_node_and_draws_each_key(site):
    (page,) = (site / "fleet").glob("*.html")
    text = page.read_text()
    assert f"slower than their peers: {SLOW_NODE}" in text
    strip = _figure(text, "strip")
    assert len(strip["layout"]["yaxis"]["ticktext"]) == 4
    assert any(t["name"] == "flagged tonight" for t in strip["data"])


def test_each_incident_has_its_page(site):
    manifest = json.loads((site / "manifest.json").read_text())
    assert manifest["incidents"]
    for number in manifest["incidents"]:
        page = (site / "incident" / f"{number}.html").read_text()
        assert "<dt>scope</dt>" in page and _figure(page)["data"]


def test_the_assets_are_in_the_folder_and_nothing_is_fetched_from_outside(site):
    assert (site / "assets" / "plotly-cartesian.min.js").stat().st_size > 1_000_000
    for page in site.rglob("*.html"):
        sources = re.findall(r"(?:src|href)='([^']+)'", page.read_text())
        assert not [s for s in sources if "//" in s], page


def test_since_rewrites_only_the_pages_a_recent_run_touched(history, tmp_path, capsys):
    folder = tmp_path / "site"
    rc, first = _site(capsys, history, folder)
    assert rc == 0 and first["whole"]
    keys = sorted((folder / "key").glob("*.html"))
    before = {p: p.stat().st_mtime_ns for p in keys}
    for p in keys:  # mark them, so a rewrite shows
        p.write_text(p.read_text() + "<!-- kept -->")
    rc, quiet = _site(capsys, history, folder, "--since", "1")  # the last run is 6 h before --at
    assert rc == 0 and not quiet["whole"]
    assert all(p.read_text().endswith("<!-- kept -->") for p in keys)
    assert quiet["pages_written"] == 1 + quiet["incidents"]  # the front page and the incidents
    rc, night = _site(capsys, history, folder, "--since", "24")
    assert rc == 0 and not night["whole"]
    assert not any(p.read_text().endswith("<!-- kept -->") for p in keys)
    assert night["pages_written"] == 1 + 4 + 1 + night["incidents"]
    assert before.keys() == set(sorted((folder / "key").glob("*.html")))


def test_since_without_a_site_there_builds_it_whole(history, tmp_path, capsys):
    rc, done = _site(capsys, history, tmp_path / "new", "--since", "24")
    assert rc == 0 and done["whole"]
    assert (tmp_path / "new" / "index.html").is_file()


def test_a_folder_of_other_files_is_never_replaced(history, tmp_path, capsys):
    (tmp_path / "mine.txt").write_text("keep me")
    rc, err = _site(capsys, history, tmp_path)
    assert rc == 2
    assert err.strip().count("\n") == 0 and "not replacing it" in err
    assert (tmp_path / "mine.txt").read_text() == "keep me"
    file = tmp_path / "mine.txt"
    rc, err = _site(capsys, history, file)
    assert rc == 2 and "is a file" in err


def test_an_unusable_history_is_one_line_and_exit_1(tmp_path, capsys):
    rc, err = _site(capsys, f"sqlite:///{tmp_path / 'none.db'}", tmp_path / "site")
    assert rc == 1 and err.startswith("error:") and err.strip().count("\n") == 0
    assert not (tmp_path / "site").exists()


def test_no_run_in_the_nights_read_is_exit_1(history, tmp_path, capsys):
    rc = main(["history", "site", str(tmp_path / "site"), "--history", history, "--at", "2020-01-01T00:00Z"])
    err = capsys.readouterr().err
    assert rc == 1 and "no run in the 30 nights" in err


def test_a_baseline_file_gives_each_key_its_change_and_its_band(history, tmp_path, capsys):
    rc, _ = _site(capsys, history, tmp_path / "probe")
    assert rc == 0
    manifest = json.loads((tmp_path / "probe" / "manifest.json").read_text())
    key = th.keys(1)[0]
    slug, series = next((s, v) for s, v in manifest["keys"].items() if v["key"] == key)
    level = th.record()["results"][0]["images_per_sec"]
    baselines = tmp_path / "baselines"
    baselines.mkdir()
    (baselines / f"{series['fingerprint']}.json").write_text(
        json.dumps({"schema": 1, "fingerprint": {}, "entries": {key: {"images_per_sec": level * 1.25}}})
    )
    rc, _ = _site(capsys, history, tmp_path / "site", "--baseline-dir", str(baselines))
    assert rc == 0
    page = (tmp_path / "site" / "key" / f"{slug}.html").read_text()
    assert re.search(r"-2\d\.\d% against the baseline", page)  # 1/1.25 - 1 = -20%, give or take the noise
    figure = _figure(page)
    assert [s["type"] for s in figure["layout"]["shapes"]][:2] == ["rect", "line"]  # the band, the baseline
    assert any(a["text"] == "baseline ±5%" for a in figure["layout"]["annotations"])
    rc, err = _site(capsys, history, tmp_path / "other", "--baseline-dir", str(tmp_path / "none"))
    assert rc == 2 and "no such folder" in err
