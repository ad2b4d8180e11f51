"""A Keras model's size and arithmetic, counted by TensorFlow itself: for models registered without them."""

from __future__ import annotations

import tensorflow as tf

from perfsuite.models.tf.layers import image_input_shape

# Ops whose profiler FLOPs are 2 x multiply-adds; the rest (bias, batch norm, pooling) are
# left out, as torch's FlopCounterMode leaves them out.
MAC_OPS = ("Conv2D", "DepthwiseConv2dNative", "MatMul", "BatchMatMulV2", "BatchMatMulV3")


def parameter_count(model) -> int:
    return int(model.count_params())


def forward_flops(model, image_size: int) -> float:
    """Forward FLOPs per image (2 x MACs) from TensorFlow's profiler on the traced graph."""
    return traced_flops(traced_forward(model, image_size))


def traced_forward(model, image_size: int, batch: int = 1):
    """The model's inference forward traced for ``batch`` images, NHWC or NCHW as the model was
    built: a concrete function to run as well as to count."""
    forward = tf.autograph.experimental.do_not_convert(lambda x: model(x, training=False))
    shape = image_input_shape(model) or (image_size, image_size, 3)
    return tf.function(forward).get_concrete_function(tf.TensorSpec([batch, *shape]))


def traced_flops(forward) -> float:
    """Forward FLOPs per item (2 x MACs) of a ``traced_forward``, from TensorFlow's profiler on its graph."""
    builder = tf.compat.v1.profiler.ProfileOptionBuilder
    options = builder(builder.float_operation()).with_empty_output().build()
    profile = tf.compat.v1.profiler.profile(graph=forward.graph, cmd="op", options=options)
    by_op, stack = {}, [profile]
    while stack:  # the "op" view nests op types; each node's own float_ops is its type's
        node = stack.pop()
        for child in node.children:
            by_op[child.name] = child.float_ops
            stack.append(child)
    batch = forward.structured_input_signature[0][0].shape[0]
    return float(sum(by_op.get(op, 0) for op in MAC_OPS)) / batch
