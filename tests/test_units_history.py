"""Every figure the history's commands, triage and the site show is in its key's unit: tokens/s
for a token model (its key has a ``seqN`` part), img/s for an image model; a table of both says
each figure's, and a --json row names its figure ``throughput`` with its ``unit``, and under the unit's name.

The history (tests/triage_history.py): 6 nodes, 16 nights, one image key and one token key;
every node runs both 15% slower from night 9 on, with a new driver, and node gpu06 10% slower
than its peers from night 12 on.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy", reason="the history needs its extra: pip install -e '.[history]'")
pytest.importorskip("otava", reason="change points need Apache Otava (the history extra)")

import triage_history as th  # noqa: E402

from perfsuite.commands.main import main  # noqa: E402

NIGHTS, DROP_NIGHT, SLOW_NIGHT = 16, 9, 12
IMAGE = th.keys(1)[0]
TOKEN = "torch/gpt2/cpu1/nodes1/device/bs2/seq128/fp32/threads1"
FINGERPRINT = th.record()["run"]["fingerprints"]["cpu"]["id"]


def _factor(node: int, key: int, night: int) -> float:
    return (0.85 if night >= DROP_NIGHT else 1.0) * (0.9 if node == 5 and night >= SLOW_NIGHT else 1.0)


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('units') / 'history.db'}"
    th.build(
        url,
        nights=NIGHTS,
        nodes=6,
        key_count=2,
        noise=0.005,
        factor=_factor,
        env=lambda node, night: {"driver": "590.10"} if night >= DROP_NIGHT else {},
        key_names=[IMAGE, TOKEN],
    )
    return url


def _run(capsys, *argv: str) -> str:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc in (0, 3), err
    return out


def _history(capsys, url: str, *argv: str) -> str:
    return _run(capsys, "history", *argv[:1], "--history", url, *argv[1:])


# --- history trend -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "unit", "name"), [(TOKEN, "tokens/s", "tokens_per_sec"), (IMAGE, "img/s", "images_per_sec")]
)
def test_trend_heads_its_column_with_the_keys_unit_and_names_its_json_figure_by_it(
    history, capsys, monkeypatch, tmp_path, key, unit, name
):
    from perfsuite.reporting import trend

    drawn = []
    monkeypatch.setattr(trend, "trend_png", lambda t: drawn.append(t) or b"png")
    out = _history(capsys, history, "trend", key, "--node", "gpu01", "--plot", str(tmp_path / "t.png"))
    head = next(line for line in out.splitlines() if line.lstrip().startswith("run "))
    assert head.split()[3] == unit
    assert drawn[0].unit == unit
    runs = json.loads(_history(capsys, history, "trend", key, "--node", "gpu01", "--json"))["runs"]
    # the figure as throughput, then under its unit's name, then its unit
    assert list(runs[0]) == [
        "run_id",
        "date",
        "git_commit",
        "throughput",
        name,
        "unit",
        "ci_low",
        "ci_high",
        "change_point",
        "numerics",
    ]
    assert runs[0]["unit"] == unit and runs[0][name] == runs[0]["throughput"]
    assert runs[0][name] == pytest.approx(runs[0]["ci_low"] / 0.99)


# --- history changes -----------------------------------------------------------------------------


def test_each_change_point_says_its_keys_unit(history, capsys):
    out = _history(capsys, history, "changes", "--node", "gpu01")
    said = {}
    for head, line in zip(out.splitlines(), out.splitlines()[1:]):
        found = re.search(r"\]$", head) and re.search(r" -> [\d.]+ (\S+) \(medians\)", line)
        if found:
            said[head.split()[1]] = found.group(1)
    assert said == {IMAGE: "img/s", TOKEN: "tokens/s"}


# --- history fleet -------------------------------------------------------------------------------


def _fleet(capsys, url: str, *argv: str) -> str:
    return _history(capsys, url, "fleet", "--at", th.at(NIGHTS), "--limit", "0", *argv)


def test_a_fleet_table_of_both_kinds_says_each_figures_unit(history, capsys):
    out = _fleet(capsys, history)
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("host "))
    assert "throughput" in lines[head].split() and "img/s" not in lines[head]
    rows = [line for line in lines[head + 1 :] if line.startswith("gpu")]
    assert len(rows) == 12
    for row in rows:
        unit = "tokens/s" if TOKEN in row else "img/s"
        other = "img/s" if unit == "tokens/s" else "tokens/s"
        assert row.count(unit) == 2 and other not in row  # the figure and the key's median


@pytest.mark.parametrize(("key", "unit"), [(IMAGE, "img/s"), (TOKEN, "tokens/s")])
def test_a_fleet_table_of_one_kind_names_its_unit_in_the_head(capsys, tmp_path, key, unit):
    url = f"sqlite:///{tmp_path / 'history.db'}"
    th.build(url, nights=2, nodes=3, key_count=1, key_names=[key])
    lines = _history(capsys, url, "fleet", "--at", th.at(2)).splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("host "))
    assert lines[head].split()[3:6] == [unit, "95%", "CI"]
    rows = [line for line in lines[head + 1 :] if line.startswith("gpu")]
    assert len(rows) == 3 and not any(re.search(r" (img|tokens)/s", row) for row in rows)


def test_fleet_json_names_each_rows_figure_by_its_unit_beside_throughput(history, capsys):
    rows = json.loads(_fleet(capsys, history, "--json"))["rows"]
    by_key = {k: [r for r in rows if r["key"] == k] for k in (IMAGE, TOKEN)}
    assert all(len(found) == 6 for found in by_key.values())
    for r in by_key[IMAGE]:
        assert r["images_per_sec"] == r["throughput"] and r["unit"] == "img/s" and "tokens_per_sec" not in r
    for r in by_key[TOKEN]:
        assert r["tokens_per_sec"] == r["throughput"] and r["unit"] == "tokens/s" and "images_per_sec" not in r
        assert r["ci_low"] < r["tokens_per_sec"] < r["ci_high"]
    image, token = by_key[IMAGE][0], by_key[TOKEN][0]
    assert list(token) == ["tokens_per_sec" if f == "images_per_sec" else f for f in image]


# --- triage --------------------------------------------------------------------------------------


def test_triage_says_each_keys_unit(history, capsys):
    out = _run(capsys, "triage", "--history", history, "--at", th.at(NIGHTS))
    for key, unit in ((IMAGE, "img/s"), (TOKEN, "tokens/s")):
        said = re.findall(rf"^ +{re.escape(key)}  [+-][\d.]+%  [\d.]+ -> [\d.]+ (\S+)  \(", out, re.M)
        assert said and set(said) == {unit}
    report = json.loads(_run(capsys, "triage", "--history", history, "--at", th.at(NIGHTS), "--json"))
    keys = [k for i in report["incidents"] for k in i["keys"]]
    assert {k["key"] for k in keys} == {IMAGE, TOKEN}
    assert not any("images_per_sec" in k or "tokens_per_sec" in k for k in keys)  # before, after: the key's unit


# --- the site ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(history, tmp_path_factory) -> Path:
    baselines = tmp_path_factory.mktemp("baselines")
    level = {IMAGE: th.record()["results"][0]["images_per_sec"], TOKEN: th.record()["results"][1]["images_per_sec"]}
    entries = {IMAGE: {"images_per_sec": level[IMAGE]}, TOKEN: {"tokens_per_sec": level[TOKEN] * 1.25}}
    (baselines / f"{FINGERPRINT}.json").write_text(json.dumps({"schema": 1, "fingerprint": {}, "entries": entries}))
    folder = tmp_path_factory.mktemp("site") / "site"
    rc = main(["history", "site", str(folder), "--history", history, "--at", th.at(NIGHTS),
               "--baseline-dir", str(baselines)])  # fmt: skip
    assert rc == 0
    return folder


def _figure(page: str, element: str) -> dict:
    found = re.search(rf"<script type='application/json' id='{element}-data'>(.*?)</script>", page, re.S)
    assert found, f"no figure {element}"
    return json.loads(found.group(1))


def _key_page(site: Path, key: str) -> str:
    manifest = json.loads((site / "manifest.json").read_text())
    slug = next(s for s, v in manifest["keys"].items() if v["key"] == key)
    return (site / "key" / f"{slug}.html").read_text()


@pytest.mark.parametrize(("key", "unit", "other"), [(TOKEN, "tokens/s", "img/s"), (IMAGE, "img/s", "tokens/s")])
def test_a_key_page_says_its_keys_unit_everywhere(site, key, unit, other):
    page = _key_page(site, key)
    summary = re.search(r"<p class='summary[^>]*>(.*?)</p>", page).group(1)
    assert re.search(rf"tonight's median [\d.]+ {unit}, .* against the baseline \([\d.]+ {unit}, ", summary)
    assert f"<th class=n>{unit}</th>" in page  # the runs' table
    assert re.search(rf"→ [\d.]+ {unit}\), p=", page)  # a change point of the fleet's median
    figure = _figure(page, "trend")
    assert figure["layout"]["yaxis"]["title"]["text"] == unit
    hovers = [t["hovertemplate"] for t in figure["data"] if "hovertemplate" in t]
    assert hovers and all(f" {unit}<" in h for h in hovers)
    assert other not in page.replace("<img", "")


def test_the_sites_token_baseline_is_read_by_its_name(site):
    page = _key_page(site, TOKEN)
    # tonight 0.85 x 0.9 of the level for one node in six, the baseline 1.25 x: about -32%
    assert re.search(r"-3\d\.\d% against the baseline", page)
    figure = _figure(page, "trend")
    assert [s["type"] for s in figure["layout"]["shapes"]][:2] == ["rect", "line"]


def test_the_front_pages_grid_of_both_kinds_says_each_figures_unit(site):
    front = (site / "index.html").read_text()
    assert "<th class=n>median</th>" in front and "img/s (median)" not in front
    for key, unit in ((IMAGE, "img/s"), (TOKEN, "tokens/s")):
        row = re.search(rf"<tr class='key [^']*' data-key='{re.escape(key)}'>(.*?)</tr>", front).group(1)
        assert re.search(rf"<td class=n>[\d.]+ {re.escape(unit)}</td>", row)


def test_the_fleet_and_incident_pages_say_each_figures_unit(site):
    fleet = next((site / "fleet").glob("*.html")).read_text()
    texts = [text for trace in _figure(fleet, "strip")["data"] for text in trace.get("text", [])]
    assert sum(t.endswith(" tokens/s") for t in texts) == 6 and sum(t.endswith(" img/s") for t in texts) == 6
    pages = [p.read_text() for p in (site / "incident").glob("*.html")]
    both = [p for p in pages if IMAGE in p and TOKEN in p]
    assert both, "no incident of both keys"
    page = both[0]
    assert "<th class=n>before</th>" in page and "img/s before" not in page
    for key, unit in ((IMAGE, "img/s"), (TOKEN, "tokens/s")):
        row = re.search(rf"<code>{re.escape(key)}</code>.*?</tr>", page).group(0)
        assert len(re.findall(rf"[\d.]+ {re.escape(unit)}</td>", row)) == 2
    for p in pages:
        trend = _figure(p, "trend")
        key = re.search(r"^(\S+) \[", trend["layout"]["title"]["text"]).group(1)
        assert trend["layout"]["yaxis"]["title"]["text"] == ("tokens/s" if key == TOKEN else "img/s")
