"""One fixed batch of token ids and its targets, as a burst trains a token model (numpy only).

The loss is cross-entropy of the logits against the targets, -100 ignored. A causal model
predicts the next token: the targets are the ids shifted by one (the last position has
none). A masked LM predicts the masked tokens: a share of positions get a mask id in the
input, the targets are the original ids there and -100 elsewhere.
"""

from __future__ import annotations

import numpy as np

IGNORE = -100
MASKED_SHARE = 0.15  # BERT's


def batch(objective: str, vocab_size: int, batch_size: int = 4, seq_len: int = 32, seed: int = 0):
    """(input ids, targets), int64 arrays [batch, seq]; the last id of the vocabulary is the mask."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab_size - 1, (batch_size, seq_len))
    if objective == "causal":
        targets = np.full_like(ids, IGNORE)
        targets[:, :-1] = ids[:, 1:]
        return ids, targets
    masked = rng.random(ids.shape) < MASKED_SHARE
    masked[:, 0] = True  # at least one masked position in every row
    return np.where(masked, vocab_size - 1, ids), np.where(masked, ids, IGNORE)
