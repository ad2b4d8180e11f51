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
def image_data_format(memory_format: str | None) -> Iterator[None]:
    """Build layers in ``memory_format`` (channels_last: NHWC, channels_first: NCHW; None: a
    model without image inputs, built as the setting stands).

    Each layer keeps the format it was built with, so the global setting is restored after.
    """
    if memory_format is None:
        yield
        return
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


@keras.saving.register_keras_serializable(package="perfsuite")
class FusedBatchNormalization(layers.BatchNormalization):
    """Keras's ``BatchNormalization`` computed by TensorFlow's fused kernel.

    Keras 3 normalises with separate small ops (mean, squared difference, rsqrt, ...) on
    every backend; ``FusedBatchNormV3`` and its gradient ``FusedBatchNormGradV3`` do each
    pass in one kernel, as Keras 2 and tf_cnn_benchmarks run it. Weights, config and
    results are the Keras layer's: the same four variables, the moving statistics updated
    in training only with the layer's momentum (from the biased batch variance, as Keras
    does: the kernel's Bessel correction is taken back out), inference normalising with
    them. A half-precision input stays in its dtype (the kernel takes float16 and
    bfloat16 with float32 statistics). A case the kernel does not cover (not 4-D, an axis
    other than the channels of NHWC or NCHW, a mask, renorm, synchronized) falls back to
    the Keras computation.
    """

    def _fusable(self, inputs, mask) -> bool:
        return (
            mask is None
            and not getattr(self, "renorm", False)  # Keras 3.14 brought renorm; before it, none
            and not self.synchronized
            and len(inputs.shape) == 4
            and self.axis % 4 in (1, 3)
            and inputs.dtype in (tf.float32, tf.float16, tf.bfloat16)
        )

    def call(self, inputs, training=None, mask=None):
        if not self._fusable(inputs, mask):
            return super().call(inputs, training=training, mask=mask)
        axis = self.axis % 4
        data_format = "NCHW" if axis == 1 else "NHWC"
        channels = inputs.shape[axis]
        ones = tf.ones([channels], tf.float32)
        gamma = tf.convert_to_tensor(self.gamma) if self.scale else ones
        beta = tf.convert_to_tensor(self.beta) if self.center else tf.zeros([channels], tf.float32)
        if not (training and self.trainable):
            y, *_ = tf.raw_ops.FusedBatchNormV3(
                x=inputs,
                scale=gamma,
                offset=beta,
                mean=tf.convert_to_tensor(self.moving_mean),
                variance=tf.convert_to_tensor(self.moving_variance),
                epsilon=self.epsilon,
                data_format=data_format,
                is_training=False,
            )
            return tf.cast(y, self.compute_dtype)
        empty = tf.constant([], tf.float32)
        y, mean, variance, *_ = tf.raw_ops.FusedBatchNormV3(
            x=inputs,
            scale=gamma,
            offset=beta,
            mean=empty,
            variance=empty,
            epsilon=self.epsilon,
            data_format=data_format,
            is_training=True,
        )
        # The kernel returns the unbiased variance; Keras averages the biased one.
        count = _count_per_channel(inputs, axis)
        variance = tf.stop_gradient(variance) * ((count - 1.0) / count)
        mean = tf.stop_gradient(mean)
        momentum = self.momentum
        self.moving_mean.assign(self.moving_mean * momentum + mean * (1.0 - momentum))
        self.moving_variance.assign(self.moving_variance * momentum + variance * (1.0 - momentum))
        return tf.cast(y, self.compute_dtype)


def _count_per_channel(x, axis: int):
    """How many values each channel's statistics average over (static where the shape is)."""
    dims = [d for i, d in enumerate(x.shape) if i != axis]
    if all(d is not None for d in dims):
        count = 1
        for d in dims:
            count *= d
        return tf.constant(float(count))
    shape = tf.shape(x)
    return tf.cast(tf.size(x) // shape[axis], tf.float32)


def batch_norm(**kwargs) -> FusedBatchNormalization:
    """The zoo's batch norm, on the layout's channel axis unless ``axis`` says otherwise."""
    return FusedBatchNormalization(**{"axis": channel_axis(), **kwargs})


def with_fused_batch_norm(model: keras.Model) -> keras.Model:
    """A copy of a functional model (a keras.applications one) whose batch-norm layers are
    ``FusedBatchNormalization`` with the same config; every other layer as it was."""

    def clone(layer):
        cls = FusedBatchNormalization if type(layer) is layers.BatchNormalization else type(layer)
        return cls.from_config(layer.get_config())

    return keras.models.clone_model(model, clone_function=clone)


def conv_bn_relu(x, filters: int, kernel_size, strides=1, padding: str = "same", name: str | None = None):
    """Convolution without bias (batch norm supplies the shift), batch norm, ReLU.

    Batch norm keeps its scale and shift (as torch's BatchNorm2d), eps 1e-3 as the
    Inception papers' reference code.
    """
    x = layers.Conv2D(filters, kernel_size, strides=strides, padding=padding, use_bias=False, name=name)(x)
    x = batch_norm(epsilon=1e-3)(x)
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
