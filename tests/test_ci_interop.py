"""What CI tools read: --benchmark-json, --junitxml, exit codes; and the adaptive burst length."""

import json
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("torch")
pytest.importorskip("pytest_benchmark")

from suite_files import SUITE, TINY  # noqa: E402

pytest_plugins = ["pytester"]

FAST = ["--framework", "torch", "--model", "tiny", "-m", "cpu", "--steps", "10", "--windows", "5",
        "--warmup-steps", "1", "-p", "no:cacheprovider"]

# A plain pytest-benchmark test next to the suite: its fixture must stay pytest-benchmark's.
PLAIN_BENCHMARK = """
import pytest

@pytest.mark.cpu
def test_plain_benchmark(benchmark):
    assert benchmark(sum, range(100)) == 4950
"""


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "20")
    for name in ("PERFSUITE_TINY_SLOWDOWN", "PERFSUITE_TINY_JITTER", "PERFSUITE_TINY_CRASH"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(TINY)
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def run(pytester, *args):
    return pytester.runpytest_subprocess(*FAST, *args)


def properties(path, name_part):
    case = next(c for c in ET.parse(path).getroot().iter("testcase") if name_part in c.get("name"))
    return {p.get("name"): p.get("value") for p in case.iter("property")}


def test_benchmark_json_and_junit_carry_the_bursts(suite):
    suite.makepyfile(test_plain=PLAIN_BENCHMARK)
    run(suite, "--save-baseline", "--baseline-runs", "1", "--max-windows", "5").assert_outcomes(passed=4)
    result = run(suite, "--benchmark-json", "bench.json", "--junitxml", "junit.xml", "--perf-tolerance", "0.5",
                 "--scaling-tolerance", "0.5", "--max-windows", "5")
    result.assert_outcomes(passed=4)
    assert result.ret == pytest.ExitCode.OK

    data = json.loads((suite.path / "bench.json").read_text())
    info = data["machine_info"]["perfsuite"]
    assert info["frameworks"]["torch"] and info["cpu"]["cores"] >= 1
    bursts = [b for b in data["benchmarks"] if b["fullname"].startswith("perfsuite::")]
    assert {b["params"]["device_count"] for b in bursts} == {1, 2}
    assert any(b["name"] == "test_plain_benchmark" for b in data["benchmarks"])
    for b in bursts:
        extra = b["extra_info"]
        assert b["group"] == "perfsuite torch tiny"
        assert b["stats"]["rounds"] == len(b["stats"]["data"]) == 5  # the windows
        per_window = extra["images_per_window"]
        assert extra["images_per_sec"] == pytest.approx(per_window / b["stats"]["median"], rel=1e-6)
        assert extra["verdict"] == "pass" and extra["devices"] == b["params"]["device_count"]

    props = properties(suite.path / "junit.xml", "test_throughput[torch-tiny-cpu2")
    for name in ("images_per_sec", "baseline_images_per_sec", "change", "verdict", "tolerance", "ci_low", "burst"):
        assert name in props, name
    assert props["verdict"] == "pass" and float(props["images_per_sec"]) > 0
    scaling = properties(suite.path / "junit.xml", "test_scaling")
    assert float(scaling["scaling_efficiency"]) > 0 and "baseline_scaling_efficiency" in scaling


def test_a_burst_error_is_not_a_regression(suite, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_CRASH", "1")
    result = run(suite, "--cpu-workers", "1", "--junitxml", "junit.xml", "--missing-baseline", "pass")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "burst failed" in out and "regression:" not in out and "REGRESSION" not in out
    props = properties(suite.path / "junit.xml", "test_throughput")
    assert props["verdict"] == "error" and "tiny model refused to build" in props["burst_error"]


def test_a_noisy_burst_is_lengthened_up_to_its_cap(suite, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_JITTER", "3")
    result = run(suite, "--cpu-workers", "1", "--missing-baseline", "pass", "--max-windows", "8",
                 "--perf-json", "r.json")
    result.assert_outcomes(passed=1)
    (record,) = json.loads((suite.path / "r.json").read_text())["results"]
    assert record["windows"] == 5 and record["max_windows"] == 8
    assert record["windows_run"] == [8] and len(record["samples"]) == 8


def test_a_bad_max_windows_is_a_usage_error(suite):
    result = run(suite, "--max-windows", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert len([x for x in result.stderr.lines if x.startswith("ERROR:")]) == 1


MARKED = """
import pytest

@pytest.mark.perf(tolerance=0.001)
def test_strict(perf, burst_spec):
    perf.assert_throughput(burst_spec)

def test_loose(perf, burst_spec):
    perf.assert_throughput(burst_spec)
"""


def test_a_stricter_marker_gets_a_longer_burst(pytester, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "20")
    pytester.makeconftest(TINY)
    pytester.makepyfile(test_marked=MARKED)
    result = run(pytester, "--cpu-workers", "1", "--missing-baseline", "pass", "--perf-tolerance", "0.9",
                 "--max-windows", "7", "--perf-json", "r.json", "--benchmark-json", "b.json")
    result.assert_outcomes(passed=2)
    names = [b["fullname"] for b in json.loads((pytester.path / "b.json").read_text())["benchmarks"]]
    assert len(names) == 2 and len(set(names)) == 2
    records = json.loads((pytester.path / "r.json").read_text())["results"]
    by_test = {r["tests"][0].rsplit("::", 1)[1].split("[")[0]: r for r in records}
    assert by_test["test_strict"]["windows_run"] == [7]  # no sleep-timed burst is within 0.1%
    assert by_test["test_loose"]["windows_run"] == [5]
