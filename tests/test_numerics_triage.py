"""Numerics in the history and on its site, on nightly histories (tests/triage_history.py) whose rows carry the
numerics fields of --perf-json: ``history trend`` shows each run's; in ``perfsuite triage`` a change
of the losses tonight joins the incident of its bursts' slowdown, and one with no slowdown is an
incident of its own, with what changed since the baseline; a drift where the configuration cannot
be deterministic is none."""

from __future__ import annotations

import datetime
import json
from html import escape

import pytest

pytest.importorskip("sqlalchemy", reason="the history needs its extra: pip install -e '.[history]'")
pytest.importorskip("otava", reason="change points need Apache Otava (the history extra)")

import triage_history as th  # noqa: E402
from memory_folder import backup_history  # noqa: E402

from perfsuite.commands.main import main  # noqa: E402

NIGHTS = 30
KEYS = th.keys()
TONIGHT = NIGHTS - 1
BUMP = "torch 2.12.0 -> 2.13.0"


def changed(step: int = 3, diff: float = 0.021, note: str | None = None, outcome: str = "changed") -> dict:
    return {
        "numerics": outcome,
        "numerics_first_step": step,
        "numerics_max_rel_diff": diff,
        "numerics_changes": [BUMP],
        "numerics_note": note,
    }


@pytest.fixture(scope="module")
def past(tmp_path_factory):
    """The nights before tonight, written once: every scenario here differs from the plain
    history tonight only (history_with checks that), so each test copies them and adds tonight."""
    path = tmp_path_factory.mktemp("past") / "history.db"
    th.build(f"sqlite:///{path}", nights=NIGHTS - 1, nodes=4)
    return path


PLAIN = {"factor": 1.0, "failing": False, "numerics": {}}  # th.build's, night by night


def history_with(past, tmp_path, env=lambda node, night: {}, **scenario) -> str:
    """The history of NIGHTS nights on 4 nodes with ``scenario`` (th.build's): the past copied,
    then tonight's runs, dated as th.build dates a night's."""
    for night in range(TONIGHT):  # a scenario that changed the past would need it written again
        for node in range(4):
            assert env(node, night) == {}, night
            for name, fn in scenario.items():
                assert all(fn(node, key, night) == PLAIN[name] for key in range(len(KEYS))), (name, night)
    path = tmp_path / "history.db"
    backup_history(past, path)

    def tonight_env(node, night):
        when = th.START + datetime.timedelta(days=TONIGHT, seconds=60 * node)
        return {**env(node, TONIGHT), "date": when.isoformat()}

    def at_tonight(fn):
        return lambda node, key, night: fn(node, key, TONIGHT)

    url = f"sqlite:///{path}"
    tonight = {name: at_tonight(fn) for name, fn in scenario.items()}
    th.build(url, nights=1, nodes=4, seed=NIGHTS, env=tonight_env, **tonight)  # its own draws of the noise
    return url


def triage(capsys, past, tmp_path, **scenario) -> tuple[int, dict, str]:
    url = history_with(past, tmp_path, **scenario)
    rc = main(["triage", "--history", url, "--at", th.at(NIGHTS), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert main(["triage", "--history", url, "--at", th.at(NIGHTS)]) == rc
    return rc, report, capsys.readouterr().out


def test_a_numerics_change_with_no_slowdown_is_an_incident_of_its_own_with_what_changed(capsys, past, tmp_path):
    rc, report, text = triage(
        capsys,
        past,
        tmp_path,
        numerics=lambda node, key, night: changed(step=3 + key) if night == TONIGHT and key < 2 else {},
    )
    assert rc == 0 and report["incidents"] == []  # numerics are a second question: no open slowdown
    (alone,) = report["numerics"]
    assert (alone["id"], alone["outcome"], alone["changes"]) == (1, "changed", [BUMP])
    assert alone["nodes"] == ["gpu01", "gpu02", "gpu03", "gpu04"] and len(alone["keys"]) == 8
    assert {(c["key"], c["first_step"]) for c in alone["keys"]} == {(KEYS[0], 3), (KEYS[1], 4)}
    assert f"incident 1 (tonight): numerics changed, no slowdown: {BUMP} since the baseline: 2 keys, 4 nodes" in text
    assert f"{KEYS[0]} on gpu01: changed from step 3 (2.1%)" in text
    assert "1 incident of numerics alone" in text


def test_a_numerics_change_joins_the_incident_of_its_slowdown(capsys, past, tmp_path):
    """Tonight torch 2.13.0 slows key 0 by 30% on every node (the gate failed it) and changes its
    losses: one incident, with its numerics."""
    rc, report, text = triage(
        capsys,
        past,
        tmp_path,
        factor=lambda node, key, night: 0.7 if night == TONIGHT and key == 0 else 1.0,
        failing=lambda node, key, night: night == TONIGHT and key == 0,
        env=lambda node, night: {"frameworks": {"torch": "2.13.0", "tf": "2.21.0"}} if night == TONIGHT else {},
        numerics=lambda node, key, night: changed() if night == TONIGHT and key == 0 else {},
    )
    (incident,) = report["incidents"]
    assert rc == 3 and report["numerics"] == []
    assert {c["node"] for c in incident["numerics"]} == {"gpu01", "gpu02", "gpu03", "gpu04"}
    assert "  numerics: losses not the golden ones in 4 bursts: " in text


def test_a_drift_the_configuration_cannot_help_is_no_incident(capsys, past, tmp_path):
    note = "not deterministic here (NCCL picks its reduction algorithm itself): only the tolerance applies"
    _, report, _ = triage(
        capsys,
        past,
        tmp_path,
        numerics=lambda node, key, night: changed(diff=1e-4, note=note, outcome="drifted") if night == TONIGHT else {},
    )
    assert report["numerics"] == [] and report["incidents"] == []


def test_history_trend_shows_each_runs_numerics(capsys, tmp_path):
    url = f"sqlite:///{tmp_path / 'history.db'}"
    th.build(
        url,
        nights=5,
        nodes=1,
        numerics=lambda node, key, night: changed() if night == 4 else {"numerics": "same"} if night else {},
    )
    assert main(["history", "trend", KEYS[0], "--history", url]) == 0
    text = capsys.readouterr().out
    lines = [line for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert "numerics" in text and len(lines) == 5
    assert lines[0].split()[-1] == "-" and lines[1].split()[-1] == "same" and "changed from step 3" in lines[-1]
    assert main(["history", "trend", KEYS[0], "--history", url, "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["numerics"] for r in runs] == [None, "same", "same", "same", "changed from step 3"]


def test_the_site_shows_a_numerics_change_on_its_front_page(capsys, past, tmp_path):
    url = history_with(past, tmp_path, numerics=lambda node, key, night: changed() if night == TONIGHT else {})
    assert main(["history", "site", str(tmp_path / "site"), "--history", url, "--at", th.at(NIGHTS)]) == 0
    capsys.readouterr()
    front = (tmp_path / "site" / "index.html").read_text()
    assert "Numerics changed tonight, no slowdown (1)" in front
    assert escape(f"numerics changed, no slowdown: {BUMP} since the baseline: 4 keys, 4 nodes") in front
