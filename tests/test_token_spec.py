"""A token model's burst spec: its key names the sequence length, its unit is tokens/s, and image
models' keys keep their meaning."""

from __future__ import annotations

import pytest

from perfsuite.contract.spec import BurstSpec, describe_difference, key_fields, nearest_key
from perfsuite.workloads import unit_of_key


def test_a_token_models_key_names_its_sequence_length_and_an_image_models_key_is_unchanged():
    gpt2 = BurstSpec("torch", "gpt2", batch_size=2, seq_len=128, threads=2)
    assert gpt2.key() == "torch/gpt2/cpu1/nodes1/device/bs2/seq128/fp32/threads2"
    assert gpt2.workload == "token" and gpt2.unit == "tokens/s" and gpt2.items_per_sample == 128
    assert "batch 2/device x 128 tokens" in gpt2.label
    resnet = BurstSpec("torch", "resnet50", batch_size=2, threads=2, memory_format="channels_first")
    assert resnet.key() == "torch/resnet50/cpu1/nodes1/device/bs2/img224/fp32/threads2"
    assert resnet.workload == "image" and resnet.unit == "img/s" and resnet.items_per_sample == 1
    assert unit_of_key(gpt2.key()) == "tokens/s" and unit_of_key(resnet.key()) == "img/s"


def test_a_layout_means_nothing_to_a_token_model():
    assert BurstSpec("torch", "gpt2", seq_len=64, memory_format="channels_last").memory_format == ""


def test_the_nearest_key_says_the_sequence_length_differs():
    key = BurstSpec("torch", "gpt2", seq_len=128).key()
    other = BurstSpec("torch", "gpt2", seq_len=256).key()
    assert key_fields(key)["seq_len"] == "128"
    near = nearest_key(key, [other])
    assert near == (other, ["seq_len"])
    assert describe_difference(key, *near) == "sequence length (128 here, 256 there: --perf-seq-len 256 matches it)"


def test_a_negative_sequence_length_is_refused():
    with pytest.raises(ValueError, match="seq_len must be >= 1 for a token model"):
        BurstSpec("torch", "gpt2", seq_len=-1)
