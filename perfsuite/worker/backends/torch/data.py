"""An image model's input pipelines, one per data location (named by perfsuite.workloads.image).
Each takes (spec, info, device, seed) and yields (images, labels) on the compute device."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from perfsuite.common.hardware import cpu_cores
from perfsuite.contract.spec import BurstSpec
from perfsuite.worker.lifeline import loader_worker_init


def _synthetic(spec: BurstSpec, num_classes: int, device: torch.device, seed: int):
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(spec.batch_size, 3, spec.image_size, spec.image_size, generator=g)
    labels = torch.randint(0, num_classes, (spec.batch_size,), generator=g)
    return images.to(device), labels.to(device)


def device_batches(spec, info, device, seed) -> Iterator:
    """Synthetic tensors created once on the compute device and reused (tensorpack 'gpu'), in
    the burst's layout: the step's conversion to channels_last is then no copy at all."""
    images, labels = _synthetic(spec, info.num_classes, device, seed)
    if spec.layout == "channels_last":
        images = images.contiguous(memory_format=torch.channels_last)
    while True:
        yield images, labels


def host_batches(spec, info, device, seed) -> Iterator:
    """Synthetic tensors in host memory, copied to the device every step (tensorpack 'cpu')."""
    images, labels = _synthetic(spec, info.num_classes, torch.device("cpu"), seed)
    if device.type == "cuda":
        images, labels = images.pin_memory(), labels.pin_memory()
        while True:
            yield images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
    else:
        # A CPU worker has no separate device memory; the per-step copy is the host cost.
        while True:
            yield images.clone(), labels.clone()


class _PythonBatches(IterableDataset):
    """Batches built by Python/NumPy code in loader workers (tensorpack 'python')."""

    def __init__(self, batch_size: int, image_size: int, num_classes: int, seed: int):
        self.shape = (batch_size, 3, image_size, image_size)
        self.num_classes = num_classes
        self.seed = seed

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        rng = np.random.default_rng(self.seed + (info.id if info else 0))
        while True:
            images = rng.standard_normal(self.shape, dtype=np.float32)
            labels = rng.integers(0, self.num_classes, self.shape[0])
            yield torch.from_numpy(images), torch.from_numpy(labels)


# Loader processes per rank, at most, when CPU workers stand in for devices: the compute
# threads need the node's cores too.
CPU_WORKER_LOADERS = 4


def loader_workers(spec: BurstSpec) -> int:
    """DataLoader processes per rank: the node's cores shared by the ranks on this node.

    A GPU at full speed wants thousands of decoded images a second: a fixed small pool
    would measure the pool, and TensorFlow's tf.data takes every core (AUTOTUNE).
    ``PERFSUITE_LOADER_WORKERS`` overrides the count.
    """
    env = os.environ.get("PERFSUITE_LOADER_WORKERS")
    if env:
        return int(env)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", spec.devices))  # this node's ranks, not the job's
    share = max(1, cpu_cores() // local)
    return share if spec.device_kind == "cuda" else min(CPU_WORKER_LOADERS, share)


def input_workers(spec: BurstSpec) -> int:
    """Loader processes per rank for this burst's data location (0: the rank makes its own input)."""
    return loader_workers(spec) if spec.data_location in ("python", "real") else 0


def python_batches(spec, info, device, seed) -> Iterator:
    loader = DataLoader(
        _PythonBatches(spec.batch_size, spec.image_size, info.num_classes, seed),
        batch_size=None,
        num_workers=loader_workers(spec),
        prefetch_factor=4,
        pin_memory=device.type == "cuda",
        persistent_workers=True,
        worker_init_fn=loader_worker_init(),
    )
    for images, labels in loader:
        yield images.to(device, non_blocking=True), labels.to(device, non_blocking=True)


def real_batches(spec, info, device, seed) -> Iterator:
    # Imported on use: the real pipeline needs Pillow, the synthetic ones do not.
    from perfsuite.worker.backends.torch.real import real_batches as make

    return make(spec, info.num_classes, device, seed, loader_workers(spec))
