"""What a burst is fed and learns by, as its workload names them (perfsuite.workloads): the one
dispatch from a spec to its framework's input pipeline and loss. Runs inside a burst worker, which
has the framework imported; the workload only names the functions."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from perfsuite.contract.burst_files import Unsupported
from perfsuite.contract.spec import BurstSpec


def _resolve(path: str) -> Callable[..., Any]:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def pipeline(spec: BurstSpec) -> Callable[..., Any]:
    """The function that makes ``spec``'s batches for its data location and framework."""
    work = spec.workload_kind
    path = work.pipelines.get(spec.framework, {}).get(spec.data_location)
    if path is None:
        raise Unsupported(
            f"data location {spec.data_location!r} is not implemented for {spec.framework} {work.name} models"
        )
    return _resolve(path)


def loss(spec: BurstSpec) -> Callable[..., Any]:
    """The loss ``spec``'s model learns by, in its framework."""
    work = spec.workload_kind
    path = work.losses.get(spec.framework)
    if path is None:
        raise Unsupported(f"{spec.framework} has no loss for {work.name} models")
    return _resolve(path)
