"""ModelInfo: a registered model's metadata, as the plugin knows it and the Job carries it.

Two workload kinds share it. An image model (``workload="image"``) takes images of
``image_size`` and is measured in img/s; a token model (``workload="token"``) takes token
ids of a sequence length from a vocabulary and is measured in tokens/s. The token fields
are None for an image model, and ``image_size`` is None for a token model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

WORKLOADS = ("image", "token")
OBJECTIVES = ("causal", "masked")
OPTIMIZERS = ("sgd", "adamw")
UNITS = {"image": "img/s", "token": "tokens/s"}
# Training FLOPs per forward FLOP: the backward pass costs about twice the forward
# (gradients of activations and of weights), as perfsuite.analysis.mfu counts training.
TRAIN_FLOPS_PER_FORWARD = 3


@dataclass(frozen=True)
class ModelInfo:
    name: str
    framework: str
    image_size: int | None  # square input side an image model is measured at; None: a token model
    batch_size: int  # default batch per device on an accelerator
    cpu_batch_size: int  # default batch per CPU worker (keeps CPU bursts short)
    params: int | None  # published parameter count; None: counted by the burst worker
    # Forward FLOPs per image (multiply-adds x 2); None: measured by the burst worker, or a
    # token model, whose FLOPs per token come from its structure (train_flops_per_item).
    flops: float | None
    num_classes: int  # an image model's classes; a token model's vocabulary (the logits' width)
    builder: str  # "module:qualname" of the builder function
    source: str | None  # file of the builder's module, for models registered outside the package
    description: str = ""
    workload: str = "image"  # "image" (img/s) or "token" (tokens/s)
    optimizer: str = "sgd"  # what a burst trains with: "sgd" (the CNNs) or "adamw" (the transformers)
    # A token model's shapes: its default sequence length on an accelerator and per CPU
    # worker, its vocabulary, and what it learns ("causal": the next token, "masked": the
    # masked tokens).
    seq_len: int | None = None
    cpu_seq_len: int | None = None
    vocab_size: int | None = None
    objective: str | None = None
    # The structure a token model's FLOPs per token come from: layers, query heads, the
    # width of a head, and the parameters left out of N (see train_flops_per_item).
    layers: int | None = None
    heads: int | None = None
    head_dim: int | None = None
    embedding_params: int | None = None

    @property
    def unit(self) -> str:
        """What a burst's throughput counts: "img/s" or "tokens/s"."""
        return UNITS[self.workload]

    def train_flops_per_item(self, seq_len: int | None = None) -> float | None:
        """Training FLOPs (forward and backward) per image or per token; None where unknown.

        An image model: 3 x its forward FLOPs per image (``flops``), at ``image_size``.

        A token model, per token at sequence length ``seq_len`` (default: ``self.seq_len``):
        ``6 * N + 12 * L * H * Q * T``, as torchtitan and nanoGPT count it. ``6 * N`` is the
        weights' matmuls (2 FLOPs per multiply-add, forward plus twice that backward), with
        N = ``params - embedding_params``; ``12 * L * H * Q * T`` is attention's two
        matmuls (scores and the weighted sum) over T keys in each of L layers, H query heads
        of width Q. Causal attention is counted in full, as if every token saw all T: the
        convention of both references, although a causal kernel does about half that work.

        N holds every weight that does a matmul. The parameters left out of it
        (``embedding_params``) are the ones that are only looked up: position and token-type
        embeddings, and a token embedding that is not also the output layer. A token
        embedding tied to the output layer (GPT-2, BERT) does its matmul as the output
        layer and stays in N, as nanoGPT counts it; an untied one (Llama) is left out and
        its separate output layer counted, as torchtitan counts it.
        """
        if self.workload == "image":
            return None if self.flops is None else TRAIN_FLOPS_PER_FORWARD * self.flops
        length = seq_len if seq_len is not None else self.seq_len
        params, embedding, layers, heads, width = (
            self.params,
            self.embedding_params,
            self.layers,
            self.heads,
            self.head_dim,
        )
        if params is None or embedding is None or layers is None or heads is None or width is None or length is None:
            return None  # a model registered without its parameter count: the worker counts it
        return float(6 * (params - embedding) + 12 * layers * heads * width * length)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelInfo:
        """From ``as_dict``'s dictionary; one written before the token fields reads as an image model."""
        return cls(**data)
