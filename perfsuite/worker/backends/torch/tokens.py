"""Token input pipelines, one per data location; each yields (ids, targets) on the compute device.

ids and targets are int64 ``[batch, seq_len]``; a target the loss leaves out is
``perfsuite.data.tokens.IGNORE``. The language and the pairs come from perfsuite.data.tokens, so a
torch burst and a TensorFlow burst of one spec read the same kind of text.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.spec import BurstSpec
from perfsuite.data import tokens
from perfsuite.worker.backends.torch.data import loader_workers
from perfsuite.worker.lifeline import loader_worker_init


def _pair(spec: BurstSpec, info: ModelInfo, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    assert info.vocab_size is not None and info.objective is not None
    rows = tokens.sequences(tokens.Language(info.vocab_size, spec.seed), spec.batch_size, spec.seq_len, rng)
    ids, targets = tokens.training_pair(rows, info.objective, info.vocab_size, rng)
    return torch.from_numpy(np.ascontiguousarray(ids)), torch.from_numpy(np.ascontiguousarray(targets))


def device_batches(spec: BurstSpec, info: ModelInfo, device: torch.device, seed: int) -> Iterator:
    """Ids made once, resident on the compute device, and reused (tensorpack 'gpu')."""
    ids, targets = _pair(spec, info, np.random.default_rng(seed))
    ids, targets = ids.to(device), targets.to(device)
    while True:
        yield ids, targets


def host_batches(spec: BurstSpec, info: ModelInfo, device: torch.device, seed: int) -> Iterator:
    """Ids in host memory, copied to the device every step (tensorpack 'cpu')."""
    ids, targets = _pair(spec, info, np.random.default_rng(seed))
    if device.type == "cuda":
        ids, targets = ids.pin_memory(), targets.pin_memory()
        while True:
            yield ids.to(device, non_blocking=True), targets.to(device, non_blocking=True)
    else:
        while True:  # a CPU worker has no device memory apart: the per-step copy is the host cost
            yield ids.clone(), targets.clone()


class _Tokenized(IterableDataset):
    """Batches of text written from the language and tokenized in the loader's Python."""

    def __init__(self, spec: BurstSpec, info: ModelInfo, seed: int):
        self.spec, self.info, self.seed = spec, info, seed

    def __iter__(self):
        spec, info = self.spec, self.info
        assert info.vocab_size is not None and info.objective is not None
        worker = torch.utils.data.get_worker_info()
        rng = np.random.default_rng([self.seed, worker.id if worker else 0])
        language, lexicon = tokens.Language(info.vocab_size, spec.seed), tokens.Lexicon(info.vocab_size)
        width = spec.seq_len + 1
        while True:
            text = lexicon.text(language.stream(spec.batch_size * width, rng))
            rows = np.array(lexicon.tokenize(text), dtype=np.int64).reshape(spec.batch_size, width)
            ids, targets = tokens.training_pair(rows, info.objective, info.vocab_size, rng)
            yield torch.from_numpy(np.ascontiguousarray(ids)), torch.from_numpy(np.ascontiguousarray(targets))


class _TokenFile(Dataset):
    """Rows of ``seq_len + 1`` ids at random offsets of the token file (nanoGPT's get_batch), one
    row an item, batched by the DataLoader."""

    def __init__(self, spec: BurstSpec, info: ModelInfo, seed: int):
        assert info.vocab_size is not None and info.objective is not None
        self.path, self.dtype = tokens.ensure_token_file(info.vocab_size, spec.data_dir)
        self.width, self.objective, self.vocab = spec.seq_len + 1, info.objective, info.vocab_size
        self.seed = seed
        self.ids: np.memmap | None = None  # mapped in each loader process, not pickled to it
        size = self.path.stat().st_size // self.dtype.itemsize
        if size < self.width:
            raise ValueError(f"{self.path} holds {size} tokens, fewer than a row of {self.width}")
        self.rows = size - self.width + 1

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, start: int):
        if self.ids is None:
            self.ids = tokens.windows(self.path, self.dtype)
        row = np.asarray(self.ids[start : start + self.width], dtype=np.int64)[None, :]
        rng = np.random.default_rng([self.seed, start])
        ids, targets = tokens.training_pair(row, self.objective, self.vocab, rng)
        return torch.from_numpy(ids[0].copy()), torch.from_numpy(targets[0].copy())


def _loaded(dataset, spec: BurstSpec, device: torch.device, **loader) -> Iterator:
    batches = DataLoader(
        dataset,
        num_workers=loader_workers(spec),
        prefetch_factor=4,
        pin_memory=device.type == "cuda",
        persistent_workers=True,
        worker_init_fn=loader_worker_init(),
        **loader,
    )
    while True:
        for ids, targets in batches:
            yield ids.to(device, non_blocking=True), targets.to(device, non_blocking=True)


def python_batches(spec: BurstSpec, info: ModelInfo, device: torch.device, seed: int) -> Iterator:
    return _loaded(_Tokenized(spec, info, seed), spec, device, batch_size=None)


def real_batches(spec: BurstSpec, info: ModelInfo, device: torch.device, seed: int) -> Iterator:
    """The token file read through the DataLoader: random rows, each rank its own draw."""
    dataset = _TokenFile(spec, info, seed)
    sampler = torch.utils.data.RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
    return _loaded(dataset, spec, device, batch_size=spec.batch_size, sampler=sampler, drop_last=True)
