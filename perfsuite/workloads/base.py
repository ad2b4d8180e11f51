"""Workload: everything that follows from what a burst feeds its model.

One object per kind (perfsuite.workloads.image, perfsuite.workloads.token) answers every question
whose answer differs between kinds: the unit and the names of its figures, what one sample counts
for, the key's part, the builder's arguments, the data pipelines of each framework and data
location, the loss a burst learns by, whether a layout applies, and the FLOPs per item. Every
other module asks the spec's or the model's workload, so a new kind is one module here and its
registration, never a branch elsewhere.

Importable without a framework: pipelines and losses are named as ``"module:function"``, and the
burst worker imports them (perfsuite.worker.pipelines).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfsuite.contract.model_info import ModelInfo
    from perfsuite.contract.spec import BurstSpec

# Training FLOPs per forward FLOP: the backward pass costs about twice the forward (gradients of
# activations and of weights), as perfsuite.analysis.mfu counts training.
TRAIN_FLOPS_PER_FORWARD = 3


@dataclass(frozen=True)
class Workload:
    """A workload kind. Subclasses answer for their kind; the attributes name it."""

    name: str  # "image", "token": what ModelInfo.workload and BurstSpec.workload hold
    unit: str  # "img/s", "tokens/s"
    item: str  # one of what the unit counts: "image", "token"
    figure: str  # the throughput's name where a person or program reads it: "images_per_sec"
    per_window: str  # what one window trained, named by the unit: "images_per_window"
    key_prefix: str  # the key's part that names the input's size: "img224", "seq128"
    layout_applies: bool  # whether a memory format (NHWC or NCHW) means anything to its inputs
    # framework -> data location -> "module:function" of the pipeline that makes its batches;
    # torch's takes (spec, info, device, seed), TensorFlow's (spec, strategy, info, seed).
    pipelines: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # framework -> "module:function" of the loss a burst trains by (perfsuite.worker.backends).
    losses: Mapping[str, str] = field(default_factory=dict)
    # The spec's dimension the key part names ("image_size" or "seq_len"), and the option that
    # asks for it where one does (a token model's --perf-seq-len); None: the model decides.
    key_field: str = ""
    key_option: str | None = None
    dimensions: tuple[str, ...] = ()  # the case dimensions only this workload sweeps ("seq_len")

    # -- the spec ---------------------------------------------------------------------------

    def spec_fields(self, info: ModelInfo, device_kind: str, seq_len: int | None) -> dict[str, int]:
        """The spec's fields that describe this workload's input, for ``info`` on ``device_kind``;
        ``seq_len`` is what the run asked for, where it asked."""
        raise NotImplementedError

    def check(self, spec: BurstSpec) -> list[str]:
        """What is wrong with ``spec``'s input fields for this workload, in words."""
        raise NotImplementedError

    def normalised(self, spec: BurstSpec) -> dict[str, Any]:
        """The spec's fields that mean nothing to this workload, set to their defaults, so equal
        bursts stay equal."""
        return {}

    def items_per_sample(self, spec: BurstSpec) -> int:
        """What one sample of a batch counts for in the throughput."""
        raise NotImplementedError

    def key_part(self, spec: BurstSpec) -> str:
        return f"{self.key_prefix}{getattr(spec, self.key_field)}"

    def names_key_part(self, part: str) -> bool:
        """Whether a baseline key's part is this workload's (``img224``, ``seq64``)."""
        rest = part[len(self.key_prefix) :]
        return part.startswith(self.key_prefix) and rest.isdigit()

    def input_words(self, spec: BurstSpec) -> str:
        """What a sample is, for a label: "" or " x 128 tokens"."""
        return ""

    def json_fields(self, spec: BurstSpec) -> dict[str, int]:
        """The input's size as a --perf-json row names it: image_size, or seq_len."""
        return {self.key_field: getattr(spec, self.key_field)}

    def extra_figures(self, throughput: float | None, spec: BurstSpec) -> dict[str, float | None]:
        """Figures a row carries beside its throughput (a token model's sequences per second)."""
        return {}

    # -- the model --------------------------------------------------------------------------

    def builder_kwargs(self, info: ModelInfo, spec: BurstSpec, accepts: frozenset[str]) -> dict[str, Any]:
        """The arguments the registered builder is called with; ``accepts`` names the builder's
        parameters (an image builder may take ``image_size``)."""
        raise NotImplementedError

    def describe_input(self, info: ModelInfo) -> str:
        """'224 px', '1024 tokens (128 on a CPU worker) of 50257'."""
        raise NotImplementedError

    def counts_forward_flops(self, info: ModelInfo) -> bool:
        """Whether the worker must count the model's forward FLOPs (the registration left them out
        and the structure does not give them)."""
        return False

    # -- FLOPs ------------------------------------------------------------------------------

    def train_flops_per_item(self, info: ModelInfo, seq_len: int | None = None) -> float | None:
        """Training FLOPs (forward and backward) per item; None where they are not known."""
        raise NotImplementedError

    def flops_per_item(self, info: ModelInfo, spec: BurstSpec) -> float | None:
        """The model FLOPs of one item of ``spec``'s burst: training's, or one forward pass for
        inference; None where they are not known or ``info`` is of another workload."""
        if info.workload != self.name or not self.same_input(info, spec):
            return None
        train = self.train_flops_per_item(info, getattr(spec, "seq_len", None) or None)
        if train is None or not train > 0:
            return None
        return train if spec.mode != "infer" else train / TRAIN_FLOPS_PER_FORWARD

    def same_input(self, info: ModelInfo, spec: BurstSpec) -> bool:
        """Whether ``info``'s registered FLOPs hold for ``spec``'s input."""
        return True

    def step_flops(self, info: ModelInfo, batch: int, seq_len: int | None, mode: str) -> float | None:
        """One device's model FLOPs a step, before a burst: None where they are not known yet."""
        per_item = self.train_flops_per_item(info, seq_len)
        if per_item is None:
            return None
        if mode == "infer":
            per_item /= TRAIN_FLOPS_PER_FORWARD
        return per_item * batch * self.items_per_batch_sample(info, seq_len)

    def items_per_batch_sample(self, info: ModelInfo, seq_len: int | None) -> int:
        return 1

    def recomputed_flops_per_item(
        self, info: ModelInfo, spec: BurstSpec, block_params: int, measure: Callable[[], float]
    ) -> float | None:
        """The FLOPs per item that activation checkpointing adds (one more forward of every block
        of ``block_params`` parameters); ``measure()`` counts the blocks' forward on one item in
        the framework. None where neither can say."""
        return measure()
