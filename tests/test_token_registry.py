"""The registry's token models: registration and its checks, the metadata the Job carries,
FLOPs per item. No framework is imported here."""

from __future__ import annotations

import dataclasses
import json

import pytest

from perfsuite import register_token_model
from perfsuite.contract.job import JOB_VERSION, Job
from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.spec import BurstSpec
from perfsuite.models import registry
from perfsuite.models.catalog import BERT_BASE, GPT2_SMALL, LLAMA_SMALL, TOKEN_SHAPES

TINY = {
    "framework": "torch",
    "seq_len": 64,
    "vocab_size": 512,
    "batch_size": 8,
    "objective": "causal",
    "layers": 2,
    "heads": 4,
    "head_dim": 16,
    "embedding_params": 4096,
    "params": 100_000,
}


def test_a_token_model_registers_and_lists():
    @register_token_model("tinylm", **TINY, description="a tiny decoder")
    def tinylm(vocab_size: int, seq_len: int):
        raise AssertionError("never built here")

    info = registry.get_model("torch", "tinylm")
    assert "tinylm" in registry.model_names("torch")
    assert info.workload == "token" and info.unit == "tokens/s" and info.image_size is None
    assert (info.seq_len, info.vocab_size, info.objective, info.optimizer) == (64, 512, "causal", "adamw")
    assert (info.cpu_seq_len, info.cpu_batch_size) == (64, 1)  # min(seq_len, 128); batch_size // 16, at least 1
    assert info.num_classes == 512 and info.flops is None
    assert info.builder == f"{__name__}:{tinylm.__qualname__}"
    assert info.description == "a tiny decoder"


def test_registering_again_from_the_same_builder_is_a_no_op():
    def lm(vocab_size: int, seq_len: int):
        pass

    register_token_model("againlm", **TINY)(lm)
    register_token_model("againlm", **TINY)(lm)
    assert [m.name for m in registry.all_models("torch")].count("againlm") == 1


@pytest.mark.parametrize(
    "change, message",
    [
        ({"framework": "jax"}, "framework must be one of torch, tf, not 'jax'"),
        ({"seq_len": 0}, "model 'badlm': seq_len must be a positive whole number, got 0"),
        ({"vocab_size": 512.0}, "model 'badlm': vocab_size must be a positive whole number, got 512.0"),
        ({"heads": True}, "model 'badlm': heads must be a positive whole number, got True"),
        ({"cpu_seq_len": -1}, "model 'badlm': cpu_seq_len must be a positive whole number, got -1"),
        ({"objective": "seq2seq"}, "model 'badlm': objective must be one of causal, masked, not 'seq2seq'"),
        ({"optimizer": "lamb"}, "model 'badlm': optimizer must be one of sgd, adamw, not 'lamb'"),
        ({"embedding_params": -1}, "model 'badlm': embedding_params must be a whole number >= 0, got -1"),
        ({"embedding_params": 100_000}, "model 'badlm': embedding_params (100000) must be below params (100000)"),
    ],
)
def test_bad_input_is_refused_in_one_line(change, message):
    with pytest.raises(registry.ModelError) as caught:
        register_token_model("badlm", **{**TINY, **change})
    assert str(caught.value) == message
    assert "badlm" not in registry.model_names()


def test_an_image_model_takes_an_optimizer():
    @registry.register_model("tinyvit", framework="torch", image_size=32, batch_size=8, optimizer="adamw")
    def tinyvit(num_classes: int = 1000):
        pass

    info = registry.get_model("torch", "tinyvit")
    assert (info.workload, info.optimizer, info.unit, info.seq_len) == ("image", "adamw", "img/s", None)
    with pytest.raises(registry.ModelError, match="^model 'x': optimizer must be one of sgd, adamw, not 'adam'$"):
        registry.register_model("x", framework="torch", image_size=32, batch_size=8, optimizer="adam")


def test_flops_per_item():
    # An image model: 3 x the forward FLOPs per image, as analysis/mfu.py counts training.
    resnet = registry.get_model("torch", "resnet50")
    assert resnet.train_flops_per_item(None) == 3 * resnet.flops
    assert dataclasses.replace(resnet, flops=None).train_flops_per_item(None) is None
    # A token model: 6N + 12 L H Q T per token, N without the embeddings only looked up.
    register_token_model("flopslm", **TINY)(lambda vocab_size, seq_len: None)
    lm = registry.get_model("torch", "flopslm")
    assert lm.train_flops_per_item(None) == 6 * (100_000 - 4096) + 12 * 2 * 4 * 16 * 64
    assert lm.train_flops_per_item(128) == 6 * (100_000 - 4096) + 12 * 2 * 4 * 16 * 128
    assert dataclasses.replace(lm, params=None).train_flops_per_item(64) is None  # the worker counts it first


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_the_built_in_token_models(framework):
    gpt2, bert, llama = (registry.get_model(framework, n) for n in ("gpt2", "bert", "llama"))
    assert (gpt2.objective, bert.objective, llama.objective) == ("causal", "masked", "causal")
    assert (gpt2.seq_len, bert.seq_len, llama.seq_len) == (1024, 512, 2048)
    assert (gpt2.vocab_size, bert.vocab_size, llama.vocab_size) == (50_257, 30_522, 32_000)
    # What is left out of N: GPT-2's positions; BERT's positions and token types (both keep
    # the token table, which is their output layer too); Llama's untied token table.
    assert gpt2.embedding_params == 1024 * 768 == GPT2_SMALL.embedding_params
    assert bert.embedding_params == (512 + 2) * 768 == BERT_BASE.embedding_params
    assert llama.embedding_params == 32_000 * 768 == LLAMA_SMALL.embedding_params
    assert (llama.layers, llama.heads, llama.head_dim) == (12, 12, 64)  # query heads, not the 4 KV heads
    assert gpt2.train_flops_per_item(None) == 6 * (124_439_808 - 786_432) + 12 * 12 * 12 * 64 * 1024
    for info in (gpt2, bert, llama):
        assert info.optimizer == "adamw" and info.unit == "tokens/s"
        shapes = TOKEN_SHAPES[info.name]
        assert (info.batch_size, info.cpu_batch_size, info.cpu_seq_len) == (
            shapes["batch_size"],
            shapes["cpu_batch_size"],
            shapes["cpu_seq_len"],
        )
    vit = registry.get_model(framework, "vit_b16")
    assert (vit.workload, vit.optimizer, vit.unit, vit.image_size) == ("image", "adamw", "img/s", 224)
    assert all(registry.get_model(framework, n).optimizer == "sgd" for n in ("resnet50", "vgg16", "cifar10"))


def test_an_old_model_dict_still_loads():
    """A ModelInfo written before the workload kinds (a job or record of that shape) reads as an image model."""
    old = {
        "name": "resnet50",
        "framework": "torch",
        "image_size": 224,
        "batch_size": 64,
        "cpu_batch_size": 2,
        "params": 25_557_032,
        "flops": 8.18e9,
        "num_classes": 1000,
        "builder": "perfsuite.models.torch.resnet:resnet50",
        "source": None,
        "description": "ResNet-50 v1.5",
    }
    info = ModelInfo.from_dict(old)
    assert (info.workload, info.optimizer, info.unit, info.seq_len, info.objective) == (
        "image",
        "sgd",
        "img/s",
        None,
        None,
    )
    assert info.train_flops_per_item(None) == 3 * 8.18e9
    assert ModelInfo.from_dict(info.as_dict()) == info


def test_a_job_carries_a_token_model():
    info = registry.get_model("tf", "llama")
    job = Job(spec=BurstSpec("tf", "llama"), model=info, folder="/tmp/b")
    data = json.loads(job.to_json())
    assert data["version"] == JOB_VERSION == 2
    assert data["model"]["workload"] == "token" and data["model"]["image_size"] is None
    back = Job.from_json(job.to_json()).model
    assert back == info and back.train_flops_per_item(None) == info.train_flops_per_item(None)


def test_the_suite_sweeps_token_models_over_their_sequence_lengths(pytester):
    """Every registered model is in the suite's default matrix, token models beside image ones;
    --perf-seq-len sweeps a token model's sequence length as --perf-batch-size sweeps the batch,
    and leaves image models as they were."""
    pytester.makepyfile(test_suite="from perfsuite.suite.test_throughput import test_throughput  # noqa: F401")
    result = pytester.runpytest_inprocess("--co", "-q", "--perf-gpus", "2", "--perf-framework", "torch")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    collected = result.stdout.str()
    assert "test_throughput[torch-vit_b16-gpu1-device]" in collected
    assert "test_throughput[torch-gpt2-gpu1-device]" in collected
    assert "test_throughput[torch-llama-cpu1-device]" in collected
    swept = pytester.runpytest_inprocess(
        "--co",
        "-q",
        "--perf-framework",
        "torch",
        "--perf-model",
        "gpt2",
        "--perf-model",
        "resnet50",
        "--perf-seq-len",
        "64",
        "--perf-seq-len",
        "256",
        "--perf-cpu-workers",
        "1",
    ).stdout.str()
    assert "test_throughput[torch-gpt2-cpu1-device-seq64]" in swept
    assert "test_throughput[torch-gpt2-cpu1-device-seq256]" in swept
    assert "test_throughput[torch-resnet50-cpu1-device]" in swept and "resnet50-cpu1-device-seq" not in swept
