"""Token data: the synthetic language, the Python tokenizer and the token file of the real location."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfsuite.data import tokens


@settings(max_examples=30, deadline=None)
@given(vocab=st.integers(2, 70_000), seed=st.integers(0, 10), n=st.integers(1, 3000))
def test_a_stream_holds_ids_of_its_vocabulary_and_half_follow_their_predecessor(vocab, seed, n):
    language = tokens.Language(vocab, seed)
    stream = language.stream(n, np.random.default_rng(seed))
    assert stream.shape == (n,) and stream.dtype == np.int64
    assert stream.min() >= 0 and stream.max() < vocab
    if n >= 2000 and vocab > 50:
        follows = np.mean(stream[1:] == language.successor[stream[:-1]])
        assert 0.45 < follows < 0.6  # FOLLOW, plus the odd fresh draw that is the successor too


def test_the_same_seed_gives_the_same_language_and_stream():
    a, b = tokens.Language(1000, 3), tokens.Language(1000, 3)
    assert np.array_equal(a.stream(500, np.random.default_rng(1)), b.stream(500, np.random.default_rng(1)))
    assert not np.array_equal(a.successor, tokens.Language(1000, 4).successor)


def test_the_language_is_learnable_its_unigram_alone_is_well_below_uniform():
    """A model that learns only the unigram law already scores well below ln(vocabulary)."""
    language = tokens.Language(50_257)
    stream = language.stream(200_000, np.random.default_rng(0))
    counts = np.bincount(stream, minlength=50_257) / stream.size
    seen = counts[counts > 0]
    assert -np.sum(seen * np.log(seen)) < 0.85 * math.log(50_257)


def test_causal_and_masked_pairs():
    rng = np.random.default_rng(0)
    rows = tokens.sequences(tokens.Language(512), 4, 64, rng)
    assert rows.shape == (4, 65)
    inputs, targets = tokens.training_pair(rows, "causal", 512, rng)
    assert np.array_equal(inputs[:, 1:], targets[:, :-1]) and inputs.shape == targets.shape == (4, 64)
    inputs, targets = tokens.training_pair(rows, "masked", 512, rng)
    chosen = targets != tokens.IGNORE
    assert 0 < chosen.mean() < 0.4
    assert np.array_equal(targets[chosen], rows[:, :-1][chosen])
    assert np.array_equal(inputs[~chosen], rows[:, :-1][~chosen])  # unchosen positions keep their ids
    assert np.mean(inputs[chosen] == 511) > 0.5  # most chosen ones are the mask id
    with pytest.raises(ValueError, match="objective"):
        tokens.training_pair(rows, "both", 512, rng)


def test_the_python_tokenizer_gives_back_the_ids_it_was_written_from():
    lexicon = tokens.Lexicon(50_257)
    assert len(set(lexicon.words)) == 50_257
    ids = tokens.Language(50_257).stream(3000, np.random.default_rng(2))
    assert lexicon.tokenize(lexicon.text(ids)) == ids.tolist()


def test_the_token_file_is_made_once_and_read_back(tmp_path):
    path, dtype = tokens.ensure_token_file(50_257, cache_dir=tmp_path, tokens=10_000)
    assert dtype == np.uint16 and path.stat().st_size == 20_000
    again, _ = tokens.ensure_token_file(50_257, cache_dir=tmp_path, tokens=10_000)
    assert again == path and len(list(tmp_path.iterdir())) == 1
    mapped = tokens.windows(path, dtype)
    assert np.array_equal(
        np.asarray(mapped[:100]), tokens.Language(50_257).stream(10_000, np.random.default_rng(0))[:100]
    )
    wide, wide_dtype = tokens.ensure_token_file(100_000, cache_dir=tmp_path, tokens=100)
    assert wide_dtype == np.uint32 and wide.stat().st_size == 400


def test_a_users_token_file_is_checked_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="no token file train.bin"):
        tokens.ensure_token_file(512, data_dir=tmp_path)
    np.arange(100, dtype="<u2").tofile(tmp_path / "train.bin")
    path, dtype = tokens.ensure_token_file(512, data_dir=tmp_path)  # nanoGPT's: no meta, uint16
    assert dtype == np.uint16 and path.name == "train.bin"
    (tmp_path / "meta.json").write_text(json.dumps({"vocab_size": 50_257, "dtype": "uint16"}))
    with pytest.raises(ValueError, match="vocabulary of 50257, more than the model's 512"):
        tokens.ensure_token_file(512, data_dir=tmp_path)
    (tmp_path / "meta.json").write_text("{")
    with pytest.raises(ValueError, match="not a token file's meta"):
        tokens.ensure_token_file(512, data_dir=tmp_path)
