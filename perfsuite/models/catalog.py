"""What the documented models share across frameworks: input shapes, batch sizes, classes,
vocabularies, and the transformers' configurations.

Both registries take these from here, so a torch burst and a TF burst of the same model
name always feed the same images or tokens in the same batches, and a transformer has the
same size in both. Parameter counts and FLOPs stay with each definition: keras.applications'
variants differ slightly from the torch ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

SHAPES: dict[str, dict] = {
    # batch_size: per GPU, as in the source benchmarks; cpu_batch_size: per CPU worker,
    # small enough that a window of a big model stays within seconds on a few cores.
    "cifar10": {"image_size": 24, "batch_size": 128, "cpu_batch_size": 64, "num_classes": 10},
    "alexnet": {"image_size": 224, "batch_size": 128, "cpu_batch_size": 8},
    "googlenet": {"image_size": 224, "batch_size": 64, "cpu_batch_size": 4},
    "inception3": {"image_size": 299, "batch_size": 64, "cpu_batch_size": 2},
    "inception4": {"image_size": 299, "batch_size": 64, "cpu_batch_size": 2},
    "resnet50": {"image_size": 224, "batch_size": 64, "cpu_batch_size": 2},
    "resnet152": {"image_size": 224, "batch_size": 64, "cpu_batch_size": 2},
    "vgg16": {"image_size": 224, "batch_size": 64, "cpu_batch_size": 2},
    "vit_b16": {"image_size": 224, "batch_size": 64, "cpu_batch_size": 2},
}

# GoogLeNet, Table 1 of the paper: #1x1, #3x3 reduce, #3x3, #5x5 reduce, #5x5, pool proj.
GOOGLENET_INCEPTION = {
    "3a": (64, 96, 128, 16, 32, 32),
    "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64),
    "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64),
    "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128),
    "5a": (256, 160, 320, 32, 128, 128),
    "5b": (384, 192, 384, 48, 128, 128),
}


# --- the transformers ------------------------------------------------------------------
# Each configuration defaults to the registered model; tests build small ones of the same code.


@dataclass(frozen=True)
class GPT2Config:
    """GPT-2 small: Radford et al. 2019, "Language Models are Unsupervised Multitask Learners"
    (Table 2's smallest), as OpenAI's released model and Hugging Face's ``GPT2Config()``."""

    layers: int = 12
    d_model: int = 768
    heads: int = 12
    d_ff: int = 3072  # 4 x d_model
    vocab_size: int = 50_257  # byte-level BPE
    positions: int = 1024  # learned position embeddings
    dropout: float = 0.1  # embeddings, attention probabilities, residual branches
    eps: float = 1e-5  # LayerNorm, before each sublayer (pre-LN) and after the last block
    init_std: float = 0.02  # residual projections: init_std / sqrt(2 x layers)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def embedding_params(self) -> int:
        """Left out of N: the position table. The token table is the output layer too."""
        return self.positions * self.d_model


@dataclass(frozen=True)
class BertConfig:
    """BERT-base: Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers
    for Language Understanding", as Hugging Face's ``BertConfig()``, with its masked-LM head."""

    layers: int = 12
    d_model: int = 768
    heads: int = 12
    d_ff: int = 3072
    vocab_size: int = 30_522  # uncased WordPiece
    positions: int = 512
    token_types: int = 2
    dropout: float = 0.1
    eps: float = 1e-12  # LayerNorm, after each sublayer's residual sum (post-LN)
    init_std: float = 0.02

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def embedding_params(self) -> int:
        """Left out of N: position and token-type tables. The word table is the MLM decoder too."""
        return (self.positions + self.token_types) * self.d_model


@dataclass(frozen=True)
class LlamaConfig:
    """A Llama-style decoder (Touvron et al. 2023, "Llama 2"): RMSNorm before each sublayer,
    SwiGLU, rotary position embeddings, grouped-query attention, no biases, an output layer
    apart from the token embedding, no dropout. Llama 2's recipe at GPT-2 small's depth and
    width, with 4 key/value heads and Llama's 32,000-token vocabulary."""

    layers: int = 12
    d_model: int = 768
    heads: int = 12
    kv_heads: int = 4  # each key/value head serves heads / kv_heads query heads
    d_ff: int = 2048  # SwiGLU hidden width, about 8/3 x d_model
    vocab_size: int = 32_000  # Llama's SentencePiece BPE
    eps: float = 1e-5  # RMSNorm
    rope_theta: float = 10_000.0
    init_std: float = 0.02  # residual projections: init_std / sqrt(2 x layers)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def embedding_params(self) -> int:
        """Left out of N: the token table, only looked up; the output layer is a matmul of its own."""
        return self.vocab_size * self.d_model


@dataclass(frozen=True)
class MoEConfig:
    """A Mixtral-style mixture-of-experts decoder (Jiang et al. 2024, "Mixtral of Experts"): the
    Llama-style block (RMSNorm, rotary embeddings, grouped-query attention, no biases, an output
    layer apart from the token embedding) with its SwiGLU MLP replaced by ``num_experts`` SwiGLU
    experts, of which a linear router (no bias) picks ``top_k`` per token; the chosen experts'
    outputs are weighted by the router's softmax renormalised over them. Switch Transformer's
    load-balancing loss (Fedus et al. 2022: ``num_experts`` x the sum over experts of the share of
    tokens routed to it x its mean router probability, 1 when even) is added to the language-model
    loss with weight ``aux_loss_weight``, as Mixtral's training and Hugging Face's ``MixtralConfig``
    (``router_aux_loss_coef`` 0.02; 0.01 here, Switch Transformer's)."""

    layers: int = 8
    d_model: int = 512
    heads: int = 8
    kv_heads: int = 2  # each key/value head serves heads / kv_heads query heads
    d_ff: int = 1024  # each expert's SwiGLU hidden width
    num_experts: int = 8
    top_k: int = 2
    vocab_size: int = 32_000  # Llama's and Mixtral's SentencePiece BPE
    eps: float = 1e-5  # RMSNorm
    rope_theta: float = 10_000.0
    init_std: float = 0.02  # residual projections: init_std / sqrt(2 x layers)
    aux_loss_weight: float = 0.01

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def embedding_params(self) -> int:
        """Left out of N: the token table, only looked up; the output layer is a matmul of its own."""
        return self.vocab_size * self.d_model

    @property
    def expert_params(self) -> int:
        """One expert's weights: SwiGLU's gate, up and down projections."""
        return 3 * self.d_model * self.d_ff

    @property
    def params(self) -> int:
        """Every parameter: the token table, each layer's attention (q and o d x d, k and v d x kv
        width), router (d x experts), experts and two RMSNorm scales, the final RMSNorm and the
        output layer."""
        kv = self.kv_heads * self.head_dim
        attention = self.d_model * (2 * self.d_model + 2 * kv)
        layer = attention + self.d_model * self.num_experts + self.num_experts * self.expert_params + 2 * self.d_model
        return 2 * self.vocab_size * self.d_model + self.layers * layer + self.d_model

    @property
    def active_params(self) -> int:
        """The parameters one token's forward pass uses: all but the experts it is not routed to
        (top_k of num_experts' weights counted, as torchtitan counts a routed expert's FLOPs), the
        router's own matmul included."""
        idle = self.layers * (self.num_experts - self.top_k) * self.expert_params
        return self.params - idle


@dataclass(frozen=True)
class ViTConfig:
    """ViT-B/16: Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words", Table 1's ViT-Base
    with 16x16 patches at 224 px, as timm's ``vit_base_patch16_224`` and torchvision's ``vit_b_16``."""

    image_size: int = 224
    patch_size: int = 16
    layers: int = 12
    d_model: int = 768
    heads: int = 12
    d_ff: int = 3072
    num_classes: int = 1000
    eps: float = 1e-6  # LayerNorm, pre-LN, as timm and torchvision
    init_std: float = 0.02

    @property
    def tokens(self) -> int:
        """Patches plus the class token."""
        return (self.image_size // self.patch_size) ** 2 + 1


GPT2_SMALL = GPT2Config()
BERT_BASE = BertConfig()
LLAMA_SMALL = LlamaConfig()
MOE_SMALL = MoEConfig()
VIT_B16 = ViTConfig()


class FlopsStructure(TypedDict):
    layers: int
    heads: int
    head_dim: int
    embedding_params: int


def flops_structure(config: GPT2Config | BertConfig | LlamaConfig | MoEConfig) -> FlopsStructure:
    """What a token model's FLOPs per token come from (register_token_model's arguments)."""
    return {
        "layers": config.layers,
        "heads": config.heads,
        "head_dim": config.head_dim,
        "embedding_params": config.embedding_params,
    }


# batch_size: per accelerator, 8,192 tokens a step for each model; seq_len: the longest
# each was trained at (the Llama-style decoder: Llama 2's 4,096 halved). cpu_*: per CPU
# worker, so that a step of GPT-2 small takes seconds on a core or two.
TOKEN_SHAPES: dict[str, dict] = {
    "gpt2": {
        "vocab_size": GPT2_SMALL.vocab_size,
        "seq_len": GPT2_SMALL.positions,
        "batch_size": 8,
        "cpu_seq_len": 128,
        "cpu_batch_size": 1,
    },
    "bert": {
        "vocab_size": BERT_BASE.vocab_size,
        "seq_len": BERT_BASE.positions,
        "batch_size": 16,
        "cpu_seq_len": 128,
        "cpu_batch_size": 1,
    },
    "llama": {
        "vocab_size": LLAMA_SMALL.vocab_size,
        "seq_len": 2048,
        "batch_size": 4,
        "cpu_seq_len": 128,
        "cpu_batch_size": 1,
    },
    # Mixtral's 32,768 context halved and halved again: the GPU session runs it at 1,024.
    "moe": {
        "vocab_size": MOE_SMALL.vocab_size,
        "seq_len": 4096,
        "batch_size": 2,
        "cpu_seq_len": 128,
        "cpu_batch_size": 1,
    },
}
