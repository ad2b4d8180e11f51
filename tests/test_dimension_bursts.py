"""Tiny real bursts over the tuned dimensions, in both frameworks: each combination runs and
records what it ran (dtype, compile time, a finite loss). Combined to keep the count small:
every burst pays a framework import."""

import math

import pytest
from suite_files import needs

from perfsuite.contract.spec import BurstSpec
from perfsuite.models.registry import get_model
from perfsuite.plugin.launch import run_burst

TORCH = {
    "fp16-channels_last-independent": dict(
        precision="fp16", memory_format="channels_last", devices=2, variable_update="independent"
    ),
    "bf16-infer": dict(precision="bf16", mode="infer"),
}
TF = {
    "fp16": dict(precision="fp16"),
    "bf16-infer-xla": dict(precision="bf16", mode="infer", xla=True),
    "independent": dict(devices=2, variable_update="independent"),
    "channels_first-xla": dict(memory_format="channels_first", xla=True),  # NCHW: on CPU, XLA's kernels only
}
DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def burst(tmp_path, framework, **changes):
    spec = BurstSpec(
        framework=framework,
        model="cifar10",
        # plumbing, not timing: fp16 convolutions on a CPU cost a second an image. TensorFlow's
        # model takes 12x12 (two pools leave 3x3); torch's first dense layer fixes 24x24.
        image_size=12 if framework == "tf" else 24,
        batch_size=4,
        steps=2,  # a step per window
        windows=2,
        warmup_steps=1,
        threads=1,
    ).replace(**changes)
    return run_burst(spec, get_model(framework, "cifar10"), tmp_path)


def check(record, changes):
    spec = record.spec
    assert all(math.isfinite(x) for x in (record.loss_first, record.loss_last))
    assert len(record.samples) == 2 and all(s > 0 for s in record.samples)
    assert record.precision_dtype == DTYPES[spec.precision]
    assert [r.rank for r in record.per_rank] == list(range(len(record.per_rank)))
    if spec.mode == "infer":
        assert record.loss_first == pytest.approx(record.loss_last, rel=0.2)  # no step learns
    else:
        assert record.loss_last != record.loss_first
    assert (record.compile_seconds is not None) == (spec.xla or spec.compile)
    assert spec.key().count("/") >= 8 and all(
        str(v) in spec.key() for k, v in changes.items() if k in ("precision", "mode", "memory_format") and v != "train"
    )


@needs("torch")
@pytest.mark.parametrize("changes", TORCH.values(), ids=TORCH.keys())
def test_torch_dimensions(tmp_path, changes):
    check(burst(tmp_path, "torch", **changes), changes)


@needs("tensorflow")
@pytest.mark.parametrize("changes", TF.values(), ids=TF.keys())
def test_tf_dimensions(tmp_path, changes):
    check(burst(tmp_path, "tf", **changes), changes)


@needs("torch")
def test_torch_compile_is_timed_apart_from_the_windows(tmp_path):
    import tiny_model  # noqa: F401 - registers "tiny", whose step compiles in well under a second

    spec = BurstSpec(
        framework="torch",
        model="tiny",
        image_size=8,
        batch_size=8,
        steps=2,
        windows=2,
        warmup_steps=1,
        threads=1,
        compile=True,
    )
    record = run_burst(spec, get_model("torch", "tiny"), tmp_path)
    assert record.compile_seconds > 0 and len(record.samples) == 2
    assert spec.key().endswith("/compile/threads1")


@needs("tensorflow")
def test_a_tf_model_that_fixes_its_input_shape_says_it_has_no_nchw_layout(tmp_path):
    import attribution_models  # noqa: F401 - registers "opmix", whose input is keras.Input((16, 16, 3))

    from perfsuite.contract.burst_files import unsupported_reason
    from perfsuite.plugin.launch import BurstError

    spec = BurstSpec(
        framework="tf",
        model="opmix",
        image_size=16,
        batch_size=8,
        steps=2,
        windows=2,
        warmup_steps=1,
        threads=1,
        memory_format="channels_first",
        xla=True,
    )
    with pytest.raises(BurstError) as failed:
        run_burst(spec, get_model("tf", "opmix"), tmp_path)
    assert unsupported_reason(str(failed.value)) == (
        "the tf model 'opmix' builds no channels_first layout: its input shape is (16, 16, 3), not channels on axis 1"
    )
