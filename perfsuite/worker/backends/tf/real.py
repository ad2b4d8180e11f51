"""The `real` data location for TensorFlow: encoded files on disk through tf.data.

CIFAR-sized models read CIFAR-10 binary batches with ``FixedLengthRecordDataset`` and
the tutorial's distortions; ImageNet-sized models read TFRecord shards of JPEGs (or,
when ``--perf-data-dir`` holds only a JPEG tree, the files themselves) with random-resized
crop, flip and mean/std normalisation, as tf_cnn_benchmarks does.

Each worker process builds one pipeline (``distribute_datasets_from_function``) over its
own shard of the files, decodes and augments with a parallel ``map``, batches per
replica and prefetches. ``spec.augment_on == "device"`` leaves the pipeline only the
decode (to fixed-size uint8) and runs the augmentation as batched ops on each replica's
device inside the step, as the torch backend does.
"""

from __future__ import annotations

import math
from pathlib import Path

import tensorflow as tf

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
from perfsuite.worker.backends.tf.feed import Feed

# Records, not files: ImageNet JPEGs average ~110 kB, so this bounds the buffer near 100 MB.
SHUFFLE_RECORDS = 1024
INTERLEAVE_FILES = 8


def real_feed(spec: BurstSpec, strategy: tf.distribute.Strategy, num_classes: int, seed: int) -> Feed:
    """A distributed iterator of per-replica (images float32 NHWC, labels int32) batches."""
    on_device = spec.augment_on == "device"
    kind, root = datasets.dataset_for("tf", spec.image_size, spec.data_dir)
    if kind == "cifar10-bin":
        _check_classes(len(datasets.CIFAR_CLASSES), num_classes, root)
        make = _cifar_pipeline(spec, root, num_classes, on_device, seed)
        augment = _cifar_device_augment(spec.image_size) if on_device else None
    else:
        make = _imagenet_pipeline(spec, kind, root, num_classes, on_device, seed)
        augment = _imagenet_device_augment(spec.image_size) if on_device else None
    iterator = iter(strategy.distribute_datasets_from_function(make))
    if augment is None:
        return Feed(iterator, next)
    # A second replica function ahead of the training step: each replica augments its
    # own batch on its own device.
    return Feed(iterator, lambda it: strategy.run(augment, args=next(it)))


def _check_classes(classes: int, num_classes: int, root: Path) -> None:
    if classes > num_classes:
        raise ValueError(f"dataset at {root} has {classes} classes but the model has only {num_classes} outputs")


def _checked_label(label: tf.Tensor, num_classes: int, root: Path) -> tf.Tensor:
    """Fail the pipeline with the data dir's name rather than feed the loss a bad label."""
    ok = tf.logical_and(label >= 0, label < num_classes)
    check = tf.debugging.Assert(ok, [f"label out of range [0, {num_classes}) in dataset at {root}:", label])
    with tf.control_dependencies([check]):
        return tf.identity(label)


def _shard_files(files: list, ctx: tf.distribute.InputContext) -> tuple[list, bool]:
    """This pipeline's files, or all of them and True when they must be sharded by record."""
    n, i = ctx.num_input_pipelines, ctx.input_pipeline_id
    if n == 1:
        return files, False
    if len(files) >= n:
        return files[i::n], False
    return files, True


def _finish(ds: tf.data.Dataset, augment, spec: BurstSpec) -> tf.data.Dataset:
    ds = ds.map(augment, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    ds = ds.batch(spec.batch_size, drop_remainder=True)
    options = tf.data.Options()
    options.deterministic = False
    return ds.prefetch(tf.data.AUTOTUNE).with_options(options)


# --- CIFAR-10 -----------------------------------------------------------------------------


def _cifar_pipeline(spec: BurstSpec, root: Path, num_classes: int, on_device: bool, seed: int):
    files = [str(f) for f in datasets.cifar_files(root)]
    side = datasets.CIFAR_SIDE

    def parse(record):
        raw = tf.io.decode_raw(record, tf.uint8)
        label = _checked_label(tf.cast(raw[0], tf.int32), num_classes, root)
        image = tf.transpose(tf.reshape(raw[1:], (3, side, side)), (1, 2, 0))  # planar CHW -> HWC
        return (image if on_device else cifar_distort(image, spec.image_size)), label

    def make(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        mine, by_record = _shard_files(files, ctx)
        ds = tf.data.FixedLengthRecordDataset(mine, datasets.CIFAR_RECORD)
        if by_record:
            ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        # CIFAR records are 3 kB: a buffer of 10000 (the tutorial's) costs 30 MB.
        ds = ds.shuffle(10_000, seed=seed + ctx.input_pipeline_id).repeat()
        return _finish(ds, parse, spec)

    return make


def cifar_distort(image: tf.Tensor, crop: int) -> tf.Tensor:
    """uint8 HWC -> float32 crop x crop x 3: the tutorial's ``distorted_inputs``."""
    x = tf.cast(tf.image.random_crop(image, (crop, crop, 3)), tf.float32) / 255.0
    x = tf.image.random_flip_left_right(x)
    x = tf.image.random_brightness(x, CIFAR_MAX_BRIGHTNESS)
    x = tf.image.random_contrast(x, *CIFAR_CONTRAST)
    return tf.image.per_image_standardization(x)


def _cifar_device_augment(crop: int):
    """``cifar_distort`` for a uint8 N x H x W x 3 batch, as batched ops."""

    def augment(images, labels):
        n = tf.shape(images)[0]
        side = tf.cast(tf.shape(images)[1], tf.float32)
        top = tf.floor(tf.random.uniform((n,)) * (side - crop + 1))
        left = tf.floor(tf.random.uniform((n,)) * (side - crop + 1))
        flip = tf.random.uniform((n,)) < 0.5
        x = _crop_resize(tf.cast(images, tf.float32) / 255.0, top, left, crop, crop, flip, side, crop)
        x = x + tf.random.uniform((n, 1, 1, 1), -CIFAR_MAX_BRIGHTNESS, CIFAR_MAX_BRIGHTNESS)
        mean = tf.reduce_mean(x, axis=(1, 2), keepdims=True)
        x = (x - mean) * tf.random.uniform((n, 1, 1, 1), *CIFAR_CONTRAST) + mean
        return tf.image.per_image_standardization(x), labels

    return augment


def _crop_resize(images, top, left, h, w, flip, side, size):
    """One ``crop_and_resize`` per batch: pixel boxes (top, left, h, w) to size x size.

    crop_and_resize samples from y1 * (side - 1) to y2 * (side - 1) inclusive, so a box
    of whole pixels at the output size copies them exactly; swapping x1 and x2 mirrors it.
    """
    scale = side - 1.0
    y1, y2 = top / scale, (top + h - 1) / scale
    x1, x2 = left / scale, (left + w - 1) / scale
    x1, x2 = tf.where(flip, x2, x1), tf.where(flip, x1, x2)
    boxes = tf.stack([y1, x1, y2, x2], axis=1)
    index = tf.range(tf.shape(images)[0])
    return tf.image.crop_and_resize(images, boxes, index, (size, size), method="bilinear")


# --- ImageNet-style JPEGs -----------------------------------------------------------------


TFRECORD_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}


def _imagenet_pipeline(spec: BurstSpec, kind: str, root: Path, num_classes: int, on_device: bool, seed: int):
    side = max(DECODE_SIDE, spec.image_size)

    def decode(encoded, label):
        label = _checked_label(label, num_classes, root)
        image = decode_square(encoded, side) if on_device else train_image(encoded, spec.image_size)
        return image, label

    if kind == "tfrecord":
        shards = [str(f) for f in datasets.tfrecord_files(root)]

        def parse(record):
            example = tf.io.parse_single_example(record, TFRECORD_FEATURES)
            # build_imagenet_data.py labels from 1 (0 is "background").
            label = tf.cast(example["image/class/label"], tf.int32) - datasets.TFRECORD_LABEL_OFFSET
            return decode(example["image/encoded"], label)

        def make_records(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
            mine, by_record = _shard_files(shards, ctx)
            ds = tf.data.Dataset.from_tensor_slices(mine).shuffle(len(mine), seed=seed).repeat()
            ds = ds.interleave(
                tf.data.TFRecordDataset,
                cycle_length=min(len(mine), INTERLEAVE_FILES),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=False,
            )
            if by_record:
                ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            ds = ds.shuffle(SHUFFLE_RECORDS, seed=seed + ctx.input_pipeline_id)
            return _finish(ds, parse, spec)

        return make_records

    files, labels, synsets = datasets.jpeg_files(root)
    if not files:
        raise ValueError(f"data dir {root} holds no JPEG files")
    _check_classes(len(synsets), num_classes, root)

    def make(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices(([str(f) for f in files], labels))
        if ctx.num_input_pipelines > 1:
            ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        ds = ds.shuffle(len(files), seed=seed + ctx.input_pipeline_id).repeat()
        ds = ds.map(lambda path, label: (tf.io.read_file(path), tf.cast(label, tf.int32)))
        return _finish(ds, decode, spec)

    return make


def train_image(encoded: tf.Tensor, size: int) -> tf.Tensor:
    """JPEG bytes -> float32 size x size x 3: random-resized crop decoded in one go
    (only the crop's blocks are decompressed), flip, mean/std normalisation."""
    shape = tf.image.extract_jpeg_shape(encoded)
    begin, box, _ = tf.image.sample_distorted_bounding_box(
        shape,
        bounding_boxes=tf.zeros((1, 0, 4)),
        min_object_covered=0.0,
        aspect_ratio_range=RRC_RATIO,
        area_range=RRC_SCALE,
        max_attempts=RRC_ATTEMPTS,
        use_image_if_no_bounding_boxes=True,
    )
    window = tf.stack([begin[0], begin[1], box[0], box[1]])
    image = tf.image.decode_and_crop_jpeg(encoded, window, channels=3)
    image = tf.image.resize(image, (size, size), method="bilinear")
    image = tf.image.random_flip_left_right(image)
    return _normalise(image)


def decode_square(encoded: tf.Tensor, side: int) -> tf.Tensor:
    """JPEG bytes -> uint8 side x side x 3 of the centred square; nothing random."""
    shape = tf.image.extract_jpeg_shape(encoded)
    edge = tf.minimum(shape[0], shape[1])
    window = tf.stack([(shape[0] - edge) // 2, (shape[1] - edge) // 2, edge, edge])
    image = tf.image.decode_and_crop_jpeg(encoded, window, channels=3)
    image = tf.image.resize(image, (side, side), method="bilinear")
    return tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)


def _normalise(pixels: tf.Tensor) -> tf.Tensor:
    mean = tf.constant(IMAGENET_MEAN) * 255.0
    std = tf.constant(IMAGENET_STD) * 255.0
    return (pixels - mean) / std


def random_resized_boxes(n: tf.Tensor, side: tf.Tensor):
    """(top, left, h, w) per image in pixels for square images: all attempts drawn at
    once, the first that fits kept; none fitting falls back to the whole image."""
    scale = tf.random.uniform((n, RRC_ATTEMPTS), *RRC_SCALE)
    log_lo, log_hi = math.log(RRC_RATIO[0]), math.log(RRC_RATIO[1])
    aspect = tf.exp(tf.random.uniform((n, RRC_ATTEMPTS), log_lo, log_hi))
    area = side * side * scale
    w = tf.round(tf.sqrt(area * aspect))
    h = tf.round(tf.sqrt(area / aspect))
    fits = (w > 0) & (w <= side) & (h > 0) & (h <= side)
    first = tf.argmax(tf.cast(fits, tf.int32), axis=1, output_type=tf.int32)
    found = tf.reduce_any(fits, axis=1)
    w = tf.where(found, tf.gather(w, first, batch_dims=1), side)
    h = tf.where(found, tf.gather(h, first, batch_dims=1), side)
    top = tf.floor(tf.random.uniform((n,)) * (side - h + 1))
    left = tf.floor(tf.random.uniform((n,)) * (side - w + 1))
    return top, left, h, w


def _imagenet_device_augment(size: int):
    """Random-resized crop + flip + normalise for a uint8 N x S x S x 3 batch, as batched ops."""

    def augment(images, labels):
        n = tf.shape(images)[0]
        side = tf.cast(tf.shape(images)[1], tf.float32)
        top, left, h, w = random_resized_boxes(n, side)
        flip = tf.random.uniform((n,)) < 0.5
        crops = _crop_resize(tf.cast(images, tf.float32), top, left, h, w, flip, side, size)
        return _normalise(crops), labels

    return augment
