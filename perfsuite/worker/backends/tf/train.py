"""The training step: SGD with momentum, a precision policy, one step across all replicas."""

from __future__ import annotations

from collections.abc import Callable

import keras
import tensorflow as tf

from perfsuite.contract.burst_files import Unsupported
from perfsuite.contract.spec import BurstSpec
from perfsuite.data.tokens import IGNORE
from perfsuite.worker.backends.tf.feed import Feed
from perfsuite.worker.backends.tf.momentum import FusedSGD
from perfsuite.worker.backends.tf.precision import DynamicLossScale
from perfsuite.worker.pipelines import loss as workload_loss

LEARNING_RATE = 0.01
MOMENTUM = 0.9
# AdamW as the torch bursts take it (perfsuite.worker.backends.torch.train).
ADAMW_LR = 3e-4
ADAMW_BETAS = (0.9, 0.95)
ADAMW_WEIGHT_DECAY = 0.1
ADAMW_EPSILON = 1e-8  # torch's; Keras's default is 1e-7


INDEPENDENT_SGD_ONLY = (
    "independent replicas in TensorFlow update with SGD only (each replica's own momentum); this model "
    "trains with AdamW: use replicated"
)


def make_optimizer(name: str = "sgd") -> keras.optimizers.Optimizer:
    """SGD with momentum (the CNNs), on TensorFlow's fused kernel (FusedSGD), or AdamW (the
    transformers)."""
    if name == "adamw":
        return keras.optimizers.AdamW(
            learning_rate=ADAMW_LR,
            beta_1=ADAMW_BETAS[0],
            beta_2=ADAMW_BETAS[1],
            weight_decay=ADAMW_WEIGHT_DECAY,
            epsilon=ADAMW_EPSILON,
        )
    if name != "sgd":
        raise ValueError(f"optimizer must be 'sgd' or 'adamw', not {name!r}")
    return FusedSGD(learning_rate=LEARNING_RATE, momentum=MOMENTUM)


def class_replica_loss(labels: tf.Tensor, logits: tf.Tensor, global_batch: int, replicas: int) -> tf.Tensor:
    """An image model's: this replica's share of the step's loss, so that summing the replicas'
    gives its mean: cross-entropy per image over the global batch."""
    logits = tf.cast(logits, tf.float32)
    per_example = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    return tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)


def token_replica_loss(labels: tf.Tensor, logits: tf.Tensor, global_batch: int, replicas: int) -> tf.Tensor:
    """A token model's ([batch, seq, vocabulary] logits): this replica's share of the step's loss,
    the mean over its targets, IGNORE left out, over the replicas; as torch's data parallelism
    averages its ranks' means."""
    logits = tf.cast(logits, tf.float32)
    kept = tf.cast(labels != IGNORE, tf.float32)
    per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.maximum(labels, 0), logits)
    return tf.reduce_sum(per_token * kept) / tf.maximum(tf.reduce_sum(kept), 1.0) / replicas


def to_model_layout(spec: BurstSpec, images: tf.Tensor) -> tf.Tensor:
    """Every input pipeline yields NHWC batches; an NCHW model gets each one transposed on
    its replica's device, inside the step, as tf_cnn_benchmarks feeds its NCHW models."""
    if spec.layout == "channels_first":
        return tf.transpose(images, (0, 3, 1, 2))
    return images


def _write_state(variables: list, values: list, independent: bool = False) -> None:
    """Store the replicas' new batch-norm statistics (dropout seeds, a router's counts) in cross-replica
    context: a variable in central storage exists once, so the replicas' values are
    averaged (integer seed state: the first replica's) rather than each written over it.
    All averages go through one batched reduction, not one per variable. Independent
    replicas keep their own statistics: each copy gets its replica's values.
    """

    def merge(strategy, values):
        targets = [v.value for v in variables]  # the tf.Variables under the Keras variables
        if independent:
            for value, target in zip(values, targets):
                strategy.extended.update(target, lambda v, x: v.assign(x), args=(value,), group=False)
            return
        floating = [(value, t) for value, t in zip(values, targets) if t.dtype.is_floating]
        means = iter(strategy.extended.batch_reduce_to(tf.distribute.ReduceOp.MEAN, floating) if floating else [])
        for value, target in zip(values, targets):
            new = next(means) if target.dtype.is_floating else strategy.experimental_local_results(value)[0]
            strategy.extended.update(target, lambda v, x: v.assign(x), args=(new,), group=False)

    if variables:
        tf.distribute.get_replica_context().merge_call(merge, args=(values,))


def make_step(
    spec: BurstSpec,
    strategy: tf.distribute.Strategy,
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    feed: Feed,
    loss_scale: DynamicLossScale | None = None,
) -> Callable[[], tf.Tensor]:
    """Return ``step()``: one forward, backward and update on every replica; it returns
    the global mean loss as a tensor, left unread so the step forces no host sync.

    The model and optimizer must have been built in ``strategy.scope()``; the
    optimizer's slots must exist before the first step, since creating them inside a
    replica context fails with several replicas.

    The forward and backward pass is a pure function of the weights, read once per
    step on the replica's device: a copy from the parameter device for central storage.
    That keeps every variable access outside the part XLA compiles, as XLA may only
    touch variables on its own device.
    """
    global_batch = spec.batch_size * strategy.num_replicas_in_sync
    replica_loss = workload_loss(spec)  # what the workload learns by
    weights_vars = model.trainable_variables
    state_vars = model.non_trainable_variables
    independent = spec.variable_update == "independent" and strategy.num_replicas_in_sync > 1
    if independent and loss_scale is not None:
        raise Unsupported(
            "independent replicas in TensorFlow run without loss scaling, which fp16 needs "
            f"(--perf-precision {spec.precision}): use fp32, or bf16 on GPUs of compute capability 8.0 or later"
        )
    if independent and not isinstance(optimizer, keras.optimizers.SGD):
        raise Unsupported(INDEPENDENT_SGD_ONLY)
    if spec.mode == "infer":
        return _infer_step(spec, strategy, model, feed, global_batch)

    def gradients(images, labels, weights, state, scale):
        with tf.GradientTape() as tape:
            tape.watch(weights)
            logits, state, own = model.stateless_call(weights, state, images, training=True, return_losses=True)
            loss = replica_loss(labels, logits, global_batch, strategy.num_replicas_in_sync)
            # The step reports the workload's loss; it learns by that and the model's own losses
            # (add_loss: a router's load balancing), each this replica's share of their mean.
            learnt = (loss + _own_losses(own, strategy.num_replicas_in_sync)) if own else loss
            target = learnt * scale if loss_scale is not None else learnt
        return loss, tape.gradient(target, weights), state

    if spec.xla:
        gradients = tf.function(gradients, jit_compile=True, autograph=False)

    def replica_step(images, labels):
        images = to_model_layout(spec, images)
        weights = [tf.convert_to_tensor(v.value) for v in weights_vars]
        state = [tf.convert_to_tensor(v.value) for v in state_vars]
        scale = tf.convert_to_tensor(loss_scale.scale) if loss_scale is not None else tf.constant(1.0)
        loss, grads, state = gradients(images, labels, weights, state, scale)
        # apply_gradients all-reduces (mirrored) or aggregates (central storage) the gradients.
        if loss_scale is not None:
            loss_scale.apply_gradients(optimizer, grads, weights_vars)
        elif independent:
            _apply_independently(optimizer, grads, weights_vars)
        else:
            optimizer.apply_gradients(zip(grads, weights_vars))
        _write_state(state_vars, state, independent)
        return loss

    # No AutoGraph: nothing here branches or loops on a tensor in Python (which fails loudly
    # without it), and converting every Keras layer's call costs the first step about 0.5 s
    # on ResNet-50.
    @tf.function(autograph=False)
    def train_step(source):
        images, labels = feed.take(source)
        losses = strategy.run(replica_step, args=(images, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return lambda: train_step(feed.source)


def _own_losses(losses: list, replicas: int) -> tf.Tensor:
    """The model's own losses (``add_loss``, each over this replica's batch) as this replica's
    share: summed over the replicas, their mean."""
    return tf.add_n([tf.cast(x, tf.float32) for x in losses]) / replicas


def _apply_independently(optimizer: keras.optimizers.Optimizer, grads: list, variables: list) -> None:
    """SGD with momentum, as Keras's SGD computes it, on each replica's own copy of the
    variables and momenta with that replica's gradients: no all-reduce. Mirrored variables
    updated per device in cross-replica context simply diverge, which is the point."""

    def merge(strategy, grads):
        def velocity(m, g):
            return m * MOMENTUM - tf.cast(g, m.dtype) * LEARNING_RATE

        for g, v in zip(grads, variables):
            m = optimizer.momentums[optimizer._get_variable_index(v)].value
            # The variable first, from the momentum before its update (each device reads its own copy).
            strategy.extended.update(
                v.value, lambda vv, g, mv: vv.assign_add(velocity(mv, g)), args=(g, m), group=False
            )
            strategy.extended.update(m, lambda mv, g: mv.assign(velocity(mv, g)), args=(g,), group=False)

    tf.distribute.get_replica_context().merge_call(merge, args=(grads,))


def _infer_step(
    spec: BurstSpec, strategy: tf.distribute.Strategy, model: keras.Model, feed: Feed, global_batch: int
) -> Callable[[], tf.Tensor]:
    """Forward passes only (``training=False``: batch norm uses its moving statistics), the
    loss computed for the record; with XLA the forward pass is what is compiled. The state a
    forward pass changes even so (a router's counts) is written back; state it leaves alone
    (batch norm's statistics) is not, so a model without such state costs nothing more."""
    replica_loss = workload_loss(spec)
    state_vars = model.non_trainable_variables
    changed: list[int] = []  # which state the forward pass assigns, found as it is traced

    def forward(images, labels, weights, state):
        logits, new = model.stateless_call(weights, state, images, training=False)
        changed[:] = [i for i, (old, value) in enumerate(zip(state, new)) if value is not old]
        return replica_loss(labels, logits, global_batch, strategy.num_replicas_in_sync), [new[i] for i in changed]

    if spec.xla:
        forward = tf.function(forward, jit_compile=True, autograph=False)

    def replica_step(images, labels):
        images = to_model_layout(spec, images)
        weights = [tf.convert_to_tensor(v.value) for v in model.trainable_variables]
        state = [tf.convert_to_tensor(v.value) for v in state_vars]
        loss, new = forward(images, labels, weights, state)
        _write_state([state_vars[i] for i in changed], new)
        return loss

    @tf.function(autograph=False)
    def infer_step(source):
        images, labels = feed.take(source)
        losses = strategy.run(replica_step, args=(images, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return lambda: infer_step(feed.source)
