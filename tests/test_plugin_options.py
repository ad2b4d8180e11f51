"""Options, [tool.perfsuite], markers, parametrization and usage errors, through pytester."""

import subprocess
import sys

import pytest
from suite_files import SUITE

pytest_plugins = ["pytester"]


@pytest.fixture
def suite(pytester):
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def test_plugin_import_stays_light():
    code = (
        "import sys, perfsuite.plugin.hooks, perfsuite.models.registry as r; r.all_models();"
        "heavy = [m for m in ('torch', 'tensorflow', 'keras', 'scipy', 'numpy', 'sqlalchemy', 'otava', 'psycopg')"
        " if m in sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_help_shows_one_option_group(pytester):
    result = pytester.runpytest("--help")
    out = result.stdout.str()
    assert "perfsuite: training bursts gated against baselines" in out
    for flag in (
        "--perf-gpus",
        "--perf-cpu-workers",
        "--perf-framework",
        "--perf-model",
        "--perf-data-location",
        "--perf-variable-update",
        "--perf-batch-size",
        "--perf-precision",
        "--perf-steps",
        "--perf-warmup-steps",
        "--perf-baseline-dir",
        "--perf-save-baseline",
        "--perf-tolerance",
        "--perf-missing-baseline",
        "--perf-min-scaling-efficiency",
        "--perf-json",
        "--perf-nnodes",
        "--perf-node-rank",
        "--perf-rdzv-endpoint",
        "--perf-worker-hosts",
        "--perf-history",
        "--perf-label",
        "--perf-drift-window",
        "--perf-drift",
    ):
        assert flag in out, flag


def test_gate_marker_registered(pytester):
    # The case markers (gpu, cpu, ...) are registered where a perf suite runs: test_good_neighbour.py.
    out = pytester.runpytest("--markers").stdout.str()
    assert "@pytest.mark.perfsuite(tolerance=None, memory_tolerance=None, min_devices=1)" in out


@pytest.mark.parametrize(
    "args, words",
    [
        (["--perf-gpus", "0"], ["--perf-gpus", ">= 1"]),
        (["--perf-gpus", "four"], ["--perf-gpus", "integer", "four"]),
        (["--perf-cpu-workers", "-2"], ["--perf-cpu-workers", ">= 1"]),
        (["--perf-model", "resnet51"], ["--perf-model", "resnet51", "resnet50"]),
        (["--perf-framework", "jax"], ["--perf-framework", "jax", "torch, tf"]),
        (["--perf-data-location", "disk"], ["--perf-data-location", "disk", "device, host, python, real"]),
        (["--perf-variable-update", "gossip"], ["--perf-variable-update", "replicated, parameter_server"]),
        (["--perf-precision", "fp8"], ["--perf-precision", "fp32, tf32, fp16, bf16, amp"]),
        (["--perf-batch-size", "0"], ["--perf-batch-size", ">= 1"]),
        (["--perf-steps", "1.5"], ["--perf-steps", "integer"]),
        (["--perf-warmup-steps", "-1"], ["--perf-warmup-steps", ">= 0"]),
        (["--perf-tolerance", "nan"], ["--perf-tolerance", "number"]),
        (["--perf-tolerance", "1.5"], ["--perf-tolerance", "<= 0.99"]),
        (["--perf-missing-baseline", "ignore"], ["--perf-missing-baseline", "skip, fail, pass"]),
        (["--perf-min-scaling-efficiency", "-0.1"], ["--perf-min-scaling-efficiency", ">= 0"]),
        (
            ["--perf-nnodes", "2", "--perf-node-rank", "2", "--perf-rdzv-endpoint", "h:1"],
            ["node rank 2", "--perf-nnodes 2"],
        ),
        (["--perf-nnodes", "2"], ["--perf-nnodes > 1 needs --perf-rdzv-endpoint"]),
        (["--perf-rdzv-endpoint", "host"], ["--perf-rdzv-endpoint", "HOST:PORT"]),
        (["--perf-rdzv-endpoint", "host:99999"], ["--perf-rdzv-endpoint", "1-65535"]),
        (
            ["--perf-nnodes", "2", "--perf-worker-hosts", "a:1"],
            ["--perf-worker-hosts", "1 hosts", "--perf-nnodes is 2"],
        ),
        (["--perf-steps", "3", "--perf-windows", "5"], ["--perf-steps", "5 windows need at least 5 steps", "got 3"]),
        (["--perf-steps", "3"], ["--perf-steps", "5 windows need at least 5 steps", "got 3"]),
        (["--perf-windows", "2"], ["--perf-windows", "at least 5 windows, got 2", "cannot reach p < 0.01"]),
        (["--perf-tolerance", "10"], ["--perf-tolerance", "<= 0.99", "a fraction: 0.10 means 10%"]),
        (["--perf-missing-gpus", "maybe"], ["--perf-missing-gpus", "fail, skip"]),
    ],
)
def test_bad_option_is_one_line_usage_error(suite, args, words):
    result = suite.runpytest_inprocess(*args, "--co")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1, result.stderr.str()
    for word in words:
        assert word in errors[0]
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_pyproject_table_sets_defaults_and_cli_wins(suite):
    suite.makepyprojecttoml("[tool.perfsuite]\ncpu_workers = 4\nmodels = ['cifar10']\nframeworks = ['torch']\n")
    ids = suite.runpytest("--co", "-q", "-m", "cpu").stdout.str()
    assert "test_throughput[torch-cifar10-cpu4-device]" in ids
    assert "resnet50" not in ids
    ids = suite.runpytest("--co", "-q", "-m", "cpu", "--perf-cpu-workers", "2").stdout.str()
    assert "cpu4" not in ids and "test_throughput[torch-cifar10-cpu2-device]" in ids


def test_pyproject_unknown_key_is_usage_error(suite):
    suite.makepyprojecttoml("[tool.perfsuite]\ngpu = 4\n")
    result = suite.runpytest("--co")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown key 'gpu' in [tool.perfsuite]" in result.stderr.str()


def test_pyproject_bad_value_names_the_key(suite):
    suite.makepyprojecttoml("[tool.perfsuite]\nperf_tolerance = 'lots'\n")
    result = suite.runpytest("--co")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "perf_tolerance in [tool.perfsuite]" in result.stderr.str()


def test_device_sweep_and_scaling_cases(suite):
    out = suite.runpytest(
        "--co",
        "-q",
        "--perf-framework",
        "torch",
        "--perf-model",
        "cifar10",
        "--perf-gpus",
        "6",
        "--perf-cpu-workers",
        "3",
    ).stdout.str()
    for n in (1, 2, 4, 6):
        assert f"test_throughput[torch-cifar10-gpu{n}-device]" in out
    for n in (1, 2, 3):
        assert f"test_throughput[torch-cifar10-cpu{n}-device]" in out
    assert "test_scaling[torch-cifar10-gpu1-device]" not in out
    assert "test_scaling[torch-cifar10-gpu2-device]" in out
    assert "test_scaling[torch-cifar10-cpu3-device]" in out


def test_repeatable_dimensions_multiply(suite):
    out = suite.runpytest(
        "--co",
        "-q",
        "-m",
        "cpu",
        "--perf-framework",
        "torch",
        "--perf-model",
        "cifar10",
        "--perf-data-location",
        "device",
        "--perf-data-location",
        "host",
        "--perf-variable-update",
        "replicated,parameter_server",
        "--perf-precision",
        "amp",
        "--perf-batch-size",
        "16",
    ).stdout.str()
    assert "test_throughput[torch-cifar10-cpu1-host-amp-bs16]" in out
    assert "test_throughput[torch-cifar10-cpu2-device-ps-amp-bs16]" in out
    # one device has no variable update: no parameter-server twin of the 1-device case
    assert "cpu1-device-ps" not in out


def test_markers_select_framework_and_device_kind(suite):
    out = suite.runpytest("--co", "-q", "-m", "torch and cpu", "--perf-model", "cifar10").stdout.str()
    assert "gpu" not in out.split("collected")[0]
    assert "test_throughput[torch-cifar10-cpu1-device]" in out


def test_plain_device_count_fixture_is_swept(pytester):
    pytester.makepyfile("def test_n(device_count, device_kind):\n    assert device_count >= 1\n")
    out = pytester.runpytest("--co", "-q", "--perf-cpu-workers", "4", "--perf-gpus", "2").stdout.str()
    for case in ("gpu1", "gpu2", "cpu1", "cpu2", "cpu4"):
        assert f"test_n[{case}]" in out


def test_unrelated_tests_are_untouched(pytester):
    pytester.makepyfile(
        "import pytest\n@pytest.fixture\ndef model_name():\n    return 'mine'\n"
        "def test_x(model_name):\n    assert model_name == 'mine'\n"
    )
    pytester.runpytest().assert_outcomes(passed=1)
