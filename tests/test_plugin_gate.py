"""The gate end to end: real (tiny) torch bursts, baselines, verdicts, summary, JSON.

The tiny model's step is a 20 ms sleep, so its timings barely move on a busy machine;
where a count could still change (a rerun, a longer burst), the test reads it from the
record instead of assuming it. One baseline, saved once per run (conftest.saved_tiny), is
shared by the tests that gate against it.
"""

import json
import re
import xml.etree.ElementTree as ET

import pytest
from suite_files import FAKE_ARGS, FAST, SUITE, TINY, TINY_STEP_MS, faked_project

from perfsuite.common.hardware import cpu_fingerprint
from perfsuite.store import baseline

pytest_plugins = ["pytester"]


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", TINY_STEP_MS)
    for name in ("PERFSUITE_TINY_SLOWDOWN", "PERFSUITE_TINY_JITTER", "PERFSUITE_TINY_CRASH", "PERFSUITE_TINY_NAN"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(TINY)
    pytester.makepyfile(test_suite=SUITE)
    pytester.mkdir("baselines")
    return pytester


@pytest.fixture
def faked(pytester):
    return faked_project(pytester)


def run(pytester, *args):
    return pytester.runpytest_inprocess(*FAST, *args)


def baseline_files(pytester):
    return sorted((pytester.path / "baselines").glob("*.json"))


# -- policies without a baseline (decisions only: bursts faked) ----------------------------

FAKE = FAKE_ARGS


def test_missing_baseline_skips_by_default_with_advice(faked):
    result = faked.runpytest_inprocess(*FAKE, "-rs")
    result.assert_outcomes(skipped=1)
    assert result.ret == pytest.ExitCode.OK  # measured, nothing to compare: not a failure
    assert "run with --perf-save-baseline" in result.stdout.str()
    assert "no baseline" in result.stdout.str()  # the summary still shows the measurement


@pytest.mark.parametrize("policy, outcome", [("fail", {"failed": 1}), ("pass", {"passed": 1})])
def test_missing_baseline_policies(faked, policy, outcome):
    faked.runpytest_inprocess(*FAKE, "--perf-missing-baseline", policy).assert_outcomes(**outcome)


# -- against the shared saved baseline ---------------------------------------------------------


@pytest.mark.xdist_group("saved_tiny")  # the worker that saved the baseline gates against it
def test_a_save_run_pools_its_bursts_into_each_entry(saved_tiny):
    (path,) = (saved_tiny / "baselines").glob("*.json")
    assert path.name.startswith("cpu-")
    data = json.loads(path.read_text())
    assert data["schema"] == 1 and data["fingerprint"]["kind"] == "cpu"
    assert data["frameworks"]["torch"]
    assert len(data["entries"]) == 2  # the 1- and 2-worker bursts
    records = {r["key"]: r for r in json.loads((saved_tiny / "saved.json").read_text())["results"]}
    for key, entry in data["entries"].items():
        for field in ("images_per_sec", "ci_low", "ci_high", "samples", "date"):
            assert entry[field] is not None, field
        record = records[key]
        assert record["saved"] is True
        assert entry["runs"] == record["runs"] == len(entry["run_medians"]) == 1  # --perf-baseline-runs 1
        assert len(entry["samples"]) == sum(record["windows_run"])
    two = next(v for k, v in data["entries"].items() if "/cpu2/" in k)
    assert two["scaling_efficiency"] is not None and len(two["scaling_efficiency_runs"]) == 1
    assert "saved 2 baseline entries" in (saved_tiny / "save.out").read_text()


def test_a_save_pools_baseline_runs_bursts_into_each_entry(faked):
    saved = faked.runpytest_inprocess(
        *FAKE, "--perf-cpu-workers", "2", "--perf-save-baseline", "--perf-baseline-runs", "3"
    )
    saved.assert_outcomes(passed=3)
    assert "saved (3 runs)" in saved.stdout.str()
    (path,) = baseline_files(faked)
    entries = json.loads(path.read_text())["entries"]
    assert len(entries) == 2 and len(faked.path.joinpath("bursts.log").read_text().split()) == 2 * 3
    for entry in entries.values():
        assert entry["runs"] == len(entry["run_medians"]) == 3 and len(entry["samples"]) == 3 * 5
    two = next(v for k, v in entries.items() if "/cpu2/" in k)
    assert two["scaling_efficiency"] == 1.0 and two["scaling_efficiency_runs"] == [1.0, 1.0, 1.0]


def test_a_scaling_floor_fails_the_scaling_test_alone(faked):
    faked.runpytest_inprocess(*FAKE, "--perf-cpu-workers", "2", "--perf-save-baseline").assert_outcomes(passed=3)
    # An absolute floor no 2-device run can reach (the fake bursts scale perfectly).
    result = faked.runpytest_inprocess(*FAKE, "--perf-cpu-workers", "2", "--perf-min-scaling-efficiency", "1.9")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "scaling regression" in out and "floor 190%" in out


def test_a_slowdown_fails_as_a_confirmed_regression(faked, monkeypatch):
    faked.runpytest_inprocess(*FAKE, "--perf-save-baseline").assert_outcomes(passed=1)
    (path,) = baseline_files(faked)
    before = path.read_bytes()
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "50")
    slow = faked.runpytest_inprocess(*FAKE, "--perf-tolerance", "0.3", "--perf-json", "r.json")
    slow.assert_outcomes(failed=1)
    out = slow.stdout.str()
    (record,) = json.loads((faked.path / "r.json").read_text())["results"]
    assert record["verdict"] == "regression" and record["runs"] == 2  # confirmed by a fresh burst
    assert faked.path.joinpath("bursts.log").read_text().count("\n") == 3 + 2  # the save's 3, this run's 2
    line = next(x for x in out.splitlines() if "regression: torch cifar10 on 1 CPU worker" in x)
    for word in (
        "50 img/s vs baseline 100 img/s",
        "data location device",
        "-50.0%, tolerance 30%",
        "2 bursts",
        f"baselines/{path.name}",
    ):
        assert word in line, (word, line)
    assert "Traceback" not in out
    assert "REGRESSION" in out  # the summary table
    assert path.read_bytes() == before  # the failed gate left the baseline alone


# -- baseline files that cannot be used (no burst needed) ----------------------------------------


def _saved_file(pytester):
    """A valid baseline file for this machine, written by the store itself."""
    path = baseline.baseline_path(pytester.path / "baselines", cpu_fingerprint())
    baseline.save_entries(
        path,
        cpu_fingerprint(),
        {"torch/tiny/cpu1/nodes1/device/bs8/img8/fp32/threads1": {"images_per_sec": 100.0, "samples": [100.0] * 5}},
        {"torch": "2.13.0"},
    )
    return path


def test_corrupt_baseline_is_a_usage_error_and_is_never_overwritten(suite):
    path = _saved_file(suite)
    path.write_bytes(b'{"schema": 1, "entries": {tru')
    before = path.read_bytes()
    for extra in ([], ["--perf-save-baseline"]):
        result = run(suite, "--perf-cpu-workers", "1", *extra)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        errors = [x for x in result.stderr.lines if x.startswith("ERROR:")]
        assert len(errors) == 1 and path.name in errors[0]
        assert path.read_bytes() == before


def test_wrong_schema_is_named(suite):
    path = _saved_file(suite)
    data = json.loads(path.read_text())
    data["schema"] = 99
    path.write_text(json.dumps(data))
    result = run(suite, "--perf-cpu-workers", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "schema 99" in result.stderr.str()


# -- bursts that produce no measurement -----------------------------------------------------------


def test_crash_fails_that_test_as_an_error_not_a_regression_and_the_session_goes_on(suite, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_CRASH", "1")
    result = run(suite, "--perf-missing-baseline", "pass", "--perf-save-baseline", "--junitxml", "junit.xml")
    result.assert_outcomes(failed=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "burst failed (torch tiny on 1 CPU worker" in out
    assert "RuntimeError: tiny model refused to build" in out
    assert "burst failed (torch tiny on 2 CPU workers" in out
    assert "regression:" not in out and "REGRESSION" not in out
    assert not baseline_files(suite)  # nothing clean to save
    case = next(
        c
        for c in ET.parse(suite.path / "junit.xml").getroot().iter("testcase")
        if "test_throughput[torch-tiny-cpu1" in c.get("name")
    )
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["verdict"] == "error" and "tiny model refused to build" in props["burst_error"]


def test_non_finite_loss_fails(suite, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_NAN", "1")
    result = run(suite, "--perf-cpu-workers", "1", "--perf-missing-baseline", "pass")
    result.assert_outcomes(failed=1)
    assert "loss is not finite" in result.stdout.str()


def test_timeout_fails_within_bound(suite, monkeypatch):
    # A step longer than the bound, and the bound 2 s: every second of it is waited out.
    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "3000")
    result = run(suite, "--perf-cpu-workers", "1", "--perf-burst-timeout", "2")
    result.assert_outcomes(failed=1)
    assert "burst timed out after 2 s" in result.stdout.str()


@pytest.mark.xdist_group("saved_tiny")  # the worker that saved the baseline gates against it
def test_perf_json_records(saved_tiny):
    """--perf-json of the shared save run (conftest.saved_tiny): every field, for 1 and 2 workers."""
    records = json.loads((saved_tiny / "saved.json").read_text())["results"]
    assert len(records) == 2
    fields = (
        "framework",
        "model",
        "devices",
        "nodes",
        "data_location",
        "batch_size",
        "image_size",
        "precision",
        "variable_update",
        "images_per_sec",
        "ci_low",
        "ci_high",
        "samples",
        "scaling_efficiency",
        "loss_first",
        "loss_last",
        "verdict",
        "baseline_images_per_sec",
        "windows_run",
        "runs",
        "saved",
    )
    for rec in records:
        for field in fields:
            assert field in rec, field
        assert rec["ci_low"] <= rec["images_per_sec"] <= rec["ci_high"]
        assert rec["verdict"] == "no baseline" and rec["saved"] is True
        assert len(rec["samples"]) == sum(rec["windows_run"])
    by_devices = {r["devices"]: r for r in records}
    assert by_devices[1]["scaling_efficiency"] is None
    assert by_devices[2]["scaling_efficiency"] > 0
    assert len(by_devices[2]["per_rank"]) == 2
    # Both forked from one warm start (--perf-start warm, the default): torch's agent forks the 2 ranks.
    assert [r["start"] for r in records] == ["warm", "warm"]
    # the summary table
    out = (saved_tiny / "save.out").read_text()
    assert "; 2 of 2 warm-started" in out
    assert re.search(r"test.*img/s.*95% CI.*baseline.*change.*scaling eff.*verdict", out)
    assert re.search(r"test_throughput\[torch-tiny-cpu1-device\] .* saved\s*$", out, re.M)  # the verdict column
