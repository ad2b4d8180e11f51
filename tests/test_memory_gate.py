"""Peak memory through the gate, with faked bursts: tolerances from the option, the
table, the marker and the entry; confirmation on a rerun; warnings; saving."""

import json

import pytest
from suite_files import FAKE_ARGS, faked_project

pytest_plugins = ["pytester"]


@pytest.fixture
def faked(pytester, monkeypatch):
    monkeypatch.setenv("PERFSUITE_FAKE_PEAK_MB", "1000")
    project = faked_project(pytester)
    project.runpytest_inprocess(*FAKE_ARGS, "--perf-save-baseline", "--perf-baseline-runs", "1").assert_outcomes(
        passed=1
    )
    return project


def entry(pytester) -> dict:
    (path,) = (pytester.path / "baselines").glob("*.json")
    (found,) = json.loads(path.read_text())["entries"].values()
    return found


def test_a_save_stores_the_peak_of_each_burst(faked):
    assert entry(faked)["peak_memory_bytes"] == 1000 * 2**20
    assert entry(faked)["peak_memory_runs"] == [1000 * 2**20]
    assert entry(faked)["peak_memory_basis"] == "held"


def test_a_cpu_peak_saved_before_the_basis_is_not_gated_and_is_counted(faked, monkeypatch):
    """A CPU worker's peak saved with the libraries' file pages counted is not compared with
    one measured without them: the entry is counted among those to refresh."""
    (path,) = (faked.path / "baselines").glob("*.json")
    data = json.loads(path.read_text())
    for found in data["entries"].values():
        del found["peak_memory_basis"]
    path.write_text(json.dumps(data))
    monkeypatch.setenv("PERFSUITE_FAKE_PEAK_MB", "5000")
    result = faked.runpytest_inprocess(*FAKE_ARGS, "--perf-json", "out.json")
    result.assert_outcomes(passed=1)
    assert "1 baseline entry has no peak memory to compare with: refresh it with --perf-save-baseline" in (
        result.stdout.str()
    )
    (row,) = json.loads(faked.path.joinpath("out.json").read_text())["results"]
    assert row["memory_verdict"] == "no baseline"


def test_growth_beyond_the_default_tolerance_fails_as_memory_after_a_rerun(faked, monkeypatch):
    monkeypatch.setenv("PERFSUITE_FAKE_PEAK_MB", "1380")
    result = faked.runpytest_inprocess(*FAKE_ARGS, "--perf-json", "out.json")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert (
        "memory regression: torch cifar10 on 1 CPU worker, batch 64/device, data location device: "
        "peak 1.35 GiB vs baseline 1000 MiB (+38%, tolerance 10%, bursts 1.35 GiB, 1.35 GiB)"
    ) in out
    assert len(faked.path.joinpath("bursts.log").read_text().split()) == 1 + 2  # save, burst, its rerun
    (row,) = json.loads(faked.path.joinpath("out.json").read_text())["results"]
    assert row["memory_verdict"] == "regression" and row["verdict"] == "pass"


# After the conftest's launcher: a key's bursts after its first run at $PERFSUITE_FAKE_RERUN_RATE.
RERUN_RATE = """
_first_burst, _bursts = fake_run_burst, {}

def fake_run_burst(spec, *args, **kwargs):
    record = _first_burst(spec, *args, **kwargs)
    _bursts[spec.key()] = _bursts.get(spec.key(), 0) + 1
    if _bursts[spec.key()] > 1:
        rate = float(os.environ["PERFSUITE_FAKE_RERUN_RATE"]) * spec.world_size
        record = record.replace(samples=(rate,) * len(record.samples))
    return record
"""


def test_the_memory_rerun_comes_before_the_verdict(faked, monkeypatch):
    """A memory regression's rerun, slower: the throughput verdict, its line, the JUnit figures and
    the JSON row all see both bursts (the verdict once saw the first alone)."""
    import xml.etree.ElementTree as ET

    from suite_files import FAKE_BURSTS

    faked.makeconftest(FAKE_BURSTS + RERUN_RATE)
    monkeypatch.setenv("PERFSUITE_FAKE_PEAK_MB", "1380")
    monkeypatch.setenv("PERFSUITE_FAKE_RERUN_RATE", "60")
    result = faked.runpytest_inprocess(*FAKE_ARGS, "--perf-json", "out.json", "--junitxml", "junit.xml")
    result.assert_outcomes(failed=1)
    (row,) = json.loads(faked.path.joinpath("out.json").read_text())["results"]
    assert row["runs"] == 2 and row["memory_verdict"] == "regression"
    assert row["images_per_sec"] == 80.0  # the median of five windows at 100 and five at 60
    assert row["change"] == pytest.approx(row["images_per_sec"] / row["baseline_images_per_sec"] - 1)
    case = next(ET.parse(faked.path / "junit.xml").getroot().iter("testcase"))
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["bursts"] == "2" and float(props["images_per_sec"]) == 80.0
    assert float(props["change"]) == pytest.approx(-0.2)
    # Five windows at 60 among ten: a drop, not a significant one. The warning says the pooled figures.
    assert row["verdict"] == "inconclusive"
    assert "inconclusive throughput after a rerun" in result.stdout.str()
    assert "80 img/s vs baseline 100 img/s (-20.0%" in result.stdout.str()


@pytest.mark.parametrize("where", ["command line", "[tool.perfsuite]"])
def test_a_wider_tolerance_passes(faked, monkeypatch, where):
    monkeypatch.setenv("PERFSUITE_FAKE_PEAK_MB", "1380")
    args = ["--perf-memory-tolerance", "0.5"]
    if where == "[tool.perfsuite]":
        faked.makepyprojecttoml("[tool.perfsuite]\nmemory_tolerance = 0.5\nbaseline_dir = 'baselines'\n")
        args = []
    faked.runpytest_inprocess(*FAKE_ARGS, *args).assert_outcomes(passed=1)


def test_the_marker_and_a_hand_set_entry_tolerance_win(faked, monkeypatch):
    monkeypatch.setenv("PERFSUITE_FAKE_PEAK_MB", "1380")
    faked.makepyfile(
        test_marked="""
import pytest

@pytest.mark.perfsuite(memory_tolerance=0.5)
def test_marked(perf, burst_spec):
    perf.assert_throughput(burst_spec)
"""
    )
    faked.runpytest_inprocess(*FAKE_ARGS, "test_marked.py").assert_outcomes(passed=1)
    (path,) = (faked.path / "baselines").glob("*.json")
    data = json.loads(path.read_text())
    for found in data["entries"].values():
        found["memory_tolerance"] = 0.5
    path.write_text(json.dumps(data))
    faked.runpytest_inprocess(*FAKE_ARGS, "test_suite.py", "--perf-save-baseline").assert_outcomes(passed=1)
    assert entry(faked)["memory_tolerance"] == 0.5  # survives a refresh
    monkeypatch.setenv("PERFSUITE_FAKE_PEAK_MB", "1900")  # +38% on the refreshed 1380 MiB: within 50%
    faked.runpytest_inprocess(*FAKE_ARGS, "test_suite.py").assert_outcomes(passed=1)
    monkeypatch.setenv("PERFSUITE_FAKE_PEAK_MB", "2200")  # +59%
    faked.runpytest_inprocess(*FAKE_ARGS, "test_suite.py").assert_outcomes(failed=1)


def test_less_memory_warns_and_an_old_entry_without_a_peak_is_not_gated(faked, monkeypatch):
    monkeypatch.setenv("PERFSUITE_FAKE_PEAK_MB", "500")
    result = faked.runpytest_inprocess(*FAKE_ARGS, "-W", "always")
    result.assert_outcomes(passed=1)
    assert "less memory than baseline, refresh it with --perf-save-baseline" in result.stdout.str()
    (path,) = (faked.path / "baselines").glob("*.json")
    data = json.loads(path.read_text())
    for found in data["entries"].values():
        del found["peak_memory_bytes"]
    path.write_text(json.dumps(data))
    monkeypatch.setenv("PERFSUITE_FAKE_PEAK_MB", "5000")
    result = faked.runpytest_inprocess(*FAKE_ARGS, "--perf-json", "out.json")
    result.assert_outcomes(passed=1)
    (row,) = json.loads(faked.path.joinpath("out.json").read_text())["results"]
    assert row["memory_verdict"] == "no baseline"


@pytest.mark.parametrize("value", ["-0.1", "ten", "11"])
def test_a_bad_memory_tolerance_is_one_line(faked, value):
    result = faked.runpytest_inprocess(*FAKE_ARGS, "--perf-memory-tolerance", value)
    assert result.ret == 4
    (line,) = [x for x in result.stderr.str().splitlines() if "--perf-memory-tolerance" in x]
    assert line.startswith("ERROR: --perf-memory-tolerance")


def test_entries_saved_without_peak_memory_or_an_op_profile_are_counted(faked):
    # Faked bursts take no op profile; an entry without a peak is an older one.
    (path,) = (faked.path / "baselines").glob("*.json")
    data = json.loads(path.read_text())
    for found in data["entries"].values():
        del found["peak_memory_bytes"]
    path.write_text(json.dumps(data))
    result = faked.runpytest_inprocess(*FAKE_ARGS)
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "1 baseline entry has no op profile to compare with: refresh it with --perf-save-baseline" in out
    assert "1 baseline entry has no peak memory to compare with" in out


def test_the_spread_of_the_baselines_own_bursts_widens_the_tolerance(faked, monkeypatch):
    (path,) = (faked.path / "baselines").glob("*.json")
    data = json.loads(path.read_text())
    for found in data["entries"].values():
        found["peak_memory_runs"] = [900 * 2**20, 1000 * 2**20, 1150 * 2**20]  # 25% apart
    path.write_text(json.dumps(data))
    # The 25% spread widens the 10% tolerance to 20%, twice the tolerance at most.
    monkeypatch.setenv("PERFSUITE_FAKE_PEAK_MB", "1190")  # +19%
    faked.runpytest_inprocess(*FAKE_ARGS).assert_outcomes(passed=1)
    monkeypatch.setenv("PERFSUITE_FAKE_PEAK_MB", "1300")  # +30%
    result = faked.runpytest_inprocess(*FAKE_ARGS)
    result.assert_outcomes(failed=1)
    assert "(+30%, tolerance 20%" in result.stdout.str()
