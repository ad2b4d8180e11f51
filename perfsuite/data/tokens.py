"""Token data for token models: a synthetic language, its Python tokenizer, and the token file of
the ``real`` data location. Framework-free (NumPy only), so both backends share it.

**The language.** Random ids drawn uniformly would leave nothing to learn: a model's loss would stay
at ln(vocabulary), and a burst could not show that it trains. The suite's language has the two
statistics a language model learns first. Each token is, with probability ``FOLLOW``, the fixed
successor of the one before it (a random permutation of the vocabulary), and otherwise a fresh draw
from a Zipf law over the vocabulary (exponent ``ZIPF``), as word frequencies follow. A model at
initialisation scores about ln(vocabulary); one that has learnt the unigram and the successors scores
far less. The same seed gives the same language and stream on every rank and in both frameworks.

**The Python tokenizer** (the ``python`` data location): the stream is written as text, one word per
id, and turned back into ids by splitting it and looking each word up, in the loader's Python: the
per-token work a Python tokenizer does, without a hub's vocabulary.

**The token file** (the ``real`` data location): nanoGPT's layout, ``train.bin``, the stream as raw
little-endian unsigned integers (uint16 where the vocabulary fits, else uint32), beside
``meta.json`` (vocabulary size, dtype, token count). A user's own file in that layout, such as
nanoGPT's ``prepare.py`` writes, stands in for the generated one through ``--perf-data-dir``; without
a ``meta.json`` it is read as uint16. Generated files are made once per cache directory, in a private
temporary directory renamed into place, so that ranks racing to make one never read half a file.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from perfsuite.common.files import cache_root

FORMAT_VERSION = 1  # bump when the generated stream changes, so stale caches are not reused
FOLLOW = 0.5  # the chance that a token is the fixed successor of the one before it
ZIPF = 1.1  # the unigram law's exponent
DEFAULT_TOKENS = 1 << 20  # a generated file's length: 2 MiB at uint16, many bursts of windows
TOKEN_FILE = "train.bin"
META_FILE = "meta.json"
IGNORE = -100  # the targets a loss leaves out (a masked LM's unmasked positions)
# A masked LM's inputs, as BERT makes them: MASKED of the positions are predicted; of those, 80%
# become the mask id, 10% a random id and 10% stay as they are.
MASKED = 0.15
MASK_AS_MASK, MASK_AS_RANDOM = 0.8, 0.1


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned integer that holds every id."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


class Language:
    """The synthetic language of a vocabulary (see the module's note); ``stream`` draws from it."""

    def __init__(self, vocab_size: int, seed: int = 0):
        if vocab_size < 2:
            raise ValueError(f"a vocabulary needs at least 2 ids, got {vocab_size}")
        self.vocab_size = vocab_size
        rng = np.random.default_rng([seed, vocab_size])
        weights = 1.0 / np.arange(1, vocab_size + 1, dtype=np.float64) ** ZIPF
        # Ids ranked at random, so the frequent ones are not simply the low ones.
        self.unigram = np.empty(vocab_size)
        self.unigram[rng.permutation(vocab_size)] = weights / weights.sum()
        self.cumulative = np.cumsum(self.unigram)
        self.successor = rng.permutation(vocab_size)

    def stream(self, tokens: int, rng: np.random.Generator) -> np.ndarray:
        """``tokens`` ids of the language, as int64."""
        fresh = np.searchsorted(self.cumulative, rng.random(tokens) * self.cumulative[-1], side="right")
        fresh = np.minimum(fresh, self.vocab_size - 1)
        follows = rng.random(tokens) < FOLLOW
        follows[0] = False
        out = fresh.astype(np.int64)
        # A token that follows takes its predecessor's successor. Its depth is how many follow in a
        # row up to it; resolving depth 1, then 2, ... reads only predecessors already final, and a
        # run is short (its length is geometric, mean FOLLOW / (1 - FOLLOW)).
        positions = np.arange(tokens)
        depth = positions - np.maximum.accumulate(np.where(follows, 0, positions))
        for k in range(1, int(depth.max()) + 1 if tokens else 1):
            at = np.flatnonzero(depth == k)
            out[at] = self.successor[out[at - 1]]
        return out


def sequences(language: Language, batch: int, seq_len: int, rng: np.random.Generator) -> np.ndarray:
    """``batch`` rows of ``seq_len + 1`` ids, each a stretch of the language: a causal model reads
    the first ``seq_len`` and predicts the last ``seq_len``."""
    return language.stream(batch * (seq_len + 1), rng).reshape(batch, seq_len + 1)


def causal_pair(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) of a causal model from rows of ``seq_len + 1`` ids."""
    return rows[:, :-1], rows[:, 1:]


def masked_pair(
    rows: np.ndarray, vocab_size: int, rng: np.random.Generator, mask_id: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) of a masked LM from rows of ``seq_len + 1`` ids (the last one dropped):
    MASKED of the positions are chosen, and their targets are the ids there (IGNORE elsewhere)."""
    ids = rows[:, :-1].copy()
    chosen = rng.random(ids.shape) < MASKED
    targets = np.where(chosen, ids, IGNORE)
    roll = rng.random(ids.shape)
    mask = vocab_size - 1 if mask_id is None else mask_id
    ids[chosen & (roll < MASK_AS_MASK)] = mask
    swap = chosen & (roll >= MASK_AS_MASK) & (roll < MASK_AS_MASK + MASK_AS_RANDOM)
    ids[swap] = rng.integers(0, vocab_size, int(swap.sum()))
    return ids, targets


def training_pair(
    rows: np.ndarray, objective: str, vocab_size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) for the model's objective: "causal" or "masked"."""
    if objective == "masked":
        return masked_pair(rows, vocab_size, rng)
    if objective == "causal":
        return causal_pair(rows)
    raise ValueError(f"objective must be 'causal' or 'masked', not {objective!r}")


# --- the python data location: a Python tokenizer ------------------------------------------------


class Lexicon:
    """A word for every id and back: the stream as text, and a tokenizer that splits it and looks
    each word up, as the ``python`` data location does in its loader."""

    def __init__(self, vocab_size: int):
        self.words = [_word(i) for i in range(vocab_size)]
        self.ids = {w: i for i, w in enumerate(self.words)}

    def text(self, ids: np.ndarray) -> str:
        words = self.words
        return " ".join(words[i] for i in ids.tolist())

    def tokenize(self, text: str) -> list[int]:
        ids = self.ids
        return [ids[w] for w in text.split()]


def _word(i: int) -> str:
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    out = ""
    while True:
        i, r = divmod(i, len(letters))
        out += letters[r]
        if not i:
            return out
        i -= 1


# --- the real data location: the token file --------------------------------------------------------


def default_cache_dir() -> Path:
    return cache_root() / "datasets"


def ensure_token_file(
    vocab_size: int,
    data_dir: str | os.PathLike | None = None,
    cache_dir: Path | None = None,
    tokens: int = DEFAULT_TOKENS,
    seed: int = 0,
) -> tuple[Path, np.dtype]:
    """(the token file, its dtype): the user's in ``data_dir`` (checked), else one generated once
    under ``cache_dir`` for this vocabulary and reused."""
    if data_dir is not None:
        return read_meta(Path(data_dir).expanduser(), vocab_size)
    if tokens < 2:
        raise ValueError("a token file needs at least 2 tokens")
    name = f"tokens-v{FORMAT_VERSION}-vocab{vocab_size}-{tokens}" + (f"-s{seed}" if seed else "")
    target = (cache_dir or default_cache_dir()) / name
    if not target.is_dir():
        _generate(target, vocab_size, tokens, seed)
    return read_meta(target, vocab_size)


def read_meta(root: Path, vocab_size: int) -> tuple[Path, np.dtype]:
    """The token file in ``root`` and its dtype; ValueError, in one line, where it cannot be read
    as a stream of this vocabulary."""
    path = root / TOKEN_FILE
    if not path.is_file():
        raise ValueError(f"data dir {root} has no token file {TOKEN_FILE} (raw little-endian ids, as nanoGPT writes)")
    dtype = np.dtype(np.uint16)
    meta = root / META_FILE
    if meta.is_file():
        try:
            found = json.loads(meta.read_text())
            dtype = np.dtype(found["dtype"])
            vocab = int(found["vocab_size"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{meta}: not a token file's meta ({exc})") from None
        if vocab > vocab_size:
            raise ValueError(f"{path} holds ids of a vocabulary of {vocab}, more than the model's {vocab_size}")
    if dtype not in (np.dtype(np.uint16), np.dtype(np.uint32)):
        raise ValueError(f"{path}: ids must be uint16 or uint32, not {dtype}")
    if path.stat().st_size < 2 * dtype.itemsize:
        raise ValueError(f"{path} holds fewer than 2 tokens")
    return path, dtype


def _generate(target: Path, vocab_size: int, tokens: int, seed: int) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        dtype = token_dtype(vocab_size)
        stream = Language(vocab_size, seed).stream(tokens, np.random.default_rng(seed))
        stream.astype(dtype.newbyteorder("<")).tofile(tmp / TOKEN_FILE)
        meta = {"vocab_size": vocab_size, "dtype": dtype.name, "tokens": tokens, "version": FORMAT_VERSION}
        (tmp / META_FILE).write_text(json.dumps(meta, indent=1))
        try:
            tmp.rename(target)
        except OSError:
            if not target.is_dir():  # another rank's rename did not win either
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def windows(path: Path, dtype: np.dtype) -> np.memmap:
    """The token file, mapped: a loader reads rows of ``seq_len + 1`` ids at random offsets."""
    return np.memmap(path, dtype=dtype.newbyteorder("<"), mode="r")
