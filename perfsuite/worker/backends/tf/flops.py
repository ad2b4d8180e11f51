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
    forward = tf.autograph.experimental.do_not_convert(lambda x: model(x, training=False))
    shape = image_input_shape(model) or (image_size, image_size, 3)  # NHWC or NCHW, as the model was built
    graph = tf.function(forward).get_concrete_function(tf.TensorSpec([1, *shape])).graph
    builder = tf.compat.v1.profiler.ProfileOptionBuilder
    options = builder(builder.float_operation()).with_empty_output().build()
    profile = tf.compat.v1.profiler.profile(graph=graph, cmd="op", options=options)
    by_op, stack = {}, [profile]
    while stack:  # the "op" view nests op types; each node's own float_ops is its type's
        node = stack.pop()
        for child in node.children:
            by_op[child.name] = child.float_ops
            stack.append(child)
    return float(sum(by_op.get(op, 0) for op in MAC_OPS))
