"""What CI tools read: --benchmark-json, --junitxml, exit codes; and the adaptive burst length."""

import json
import xml.etree.ElementTree as ET

import pytest
from suite_files import SUITE, TINY, TINY_STEP_MS, copy_baselines, needs

from perfsuite.analysis.stats import median
from perfsuite.worker.measure import stable_within

pytest_plugins = ["pytester"]
pytestmark = [needs("torch"), needs("pytest_benchmark")]

# The adaptive length stays on here (no --perf-max-windows): it is what some tests are about.
FAST = [
    "--perf-framework",
    "torch",
    "--perf-model",
    "tiny",
    "-m",
    "cpu",
    "--perf-steps",
    "10",
    "--perf-windows",
    "5",
    "--perf-warmup-steps",
    "1",
    "-p",
    "no:cacheprovider",
]

# A plain pytest-benchmark test next to the suite: its fixture must stay pytest-benchmark's.
PLAIN_BENCHMARK = """
import pytest

@pytest.mark.cpu
def test_plain_benchmark(benchmark):
    assert benchmark(sum, range(100)) == 4950
"""


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", TINY_STEP_MS)
    for name in ("PERFSUITE_TINY_SLOWDOWN", "PERFSUITE_TINY_JITTER", "PERFSUITE_TINY_CRASH"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(TINY)
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def run(pytester, *args):
    return pytester.runpytest_inprocess(*FAST, *args)


def properties(path, name_part):
    case = next(c for c in ET.parse(path).getroot().iter("testcase") if name_part in c.get("name"))
    return {p.get("name"): p.get("value") for p in case.iter("property")}


@pytest.mark.xdist_group("saved_tiny")  # the worker that saved the baseline gates against it
def test_an_unchanged_run_passes_and_ci_tools_read_its_bursts(suite, saved_tiny):
    """Real bursts gated against the shared baseline (conftest.saved_tiny); what --benchmark-json
    and --junitxml say of them. The wide tolerances keep this about the plumbing (the fidelity
    benchmark measures noise)."""
    path = copy_baselines(saved_tiny, suite.path)
    before = path.read_bytes()
    suite.makepyfile(test_plain=PLAIN_BENCHMARK)
    result = run(
        suite,
        "--benchmark-json",
        "bench.json",
        "--junitxml",
        "junit.xml",
        "--perf-json",
        "r.json",
        "--perf-tolerance",
        "0.5",
        "--perf-scaling-tolerance",
        "0.5",
        "--perf-max-windows",
        "5",
    )
    result.assert_outcomes(passed=4)
    assert result.ret == pytest.ExitCode.OK
    assert path.read_bytes() == before  # a gating run never writes the baseline

    data = json.loads((suite.path / "bench.json").read_text())
    info = data["machine_info"]["perfsuite"]
    assert info["frameworks"]["torch"] and info["cpu"]["cores"] >= 1
    bursts = [b for b in data["benchmarks"] if b["fullname"].startswith("perfsuite::")]
    assert {b["params"]["device_count"] for b in bursts} == {1, 2}
    assert any(b["name"] == "test_plain_benchmark" for b in data["benchmarks"])
    records = {r["id"]: r for r in json.loads((suite.path / "r.json").read_text())["results"]}
    for b in bursts:
        extra = b["extra_info"]
        record = records[b["param"]]
        assert b["group"] == "perfsuite torch tiny"
        # Its rounds are its windows, of every pooled burst (a noisy one is rerun).
        assert b["stats"]["rounds"] == len(b["stats"]["data"]) == sum(record["windows_run"])
        assert extra["runs"] == record["runs"] and extra["windows_run"] == record["windows_run"]
        per_window = extra["images_per_window"]
        assert extra["images_per_sec"] == pytest.approx(median([per_window / s for s in b["stats"]["data"]]))
        assert extra["verdict"] == record["verdict"] and extra["devices"] == b["params"]["device_count"]

    props = properties(suite.path / "junit.xml", "test_throughput[torch-tiny-cpu2")
    for name in ("images_per_sec", "baseline_images_per_sec", "change", "verdict", "tolerance", "ci_low", "burst"):
        assert name in props, name
    two = next(r for r in records.values() if r["devices"] == 2)
    assert props["verdict"] == two["verdict"] and float(props["images_per_sec"]) == round(two["images_per_sec"], 3)
    assert props["bursts"] == str(two["runs"])
    scaling = properties(suite.path / "junit.xml", "test_scaling")
    assert float(scaling["scaling_efficiency"]) > 0 and "baseline_scaling_efficiency" in scaling


def test_a_noisy_burst_is_lengthened_up_to_its_cap(suite, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_JITTER", "3")
    result = run(
        suite,
        "--perf-cpu-workers",
        "1",
        "--perf-missing-baseline",
        "pass",
        "--perf-max-windows",
        "8",
        "--perf-json",
        "r.json",
    )
    result.assert_outcomes(passed=1)
    (record,) = json.loads((suite.path / "r.json").read_text())["results"]
    assert record["windows"] == 5 and record["max_windows"] == 8
    assert_lengthened_by_the_rule(record)
    assert record["windows_run"][0] > 5  # the jitter is large by construction (a seeded 1x-4x step cost)


def test_a_bad_max_windows_is_a_usage_error(suite):
    result = run(suite, "--perf-max-windows", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert len([x for x in result.stderr.lines if x.startswith("ERROR:")]) == 1


MARKED = """
import pytest

@pytest.mark.perfsuite(tolerance=0.001)
def test_strict(perf, burst_spec):
    perf.assert_throughput(burst_spec)

def test_loose(perf, burst_spec):
    perf.assert_throughput(burst_spec)
"""


def test_a_stricter_marker_gets_a_longer_burst(pytester, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "20")
    pytester.makeconftest(TINY)
    pytester.makepyfile(test_marked=MARKED)
    result = run(
        pytester,
        "--perf-cpu-workers",
        "1",
        "--perf-missing-baseline",
        "pass",
        "--perf-tolerance",
        "0.9",
        "--perf-max-windows",
        "7",
        "--perf-json",
        "r.json",
        "--benchmark-json",
        "b.json",
    )
    result.assert_outcomes(passed=2)
    names = [b["fullname"] for b in json.loads((pytester.path / "b.json").read_text())["benchmarks"]]
    assert len(names) == 2 and len(set(names)) == 2
    records = json.loads((pytester.path / "r.json").read_text())["results"]
    by_test = {r["tests"][0].rsplit("::", 1)[1].split("[")[0]: r for r in records}
    assert by_test["test_strict"]["stable_within"] == 0.001 and by_test["test_loose"]["stable_within"] == 0.9
    for record in records:
        assert record["max_windows"] == 7
        assert_lengthened_by_the_rule(record)


def assert_lengthened_by_the_rule(record):
    """The burst stopped where the stability rule, applied to its own windows, says it must:
    every shorter run of windows (from the planned count) was too spread to decide, and it
    ran to the cap or its windows were stable at the end."""
    seconds = record["window_seconds"]
    stable = stable_within(record["stable_within"])
    assert record["windows_run"] == [len(seconds)] == [len(record["samples"])]
    assert record["windows"] <= len(seconds) <= record["max_windows"]
    for k in range(record["windows"], len(seconds)):
        assert not stable(seconds[:k]), k
    assert len(seconds) == record["max_windows"] or stable(seconds)
