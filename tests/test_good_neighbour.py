"""Installed, perfsuite loads into every pytest session of its environment: a foreign
project must run exactly as it would without it, options, markers and all."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from suite_files import SUITE

from perfsuite.config.options import OPTIONS
from perfsuite.plugin.markers import CASE_MARKERS

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent

# The names training repositories put in their own conftests, and pytest-profiling's --profile.
FOREIGN_CONFTEST = """
def pytest_addoption(parser):
    parser.addoption("--profile", action="store_true")
    parser.addoption("--model", default="tiny")
    parser.addoption("--gpus", type=int, default=0)
    parser.addoption("--steps", type=int, default=1)
    parser.addoption("--batch-size", type=int, default=8)
    parser.addoption("--save-baseline", action="store_true")
"""

FOREIGN_TESTS = """
import pytest

PROFILE = {profile}

@pytest.mark.gpu
def test_options(request):
    o = request.config.option
    assert (o.model, o.gpus, o.steps, o.batch_size, o.save_baseline) == ("mlp", 2, 7, 32, True)
    assert o.profile is PROFILE

@pytest.mark.gpu
def test_on_gpu():
    pass

def test_on_cpu():
    pass
"""

FOREIGN_ARGS = ("--model", "mlp", "--gpus", "2", "--steps", "7", "--batch-size", "32", "--save-baseline", "-m", "gpu")


NO_PROFILING = ("-p", "no:profiling")  # pytest-profiling (dev extra) owns --profile where it is loaded


@pytest.fixture
def foreign(pytester):
    """A project with its own --profile option: run without pytest-profiling."""
    pytester.makeconftest(FOREIGN_CONFTEST)
    pytester.makepyfile(test_foreign=FOREIGN_TESTS.format(profile=True))
    pytester.makeini("[pytest]\nmarkers =\n    gpu: this project's own GPU tests\n")
    return pytester


def _outcome(result) -> tuple:
    return result.ret, result.parseoutcomes()


def test_every_option_is_prefixed():
    assert all(o.flag.startswith("--perf-") for o in OPTIONS)
    assert len({o.flag for o in OPTIONS}) == len(OPTIONS)


def test_a_foreign_project_runs_as_without_perfsuite(foreign):
    without = foreign.runpytest_inprocess(*NO_PROFILING, "-p", "no:perfsuite", *FOREIGN_ARGS, "--profile")
    beside = foreign.runpytest_inprocess(*NO_PROFILING, *FOREIGN_ARGS, "--profile")
    assert _outcome(without) == _outcome(beside) == (0, {"passed": 2, "deselected": 1})
    assert "conflicting option string" not in beside.stderr.str()


def test_a_foreign_project_keeps_its_own_gpu_marker(foreign):
    out = foreign.runpytest_inprocess(*NO_PROFILING, "--markers").stdout.str()
    assert "@pytest.mark.gpu: this project's own GPU tests" in out
    assert "a burst on CUDA devices" not in out  # perfsuite's meaning of it is not registered here
    assert "@pytest.mark.perfsuite(" in out  # the one marker it always registers, namespaced


def test_strict_markers_still_catch_a_foreign_typo(pytester):
    # Without perfsuite registering `cpu`, a foreign suite's unregistered `cpu` mark is an error.
    pytester.makepyfile(test_typo="import pytest\n\n@pytest.mark.cpu\ndef test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--strict-markers")  # a fresh process: no marker registered before
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "'cpu' not found in `markers` configuration option" in result.stdout.str()


def test_beside_pytest_profiling(pytester):
    pytest.importorskip("pytest_profiling", reason="pytest-profiling is in the dev extra")
    # The same project, with pytest-profiling's --profile instead of an option of its own.
    pytester.makeconftest(FOREIGN_CONFTEST.replace('    parser.addoption("--profile", action="store_true")\n', ""))
    pytester.makepyfile(test_foreign=FOREIGN_TESTS.format(profile=True))
    pytester.makeini("[pytest]\nmarkers =\n    gpu: this project's own GPU tests\n")
    without = pytester.runpytest_inprocess("-p", "no:perfsuite", *FOREIGN_ARGS, "--profile")
    shutil.rmtree(pytester.path / "prof")
    beside = pytester.runpytest_inprocess(*FOREIGN_ARGS, "--profile")
    assert _outcome(without) == _outcome(beside) == (0, {"passed": 2, "deselected": 1})
    assert (pytester.path / "prof" / "combined.prof").is_file()  # pytest-profiling's --profile ran
    assert "--perf-profile" in pytester.runpytest_inprocess("--help").stdout.str()


def test_a_perf_suite_registers_its_case_markers_where_it_runs(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_inprocess(
        "--strict-markers", "-m", "cpu and torch", "--co", "-q", "--perf-framework", "torch", "--perf-model", "cifar10"
    )
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert re.search(r"\d+ tests? collected", result.stdout.str())


# pytest tests_perf --help, then pytest tests_perf --markers (the suite the docs' commands run),
# in one process run in this repository: what the repository's conftest adds is paid for once,
# and tests/conftest.py (the plugin's own tests: PostgreSQL, SQLAlchemy, hypothesis) not at all.
HELP_THEN_MARKERS = """
import sys
import pytest

pytest.main(["--help", "-p", "no:cacheprovider", "tests_perf"])
print(sys.argv[1], flush=True)
sys.exit(pytest.main(["--markers", "-p", "no:cacheprovider", "tests_perf"]))
"""
BETWEEN = "----- pytest --markers -----"


def test_short_spellings_live_in_this_repository_only(pytester):
    # In the repository the suite runs in, its conftest offers them...
    repo = subprocess.run(
        [sys.executable, "-c", HELP_THEN_MARKERS, BETWEEN],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert repo.returncode == 0, repo.stderr
    help_text, markers = repo.stdout.split(BETWEEN + "\n")
    for o in OPTIONS:
        if o.short:
            assert re.search(rf"^\s+{re.escape(o.short)}[ =]", help_text, re.M), o.short
    for line in CASE_MARKERS:
        assert f"@pytest.mark.{line}" in markers
    # ...and elsewhere they are not there.
    elsewhere = pytester.runpytest_inprocess("--gpus", "2")
    assert elsewhere.ret == pytest.ExitCode.USAGE_ERROR
    assert "unrecognized arguments: --gpus" in elsewhere.stderr.str()


def test_short_and_prefixed_spellings_mean_the_same(pytester):
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeconftest(
        "from perfsuite.plugin.options import add_short_spellings\n\n"
        "def pytest_addoption(parser):\n    add_short_spellings(parser)\n"
    )
    short = pytester.runpytest_inprocess(
        "--co", "-q", "--framework", "torch", "--model", "cifar10", "--cpu-workers", "3"
    )
    prefixed = pytester.runpytest_inprocess(
        "--co", "-q", "--perf-framework", "torch", "--perf-model", "cifar10", "--perf-cpu-workers", "3"
    )
    assert short.ret == prefixed.ret == 0
    ids = lambda r: sorted(line for line in r.stdout.lines if "::" in line)  # noqa: E731
    assert ids(short) == ids(prefixed) and any("cpu3" in i for i in ids(short))
