"""ModelInfo: a registered model's metadata, as the plugin knows it and the Job carries it.

``workload`` names the model's kind (perfsuite.workloads): what it is fed, what its throughput
counts and how its FLOPs are counted are the workload's to say. An image model's token fields are
None; a token model's ``image_size`` is None.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from perfsuite import workloads
from perfsuite.workloads import Workload

OBJECTIVES = ("causal", "masked")
OPTIMIZERS = ("sgd", "adamw")


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
    workload: str = "image"  # its kind's name in perfsuite.workloads: "image" (img/s), "token" (tokens/s)
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
    # A mixture of experts: the parameters one token's forward pass uses (all but the experts it
    # is not routed to), which its FLOPs count; None: every parameter is used (a dense model).
    active_params: int | None = None
    # A token model's tensor-parallel plan, "module:qualname" of a function ``plan(model, tp_mesh)``
    # that splits the built model's layers over a 1-D DeviceMesh (perfsuite.models.registry);
    # None: the model has none, and is not run with TP.
    tp_plan: str | None = None

    @property
    def workload_kind(self) -> Workload:
        return workloads.get(self.workload)

    @property
    def unit(self) -> str:
        """What a burst's throughput counts: "img/s" or "tokens/s"."""
        return self.workload_kind.unit

    def train_flops_per_item(self, seq_len: int | None = None) -> float | None:
        """Training FLOPs (forward and backward) per item, as its workload counts them (an image
        model's per image at its image size, a token model's per token at ``seq_len``, default
        its own); None where unknown."""
        return self.workload_kind.train_flops_per_item(self, seq_len)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelInfo:
        """From ``as_dict``'s dictionary; one written before the token fields reads as an image model."""
        return cls(**data)
