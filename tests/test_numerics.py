"""Golden losses: the comparison rule on simulated loss curves, what a baseline keeps of them, the
finding's line, and the numerics stretch's switching of the settings (with fake steps)."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.analysis import numerics
from perfsuite.analysis.numerics import CHANGED, DRIFTED, SAME, compare
from perfsuite.contract.record import WorkerRecord
from perfsuite.contract.spec import BurstSpec
from perfsuite.models.registry import get_model
from perfsuite.worker.numerics import Settings, Stretch, reductions_note, run_stretch, warmup_after


def f32(x: float) -> float:
    """A loss as a burst reports it: a float32, read into a Python float."""
    return struct.unpack("f", struct.pack("f", x))[0]


# A training curve: c + a * exp(-b t), with a little noise of its own per step, in float32.
curves = st.builds(
    lambda c, a, b, jitter: [f32(c + a * math.exp(-b * t) * (1 + j)) for t, j in enumerate(jitter)],
    st.floats(0.1, 3.0),
    st.floats(0.5, 8.0),
    st.floats(0.0, 0.5),
    st.lists(st.floats(-0.01, 0.01), min_size=1, max_size=40),
)
tolerances = st.floats(0.0, 0.5)


@given(curves, tolerances)
def test_a_rerun_bit_for_bit_is_same_whatever_the_tolerance(losses, tolerance):
    found = compare(losses, list(losses), tolerance)
    assert found == numerics.Comparison(SAME, len(losses), None, 0.0)


@given(curves, st.data(), st.floats(1e-6, 0.5), st.floats(1.0, 3.0), tolerances)
def test_a_change_from_a_step_on_is_found_there_and_judged_by_its_largest_difference(
    losses, data, size, growth, tolerance
):
    """A kernel that changes from step j on: the difference starts there and grows, as training
    amplifies it. The first step is j's, the largest difference the largest of any step, and the
    outcome drifted exactly where that is within the tolerance."""
    start = data.draw(st.integers(0, len(losses) - 1))
    now = [x if t < start else f32(x * (1 + size * growth ** (t - start))) for t, x in enumerate(losses)]
    found = compare(losses, now, tolerance)
    assert found.first_step == start + 1
    worst = max(abs(b - a) / abs(a) for a, b in zip(losses, now))
    assert found.max_rel_diff == pytest.approx(worst)
    assert found.outcome == (DRIFTED if worst <= tolerance else CHANGED)


@given(curves, st.data(), st.floats(1e-6, 0.5), tolerances, tolerances)
def test_a_smaller_tolerance_never_makes_a_change_less_severe(losses, data, size, a, b):
    at = data.draw(st.integers(0, len(losses) - 1))
    now = [f32(x * (1 + size)) if t == at else x for t, x in enumerate(losses)]
    order = [SAME, DRIFTED, CHANGED]
    lo, hi = sorted((a, b))
    assert order.index(compare(losses, now, lo).outcome) >= order.index(compare(losses, now, hi).outcome)


@given(curves, st.data(), tolerances)
def test_a_loss_that_is_not_finite_on_one_side_is_a_change(losses, data, tolerance):
    at = data.draw(st.integers(0, len(losses) - 1))
    now = [None if t == at else x for t, x in enumerate(losses)]
    found = compare(losses, now, tolerance)
    assert (found.outcome, found.first_step, found.max_rel_diff) == (CHANGED, at + 1, math.inf)
    assert compare(now, list(now), tolerance).outcome == SAME  # both not finite at the same step


@given(curves, curves, tolerances)
def test_only_the_steps_both_hold_are_compared(losses, extra, tolerance):
    assert compare(losses, losses + extra, tolerance) == compare(losses, list(losses), tolerance)
    assert compare(losses + extra, losses, tolerance).steps == len(losses)


def test_bit_for_bit_means_the_sign_of_zero_too():
    found = compare([0.0, 1.0], [-0.0, 1.0], 0.0)
    assert (found.outcome, found.first_step, found.max_rel_diff) == (DRIFTED, 1, 0.0)
    with pytest.raises(ValueError):
        compare([], [1.0], 0.05)


# --- what a baseline keeps, and the finding --------------------------------------------------------


def record(losses, version="2.13.0", note=None, **spec) -> WorkerRecord:
    s = BurstSpec(framework="torch", model="gpt2", seq_len=64, **spec)
    stretch = {"steps": len(losses), "losses": list(losses), "settings": "torch.use_deterministic_algorithms"}
    return WorkerRecord(
        spec=s,
        model=get_model("torch", "gpt2"),
        framework_version=version,
        device_name="cpu",
        precision_dtype="float32",
        fp32_math=None,
        samples=(1.0,),
        window_seconds=(1.0,),
        items_per_window=1,
        per_rank=(),
        loss_first=losses[0],
        loss_last=losses[-1],
        peak_memory_bytes=0,
        warmup_seconds=0.0,
        numerics={**stretch, "note": note, "seconds": 0.1, "versions": {"numpy": "2.4.6"}},
    )


GOLDEN = [f32(10.0 - 0.5 * t) for t in range(10)]


def entry_of(rec: WorkerRecord) -> dict:
    return {"numerics": numerics.golden(rec), "git_commit": "abc1234"}


def test_an_entry_keeps_the_losses_and_what_they_depend_on():
    kept = numerics.golden(record(GOLDEN, threads=2, devices=2, variable_update="sharded"))
    assert kept is not None and kept["losses"] == GOLDEN and kept["steps"] == 10 and kept["note"] is None
    depends = kept["depends"]
    assert depends["torch"] == "2.13.0" and depends["numpy"] == "2.4.6"
    assert depends["threads"] == "2" and depends["ranks"] == "2 (sharded)" and depends["data location"] == "device"
    assert depends["precision"] == "fp32 (float32)"
    assert depends["deterministic settings"] == "torch.use_deterministic_algorithms"
    assert numerics.golden(record(GOLDEN).replace(numerics=None)) is None


def test_a_version_change_is_named_in_the_line():
    """The issue's own example: the loss differs from step 3, and torch changed since the baseline."""
    now = [x if t < 2 else f32(x * 1.021) for t, x in enumerate(GOLDEN)]
    found = numerics.judge(record(now, version="2.13.0"), entry_of(record(GOLDEN, version="2.12.0")), 0.02)
    assert (found.outcome, found.first_step, found.changes) == (CHANGED, 3, ("torch 2.12.0 -> 2.13.0",))
    line = found.line("gpt2", "torch gpt2 on 1 CPU worker", "baselines/x.json")
    assert line.startswith(
        "numerics changed: gpt2's loss differs from step 3, at most 2.1% (beyond the 2% tolerance); "
        "torch 2.12.0 -> 2.13.0 since the baseline (torch gpt2 on 1 CPU worker, 10 steps)"
    )
    assert line.endswith("[baseline baselines/x.json]")


def test_a_change_nothing_recorded_explains_names_the_commits():
    now = [f32(x * 1.0001) for x in GOLDEN]
    found = numerics.judge(record(now), entry_of(record(GOLDEN)), 0.05, commit="def5678")
    assert found.outcome == DRIFTED and not found.expected
    assert "nothing recorded of what the losses depend on changed" in found.line("gpt2", "x")
    assert "(commit abc1234 -> def5678)" in found.line("gpt2", "x")
    assert numerics.judge(record(GOLDEN), entry_of(record(GOLDEN)), 0.05).line("gpt2", "x") is None


def test_where_the_losses_cannot_be_bit_equal_only_the_tolerance_judges():
    why = "NCCL picks its reduction algorithm itself"
    now = [f32(x * 1.0001) for x in GOLDEN]
    found = numerics.judge(record(now, note=why), entry_of(record(GOLDEN)), 0.05)
    assert found.outcome == DRIFTED and found.expected and not found.deterministic
    assert found.note == f"not deterministic here ({why}): only the tolerance applies"
    beyond = numerics.judge(record([x * 2 for x in GOLDEN], note=why), entry_of(record(GOLDEN)), 0.05)
    assert beyond.outcome == CHANGED and not beyond.expected


def test_no_outcome_says_why():
    rec = record(GOLDEN)
    assert numerics.judge(rec, None, 0.05).note == numerics.NO_ENTRY
    assert numerics.judge(rec, {"git_commit": "x"}, 0.05).note == numerics.NO_GOLDEN
    assert numerics.judge(rec.replace(numerics=None), entry_of(rec), 0.05).note == numerics.NO_STRETCH
    assert numerics.judge(None, entry_of(rec), 0.05) is None
    shorter = numerics.judge(record(GOLDEN[:4]), entry_of(rec), 0.05)
    assert shorter.outcome == SAME and shorter.note == "the first 4 steps compared (baseline 10, run 4)"


def test_bursts_of_one_run_that_disagree_say_so():
    first = record(GOLDEN).numerics
    assert numerics.pooled(first, dict(first)) == first
    again = {**first, "losses": GOLDEN[:5] + [f32(x * 1.01) for x in GOLDEN[5:]]}
    assert numerics.pooled(first, again)["note"] == "its bursts in one run differed from step 6"
    assert numerics.pooled(None, first) == first


# --- the stretch -------------------------------------------------------------------------------------


class Switch:
    def __init__(self, met=None):
        self.events, self.met = [], met

    def settings(self, note=None, unsupported=()):
        def off():
            self.events.append("off")
            return self.met

        return Settings("fake", lambda: self.events.append("on"), off, note, unsupported)


def steps(losses, events, fail_at=None):
    it = iter(losses)

    def step():
        events.append("step")
        if fail_at is not None and len([e for e in events if e == "step"]) == fail_at:
            raise NotImplementedError("ScatterAdd has no deterministic kernel")
        return next(it)

    return step


def test_the_stretch_takes_its_steps_between_the_settings_on_and_off():
    switch = Switch()
    found = run_stretch(Stretch(3, switch.settings()), steps([2.0, math.nan, 1.0], switch.events), float, lambda: None)
    assert switch.events == ["on", "step", "step", "step", "off"]
    assert found.losses == (2.0, None, 1.0) and found.note is None


def test_the_settings_are_off_again_whatever_a_step_raises():
    switch = Switch()
    with pytest.raises(RuntimeError):
        run_stretch(Stretch(2, switch.settings()), lambda: (_ for _ in ()).throw(RuntimeError("oom")), float, lambda: 0)
    assert switch.events == ["on", "off"]


def test_an_op_without_a_deterministic_kernel_runs_on_without_the_settings_and_says_so():
    switch = Switch(met="index_add has no deterministic kernel")
    made = []

    def make():
        made.append(len(switch.events))
        return steps([3.0, 2.0, 1.0], switch.events, fail_at=1 if len(made) == 1 else None)

    stretch = Stretch(2, switch.settings(note="NCCL", unsupported=(NotImplementedError,)), make)
    found = run_stretch(stretch, lambda: 0.0, float, lambda: None)
    assert switch.events == ["on", "step", "off", "step", "step"]
    assert len(made) == 2 and found.losses == (3.0, 2.0)
    assert found.note == "NCCL; index_add has no deterministic kernel; no deterministic kernel: ScatterAdd has " + (
        "no deterministic kernel"
    )


def test_the_burst_hears_when_the_stretch_ends_before_its_warm_up_goes_on():
    from perfsuite.worker.measure import run_windows

    switch = Switch()
    events = switch.events
    timings = run_windows(
        steps([1.0] * 10, events),
        lambda: None,
        float,
        warmup_steps=3,
        windows=1,
        steps_per_window=2,
        stretch=Stretch(2, switch.settings()),
        after_stretch=lambda: events.append("after stretch"),
    )
    assert events == ["on", "step", "step", "off", "after stretch", "step", "step", "step"]
    assert timings.numerics.losses == (1.0, 1.0)


def test_what_ran_nondeterministically_is_named_in_a_few_words():
    pytest.importorskip("torch")
    from perfsuite.worker.backends.torch.determinism import nondeterministic

    flash = (
        "Flash Attention defaults to a non-deterministic algorithm. To explicitly enable determinism call "
        "torch.use_deterministic_algorithms(True, warn_only=False)."
    )
    scatter = "scatter_add_cuda_kernel does not have a deterministic implementation, but you set ..."
    assert nondeterministic([flash, scatter, flash]) == (
        "Flash Attention backward runs nondeterministically under warn-only settings; "
        "scatter_add_cuda_kernel has no deterministic kernel"
    )
    assert nondeterministic(["an unrelated warning"]) is None


def test_the_warm_up_counts_the_stretch_and_one_step_follows_it():
    assert warmup_after(20, 10) == 10
    assert warmup_after(2, 10) == 1
    assert warmup_after(10, 10) == 1


def test_gpus_reduce_in_a_fixed_order_only_with_an_algorithm_that_does(monkeypatch):
    gpus = BurstSpec(framework="torch", model="resnet50", device_kind="cuda", devices=8)
    monkeypatch.delenv("NCCL_ALGO", raising=False)
    assert "NCCL_ALGO=Ring" in reductions_note(gpus)
    monkeypatch.setenv("NCCL_ALGO", "Ring,Tree")
    assert reductions_note(gpus) is None
    monkeypatch.setenv("NCCL_ALGO", "NVLS")
    assert reductions_note(gpus) is not None
    assert reductions_note(gpus.replace(devices=1)) is None
    assert reductions_note(gpus.replace(device_kind="cpu", threads=1)) is None
