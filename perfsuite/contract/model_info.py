"""ModelInfo: a registered model's metadata, as the plugin knows it and the Job carries it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ModelInfo:
    name: str
    framework: str
    image_size: int  # square input side the model is measured at
    batch_size: int  # default batch per device on an accelerator
    cpu_batch_size: int  # default batch per CPU worker (keeps CPU bursts short)
    params: int | None  # published parameter count; None: counted by the burst worker
    flops: float | None  # forward FLOPs per image (multiply-adds x 2); None: measured by the burst worker
    num_classes: int
    builder: str  # "module:qualname" of the builder function
    source: str | None  # file of the builder's module, for models registered outside the package
    description: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelInfo:
        return cls(**data)
