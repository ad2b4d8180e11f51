"""``history site`` over a history of image and token models, one node slow in the token keys only.

The history (tests/triage_history.py): 4 nodes, 8 nights, one image key (torch/cifar10) and two
token keys (torch/gpt2 at sequence length 64); node gpu04 runs the token keys 10% slower than its
peers from night 4 on, and the image key as fast as they do. The fleet rule finds gpu04 slow, and
triage opens one incident of it with its onset.
"""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sqlalchemy", reason="the history needs its extra: pip install -e '.[history]'")
pytest.importorskip("otava", reason="change points need Apache Otava (the history extra)")

import triage_history as th  # noqa: E402

from perfsuite.commands.main import main  # noqa: E402
from perfsuite.common.numbers import fixed  # noqa: E402

NIGHTS, ONSET, SLOW_NODE = 8, 4, "gpu04"
IMAGE = "torch/cifar10/cpu1/nodes1/device/bs64/img24/fp32/threads1"
TOKENS = [
    "torch/gpt2/cpu1/nodes1/device/bs2/seq64/fp32/threads2",
    "torch/gpt2/cpu1/nodes1/device/bs4/seq64/fp32/threads2",
]


def build_history(path: Path) -> str:
    url = f"sqlite:///{path}"
    th.build(
        url,
        nights=NIGHTS,
        nodes=4,
        key_count=3,
        noise=0.01,
        factor=lambda node, key, night: 0.9 if node == 3 and key > 0 and night >= ONSET else 1.0,
        key_names=[IMAGE, *TOKENS],
    )
    return url


def build_site(folder: Path) -> Path:
    """The site of the history, with no baseline file: each key against its nights before."""
    (folder / "no-baselines").mkdir()
    url = build_history(folder / "history.db")
    argv = ["--at", th.at(NIGHTS), "--baseline-dir", str(folder / "no-baselines")]
    assert main(["history", "site", str(folder / "site"), "--history", url, *argv]) == 0
    return folder / "site"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return build_site(tmp_path_factory.mktemp("kinds"))


def _key_page(site: Path, key: str) -> str:
    manifest = json.loads((site / "manifest.json").read_text())
    (slug,) = [s for s, v in manifest["keys"].items() if v["key"] == key]
    return (site / "key" / f"{slug}.html").read_text()


def _figure(page: str) -> dict[str, Any]:
    found = re.search(r"<script type='application/json' id='trend-data'>(.*?)</script>", page, re.S)
    assert found
    return json.loads(found.group(1))


def _runs(page: str) -> list[tuple[bool, str, str, str]]:
    """The key page's table of runs: (highlighted, night, node, figure) per row."""
    table = page[page.index("<h2>Runs (") :]
    rows = re.findall(
        r"<tr( class=regression)?><td>([^<]*)</td><td>([^<]*)</td><td class=n>\d+</td><td>[^<]*</td>"
        r"<td><code>[^<]*</code></td><td class=n>([^<]*)</td>",
        table,
    )
    return [(bool(mark), unescape(night), unescape(node), figure) for mark, night, node, figure in rows]


def test_the_fleet_flags_the_node_slow_in_the_token_keys(site):
    front = (site / "index.html").read_text()
    flagged = front[front.index("Flagged nodes") : front.index("Every key")]
    assert f"<b>{SLOW_NODE}</b>" in flagged


def test_a_key_is_a_slow_nodes_only_where_the_node_is_slow_in_it(site):
    front = (site / "index.html").read_text()
    status = dict((key, css) for css, key in re.findall(r"<tr class='key ([^']+)' data-key='([^']+)'>", front))
    assert status == {IMAGE: "ok", TOKENS[0]: "slow-node", TOKENS[1]: "slow-node"}
    assert "slow: " not in _key_page(site, IMAGE)
    for key in TOKENS:
        assert f"; slow: {SLOW_NODE}</p>" in _key_page(site, key)


def test_a_slow_nodes_runs_are_marked_from_its_onset_on(site):
    onset = sorted({night for _, night, _, _ in _runs(_key_page(site, TOKENS[0]))})[ONSET]
    for key in TOKENS:
        runs = _runs(_key_page(site, key))
        assert len(runs) == 4 * NIGHTS
        marked = sorted(night for mark, night, node, _ in runs if mark and node == SLOW_NODE)
        slow = sorted(night for _, night, node, _ in runs if node == SLOW_NODE and night >= onset)
        assert marked == slow and len(slow) == NIGHTS - ONSET
        assert not [node for mark, _, node, _ in runs if mark and node != SLOW_NODE]
    assert not [run for run in _runs(_key_page(site, IMAGE)) if run[0]]


def test_the_incidents_command_measures_the_token_keys_sequence_length(site):
    (page,) = (site / "incident").glob("*.html")
    text = unescape(page.read_text())
    command = re.search(r"python -m pytest [^<]*", text)
    assert command and "--perf-seq-len 64" in command.group(0), text


@pytest.mark.parametrize("key", [IMAGE, *TOKENS])
def test_a_points_hover_shows_the_figure_its_row_shows(site, key):
    """The page keeps each figure whole and rounds it once where it shows it: the hover of a
    node's point says what that run's row of the table says."""
    page = _key_page(site, key)
    figure = _figure(page)
    lines = {t["name"]: t for t in figure["data"] if t.get("meta") == "node"}
    for _, night, node, shown in _runs(page):
        line = lines[node]
        at = line["x"].index(night)
        assert "%{customdata}" in line["hovertemplate"] and "%{y" not in line["hovertemplate"]
        assert line["customdata"][at] == shown == fixed(line["y"][at])
        assert line["y"][at] != float(f"{line['y'][at]:.6g}")  # kept whole, not rounded first
    median = next(t for t in figure["data"] if t["name"] == "fleet median")
    assert median["customdata"][-1] in page[page.index("tonight's median") :].split("<")[0]
