"""Token input pipelines, one per data location, as ``Feed``s of (ids, targets), int32
``[batch, seq_len]``; a target the loss leaves out is ``perfsuite.data.tokens.IGNORE``.

The language and the pairs come from perfsuite.data.tokens, as the torch pipelines take them.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.spec import BurstSpec
from perfsuite.data import tokens
from perfsuite.worker.backends.tf.feed import Feed

SHUFFLE_ROWS = 1024  # the real location's shuffle buffer, in rows
AUTO = tf.data.AUTOTUNE


def _pair(spec: BurstSpec, info: ModelInfo, batch: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    assert info.vocab_size is not None and info.objective is not None
    rows = tokens.sequences(tokens.Language(info.vocab_size, spec.seed), batch, spec.seq_len, rng)
    ids, targets = tokens.training_pair(rows, info.objective, info.vocab_size, rng)
    return ids.astype(np.int32), targets.astype(np.int32)


def device_feed(spec: BurstSpec, strategy, info: ModelInfo, seed: int) -> Feed:
    """Ids made once and resident on each compute device, reused (tensorpack 'gpu')."""
    devices = strategy.extended.worker_devices

    def make(ctx):
        replica = ctx.replica_id_in_sync_group
        ids, targets = _pair(spec, info, spec.batch_size, np.random.default_rng([seed, replica]))
        with tf.device(devices[replica % len(devices)]):
            return tf.identity(tf.constant(ids)), tf.identity(tf.constant(targets))

    return Feed(strategy.experimental_distribute_values_from_function(make), lambda values: values)


def host_feed(spec: BurstSpec, strategy, info: ModelInfo, seed: int) -> Feed:
    """Ids in host memory, split and copied to the devices every step (tensorpack 'cpu')."""
    ids, targets = _pair(spec, info, spec.batch_size * strategy.num_replicas_in_sync, np.random.default_rng(seed))
    with tf.device("/cpu:0"):
        pair = (tf.constant(ids), tf.constant(targets))
    dataset = tf.data.Dataset.from_tensors(pair).repeat().prefetch(tf.data.AUTOTUNE)
    return Feed(iter(strategy.experimental_distribute_dataset(dataset)), next)


def _signature(spec: BurstSpec, batch: int) -> tuple[tf.TensorSpec, tf.TensorSpec]:
    shape = (batch, spec.seq_len)
    return tf.TensorSpec(shape, tf.int32), tf.TensorSpec(shape, tf.int32)


def python_feed(spec: BurstSpec, strategy, info: ModelInfo, seed: int) -> Feed:
    """Text written from the language and tokenized by Python code, one batch per replica per step."""
    assert info.vocab_size is not None and info.objective is not None
    vocab, objective = info.vocab_size, info.objective

    def generate():
        rng = np.random.default_rng(seed)
        language, lexicon = tokens.Language(vocab, spec.seed), tokens.Lexicon(vocab)
        width = spec.seq_len + 1
        while True:
            text = lexicon.text(language.stream(spec.batch_size * width, rng))
            rows = np.array(lexicon.tokenize(text), dtype=np.int64).reshape(spec.batch_size, width)
            ids, targets = tokens.training_pair(rows, objective, vocab, rng)
            yield ids.astype(np.int32), targets.astype(np.int32)

    def dataset(_ctx):
        made = tf.data.Dataset.from_generator(generate, output_signature=_signature(spec, spec.batch_size))
        return made.prefetch(tf.data.AUTOTUNE)

    return Feed(iter(strategy.distribute_datasets_from_function(dataset)), next)


def real_feed(spec: BurstSpec, strategy, info: ModelInfo, seed: int) -> Feed:
    """The token file streamed by tf.data as fixed-length records of ``seq_len + 1`` ids, shuffled
    in a buffer and decoded in the graph (a masked LM's masks are drawn there too): TensorFlow's
    own reader, where the torch pipeline maps the file and reads rows at random offsets."""
    assert info.vocab_size is not None and info.objective is not None
    path, dtype = tokens.ensure_token_file(info.vocab_size, spec.data_dir)
    width = spec.seq_len + 1
    count = path.stat().st_size // dtype.itemsize
    if count < width:
        raise ValueError(f"{path} holds {count} tokens, fewer than a row of {width}")
    kind = tf.uint16 if dtype.itemsize == 2 else tf.uint32
    vocab, masked = info.vocab_size, info.objective == "masked"

    def pair(rows):
        rows = tf.cast(rows, tf.int32)
        if not masked:
            return rows[:, :-1], rows[:, 1:]
        ids = rows[:, :-1]
        shape = (spec.batch_size, spec.seq_len)
        chosen = tf.random.uniform(shape) < tokens.MASKED
        roll = tf.random.uniform(shape)
        targets = tf.where(chosen, ids, tokens.IGNORE)
        ids = tf.where(chosen & (roll < tokens.MASK_AS_MASK), vocab - 1, ids)
        swap = chosen & (roll >= tokens.MASK_AS_MASK) & (roll < tokens.MASK_AS_MASK + tokens.MASK_AS_RANDOM)
        return tf.where(swap, tf.random.uniform(shape, 0, vocab, dtype=tf.int32), ids), targets

    def dataset(ctx):
        record = width * dtype.itemsize  # the file's tail, short of a whole row, is left unread
        records = tf.data.FixedLengthRecordDataset(str(path), record, footer_bytes=path.stat().st_size % record)
        records = records.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).repeat()
        records = records.shuffle(SHUFFLE_ROWS, seed=seed + ctx.input_pipeline_id)
        # A row's length made static: the models' reshapes need it, and decode_raw leaves it unknown.
        rows = records.map(lambda raw: tf.reshape(tf.io.decode_raw(raw, kind), (width,)), num_parallel_calls=AUTO)
        batched = rows.batch(spec.batch_size, drop_remainder=True)
        return batched.map(pair, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    return Feed(iter(strategy.distribute_datasets_from_function(dataset)), next)
