"""Tiny token models for the plugin's own tests: the built-in transformers' code at 2 layers,
d 64 and a 512-token vocabulary, so that a burst's step takes milliseconds on a CPU core."""

import dataclasses

from perfsuite import register_token_model
from perfsuite.models.catalog import BERT_BASE, GPT2_SMALL, LLAMA_SMALL, flops_structure

VOCAB = 512
SMALL = {"layers": 2, "d_model": 64, "heads": 4, "d_ff": 256, "vocab_size": VOCAB}
GPT2 = dataclasses.replace(GPT2_SMALL, **SMALL, positions=128)
BERT = dataclasses.replace(BERT_BASE, **SMALL, positions=128)
LLAMA = dataclasses.replace(LLAMA_SMALL, **{**SMALL, "d_ff": 192}, kv_heads=2)
SHAPES = {"seq_len": 64, "batch_size": 4, "cpu_seq_len": 64, "cpu_batch_size": 4, "vocab_size": VOCAB}


def _register(name: str, framework: str, config, objective: str, tp_plan: str | None = None):
    def decorate(fn):
        return register_token_model(
            name, framework=framework, **SHAPES, objective=objective, **flops_structure(config), tp_plan=tp_plan
        )(fn)

    return decorate


# The built-in models' tensor-parallel plans serve their tiny twins: the same code, split the same way.
@_register("tiny_gpt2", "torch", GPT2, "causal", "perfsuite.models.torch.gpt2:tp_plan")
def tiny_gpt2_torch(vocab_size: int = VOCAB, seq_len: int = 64):
    """GPT-2's code at 2 layers, d 64."""
    from perfsuite.models.torch.gpt2 import build

    return build(dataclasses.replace(GPT2, vocab_size=vocab_size))


@_register("tiny_bert", "torch", BERT, "masked", "perfsuite.models.torch.bert:tp_plan")
def tiny_bert_torch(vocab_size: int = VOCAB, seq_len: int = 64):
    """BERT's masked LM at 2 layers, d 64."""
    from perfsuite.models.torch.bert import build

    return build(dataclasses.replace(BERT, vocab_size=vocab_size))


@_register("tiny_llama", "torch", LLAMA, "causal", "perfsuite.models.torch.llama:tp_plan")
def tiny_llama_torch(vocab_size: int = VOCAB, seq_len: int = 64):
    """The Llama-style decoder at 2 layers, d 64, 2 key/value heads."""
    from perfsuite.models.torch.llama import build

    return build(dataclasses.replace(LLAMA, vocab_size=vocab_size))


@_register("tiny_gpt2", "tf", GPT2, "causal")
def tiny_gpt2_tf(vocab_size: int = VOCAB, seq_len: int = 64):
    """GPT-2's code at 2 layers, d 64."""
    from perfsuite.models.tf.gpt2 import build

    return build(dataclasses.replace(GPT2, vocab_size=vocab_size), seq_len)


@_register("tiny_bert", "tf", BERT, "masked")
def tiny_bert_tf(vocab_size: int = VOCAB, seq_len: int = 64):
    """BERT's masked LM at 2 layers, d 64."""
    from perfsuite.models.tf.bert import build

    return build(dataclasses.replace(BERT, vocab_size=vocab_size), seq_len)


@_register("tiny_llama", "tf", LLAMA, "causal")
def tiny_llama_tf(vocab_size: int = VOCAB, seq_len: int = 64):
    """The Llama-style decoder at 2 layers, d 64, 2 key/value heads."""
    from perfsuite.models.tf.llama import build

    return build(dataclasses.replace(LLAMA, vocab_size=vocab_size), seq_len)
