"""Attribution maths: which ops moved between two op profiles, and nothing blamed on noise."""

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from perfsuite.analysis import attribution
from perfsuite.analysis.attribution import (
    ATTRIBUTED,
    INCONCLUSIVE,
    MIN_EXPLAINED,
    UNATTRIBUTABLE,
    UNIFORM,
    attribute,
    family,
)
from perfsuite.contract.job import ContractError
from perfsuite.contract.op_profile import OpProfile, OpTime
from perfsuite.worker.profiling import compact, take

# The shape of a real torch cifar10 profile on one CPU worker (ms per step, 3 steps).
CIFAR = {
    "aten::convolution_backward": 28.6,
    "aten::avg_pool3d_backward": 17.4,
    "aten::mkldnn_convolution": 13.6,
    "aten::avg_pool3d": 11.0,
    "aten::max_pool2d_with_indices": 9.3,
    "aten::pow": 7.3,
    "aten::mm": 2.96,
    "aten::addmm": 1.48,
    "aten::add_": 1.23,
    "aten::mul": 1.14,
    "aten::copy_": 1.03,
    "aten::fill_": 0.86,
    "aten::div": 0.71,
    "Optimizer.step#SGD.step": 0.55,
    "aten::max_pool2d_with_indices_backward": 0.51,
}


def profile(ops: dict[str, float], steps: int = 3, spread: float = 0.0, kind: str = "op", floor: float = 0.05):
    """A profile whose ops take ``ops`` ms a step, each step off by +-spread of it."""
    offsets = [(-1) ** i * spread * (i % 2 + 1) / 2 for i in range(steps)]
    return OpProfile(
        "test",
        tuple(sum(ops.values()) for _ in range(steps)),
        tuple(OpTime(name, kind, tuple(ms * (1 + o) for o in offsets), 1.0) for name, ms in ops.items()),
        floor,
        (0.1,) * steps,
    )


def test_an_op_that_grew_is_the_top_mover_with_its_share_of_the_slowdown():
    base = profile(CIFAR)
    now = profile({**CIFAR, "aten::mm": 2.96 + 40.0})
    found = attribute(base, now, base_step_ms=100.0, now_step_ms=142.0)
    assert found.status == ATTRIBUTED
    top = found.movers[0]
    assert (top.name, top.family) == ("aten::mm", "matmul")
    assert top.delta_ms == pytest.approx(40.0)
    assert top.share(found.slowdown_ms) == pytest.approx(40 / 42)
    assert [m.name for m in found.movers] == ["aten::mm"]
    text = "\n".join(found.lines())
    assert "aten::mm [matmul] 3.0 -> 43.0 ms/step (+40.0 ms, 95% of the slowdown)" in text


def test_new_and_vanished_ops_are_named():
    base = profile(CIFAR)
    now = dict(CIFAR)
    del now["aten::pow"]
    now["aten::_fused_thing"] = 12.0
    found = attribute(base, profile(now), 100.0, 105.0)
    assert found.status == ATTRIBUTED
    assert [m.name for m in found.new] == ["aten::_fused_thing"]
    assert [m.name for m in found.vanished] == ["aten::pow"]
    text = "\n".join(found.lines())
    assert "aten::_fused_thing [other] - -> 12.0 ms/step" in text and "new" in text
    assert "vanished: aten::pow [normalization] (was 7.3)" in text


def test_an_op_under_the_baseline_floor_is_not_new_unless_it_outgrew_the_floor():
    base = profile(CIFAR, floor=0.5)
    small = attribute(base, profile({**CIFAR, "aten::tiny": 0.4}), 100.0, 100.0)
    assert small.status == INCONCLUSIVE and not small.new


def test_every_op_slower_together_is_uniform_not_one_op():
    found = attribute(profile(CIFAR), profile({k: v * 1.4 for k, v in CIFAR.items()}), 100.0, 140.0)
    assert found.status == UNIFORM and not found.movers
    assert found.common == pytest.approx(1.4)
    assert "every op is slower together" in found.lines()[0]


def test_a_faster_op_is_listed_apart_from_the_movers():
    found = attribute(profile(CIFAR), profile({**CIFAR, "aten::mm": 2.96 + 30, "aten::pow": 0.5}), 100.0, 123.0)
    assert [m.name for m in found.movers] == ["aten::mm"]
    assert [m.name for m in found.faster] == ["aten::pow"]


ratios = st.floats(min_value=0.8, max_value=1.25)


@given(st.lists(st.floats(min_value=0.93, max_value=1.07), min_size=len(CIFAR), max_size=len(CIFAR)), ratios)
def test_noise_alone_blames_no_op_and_says_inconclusive(jitter, together):
    """Each op off by up to 7% on top of a common factor, step spread 4%: nothing is named."""
    now = {name: ms * together * j for (name, ms), j in zip(CIFAR.items(), jitter)}
    found = attribute(profile(CIFAR, spread=0.04), profile(now, spread=0.04), 100.0, 100.0 * together)
    assert not found.movers and not found.vanished and not found.new
    assert found.status in (INCONCLUSIVE, UNIFORM)
    if found.status == INCONCLUSIVE:
        assert found.lines()[0].startswith("attribution inconclusive")
        assert "no op moved beyond its noise" in found.lines()[0]


@given(st.sampled_from(sorted(CIFAR)), st.floats(min_value=0.3, max_value=3.0), ratios)
def test_one_op_grown_by_a_large_share_of_the_step_is_always_the_top_mover(name, growth_of_step, together):
    """An op that grew by 30% to 300% of the step stands out whatever moved together."""
    step = sum(CIFAR.values())
    now = {k: v * together for k, v in CIFAR.items()}
    now[name] += growth_of_step * step
    found = attribute(profile(CIFAR, spread=0.02), profile(now, spread=0.02))
    assert found.status == ATTRIBUTED
    assert found.movers[0].name == name


def test_a_new_op_that_explains_a_sliver_of_the_slowdown_cannot_attribute():
    """A busy host slowed the step by 16.5 ms; the one op that moved beyond its noise, a new
    aten::add, is 1.5 ms of it: naming it as the cause would be wrong."""
    base = profile(CIFAR, spread=0.02)
    now = profile({**CIFAR, "aten::add": 1.5}, spread=0.02)
    found = attribute(base, now, base_step_ms=100.0, now_step_ms=116.5)
    assert found.status == UNATTRIBUTABLE and not found.movers
    assert found.largest is not None and found.largest.name == "aten::add"
    first = found.lines()[0]
    assert first.startswith("cannot attribute (step 100.0 -> 116.5 ms (+16.5 ms)): ")
    assert "explain 9% of the slowdown (+1.5 of +16.5 ms): the rest is not in the profiled ops" in first
    assert found.as_dict()["status"] == "unattributable" and found.as_dict()["reason"] == found.reason
    assert "\n" not in (found.reason or "")


def test_a_mover_beside_every_op_slower_together_is_attributed():
    """The common factor explains most of the slowdown and one op more: both are what happened."""
    now = {k: v * 1.3 for k, v in CIFAR.items()}
    now["aten::mm"] += 5.0
    found = attribute(profile(CIFAR), profile(now), 100.0, 100.0 * 1.3 + 5.0)
    assert found.status == ATTRIBUTED and [m.name for m in found.movers] == ["aten::mm"]


@given(
    st.sampled_from(sorted(CIFAR)),
    st.floats(min_value=10.0, max_value=60.0),
    st.floats(min_value=0.0, max_value=10.0),
    st.lists(st.floats(min_value=0.98, max_value=1.02), min_size=len(CIFAR), max_size=len(CIFAR)),
)
def test_what_is_named_explains_at_least_the_least_share_of_the_slowdown(name, grown_ms, unseen, jitter):
    """One op grows by ``grown_ms``; the timed steps slow by that and ``unseen`` times as much
    again, outside the profiled ops. The op is named when it is most of the slowdown; where it is
    a small share, the case cannot be attributed."""
    now = {k: v * j for (k, v), j in zip(CIFAR.items(), jitter)}
    now[name] += grown_ms
    slowdown = grown_ms * (1 + unseen)
    found = attribute(profile(CIFAR, spread=0.01), profile(now, spread=0.01), 100.0, 100.0 + slowdown)
    share = grown_ms / slowdown
    if share >= 1.2 * MIN_EXPLAINED:
        assert found.status == ATTRIBUTED and found.movers[0].name == name
    if share <= 0.8 * MIN_EXPLAINED:
        assert found.status == UNATTRIBUTABLE and not found.movers
        assert found.largest is not None and found.largest.name == name
        assert "of the slowdown" in (found.reason or "")
    if found.status == ATTRIBUTED:
        assert sum(m.delta_ms for m in found.movers) >= MIN_EXPLAINED * found.slowdown_ms


@given(
    st.lists(st.floats(min_value=-1.1, max_value=1.1), min_size=len(CIFAR), max_size=len(CIFAR)),
    st.floats(min_value=0.02, max_value=0.3),
    st.floats(min_value=1.5, max_value=5.0),
)
def test_ops_that_scatter_more_than_the_step_slowed_cannot_attribute(log_jitter, slowed, new_ms):
    """Each op off by up to 3x either way (a host busy with other work) while the step slowed by
    2% to 30%: the op that appeared is not named, however far beyond the floor it is."""
    now = {k: v * math.exp(j) for (k, v), j in zip(CIFAR.items(), log_jitter)}
    now["aten::add"] = new_ms
    found = attribute(profile(CIFAR), profile(now), 100.0, 100.0 * (1 + slowed))
    assume(found.rho > slowed)  # the ops scatter by more than the step slowed
    assert found.status in (UNATTRIBUTABLE, INCONCLUSIVE, UNIFORM) and not found.movers
    if found.status == UNATTRIBUTABLE:
        assert f"the ops scatter by +-{found.rho:.0%} between the two profiles" in found.lines()[0]


def test_identical_profiles_are_inconclusive_with_no_change():
    found = attribute(profile(CIFAR), profile(CIFAR))
    assert found.status == INCONCLUSIVE and found.common == 1.0 and found.slowdown_ms == 0
    assert found.largest is None


@pytest.mark.parametrize(
    "name, expected",
    [
        ("aten::mm", "matmul"),
        ("aten::addmm", "matmul"),
        ("MatMul", "matmul"),
        ("_FusedMatMul", "matmul"),
        ("BatchMatMulV2", "matmul"),
        ("sm90_xmma_gemm_f32f32_tf32f32", "matmul"),
        ("aten::convolution_backward", "convolution"),
        ("Conv2DBackpropFilter", "convolution"),
        ("_FusedConv2D", "convolution"),
        ("sm80_xmma_fprop_implicit_gemm_tf32f32", "convolution"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "collective"),
        ("gloo:all_reduce", "collective"),
        ("Memcpy HtoD (Pageable -> Device)", "memcpy"),
        ("aten::copy_", "memcpy"),
        ("aten::native_batch_norm", "normalization"),
        ("FusedBatchNormGradV3", "normalization"),
        ("MaxPoolGrad", "pooling"),
        ("aten::threshold_backward", "activation"),
        ("ReluGrad", "activation"),
        ("SparseSoftmaxCrossEntropyWithLogits", "loss"),
        ("Optimizer.step#SGD.step", "optimizer"),
        ("ResourceApplyKerasMomentum", "optimizer"),
        ("aten::add_", "elementwise"),
        ("AddV2", "elementwise"),
        ("SomethingElse", "other"),
    ],
)
def test_op_families_across_frameworks_and_devices(name, expected):
    assert family(name) == expected


def test_a_profile_round_trips_and_bad_ones_get_one_line():
    p = profile(CIFAR, spread=0.02)
    assert OpProfile.from_dict(p.as_dict()).ops[0].name == "aten::convolution_backward"
    for bad in (
        {"version": 9},
        {**p.as_dict(), "ops": [{"name": "x", "kind": "warp", "ms": [1, 1, 1], "calls": 1}]},
        {**p.as_dict(), "ops": [{"name": "x", "kind": "op", "ms": [1], "calls": 1}]},
        {**p.as_dict(), "step_ms": [float("nan")] * 3},
        {**p.as_dict(), "ops": [{"name": "x"}]},
    ):
        with pytest.raises(ContractError) as err:
            OpProfile.from_dict(bad)
        assert "\n" not in str(err.value)


def test_compact_keeps_the_ops_that_matter_and_folds_the_rest():
    tables = [
        {("big", "op"): (10.0, 1), ("small", "op"): (0.001, 3), **{(f"op{i}", "op"): (0.5, 1) for i in range(80)}}
    ] * 2
    p = compact("test", tables, [60.0, 61.0])
    assert p.ops[0].name == "big" and len(p.ops) == 60  # MAX_OPS
    assert all(o.name != "small" for o in p.ops)
    assert p.floor_ms == pytest.approx(0.5) and p.other_ms[0] == pytest.approx(21 * 0.5 + 0.001)
    assert p.get("big", "op").calls == 1
    with pytest.raises(ValueError):
        compact("test", tables, [1.0])


def test_a_failing_profiler_costs_the_profile_not_the_burst():
    def broken():
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED\nmore")

    outcome = take(broken)
    assert outcome.op_profile is None and outcome.profile_error.startswith("profiling failed: RuntimeError")
    assert "\n" not in outcome.profile_error and outcome.profile_seconds >= 0


def test_the_constants_are_what_the_module_says():
    assert attribution.Z == 3 and attribution.RHO_MIN == 0.05 and math.isclose(attribution.MAD_TO_SD, 1.4826)
