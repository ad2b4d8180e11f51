"""Precision policy, and dynamic loss scaling for float16 that works under every strategy.

Keras's LossScaleOptimizer keeps its counters in variables that cannot be written from
a replica under central storage, and decides to skip a step from the first replica's
gradients alone; this scaler updates its state in cross-replica context and skips
when any replica overflowed.
"""

from __future__ import annotations

from dataclasses import dataclass

import keras
import tensorflow as tf

from perfsuite.contract.burst_files import Unsupported
from perfsuite.contract.spec import BurstSpec


@dataclass(frozen=True)
class Precision:
    policy: str  # Keras dtype policy
    dtype: str  # compute dtype, for the record
    loss_scaling: bool


def precision_policy(spec: BurstSpec) -> Precision:
    """The Keras policy ``spec.precision`` asks for. fp32 is IEEE single precision: TensorFlow
    allows TF32 unless told not to, so fp32 turns it off and tf32 on (call before any op runs)."""
    ampere = spec.device_kind != "cuda" or _gpus_have_bf16()
    if spec.precision in ("tf32", "bf16") and not ampere:
        raise Unsupported(f"{spec.precision} needs compute capability 8.0 or later on every GPU")
    if spec.device_kind == "cuda":
        tf.config.experimental.enable_tensor_float_32_execution(spec.precision == "tf32")
    if spec.precision in ("fp32", "tf32"):
        return Precision("float32", "float32", False)
    if spec.precision == "fp16" or (spec.precision == "amp" and not ampere):
        # fp16 needs loss scaling to keep small gradients from flushing to zero.
        return Precision("mixed_float16", "float16", True)
    return Precision("mixed_bfloat16", "bfloat16", False)


def _gpus_have_bf16() -> bool:
    """bf16 tensor cores from compute capability 8.0 (Ampere) on: the rule the torch backend
    applies too, so both frameworks run the same arithmetic under amp."""
    caps = [
        tf.config.experimental.get_device_details(g).get("compute_capability")
        for g in tf.config.list_physical_devices("GPU")
    ]
    return bool(caps) and all(c is not None and tuple(c) >= (8, 0) for c in caps)


class DynamicLossScale:
    """Scale the loss by ``scale``; halve it on overflow (skipping that step), double it
    after ``growth_steps`` finite steps in a row. Create it in ``strategy.scope()``."""

    def __init__(self, initial_scale: float = 2.0**15, growth_steps: int = 2000):
        def variable(value, dtype):
            return tf.Variable(
                value, dtype=dtype, trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA
            )

        self.scale = variable(initial_scale, tf.float32)
        self.good_steps = variable(0, tf.int64)
        self.growth_steps = growth_steps

    def apply_gradients(self, optimizer: keras.optimizers.Optimizer, grads: list, variables: list) -> None:
        """Unscale scaled ``grads`` and apply them; call in replica context."""
        scale = tf.convert_to_tensor(self.scale)
        grads = [g / tf.cast(scale, g.dtype) for g in grads]

        def overflowed(grads):
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
            return tf.cast(tf.logical_not(finite), tf.float32)

        def cross_replica(strategy, grads):
            # The gradients are not all-reduced yet: every replica's must be finite, on
            # every node too, or the nodes would disagree on skipping the step.
            bad = strategy.extended.call_for_each_replica(overflowed, args=(grads,))
            ok = strategy.reduce(tf.distribute.ReduceOp.SUM, bad, axis=None) == 0.0

            def apply():
                strategy.extended.call_for_each_replica(
                    lambda g: optimizer.apply_gradients(zip(g, variables)), args=(grads,)
                )
                grow = self.good_steps + 1 >= self.growth_steps
                self.scale.assign(tf.where(grow, self.scale * 2.0, self.scale))
                self.good_steps.assign(tf.where(grow, tf.constant(0, tf.int64), self.good_steps + 1))

            def skip():
                self.scale.assign(self.scale * 0.5)
                self.good_steps.assign(0)

            tf.cond(ok, apply, skip)

        tf.distribute.get_replica_context().merge_call(cross_replica, args=(grads,))
