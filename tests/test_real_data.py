"""The `real` data location: on-disk formats, the dataset cache, and the torch pipeline."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from perfsuite.contract.spec import BurstSpec
from perfsuite.data import datasets

torch = pytest.importorskip("torch")

from perfsuite.worker.backends.torch import real  # noqa: E402

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("datasets")


@pytest.fixture(scope="module")
def cifar_dir(cache) -> Path:
    return datasets.ensure_dataset("cifar10-bin", None, cache_dir=cache, images=1100)


@pytest.fixture(scope="module")
def jpeg_dir(cache) -> Path:
    return datasets.ensure_dataset("jpeg", None, cache_dir=cache, images=40)


@pytest.fixture
def one_loader_worker(monkeypatch):
    monkeypatch.setenv("PERFSUITE_LOADER_WORKERS", "1")


# --- formats ------------------------------------------------------------------------------


def test_cifar_record_layout_matches_the_original(tmp_path):
    y, x = np.mgrid[0:32, 0:32]
    image = np.stack([y * 8 % 256, x * 8 % 256, (y + x) % 256], axis=-1).astype(np.uint8)  # HWC
    images = np.stack([image, 255 - image, image[::-1]])
    path = tmp_path / "data_batch_1.bin"
    datasets.write_cifar_batch(path, [3, 7, 9], images)

    raw = path.read_bytes()
    assert len(raw) == 3 * 3073
    assert raw[0] == 3 and raw[3073] == 7 and raw[2 * 3073] == 9
    # One label byte, then the R plane, G plane, B plane, each row-major.
    for c in range(3):
        for yy, xx in ((0, 0), (0, 31), (5, 17), (31, 31)):
            assert raw[1 + c * 1024 + yy * 32 + xx] == image[yy, xx, c]

    labels, planar = datasets.read_cifar_batch(path)
    assert labels.tolist() == [3, 7, 9]
    np.testing.assert_array_equal(planar.transpose(0, 2, 3, 1), images)


def test_generated_cifar_batches_read_back(cifar_dir):
    files = datasets.cifar_files(cifar_dir)
    assert [f.name for f in files] == ["data_batch_1.bin", "data_batch_2.bin"]
    counts, all_labels = [], []
    for f in files:
        labels, images = datasets.read_cifar_batch(f)
        counts.append(len(labels))
        all_labels += labels.tolist()
        assert images.shape[1:] == (3, 32, 32)
        assert images.std() > 10  # content, not a constant fill
    assert counts == [1024, 76]
    assert set(all_labels) <= set(range(10)) and len(set(all_labels)) == 10


def test_generated_jpeg_tree_decodes(jpeg_dir):
    files, labels, synsets = datasets.jpeg_files(jpeg_dir)
    assert len(files) == 40 and len(synsets) == datasets.JPEG_CLASSES
    for f, label in zip(files[:8], labels[:8]):
        assert f.suffix == ".JPEG" and f.parent.parent.name == "train"
        assert f.parent.name == synsets[label]
        with Image.open(f) as img:
            assert img.format == "JPEG" and img.mode == "RGB"
            lo, hi = datasets.JPEG_SIDES
            assert lo <= img.width <= hi and lo <= img.height <= hi
            assert np.asarray(img).std() > 10


def test_crc32c_and_tfrecord_framing(tmp_path):
    assert datasets.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert datasets._crc32c_python(b"123456789") == 0xE3069283
    records = [b"", b"x", os.urandom(3000)]
    path = tmp_path / "f.tfrecord"
    path.write_bytes(b"".join(datasets.tfrecord_frame(r) for r in records))
    assert list(datasets.read_tfrecord(path)) == records
    path.write_bytes(path.read_bytes()[:-1] + b"\0")
    with pytest.raises(ValueError, match="checksum"):
        list(datasets.read_tfrecord(path))


@pytest.mark.xdist_group("tensorflow")  # TensorFlow in this process: on one pytest-xdist worker only
def test_tfrecords_parse_with_tensorflow(cache):
    tf = pytest.importorskip("tensorflow")
    root = datasets.ensure_dataset("tfrecord", None, cache_dir=cache, images=9)
    files = datasets.tfrecord_files(root)
    assert [f.name for f in files] == [f"train-{i:05d}-of-00004" for i in range(4)]
    schema = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/height": tf.io.FixedLenFeature([], tf.int64),
        "image/width": tf.io.FixedLenFeature([], tf.int64),
        "image/format": tf.io.FixedLenFeature([], tf.string),
        "image/class/synset": tf.io.FixedLenFeature([], tf.string),
    }
    parsed = [tf.io.parse_single_example(r, schema) for r in tf.data.TFRecordDataset([str(f) for f in files])]
    assert len(parsed) == 9
    for ex in parsed:
        label = int(ex["image/class/label"])
        assert 1 <= label <= datasets.JPEG_CLASSES  # 1-based, as build_imagenet_data.py
        assert ex["image/class/synset"].numpy().decode() == datasets.synset_names()[label - 1]
        assert ex["image/format"].numpy() == b"JPEG"
        image = tf.io.decode_jpeg(ex["image/encoded"], channels=3)
        assert tuple(image.shape) == (int(ex["image/height"]), int(ex["image/width"]), 3)


def test_dataset_kind():
    assert datasets.dataset_kind(24) == "cifar10-bin"
    assert datasets.dataset_kind(32) == "cifar10-bin"
    assert datasets.dataset_kind(224) == "jpeg"


# --- the cache and --perf-data-dir ---------------------------------------------------------------


def test_ensure_dataset_generates_once_then_reuses(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path))
    first = datasets.ensure_dataset("cifar10-bin", None, images=64)
    assert first == tmp_path / "datasets" / "cifar10-bin-v1-64"
    batch = first / "data_batch_1.bin"
    stamps = (first.stat().st_mtime_ns, batch.stat().st_mtime_ns)
    assert datasets.ensure_dataset("cifar10-bin", None, images=64) == first
    assert (first.stat().st_mtime_ns, batch.stat().st_mtime_ns) == stamps
    assert [p.name for p in (tmp_path / "datasets").iterdir()] == ["cifar10-bin-v1-64"]  # no temp dirs left


def test_losing_the_generation_race_uses_the_winners_copy(tmp_path):
    target = tmp_path / "jpeg-v1-4"

    def generate_while_another_rank_wins(tmp: Path) -> None:
        (tmp / "mine").write_text("loser")
        target.mkdir()
        (target / "theirs").write_text("winner")

    datasets._generate_atomically(target, generate_while_another_rank_wins)
    assert [p.name for p in target.iterdir()] == ["theirs"]
    assert [p.name for p in tmp_path.iterdir()] == ["jpeg-v1-4"]


def test_generation_failure_leaves_no_dataset(tmp_path):
    target = tmp_path / "cifar10-bin-v1-4"

    def fail(tmp: Path) -> None:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        datasets._generate_atomically(target, fail)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", datasets.KINDS)
def test_wrong_data_dir_is_rejected_with_its_name(tmp_path, kind):
    wrong = tmp_path / "not-a-dataset"
    wrong.mkdir()
    (wrong / "readme.txt").write_text("hello")
    with pytest.raises(ValueError, match=str(wrong)):
        datasets.ensure_dataset(kind, str(wrong))
    with pytest.raises(ValueError, match="does not exist"):
        datasets.ensure_dataset(kind, str(tmp_path / "missing"))


def test_cifar_data_dir_with_torn_records_is_rejected(tmp_path):
    (tmp_path / "data_batch_1.bin").write_bytes(b"\0" * 3000)
    with pytest.raises(ValueError, match="3073"):
        datasets.ensure_dataset("cifar10-bin", str(tmp_path))


def test_given_data_dirs_are_accepted(cifar_dir, jpeg_dir, cache):
    assert datasets.ensure_dataset("cifar10-bin", str(cifar_dir)) == cifar_dir
    assert datasets.ensure_dataset("jpeg", str(jpeg_dir)) == jpeg_dir
    tfrecords = datasets.ensure_dataset("tfrecord", None, cache_dir=cache, images=9)
    assert datasets.ensure_dataset("tfrecord", str(tfrecords)) == tfrecords


# --- the torch pipeline ----------------------------------------------------------------------


def _take(spec: BurstSpec, num_classes: int, steps: int = 2):
    from perfsuite.worker.backends.torch import data

    batches = real.real_batches(spec, num_classes, CPU, seed=0, workers=data.loader_workers(spec))
    try:
        return [next(batches) for _ in range(steps)]
    finally:
        batches.close()


@pytest.mark.parametrize("augment_on", ["cpu", "device"])
def test_cifar_batches(cifar_dir, one_loader_worker, augment_on):
    spec = BurstSpec(
        framework="torch",
        model="cifar10",
        image_size=24,
        batch_size=8,
        data_location="real",
        augment_on=augment_on,
        data_dir=str(cifar_dir),
    )
    for images, labels in _take(spec, num_classes=10):
        assert images.shape == (8, 3, 24, 24) and images.dtype == torch.float32
        assert labels.shape == (8,) and labels.dtype == torch.int64
        assert ((labels >= 0) & (labels < 10)).all()
        assert torch.isfinite(images).all()
        # per-image standardisation: each image has zero mean and unit std
        per_image = images.flatten(1)
        assert per_image.mean(1).abs().max() < 1e-4
        assert (per_image.std(1, correction=0) - 1).abs().max() < 1e-3


@pytest.mark.parametrize("augment_on", ["cpu", "device"])
def test_imagenet_batches(jpeg_dir, one_loader_worker, augment_on):
    spec = BurstSpec(
        framework="torch",
        model="resnet50",
        image_size=64,
        batch_size=4,
        data_location="real",
        augment_on=augment_on,
        data_dir=str(jpeg_dir),
    )
    for images, labels in _take(spec, num_classes=1000):
        assert images.shape == (4, 3, 64, 64) and images.dtype == torch.float32
        assert labels.dtype == torch.int64 and ((labels >= 0) & (labels < datasets.JPEG_CLASSES)).all()
        assert torch.isfinite(images).all()
        # ImageNet mean/std normalisation of pixels in [0, 255]: undoing it lands back there.
        mean = torch.tensor(real.IMAGENET_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(real.IMAGENET_STD).view(1, 3, 1, 1)
        pixels = (images * std + mean) * 255
        assert pixels.min() > -1e-3 and pixels.max() < 255 + 1e-3 and pixels.std() > 5
        assert abs(float(images.mean())) < 1.5


def test_device_and_cpu_augmentation_agree_on_statistics(cifar_dir):
    """Both placements standardise the same crops; their batches are alike in distribution."""
    rng = np.random.default_rng(0)
    _, planar = datasets.read_cifar_batch(datasets.cifar_files(cifar_dir)[0])
    batch = np.array(planar[:64])
    on_cpu = np.stack([real.cifar_distort(img, 24, rng) for img in batch])
    on_device = real.CifarDeviceAugment(24, CPU, seed=0)(torch.from_numpy(batch)).numpy()
    assert on_cpu.shape == on_device.shape
    assert abs(on_cpu.mean() - on_device.mean()) < 1e-3
    assert abs(on_cpu.std() - on_device.std()) < 1e-3


def test_uint8_decode_keeps_labels(jpeg_dir):
    spec = BurstSpec(
        framework="torch",
        model="resnet50",
        image_size=64,
        data_location="real",
        augment_on="device",
        data_dir=str(jpeg_dir),
    )
    dataset, augment = real.build_dataset(spec, 1000, 0, 1, CPU, seed=0)
    _, _, synsets = datasets.jpeg_files(jpeg_dir)
    for i in range(0, len(dataset), 7):
        pixels, label = dataset[i]
        assert pixels.shape == (3, real.DECODE_SIDE, real.DECODE_SIDE) and pixels.dtype == torch.uint8
        assert synsets[label] == dataset.files[i].parent.name
    assert augment is not None


def test_device_crop_geometry_is_exact():
    """A box on whole pixels at the output size copies pixels: the sampling grid lines up."""
    side = 16
    images = torch.arange(2 * 3 * side * side, dtype=torch.float32).reshape(2, 3, side, side) % 251
    aug = real.JpegDeviceAugment(side // 2, CPU, seed=0)
    half = torch.full((2,), side / 2)
    aug.boxes = lambda n, s: (torch.zeros(2), half, half, half)  # top-right quadrant
    aug._rand = lambda *shape: torch.ones(*shape)  # no flip
    out = aug(images.to(torch.uint8)) * aug.std + aug.mean
    torch.testing.assert_close(out, images[:, :, : side // 2, side // 2 :], atol=1e-3, rtol=0)
    aug._rand = lambda *shape: torch.zeros(*shape)  # flip
    out = aug(images.to(torch.uint8)) * aug.std + aug.mean
    torch.testing.assert_close(out, images[:, :, : side // 2, side // 2 :].flip(3), atol=1e-3, rtol=0)


@pytest.mark.parametrize("height,width", [(375, 500), (256, 256), (20, 1000), (1000, 20)])
def test_random_resized_box_stays_inside(height, width):
    rng = np.random.default_rng(1)
    for _ in range(200):
        top, left, h, w = real.random_resized_box(rng, height, width)
        assert 0 <= top and top + h <= height and 0 <= left and left + w <= width and h > 0 and w > 0


def test_device_boxes_stay_inside():
    aug = real.JpegDeviceAugment(64, CPU, seed=0)
    top, left, h, w = aug.boxes(4096, 256)
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= 256).all() and (left + w <= 256).all()
    area = h * w / 256**2
    assert area.min() >= 0.07 and area.max() <= 1.0 and area.mean() > 0.4


@pytest.mark.parametrize("kind", ["jpeg", "cifar"])
def test_ranks_read_disjoint_shards(cifar_dir, jpeg_dir, monkeypatch, kind):
    if kind == "jpeg":
        model, size, root, total = "resnet50", 64, jpeg_dir, len(datasets.jpeg_files(jpeg_dir)[0])
    else:
        model, size, root, total = "cifar10", 24, cifar_dir, 1100
    spec = BurstSpec(framework="torch", model=model, image_size=size, data_location="real", data_dir=str(root))
    shards = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        dataset, _ = real.build_dataset(spec, 1000, *real.rank_and_world(), CPU, seed=rank)
        shards.append(set(dataset.files) if kind == "jpeg" else set(dataset.items))
    assert not shards[0] & shards[1]
    assert len(shards[0]) + len(shards[1]) == total
    assert abs(len(shards[0]) - len(shards[1])) <= 1


def test_epoch_shuffle_is_endless_and_reshuffles():
    it = iter(real.EpochShuffle(5, seed=3))
    epochs = [[next(it) for _ in range(5)] for _ in range(4)]
    assert all(sorted(e) == list(range(5)) for e in epochs)
    assert len({tuple(e) for e in epochs}) > 1
    again = iter(real.EpochShuffle(5, seed=3))
    assert [next(again) for _ in range(5)] == epochs[0]


def test_real_is_a_torch_pipeline(monkeypatch):
    from perfsuite.models.registry import get_model
    from perfsuite.worker.pipelines import pipeline

    calls = []
    monkeypatch.setattr(real, "real_batches", lambda *args: calls.append(args) or iter(()))
    spec = BurstSpec(framework="torch", model="cifar10", image_size=24, data_location="real")
    pipeline(spec)(spec, get_model("torch", "cifar10"), torch.device("cpu"), 0)
    assert len(calls) == 1 and calls[0][0] is spec
