"""The Keras transformers: sizes against published figures (the real built models), block
names, causal masks, ViT's FLOPs as TensorFlow counts them, and a tiny config of each
learning a fixed batch."""

from __future__ import annotations

import dataclasses
import functools
import math

import pytest
import token_batches
from keras_structure import structure_only, zero_weights
from suite_files import needs

from perfsuite.models import registry
from perfsuite.models.catalog import BertConfig, GPT2Config, LlamaConfig

# TensorFlow is imported by the tests that need it, not at collection; the group keeps them
# on one pytest-xdist worker with the other TensorFlow tests.
pytestmark = [needs("tensorflow"), pytest.mark.xdist_group("tensorflow")]

# Hugging Face's GPT2LMHeadModel and BertForMaskedLM for GPT2Config() and BertConfig()
# (tied weights once), timm's vit_base_patch16_224; the Llama-style decoder's own count.
PUBLISHED_PARAMS = {"gpt2": 124_439_808, "bert": 109_514_298, "llama": 124_668_672, "vit_b16": 86_567_656}
VOCAB = 512
SEQ = 32
TINY: dict[str, GPT2Config | BertConfig | LlamaConfig] = {
    "gpt2": GPT2Config(layers=2, d_model=64, heads=4, d_ff=256, vocab_size=VOCAB, positions=64),
    "bert": BertConfig(layers=2, d_model=64, heads=4, d_ff=256, vocab_size=VOCAB, positions=64),
    "llama": LlamaConfig(layers=2, d_model=64, heads=4, kv_heads=2, d_ff=172, vocab_size=VOCAB),
}
# One block learns a fixed batch as two do, at half the cost of tracing the training step
# (most of that test's time): the trace grows with every block's ops and AdamW's updates.
LEARNER = {name: dataclasses.replace(config, layers=1) for name, config in TINY.items()}
STEPS = 24  # the slowest learner (gpt2) is below 2.2 by then, against 0.5 x ln(512) = 3.1


@functools.cache
def _full_size(name: str):
    """A full-size model, built by its registered builder (a CPU sequence length: the weights
    are the same), once per module. Its tests count, inspect and trace it, never run it: its
    weights are shapes without values."""
    info = registry.get_model("tf", name)
    builder = registry.resolve_builder(info)
    if info.workload == "image":
        return info, structure_only(builder, num_classes=info.num_classes)
    return info, structure_only(builder, vocab_size=info.vocab_size, seq_len=info.cpu_seq_len)


@pytest.fixture(scope="module", params=sorted(PUBLISHED_PARAMS))
def full_size(request):
    return _full_size(request.param)


def _tiny(name: str, seed: int = 0, config=None):
    import importlib

    import keras

    keras.utils.set_random_seed(seed)
    return importlib.import_module(f"perfsuite.models.tf.{name}").build(config or TINY[name], SEQ)


def test_param_count(full_size):
    info, model = full_size
    assert model.count_params() == info.params == PUBLISHED_PARAMS[info.name]


def test_blocks_are_named(full_size):
    _, model = full_size
    blocks = [layer.name for layer in model.layers if layer.name.startswith("block_")]
    assert blocks == [f"block_{i}" for i in range(12)]


def test_outputs(full_size):
    info, model = full_size
    if info.workload == "image":
        assert model.output_shape == (None, info.num_classes)
    else:
        assert model.input.dtype == "int32"
        assert model.output_shape == (None, info.cpu_seq_len, info.vocab_size)


def test_vit_flops_as_tensorflow_counts_them():
    """The figure registered for both frameworks, torch's FlopCounterMode's, is what
    TensorFlow's profiler (the burst worker's counter) finds in the Keras model's traced
    forward pass: attention's matmuls included."""
    from perfsuite.worker.backends.tf.flops import forward_flops

    info, model = _full_size("vit_b16")
    assert info.flops == registry.get_model("torch", "vit_b16").flops
    with zero_weights(model):
        flops = forward_flops(model, info.image_size)
    assert info.flops == pytest.approx(flops, rel=0.005)


def _ids_and_changed():
    import numpy as np

    ids = np.random.default_rng(1).integers(0, VOCAB, (2, SEQ)).astype("int32")
    changed = ids.copy()
    changed[:, 20] = (ids[:, 20] + 1) % VOCAB
    return ids, changed


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_decoder_never_sees_the_future(name):
    import numpy as np

    model = _tiny(name)
    ids, changed = _ids_and_changed()
    before, after = np.asarray(model(ids, training=False)), np.asarray(model(changed, training=False))
    assert before.shape == (2, SEQ, VOCAB) and before.dtype == np.float32
    np.testing.assert_allclose(before[:, :20], after[:, :20], rtol=1e-5, atol=1e-5)
    assert not np.allclose(before[:, 20:], after[:, 20:])


def test_the_masked_lm_sees_both_ways():
    import numpy as np

    model = _tiny("bert")
    ids, changed = _ids_and_changed()
    assert not np.allclose(np.asarray(model(ids, training=False))[:, :20], np.asarray(model(changed))[:, :20])


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_a_tiny_model_learns_a_fixed_batch(name):
    """Starts near ln(vocabulary), as the initialisation promises, and falls well below it."""
    import keras
    import tensorflow as tf

    model = _tiny(name, config=LEARNER[name])
    objective = registry.get_model("tf", name).objective
    ids, targets = (tf.constant(a, tf.int32) for a in token_batches.batch(objective, VOCAB, seq_len=SEQ))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=-100)
    optimizer = keras.optimizers.AdamW(learning_rate=3e-3)
    optimizer.build(model.trainable_variables)

    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(targets, model(ids, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    step = tf.function(step, autograph=False)  # traced as the burst worker's step is: a third of the time
    losses = [float(step()) for _ in range(STEPS)]
    assert losses[0] == pytest.approx(math.log(VOCAB), rel=0.1)
    assert losses[-1] < 0.5 * math.log(VOCAB), losses


def _copy_torch_weights(name: str, source, target) -> None:
    """The torch model's weights into its Keras twin, layer for layer (torch keeps a linear
    layer's weight as [out, in], Keras as [in, out])."""
    weights = {k: v.detach().numpy() for k, v in source.state_dict().items()}
    config = TINY[name]

    def set_(variable, value):
        assert tuple(variable.shape) == value.shape, (variable.path, variable.shape, value.shape)
        variable.assign(value)

    def norm(layer, prefix):
        set_(layer.weights[0], weights[f"{prefix}.weight"])
        if len(layer.weights) > 1:
            set_(layer.weights[1], weights[f"{prefix}.bias"])

    def dense(layer, prefix, shape=None):
        set_(layer.kernel, weights[f"{prefix}.weight"].T.reshape(shape or layer.kernel.shape))
        if layer.bias is not None:
            set_(layer.bias, weights[f"{prefix}.bias"].reshape(layer.bias.shape))

    def attention(layer, prefix):
        dense(layer.qkv, f"{prefix}.qkv")  # both fuse the projections: queries, keys, values
        dense(layer.proj, f"{prefix}.proj")

    tables = {"gpt2": ("wte", "wpe"), "bert": ("word", "position", "token_type"), "llama": ("tok_embeddings",)}[name]
    for table in tables:
        set_(target.get_layer(table).weights[0], weights[f"{table}.weight"])
    for i in range(config.layers):
        block, prefix = target.get_layer(f"block_{i}"), f"blocks.{i}"
        norm(block.norm1, f"{prefix}.norm1")
        norm(block.norm2, f"{prefix}.norm2")
        attention(block.attn, f"{prefix}.attn")
        for part in ("fc", "gate", "up", "proj"):
            if hasattr(block.mlp, part):
                dense(getattr(block.mlp, part), f"{prefix}.mlp.{part}")
    if name == "gpt2":
        norm(target.get_layer("ln_f"), "ln_f")
    elif name == "bert":
        norm(target.get_layer("norm"), "norm")
        dense(target.get_layer("transform"), "transform.0")
        norm(target.get_layer("transform_norm"), "transform.2")
        set_(target.get_layer("decoder_bias").weights[0], weights["decoder_bias"])
    else:
        norm(target.get_layer("norm"), "norm")
        dense(target.get_layer("output"), "output")


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama"])
def test_the_keras_twin_computes_what_the_torch_model_computes(name):
    """With the torch model's weights, the Keras model gives the same logits: the same
    architecture in both frameworks (rotary pairs, grouped heads, tied output layers)."""
    torch = pytest.importorskip("torch")
    import importlib

    import numpy as np

    source = importlib.import_module(f"perfsuite.models.torch.{name}").build(TINY[name]).eval()
    target = _tiny(name)
    _copy_torch_weights(name, source, target)
    ids, _ = _ids_and_changed()
    with torch.no_grad():
        expected = source(torch.from_numpy(ids).long()).numpy()
    np.testing.assert_allclose(np.asarray(target(ids, training=False)), expected, rtol=1e-4, atol=1e-4)
