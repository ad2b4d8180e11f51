"""Two ways the gate once passed or failed a case for the wrong reason, each through the plugin:
a scaling entry saved without an efficiency, and a confirming burst that measured nothing."""

import json
import xml.etree.ElementTree as ET

import pytest
from suite_files import FAKE_ARGS, FAKE_BURSTS, faked_project

pytest_plugins = ["pytester"]

TWO = [*FAKE_ARGS, "--perf-cpu-workers", "2"]  # the 1- and 2-worker bursts

# After the conftest's launcher: with $PERFSUITE_FAKE_RERUN_CRASH set, every burst of a key after
# its first fails as a crashed worker does.
RERUN_CRASH = """
_first_burst, _bursts = fake_run_burst, {}

def fake_run_burst(spec, *args, **kwargs):
    if os.environ.get("PERFSUITE_FAKE_RERUN_CRASH"):
        _bursts[spec.key()] = _bursts.get(spec.key(), 0) + 1
        if _bursts[spec.key()] > 1:
            from perfsuite.plugin.launch import BurstError
            raise BurstError("rank 0: " + os.environ["PERFSUITE_FAKE_RERUN_CRASH"])
    return _first_burst(spec, *args, **kwargs)
"""


@pytest.fixture
def faked(pytester):
    return faked_project(pytester)


def _without_efficiency(project) -> str:
    """Save both bursts, then make the 2-worker entry one saved without its scaling test; its key."""
    project.runpytest_inprocess(*TWO, "--perf-save-baseline").assert_outcomes(passed=3)
    (path,) = (project.path / "baselines").glob("*.json")
    data = json.loads(path.read_text())
    key = next(k for k in data["entries"] if "/cpu2/" in k)
    data["entries"][key].update(scaling_efficiency=None, scaling_ci=None, scaling_efficiency_runs=[])
    path.write_text(json.dumps(data))
    return key


@pytest.mark.parametrize(
    "policy, outcome", [("skip", {"skipped": 1}), ("fail", {"failed": 1}), ("pass", {"passed": 1})]
)
def test_a_scaling_entry_without_an_efficiency_is_a_missing_baseline(faked, policy, outcome):
    key = _without_efficiency(faked)
    result = faked.runpytest_inprocess(*TWO, "-k", "scaling", "-rs", "--perf-missing-baseline", policy)
    result.assert_outcomes(**outcome)
    out = result.stdout.str()
    if policy != "pass":  # a passing case prints no line
        assert f"no scaling efficiency baseline for {key}" in out
        assert "--perf-save-baseline" in out


def test_a_scaling_entry_without_an_efficiency_is_still_gated_by_the_floor(faked):
    _without_efficiency(faked)
    result = faked.runpytest_inprocess(
        *TWO, "-k", "scaling", "--perf-missing-baseline", "fail", "--perf-min-scaling-efficiency", "0.5"
    )
    result.assert_outcomes(passed=1)  # the floor is what it is compared with: nothing is missing


def test_a_confirming_burst_that_fails_is_shown_and_confirms_nothing(faked, monkeypatch):
    faked.makeconftest(FAKE_BURSTS + RERUN_CRASH)
    faked.runpytest_inprocess(*FAKE_ARGS, "--perf-save-baseline").assert_outcomes(passed=1)
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "50")
    monkeypatch.setenv("PERFSUITE_FAKE_RERUN_CRASH", "RuntimeError: out of memory in the rerun")
    result = faked.runpytest_inprocess(
        *FAKE_ARGS, "--perf-tolerance", "0.3", "--perf-json", "r.json", "--junitxml", "junit.xml"
    )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    failing = next(x for x in out.splitlines() if "confirming burst failed" in x)
    assert "torch cifar10 on 1 CPU worker" in failing and "out of memory in the rerun" in failing
    assert "regression:" not in out and "REGRESSION" not in out  # no regression is claimed
    assert "its confirming burst failed" in out
    (row,) = json.loads((faked.path / "r.json").read_text())["results"]
    assert row["verdict"] == "inconclusive" and row["runs"] == 1
    assert "out of memory in the rerun" in row["error"]
    case = next(ET.parse(faked.path / "junit.xml").getroot().iter("testcase"))
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["verdict"] == "inconclusive" and "out of memory in the rerun" in props["burst_error"]
    # The results file, imported into a history, is a failed run as the live one was.
    from perfsuite.history import document

    assert document.from_file(faked.path / "r.json")["outcome"] == "failed"
