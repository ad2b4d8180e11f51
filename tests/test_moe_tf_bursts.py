"""The Keras mixture of experts in real processes: one tiny burst through the plugin, its code at
1 layer and 4 experts on one CPU worker, whose row carries its router's balance over the timed
windows; and the burst worker's step over two replicas in a fresh interpreter, at 2 layers (each
layer's counts checked), with XLA, inference and fp16."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from suite_files import SUITE, needs
from test_moe_tf import SEQ, TINY

VOCAB = 512
EXPERTS, TOP_K = 4, 2
TINY_MOE = f"""
import dataclasses

from perfsuite import register_token_model
from perfsuite.models.catalog import MOE_SMALL, flops_structure

MOE = dataclasses.replace(
    MOE_SMALL, layers=1, d_model=64, heads=4, kv_heads=2, d_ff=128, num_experts={EXPERTS}, top_k={TOP_K},
    vocab_size={VOCAB},
)


@register_token_model(
    "tiny_moe", framework="tf", seq_len=64, batch_size=4, cpu_seq_len=64, cpu_batch_size=4, vocab_size={VOCAB},
    objective="causal", **flops_structure(MOE), params=MOE.params, active_params=MOE.active_params,
)
def tiny_moe(vocab_size={VOCAB}, seq_len=64):
    from perfsuite.models.tf.moe import build

    return build(dataclasses.replace(MOE, vocab_size=vocab_size), seq_len)
"""


@needs("tensorflow")
@pytest.mark.xdist_group("tensorflow")
def test_a_tensorflow_moe_burst_reports_its_router_balance(pytester):
    pytester.makeconftest(TINY_MOE)
    pytester.makepyfile(test_suite=SUITE)
    args = ["--perf-framework", "tf", "-m", "cpu", "--perf-cpu-workers", "1", "--perf-threads-per-worker", "1"]
    args += ["--perf-model", "tiny_moe", "--perf-data-location", "device", "-k", "throughput and cpu1-device"]
    args += ["--perf-steps", "15", "--perf-windows", "5", "--perf-warmup-steps", "1", "--perf-max-windows", "5"]
    args += ["--perf-missing-baseline", "pass", "--perf-json", "out.json", "-p", "no:cacheprovider"]
    result = pytester.runpytest_subprocess(*args, timeout=600)
    assert result.ret == 0, result.stdout.str()[-3000:]
    [row] = json.loads((pytester.path / "out.json").read_text())["results"]
    assert row["model"] == "tiny_moe" and row["tokens_per_sec"] > 0 and row["achieved_tflops"] > 0
    assert 1.0 <= row["router_balance"] <= EXPERTS / TOP_K and row["expert_kernel"] == "loop"
    assert row["loss_first"] == pytest.approx(math.log(VOCAB), rel=0.1)
    assert row["loss_last"] < row["loss_first"] - 0.15, row


REPLICATED = r"""
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
import keras

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

from types import SimpleNamespace

from perfsuite.contract.spec import BurstSpec
from perfsuite.models.catalog import MoEConfig
from perfsuite.models.tf.moe import build
from perfsuite.worker.backends.tf.precision import DynamicLossScale, precision_policy
from perfsuite.worker.backends.tf.strategy import make_strategy
from perfsuite.worker.backends.tf.tokens import device_feed
from perfsuite.worker.backends.tf.train import make_optimizer, make_step

config = MoEConfig(**json.loads(sys.argv[1]))
steps = 6
out = {}
for name, changes in json.loads(sys.argv[2]).items():
    spec = BurstSpec(framework="tf", model="tiny_moe", devices=2, seq_len=32, batch_size=4, **changes)
    precision = precision_policy(spec)
    keras.backend.clear_session()
    keras.mixed_precision.set_global_policy(precision.policy)
    keras.utils.set_random_seed(0)
    strategy = make_strategy(spec, ["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model = build(config, spec.seq_len)
        optimizer = make_optimizer("adamw")
        optimizer.build(model.trainable_variables)
        scale = DynamicLossScale() if precision.loss_scaling else None
    feed = device_feed(spec, strategy, SimpleNamespace(vocab_size=config.vocab_size, objective="causal"), 1000)
    step = make_step(spec, strategy, model, optimizer, feed, scale)
    step()
    model.reset_router_stats()  # as the burst does after its warm-up
    losses = [float(step()) for _ in range(steps)]
    routed = [float(layer.routed.numpy().sum()) for layer in model.moe_layers()]
    out[name] = {"losses": losses, "routed": routed, "stats": model.router_stats()}
print(json.dumps(out))
"""

CASES = {
    "replicated": {},
    "xla": {"xla": True},
    "infer": {"mode": "infer"},
    "infer-xla": {"mode": "infer", "xla": True},
    "fp16": {"precision": "fp16"},  # the loss scale multiplies the auxiliary loss too
}


@needs("tensorflow")
@pytest.mark.xdist_group("tensorflow")
def test_two_replicas_count_every_routed_token_once():
    """MirroredStrategy over two CPU devices: each step's counts are the replicas' mean, so a
    layer's rows over the timed steps are steps x batch x seq x top_k; XLA runs the tiles
    kernel; inference counts too; fp16 with its loss scale trains."""
    import dataclasses

    # XLA_FLAGS from tests/conftest.py: the compilations were most of this test's cost.
    proc = subprocess.run(
        [sys.executable, "-c", REPLICATED, json.dumps(dataclasses.asdict(TINY)), json.dumps(CASES)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, case in out.items():
        losses, stats = case["losses"], case["stats"]
        assert case["routed"] == [6 * 4 * SEQ * TINY.top_k] * TINY.layers, name
        assert 1.0 <= stats["balance"] <= TINY.num_experts / TINY.top_k, name
        assert 0.9 <= stats["aux_loss"] <= TINY.num_experts, name
        assert stats["kernel"] == ("tiles" if CASES[name].get("xla") else "loop"), name
        assert losses[0] == pytest.approx(math.log(TINY.vocab_size), rel=0.1), name
        if CASES[name].get("mode") == "infer":
            assert losses == [losses[0]] * 6  # nothing learnt, the same batch
        else:
            assert losses[-1] < losses[0] - 0.1, (name, losses)
