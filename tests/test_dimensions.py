"""The dimensions users tune: precisions, layouts, compilation, inference, independent updates,
repeatable augmentation and the input-efficiency gate; old keys and ids unchanged."""

import json

import pytest
from suite_files import FAKE_ARGS, faked_project

from perfsuite.analysis import mfu
from perfsuite.contract.burst_files import unsupported_reason
from perfsuite.contract.spec import BurstSpec, describe_difference, key_fields, nearest_key
from perfsuite.plugin.cases import Case

pytest_plugins = ["pytester"]


def test_defaults_keep_todays_keys():
    spec = BurstSpec(framework="torch", model="resnet50", device_kind="cuda", devices=2)
    assert spec.key() == "torch/resnet50/gpu2/nodes1/device/bs32/img224/fp32/replicated"
    # The default layout asked for by name is the default: same spec, same key.
    assert spec.replace(memory_format="channels_last") == spec and spec.layout == "channels_last"
    small = BurstSpec(framework="torch", model="cifar10", image_size=24, threads=1)
    assert small.layout == "channels_first" and small.replace(memory_format="channels_first") == small
    assert BurstSpec(framework="tf", model="cifar10", memory_format="channels_last").memory_format == ""


def test_each_new_dimension_has_its_own_key_part_and_reads_back():
    spec = BurstSpec(
        framework="torch",
        model="cifar10",
        image_size=24,
        devices=2,
        variable_update="independent",
        precision="bf16",
        memory_format="channels_last",
        compile=True,
        mode="infer",
    )
    key = spec.key()
    assert key == "torch/cifar10/cpu2/nodes1/device/bs32/img24/bf16/independent/channels_last/compile/infer/threads1"
    fields = key_fields(key)
    assert (
        fields["precision"],
        fields["variable_update"],
        fields["memory_format"],
        fields["compile"],
        fields["mode"],
    ) == ("bf16", "independent", "channels_last", "yes", "infer")
    assert spec.label.endswith("(bf16, independent, channels_last, torch.compile, inference)")
    near = nearest_key(spec.replace(compile=False).key(), [key])
    assert near[1] == ["compile"]
    assert "leave out --perf-compile to match it" not in describe_difference(spec.replace(compile=False).key(), *near)
    assert "--perf-compile matches it" in describe_difference(spec.replace(compile=False).key(), *near)
    with pytest.raises(ValueError, match="mode must be one of"):
        BurstSpec(framework="torch", model="x", mode="eval")


def test_default_case_ids_are_unchanged():
    assert Case("torch", "cifar10", "cpu", 2, "real", "replicated", "fp32", None).id == "torch-cifar10-cpu2-real"
    case = Case(
        "torch", "cifar10", "cpu", 2, "real", "independent", "fp16", None, 1, "channels_last", "infer", "device"
    )
    assert case.id == "torch-cifar10-cpu2-real-independent-fp16-augment-device-channels_last-infer"


def test_a_burst_runs_in_its_measured_layout_and_its_key_says_so_where_keys_meant_another():
    """torch on CPU workers runs ImageNet-sized CNNs in channels_last (measured faster in fp32 and
    bf16); a key without a layout part still names channels_first there, as it always has."""
    cpu = BurstSpec(framework="torch", model="resnet50", batch_size=2, threads=2)
    assert cpu.layout == "channels_last"
    assert cpu.key() == "torch/resnet50/cpu1/nodes1/device/bs2/img224/fp32/channels_last/threads2"
    asked = cpu.replace(memory_format="channels_first")
    assert asked.key() == "torch/resnet50/cpu1/nodes1/device/bs2/img224/fp32/threads2"  # the stored keys' meaning
    # A spec keeps its layout through replace and a round trip through its dict.
    assert asked.replace(devices=2).layout == "channels_first" and asked.single_device() == asked
    assert BurstSpec.from_dict(asked.as_dict()) == asked and BurstSpec.from_dict(cpu.as_dict()) == cpu
    assert key_fields(asked.key())["memory_format"] == "channels_first"
    assert key_fields(cpu.key())["memory_format"] == "channels_last"
    assert BurstSpec(framework="torch", model="resnet50", precision="bf16").layout == "channels_last"
    # Where nothing was measured otherwise, the default is the key's.
    assert BurstSpec(framework="torch", model="cifar10", image_size=24).layout == "channels_first"
    assert BurstSpec(framework="tf", model="resnet50").key().endswith("/fp32/threads1")
    gpu = BurstSpec(framework="torch", model="resnet50", device_kind="cuda", threads=0)
    assert gpu.layout == "channels_last" and "channels" not in gpu.key()
    assert BurstSpec(framework="torch", model="gpt2", seq_len=128).memory_format == ""  # no layout
    # The case's id names a layout only where it is not the default; the spec carries it.
    from perfsuite.plugin.cases import Case

    case = Case("torch", "resnet50", "cpu", 1, "device", "replicated", "fp32", None)
    assert case.id == "torch-resnet50-cpu1-device" and case.default_layout == "channels_last"
    old = nearest_key(cpu.key(), [asked.key()])
    assert old is not None and old[1] == ["memory_format"]
    assert "--perf-memory-format channels_first matches it" in describe_difference(cpu.key(), *old)


def test_bisect_runs_the_layout_a_key_names():
    """A key saved before the measured default names channels_first without saying so: bisect asks
    for it by name, so that a commit whose default is channels_last measures what the key meant."""
    from perfsuite.bisect.selection import key_args

    def layout(key):
        args = key_args(key, [])
        return args[args.index("--perf-memory-format") + 1] if "--perf-memory-format" in args else None

    assert layout("torch/resnet50/cpu1/nodes1/device/bs2/img224/fp32/threads2") == "channels_first"
    assert layout("torch/resnet50/cpu1/nodes1/device/bs2/img224/fp32/channels_last/threads2") == "channels_last"
    assert layout("torch/gpt2/cpu1/nodes1/device/bs1/seq128/fp32/threads1") is None  # no layout


def test_inference_counts_one_forward_pass_per_image():
    assert mfu.achieved_tflops(1e9, 100, "infer") * 3 == pytest.approx(mfu.achieved_tflops(1e9, 100))


def test_an_unsupported_line_is_told_from_an_error():
    assert (
        unsupported_reason("rank 0: Unsupported: bf16 needs compute capability 8.0")
        == "bf16 needs compute capability 8.0"
    )
    assert unsupported_reason("rank 0: RuntimeError: boom") is None and unsupported_reason(None) is None


# -- through pytest, with faked bursts ----------------------------------------------------------


@pytest.fixture
def faked(pytester):
    return faked_project(pytester)


@pytest.mark.parametrize(
    "args, words",
    [
        (
            ["--perf-compile", "--perf-framework", "tf"],
            ["--perf-compile: applies to --perf-framework torch only", "measures tf"],
        ),
        (["--perf-xla", "--perf-framework", "torch"], ["--perf-xla: applies to --perf-framework tf only"]),
        (["--perf-memory-format", "nhwc"], ["--perf-memory-format", "channels_last, channels_first"]),
        (["--perf-mode", "eval"], ["--perf-mode", "train, infer"]),
        (["--perf-min-input-efficiency", "1.5"], ["--perf-min-input-efficiency", "<= 1"]),
    ],
)
def test_bad_combinations_are_one_line(faked, args, words):
    result = faked.runpytest_inprocess(*[a for a in FAKE_ARGS if a not in ("--perf-framework", "torch")], *args, "--co")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [x for x in result.stderr.lines if x.startswith("ERROR:")]
    for word in words:
        assert word in line


def test_the_matrix_sweeps_every_new_dimension_with_skips_that_say_why(faked):
    result = faked.runpytest_inprocess(
        "--perf-framework",
        "torch",
        "--perf-framework",
        "tf",
        "--perf-model",
        "cifar10",
        "-m",
        "cpu",
        "--perf-cpu-workers",
        "2",
        "--perf-precision",
        "fp32",
        "--perf-precision",
        "tf32",
        "--perf-memory-format",
        "channels_first",
        "--perf-mode",
        "train",
        "--perf-mode",
        "infer",
        "--perf-data-location",
        "device",
        "--perf-data-location",
        "real",
        "--perf-augment-on",
        "cpu",
        "--perf-augment-on",
        "device",
        "--perf-variable-update",
        "replicated",
        "--perf-variable-update",
        "independent",
        "--co",
        "-q",
        "-rs",
        "test_suite.py::test_throughput",
    )
    ids = [line.split("[", 1)[1].rstrip("]") for line in result.stdout.lines if "::test_throughput[" in line]
    assert "torch-cifar10-cpu1-device" in ids and "torch-cifar10-cpu2-real-independent-augment-device-infer" in ids
    assert "tf-cifar10-cpu1-device-channels_first" in ids  # torch's default there is channels_first
    assert all("-real" in i for i in ids if "augment" in i)  # only `real` has a place to augment
    assert len(ids) == len(set(ids))
    listed = faked.runpytest_inprocess(
        "--perf-framework",
        "tf",
        "--perf-model",
        "cifar10",
        "-m",
        "cpu",
        "--perf-cpu-workers",
        "1",
        "--perf-precision",
        "tf32",
        "--perf-memory-format",
        "channels_first",
        "-rs",
        "test_suite.py::test_throughput",
    )
    out = listed.stdout.str()
    assert "tf32 needs GPU tensor cores" in out
    listed = faked.runpytest_inprocess(
        "--perf-framework",
        "tf",
        "--perf-model",
        "cifar10",
        "-m",
        "cpu",
        "--perf-cpu-workers",
        "1",
        "--perf-memory-format",
        "channels_first",
        "-rs",
        "test_suite.py::test_throughput",
    )
    assert (
        "TensorFlow runs NCHW (channels_first) convolutions on CPU workers only under --perf-xla" in listed.stdout.str()
    )
    listed = faked.runpytest_inprocess(
        "--perf-framework",
        "tf",
        "--perf-model",
        "cifar10",
        "-m",
        "cpu",
        "--perf-cpu-workers",
        "1",
        "--perf-memory-format",
        "channels_first",
        "--perf-xla",
        "-rs",
        "test_suite.py::test_throughput",
    )
    out = listed.stdout.str()
    assert "NCHW" not in out and "no throughput baseline for tf/cifar10/cpu1/" in out  # it ran: XLA lays out NCHW
    assert "/xla/channels_first/" in out


def test_an_unsupported_device_skips_with_its_reason_and_measures_nothing(faked, monkeypatch):
    monkeypatch.setenv("PERFSUITE_FAKE_UNSUPPORTED", "bf16 needs compute capability 8.0 or later; this GPU is 7.0")
    result = faked.runpytest_inprocess(*FAKE_ARGS, "-rs")
    out = result.stdout.str()
    assert "bf16 needs compute capability 8.0 or later; this GPU is 7.0" in out
    assert "no burst ran" in out and result.ret != 0  # a gate that measured nothing is not green


def test_min_input_efficiency_fails_an_input_bound_case(faked, monkeypatch):
    monkeypatch.setenv("PERFSUITE_FAKE_RATE_HOST", "60")
    args = [
        *FAKE_ARGS,
        "--perf-data-location",
        "device",
        "--perf-data-location",
        "host",
        "--perf-missing-baseline",
        "pass",
        "--perf-json",
        "out.json",
        "test_suite.py::test_throughput",
    ]
    result = faked.runpytest_inprocess(*args, "--perf-min-input-efficiency", "0.9")
    result.assert_outcomes(passed=1, failed=1)
    assert (
        "input efficiency: torch cifar10 on 1 CPU worker, batch 64/device, data location host: 60 img/s is "
        "0.60 of the device data location's 100 img/s (floor 0.90)"
    ) in result.stdout.str()
    rows = {r["data_location"]: r for r in json.loads(faked.path.joinpath("out.json").read_text())["results"]}
    assert rows["host"]["input_efficiency"] == pytest.approx(0.6)
    faked.runpytest_inprocess(*args, "--perf-min-input-efficiency", "0.5").assert_outcomes(passed=2)


def test_the_independent_twin_states_the_communication_overhead(faked, monkeypatch):
    monkeypatch.setenv("PERFSUITE_FAKE_RATE_REPLICATED", "80")
    # What is checked is the report's text; drawing its plots (matplotlib) would cost most of this test.
    monkeypatch.setattr("perfsuite.reporting.folder._draw", lambda records, series, view: ([], {}, []))
    args = [
        *FAKE_ARGS,
        "--perf-cpu-workers",
        "2",
        "--perf-variable-update",
        "independent",
        "--perf-variable-update",
        "replicated",
        "--perf-missing-baseline",
        "pass",
        "--perf-min-scaling-efficiency",
        "1.05",
        "--perf-report",
        "report",
    ]
    result = faked.runpytest_inprocess(*args)
    out = result.stdout.str()
    # replicated at 80 img/s a device against 100 alone: 20% of the step is the gradient exchange.
    # (A floor no burst reaches makes the scaling tests fail, so their messages show.)
    assert "communication overhead 20.0% (1 - replicated 160 / independent 200 img/s)" in out
    report = faked.path.joinpath("report", "report.md").read_text()
    assert "communication overhead 20.0%" in report


INDEPENDENT = "test_suite.py::test_throughput[torch-cifar10-cpu2-device-independent]"
REPLICATED_SCALING = "test_suite.py::test_scaling[torch-cifar10-cpu2-device]"


@pytest.mark.parametrize("tests", [(INDEPENDENT, REPLICATED_SCALING), (REPLICATED_SCALING, INDEPENDENT)])
def test_the_communication_overhead_is_recorded_whichever_burst_runs_first(faked, monkeypatch, tests):
    monkeypatch.setenv("PERFSUITE_FAKE_RATE_REPLICATED", "80")
    args = [*FAKE_ARGS, "--perf-cpu-workers", "2", "--perf-missing-baseline", "pass", "--perf-json", "out.json"]
    args += ["--perf-variable-update", "replicated", "--perf-variable-update", "independent"]
    args += ["--perf-min-scaling-efficiency", "0.5", *tests]  # a floor every case passes
    result = faked.runpytest_inprocess(*args, "-v")
    result.assert_outcomes(passed=2)
    ran = [line.split(" ", 1)[0] for line in result.stdout.lines if " PASSED " in line]
    assert ran == list(tests)
    rows = json.loads(faked.path.joinpath("out.json").read_text())["results"]
    (replicated,) = [r for r in rows if r["variable_update"] == "replicated" and r["devices"] == 2]
    assert replicated["communication_overhead"] == pytest.approx(0.2)
    assert all(r["communication_overhead"] is None for r in rows if r is not replicated)


def test_a_twin_that_cannot_be_measured_fails_its_case_before_anything_is_recorded(faked, monkeypatch):
    """The host case's device twin, run for input efficiency, crashes: the case's record says
    error, once, and nothing says it passed (the twin once ran after the case was recorded)."""
    import xml.etree.ElementTree as ET

    from suite_files import FAKE_BURSTS

    faked.makeconftest(
        FAKE_BURSTS
        + """
_measured = fake_run_burst

def fake_run_burst(spec, *args, **kwargs):
    if spec.data_location == "device" and os.environ.get("PERFSUITE_FAKE_DEVICE_CRASH"):
        from perfsuite.plugin.launch import BurstError
        raise BurstError("rank 0: RuntimeError: device data refused")
    return _measured(spec, *args, **kwargs)
"""
    )
    host = [*FAKE_ARGS, "--perf-data-location", "host", "test_suite.py::test_throughput"]
    faked.runpytest_inprocess(*host, "--perf-save-baseline").assert_outcomes(passed=1)
    monkeypatch.setenv("PERFSUITE_FAKE_DEVICE_CRASH", "1")
    result = faked.runpytest_inprocess(*host, "--perf-min-input-efficiency", "0.9", "--junitxml", "junit.xml")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "burst failed (torch cifar10 on 1 CPU worker, batch 64/device, data location device)" in out
    case = next(ET.parse(faked.path / "junit.xml").getroot().iter("testcase"))
    props = [(p.get("name"), p.get("value")) for p in case.iter("property")]
    assert [v for name, v in props if name == "verdict"] == ["error"]
    assert "device data refused" in dict(props)["burst_error"]
    row = next(line for line in out.splitlines() if line.startswith("test_suite::test_throughput["))
    assert row.rstrip().endswith("error")  # the table's row for the case, not "pass"
