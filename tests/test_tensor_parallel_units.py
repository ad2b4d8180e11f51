"""Tensor parallelism as a dimension: the option and its short spelling, keys that name a TP degree
only above 1, the case matrix and its refusals, the registration of a plan, the figures a row
carries; and the TP plan's regrouping of a fused q/k/v projection, checked in one process by adding
up what each rank's shard computes."""

import json
from types import SimpleNamespace

import pytest
from suite_files import FAKE_ARGS, SUITE, faked_project

from perfsuite.analysis.measurement import Measurement
from perfsuite.analysis.result import BurstResult
from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.record import RankEntry, WorkerRecord
from perfsuite.contract.spec import BurstSpec, describe_difference, key_fields, nearest_key
from perfsuite.models.registry import ModelError, register_token_model
from perfsuite.plugin import cases
from perfsuite.plugin.cases import Case
from perfsuite.reporting import perf_json

pytest_plugins = ["pytester"]

LLAMA = BurstSpec(framework="torch", model="llama", devices=2, batch_size=1, seq_len=128, threads=1)
KEY = "torch/llama/cpu2/nodes1/device/bs1/seq128/fp32/replicated/threads1"


def test_a_key_names_its_tp_degree_only_above_one():
    assert LLAMA.tp == 1 and LLAMA.key() == KEY  # every stored key keeps its meaning
    assert key_fields(KEY)["tp"] == "1"
    split = LLAMA.replace(tp=2)
    key = split.key()
    assert key == "torch/llama/cpu2/nodes1/device/bs1/seq128/fp32/replicated/tp2/threads1"
    assert key_fields(key)["tp"] == "2" and key_fields(key)["threads"] == "1"
    assert split.short_name == "torch-llama-cpu2-device-tp2"
    assert split.label.endswith("(TP 2)")  # one TP group: no data-parallel update to name
    near = nearest_key(key, [KEY])
    assert near is not None and near[1] == ["tp"]
    assert "TP degree (2 here, 1 there: --perf-tp 1 matches it)" in describe_difference(key, *near)


def test_tp_splits_the_devices_into_data_parallel_groups():
    two_d = LLAMA.replace(devices=4, tp=2, variable_update="sharded")
    assert (two_d.world_size, two_d.data_parallel) == (4, 2)
    assert two_d.key() == "torch/llama/cpu4/nodes1/device/bs1/seq128/fp32/sharded/tp2/threads1"
    assert two_d.label.endswith("(sharded, TP 2)")
    # one TP group has no variable update: normalised, so equal bursts have equal keys
    assert LLAMA.replace(tp=2, variable_update="sharded") == LLAMA.replace(tp=2)
    # the scaling test's twin is one device, without TP
    assert two_d.single_device().key() == "torch/llama/cpu1/nodes1/device/bs1/seq128/fp32/threads1"
    with pytest.raises(ValueError, match=r"devices \(3\) must be a multiple of tp \(2\)"):
        LLAMA.replace(devices=3, tp=2)
    with pytest.raises(ValueError, match="tp must be >= 1"):
        LLAMA.replace(tp=0)


def test_a_written_spec_without_tp_reads_as_tp_one():
    written = LLAMA.as_dict()
    del written["tp"]
    assert BurstSpec.from_dict(written).tp == 1


def test_bisect_runs_a_tp_keys_case():
    from perfsuite.bisect.selection import key_args

    args = key_args(LLAMA.replace(devices=4, tp=2, variable_update="sharded").key(), [])
    assert args[args.index("--perf-tp") + 1] == "2"
    assert args[args.index("--perf-variable-update") + 1] == "sharded"
    assert "--perf-tp" not in key_args(KEY, [])


def test_case_ids_name_the_tp_degree():
    case = Case("torch", "llama", "cpu", 4, "device", "sharded", "bf16", None, tp=2)
    assert case.id == "torch-llama-cpu4-device-sharded-tp2-bf16"
    assert Case("torch", "llama", "cpu", 2, "device", "replicated", "fp32", None).id == "torch-llama-cpu2-device"
    assert cases.short_id(["model_name", "tp"], case) == "llama-tp2"


def _case(framework, model, devices, tp, update="replicated", precision="fp32", kind="cpu") -> Case:
    return Case(framework, model, kind, devices, "device", update, precision, None, tp=tp)


@pytest.mark.parametrize(
    "case, words",
    [
        (_case("tf", "llama", 2, 2), "TensorFlow has no tensor parallelism"),
        (_case("torch", "llama", 1, 2), "this case has 1 CPU worker"),
        (_case("torch", "llama", 6, 4, kind="cuda"), "this case has 6 GPUs"),
        (_case("torch", "resnet50", 2, 2), "resnet50 has no tensor-parallel plan"),
        (_case("torch", "moe", 2, 2), "moe has no tensor-parallel plan"),
        (_case("torch", "gpt2", 8, 8), "12 attention heads do not split evenly over TP 8"),
        (_case("torch", "llama", 2, 2, precision="fp16"), "TP fp16 is not run"),
        (_case("torch", "llama", 4, 2, update="parameter_server"), "not parameter_server"),
    ],
)
def test_what_cannot_run_with_tp_is_refused_with_one_line(case, words):
    reason = cases.skip_reason(case, 8)
    assert reason is not None and words in reason and "\n" not in reason


def test_the_tensorflow_refusal_names_what_it_would_need():
    reason = cases.tensor_parallel_gap(Case("tf", "gpt2", "cpu", 2, "device", "replicated", "fp32", None, tp=2))
    assert reason is not None and "DTensor" in reason and "keras.distribution.ModelParallel" in reason


def test_what_can_run_with_tp_is_not_refused():
    for model in ("gpt2", "bert", "llama"):
        for update, devices in (("replicated", 2), ("sharded", 4), ("independent", 4)):
            case = Case("torch", model, "cpu", devices, "device", update, "bf16", None, tp=2)
            assert cases.tensor_parallel_gap(case) is None, (model, update)
    assert cases.tensor_parallel_gap(Case("torch", "llama", "cuda", 4, "device", "sharded", "bf16", None, tp=4)) is None


def _options(**changes):
    from perfsuite.config.options import resolve

    given = {"framework": ["torch"], "model": ["llama"], "cpu_workers": "4", **changes}
    return resolve(lambda dest: given.get(dest), {}, "pyproject.toml", __import__("pathlib").Path("."))


def test_the_matrix_sweeps_tp_like_the_batch():
    options = _options(tp=["1,2"], variable_update=["replicated", "sharded"])
    assert options.tp == (1, 2)
    found = {(c.device_count, c.tp, c.variable_update) for c in cases.build_cases(options, 0) if c.device_kind == "cpu"}
    assert found == {
        (1, 1, "replicated"),
        (1, 2, "replicated"),  # skipped: one device is no TP group of 2
        (2, 1, "replicated"),
        (2, 1, "sharded"),
        (2, 2, "replicated"),  # one TP group: no update to vary
        (4, 1, "replicated"),
        (4, 1, "sharded"),
        (4, 2, "replicated"),
        (4, 2, "sharded"),
    }
    spec = cases.burst_spec(options, {**_values(), "device_count": 4, "tp": 2, "variable_update": "sharded"}, 0.1)
    assert (spec.tp, spec.data_parallel, spec.variable_update) == (2, 2, "sharded")
    assert cases.burst_spec(options, _values(), 0.1).tp == 1  # a test not parametrized by TP


def _values() -> dict:
    return {
        "framework": "torch",
        "model_name": "llama",
        "device_kind": "cpu",
        "device_count": 2,
        "data_location": "device",
        "variable_update": "replicated",
        "precision": "fp32",
        "batch_size": None,
        "seq_len": None,
    }


def test_a_token_model_brings_its_plan_by_function_or_name():
    def build(vocab_size=8, seq_len=4):
        return None

    def plan(model, tp_mesh):
        return None

    shapes = dict(framework="torch", seq_len=4, vocab_size=8, batch_size=1, objective="causal")
    structure = dict(layers=1, heads=2, head_dim=2, embedding_params=0)
    register_token_model("tp_plan_by_function", **shapes, **structure, tp_plan=plan)(build)
    from perfsuite.models.registry import get_model

    assert get_model("torch", "tp_plan_by_function").tp_plan == f"{__name__}:{plan.__qualname__}"
    assert get_model("torch", "llama").tp_plan == "perfsuite.models.torch.llama:tp_plan"
    assert get_model("torch", "resnet50").tp_plan is None and get_model("tf", "llama").tp_plan is None
    with pytest.raises(ModelError, match="tp_plan must be a function or 'module:function'"):
        register_token_model("tp_plan_bad", **shapes, **structure, tp_plan="no colon")(build)


def _tp_record(spec: BurstSpec, collectives: dict | None) -> WorkerRecord:
    model = ModelInfo(
        "llama", "torch", None, 8, 1, 1_000_000, None, 512, "x:y", None, workload="token", optimizer="adamw",
        seq_len=128, cpu_seq_len=128, vocab_size=512, objective="causal", layers=4, heads=4, head_dim=16,
        embedding_params=0,
    )  # fmt: skip
    ranks = tuple(
        RankEntry(r, "h", "cpu", (1.0,), 128.0, 1.0, 0.5, (r + 1) * 2**20, 0.0) for r in range(spec.world_size)
    )
    return WorkerRecord(
        spec=spec, model=model, framework_version="x", device_name="cpu", precision_dtype="float32",
        fp32_math=None, samples=(256.0,) * 5, window_seconds=(1.0,) * 5, items_per_window=256, per_rank=ranks,
        loss_first=1.0, loss_last=0.5, peak_memory_bytes=spec.world_size * 2**20, warmup_seconds=0.0,
        tp_collectives=collectives,
    )  # fmt: skip


def test_a_rows_tp_figures():
    spec = LLAMA.replace(devices=4, tp=2, variable_update="sharded")
    collectives = {"share": 0.25, "collective_ms": 2.0, "step_ms": 8.0, "steps": 3, "tool": "torch.profiler"}
    row = perf_json.row(BurstResult(Measurement(spec, _tp_record(spec, collectives))))
    assert row["tp"] == 2 and row["world_size"] == 4
    assert row["tokens_per_sec"] == 256.0
    assert row["per_device_throughput"] == row["per_device_tokens_per_sec"] == 64.0
    assert row["tp_collective_share"] == 0.25 and row["tp_collectives"]["tool"] == "torch.profiler"
    assert [r["peak_memory_bytes"] for r in row["per_rank"]] == [2**20, 2**21, 3 * 2**20, 2**22]
    json.dumps(row)
    plain = LLAMA
    row = perf_json.row(BurstResult(Measurement(plain, _tp_record(plain, None))))
    assert row["tp"] == 1 and row["tp_collective_share"] is None and row["tp_collectives"] is None


def test_the_worker_counts_each_tp_groups_batch_once():
    from perfsuite.worker.measure import combine_ranks

    seconds = [[1.0, 2.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]
    assert combine_ranks(seconds, 100) == [400.0, 200.0]
    assert combine_ranks(seconds, 100, replicas=2) == [200.0, 100.0]  # TP 2: two groups of two ranks


def test_the_functional_collectives_are_tps_and_counted_once():
    from perfsuite.worker.backends.torch.tp_comms import functional_ms

    def event(name, cpu_us, device_us=0.0, parent=None):
        return SimpleNamespace(name=name, cpu_time_total=cpu_us, device_time_total=device_us, cpu_parent=parent)

    backward = event("_FromTorchTensorBackward", 900.0)
    reduce = event("_c10d_functional::all_reduce", 300.0, 250.0, backward)
    events = [
        backward,
        reduce,
        event("c10d::allreduce_", 280.0, 250.0, reduce),  # inside TP's all-reduce: counted in it
        event("_c10d_functional::wait_tensor", 200.0, 0.0, backward),
        event("c10d::_allgather_base_", 500.0, 400.0, event("FSDP::all_gather", 600.0)),  # the update's
        event("gloo:all_reduce", 700.0),  # gloo's own thread
    ]
    assert functional_ms(events, cuda=False) == pytest.approx(0.5)
    assert functional_ms(events, cuda=True) == pytest.approx(0.25)


@pytest.mark.parametrize("heads, kv_heads, tp", [(4, 4, 2), (4, 2, 2), (8, 2, 2), (4, 4, 4), (6, 3, 3)])
def test_the_regrouped_projection_splits_into_whole_heads(heads, kv_heads, tp):
    """What each TP rank computes from its shard of the regrouped q/k/v rows and of the output
    projection's columns adds up to the whole attention's output (RowwiseParallel's all-reduce)."""
    torch = pytest.importorskip("torch")
    from perfsuite.models.torch.transformer_layers import Rotary, SelfAttention, split_heads

    torch.manual_seed(0)
    d_model, seq = heads * 8, 5
    whole = SelfAttention(d_model, heads, kv_heads, causal=True, rotary=Rotary(8, seq))
    x = torch.randn(2, seq, d_model)
    expected = whole(x)
    split_heads(whole, tp)
    assert (whole.heads, whole.kv_heads) == (heads // tp, kv_heads // tp)
    rows = whole.qkv.weight.shape[0] // tp
    columns = whole.proj.weight.shape[1] // tp
    total = torch.zeros_like(expected)
    for rank in range(tp):
        part = SelfAttention(d_model, heads // tp, kv_heads // tp, causal=True, rotary=whole.rotary)
        part.head_dim = whole.head_dim
        with torch.no_grad():
            part.qkv = torch.nn.Linear(d_model, rows)
            part.qkv.weight.copy_(whole.qkv.weight[rank * rows : (rank + 1) * rows])
            part.qkv.bias.copy_(whole.qkv.bias[rank * rows : (rank + 1) * rows])
            part.proj = torch.nn.Linear(columns, d_model)
            part.proj.weight.copy_(whole.proj.weight[:, rank * columns : (rank + 1) * columns])
            part.proj.bias.copy_(whole.proj.bias if rank == 0 else torch.zeros_like(whole.proj.bias))
        total += part(x)
    torch.testing.assert_close(total, expected, rtol=1e-5, atol=1e-5)


def test_heads_that_do_not_split_are_refused_by_the_worker():
    pytest.importorskip("torch")
    from perfsuite.contract.burst_files import Unsupported
    from perfsuite.models.torch.transformer_layers import SelfAttention, split_heads

    with pytest.raises(Unsupported, match="4 attention heads and 2 key/value heads do not split evenly over TP 4"):
        split_heads(SelfAttention(32, 4, 2), 4)


# -- through the plugin, bursts faked -------------------------------------------------------

WITHOUT_FRAMEWORK = [a for a in FAKE_ARGS if a not in ("--perf-framework", "torch", "--perf-cpu-workers", "1")]


@pytest.fixture
def faked(pytester):
    return faked_project(pytester)


def test_tp_asked_of_tensorflow_alone_is_one_line(faked):
    result = faked.runpytest_inprocess(*WITHOUT_FRAMEWORK, "--perf-framework", "tf", "--perf-tp", "2", "--co")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [x for x in result.stderr.lines if x.startswith("ERROR:")]
    assert "--perf-tp: tensor parallelism runs in torch only, and this run measures tf" in line
    assert "keras.distribution.ModelParallel" in line and "Traceback" not in result.stderr.str()
    result = faked.runpytest_inprocess(*FAKE_ARGS, "--perf-tp", "0", "--co")
    (line,) = [x for x in result.stderr.lines if x.startswith("ERROR:")]
    assert "--perf-tp: must be >= 1, got '0'" in line


def test_the_matrix_lists_tp_cases_and_skips_what_cannot_split(faked):
    result = faked.runpytest_inprocess(
        *WITHOUT_FRAMEWORK,
        "--perf-framework", "torch", "--perf-model", "llama", "--perf-cpu-workers", "4", "--perf-tp", "1,2",
        "--perf-variable-update", "sharded", "-rs", "test_suite.py::test_throughput",
    )  # fmt: skip
    out = result.stdout.str()
    assert "TP 2 splits each model over 2 devices of a node" in out and "this case has 1 CPU worker" in out
    logged = (faked.path / "bursts.log").read_text().split()
    assert "torch/llama/cpu2/nodes1/device/bs1/seq128/fp32/replicated/tp2/threads1" in logged
    assert "torch/llama/cpu4/nodes1/device/bs1/seq128/fp32/sharded/tp2/threads1" in logged
    assert "torch/llama/cpu4/nodes1/device/bs1/seq128/fp32/sharded/threads1" in logged


def test_the_short_spelling_means_the_same(pytester):
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeconftest(
        "from perfsuite.plugin.options import add_short_spellings\n\n"
        "def pytest_addoption(parser):\n    add_short_spellings(parser)\n"
    )
    common = ("--co", "-q", "--perf-framework", "torch", "--perf-model", "llama", "--perf-cpu-workers", "2")
    short = pytester.runpytest_inprocess(*common, "--tp", "2")
    prefixed = pytester.runpytest_inprocess(*common, "--perf-tp", "2")
    assert short.ret == prefixed.ret == 0
    ids = lambda r: sorted(line for line in r.stdout.lines if "::" in line)  # noqa: E731
    assert ids(short) == ids(prefixed) and any("cpu2-device-tp2" in i for i in ids(short))
