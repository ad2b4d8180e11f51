"""The gate end to end: real (tiny) torch bursts, baselines, verdicts, summary, JSON."""

import json

import pytest

pytest.importorskip("torch")

from suite_files import SUITE, TINY  # noqa: E402

pytest_plugins = ["pytester"]

FAST = ["--framework", "torch", "--model", "tiny", "-m", "cpu", "--steps", "10", "--windows", "5",
        "--warmup-steps", "1", "--max-windows", "5", "-p", "no:cacheprovider"]


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "20")
    monkeypatch.delenv("PERFSUITE_TINY_SLOWDOWN", raising=False)
    pytester.makeconftest(TINY)
    pytester.makepyfile(test_suite=SUITE)
    pytester.mkdir("baselines")
    return pytester


def run(pytester, *args):
    return pytester.runpytest_subprocess(*FAST, *args)


def baseline_files(pytester):
    return sorted((pytester.path / "baselines").glob("*.json"))


def test_missing_baseline_skips_by_default_with_advice(suite):
    result = run(suite, "--cpu-workers", "1", "-rs")
    result.assert_outcomes(skipped=1)
    assert "run with --save-baseline" in result.stdout.str()
    assert "no baseline" in result.stdout.str()  # the summary still shows the measurement


@pytest.mark.parametrize("policy, outcome", [("fail", {"failed": 1}), ("pass", {"passed": 1})])
def test_missing_baseline_policies(suite, policy, outcome):
    run(suite, "--cpu-workers", "1", "--missing-baseline", policy).assert_outcomes(**outcome)


def test_save_then_identical_runs_pass_and_slowdown_fails(suite, monkeypatch):
    saved = run(suite, "--save-baseline", "--perf-json", "first.json")
    saved.assert_outcomes(passed=3)
    files = baseline_files(suite)
    assert len(files) == 1 and files[0].name.startswith("cpu-")
    data = json.loads(files[0].read_text())
    assert data["schema"] == 1 and data["fingerprint"]["kind"] == "cpu"
    assert data["frameworks"]["torch"]
    assert len(data["entries"]) == 2  # the 1- and 2-worker bursts
    two = next(v for k, v in data["entries"].items() if "/cpu2/" in k)
    for field in ("images_per_sec", "ci_low", "ci_high", "samples", "scaling_efficiency", "date"):
        assert two[field] is not None, field
    assert len(two["samples"]) == 15 and len(two["run_medians"]) == 3  # --baseline-runs 3 pooled
    assert len(two["scaling_efficiency_runs"]) == 3
    assert "saved 2 baseline entries" in saved.stdout.str()

    # A sleep-dominated step keeps timings steady even on a busy machine; the wide
    # tolerance keeps this test about the plumbing (the fidelity benchmark measures noise).
    for _ in range(2):
        run(suite, "--perf-tolerance", "0.3", "--scaling-tolerance", "0.3").assert_outcomes(passed=3)

    monkeypatch.setenv("PERFSUITE_TINY_SLOWDOWN", "2")
    slow = run(suite, "-k", "throughput and cpu1", "--perf-tolerance", "0.3")
    slow.assert_outcomes(failed=1)
    out = slow.stdout.str()
    line = next(x for x in out.splitlines() if "regression: torch tiny on 1 CPU worker" in x)
    for word in ("img/s vs baseline", "data location device", "%, tolerance 30%", "2 bursts", str(files[0].name)):
        assert word in line, (word, line)
    assert "Traceback" not in out
    assert "REGRESSION" in out  # the summary table
    # the failed gate left the baseline alone
    assert json.loads(files[0].read_text()) == data


def test_tolerance_marker_and_scaling_floor(suite, pytester):
    run(suite, "--save-baseline").assert_outcomes(passed=3)
    # an absolute floor no 2-worker run can reach fails the scaling test alone
    result = run(suite, "--min-scaling-efficiency", "1.9")
    result.assert_outcomes(passed=2, failed=1)
    assert "scaling regression" in result.stdout.str() and "floor 190%" in result.stdout.str()


def test_corrupt_baseline_is_a_usage_error_and_is_never_overwritten(suite):
    run(suite, "--cpu-workers", "1", "--save-baseline").assert_outcomes(passed=1)
    path = baseline_files(suite)[0]
    path.write_bytes(b'{"schema": 1, "entries": {tru')
    before = path.read_bytes()
    for extra in ([], ["--save-baseline"]):
        result = run(suite, "--cpu-workers", "1", *extra)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        errors = [x for x in result.stderr.lines if x.startswith("ERROR:")]
        assert len(errors) == 1 and path.name in errors[0]
        assert path.read_bytes() == before


def test_wrong_schema_is_named(suite):
    run(suite, "--cpu-workers", "1", "--save-baseline")
    path = baseline_files(suite)[0]
    data = json.loads(path.read_text())
    data["schema"] = 99
    path.write_text(json.dumps(data))
    result = run(suite, "--cpu-workers", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "schema 99" in result.stderr.str()


def test_crash_fails_that_test_and_the_session_goes_on(suite, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_CRASH", "1")
    result = run(suite, "--missing-baseline", "pass", "--save-baseline")
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    assert "burst failed (torch tiny on 1 CPU worker" in out
    assert "RuntimeError: tiny model refused to build" in out
    assert "burst failed (torch tiny on 2 CPU workers" in out
    assert not baseline_files(suite)  # nothing clean to save


def test_non_finite_loss_fails(suite, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_NAN", "1")
    result = run(suite, "--cpu-workers", "1", "--missing-baseline", "pass")
    result.assert_outcomes(failed=1)
    assert "loss is not finite" in result.stdout.str()


def test_timeout_fails_within_bound(suite, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "3000")
    result = run(suite, "--cpu-workers", "1", "--burst-timeout", "4")
    result.assert_outcomes(failed=1)
    assert "burst timed out after 4 s" in result.stdout.str()


def test_perf_json_records(suite):
    result = run(suite, "--perf-json", "out/results.json", "--missing-baseline", "pass")
    result.assert_outcomes(passed=3)
    records = json.loads((suite.path / "out" / "results.json").read_text())["results"]
    assert len(records) == 2
    fields = ("framework", "model", "devices", "nodes", "data_location", "batch_size", "image_size", "precision",
              "variable_update", "images_per_sec", "ci_low", "ci_high", "samples", "scaling_efficiency",
              "loss_first", "loss_last", "verdict", "baseline_images_per_sec")
    for rec in records:
        for field in fields:
            assert field in rec, field
        assert rec["ci_low"] <= rec["images_per_sec"] <= rec["ci_high"]
        assert rec["verdict"] == "no baseline"
    by_devices = {r["devices"]: r for r in records}
    assert by_devices[1]["scaling_efficiency"] is None
    assert by_devices[2]["scaling_efficiency"] > 0.3
    assert len(by_devices[2]["per_rank"]) == 2
    # the summary table
    result.stdout.fnmatch_lines(["*test*img/s*95% CI*baseline*change*scaling eff*verdict*"])
