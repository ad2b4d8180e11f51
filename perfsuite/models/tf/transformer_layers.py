"""Shared building blocks of the Keras transformers (imported only inside builders).

Attention is one fused query/key/value projection, the heads transposed before
``tf.matmul`` (scores, causal mask, softmax in float32 at least, the weighted sum) and back
after it, one more projection. It was the fastest of the candidates for a training step of
a small decoder on this project's CPU (``benchmarks/tf_attention.py``), if by little:
Keras's ``MultiHeadAttention``, an ``EinsumDense`` version of it, and the fused projection
with ``keras.ops.dot_product_attention`` or ``tf.einsum``. TensorFlow's profiler counts
its FLOPs (MatMul, BatchMatMulV2), which it does not for the Einsum op the others run.

Each layer builds its sublayers from the input shape and gives its output shape without
tracing its call, so a full-size model is built in seconds. Blocks are layers of their
own, which a model names ``block_{i}``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf
from keras import layers


def normal(std: float) -> keras.initializers.Initializer:
    return keras.initializers.RandomNormal(stddev=std)


def gelu_tanh(x):
    """GPT-2's GELU, the tanh approximation."""
    return keras.activations.gelu(x, approximate=True)


def gelu(x):
    """BERT's and ViT's GELU, exact (erf)."""
    return keras.activations.gelu(x, approximate=False)


class SelfAttention(layers.Layer):
    """Multi-head self-attention, grouped-query where ``kv_heads < heads``; rotary position
    embeddings for sequences of up to ``rotary_len`` tokens where it is set.

    The query heads that share a key/value head are one batch of rows in the matmuls, so
    keys and values are never repeated. ``std`` initialises the fused projection and
    ``proj_std`` the output projection (GPT-2 scales the one that ends a residual branch).
    """

    def __init__(
        self,
        d_model: int,
        heads: int,
        kv_heads: int | None = None,
        use_bias: bool = True,
        dropout: float = 0.0,
        causal: bool = False,
        rotary_len: int | None = None,
        rope_theta: float = 10_000.0,
        std: float = 0.02,
        proj_std: float | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.heads, self.kv_heads = heads, kv_heads or heads
        self.head_dim = d_model // heads
        self.causal = causal
        width = (self.heads + 2 * self.kv_heads) * self.head_dim
        self.qkv = layers.Dense(width, use_bias=use_bias, kernel_initializer=normal(std), name="qkv")
        self.proj = layers.Dense(d_model, use_bias=use_bias, kernel_initializer=normal(proj_std or std), name="proj")
        self.dropout = layers.Dropout(dropout) if dropout else None
        self.rotary = rotary_angles(self.head_dim, rotary_len, rope_theta) if rotary_len else None

    def build(self, input_shape):
        self.qkv.build(input_shape)
        self.proj.build((*input_shape[:-1], self.heads * self.head_dim))

    def compute_output_shape(self, input_shape):
        return input_shape

    def call(self, x, training=None):
        batch, seq, group = tf.shape(x)[0], x.shape[1], self.heads // self.kv_heads
        qkv = tf.reshape(self.qkv(x), (batch, seq, self.heads + 2 * self.kv_heads, self.head_dim))
        q, k, v = (
            tf.transpose(t, (0, 2, 1, 3))  # [batch, heads, seq, head_dim]
            for t in tf.split(qkv, [self.heads, self.kv_heads, self.kv_heads], axis=2)
        )
        if self.rotary is not None:
            q, k = rotate(q, *self.rotary, seq), rotate(k, *self.rotary, seq)
        # Query head i uses key/value head i // group: its group's rows share one matmul.
        q = tf.reshape(q * tf.cast(1.0 / math.sqrt(self.head_dim), q.dtype), (batch, self.kv_heads, group * seq, -1))
        scores = tf.reshape(tf.matmul(q, k, transpose_b=True), (batch, self.kv_heads, group, seq, seq))
        scores = tf.cast(scores, tf.float32) if scores.dtype in (tf.float16, tf.bfloat16) else scores
        if self.causal:
            allowed = tf.linalg.band_part(tf.ones((seq, seq), tf.bool), -1, 0)  # each position sees itself and before
            scores = tf.where(allowed, scores, tf.constant(-1e9, scores.dtype))
        probs = tf.cast(tf.nn.softmax(scores, axis=-1), v.dtype)
        if self.dropout is not None:
            probs = self.dropout(probs, training=training)
        y = tf.matmul(tf.reshape(probs, (batch, self.kv_heads, group * seq, seq)), v)
        y = tf.transpose(tf.reshape(y, (batch, self.heads, seq, self.head_dim)), (0, 2, 1, 3))
        return self.proj(tf.reshape(y, (batch, seq, self.heads * self.head_dim)))


def rotary_angles(head_dim: int, max_len: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """Rotary position embeddings' cos and sin, [max_len, head_dim], as the torch models' ``Rotary``."""
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim)
    angles = np.tile(np.outer(np.arange(max_len, dtype=np.float32), inv_freq), (1, 2))
    return np.cos(angles), np.sin(angles)


def rotate(x, cos: np.ndarray, sin: np.ndarray, seq: int):
    """``x`` [batch, heads, seq, head_dim] rotated in rotate-half pairs (Hugging Face's Llama)."""
    cos, sin = tf.constant(cos[:seq], x.dtype), tf.constant(sin[:seq], x.dtype)
    first, second = tf.split(x, 2, axis=-1)
    return x * cos + tf.concat((-second, first), axis=-1) * sin


class MLP(layers.Layer):
    """The position-wise feed-forward layer: ``fc``, an activation, ``proj``."""

    def __init__(self, d_model: int, d_ff: int, activation, std: float = 0.02, proj_std: float | None = None, **kwargs):
        super().__init__(**kwargs)
        self.fc = layers.Dense(d_ff, activation=activation, kernel_initializer=normal(std), name="fc")
        self.proj = layers.Dense(d_model, kernel_initializer=normal(proj_std or std), name="proj")

    def build(self, input_shape):
        self.fc.build(input_shape)
        self.proj.build((*input_shape[:-1], self.fc.units))

    def compute_output_shape(self, input_shape):
        return input_shape

    def call(self, x):
        return self.proj(self.fc(x))


class SwiGLU(layers.Layer):
    """Shazeer 2020's SwiGLU feed-forward, without biases: ``proj(silu(gate(x)) * up(x))``."""

    def __init__(self, d_model: int, d_ff: int, std: float = 0.02, proj_std: float | None = None, **kwargs):
        super().__init__(**kwargs)
        self.gate = layers.Dense(d_ff, use_bias=False, kernel_initializer=normal(std), name="gate")
        self.up = layers.Dense(d_ff, use_bias=False, kernel_initializer=normal(std), name="up")
        self.proj = layers.Dense(d_model, use_bias=False, kernel_initializer=normal(proj_std or std), name="proj")

    def build(self, input_shape):
        self.gate.build(input_shape)
        self.up.build(input_shape)
        self.proj.build((*input_shape[:-1], self.gate.units))

    def compute_output_shape(self, input_shape):
        return input_shape

    def call(self, x):
        return self.proj(keras.activations.silu(self.gate(x)) * self.up(x))


class PreNormBlock(layers.Layer):
    """``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``: GPT-2, ViT, Llama; dropout on each
    residual branch when ``dropout`` > 0."""

    def __init__(self, attn, mlp, norm1, norm2, dropout: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.norm1, self.attn, self.norm2, self.mlp = norm1, attn, norm2, mlp
        self.drop = layers.Dropout(dropout) if dropout else None

    def build(self, input_shape):
        for layer in (self.norm1, self.attn, self.norm2, self.mlp):
            layer.build(input_shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def _branch(self, y, training):
        return self.drop(y, training=training) if self.drop is not None else y

    def call(self, x, training=None):
        x = x + self._branch(self.attn(self.norm1(x), training=training), training)
        return x + self._branch(self.mlp(self.norm2(x)), training)


class PostNormBlock(PreNormBlock):
    """``norm1(x + attn(x))``, then ``norm2(x + mlp(x))``: BERT (and the original Transformer)."""

    def call(self, x, training=None):
        x = self.norm1(x + self._branch(self.attn(x, training=training), training))
        return self.norm2(x + self._branch(self.mlp(x), training))


class TokenEmbedding(layers.Embedding):
    """An embedding that is also the output layer when called with ``reverse=True``:
    features [batch, seq, d_model] to logits [batch, seq, vocab] by its transposed table
    (GPT-2's and BERT's tied weights, one variable).

    The product takes the features as one matrix, a row per token: ``tf.matmul`` of the
    [batch, seq, d_model] features by the table would broadcast the table over the batch,
    and its gradient then makes one table-sized gradient per sample and sums them.
    """

    def call(self, inputs, reverse: bool = False):
        if not reverse:
            return super().call(inputs)
        table = tf.cast(self.embeddings, inputs.dtype)
        logits = tf.matmul(tf.reshape(inputs, (-1, inputs.shape[-1])), table, transpose_b=True)
        outer = [n if n is not None else tf.shape(inputs)[i] for i, n in enumerate(inputs.shape[:-1])]
        return tf.reshape(logits, (*outer, self.input_dim))

    def compute_output_spec(self, inputs, reverse: bool = False):
        if not reverse:
            return super().compute_output_spec(inputs)
        return keras.KerasTensor((*inputs.shape[:-1], self.input_dim), dtype=inputs.dtype)


class PositionEmbedding(layers.Layer):
    """Learned positions (or, with ``first_only``, BERT's one token type): adds table rows to its input."""

    def __init__(self, rows: int, d_model: int, std: float = 0.02, first_only: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.rows, self.d_model, self.std, self.first_only = rows, d_model, std, first_only

    def build(self, input_shape):
        self.table = self.add_weight(shape=(self.rows, self.d_model), initializer=normal(self.std), name="embeddings")

    def compute_output_shape(self, input_shape):
        return input_shape

    def call(self, x):
        table = tf.cast(self.table, x.dtype)
        if self.first_only:
            return x + table[0]
        if x.shape[1] > self.rows:
            raise ValueError(f"{self.rows} positions, fewer than a sequence of {x.shape[1]}")
        return x + table[: x.shape[1]]


class Bias(layers.Layer):
    """A learned bias over the last axis (BERT's MLM decoder has its own)."""

    def build(self, input_shape):
        self.bias = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="bias")

    def compute_output_shape(self, input_shape):
        return input_shape

    def call(self, x):
        return x + tf.cast(self.bias, x.dtype)


def token_input(seq_len: int) -> keras.KerasTensor:
    return keras.Input(shape=(seq_len,), dtype="int32", name="ids")


class ClassToken(layers.Layer):
    """ViT's class token: one learned vector put before the patches."""

    def build(self, input_shape):
        self.token = self.add_weight(shape=(1, 1, input_shape[-1]), initializer=normal(1e-6), name="token")

    def compute_output_shape(self, input_shape):
        return (input_shape[0], None if input_shape[1] is None else input_shape[1] + 1, input_shape[2])

    def call(self, x):
        token = tf.cast(tf.tile(self.token, (tf.shape(x)[0], 1, 1)), x.dtype)
        return tf.concat((token, x), axis=1)


def decoder(c, seq_len: int, mlp: Callable[[float], layers.Layer]) -> tuple[keras.KerasTensor, keras.KerasTensor]:
    """The Llama-style decoder of Llama and the mixture of experts, as token ids and logits: a
    token embedding, ``c.layers`` blocks (``block_{i}``) of RMSNorm before grouped-query
    attention with rotary positions and before ``mlp(proj_std)`` (Llama's SwiGLU, or routed
    experts), a last RMSNorm and an output layer apart from the embedding. ``c`` is a
    ``catalog.LlamaConfig`` or ``catalog.MoEConfig``; ``proj_std`` initialises the projections
    that end a residual branch, as GPT-2 scales them."""
    proj_std = c.init_std / math.sqrt(2 * c.layers)
    ids = token_input(seq_len)
    x = layers.Embedding(c.vocab_size, c.d_model, embeddings_initializer=normal(c.init_std), name="tok_embeddings")(ids)
    for i in range(c.layers):
        x = PreNormBlock(
            SelfAttention(
                c.d_model,
                c.heads,
                c.kv_heads,
                use_bias=False,
                causal=True,
                rotary_len=seq_len,
                rope_theta=c.rope_theta,
                std=c.init_std,
                proj_std=proj_std,
            ),
            mlp(proj_std),
            layers.RMSNormalization(epsilon=c.eps),
            layers.RMSNormalization(epsilon=c.eps),
            name=f"block_{i}",
        )(x)
    x = layers.RMSNormalization(epsilon=c.eps, name="norm")(x)
    return ids, layers.Dense(c.vocab_size, use_bias=False, kernel_initializer=normal(c.init_std), name="output")(x)
