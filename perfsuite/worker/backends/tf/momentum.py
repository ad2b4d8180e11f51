"""SGD with momentum on TensorFlow's fused kernel: one pass over a variable and its momentum.

Keras 3's SGD updates a variable with separate ops (two products, a difference, an assign and
an add), each a pass over the tensor; tf.keras 2 and tf_cnn_benchmarks call one fused kernel
per variable. ``ResourceApplyKerasMomentum`` is Keras's rule, ``m = m * momentum - g * lr;
w += m``, in that one pass: over ResNet-50's 25.6 M parameters on 2 Zen 3 cores the update
measured 24 ms a step against Keras's 50 ms (docs/figures.md, "Parity with the peer harnesses").
"""

from __future__ import annotations

import keras
import tensorflow as tf


class FusedSGD(keras.optimizers.SGD):
    """``keras.optimizers.SGD`` whose dense, non-Nesterov momentum update is the fused kernel;
    anything else (no momentum, Nesterov, a sparse gradient) takes Keras's own ops."""

    def update_step(self, gradient, variable, learning_rate):
        if self.momentum == 0 or self.nesterov or isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        momentum = self.momentums[self._get_variable_index(variable)]
        target = variable.value if isinstance(variable, keras.Variable) else variable
        dtype = target.dtype
        # Inside a strategy's update the distributed momentum's handle is this device's copy.
        tf.raw_ops.ResourceApplyKerasMomentum(
            var=target.handle,
            accum=momentum.value.handle,
            lr=tf.cast(learning_rate, dtype),
            grad=tf.cast(gradient, dtype),
            momentum=tf.cast(self.momentum, dtype),
            use_locking=False,
            use_nesterov=False,
        )
