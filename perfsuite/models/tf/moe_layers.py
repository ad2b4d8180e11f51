"""The Keras mixture of experts' layers (imported only inside the ``moe`` builder).

``MoE`` replaces a block's SwiGLU MLP: a linear router scores ``experts`` SwiGLU experts per
token, each token goes to its ``top_k`` best, and their outputs are summed weighted by the
router's softmax renormalised over the chosen ones. Only the chosen experts run on a token:
the rows (token, slot) are sorted by expert and each expert multiplies its own rows, so a step
costs the active parameters' FLOPs that the registration credits, not ``experts / top_k``
times them.

Two kernels do the experts' matmuls (``router_stats()["kernel"]`` says which ran):

- ``loop``: one SwiGLU per expert on its slice of the sorted rows, the slices' sizes read from
  the routing: exact, but the sizes are data, which XLA cannot compile.
- ``tiles``: under XLA (``--perf-xla``), static shapes: each expert's rows are padded to a whole
  number of tiles of ``ceil(rows / (4 x experts))`` rows, and every tile runs as one batch of
  a batched matmul against its expert's weights. No token is dropped (no capacity); the
  padding costs at most a quarter more expert FLOPs (an eighth on average), and the gathered
  weights at most ``5 x experts`` tiles' copies of one expert's weights per layer.

The layer also counts, in non-trainable variables, the (token, slot) rows routed to each
expert and the auxiliary loss it adds: a training step writes them back as any layer's state
(perfsuite.worker.backends.tf.train), averaged over the replicas, so counting costs no host
sync; ``MoEModel.router_stats()`` reads them once, after the timed windows.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from keras import layers
from tensorflow.python.framework import ops
from tensorflow.python.ops import control_flow_util

from perfsuite.models.tf.transformer_layers import normal


def _under_xla() -> bool:
    """Whether the graph being traced is compiled by XLA (a ``jit_compile`` function): the one
    public-API-free way to know, as TensorFlow's own layers ask it."""
    return control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph())


class MoE(layers.Layer):
    """``experts`` SwiGLU experts (stacked weights, [experts, d, ff] and [experts, ff, d], no
    biases) behind a linear router without bias choosing ``top_k`` per token. Each call adds
    ``aux_loss_weight`` x Switch Transformer's load-balancing loss (``experts`` x the sum over
    experts of the share of rows routed to it x its mean router probability: 1 when even) to
    the layer's losses."""

    def __init__(
        self,
        experts: int,
        top_k: int,
        d_ff: int,
        aux_loss_weight: float,
        std: float = 0.02,
        proj_std: float | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.experts, self.top_k, self.d_ff = experts, top_k, d_ff
        self.aux_loss_weight = aux_loss_weight
        self.std, self.proj_std = std, proj_std or std
        self.kernel = "loop"  # the one last traced

    def build(self, input_shape):
        d, e, ff = input_shape[-1], self.experts, self.d_ff
        self.router = self.add_weight(shape=(d, e), initializer=normal(self.std), name="router")
        self.gate = self.add_weight(shape=(e, d, ff), initializer=normal(self.std), name="gate")
        self.up = self.add_weight(shape=(e, d, ff), initializer=normal(self.std), name="up")
        self.down = self.add_weight(shape=(e, ff, d), initializer=normal(self.proj_std), name="down")
        # The counts stay float32 under a mixed policy (autocast off): averaged over replicas.
        state = {"trainable": False, "initializer": "zeros", "autocast": False, "dtype": "float32"}
        self.routed = self.add_weight(shape=(e,), name="routed", **state)
        self.aux_total = self.add_weight(shape=(), name="aux_total", **state)
        self.calls = self.add_weight(shape=(), name="calls", **state)

    def compute_output_shape(self, input_shape):
        return input_shape

    def call(self, x):
        d, k = x.shape[-1], self.top_k
        flat = tf.reshape(x, (-1, d))  # [tokens, d]
        probs = tf.nn.softmax(tf.cast(tf.matmul(flat, tf.cast(self.router, flat.dtype)), tf.float32))
        top_p, top_e = tf.math.top_k(probs, k)  # [tokens, k]
        weights = top_p / tf.reduce_sum(top_p, axis=-1, keepdims=True)
        chosen = tf.reshape(top_e, (-1,))  # row r = token r // k, slot r % k
        routed = tf.reduce_sum(tf.one_hot(chosen, self.experts, dtype=tf.int32), axis=0)  # rows per expert
        share = tf.cast(routed, tf.float32) / tf.cast(tf.size(chosen), tf.float32)
        aux = self.experts * tf.reduce_sum(share * tf.reduce_mean(probs, axis=0))
        self.add_loss(self.aux_loss_weight * aux)
        self.routed.assign_add(tf.cast(routed, tf.float32))
        self.aux_total.assign_add(aux)
        self.calls.assign_add(1.0)

        order = tf.argsort(chosen, stable=True)  # the rows by expert
        rows = tf.gather(flat, order // k)
        self.kernel = "tiles" if _under_xla() else "loop"
        if self.kernel == "tiles":  # a Python choice, made as the step is traced
            out = self._tiles(rows, routed, tf.gather(chosen, order))
        else:
            out = self._loop(rows, routed)
        # Back to (token, slot) order, each slot weighted, the slots summed.
        out = tf.reshape(tf.gather(out, tf.math.invert_permutation(order)), (-1, k, d))
        out = tf.reduce_sum(out * tf.cast(weights, out.dtype)[..., None], axis=1)
        return tf.reshape(out, tf.shape(x))

    def _weights(self, dtype):
        return (tf.cast(w, dtype) for w in (self.gate, self.up, self.down))

    def _loop(self, rows, routed):
        # unstack, not w[e]: its gradient stacks the experts' once, where each slice's would be a
        # zero-padded copy of the whole tensor.
        gate, up, down = (tf.unstack(w) for w in self._weights(rows.dtype))
        pieces = tf.split(rows, routed, num=self.experts)
        outs = [
            tf.matmul(keras.activations.silu(tf.matmul(p, g)) * tf.matmul(p, u), w)
            for p, g, u, w in zip(pieces, gate, up, down)
        ]
        return tf.concat(outs, axis=0)

    def _tiles(self, rows, routed, experts_of_rows):
        count, d = rows.shape
        if count is None:
            raise ValueError("the tiles kernel (XLA) needs a static batch and sequence length")
        size = -(-count // (4 * self.experts))  # rows per tile
        tiles = -(-count // size) + self.experts  # each expert's padding adds at most one tile
        per_expert = (routed + size - 1) // size * size  # padded rows
        padded_start = tf.cumsum(per_expert, exclusive=True)
        start = tf.cumsum(routed, exclusive=True)
        slot = tf.gather(padded_start - start, experts_of_rows) + tf.range(count)
        padded = tf.reshape(tf.scatter_nd(slot[:, None], rows, (tiles * size, d)), (tiles, size, d))
        # A tile's expert: how many experts' padded rows end at or before its first row (the
        # tiles past the last expert's are zeros, given to the last expert).
        firsts = tf.range(tiles) * size
        ends = tf.cumsum(per_expert)
        tile_expert = tf.minimum(tf.reduce_sum(tf.cast(ends[None] <= firsts[:, None], tf.int32), 1), self.experts - 1)
        gate, up, down = (tf.gather(w, tile_expert) for w in self._weights(rows.dtype))
        hidden = keras.activations.silu(tf.matmul(padded, gate)) * tf.matmul(padded, up)
        return tf.gather(tf.reshape(tf.matmul(hidden, down), (tiles * size, d)), slot)


class MoEModel(keras.Model):
    """A functional model with ``MoE`` layers, whose routing a burst reads: the counts restart
    at ``reset_router_stats()`` (after the warm-up) and ``router_stats()`` sums them up."""

    def moe_layers(self) -> list[MoE]:
        return [layer for layer in self._flatten_layers() if isinstance(layer, MoE)]

    def reset_router_stats(self) -> None:
        for layer in self.moe_layers():
            for variable in (layer.routed, layer.aux_total, layer.calls):
                variable.assign(tf.zeros_like(variable))

    def router_stats(self) -> dict:
        """``balance``: the busiest expert's share of the routed rows over an even share
        (1 / experts), averaged over the layers: 1.0 even, ``experts / top_k`` at most; None
        before any routing. ``aux_loss``: the load-balancing loss (unweighted, 1 when even),
        averaged over the layers and the calls. Under MirroredStrategy the counts are the
        replicas' mean, whose shares are the step's; with independent replicas, the first
        replica's."""
        moes = self.moe_layers()
        counts = np.array([layer.routed.numpy() for layer in moes], dtype=np.float64)
        calls = np.array([float(layer.calls.numpy()) for layer in moes])
        aux = np.array([float(layer.aux_total.numpy()) for layer in moes])
        routed = counts.sum(axis=1)
        first = moes[0]
        return {
            "balance": float(np.mean(counts.max(axis=1) / routed * first.experts)) if routed.all() else None,
            "layers": len(moes),
            "experts": first.experts,
            "top_k": first.top_k,
            "kernel": first.kernel,
            "aux_loss": float(np.mean(aux / calls)) if calls.all() else None,
        }
