"""The ``real`` data location: files read from disk, decoded and augmented every step.

CIFAR-sized models read CIFAR-10 binary batches with the TensorFlow tutorial's
``distorted_inputs()`` distortions; ImageNet-sized models read a JPEG tree with
random-resized-crop, flip and mean/std normalisation. ``spec.augment_on`` decides where
the work after decoding runs: ``cpu`` does it per image in DataLoader workers; ``device``
leaves workers only the decode (to fixed-size uint8) and runs the augmentation as
batched tensor ops on the compute device after the copy.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Sampler

from perfsuite.contract.spec import BurstSpec
from perfsuite.data import datasets
from perfsuite.data.datasets import (
    CIFAR_CONTRAST,
    CIFAR_MAX_BRIGHTNESS,
    DECODE_SIDE,
    IMAGENET_MEAN,
    IMAGENET_STD,
    RRC_ATTEMPTS,
    RRC_RATIO,
    RRC_SCALE,
)
from perfsuite.worker.lifeline import loader_worker_init

PREFETCH_FACTOR = 4

DeviceAugment = Callable[[torch.Tensor], torch.Tensor]


def real_batches(spec: BurstSpec, num_classes: int, device: torch.device, seed: int, workers: int) -> Iterator:
    """Forever: (images float32 NCHW, labels int64) on ``device``, ``spec.batch_size`` per rank,
    decoded by ``workers`` DataLoader processes (``data.loader_workers``)."""
    rank, world = rank_and_world()
    dataset, augment = build_dataset(spec, num_classes, rank, world, device, seed)
    loader = make_loader(dataset, spec.batch_size, device, seed, workers)
    for images, labels in loader:
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        yield (augment(images) if augment else images), labels


def rank_and_world() -> tuple[int, int]:
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def build_dataset(
    spec: BurstSpec, num_classes: int, rank: int, world: int, device: torch.device, seed: int
) -> tuple[CifarRecords | JpegFiles, DeviceAugment | None]:
    """This rank's shard of the dataset, and the device-side augmentation (or None)."""
    kind, root = datasets.dataset_for("torch", spec.image_size, spec.data_dir)
    on_device = spec.augment_on == "device"
    dataset: CifarRecords | JpegFiles
    augment: DeviceAugment | None
    if kind == "cifar10-bin":
        items = shard(_cifar_index(root), rank, world, root)
        files = datasets.cifar_files(root)
        dataset = CifarRecords(files, items, spec.image_size, augment=not on_device, seed=seed)
        augment = CifarDeviceAugment(spec.image_size, device, seed) if on_device else None
        classes = len(datasets.CIFAR_CLASSES)
    else:
        files, labels, synsets = datasets.jpeg_files(root)
        if not files:
            raise ValueError(f"data dir {root} holds no JPEG files")
        picked = shard(list(range(len(files))), rank, world, root)
        side = max(DECODE_SIDE, spec.image_size)
        dataset = JpegFiles(
            [files[i] for i in picked],
            [labels[i] for i in picked],
            spec.image_size,
            decode_side=side if on_device else None,
            seed=seed,
        )
        augment = JpegDeviceAugment(spec.image_size, device, seed) if on_device else None
        classes = len(synsets)
    if classes > num_classes:
        raise ValueError(f"dataset at {root} has {classes} classes but the model has only {num_classes} outputs")
    return dataset, augment


def shard(items: list, rank: int, world: int, root) -> list:
    """Rank ``rank`` of ``world`` takes every world-th item: disjoint, sizes within one."""
    mine = items[rank::world]
    if not mine:
        raise ValueError(f"dataset at {root} has {len(items)} examples: too few to shard over {world} ranks")
    return mine


def make_loader(
    dataset: CifarRecords | JpegFiles, batch_size: int, device: torch.device, seed: int, workers: int
) -> DataLoader:
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=EpochShuffle(len(dataset), seed),
        drop_last=True,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        generator=torch.Generator().manual_seed(seed),  # seeds the workers' augmentation RNGs
        worker_init_fn=loader_worker_init(),
        persistent_workers=workers > 0,
        prefetch_factor=PREFETCH_FACTOR if workers > 0 else None,
    )


class EpochShuffle(Sampler[int]):
    """Endless indices, a fresh seeded permutation per epoch; no pipeline drain at epoch ends."""

    def __init__(self, size: int, seed: int):
        self.size = size
        self.seed = seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        while True:
            yield from torch.randperm(self.size, generator=g).tolist()


class _WorkerRng:
    """A NumPy generator per DataLoader worker, from the seed torch gives that worker."""

    seed: int
    _rng: np.random.Generator | None = None

    @property
    def rng(self) -> np.random.Generator:
        if self._rng is None:
            info = torch.utils.data.get_worker_info()
            self._rng = np.random.default_rng(info.seed if info else self.seed)
        return self._rng


# --- CIFAR-10 -----------------------------------------------------------------------------


def _cifar_index(root) -> list[tuple[int, int]]:
    """(file number, record number) of every record in the batch files."""
    index = []
    for f, path in enumerate(datasets.cifar_files(root)):
        index += [(f, r) for r in range(path.stat().st_size // datasets.CIFAR_RECORD)]
    return index


class CifarRecords(_WorkerRng, Dataset):
    """CIFAR records from memory-mapped batch files.

    ``augment``: float32 3 x crop x crop, distorted as the tutorial's ``distorted_inputs``;
    otherwise the undistorted uint8 3 x 32 x 32 record for the device to augment.
    """

    def __init__(self, files, items: list[tuple[int, int]], crop: int, augment: bool, seed: int):
        self.files = list(files)
        self.items = items
        self.crop = crop
        self.augment = augment
        self.seed = seed
        self._maps: list[tuple[np.ndarray, np.ndarray]] | None = None  # opened lazily in each worker process

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        if self._maps is None:
            self._maps = [datasets.read_cifar_batch(f) for f in self.files]
        f, r = self.items[i]
        labels, images = self._maps[f]
        image = np.array(images[r])  # copy out of the memmap
        label = int(labels[r])
        if not self.augment:
            return torch.from_numpy(image), label
        return torch.from_numpy(cifar_distort(image, self.crop, self.rng)), label


def cifar_distort(image: np.ndarray, crop: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 3 x H x W -> float32 3 x crop x crop: crop, flip, brightness, contrast, standardise."""
    _, h, w = image.shape
    y, x = rng.integers(0, h - crop + 1), rng.integers(0, w - crop + 1)
    out = image[:, y : y + crop, x : x + crop].astype(np.float32) / 255.0
    if rng.random() < 0.5:
        out = out[:, :, ::-1]
    out = out + np.float32(rng.uniform(-CIFAR_MAX_BRIGHTNESS, CIFAR_MAX_BRIGHTNESS))
    mean = out.mean(axis=(1, 2), keepdims=True)
    out = (out - mean) * np.float32(rng.uniform(*CIFAR_CONTRAST)) + mean
    return np.ascontiguousarray(_standardise(out), dtype=np.float32)


def _standardise(image: np.ndarray) -> np.ndarray:
    """tf.image.per_image_standardization: zero mean, unit std, std floored at 1/sqrt(N)."""
    std = max(float(image.std()), 1.0 / math.sqrt(image.size))
    return (image - image.mean()) / np.float32(std)


class CifarDeviceAugment:
    """The same distortions as ``cifar_distort``, batched on the compute device."""

    def __init__(self, crop: int, device: torch.device, seed: int):
        self.crop = crop
        self.device = device
        self.g = torch.Generator(device=device).manual_seed(seed)

    def _uniform(self, n: int, low: float, high: float) -> torch.Tensor:
        return torch.empty(n, 1, 1, 1, device=self.device).uniform_(low, high, generator=self.g)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        n, _, h, w = images.shape
        c, dev = self.crop, self.device
        ys = torch.randint(0, h - c + 1, (n, 1), device=dev, generator=self.g) + torch.arange(c, device=dev)
        xs = torch.randint(0, w - c + 1, (n, 1), device=dev, generator=self.g) + torch.arange(c, device=dev)
        batch = torch.arange(n, device=dev)[:, None, None]
        # Advanced indexing around the channel slice gives N x crop x crop x C.
        x = images[batch, :, ys[:, :, None], xs[:, None, :]].permute(0, 3, 1, 2).float() / 255.0
        flip = torch.rand(n, 1, 1, 1, device=dev, generator=self.g) < 0.5
        x = torch.where(flip, x.flip(3), x)
        x = x + self._uniform(n, -CIFAR_MAX_BRIGHTNESS, CIFAR_MAX_BRIGHTNESS)
        mean = x.mean(dim=(2, 3), keepdim=True)
        x = (x - mean) * self._uniform(n, *CIFAR_CONTRAST) + mean
        std = x.std(dim=(1, 2, 3), keepdim=True, correction=0).clamp_min(1.0 / math.sqrt(x[0].numel()))
        # The permute above leaves channels-last strides, and cuDNN follows the input's
        # layout: NCHW like every other cifar10 burst, or the comparison mixes in layout.
        return ((x - x.mean(dim=(1, 2, 3), keepdim=True)) / std).contiguous()


# --- ImageNet-style JPEGs -----------------------------------------------------------------


class JpegFiles(_WorkerRng, Dataset):
    """JPEG files decoded with Pillow in the loader workers.

    ``decode_side`` None: random-resized-crop, flip and normalise to float32 3 x size x size.
    Otherwise: resize the short side and centre-crop to uint8 3 x side x side, nothing random.
    """

    def __init__(self, files, labels, size: int, decode_side: int | None, seed: int):
        self.files = list(files)
        self.labels = list(labels)
        self.size = size
        self.decode_side = decode_side
        self.seed = seed
        self._mean = np.array(IMAGENET_MEAN, np.float32) * 255
        self._inv_std = 1.0 / (np.array(IMAGENET_STD, np.float32) * 255)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        with Image.open(self.files[i]) as file:
            img = file.convert("RGB")
        if self.decode_side is not None:
            side = self.decode_side
            square = _centre_square(img.width, img.height)
            pixels = np.array(img.resize((side, side), Image.Resampling.BILINEAR, box=square))
            return torch.from_numpy(pixels).permute(2, 0, 1), self.labels[i]
        y, x, h, w = random_resized_box(self.rng, img.height, img.width)
        img = img.resize((self.size, self.size), Image.Resampling.BILINEAR, box=(x, y, x + w, y + h))
        pixels = np.asarray(img, dtype=np.float32)
        if self.rng.random() < 0.5:
            pixels = pixels[:, ::-1]
        normalised = (pixels - self._mean) * self._inv_std
        return torch.from_numpy(np.ascontiguousarray(normalised.transpose(2, 0, 1))), self.labels[i]


def _centre_square(width: int, height: int) -> tuple[int, int, int, int]:
    side = min(width, height)
    x, y = (width - side) // 2, (height - side) // 2
    return x, y, x + side, y + side


def random_resized_box(rng: np.random.Generator, height: int, width: int) -> tuple[int, int, int, int]:
    """(top, left, h, w) of a RandomResizedCrop box: area and log-aspect drawn uniformly."""
    area = height * width
    log_lo, log_hi = math.log(RRC_RATIO[0]), math.log(RRC_RATIO[1])
    for _ in range(RRC_ATTEMPTS):
        target = area * rng.uniform(*RRC_SCALE)
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    # Fallback: the whole image, trimmed to the allowed aspect range, centred.
    ratio = width / height
    if ratio < RRC_RATIO[0]:
        w, h = width, int(round(width / RRC_RATIO[0]))
    elif ratio > RRC_RATIO[1]:
        h, w = height, int(round(height * RRC_RATIO[1]))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class JpegDeviceAugment:
    """RandomResizedCrop + flip + normalise for a uint8 N x 3 x S x S batch, on the device.

    Crop boxes are drawn as in ``random_resized_box`` (all attempts at once) and applied in
    one ``grid_sample`` per batch; the flip is a sign in the sampling grid. Square inputs make
    the fallback the whole image.
    """

    def __init__(self, size: int, device: torch.device, seed: int):
        self.size = size
        self.device = device
        self.g = torch.Generator(device=device).manual_seed(seed)
        self.mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1) * 255

    def _rand(self, *shape: int) -> torch.Tensor:
        return torch.rand(*shape, device=self.device, generator=self.g)

    def boxes(self, n: int, side: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(top, left, h, w) per image, in pixels, as float tensors."""
        scale = RRC_SCALE[0] + (RRC_SCALE[1] - RRC_SCALE[0]) * self._rand(n, RRC_ATTEMPTS)
        log_lo, log_hi = math.log(RRC_RATIO[0]), math.log(RRC_RATIO[1])
        aspect = torch.exp(log_lo + (log_hi - log_lo) * self._rand(n, RRC_ATTEMPTS))
        area = side * side * scale
        w = torch.round(torch.sqrt(area * aspect))
        h = torch.round(torch.sqrt(area / aspect))
        fits = (w > 0) & (w <= side) & (h > 0) & (h <= side)
        first = fits.to(torch.uint8).argmax(dim=1, keepdim=True)  # first attempt that fits
        found = fits.any(dim=1)
        w = torch.where(found, w.gather(1, first).squeeze(1), torch.full_like(found, side, dtype=w.dtype))
        h = torch.where(found, h.gather(1, first).squeeze(1), torch.full_like(found, side, dtype=h.dtype))
        top = torch.floor(self._rand(n) * (side - h + 1))
        left = torch.floor(self._rand(n) * (side - w + 1))
        return top, left, h, w

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        n, c, side, _ = images.shape
        top, left, h, w = self.boxes(n, side)
        flip = torch.where(self._rand(n) < 0.5, -1.0, 1.0)
        # grid_sample coordinates (align_corners=False): -1 and 1 are the outer pixel edges.
        theta = torch.zeros(n, 2, 3, device=self.device)
        theta[:, 0, 0] = w / side * flip
        theta[:, 0, 2] = (2 * left + w) / side - 1
        theta[:, 1, 1] = h / side
        theta[:, 1, 2] = (2 * top + h) / side - 1
        grid = F.affine_grid(theta, [n, c, self.size, self.size], align_corners=False)
        crops = F.grid_sample(images.float(), grid, mode="bilinear", padding_mode="border", align_corners=False)
        return (crops - self.mean) / self.std
