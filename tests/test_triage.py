"""``python -m perfsuite triage`` on nightly histories built from a real ``--perf-json`` record
(tests/triage_history.py): one test per scenario the on-call engineer meets, then its outputs,
the history's own records (gate failures, attribution, bisect verdicts) and bad input."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
import sys

import pytest

pytest.importorskip("sqlalchemy", reason="the history needs its extra: pip install -e '.[history]'")
pytest.importorskip("otava", reason="change points need Apache Otava (the history extra)")

import triage_history as th  # noqa: E402
from memory_folder import copy_history, memory_folder, one_connection  # noqa: E402

from perfsuite.commands import triage  # noqa: E402
from perfsuite.commands.main import main  # noqa: E402
from perfsuite.history import db, document  # noqa: E402
from perfsuite.reporting import triage as render  # noqa: E402

NIGHTS = 30
KEYS = th.keys()
CPU = th.record()["run"]["fingerprints"]["cpu"]["id"]


def _triage(capsys, url: str, *argv: str) -> tuple[int, dict]:
    rc = main(["triage", "--history", url, "--at", th.at(NIGHTS), "--json", *argv])
    out, err = capsys.readouterr()
    assert rc in (0, 3), err
    return rc, json.loads(out)


def _text(capsys, url: str, *argv: str) -> tuple[int, str]:
    rc = main(["triage", "--history", url, "--at", th.at(NIGHTS), *argv])
    out, err = capsys.readouterr()
    assert rc in (0, 3), err
    return rc, out


def _history(tmp_path_factory, name: str, **scenario) -> str:
    url = f"sqlite:///{memory_folder(tmp_path_factory, name) / 'history.db'}"
    _build(url, **scenario)
    return url


def _build(url: str, **scenario) -> list[int]:
    engine = one_connection(url)
    try:
        return th.build(engine, nights=NIGHTS, **scenario)
    finally:
        engine.dispose()


def _copy(tmp_path_factory, url: str) -> str:
    """A shared history's copy, for a test that writes to it or lets triage do so."""
    return copy_history(url, memory_folder(tmp_path_factory, "copy"))


# --- the scenarios ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def driver_upgrade(tmp_path_factory) -> str:
    """All 8 nodes get driver 590.10 on night 12; 3 of the 4 keys run 9% slower from then."""
    return _history(
        tmp_path_factory,
        "driver",
        factor=lambda node, key, night: 0.91 if night >= 12 and key < 3 else 1.0,
        env=lambda node, night: {"driver": "590.10"} if night >= 12 else {},
    )


def test_a_driver_upgrade_on_every_node_is_one_incident_of_the_fingerprint(driver_upgrade, capsys):
    rc, report = _triage(capsys, driver_upgrade)
    assert rc == 3
    (incident,) = report["incidents"]
    assert incident["open"] and incident["kind"] == "environment"
    assert incident["scope"] == "fingerprint" and incident["fingerprints"] == [CPU]
    assert [c["change"] for c in incident["cause"]] == ["driver 580.65 -> 590.10"]
    assert incident["nodes"] == [f"gpu{n:02d}" for n in range(1, 9)] and incident["unaffected"] == []
    assert sorted(k["key"] for k in incident["keys"]) == sorted(KEYS[:3])
    assert incident["size"]["keys"] == 3 and incident["size"]["nodes"] == 8
    assert -0.12 < incident["size"]["worst"] <= incident["size"]["median"] <= incident["size"]["least"] < -0.06
    # night 12 of the history is its 13th: 2026-01-13; the last good night the one before
    assert incident["onset"]["last_good"] == "2026-01-12" and incident["onset"]["first_bad"] == "2026-01-13"
    assert incident["commits"] is None and incident["bisect_command"] is None


def test_the_terminal_says_it_in_15_lines_or_fewer(driver_upgrade, capsys):
    rc, out = _text(capsys, driver_upgrade)
    assert rc == 3
    blocks = out.strip().split("\n\n")
    assert blocks[0].endswith("1 incident, 1 open")
    lines = blocks[1].splitlines()
    assert len(lines) <= 15
    assert lines[0].startswith("incident 1 (open): driver 580.65 -> 590.10: ")
    assert "  scope: all 8 nodes of fingerprint " + CPU in lines
    assert "  likely cause: driver 580.65 -> 590.10 (made by every affected node, by no other)" in lines


@pytest.fixture(scope="module")
def slow_node(tmp_path_factory) -> str:
    """Node gpu03 runs 12% slower from night 9, with nothing changed but the nightly commit,
    which every node makes."""
    return _history(
        tmp_path_factory,
        "node",
        factor=lambda node, key, night: 0.88 if node == 2 and night >= 9 else 1.0,
        env=lambda node, night: {"git_commit": f"c{night:06d}"},
    )


def test_one_slow_node_is_one_incident_of_that_node_with_no_environment_cause(slow_node, capsys):
    _, report = _triage(capsys, slow_node)
    (incident,) = report["incidents"]
    assert incident["kind"] == "node" and incident["scope"] == "one node"
    assert incident["nodes"] == ["gpu03"] and len(incident["unaffected"]) == 7
    assert incident["cause"] == []
    assert incident["size"]["keys"] == 4
    assert incident["onset"]["first_bad"] == "2026-01-10"
    # the commit changed there too, on every node: said, and not blamed
    assert [c["change"] for c in incident["changes"]] == ["commit c000008 -> c000009"]
    assert incident["elsewhere"] == ["commit c000008 -> c000009"]
    assert incident["bisect_command"] is None


@pytest.fixture(scope="module")
def slow_commit(tmp_path_factory) -> str:
    """Commit bbbb222 (night 20) slows resnet50 (keys 2 and 3) by 15% on every node."""
    return _history(
        tmp_path_factory,
        "commit",
        factor=lambda node, key, night: 0.85 if night >= 20 and key in (2, 3) else 1.0,
        env=lambda node, night: {"git_commit": "bbbb222" if night >= 20 else "aaaa111"},
    )


def test_a_commit_that_slows_one_model_is_one_incident_with_its_range_and_bisect(slow_commit, capsys):
    _, report = _triage(capsys, slow_commit)
    (incident,) = report["incidents"]
    assert incident["kind"] == "commit" and incident["scope"] == "fingerprint"
    assert {k["key"].split("/")[1] for k in incident["keys"]} == {"resnet50"} and incident["size"]["models"] == 1
    assert incident["commits"] == {"good": "aaaa111", "bad": "bbbb222"}
    worst = incident["keys"][0]["key"]
    assert incident["bisect_command"] == f"python -m perfsuite bisect aaaa111 bbbb222 {worst} --min-change 0.07"
    assert incident["onset"]["first_bad"] == "2026-01-21"


@pytest.fixture(scope="module")
def replaced_node(tmp_path_factory) -> str:
    """gpu06 becomes another machine on night 15 (new host and CPU), 20% slower than the old."""
    return _history(
        tmp_path_factory,
        "swap",
        factor=lambda node, key, night: 0.8 if node == 5 and night >= 15 else 1.0,
        env=lambda node, night: (
            {"host": "host-new", "fingerprints": {"cpu": {"id": "cpu-amd-epyc-f25m1s1-2c"}}}
            if node == 5 and night >= 15
            else {}
        ),
    )


def test_a_node_replaced_by_new_hardware_is_a_swap_not_an_incident(replaced_node, capsys):
    rc, report = _triage(capsys, replaced_node)
    assert rc == 0 and report["incidents"] == []
    (swap,) = report["swaps"]
    assert swap == {
        "node": "gpu06",
        "what": "fingerprint",
        "old": CPU,
        "new": "cpu-amd-epyc-f25m1s1-2c",
        "night": NIGHTS - 1 - 15,
        "date": "2026-01-16",
    }


def test_a_new_host_behind_a_node_on_the_same_fingerprint_is_a_swap_too(tmp_path_factory, capsys):
    url = _history(
        tmp_path_factory,
        "host-swap",
        factor=lambda node, key, night: 0.85 if node == 5 and night >= 15 else 1.0,
        env=lambda node, night: {"host": "host-new"} if node == 5 and night >= 15 else {},
    )
    rc, report = _triage(capsys, url)
    assert rc == 0 and report["incidents"] == []
    assert [(w["node"], w["what"], w["old"], w["new"]) for w in report["swaps"]] == [
        ("gpu06", "host", "host-06", "host-new")
    ]


@pytest.fixture(scope="module")
def flat(tmp_path_factory) -> str:
    """Every node as fast as ever, figures wandering 2% (seed 1)."""
    return _history(tmp_path_factory, "flat-1", seed=1)


def test_a_flat_fleet_with_2_percent_noise_for_30_nights_has_no_incident(flat, tmp_path_factory, capsys):
    for seed in (1, 2, 3):
        url = flat if seed == 1 else _history(tmp_path_factory, f"flat-{seed}", seed=seed)
        rc, report = _triage(capsys, url)
        assert rc == 0 and report["incidents"] == [] and report["swaps"] == [], seed


@pytest.fixture(scope="module")
def two_causes(tmp_path_factory) -> str:
    """Driver 590.10 on night 8 slows key 0 by 10%; commit bbbb222 on night 20 slows key 2 by 12%."""
    return _history(
        tmp_path_factory,
        "two",
        factor=lambda node, key, night: (
            (0.9 if night >= 8 and key == 0 else 1.0) * (0.88 if night >= 20 and key == 2 else 1.0)
        ),
        env=lambda node, night: {
            "driver": "590.10" if night >= 8 else "580.65",
            "git_commit": "bbbb222" if night >= 20 else "aaaa111",
        },
    )


@pytest.fixture(scope="module")
def two_causes_outputs(two_causes, tmp_path_factory) -> tuple[dict, str, str]:
    """One triage of ``two_causes``: its JSON report, its Markdown and its HTML."""
    folder = tmp_path_factory.mktemp("two-outputs")
    md, page = folder / "triage.md", folder / "triage.html"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        argv = ["--history", two_causes, "--at", th.at(NIGHTS), "--json", "--markdown", str(md), "--html", str(page)]
        rc = main(["triage", *argv])
    assert rc in (0, 3), err.getvalue()
    return json.loads(out.getvalue()), md.read_text(), page.read_text()


def test_two_causes_on_two_nights_are_two_incidents(two_causes_outputs):
    report = copy.deepcopy(two_causes_outputs[0])
    by_kind = {i["kind"]: i for i in report["incidents"]}
    assert len(report["incidents"]) == 2 and set(by_kind) == {"environment", "commit"}
    driver, commit = by_kind["environment"], by_kind["commit"]
    assert [c["change"] for c in driver["cause"]] == ["driver 580.65 -> 590.10"]
    assert [k["key"] for k in driver["keys"]] == [KEYS[0]] and driver["onset"]["first_bad"] == "2026-01-09"
    assert [k["key"] for k in commit["keys"]] == [KEYS[2]] and commit["onset"]["first_bad"] == "2026-01-21"
    assert commit["commits"] == {"good": "aaaa111", "bad": "bbbb222"}


def test_some_nodes_that_share_a_change_and_a_label_are_named_with_them(tmp_path_factory, capsys):
    url = _history(
        tmp_path_factory,
        "rack",
        factor=lambda node, key, night: 0.9 if node < 4 and night >= 14 else 1.0,
        env=lambda node, night: {"container": "img:2" if node < 4 and night >= 14 else "img:1"},
    )
    _, report = _triage(capsys, url)
    (incident,) = report["incidents"]
    assert incident["scope"] == "some nodes" and incident["nodes"] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert incident["shared_labels"] == {"rack": "r1"}
    assert [c["change"] for c in incident["cause"]] == ["container img:1 -> img:2"]


def test_a_bisect_past_its_time_is_stopped_and_the_report_is_still_written(
    slow_commit, tmp_path_factory, tmp_path, capsys, monkeypatch
):
    """--bisect: a bisect still running at its limit is stopped; the report is written all the same,
    that incident's bisect saying it timed out (a bisect that outlived its limit used to lose the
    whole report)."""
    url = _copy(tmp_path_factory, slow_commit)
    never_done = tmp_path / "python"  # what --bisect starts, in place of the interpreter: a bisect that never ends
    never_done.write_text("#!/bin/sh\nexec sleep 120\n")
    never_done.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(never_done))
    monkeypatch.setattr(triage, "MAX_BISECT_MINUTES", 0.02)  # 1.2 s
    written = tmp_path / "triage.md"
    rc = main(["triage", "--history", url, "--at", th.at(NIGHTS), "--bisect", "--json", "--markdown", str(written)])
    out, err = capsys.readouterr()
    assert rc == 3, err
    (incident,) = json.loads(out)["incidents"]
    assert incident["kind"] == "commit" and incident["bisect"]["status"] == "timed out"
    assert incident["bisect"]["minutes"] == 0.02
    assert "bisect: timed out" in written.read_text()


# --- what the history holds besides the figures ------------------------------------------------


def test_a_bisect_verdict_in_the_history_is_shown_with_its_incident(slow_commit, tmp_path_factory, capsys):
    slow_commit = _copy(tmp_path_factory, slow_commit)  # the other tests read it without the verdict
    engine = db.open_history(slow_commit)
    try:
        outcome = {
            "status": "found",
            "key": KEYS[3],
            "fingerprint": CPU,
            "good": "aaaa111",
            "bad": "bbbb222",
            "first_bad": {"commit": "bbbb222", "subject": "resnet50: fuse the bottleneck differently"},
            "candidates": [],
            "step": {"change": -0.151, "ci_low": -0.16, "ci_high": -0.14},
        }
        db.write_run(engine, document.bisect_verdict(outcome, date=th.at(NIGHTS).replace("06:00", "05:00"), host="h"))
    finally:
        engine.dispose()
    _, report = _triage(capsys, slow_commit)
    (incident,) = report["incidents"]
    assert incident["bisect"]["first_bad"] == "bbbb222" and incident["bisect"]["status"] == "found"
    _, out = _text(capsys, slow_commit)
    assert "bisect found bbbb222 'resnet50: fuse the bottleneck differently' (-15.1%)" in out
    assert "python -m perfsuite bisect" not in out  # answered: no command to run


def test_gate_failures_tonight_and_their_ops_come_from_the_bursts(tmp_path_factory, capsys):
    """Three nights ago gpu05's key 1 slowed by 30%; its bursts failed the gate (confirmed) and
    carry attribution: the ops that moved are listed, most first, at most 5."""
    url = f"sqlite:///{memory_folder(tmp_path_factory, 'gate') / 'history.db'}"
    ids = _build(
        url,
        factor=lambda node, key, night: 0.7 if node == 4 and key == 1 and night >= NIGHTS - 3 else 1.0,
        failing=lambda node, key, night: node == 4 and key == 1 and night >= NIGHTS - 3,
    )
    movers = [
        {
            "name": f"aten::op{i}",
            "family": "matmul",
            "kind": "op",
            "base_ms": 1.0,
            "now_ms": 1.0 + i,
            "delta_ms": float(i),
        }
        for i in range(1, 8)
    ]
    import sqlalchemy as sa

    from perfsuite.history import schema

    engine = db.open_history(url)
    try:
        with engine.begin() as conn:
            b = schema.bursts
            for run_id in ids[-8 * 3 :]:
                row = conn.execute(sa.select(b.c.id, b.c.row).where(b.c.run_id == run_id, b.c.key == KEYS[1])).one()
                if row.row["verdict"] == "regression":
                    attribution = {"status": "attributed", "base_step_ms": 10.0, "now_step_ms": 38.0, "movers": movers}
                    conn.execute(
                        sa.update(b).where(b.c.id == row.id).values(row={**row.row, "attribution": attribution})
                    )
    finally:
        engine.dispose()
    _, report = _triage(capsys, url)
    (incident,) = report["incidents"]
    assert incident["nodes"] == ["gpu05"] and [k["key"] for k in incident["keys"]] == [KEYS[1]]
    assert incident["onset"]["first_bad"] == "2026-01-28"
    assert [m["name"] for m in incident["ops"]["movers"]] == [f"aten::op{i}" for i in (7, 6, 5, 4, 3)]


# --- outputs ------------------------------------------------------------------------------------


def test_markdown_and_html_are_written(two_causes_outputs):
    _, text, html = two_causes_outputs
    assert text.startswith("## perfsuite triage")
    assert text.count("\n### ") == 2 and "| key | change |" in text
    assert "`python -m perfsuite bisect aaaa111 bbbb222 " in text
    assert html.count("<img alt='trend of ") == 2 and "data:image/png;base64," in html
    assert "http" not in re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", html)  # self-contained


def test_markdown_stays_under_60000_characters_however_many_incidents(two_causes_outputs):
    report = copy.deepcopy(two_causes_outputs[0])
    incident = report["incidents"][0]
    many_keys = [dict(incident["keys"][0], key=f"torch/model{k}/cpu1") for k in range(400)]
    report["incidents"] = [dict(incident, id=n, keys=many_keys) for n in range(1, 3001)]
    text = render.markdown(report)
    assert len(text) < render.MARKDOWN_LIMIT
    assert "more incidents" in text and "… and 390 more keys" in text


def test_a_recovered_incident_is_said_and_does_not_fail_ci(tmp_path_factory, capsys):
    url = _history(
        tmp_path_factory,
        "recovered",
        factor=lambda node, key, night: 0.85 if 15 <= night < 25 and key == 0 else 1.0,
        env=lambda node, night: {"cuda": "13.1"} if 15 <= night < 25 else {},
    )
    rc, report = _triage(capsys, url)
    assert rc == 0
    (incident,) = report["incidents"]
    assert not incident["open"] and incident["kind"] == "environment"
    assert [c["change"] for c in incident["cause"]] == ["cuda 13.0 -> 13.1"]


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--nights", "3"], "--nights"),
        (["--since", "0"], "--since"),
        (["--since", "1000"], "reaches past the 30 nights read"),
        (["--min-change", "2"], "--min-change"),
        (["--at", "yesterday"], "expected an ISO date"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(driver_upgrade, capsys, argv, says):
    try:
        rc = main(["triage", "--history", driver_upgrade, *argv])
    except SystemExit as stop:  # argparse's own refusals
        rc = stop.code
    err = capsys.readouterr().err
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1


def test_an_empty_window_or_a_missing_history_exit_1(driver_upgrade, tmp_path, capsys):
    rc = main(["triage", "--history", driver_upgrade, "--at", "2020-01-01T00:00Z"])
    err = capsys.readouterr().err
    assert rc == 1 and "no run in the 30 nights before 2020-01-01 00:00 UTC" in err
    rc = main(["triage", "--history", str(tmp_path / "none.db")])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("error: ") and len(err.strip().splitlines()) == 1


def test_bisects_own_measurements_in_the_history_are_no_nights_of_the_fleet(flat, tmp_path_factory, capsys):
    """bisect --perf-history stores each commit's bursts, labelled bisect_commit, from whatever
    machine it ran on: 40% slower midpoints there are not gpu01 slowing down."""
    url = _copy(tmp_path_factory, flat)
    doc = th.record()
    doc["run"].update(date=th.at(NIGHTS).replace("06:00", "05:00"), node="gpu01", labels={"bisect_commit": "bbbb222"})
    for row in doc["results"]:
        row["images_per_sec"] *= 0.6
    engine = db.open_history(url)
    try:
        db.write_run(engine, {"uuid": "bisect-1", "mode": "gate", "outcome": "passed", "source": "run", **doc})
    finally:
        engine.dispose()
    rc, report = _triage(capsys, url)
    assert rc == 0 and report["incidents"] == []
    rc = main(["history", "fleet", "--history", url, "--at", th.at(NIGHTS), "--json"])
    fleet = json.loads(capsys.readouterr().out)
    assert rc == 0 and fleet["flagged_hosts"] == [] and all(r["images_per_sec"] > 0 for r in fleet["rows"])
