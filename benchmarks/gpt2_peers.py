"""GPT-2's peers for ``peer_parity.py``: Hugging Face transformers (torch) and keras_hub (TensorFlow).

Each peer is the library's own GPT-2 small, randomly initialised from its configuration (no hub,
no weights), trained by a plain loop written as a user of the library would write it: the
forward pass and the loss, the backward pass, the optimizer's step. Both sides take AdamW with
perfsuite's hyperparameters (lr 3e-4, betas 0.9 / 0.95, weight decay 0.1, eps 1e-8; torch's
fused kernel, as perfsuite's and transformers' ``Trainer`` take it by default), the same batch,
sequence length, threads and precision, and token ids resident in memory.

- torch: ``GPT2LMHeadModel(GPT2Config())`` called with ``labels`` (its own shifted causal loss),
  under ``torch.autocast("cpu", torch.bfloat16)`` for bf16.
- TensorFlow: ``keras_hub.models.GPT2Backbone`` with gpt2_base_en's configuration
  (``GPT2_BASE_EN``: what its preset's config.json holds, written here so that nothing is
  downloaded), its token embedding as the tied output layer (``reverse=True``, as keras_hub's
  ``GPT2CausalLM`` computes its logits), the mean sparse cross-entropy over float32 logits,
  Keras's AdamW, one ``tf.function`` a step.

The scripts run in the peers' environment (``peer_parity.peer_python``). The interleaved ones
put perfsuite's source on the path: perfsuite's side is then built and stepped by the burst
worker's own pieces (the registry's builder, the token feed resident on the device, the
backend's ``make_step``), and its op tables come from the worker's own profiling.
"""

from __future__ import annotations

# gpt2_base_en's config.json (keras_hub 0.32): GPT-2 small, as perfsuite's GPT2Config.
GPT2_BASE_EN = {
    "vocabulary_size": 50257,
    "num_layers": 12,
    "num_heads": 12,
    "hidden_dim": 768,
    "intermediate_dim": 3072,
    "dropout": 0.1,
    "max_sequence_length": 1024,
}

# A plain loop: argv batch seq threads warmup steps precision; prints the timed steps' seconds.
TRANSFORMERS_LOOP = r"""
import json, sys, time, torch
from transformers import GPT2Config, GPT2LMHeadModel
batch, seq, threads, warmup, steps = map(int, sys.argv[1:6])
bf16 = sys.argv[6] == "bf16"
torch.set_num_threads(threads)
torch.set_num_interop_threads(1)
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config())  # GPT-2 small, randomly initialised
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8, fused=True)
ids = torch.randint(0, model.config.vocab_size, (batch, seq))
def step():
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss
times = []
for i in range(warmup + steps):
    t = time.perf_counter()
    float(step())
    times.append(time.perf_counter() - t)
print(json.dumps({"attention": model.config._attn_implementation, "step_s": times[warmup:]}))
"""

KERAS_HUB_LOOP = r"""
import json, sys, time
batch, seq, threads, warmup, steps = map(int, sys.argv[1:6])
precision, config = sys.argv[6], json.loads(sys.argv[7])
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(threads)
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras, keras_hub
keras.mixed_precision.set_global_policy("mixed_bfloat16" if precision == "bf16" else "float32")
keras.utils.set_random_seed(0)
backbone = keras_hub.models.GPT2Backbone(**config)  # randomly initialised from the config
opt = keras.optimizers.AdamW(learning_rate=3e-4, beta_1=0.9, beta_2=0.95, weight_decay=0.1, epsilon=1e-8)
variables = backbone.trainable_variables
opt.build(variables)
ids = tf.random.uniform((batch, seq), 0, config["vocabulary_size"], tf.int32, seed=1)
targets = tf.random.uniform((batch, seq), 0, config["vocabulary_size"], tf.int32, seed=2)
inputs = {"token_ids": ids, "padding_mask": tf.ones_like(ids)}
@tf.function
def step():
    with tf.GradientTape() as tape:
        hidden = backbone(inputs, training=True)
        logits = backbone.token_embedding(hidden, reverse=True)  # the tied output layer
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(targets, tf.cast(logits, tf.float32)))
    opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss
times = []
for i in range(warmup + steps):
    t = time.perf_counter()
    float(step())
    times.append(time.perf_counter() - t)
print(json.dumps({"step_s": times[warmup:]}))
"""

# One process, perfsuite's burst step and the peer's plain step alternating one for one;
# argv: batch seq threads warmup steps precision profile_steps. Prints each side's step seconds
# and, with profile_steps > 0, each side's op table (the worker's profiling, after the timing).
TORCH_INTERLEAVED = r"""
import json, sys, time, torch
from transformers import GPT2Config, GPT2LMHeadModel
from perfsuite.contract.spec import BurstSpec
from perfsuite.models.registry import get_model, resolve_builder
from perfsuite.worker.backends.torch import tokens
from perfsuite.worker.backends.torch.profile import run_profiled_steps
from perfsuite.worker.backends.torch.train import ADAMW_BETAS, ADAMW_LR, ADAMW_WEIGHT_DECAY, make_step
batch, seq, threads, warmup, steps = map(int, sys.argv[1:6])
precision, profile_steps = sys.argv[6], int(sys.argv[7])
torch.set_num_threads(threads)
torch.set_num_interop_threads(1)
device = torch.device("cpu")
spec = BurstSpec(framework="torch", model="gpt2", device_kind="cpu", devices=1, batch_size=batch, seq_len=seq,
                 threads=threads, precision=precision)
info = get_model("torch", "gpt2")
torch.manual_seed(spec.seed)
ours = resolve_builder(info)(vocab_size=info.vocab_size, seq_len=seq)
ours.train()
batches = tokens.device_batches(spec, info, device, spec.seed)
step_ours = make_step(spec, ours, batches, device, optimizer=info.optimizer)
peer = GPT2LMHeadModel(GPT2Config())
peer.train()
opt = torch.optim.AdamW(peer.parameters(), lr=ADAMW_LR, betas=ADAMW_BETAS, weight_decay=ADAMW_WEIGHT_DECAY,
                        eps=1e-8, fused=True)
ids = torch.randint(0, peer.config.vocab_size, (batch, seq))
def step_peer():
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        loss = peer(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()
steps_of = {"perfsuite": step_ours, "peer": step_peer}
times = {key: [] for key in steps_of}
for i in range(warmup + steps):
    for key in (("perfsuite", "peer") if i % 2 == 0 else ("peer", "perfsuite")):
        t = time.perf_counter()
        float(steps_of[key]())
        if i >= warmup:
            times[key].append(time.perf_counter() - t)
profiles = {}
for key, step in steps_of.items() if profile_steps else ():
    profiles[key] = run_profiled_steps(step, lambda: None, profile_steps, device, None, True)().as_dict()
print(json.dumps({"times": times, "profiles": profiles, "attention": peer.config._attn_implementation}))
"""

TF_INTERLEAVED = r"""
import json, sys, time
batch, seq, threads, warmup, steps = map(int, sys.argv[1:6])
precision, profile_steps, config = sys.argv[6], int(sys.argv[7]), json.loads(sys.argv[8])
import keras, keras_hub, tensorflow as tf
from perfsuite.contract.spec import BurstSpec
from perfsuite.models.registry import get_model, resolve_builder
from perfsuite.worker.backends.tf import tokens
from perfsuite.worker.backends.tf.precision import precision_policy
from perfsuite.worker.backends.tf.profile import run_profiled_steps
from perfsuite.worker.backends.tf.strategy import configure_devices, make_strategy
from perfsuite.worker.backends.tf.train import ADAMW_BETAS, ADAMW_EPSILON, ADAMW_LR, ADAMW_WEIGHT_DECAY
from perfsuite.worker.backends.tf.train import make_optimizer, make_step
spec = BurstSpec(framework="tf", model="gpt2", device_kind="cpu", devices=1, batch_size=batch, seq_len=seq,
                 threads=threads, precision=precision)
strategy = make_strategy(spec, configure_devices(spec))  # the burst's threads: intra-op 2, inter-op 1
keras.mixed_precision.set_global_policy(precision_policy(spec).policy)
keras.utils.set_random_seed(spec.seed)
info = get_model("tf", "gpt2")
with strategy.scope():
    ours = resolve_builder(info)(vocab_size=info.vocab_size, seq_len=seq)
    optimizer = make_optimizer(info.optimizer)
    optimizer.build(ours.trainable_variables)
step_ours = make_step(spec, strategy, ours, optimizer, tokens.device_feed(spec, strategy, info, seed=spec.seed + 1000))
backbone = keras_hub.models.GPT2Backbone(**config)
opt = keras.optimizers.AdamW(learning_rate=ADAMW_LR, beta_1=ADAMW_BETAS[0], beta_2=ADAMW_BETAS[1],
                             weight_decay=ADAMW_WEIGHT_DECAY, epsilon=ADAMW_EPSILON)
variables = backbone.trainable_variables
opt.build(variables)
ids = tf.random.uniform((batch, seq), 0, config["vocabulary_size"], tf.int32, seed=1)
targets = tf.random.uniform((batch, seq), 0, config["vocabulary_size"], tf.int32, seed=2)
inputs = {"token_ids": ids, "padding_mask": tf.ones_like(ids)}
@tf.function
def step_peer():
    with tf.GradientTape() as tape:
        hidden = backbone(inputs, training=True)
        logits = backbone.token_embedding(hidden, reverse=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(targets, tf.cast(logits, tf.float32)))
    opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss
steps_of = {"perfsuite": step_ours, "peer": step_peer}
times = {key: [] for key in steps_of}
for i in range(warmup + steps):
    for key in (("perfsuite", "peer") if i % 2 == 0 else ("peer", "perfsuite")):
        t = time.perf_counter()
        float(steps_of[key]())
        if i >= warmup:
            times[key].append(time.perf_counter() - t)
profiles = {}
for key, step in steps_of.items() if profile_steps else ():
    profiles[key] = run_profiled_steps(step, lambda: None, profile_steps, None, True, False)().as_dict()
print(json.dumps({"times": times, "profiles": profiles}))
"""
