"""The sharded variable update and activation checkpointing as dimensions: keys, labels, ids,
the option, the refusals up front, HFU beside MFU; with faked bursts, what the gate finds of a
sharded burst (scaling efficiency, communication overhead) is what it finds of a replicated one."""

import json

import pytest
from suite_files import FAKE_ARGS, faked_project

from perfsuite.analysis import mfu
from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.record import WorkerRecord
from perfsuite.contract.spec import BurstSpec, describe_difference, key_fields, nearest_key
from perfsuite.plugin import cases
from perfsuite.plugin.cases import Case
from perfsuite.reporting import terminal

pytest_plugins = ["pytester"]

GPT2 = BurstSpec(framework="torch", model="gpt2", devices=2, batch_size=1, seq_len=128, threads=1)


def test_checkpointing_has_a_key_part_only_when_on_and_reads_back():
    plain = GPT2.replace(variable_update="sharded")
    assert plain.key() == "torch/gpt2/cpu2/nodes1/device/bs1/seq128/fp32/sharded/threads1"
    checkpointed = plain.replace(activation_checkpointing=True)
    key = checkpointed.key()
    assert key == "torch/gpt2/cpu2/nodes1/device/bs1/seq128/fp32/sharded/ac/threads1"
    fields = key_fields(key)
    assert (fields["variable_update"], fields["activation_checkpointing"]) == ("sharded", "on")
    assert key_fields(plain.key())["activation_checkpointing"] == "off"
    assert checkpointed.label.endswith("(sharded, activation checkpointing)")
    assert checkpointed.short_name == "torch-gpt2-cpu2-device-sharded-ac"
    near = nearest_key(key, [plain.key()])
    assert near is not None and near[1] == ["activation_checkpointing"]
    assert "--perf-activation-checkpointing off matches it" in describe_difference(key, *near)
    # the 1-device twin of the scaling test keeps the checkpointing and drops the update
    assert checkpointed.single_device().key() == "torch/gpt2/cpu1/nodes1/device/bs1/seq128/fp32/ac/threads1"


def test_bisect_runs_a_checkpointed_keys_case():
    from perfsuite.bisect.selection import key_args

    args = key_args(GPT2.replace(variable_update="sharded", activation_checkpointing=True).key(), [])
    assert args[args.index("--perf-variable-update") + 1] == "sharded"
    assert args[args.index("--perf-activation-checkpointing") + 1] == "on"
    assert "--perf-activation-checkpointing" not in key_args(GPT2.key(), [])


def test_case_ids_name_the_update_and_checkpointing():
    case = Case("torch", "gpt2", "cpu", 2, "device", "sharded", "bf16", None, activation_checkpointing=True)
    assert case.id == "torch-gpt2-cpu2-device-sharded-bf16-ac"
    assert Case("torch", "gpt2", "cpu", 2, "device", "replicated", "fp32", None).id == "torch-gpt2-cpu2-device"
    assert cases.short_id(["model_name", "activation_checkpointing"], case) == "gpt2-ac"


@pytest.mark.parametrize(
    "case, words",
    [
        (Case("tf", "gpt2", "cpu", 2, "device", "sharded", "fp32", None), "TensorFlow has no sharded variable update"),
        (Case("torch", "gpt2", "cpu", 2, "device", "sharded", "fp16", None), "sharded fp16 is not run"),
        (
            Case("tf", "gpt2", "cpu", 1, "device", "replicated", "fp32", None, activation_checkpointing=True),
            "TensorFlow has no activation checkpointing",
        ),
        (
            Case(
                "torch",
                "gpt2",
                "cpu",
                1,
                "device",
                "replicated",
                "fp32",
                None,
                mode="infer",
                activation_checkpointing=True,
            ),
            "an inference burst keeps no activations",
        ),
    ],
)
def test_what_cannot_run_is_refused_with_one_line(case, words):
    reason = cases.skip_reason(case, 0)
    assert reason is not None and words in reason and "\n" not in reason


def test_what_can_run_is_not_refused():
    sharded = Case("torch", "gpt2", "cpu", 2, "device", "sharded", "bf16", None, activation_checkpointing=True)
    assert cases.skip_reason(sharded, 0) is None
    # one device has no variable update: its case is replicated, whatever was asked
    assert cases.sharding_gap(Case("torch", "gpt2", "cpu", 1, "device", "sharded", "fp16", None)) is None


def _record(spec: BurstSpec, recomputed: float | None) -> WorkerRecord:
    model = ModelInfo(
        "m", "torch", None, 8, 1, 1_000_000, None, 512, "x:y", None, workload="token", optimizer="adamw",
        seq_len=128, cpu_seq_len=128, vocab_size=512, objective="causal", layers=4, heads=4, head_dim=16,
        embedding_params=0,
    )  # fmt: skip
    return WorkerRecord(
        spec=spec, model=model, framework_version="x", device_name="NVIDIA A100-SXM4-80GB", precision_dtype="bfloat16",
        fp32_math="ieee", samples=(1.0,), window_seconds=(1.0,), items_per_window=1, per_rank=(), loss_first=1.0,
        loss_last=0.5, peak_memory_bytes=1, warmup_seconds=0.0, recomputed_flops_per_item=recomputed,
    )  # fmt: skip


def test_hfu_counts_the_recomputation_and_mfu_does_not():
    spec = GPT2.replace(device_kind="cuda", threads=0, precision="bf16", activation_checkpointing=True)
    per_token = 6 * 1_000_000 + 12 * 4 * 4 * 16 * 128
    recomputed = 2 * 900_000 + 4 * 4 * 4 * 16 * 128  # one more forward of the blocks
    found = mfu.fields(_record(spec, recomputed), spec, 1e6)
    assert found["achieved_tflops"] == pytest.approx(per_token * 1e6 / 1e12)
    assert found["mfu"] == pytest.approx(found["achieved_tflops"] / (312 * 2))
    assert found["hfu"] == pytest.approx(found["mfu"] * (per_token + recomputed) / per_token)
    plain = spec.replace(activation_checkpointing=False)
    assert mfu.fields(_record(plain, None), plain, 1e6)["hfu"] is None
    assert terminal._mfu_cell({"mfu": 0.31, "hfu": 0.412}) == "31.0% (HFU 41.2%)"
    assert terminal._mfu_cell({"mfu": 0.31, "hfu": None}) == "31.0%"


# -- through the plugin, bursts faked -------------------------------------------------------

WITHOUT_FRAMEWORK = [a for a in FAKE_ARGS if a not in ("--perf-framework", "torch", "--perf-cpu-workers", "1")]


@pytest.fixture
def faked(pytester):
    return faked_project(pytester)


def test_checkpointing_asked_of_tensorflow_alone_is_one_line(faked):
    result = faked.runpytest_inprocess(
        *WITHOUT_FRAMEWORK, "--perf-framework", "tf", "--perf-activation-checkpointing", "on", "--co"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [x for x in result.stderr.lines if x.startswith("ERROR:")]
    assert "--perf-activation-checkpointing: applies to --perf-framework torch only" in line
    result = faked.runpytest_inprocess(*FAKE_ARGS, "--perf-activation-checkpointing", "maybe", "--co")
    (line,) = [x for x in result.stderr.lines if x.startswith("ERROR:")]
    assert "--perf-activation-checkpointing: 'maybe' is not one of off, on" in line


def test_the_matrix_lists_sharded_and_checkpointed_cases(faked):
    result = faked.runpytest_inprocess(
        *WITHOUT_FRAMEWORK,
        "--perf-framework", "torch", "--perf-framework", "tf", "--perf-cpu-workers", "2",
        "--perf-variable-update", "replicated", "--perf-variable-update", "sharded",
        "--perf-activation-checkpointing", "off,on", "--co", "-q", "test_suite.py::test_throughput",
    )  # fmt: skip
    ids = {line.split("[", 1)[1].rstrip("]") for line in result.stdout.lines if "::test_throughput[" in line}
    assert {"torch-cifar10-cpu1-device", "torch-cifar10-cpu1-device-ac", "torch-cifar10-cpu2-device-sharded-ac"} <= ids
    assert "tf-cifar10-cpu2-device-sharded" in ids and "torch-cifar10-cpu1-device-sharded" not in ids


def test_refused_cases_skip_with_their_reason_and_measure_nothing(faked):
    result = faked.runpytest_inprocess(
        *WITHOUT_FRAMEWORK,
        "--perf-framework", "tf", "--perf-framework", "torch", "--perf-cpu-workers", "2",
        "--perf-variable-update", "sharded", "--perf-precision", "fp32,fp16", "-rs", "-k", "cpu2",
        "test_suite.py::test_throughput",
    )  # fmt: skip
    out = result.stdout.str()
    assert "TensorFlow has no sharded variable update (FSDP2's fully_shard is torch's)" in out
    assert "sharded fp16 is not run" in out
    logged = (faked.path / "bursts.log").read_text().split()
    assert logged == ["torch/cifar10/cpu2/nodes1/device/bs64/img24/fp32/sharded/threads1"]


def test_a_sharded_bursts_efficiency_and_overhead_are_found_as_replicateds(faked, monkeypatch):
    """1 - sharded / independent, and sharded(2) / (2 x 1 device), with nothing told of sharding."""
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "100")
    monkeypatch.setenv("PERFSUITE_FAKE_RATE_SHARDED", "80")
    monkeypatch.setenv("PERFSUITE_FAKE_PEAK_MB", "100")
    result = faked.runpytest_inprocess(
        *WITHOUT_FRAMEWORK,
        "--perf-framework", "torch", "--perf-cpu-workers", "2", "--perf-variable-update", "sharded,independent",
        "--perf-missing-baseline", "pass", "--perf-json", "out.json", "test_suite.py::test_scaling",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    rows = json.loads((faked.path / "out.json").read_text())["results"]
    (sharded,) = [r for r in rows if r["variable_update"] == "sharded"]
    assert sharded["scaling_efficiency"] == pytest.approx(0.8)
    assert sharded["communication_overhead"] == pytest.approx(0.2)
    assert "communication overhead 20.0% (1 - sharded 160 / independent 200 img/s)" in result.stdout.str()
