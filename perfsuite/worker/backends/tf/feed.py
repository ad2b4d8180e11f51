"""Feed: what a TensorFlow training step is called with, whatever the data location."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Feed:
    source: Any  # per-replica tensors, or a distributed iterator
    take: Callable[[Any], tuple]  # runs inside the step: source -> (images, labels)
