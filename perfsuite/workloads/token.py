"""The token workload: a model takes token ids of a sequence length from a vocabulary and learns
the next token (a decoder) or the masked ones (a masked LM); measured in tokens/s.

GPT-2, BERT, the Llama-style decoder. Its FLOPs per token come from its structure,
``6 * N + 12 * L * H * Q * T`` (``train_flops_per_item``), and its ids have no memory format.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from perfsuite.workloads.base import Workload

if TYPE_CHECKING:
    from perfsuite.contract.model_info import ModelInfo
    from perfsuite.contract.spec import BurstSpec

_TORCH = "perfsuite.worker.backends.torch.tokens"
_TF = "perfsuite.worker.backends.tf.tokens"
# A spec's image side, unused by a token model: held at the default so equal bursts stay equal.
_NO_IMAGE = 224


class TokenWorkload(Workload):
    def spec_fields(self, info: ModelInfo, device_kind: str, seq_len: int | None) -> dict[str, int]:
        default = info.cpu_seq_len if device_kind == "cpu" else info.seq_len
        return {"image_size": _NO_IMAGE, "seq_len": seq_len or default or 0}

    def check(self, spec: BurstSpec) -> list[str]:
        return [] if spec.seq_len >= 1 else ["seq_len must be >= 1 for a token model"]

    def normalised(self, spec: BurstSpec) -> dict[str, Any]:
        return {"image_size": _NO_IMAGE, "memory_format": ""}

    def items_per_sample(self, spec: BurstSpec) -> int:
        return spec.seq_len

    def items_per_batch_sample(self, info: ModelInfo, seq_len: int | None) -> int:
        return seq_len or info.seq_len or 1

    def input_words(self, spec: BurstSpec) -> str:
        return f" x {spec.seq_len} tokens"

    def extra_figures(self, throughput: float | None, spec: BurstSpec) -> dict[str, float | None]:
        """Sequences per second: tokens/s over the sequence length."""
        return {"sequences_per_sec": None if throughput is None else throughput / spec.seq_len}

    def builder_kwargs(self, info: ModelInfo, spec: BurstSpec, accepts: frozenset[str]) -> dict[str, Any]:
        return {"vocab_size": info.vocab_size, "seq_len": spec.seq_len}

    def describe_input(self, info: ModelInfo) -> str:
        cpu = f" ({info.cpu_seq_len} on a CPU worker)" if info.cpu_seq_len and info.cpu_seq_len != info.seq_len else ""
        return f"{info.seq_len} tokens{cpu} of {info.vocab_size}"

    def train_flops_per_item(self, info: ModelInfo, seq_len: int | None = None) -> float | None:
        """Training FLOPs per token at sequence length ``seq_len`` (default: the model's).

        ``6 * N + 12 * L * H * Q * T``, as torchtitan and nanoGPT count it. ``6 * N`` is the
        weights' matmuls (2 FLOPs per multiply-add, forward plus twice that backward), with
        N = ``params - embedding_params``; ``12 * L * H * Q * T`` is attention's two matmuls
        (scores and the weighted sum) over T keys in each of L layers, H query heads of width Q.
        Causal attention is counted in full, as if every token saw all T: the convention of both
        references, although a causal kernel does about half that work.

        N holds every weight that does a matmul for the token. A mixture of experts counts its
        ``active_params`` in the place of ``params``: the shared weights, the router's and top_k of
        num_experts experts' in each layer, as torchtitan weights routed experts. The parameters
        left out of it
        (``embedding_params``) are the ones that are only looked up: position and token-type
        embeddings, and a token embedding that is not also the output layer. A token embedding
        tied to the output layer (GPT-2, BERT) does its matmul as the output layer and stays in
        N, as nanoGPT counts it; an untied one (Llama) is left out and its separate output layer
        counted, as torchtitan counts it.
        """
        length = seq_len if seq_len is not None else info.seq_len
        params, embedding, layers, heads, width = (
            info.active_params if info.active_params is not None else info.params,
            info.embedding_params,
            info.layers,
            info.heads,
            info.head_dim,
        )
        if params is None or embedding is None or layers is None or heads is None or width is None or length is None:
            return None  # a model registered without its parameter count: the worker counts it
        return float(6 * (params - embedding) + 12 * layers * heads * width * length)

    def recomputed_flops_per_item(
        self, info: ModelInfo, spec: BurstSpec, block_params: int, measure: Callable[[], float]
    ) -> float | None:
        """One more forward of every block, as 6N + 12LHQT count it: 2 x the blocks' parameters
        plus attention's 4LHQT; None where the structure is not registered. A mixture of experts'
        idle experts (``params - active_params``, all in its blocks) do no work for the token."""
        if info.layers is None or info.heads is None or info.head_dim is None:
            return None
        idle = info.params - info.active_params if info.params is not None and info.active_params is not None else 0
        return float(2 * (block_params - idle) + 4 * info.layers * info.heads * info.head_dim * spec.seq_len)


TOKEN = TokenWorkload(
    name="token",
    unit="tokens/s",
    item="token",
    figure="tokens_per_sec",
    per_window="tokens_per_window",
    key_prefix="seq",
    layout_applies=False,
    pipelines={
        "torch": {loc: f"{_TORCH}:{loc}_batches" for loc in ("device", "host", "python", "real")},
        "tf": {loc: f"{_TF}:{loc}_feed" for loc in ("device", "host", "python", "real")},
    },
    losses={
        "torch": "perfsuite.worker.backends.torch.train:token_loss",
        "tf": "perfsuite.worker.backends.tf.train:token_replica_loss",
    },
    key_field="seq_len",
    key_option="--perf-seq-len",
    dimensions=("seq_len",),
)
