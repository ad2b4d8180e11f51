"""The Keras mixture of experts through the plugin, in one real tiny burst: its code at 2 layers
and 4 experts, on one CPU worker; the row carries its router's balance over the timed windows."""

from __future__ import annotations

import json
import math

import pytest
from suite_files import SUITE, needs

VOCAB = 512
EXPERTS, TOP_K = 4, 2
TINY_MOE = f"""
import dataclasses

from perfsuite import register_token_model
from perfsuite.models.catalog import MOE_SMALL, flops_structure

MOE = dataclasses.replace(
    MOE_SMALL, layers=2, d_model=64, heads=4, kv_heads=2, d_ff=128, num_experts={EXPERTS}, top_k={TOP_K},
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
