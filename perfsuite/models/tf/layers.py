"""Shared building blocks for the Keras model zoo (imported only inside builders)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import keras
import tensorflow as tf
from keras import layers

if TYPE_CHECKING:
    import keras


def conv_bn_relu(x, filters: int, kernel_size, strides=1, padding: str = "same", name: str | None = None):
    """Convolution without bias (batch norm supplies the shift), batch norm, ReLU.

    Batch norm keeps its scale and shift (as torch's BatchNorm2d), eps 1e-3 as the
    Inception papers' reference code.
    """
    x = layers.Conv2D(filters, kernel_size, strides=strides, padding=padding, use_bias=False, name=name)(x)
    x = layers.BatchNormalization(epsilon=1e-3)(x)
    return layers.ReLU()(x)


def concat(branches):
    return layers.Concatenate(axis=-1)(branches)


class LocalResponseNorm(layers.Layer):
    """``tf.nn.local_response_normalization`` as a layer (the CIFAR-10 tutorial's norm1/norm2).

    It runs in float32 under a mixed policy: the CPU kernel has no bfloat16 version,
    and XLA's lowering rejects both half types.
    """

    def __init__(self, depth_radius: int, bias: float, alpha: float, beta: float, **kwargs):
        super().__init__(**kwargs)
        self.depth_radius, self.bias, self.alpha, self.beta = depth_radius, bias, alpha, beta

    def call(self, x):
        dtype = x.dtype
        x = tf.cast(x, tf.float32)
        y = tf.nn.local_response_normalization(
            x, depth_radius=self.depth_radius, bias=self.bias, alpha=self.alpha, beta=self.beta
        )
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
    return keras.Input(shape=(image_size, image_size, 3))
