"""--perf-missing-baseline save: the first run on a machine nobody saved becomes its local
baseline, and the next run gates against it; the committed files take precedence."""

import json

import pytest
from suite_files import FAKE_ARGS, faked_project

pytest_plugins = ["pytester"]

THROUGHPUT = [*FAKE_ARGS, "-k", "throughput"]


@pytest.fixture
def faked(pytester):
    return faked_project(pytester)


def _run(project, *args, rate=100):
    (project.path / "bursts.log").unlink(missing_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFSUITE_FAKE_RATE", str(rate))
        result = project.runpytest_inprocess(
            *THROUGHPUT, "--perf-local-baseline-dir", "local", "--perf-json", "out.json", *args
        )
    (row,) = json.loads((project.path / "out.json").read_text())["results"]
    bursts = (project.path / "bursts.log").read_text().split()
    return result, row, bursts


def _entries(folder):
    (path,) = folder.glob("*.json")
    return json.loads(path.read_text())["entries"]


def test_the_first_run_is_saved_locally_and_the_second_gates_against_it(faked):
    result, row, bursts = _run(faked, "--perf-missing-baseline", "save")
    result.assert_outcomes(passed=1)
    assert len(bursts) == 3  # measured as a save measures: --perf-baseline-runs bursts, pooled
    assert row["saved"] is True and row["baseline_source"] is None and row["runs"] == 3
    assert "to this machine's local baseline" in result.stdout.str()
    assert list(_entries(faked.path / "local")) == [row["key"]]
    assert not list((faked.path / "baselines").glob("*.json"))  # the committed folder stays as it was

    result, row, bursts = _run(faked, "--perf-missing-baseline", "save")
    result.assert_outcomes(passed=1)
    assert len(bursts) == 1 and row["saved"] is False  # gated, nothing saved again
    assert row["baseline_source"] == "local" and row["baseline_file"].endswith(".json")
    assert row["verdict"] is not None and row["baseline_throughput"] == pytest.approx(100)
    assert "vs local baseline" in result.stdout.str()

    # The local baseline gates without the option too: a slower run fails against it.
    result, row, _ = _run(faked, rate=50)
    result.assert_outcomes(failed=1)
    assert row["verdict"] == "regression" and row["baseline_source"] == "local"


def test_a_committed_entry_takes_precedence_over_the_local_one(faked):
    _run(faked, "--perf-missing-baseline", "save", rate=50)
    result, row, _ = _run(faked, "--perf-save-baseline", rate=100)
    result.assert_outcomes(passed=1)
    assert row["baseline_source"] is None  # a save gates nothing, and never writes the local file
    assert _entries(faked.path / "local")[row["key"]]["images_per_sec"] == pytest.approx(50)

    result, row, _ = _run(faked, "--perf-missing-baseline", "save", rate=100)
    result.assert_outcomes(passed=1)
    assert row["baseline_source"] == "committed" and row["baseline_throughput"] == pytest.approx(100)


def test_a_run_that_fails_saves_nothing_and_an_unreadable_local_file_is_named(faked):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFSUITE_FAKE_UNSUPPORTED", "no such device")
        faked.runpytest_inprocess(*THROUGHPUT, "--perf-local-baseline-dir", "local", "--perf-missing-baseline", "save")
    assert not list((faked.path / "local").glob("*.json"))

    _run(faked, "--perf-missing-baseline", "save")
    (path,) = (faked.path / "local").glob("*.json")
    path.write_text("{not json")
    result = faked.runpytest_inprocess(*THROUGHPUT, "--perf-local-baseline-dir", "local")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*baseline file unusable: *local*not valid JSON*"])
    assert path.read_text() == "{not json"  # never clobbered


def test_a_local_folder_that_cannot_be_written_stops_the_run_up_front(faked):
    (faked.path / "local").write_text("a file, not a folder")
    result = faked.runpytest_inprocess(
        *THROUGHPUT, "--perf-local-baseline-dir", "local", "--perf-missing-baseline", "save"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--perf-local-baseline-dir*local*"])
    assert not (faked.path / "bursts.log").exists()
