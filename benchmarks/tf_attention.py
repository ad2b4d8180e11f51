"""Which attention should the Keras transformers use? A training step of a small causal model
with each candidate, on this machine's CPU.

The model: ``--blocks`` pre-LN blocks (LayerNorm, causal self-attention, LayerNorm, GELU MLP
of 4 x d), d ``--d-model``, ``--heads`` heads, a batch of ``--batch`` x ``--seq`` float
inputs, the mean square of the output as the loss, ``--dropout`` on the attention weights.
Each candidate's step (forward, loss, gradients of every weight) is a ``tf.function``, with
and without XLA. The candidates run in interleaved rounds of ``--steps`` steps, ``--rounds``
times, on one thread (intra- and inter-op), timed in the process's CPU time, which a
machine busy with other work disturbs far less than wall time. Prints each candidate's
median and fastest milliseconds per step.

Candidates: ``perfsuite`` (perfsuite.models.tf.transformer_layers.SelfAttention),
``perfsuite_gqa`` (the same with half as many key/value heads), ``mha``
(keras.layers.MultiHeadAttention), ``einsum_dense`` (Keras's layer written out: an
``EinsumDense`` per projection, straight into heads, and ``tf.einsum``), ``matmul`` (a
fused query/key/value projection, heads transposed, ``tf.matmul``), ``dpa`` (the fused
projection and ``keras.ops.dot_product_attention``, which has no dropout), ``einsum`` (the
fused projection and ``tf.einsum``).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

CANDIDATES = ("perfsuite", "perfsuite_gqa", "mha", "einsum_dense", "matmul", "dpa", "einsum")


def attention(kind: str, d_model: int, heads: int, dropout: float):
    import keras
    import tensorflow as tf
    from keras import layers, ops

    from perfsuite.models.tf.transformer_layers import SelfAttention

    head_dim = d_model // heads
    if kind == "perfsuite":
        return SelfAttention(d_model, heads, dropout=dropout, causal=True)
    if kind == "perfsuite_gqa":
        return SelfAttention(d_model, heads, kv_heads=heads // 2, dropout=dropout, causal=True)
    if kind == "mha":

        class Keras(keras.layers.Layer):  # a layer of its own, so the model trains its weights
            def __init__(self):
                super().__init__()
                self.mha = layers.MultiHeadAttention(heads, head_dim, dropout=dropout)

            def call(self, x):
                return self.mha(x, x, use_causal_mask=True)

        return Keras()
    if kind == "einsum_dense":

        class EinsumDense(keras.layers.Layer):  # Keras's layer written out: projections straight into heads
            def __init__(self):
                super().__init__()
                self.q, self.k, self.v = (
                    layers.EinsumDense("btm,mhd->bthd", (None, heads, head_dim), bias_axes="hd") for _ in "qkv"
                )
                self.out = layers.EinsumDense("bthd,hdm->btm", (None, d_model), bias_axes="m")
                self.dropout = layers.Dropout(dropout)

            def call(self, x):
                seq = x.shape[1]
                allowed = tf.linalg.band_part(tf.ones((seq, seq), tf.bool), -1, 0)
                s = tf.einsum("bthd,bshd->bhts", self.q(x) / math.sqrt(head_dim), self.k(x))
                probs = self.dropout(tf.nn.softmax(tf.where(allowed, s, -1e9)))
                return self.out(tf.einsum("bhts,bshd->bthd", probs, self.v(x)))

        return EinsumDense()

    class Fused(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.qkv, self.out = layers.Dense(3 * d_model), layers.Dense(d_model)
            self.dropout = layers.Dropout(dropout)

        def call(self, x):
            batch, seq = tf.shape(x)[0], x.shape[1]
            q, k, v = tf.unstack(tf.reshape(self.qkv(x), (batch, seq, 3, heads, head_dim)), axis=2)
            allowed = tf.linalg.band_part(tf.ones((seq, seq), tf.bool), -1, 0)
            if kind == "dpa":  # no dropout of its own
                y = ops.dot_product_attention(q, k, v, is_causal=True)
            elif kind == "einsum":
                s = tf.where(allowed, tf.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(head_dim), -1e9)
                y = tf.einsum("bhqk,bkhd->bqhd", self.dropout(tf.nn.softmax(s)), v)
            else:
                q, k, v = (tf.transpose(t, (0, 2, 1, 3)) for t in (q, k, v))
                s = tf.where(allowed, tf.matmul(q, k, transpose_b=True) / math.sqrt(head_dim), -1e9)
                y = tf.transpose(tf.matmul(self.dropout(tf.nn.softmax(s)), v), (0, 2, 1, 3))
            return self.out(tf.reshape(y, (batch, seq, d_model)))

    return Fused()


def model(kind: str, args):
    import keras
    from keras import layers

    x = inputs = keras.Input((args.seq, args.d_model))
    for _ in range(args.blocks):
        x = x + attention(kind, args.d_model, args.heads, args.dropout)(layers.LayerNormalization()(x))
        hidden = layers.Dense(4 * args.d_model, activation="gelu")(layers.LayerNormalization()(x))
        x = x + layers.Dense(args.d_model)(hidden)
    return keras.Model(inputs, x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--dropout", type=float, default=0.0, help="on the attention weights (GPT-2, BERT: 0.1)")
    args = parser.parse_args()

    import keras
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    x = tf.random.normal((args.batch, args.seq, args.d_model))
    steps = {}
    for xla in (False, True):
        for kind in args.candidates.split(","):
            keras.utils.set_random_seed(0)
            m = model(kind, args)

            def step(m=m):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.square(m(x, training=True)))
                return loss, tape.gradient(loss, m.trainable_variables)

            steps[kind, xla] = tf.function(step, jit_compile=xla)
            steps[kind, xla]()  # traced (and compiled) outside the rounds
    times: dict = {key: [] for key in steps}
    for _ in range(args.rounds):
        for key, step in steps.items():
            start = time.process_time()
            for _ in range(args.steps):
                loss, _ = step()
            float(loss)
            times[key].append((time.process_time() - start) / args.steps * 1e3)
    for (kind, xla), ms in times.items():
        median, fastest = statistics.median(ms), min(ms)
        print(f"{kind:14s} xla={'on ' if xla else 'off'} CPU ms/step: median {median:6.1f}, fastest {fastest:6.1f}")


if __name__ == "__main__":
    main()
