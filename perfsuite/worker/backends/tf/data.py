"""An image model's input pipelines, one per data location (named by perfsuite.workloads.image).

Each returns a ``Feed``: what the compiled step is called with, and how the step takes
one per-replica batch (NHWC images, int32 labels) out of it inside the graph, so that
fetching a batch costs no Python round trip of its own.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from perfsuite.contract.spec import BurstSpec
from perfsuite.worker.backends.tf.feed import Feed


def _shape(spec: BurstSpec, batch: int) -> tuple[int, ...]:
    return (batch, spec.image_size, spec.image_size, 3)


def device_feed(spec, strategy, info, seed) -> Feed:
    """Synthetic tensors created once on each compute device and reused (tensorpack 'gpu')."""
    devices = strategy.extended.worker_devices

    def make(ctx):
        replica = ctx.replica_id_in_sync_group  # global: worker index x local devices + local index
        with tf.device(devices[replica % len(devices)]):
            images = tf.random.stateless_normal(_shape(spec, spec.batch_size), seed=[seed, replica])
            labels = tf.random.stateless_uniform(
                (spec.batch_size,), seed=[seed, replica + 1000], minval=0, maxval=info.num_classes, dtype=tf.int32
            )
            return images, labels

    return Feed(strategy.experimental_distribute_values_from_function(make), lambda values: values)


def host_feed(spec, strategy, info, seed) -> Feed:
    """Synthetic tensors in host memory, split and copied to the devices every step (tensorpack 'cpu')."""
    global_batch = spec.batch_size * strategy.num_replicas_in_sync
    rng = np.random.default_rng(seed)
    with tf.device("/cpu:0"):
        images = tf.constant(rng.standard_normal(_shape(spec, global_batch), dtype=np.float32))
        labels = tf.constant(rng.integers(0, info.num_classes, global_batch, dtype=np.int32))
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat().prefetch(tf.data.AUTOTUNE)
    return Feed(iter(strategy.experimental_distribute_dataset(dataset)), next)


def python_feed(spec, strategy, info, seed) -> Feed:
    """Batches built by Python/NumPy code, one per replica per step (tensorpack 'python')."""

    def generate():
        rng = np.random.default_rng(seed)
        while True:
            images = rng.standard_normal(_shape(spec, spec.batch_size), dtype=np.float32)
            yield images, rng.integers(0, info.num_classes, spec.batch_size, dtype=np.int32)

    def dataset(_ctx):
        return tf.data.Dataset.from_generator(
            generate,
            output_signature=(
                tf.TensorSpec(_shape(spec, spec.batch_size), tf.float32),
                tf.TensorSpec((spec.batch_size,), tf.int32),
            ),
        ).prefetch(tf.data.AUTOTUNE)

    # One input pipeline per process, whose batches go to the replicas in turn.
    return Feed(iter(strategy.distribute_datasets_from_function(dataset)), next)


def real_feed(spec, strategy, info, seed) -> Feed:
    """Encoded files on disk, decoded and augmented by tf.data (see real.py)."""
    # Imported on use: the real pipeline needs Pillow (datasets.py), the synthetic ones do not.
    from perfsuite.worker.backends.tf.real import real_feed as make

    return make(spec, strategy, info.num_classes, seed)
