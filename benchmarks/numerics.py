"""The figures behind the numerics gate's defaults (docs/figures.md, "Numerics").

``steps``: at which step a change of a step's arithmetic first shows in the loss of small seeded
GPT-2s (torch, AdamW as the bursts train them): the backward's summation order (1 thread against 2)
and the optimizer's kernel (fused AdamW against foreach), per seed and width; a change of the
forward (exact GELU against tanh) for comparison. ``--perf-numerics-steps``'s default holds most.

``cost``: what the deterministic settings cost a step, in alternating pairs of rounds (on, off):
torch's ``use_deterministic_algorithms``, TensorFlow's ``enable_op_determinism`` (each setting a
step traced under it), and a tf.data pipeline whose map has random ops, made under op determinism
or without it.

    python benchmarks/numerics.py steps
    python benchmarks/numerics.py cost
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

VOCAB, SEQ, BATCH = 512, 128, 8


def _gpt2(d: int, layers: int = 4):
    from perfsuite.models.catalog import GPT2_SMALL

    shape = {"layers": layers, "d_model": d, "heads": 4, "d_ff": 4 * d}
    return dataclasses.replace(GPT2_SMALL, **shape, vocab_size=VOCAB, positions=SEQ)


def torch_losses(seed: int, d: int, steps: int, threads: int = 1, fused: bool = True, exact_gelu: bool = False):
    import numpy as np
    import torch
    import torch.nn.functional as F

    from perfsuite.models.torch import gpt2, transformer_layers

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    kept = transformer_layers.gelu_tanh
    if exact_gelu:  # gpt2.build reads it when it builds its blocks
        transformer_layers.gelu_tanh = F.gelu
    try:
        model = gpt2.build(_gpt2(d))
    finally:
        transformer_layers.gelu_tanh = kept
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=fused)
    ids = torch.from_numpy(np.random.default_rng(seed).integers(0, VOCAB, (BATCH, SEQ + 1)))
    out = []
    for _ in range(steps):
        loss = F.cross_entropy(model(ids[:, :-1]).reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.append(loss.item())
    return out


def first_step(a: list[float], b: list[float]) -> int | None:
    return next((i + 1 for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def steps(args: argparse.Namespace) -> None:
    seen = []
    for d in args.width:
        for seed in range(args.seeds):
            base = torch_losses(seed, d, args.steps)
            threads = first_step(base, torch_losses(seed, d, args.steps, threads=2))
            fused = first_step(base, torch_losses(seed, d, args.steps, fused=False))
            gelu = first_step(base, torch_losses(seed, d, args.steps, exact_gelu=True))
            seen += [threads, fused]
            print(f"d {d} seed {seed}: 2 threads from step {threads}, foreach AdamW from step {fused}, "
                  f"exact GELU from step {gelu}", flush=True)  # fmt: skip
    for k in (3, 5, 10):
        held = sum(1 for s in seen if s is not None and s <= k)
        print(f"shown by step {k}: {held} of {len(seen)}")


def _pairs(rate_on, rate_off, rounds: int) -> tuple[float, float, float]:
    """The median and quartiles of on/off over pairs of rounds, their order alternating."""
    ratios = []
    for r in range(rounds):
        if r % 2:
            on, off = rate_on(), rate_off()
        else:
            off, on = rate_off(), rate_on()
        ratios.append(on / off)
    q = statistics.quantiles(ratios, n=4)
    return statistics.median(ratios), q[0], q[2]


def torch_cost(d: int, rounds: int, n: int) -> tuple[float, float, float]:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from perfsuite.models.torch import gpt2

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = gpt2.build(_gpt2(d, layers=2))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, VOCAB, (BATCH, SEQ + 1)))

    def rate(on: bool) -> float:
        torch.use_deterministic_algorithms(on, warn_only=True)
        start = time.perf_counter()
        for _ in range(n):
            loss = F.cross_entropy(model(ids[:, :-1]).reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        loss.item()
        return n / (time.perf_counter() - start)

    rate(False)
    return _pairs(lambda: rate(True), lambda: rate(False), rounds)


def tf_cost(d: int, rounds: int, n: int) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.framework import config

    from perfsuite.models.tf.gpt2 import build

    tf.config.threading.set_intra_op_parallelism_threads(1)
    keras.utils.set_random_seed(0)
    model = build(_gpt2(d, layers=2), SEQ)
    opt = keras.optimizers.AdamW(3e-4)
    opt.build(model.trainable_variables)
    ids = tf.constant(np.random.default_rng(0).integers(0, VOCAB, (BATCH, SEQ + 1)), tf.int32)

    def traced():
        @tf.function(autograph=False)
        def step():
            with tf.GradientTape() as tape:
                logits = tf.cast(model(ids[:, :-1], training=True), tf.float32)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(ids[:, 1:], logits))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss

        return step

    config.disable_op_determinism()
    plain = traced()
    tf.config.experimental.enable_op_determinism()
    determined = traced()

    def rate(on: bool) -> float:
        (tf.config.experimental.enable_op_determinism if on else config.disable_op_determinism)()
        step = determined if on else plain
        start = time.perf_counter()
        for _ in range(n):
            loss = step()
        loss.numpy()
        return n / (time.perf_counter() - start)

    rate(True), rate(False)  # traced
    stepping = _pairs(lambda: rate(True), lambda: rate(False), rounds)

    def pipeline():
        flip = lambda i: tf.image.random_flip_left_right(tf.random.uniform((32, 32, 3)))  # noqa: E731
        made = tf.data.Dataset.range(10**9).map(flip, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
        return iter(made.batch(64).prefetch(tf.data.AUTOTUNE))

    config.disable_op_determinism()
    free = pipeline()
    tf.config.experimental.enable_op_determinism()
    serial = pipeline()
    config.disable_op_determinism()

    def batches(it) -> float:
        next(it)
        start = time.perf_counter()
        for _ in range(20):
            next(it)
        return 20 / (time.perf_counter() - start)

    return stepping, _pairs(lambda: batches(serial), lambda: batches(free), rounds)


def cost(args: argparse.Namespace) -> None:
    print(f"under load: {os.getloadavg()[0]:.1f} runnable on {os.cpu_count()} CPUs", flush=True)
    for name, (median, lo, hi) in [("torch step", torch_cost(args.width[0], args.rounds, args.n))]:
        print(f"{name}: deterministic / default steps per second {median:.3f} (quartiles {lo:.3f}-{hi:.3f})")
    stepping, pipeline = tf_cost(args.width[0], args.rounds, args.n)
    print(f"tf step: deterministic / default steps per second {stepping[0]:.3f} ({stepping[1]:.3f}-{stepping[2]:.3f})")
    print(f"tf.data random map: made deterministic / not, batches per second {pipeline[0]:.3f} "
          f"({pipeline[1]:.3f}-{pipeline[2]:.3f})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("steps", "cost"))
    parser.add_argument("--width", type=int, action="append", help="d_model (default: 128 and 256; cost: 128)")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=12, help="losses compared per run")
    parser.add_argument("--rounds", type=int, default=16, help="cost: pairs of rounds")
    parser.add_argument("--n", type=int, default=5, help="cost: steps per round")
    args = parser.parse_args()
    args.width = args.width or ([128, 256] if args.what == "steps" else [128])
    steps(args) if args.what == "steps" else cost(args)


if __name__ == "__main__":
    main()
