"""On-disk datasets for the ``real`` data location: generation, validation and discovery.

Framework-free (NumPy and Pillow only) so the torch and TensorFlow backends share it.
Three formats, laid out exactly as the public originals so a user's own copy can stand in
for a generated one (``--perf-data-dir``):

* ``cifar10-bin``: CIFAR-10 binary batches ``data_batch_N.bin``; each record is one label
  byte then 3072 image bytes (1024 R, 1024 G, 1024 B, each 32x32 row-major).
* ``jpeg``: an ImageNet-style tree ``train/<synset>/<name>.JPEG``.
* ``tfrecord``: TFRecord shards ``train-NNNNN-of-MMMMM`` of ``tf.train.Example`` protos
  with the keys of TensorFlow's ``build_imagenet_data.py`` (labels 1-based, as there).

Generated datasets are made once per cache directory and reused; several ranks may race
to make one, so each builds in a private temporary directory and renames it into place.
"""

from __future__ import annotations

import io
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from PIL import Image

from perfsuite.common.files import cache_root

KINDS = ("cifar10-bin", "jpeg", "tfrecord")
FORMAT_VERSION = 1  # bump when generated content changes, so stale caches are not reused
DEFAULT_IMAGES = {"cifar10-bin": 2048, "jpeg": 512, "tfrecord": 512}

CIFAR_SIDE = 32
CIFAR_RECORD = 1 + 3 * CIFAR_SIDE * CIFAR_SIDE
CIFAR_RECORDS_PER_FILE = 1024  # the originals hold 10000; smaller keeps generation quick
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

JPEG_SUFFIXES = (".jpeg", ".jpg")
JPEG_CLASSES = 16  # generated synsets; labels stay in range for any model with >= 16 classes
JPEG_SIDES = (256, 500)  # varied sizes around ImageNet's, so random-resized-crop has work
JPEG_QUALITY = 90
TFRECORD_SHARDS = 4
TFRECORD_LABEL_OFFSET = 1  # build_imagenet_data.py keeps label 0 for "background"

# The `real` augmentation both backends apply, so their bursts do the same input work.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
RRC_SCALE = (0.08, 1.0)  # random-resized-crop area and aspect ratio ranges
RRC_RATIO = (3 / 4, 4 / 3)
RRC_ATTEMPTS = 10
DECODE_SIDE = 256  # JPEGs leave the input pipeline as DECODE_SIDE^2 uint8 when augmenting on the device
CIFAR_MAX_BRIGHTNESS = 63 / 255  # the TF CIFAR-10 tutorial's distortions
CIFAR_CONTRAST = (0.2, 1.8)


def dataset_kind(model_image_size: int) -> str:
    """CIFAR-sized models read CIFAR-10 batches; everything larger reads a JPEG tree."""
    return "cifar10-bin" if model_image_size <= CIFAR_SIDE else "jpeg"


def ensure_dataset(
    kind: str,
    data_dir: str | os.PathLike | None,
    cache_dir: Path | None = None,
    images: int | None = None,
    seed: int = 0,
) -> Path:
    """Return a directory holding a ``kind`` dataset.

    With ``data_dir``: check it holds that format (ValueError otherwise) and return it.
    Without: generate ``images`` examples once under ``cache_dir`` (default
    ``$PERFSUITE_CACHE/datasets`` or ``~/.cache/perfsuite/datasets``) and reuse them.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown dataset kind {kind!r}; expected one of {KINDS}")
    if data_dir is not None:
        root = Path(data_dir).expanduser()
        _VALIDATORS[kind](root)
        return root
    images = DEFAULT_IMAGES[kind] if images is None else images
    if images < 1:
        raise ValueError("images must be >= 1")
    name = f"{kind}-v{FORMAT_VERSION}-{images}" + (f"-s{seed}" if seed else "")
    target = (cache_dir or default_cache_dir()) / name
    if not target.is_dir():
        _generate_atomically(target, lambda tmp: _GENERATORS[kind](tmp, images, seed))
    return target


def dataset_for(framework: str, image_size: int, data_dir: str | os.PathLike | None) -> tuple[str, Path]:
    """(kind, dir) that ``framework``'s `real` data location reads for a model of this input size:
    CIFAR-10 batches for CIFAR-sized models; else a JPEG tree (torch) or TFRecords (tf)."""
    kind = dataset_kind(image_size)
    if kind == "cifar10-bin" or framework != "tf":
        return kind, ensure_dataset(kind, data_dir)
    return imagenet_dataset(data_dir)


def imagenet_dataset(data_dir: str | os.PathLike | None, cache_dir: Path | None = None) -> tuple[str, Path]:
    """(kind, dir) of an ImageNet-style dataset for a TFRecord reader: TFRecord shards,
    else a JPEG tree, so one ``--perf-data-dir`` can serve torch and TensorFlow alike.
    Without ``data_dir``: generated TFRecords in the cache."""
    if data_dir is None:
        return "tfrecord", ensure_dataset("tfrecord", None, cache_dir)
    root = Path(data_dir).expanduser()
    _require_dir(root, "tfrecord or jpeg")
    for kind in ("tfrecord", "jpeg"):
        try:
            return kind, ensure_dataset(kind, root)
        except ValueError:
            continue
    raise ValueError(
        f"data dir {root} holds neither TFRecord files (train-00000-of-NNNNN or *.tfrecord) "
        f"nor an ImageNet-style JPEG tree (train/<synset>/<name>.JPEG)"
    )


def default_cache_dir() -> Path:
    return cache_root() / "datasets"


def _generate_atomically(target: Path, generate) -> None:
    """Build in a sibling temp dir, then rename: readers only ever see a complete dataset."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        generate(tmp)
        os.rename(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not target.is_dir():  # not a lost race: a real failure
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# --- synthetic, content-bearing images ---------------------------------------------------


def synthetic_image(rng: np.random.Generator, height: int, width: int, tint: np.ndarray | None = None) -> np.ndarray:
    """HxWx3 uint8: smooth random blobs and gradients plus pixel noise, so decode is not trivial."""
    grid = int(rng.integers(3, 9))
    coarse = rng.integers(0, 256, (grid, grid, 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC), dtype=np.int16)
    noise = rng.integers(-12, 13, (height, width, 3), dtype=np.int16)
    image = smooth + noise
    if tint is not None:  # a class-dependent colour cast gives the labels something to predict
        image = (image + tint.astype(np.int16)) // 2
    return np.clip(image, 0, 255).astype(np.uint8)


def _class_tints(rng: np.random.Generator, classes: int) -> np.ndarray:
    return rng.integers(0, 256, (classes, 3), dtype=np.uint8)


def encode_jpeg(image: np.ndarray, quality: int = JPEG_QUALITY) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def _jpeg_examples(count: int, seed: int) -> Iterator[tuple[int, int, bytes, int, int]]:
    """(index, class, jpeg bytes, height, width) for ``count`` generated photos."""
    rng = np.random.default_rng(seed)
    tints = _class_tints(rng, JPEG_CLASSES)
    for i in range(count):
        label = i % JPEG_CLASSES
        height, width = (int(s) for s in rng.integers(JPEG_SIDES[0], JPEG_SIDES[1] + 1, 2))
        yield i, label, encode_jpeg(synthetic_image(rng, height, width, tints[label])), height, width


def synset_names(classes: int = JPEG_CLASSES) -> list[str]:
    return [f"n{i:08d}" for i in range(classes)]


# --- CIFAR-10 binary ---------------------------------------------------------------------


def write_cifar_batch(path: Path, labels: np.ndarray, images: np.ndarray) -> None:
    """``images``: N x 32 x 32 x 3 uint8 (HWC, as decoded photos come); stored planar CHW."""
    labels = np.asarray(labels, dtype=np.uint8)
    planar = np.ascontiguousarray(np.asarray(images, dtype=np.uint8).transpose(0, 3, 1, 2))
    records = np.concatenate([labels[:, None], planar.reshape(len(labels), -1)], axis=1)
    records.tofile(path)


def read_cifar_batch(path: Path, mmap: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(labels uint8 [N], images uint8 [N, 3, 32, 32]) of one batch file; views of a memmap."""
    raw = np.memmap(path, dtype=np.uint8, mode="r") if mmap else np.fromfile(path, dtype=np.uint8)
    records = raw.reshape(-1, CIFAR_RECORD)
    return records[:, 0], records[:, 1:].reshape(-1, 3, CIFAR_SIDE, CIFAR_SIDE)


def cifar_files(root: Path) -> list[Path]:
    """The training batch files, in order; accepts the tarball's ``cifar-10-batches-bin`` too."""
    root = Path(root)
    nested = root / "cifar-10-batches-bin"
    if not any(root.glob("data_batch_*.bin")) and nested.is_dir():
        root = nested
    return sorted(root.glob("data_batch_*.bin"), key=lambda p: int(p.stem.rsplit("_", 1)[-1]))


def _generate_cifar(root: Path, images: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    tints = _class_tints(rng, len(CIFAR_CLASSES))
    for n, start in enumerate(range(0, images, CIFAR_RECORDS_PER_FILE), 1):
        count = min(CIFAR_RECORDS_PER_FILE, images - start)
        labels = rng.integers(0, len(CIFAR_CLASSES), count)
        pics = np.stack([synthetic_image(rng, CIFAR_SIDE, CIFAR_SIDE, tints[c]) for c in labels])
        write_cifar_batch(root / f"data_batch_{n}.bin", labels, pics)
    (root / "batches.meta.txt").write_text("\n".join(CIFAR_CLASSES) + "\n")


def _validate_cifar(root: Path) -> None:
    _require_dir(root, "cifar10-bin")
    files = cifar_files(root)
    if not files:
        raise ValueError(f"data dir {root} holds no CIFAR-10 binary batches (expected data_batch_1.bin ...)")
    for f in files:
        size = f.stat().st_size
        if size == 0 or size % CIFAR_RECORD:
            raise ValueError(
                f"data dir {root}: {f.name} is {size} bytes, not a whole number of {CIFAR_RECORD}-byte CIFAR-10 records"
            )


# --- ImageNet-style JPEG tree ------------------------------------------------------------


def jpeg_class_root(root: Path) -> Path:
    """The directory whose subdirectories are the classes: ``root/train`` or ``root`` itself."""
    root = Path(root)
    return root / "train" if (root / "train").is_dir() else root


def jpeg_files(root: Path) -> tuple[list[Path], list[int], list[str]]:
    """(files, labels, synsets): every JPEG under the class dirs; label = index of sorted synset."""
    classes_root = jpeg_class_root(root)
    synsets = sorted(e.name for e in os.scandir(classes_root) if e.is_dir())
    files, labels = [], []
    for label, synset in enumerate(synsets):
        names = sorted(e.name for e in os.scandir(classes_root / synset) if _is_jpeg(e.name))
        files += [classes_root / synset / n for n in names]
        labels += [label] * len(names)
    return files, labels, synsets


def _is_jpeg(name: str) -> bool:
    return name.lower().endswith(JPEG_SUFFIXES)


def _generate_jpeg(root: Path, images: int, seed: int) -> None:
    synsets = synset_names()
    for synset in synsets:
        (root / "train" / synset).mkdir(parents=True)
    for i, label, data, _, _ in _jpeg_examples(images, seed):
        synset = synsets[label]
        (root / "train" / synset / f"{synset}_{i}.JPEG").write_bytes(data)


def _validate_jpeg(root: Path) -> None:
    _require_dir(root, "jpeg")
    classes_root = jpeg_class_root(root)
    # Stop at the first JPEG found: a full ImageNet tree has 1.28 M files.
    for entry in os.scandir(classes_root):
        if entry.is_dir() and any(_is_jpeg(e.name) for e in os.scandir(entry.path)):
            return
    raise ValueError(f"data dir {root} holds no ImageNet-style JPEG tree (expected train/<synset>/<name>.JPEG)")


# --- TFRecord of tf.train.Example --------------------------------------------------------


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli, reflected
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def _crc32c_python(data: bytes) -> int:
    crc, table = 0xFFFFFFFF, _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _crc32c_function():
    """A compiled crc32c when one is installed (much faster); else the table-driven one."""
    try:
        import google_crc32c

        return lambda data: google_crc32c.value(bytes(data))
    except ImportError:
        pass
    try:
        import crc32c

        return crc32c.crc32c
    except ImportError:
        return _crc32c_python


crc32c = _crc32c_function()


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord_frame(record: bytes) -> bytes:
    """uint64 length, masked crc of the length, the data, masked crc of the data (little-endian)."""
    length = struct.pack("<Q", len(record))
    length_crc = struct.pack("<I", masked_crc32c(length))
    return length + length_crc + record + struct.pack("<I", masked_crc32c(record))


def read_tfrecord(path: Path, check_crc: bool = True) -> Iterator[bytes]:
    """The raw records of one TFRecord file."""
    with open(path, "rb") as f:
        while header := f.read(12):
            if len(header) < 12:
                raise ValueError(f"{path}: truncated TFRecord header")
            length_bytes, length_crc = header[:8], struct.unpack("<I", header[8:])[0]
            if check_crc and masked_crc32c(length_bytes) != length_crc:
                raise ValueError(f"{path}: TFRecord length checksum mismatch")
            (length,) = struct.unpack("<Q", length_bytes)
            data, footer = f.read(length), f.read(4)
            if len(data) < length or len(footer) < 4:
                raise ValueError(f"{path}: truncated TFRecord")
            if check_crc and masked_crc32c(data) != struct.unpack("<I", footer)[0]:
                raise ValueError(f"{path}: TFRecord data checksum mismatch")
            yield data


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # negative int64 as two's complement, as protobuf does
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited (wire type 2) protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _bytes_feature(*values: bytes) -> bytes:
    return _field(1, b"".join(_field(1, v) for v in values))  # Feature.bytes_list{value}


def _int64_feature(*values: int) -> bytes:
    return _field(3, _field(1, b"".join(_varint(v) for v in values)))  # Feature.int64_list{packed value}


def encode_example(features: dict[str, bytes | int]) -> bytes:
    """A serialised tf.train.Example of bytes and int64 scalar features."""
    entries = b""
    for key, value in features.items():
        feature = _int64_feature(value) if isinstance(value, int) else _bytes_feature(value)
        entries += _field(1, _field(1, key.encode()) + _field(2, feature))  # map<string, Feature> entry
    return _field(1, entries)  # Example.features{feature}


def imagenet_example(jpeg: bytes, label: int, synset: str, height: int, width: int, filename: str) -> bytes:
    return encode_example(
        {
            "image/height": height,
            "image/width": width,
            "image/colorspace": b"RGB",
            "image/channels": 3,
            "image/class/label": label,
            "image/class/synset": synset.encode(),
            "image/format": b"JPEG",
            "image/filename": filename.encode(),
            "image/encoded": jpeg,
        }
    )


def tfrecord_files(root: Path) -> list[Path]:
    root = Path(root)
    named = (p for p in root.iterdir() if p.name.startswith("train-") or p.suffix == ".tfrecord")
    return sorted(p for p in named if p.is_file())


def _generate_tfrecord(root: Path, images: int, seed: int) -> None:
    synsets = synset_names()
    shards = min(TFRECORD_SHARDS, images)
    writers = [open(root / f"train-{s:05d}-of-{shards:05d}", "wb") for s in range(shards)]
    try:
        for i, label, data, height, width in _jpeg_examples(images, seed):
            name = f"{synsets[label]}_{i}.JPEG"
            label_1 = label + TFRECORD_LABEL_OFFSET
            example = imagenet_example(data, label_1, synsets[label], height, width, name)
            writers[i % shards].write(tfrecord_frame(example))
    finally:
        for w in writers:
            w.close()


def _validate_tfrecord(root: Path) -> None:
    _require_dir(root, "tfrecord")
    files = tfrecord_files(root)
    if not files:
        raise ValueError(f"data dir {root} holds no TFRecord files (expected train-00000-of-NNNNN or *.tfrecord)")
    try:
        next(read_tfrecord(files[0], check_crc=True), None)
    except ValueError as exc:
        raise ValueError(f"data dir {root}: {files[0].name} is not a TFRecord file ({exc})") from None


def _require_dir(root: Path, kind: str) -> None:
    if not root.is_dir():
        raise ValueError(f"data dir {root} for a {kind} dataset does not exist or is not a directory")


_GENERATORS = {"cifar10-bin": _generate_cifar, "jpeg": _generate_jpeg, "tfrecord": _generate_tfrecord}
_VALIDATORS = {"cifar10-bin": _validate_cifar, "jpeg": _validate_jpeg, "tfrecord": _validate_tfrecord}
