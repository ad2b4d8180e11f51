"""Attribution and peak memory end to end, in both frameworks, through register_model.

A baseline is saved with tests/attribution_models.py's model as it is; then the model
runs an extra 1024x1024 matrix multiply per forward pass (the gate fails and names a
matmul op as the top mover), or keeps an extra 512 MiB tensor alive (the gate fails on
memory, not on throughput). Both changes are many times any noise of a shared machine:
the matmul costs tens of milliseconds a step against a step of a few.
"""

import gzip
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from suite_files import copy_baselines, needs

from perfsuite.analysis.attribution import MIN_EXPLAINED

MODELS = (Path(__file__).parent / "attribution_models.py").read_text()
THROUGHPUT = "from perfsuite.suite.test_throughput import test_throughput\n"
ARGS = [
    "--perf-model",
    "opmix",
    "-m",
    "cpu",
    "--perf-cpu-workers",
    "1",
    "--perf-threads-per-worker",
    "1",
    "--perf-steps",
    "10",
    "--perf-windows",
    "5",
    "--perf-warmup-steps",
    "2",
    "--perf-max-windows",
    "5",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:benchmark",
]
FRAMEWORKS = [pytest.param("torch", marks=needs("torch")), pytest.param("tf", marks=needs("tensorflow"))]
CHANGES = ("PERFSUITE_EXTRA_MATMUL", "PERFSUITE_EXTRA_MEMORY_MB")  # what the model does more of
# The tests share each framework's saved baseline (_saved_projects): one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("attribution")


def junit_properties(path: Path) -> dict[str, str]:
    (case,) = ET.parse(path).getroot().iter("testcase")
    return {p.get("name"): p.get("value") for p in case.iter("property")}


@pytest.fixture(scope="module")
def _saved_projects(tmp_path_factory):
    """One saved baseline per framework for the whole module (each save is a profiled burst
    and a framework import): framework -> the project folder it was saved in."""
    projects: dict[str, Path] = {}

    def project(framework: str) -> Path:
        if framework not in projects:
            folder = tmp_path_factory.mktemp(f"attribution-{framework}")
            (folder / "conftest.py").write_text(MODELS)
            (folder / "test_suite.py").write_text(THROUGHPUT)
            env = {k: v for k, v in os.environ.items() if k not in CHANGES}
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    *ARGS,
                    "--perf-framework",
                    framework,
                    "--perf-save-baseline",
                    "--perf-baseline-runs",
                    "1",
                    "--perf-json",
                    "saved.json",
                ],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
            )
            assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
            projects[framework] = folder
        return projects[framework]

    return project


@pytest.fixture
def saved(pytester, monkeypatch, _saved_projects):
    """The model's baseline, saved with its op profile and peak memory, copied into this test's
    project (saved.json beside it)."""
    for name in CHANGES:
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(MODELS)
    pytester.makepyfile(test_suite=THROUGHPUT)

    def save(framework: str) -> dict:
        folder = _saved_projects(framework)
        path = copy_baselines(folder, pytester.path)
        shutil.copy(folder / "saved.json", pytester.path / "saved.json")
        (entry,) = json.loads(path.read_text())["entries"].values()
        return entry

    return save


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_extra_matmul_fails_the_gate_and_is_the_top_mover(pytester, saved, monkeypatch, framework):
    entry = saved(framework)
    profile = entry["op_profile"]
    assert profile["tool"] == ("torch.profiler" if framework == "torch" else "tensorflow.profiler")
    assert len(profile["step_ms"]) == 3 and profile["ops"]  # --perf-profile-steps' default
    (row,) = json.loads((pytester.path / "saved.json").read_text())["results"]
    assert row["profile_seconds"] > 0 and row["profile_error"] is None

    monkeypatch.setenv("PERFSUITE_EXTRA_MATMUL", "1024")
    result = pytester.runpytest_inprocess(
        *ARGS,
        "--perf-framework",
        framework,
        "--perf-report",
        "report",
        "--perf-json",
        "gated.json",
        "--junitxml",
        "junit.xml",
    )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    (row,) = json.loads((pytester.path / "gated.json").read_text())["results"]
    assert row["verdict"] == "regression" and row["runs"] == 2
    found, props = row["attribution"], junit_properties(pytester.path / "junit.xml")
    # The multiply, or, where a busy host's steps slowed beyond what the profiled ops show,
    # that it cannot be attributed: never another op named as the cause.
    if found["status"] == "unattributable":
        assert "regression: " in out and "cannot attribute (step " in out and not found["movers"]
        assert props["attribution"] == "unattributable" and "top_mover_family" not in props
    else:
        assert "regression: " in out and "attribution (step " in out
        top = found["movers"][0]
        assert top["family"] == "matmul", row["attribution_lines"]
        assert sum(m["share"] for m in found["movers"]) >= MIN_EXPLAINED  # most of the slowdown
        assert props["top_mover_family"] == "matmul" and props["attribution"] == "attributed"
    # The confirming rerun's profiled steps, as Chrome trace JSON in the report folder.
    (trace,) = (pytester.path / "report" / "traces").glob("*.json.gz")
    assert f"trace: report/traces/{trace.name}" in out
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert any("mm" in str(e.get("name", "")).lower() or "matmul" in str(e.get("name", "")).lower() for e in events)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_extra_tensor_fails_as_a_memory_regression_not_a_throughput_one(pytester, saved, monkeypatch, framework):
    entry = saved(framework)
    assert entry["peak_memory_bytes"] > 0 and entry["peak_memory_runs"] == [entry["peak_memory_bytes"]]

    monkeypatch.setenv("PERFSUITE_EXTRA_MEMORY_MB", "512")
    # A throughput tolerance no load reaches (a hundredfold slowdown): this test is about memory.
    result = pytester.runpytest_inprocess(
        *ARGS,
        "--perf-framework",
        framework,
        "--perf-tolerance",
        "0.99",
        "--perf-json",
        "gated.json",
        "--junitxml",
        "junit.xml",
    )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "memory regression: " in out and "vs baseline " in out
    assert "\nregression: " not in out.replace("E       ", "\n")
    (row,) = json.loads((pytester.path / "gated.json").read_text())["results"]
    assert row["memory_verdict"] == "regression" and row["verdict"] != "regression"
    assert row["memory_change"] > 0.5 and len(row["peak_memory_runs"]) == 2  # confirmed on a rerun
    props = junit_properties(pytester.path / "junit.xml")
    assert props["memory_verdict"] == "regression"
    assert int(props["peak_memory_bytes"]) > int(props["baseline_peak_memory_bytes"]) + 400 * 2**20


# How each attribution status opens its lines. A burst that did not regress may still have
# slowed (a busy host slows every step, 1.6 -> 6.0 ms has been seen): whichever status its
# profiles gave is an honest one, and its lines must open as that status's do.
FIRST_LINES = {
    "attributed": "attribution (step ",
    "uniform": "attribution (step ",
    "inconclusive": "attribution inconclusive (step ",
    "unattributable": "cannot attribute (step ",
}


@needs("torch")
def test_profile_attributes_a_burst_that_did_not_regress(pytester, saved):
    saved("torch")
    # A throughput tolerance no load reaches (a hundredfold slowdown): the verdict is not the point.
    result = pytester.runpytest_inprocess(
        *ARGS, "--perf-framework", "torch", "--perf-profile", "--perf-tolerance", "0.99", "--perf-report", "report"
    )
    result.assert_outcomes(passed=1)
    (row,) = json.loads((pytester.path / "report" / "results.json").read_text())["results"]
    # Profiled without a confirming rerun, and compared with the baseline entry's profile.
    assert row["runs"] == 1 and row["op_profile"]["ops"] and row["profile_error"] is None
    found, lines = row["attribution"], row["attribution_lines"]
    assert found["base_step_ms"] > 0 and found["now_step_ms"] > 0, found
    assert lines[0].startswith(FIRST_LINES[found["status"]]), lines
    if found["status"] == "unattributable":  # withdrawn, with the reason in its line
        assert found["reason"] and found["reason"] in lines[0] and not found["movers"], found
    assert len(list((pytester.path / "report" / "traces").glob("*.json.gz"))) == 1
