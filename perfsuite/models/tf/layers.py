"""Shared building blocks for the Keras model zoo (imported only inside builders).

Layers take their layout from ``keras.config.image_data_format()`` when they are built,
as keras.applications does, so one builder makes an NHWC or an NCHW model; the pieces
that name an axis or a shape ask ``channel_axis()`` and ``image_shape()``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import keras
import tensorflow as tf
from keras import layers


@contextlib.contextmanager
def image_data_format(memory_format: str) -> Iterator[None]:
    """Build layers in ``memory_format`` (channels_last: NHWC, channels_first: NCHW).

    Each layer keeps the format it was built with, so the global setting is restored after.
    """
    before = keras.config.image_data_format()
    keras.config.set_image_data_format(memory_format)
    try:
        yield
    finally:
        keras.config.set_image_data_format(before)


def channel_axis() -> int:
    return 1 if keras.config.image_data_format() == "channels_first" else -1


def image_shape(image_size: int) -> tuple[int, int, int]:
    """One image's shape, without the batch, in the current layout."""
    if keras.config.image_data_format() == "channels_first":
        return (3, image_size, image_size)
    return (image_size, image_size, 3)


def image_input_shape(model) -> tuple | None:
    """One image's shape as the built model takes it (NHWC or NCHW); None for a subclassed
    model, whose input shape is known only after its first call."""
    try:
        return tuple(model.input_shape[1:])
    except (AttributeError, ValueError):
        return None


def conv_bn_relu(x, filters: int, kernel_size, strides=1, padding: str = "same", name: str | None = None):
    """Convolution without bias (batch norm supplies the shift), batch norm, ReLU.

    Batch norm keeps its scale and shift (as torch's BatchNorm2d), eps 1e-3 as the
    Inception papers' reference code.
    """
    x = layers.Conv2D(filters, kernel_size, strides=strides, padding=padding, use_bias=False, name=name)(x)
    x = layers.BatchNormalization(axis=channel_axis(), epsilon=1e-3)(x)
    return layers.ReLU()(x)


def concat(branches):
    return layers.Concatenate(axis=channel_axis())(branches)


class LocalResponseNorm(layers.Layer):
    """``tf.nn.local_response_normalization`` as a layer (the CIFAR-10 tutorial's norm1/norm2).

    It runs in float32 under a mixed policy: the CPU kernel has no bfloat16 version,
    and XLA's lowering rejects both half types. The op normalises across the last axis
    only, so an NCHW layer moves channels last around it, as tf_cnn_benchmarks' NCHW
    models do.
    """

    def __init__(self, depth_radius: int, bias: float, alpha: float, beta: float, **kwargs):
        super().__init__(**kwargs)
        self.depth_radius, self.bias, self.alpha, self.beta = depth_radius, bias, alpha, beta
        self.channels_first = keras.config.image_data_format() == "channels_first"

    def call(self, x):
        dtype = x.dtype
        x = tf.cast(x, tf.float32)
        if self.channels_first:
            x = tf.transpose(x, (0, 2, 3, 1))
        y = tf.nn.local_response_normalization(
            x, depth_radius=self.depth_radius, bias=self.bias, alpha=self.alpha, beta=self.beta
        )
        if self.channels_first:
            y = tf.transpose(y, (0, 3, 1, 2))
        return tf.cast(y, dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "depth_radius": self.depth_radius,
            "bias": self.bias,
            "alpha": self.alpha,
            "beta": self.beta,
        }


def input_layer(image_size: int) -> keras.KerasTensor:
    return keras.Input(shape=image_shape(image_size))
