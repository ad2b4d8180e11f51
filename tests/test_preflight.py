"""A gate that never goes green by measuring nothing: hardware and frameworks asked for but
absent, runs in which no burst ran, pytest-xdist, output paths, and custom models from anywhere.

Bursts are faked (suite_files.FAKE_BURSTS) wherever the test is about the plugin's decisions,
so no figure here depends on how busy the machine is.
"""

import importlib.util
import json
import subprocess
import warnings
from pathlib import Path

import pytest
from suite_files import FAKE_BURSTS, SUITE, TINY

pytest_plugins = ["pytester"]

TORCH_CIFAR = ["--perf-framework", "torch", "--perf-model", "cifar10", "-p", "no:cacheprovider"]


@pytest.fixture
def suite(pytester):
    pytester.makeconftest(FAKE_BURSTS)
    pytester.makepyfile(test_suite=SUITE)
    pytester.mkdir("baselines")
    return pytester


def error_line(result) -> str:
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1, result.stdout.str() + result.stderr.str()
    return errors[0]


def bursts_run(pytester) -> list[str]:
    log = pytester.path / "bursts.log"
    return log.read_text().split() if log.exists() else []


# -- 1. GPUs asked for but absent ---------------------------------------------------------

needs_no_gpu = pytest.mark.skipif(
    __import__("perfsuite.common.hardware").common.hardware.cuda_device_count() > 0, reason="this machine has a GPU"
)


@needs_no_gpu
def test_gpus_asked_for_but_absent_fail_up_front_and_say_what_was_found(suite):
    result = suite.runpytest_inprocess("-m", "gpu", "--perf-gpus", "4", *TORCH_CIFAR)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = error_line(result)
    assert line.startswith("ERROR: --perf-gpus 4: 4 CUDA devices asked for, 0 visible (")
    assert "CUDA_VISIBLE_DEVICES" in line and "--perf-missing-gpus skip" in line
    assert bursts_run(suite) == []


@needs_no_gpu
def test_a_selection_of_gpu_cases_fails_without_gpus_too(suite, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    result = suite.runpytest_inprocess("-m", "gpu", *TORCH_CIFAR)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = error_line(result)
    assert "the selected GPU cases: 1 CUDA device asked for, 0 visible" in line
    assert "CUDA_VISIBLE_DEVICES='0'" in line


@needs_no_gpu
def test_a_mixed_fleet_skips_but_a_run_that_measured_nothing_fails(suite):
    result = suite.runpytest_inprocess("-m", "gpu", "--perf-gpus", "4", "--perf-missing-gpus", "skip", *TORCH_CIFAR)
    result.assert_outcomes(skipped=5)  # throughput on 1, 2, 4 GPUs; scaling on 2, 4
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["no burst ran: 5 selected cases, all skipped: needs 2 CUDA devices, found 0 (2)*"])


@needs_no_gpu
def test_a_plain_run_on_a_cpu_node_measures_its_cpu_cases(suite):
    result = suite.runpytest_inprocess("--perf-missing-baseline", "pass", *TORCH_CIFAR)
    result.assert_outcomes(passed=3, skipped=1)  # the 1-GPU case alone is skipped
    assert result.ret == pytest.ExitCode.OK
    assert len(bursts_run(suite)) == 2


# -- 1b, 2. frameworks ---------------------------------------------------------------------


def test_a_framework_asked_for_but_missing_fails_with_the_install_line(suite, monkeypatch):
    import perfsuite.plugin.cases

    monkeypatch.setattr(perfsuite.plugin.cases, "framework_installed", lambda fw: False)
    result = suite.runpytest_inprocess("-m", "cpu", *TORCH_CIFAR)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = error_line(result)
    assert '--perf-framework torch: torch is not installed; pip install -e ".[torch]"' in line
    assert "not published on PyPI" in line


def test_a_missing_framework_among_the_defaults_is_skipped_with_the_install_line(suite, monkeypatch):
    import perfsuite.plugin.cases

    monkeypatch.setattr(perfsuite.plugin.cases, "framework_installed", lambda fw: fw == "torch")
    result = suite.runpytest_inprocess("-m", "cpu", "--perf-model", "cifar10", "--perf-missing-baseline", "pass", "-rs")
    result.assert_outcomes(passed=3, skipped=3)
    assert 'tensorflow is not installed: pip install -e ".[tf]" (run in the perfsuite checkout' in result.stdout.str()


PLUGIN_ONLY_HIDDEN = ("torch", "functorch", "tensorflow", "keras", "tf_keras", "tensorboard")


def plugin_only_python(tmp_path: Path) -> Path:
    """A fresh virtual environment that sees this one's packages except the frameworks.

    Its site-packages holds links to everything installed here but torch and TensorFlow
    (and their metadata), so perfsuite, pytest and the plugin's own needs are there and
    the frameworks truly are not: as for a user who installed the plugin alone.
    """
    import site
    import venv

    env = tmp_path / "plugin-only"
    venv.EnvBuilder(with_pip=False).create(env)
    view = tmp_path / "site-view"
    view.mkdir()
    source = Path(next(p for p in site.getsitepackages() if p.endswith("site-packages")))
    for entry in source.iterdir():
        if not entry.name.lower().startswith(PLUGIN_ONLY_HIDDEN):
            (view / entry.name).symlink_to(entry)
    (site_dir,) = env.glob("lib/python*/site-packages")
    (site_dir / "view.pth").write_text(f"import site; site.addsitedir({str(view)!r})\n")
    return env / "bin" / "python"


def test_a_fresh_environment_with_the_plugin_alone_fails_with_one_line(tmp_path):
    python = plugin_only_python(tmp_path)
    root = Path(__file__).resolve().parents[1]
    check = subprocess.run(
        [
            python,
            "-c",
            "import importlib.util as u; print(u.find_spec('torch'), "
            "u.find_spec('tensorflow'), u.find_spec('perfsuite') is not None)",
        ],
        capture_output=True,
        text=True,
    )
    assert check.stdout.split() == ["None", "None", "True"], check.stdout + check.stderr
    proc = subprocess.run(
        [python, "-m", "pytest", "tests_perf", "-m", "cpu", "--perf-model", "cifar10", "-p", "no:cacheprovider"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert errors == [
        'ERROR: the selected cases: torch and tensorflow are not installed; pip install -e ".[torch]" '
        'or pip install -e ".[tf]" (run in the perfsuite checkout; perfsuite is not published on PyPI)'
    ], proc.stderr


# -- 3. pytest-xdist ---------------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="pytest-xdist is not installed")
def test_pytest_xdist_is_refused_with_one_line(suite):
    # One worker is pytest-xdist all the same (a worker's config is what refuses), at half the start-up.
    result = suite.runpytest_inprocess("-n", "1", "-m", "cpu", "--perf-missing-baseline", "pass", *TORCH_CIFAR)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "pytest-xdist (-n)" in error_line(result)
    assert bursts_run(suite) == []


# -- 4. output paths, before any burst ---------------------------------------------------------


@pytest.mark.parametrize(
    "args, words",
    [
        (["--perf-report", "/proc/perfsuite-report"], "--perf-report: cannot write /proc/perfsuite-report"),
        (["--perf-json", "/proc/perfsuite/r.json"], "--perf-json: cannot write /proc/perfsuite/r.json"),
        (["--perf-json", "."], "is a directory, not a file"),
        (
            ["--perf-baseline-dir", "/nonexistent-perfsuite"],
            "--perf-baseline-dir: /nonexistent-perfsuite does not exist",
        ),
        (
            ["--perf-save-baseline", "--perf-baseline-dir", "/proc/perfsuite"],
            "--perf-baseline-dir: cannot write /proc/perfsuite",
        ),
    ],
    ids=["report", "json", "json-dir", "gating", "saving"],
)
def test_output_paths_are_checked_before_any_burst(suite, args, words):
    result = suite.runpytest_inprocess("-m", "cpu", *TORCH_CIFAR, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert words in error_line(result)
    assert bursts_run(suite) == []


def test_results_line_names_a_file_only_once_written(suite):
    result = suite.runpytest_inprocess(
        "-m", "cpu", "--perf-missing-baseline", "pass", "--perf-json", "out/r.json", *TORCH_CIFAR
    )
    assert result.ret == pytest.ExitCode.OK
    assert "results: " in result.stdout.str() and (suite.path / "out" / "r.json").exists()


# -- 5. a burst too short for a verdict ---------------------------------------------------------

SHORT = """
def test_short(perf, burst_spec):
    perf.assert_throughput(burst_spec.replace(steps=4, windows=2, max_windows=2))
"""


def test_a_burst_too_short_for_a_verdict_fails_the_test(suite):
    suite.makepyfile(test_suite=SHORT)
    result = suite.runpytest_inprocess(
        "-m", "cpu", "--perf-cpu-workers", "1", "--perf-missing-baseline", "pass", *TORCH_CIFAR
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*2 windows cannot fail the gate: a verdict needs at least 5*"])
    assert bursts_run(suite) == []


# -- 7. custom models from anywhere -------------------------------------------------------------

MYNET = """
from perfsuite import register_model

@register_model("mynet", framework="torch", image_size=8, batch_size=8, cpu_batch_size=8, num_classes=4)
def mynet(num_classes=4):
    from torch import nn
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, num_classes))
"""


def test_the_shipped_suite_runs_from_a_folder_with_a_conftest_alone(pytester):
    pytester.makeconftest(FAKE_BURSTS + TINY)
    result = pytester.runpytest_inprocess(
        "--pyargs",
        "perfsuite.suite",
        "-m",
        "cpu",
        "--perf-framework",
        "torch",
        "--perf-model",
        "tiny",
        "--perf-missing-baseline",
        "pass",
    )
    result.assert_outcomes(passed=3)


def test_a_model_registered_in_a_subfolder_conftest_is_known(pytester):
    sub = pytester.mkpydir("perf")
    (sub / "conftest.py").write_text(MYNET)
    (sub / "test_suite.py").write_text(SUITE)
    result = pytester.runpytest_inprocess("--co", "-q", "--perf-model", "mynet", "-m", "cpu")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    assert "test_throughput[torch-mynet-cpu1-device]" in result.stdout.str()
    unknown = pytester.runpytest_inprocess("--co", "-q", "--perf-model", "mynet2", "-m", "cpu")
    assert unknown.ret == pytest.ExitCode.USAGE_ERROR
    assert "--perf-model: unknown model 'mynet2' (known: " in error_line(unknown) and "mynet," in error_line(unknown)


def _models_command(capsys, *argv: str) -> subprocess.CompletedProcess:
    """``python -m perfsuite models ARGV`` in this process, as that command runs it (it exits with
    what main returns); a warning is said on its standard error, as Python says it there."""
    from perfsuite.commands.main import main

    capsys.readouterr()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("default")
        code = main(["models", *argv])
    out, err = capsys.readouterr()
    err += "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in said)
    return subprocess.CompletedProcess(argv, code, out, err)


def test_the_models_command_lists_a_conftests_models(pytester, capsys):
    pytester.makeconftest(MYNET)
    out = _models_command(capsys, "--framework", "torch", "--load", "conftest.py")  # in pytester's folder
    assert out.returncode == 0, out.stderr
    (row,) = [line.split() for line in out.stdout.splitlines() if line.startswith("mynet")]
    assert row[:4] == ["mynet", "torch", "image", "-"] and row[-1] == "-"  # params and FLOPs: measured by the worker
    gpt2 = next(line for line in out.stdout.splitlines() if line.startswith("gpt2"))
    assert "token" in gpt2 and "1024 tokens (128 on a CPU worker) of 50257" in gpt2 and gpt2.endswith("/token")
    as_json = _models_command(capsys, "--json", "--load", "conftest.py")
    mynet = next(m for m in json.loads(as_json.stdout) if m["name"] == "mynet")
    assert mynet["params"] is None and mynet["flops"] is None
    bad = _models_command(capsys, "--load", "missing.py")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: ")


def test_a_bad_registration_is_one_line(pytester):
    pytester.makeconftest(MYNET.replace("num_classes=4)\ndef", "num_classes=4, flops='lots')\ndef"))
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_inprocess("--co", "-q", "--perf-model", "mynet")
    assert result.ret != pytest.ExitCode.OK
    assert "model 'mynet': flops must be a positive number, got 'lots'" in result.stdout.str() + result.stderr.str()
    assert "TypeError" not in result.stdout.str() + result.stderr.str()


@pytest.mark.xdist_group("saved_tiny")  # the worker that saved the tiny suite reads its records
def test_a_model_without_params_or_flops_gets_them_measured(saved_tiny):
    """The tiny test model is registered without either (tests/tiny_model.py): its bursts count them."""
    for record in json.loads((saved_tiny / "saved.json").read_text())["results"]:
        assert record["model_params"] == 3 * 8 * 8 * 4 + 4
        assert record["model_flops"] == 2 * 3 * 8 * 8 * 4  # one matmul: 2 x multiply-adds
        assert record["achieved_tflops"] > 0


# -- 8. the smaller ones -------------------------------------------------------------------------


def test_large_figures_print_in_fixed_point(suite, monkeypatch):
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "10370")
    result = suite.runpytest_inprocess(
        "-m", "cpu", "--perf-cpu-workers", "1", "--perf-missing-baseline", "pass", *TORCH_CIFAR
    )
    out = result.stdout.str()
    assert " 10370 " in out and "e+0" not in out


def test_a_save_run_says_saved_names_the_folder_and_leaves_no_lock_file(suite):
    result = suite.runpytest_inprocess("-m", "cpu", "--perf-save-baseline", *TORCH_CIFAR)
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert "saved (3 runs)" in out and "no baseline" not in out
    (name,) = [p.name for p in (suite.path / "baselines").iterdir()]
    assert name.endswith(".json")
    assert f"[baseline file baselines/{name}]" in out


def test_a_key_mismatch_names_the_nearest_entry_and_the_field_that_differs(suite):
    saved = suite.runpytest_inprocess(
        "-m",
        "cpu",
        "--perf-cpu-workers",
        "1",
        "--perf-threads-per-worker",
        "1",
        "--perf-save-baseline",
        "--perf-baseline-runs",
        "1",
        *TORCH_CIFAR,
    )
    saved.assert_outcomes(passed=1)
    result = suite.runpytest_inprocess(
        "-m", "cpu", "--perf-cpu-workers", "1", "--perf-threads-per-worker", "2", "-rs", *TORCH_CIFAR
    )
    result.assert_outcomes(skipped=1)
    assert (
        "the nearest entry, torch/cifar10/cpu1/nodes1/device/bs64/img24/fp32/threads1, differs in threads "
        "per CPU worker (2 here, 1 there: --perf-threads-per-worker 1 matches it)"
    ) in result.stdout.str()


def test_oversubscribed_cores_are_warned_about(suite):
    result = suite.runpytest_inprocess(
        "--co", "-m", "cpu", "--perf-cpu-workers", "2", "--perf-threads-per-worker", "1000", *TORCH_CIFAR
    )
    assert result.ret == pytest.ExitCode.OK
    assert "2 CPU workers x 1000 threads want 2000 cores and this node has" in result.stdout.str()


@pytest.mark.skipif(importlib.util.find_spec("pytest_benchmark") is None, reason="needs pytest-benchmark")
def test_pytest_benchmark_shows_no_second_table_of_the_bursts(suite):
    result = suite.runpytest_inprocess(
        "-m", "cpu", "--perf-missing-baseline", "pass", "--benchmark-json", "b.json", *TORCH_CIFAR
    )
    assert result.ret == pytest.ExitCode.OK
    assert "benchmark 'perfsuite" not in result.stdout.str()
    names = [b["name"] for b in json.loads((suite.path / "b.json").read_text())["benchmarks"]]
    assert len(names) == 2 and all(n.startswith("burst[") for n in names)  # the JSON keeps them


@pytest.mark.parametrize("value", [0.0, 1.0, 200.0, 638.495, 2.3871, 10370.4, 0.012345, 999.96, 1e-7, 123456789.0])
def test_fixed_point_examples(value):
    from perfsuite.common.numbers import fixed

    assert "e" not in fixed(value)
    assert float(fixed(value)) == pytest.approx(value, rel=5e-4, abs=0.5 if value >= 1000 else 0)


def test_fixed_point_never_uses_an_exponent_and_keeps_four_digits():
    from hypothesis import given
    from hypothesis import strategies as st

    from perfsuite.common.numbers import fixed

    @given(st.floats(min_value=1e-9, max_value=1e12), st.integers(min_value=1, max_value=6))
    def check(x, digits):
        text = fixed(x, digits)
        assert "e" not in text.lower()
        assert abs(float(text) - x) <= max(0.5, abs(x) * 0.5 * 10 ** (1 - digits) * 1.0001)

    check()
