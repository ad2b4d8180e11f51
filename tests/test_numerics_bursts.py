"""The numerics stretch in tiny real bursts, through the launcher, in each framework: a burst run
again gives its first losses bit for bit, and the same model with its GELU switched from exact to
the tanh approximation (tests/tiny_gelu.py) does not. The whole matrix (two workers, sharded, every
data location) goes through the plugin in tests/test_numerics_e2e.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from suite_files import needs

from perfsuite.analysis.numerics import SAME, compare
from perfsuite.contract.spec import BurstSpec
from perfsuite.models.registry import ModelInfo
from perfsuite.plugin.launch import run_burst

SOURCE = Path(__file__).with_name("tiny_gelu.py")
STEPS = 4  # numerics steps: beyond the warm-up's one, so the stretch adds steps of its own


def model(framework: str) -> ModelInfo:
    """tiny_gelu, loaded by path in the worker; not registered here, so the zoo's listing stays."""
    return ModelInfo(
        name="tiny_gelu",
        framework=framework,
        image_size=8,
        batch_size=8,
        cpu_batch_size=8,
        params=None,
        flops=None,
        num_classes=10,
        builder=f"perfsuite_tests_tiny_gelu:tiny_gelu_{framework}",
        source=str(SOURCE),
    )


def burst(framework: str, folder: Path):
    spec = BurstSpec(
        framework=framework, model="tiny_gelu", image_size=8, batch_size=8, steps=2, windows=2, warmup_steps=1
    )
    record = run_burst(spec, model(framework), folder, numerics_steps=STEPS)
    assert record.numerics is not None
    return record


def check(framework: str, settings: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("PERFSUITE_GELU_APPROXIMATE", raising=False)
    first, again = burst(framework, tmp_path / "a"), burst(framework, tmp_path / "b")
    stretch = first.numerics
    assert len(stretch["losses"]) == STEPS and stretch["steps"] == STEPS and stretch["note"] is None
    assert stretch["settings"] == settings
    assert stretch["losses"][0] == first.loss_first  # the stretch is the burst's first steps
    assert stretch["versions"]["numpy"]
    assert compare(stretch["losses"], again.numerics["losses"], 0.0).outcome == SAME
    monkeypatch.setenv("PERFSUITE_GELU_APPROXIMATE", "tanh")
    tanh = burst(framework, tmp_path / "c")
    found = compare(stretch["losses"], tanh.numerics["losses"], 0.05)
    assert found.outcome != SAME and found.first_step == 1  # the forward changed: the first loss shows it


@needs("torch")
def test_torch_losses_repeat_bit_for_bit_and_a_gelu_change_shows(tmp_path, monkeypatch):
    check("torch", "torch.use_deterministic_algorithms", tmp_path, monkeypatch)


@needs("tensorflow")
@pytest.mark.xdist_group("tensorflow")
def test_tensorflow_losses_repeat_bit_for_bit_and_a_gelu_change_shows(tmp_path, monkeypatch):
    check("tf", "tf.config.experimental.enable_op_determinism", tmp_path, monkeypatch)
