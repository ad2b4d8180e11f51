"""The image workload: a model takes images of a size and learns their classes; measured in img/s.

The seeds' CNNs and ViT. Its FLOPs are registered per image at the model's own image size (or
counted by the worker), and its batches come in a memory format (NHWC or NCHW).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perfsuite.workloads.base import TRAIN_FLOPS_PER_FORWARD, Workload

if TYPE_CHECKING:
    from perfsuite.contract.model_info import ModelInfo
    from perfsuite.contract.spec import BurstSpec

_TORCH = "perfsuite.worker.backends.torch.data"
_TF = "perfsuite.worker.backends.tf.data"


class ImageWorkload(Workload):
    def spec_fields(self, info: ModelInfo, device_kind: str, seq_len: int | None) -> dict[str, int]:
        return {"image_size": info.image_size or 224, "seq_len": 0}

    def check(self, spec: BurstSpec) -> list[str]:
        problems = [] if spec.image_size >= 1 else ["image_size must be >= 1"]
        if spec.seq_len:
            problems.append("seq_len must be 0 for an image model: it has no sequence length")
        return problems

    def items_per_sample(self, spec: BurstSpec) -> int:
        return 1

    def builder_kwargs(self, info: ModelInfo, spec: BurstSpec, accepts: frozenset[str]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"num_classes": info.num_classes}
        if "image_size" in accepts:
            kwargs["image_size"] = spec.image_size
        return kwargs

    def describe_input(self, info: ModelInfo) -> str:
        return f"{info.image_size} px"

    def counts_forward_flops(self, info: ModelInfo) -> bool:
        return info.flops is None

    def train_flops_per_item(self, info: ModelInfo, seq_len: int | None = None) -> float | None:
        """3 x the registered forward FLOPs per image, at the model's image size."""
        return None if info.flops is None else TRAIN_FLOPS_PER_FORWARD * info.flops

    def same_input(self, info: ModelInfo, spec: BurstSpec) -> bool:
        return info.image_size == spec.image_size


IMAGE = ImageWorkload(
    name="image",
    unit="img/s",
    item="image",
    figure="images_per_sec",
    per_window="images_per_window",
    key_prefix="img",
    layout_applies=True,
    pipelines={
        "torch": {loc: f"{_TORCH}:{loc}_batches" for loc in ("device", "host", "python", "real")},
        "tf": {loc: f"{_TF}:{loc}_feed" for loc in ("device", "host", "python", "real")},
    },
    losses={
        "torch": "perfsuite.worker.backends.torch.train:class_loss",
        "tf": "perfsuite.worker.backends.tf.train:class_replica_loss",
    },
    key_field="image_size",
    key_option=None,
)
