"""The numerics gate through the plugin, its bursts faked (their losses and framework version set by
the environment): what a saved entry keeps, and what same, drifted and changed do to a test, its
row, its JUnit properties and the table, whatever the throughput does."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from suite_files import FAKE_ARGS, faked_project

pytest_plugins = ["pytester"]

GOLDEN = [2.0 - 0.1 * i for i in range(10)]  # what the fake bursts report by default


@pytest.fixture
def saved(pytester, monkeypatch):
    """A project whose baseline holds the faked burst's golden losses, under torch "1.0"."""
    for name in ("PERFSUITE_FAKE_LOSSES", "PERFSUITE_FAKE_RATE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PERFSUITE_FAKE_VERSION", "1.0")
    project = faked_project(pytester)
    project.runpytest_inprocess(*FAKE_ARGS, "--perf-save-baseline").assert_outcomes(passed=1)
    return project


def gate(project, *args, losses=None, version="1.0", monkeypatch=None):
    if losses is not None:
        monkeypatch.setenv("PERFSUITE_FAKE_LOSSES", ",".join(repr(x) for x in losses))
    monkeypatch.setenv("PERFSUITE_FAKE_VERSION", version)
    result = project.runpytest_inprocess(*FAKE_ARGS, "--perf-json", "out.json", "--junitxml", "junit.xml", *args)
    (row,) = json.loads((project.path / "out.json").read_text())["results"]
    return result, row


def entry(project) -> dict:
    (path,) = (project.path / "baselines").glob("*.json")
    (found,) = json.loads(path.read_text())["entries"].values()
    return found


def properties(project) -> dict:
    tree = ET.parse(project.path / "junit.xml")
    return {p.get("name"): p.get("value") for p in tree.iter("property")}


def test_a_saved_entry_keeps_the_golden_losses_and_what_they_depend_on(saved):
    kept = entry(saved)["numerics"]
    assert kept["losses"] == pytest.approx(GOLDEN, rel=0, abs=0) and kept["steps"] == 10
    assert kept["depends"]["torch"] == "1.0" and kept["depends"]["deterministic settings"] == "fake"
    assert kept["note"] is None


def test_an_unchanged_rerun_is_same_and_says_nothing(saved, monkeypatch):
    result, row = gate(saved, monkeypatch=monkeypatch)
    result.assert_outcomes(passed=1)
    assert "numerics" not in result.stdout.str().split("perfsuite ===")[0]  # no warning line
    assert (row["numerics"], row["numerics_first_step"], row["numerics_max_rel_diff"]) == ("same", None, 0.0)
    assert row["numerics_note"] is None and row["numerics_losses"] == GOLDEN
    assert properties(saved)["numerics"] == "same"


CHANGED = GOLDEN[:2] + [x * 1.1 for x in GOLDEN[2:]]  # 10% from step 3 on


@pytest.mark.parametrize("policy, outcome", [("warn", {"passed": 1}), ("fail", {"failed": 1})])
def test_a_change_warns_or_fails_with_what_changed_and_the_throughput_stands(saved, monkeypatch, policy, outcome):
    result, row = gate(saved, "--perf-numerics", policy, losses=CHANGED, version="1.1", monkeypatch=monkeypatch)
    result.assert_outcomes(**outcome)
    out = result.stdout.str()
    assert (
        "numerics changed: cifar10's loss differs from step 3, at most 10.0% (beyond the 5% tolerance); "
        "torch 1.0 -> 1.1 since the baseline" in out
    )
    assert "NUMERICS CHANGED at step 3" in out  # the table
    assert row["verdict"] == "pass"  # the throughput's verdict, whatever the numerics
    assert (row["numerics"], row["numerics_first_step"]) == ("changed", 3)
    assert row["numerics_max_rel_diff"] == pytest.approx(0.1)
    assert row["numerics_changes"] == ["torch 1.0 -> 1.1"]
    props = properties(saved)
    assert (props["numerics"], props["numerics_first_step"], props["verdict"]) == ("changed", "3", "pass")


def test_a_drift_within_the_tolerance_warns_and_never_fails(saved, monkeypatch):
    drifted = [x * (1 + 1e-6) for x in GOLDEN]
    result, row = gate(saved, "--perf-numerics", "fail", losses=drifted, monkeypatch=monkeypatch)
    result.assert_outcomes(passed=1)
    assert "numerics drifted: cifar10's loss differs from step 1" in result.stdout.str()
    assert row["numerics"] == "drifted"


def test_a_throughput_regression_leaves_the_numerics_alone(saved, monkeypatch):
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "40")
    result, row = gate(saved, monkeypatch=monkeypatch)
    result.assert_outcomes(failed=1)
    assert row["verdict"] == "regression" and row["numerics"] == "same"


def test_a_tighter_tolerance_turns_a_drift_into_a_change(saved, monkeypatch):
    drifted = [x * 1.01 for x in GOLDEN]
    _, row = gate(saved, "--perf-numerics-tolerance", "0.001", losses=drifted, monkeypatch=monkeypatch)
    assert row["numerics"] == "changed"


def test_off_runs_no_stretch_and_a_save_keeps_the_golden_losses(saved, monkeypatch):
    result, row = gate(saved, "--perf-numerics", "off", losses=CHANGED, monkeypatch=monkeypatch)
    result.assert_outcomes(passed=1)
    assert row["numerics"] is None and row["numerics_note"] == "no numerics stretch ran (--perf-numerics off)"
    saved.runpytest_inprocess(*FAKE_ARGS, "--perf-save-baseline", "--perf-numerics", "off").assert_outcomes(passed=1)
    assert entry(saved)["numerics"]["losses"] == GOLDEN


def test_a_save_over_changed_golden_losses_warns_and_replaces_them(saved, monkeypatch):
    result, _ = gate(saved, "--perf-save-baseline", losses=CHANGED, version="1.1", monkeypatch=monkeypatch)
    result.assert_outcomes(passed=1)
    assert "numerics changed: cifar10's loss differs from step 3" in result.stdout.str()
    kept = entry(saved)["numerics"]
    assert kept["losses"] == pytest.approx(CHANGED) and kept["depends"]["torch"] == "1.1"


def test_an_entry_saved_before_golden_losses_says_so(saved, monkeypatch):
    (path,) = (saved.path / "baselines").glob("*.json")
    data = json.loads(path.read_text())
    for found in data["entries"].values():
        del found["numerics"]
    path.write_text(json.dumps(data))
    result, row = gate(saved, monkeypatch=monkeypatch)
    result.assert_outcomes(passed=1)
    assert row["numerics"] is None and "refresh it with --perf-save-baseline" in row["numerics_note"]


def test_the_report_shows_a_change_in_its_table_and_on_top(saved, monkeypatch):
    gate(saved, "--perf-report", "rep", losses=CHANGED, version="1.1", monkeypatch=monkeypatch)
    report = (saved.path / "rep" / "report.md").read_text()
    assert "CHANGED from step 3 (10.0%)" in report  # the table's numerics column
    assert "**NUMERICS CHANGED** torch cifar10" in report and "torch 1.0" in report  # the callout on top
