"""A burst key turned back into the options of its case (perfsuite.bisect.selection.key_args):
what bisect measures and what an incident's command reproduces. The options, read as pytest
reads them and swept as the plugin sweeps them, select exactly one case of the throughput test,
and that case's spec has the key's every dimension: its key is the one they were made from.
"""

from __future__ import annotations

import argparse
import re
import types
from collections.abc import Callable, Collection
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.bisect.selection import key_args
from perfsuite.config.options import resolve
from perfsuite.contract.spec import (
    AUGMENT_PLACES,
    DATA_LOCATIONS,
    DEVICE_KINDS,
    MEMORY_FORMATS,
    MODES,
    PRECISIONS,
    VARIABLE_UPDATES,
    BurstSpec,
    short_kind,
)
from perfsuite.models.registry import FRAMEWORKS, all_models
from perfsuite.plugin import cases
from perfsuite.plugin.options import add_options

pytest_plugins = ["pytester"]

TOKEN_KEY = "torch/gpt2/cpu1/nodes1/device/bs2/seq64/fp32/threads2"
IMAGE_KEY = "torch/resnet50/cpu1/nodes1/device/bs16/img224/fp32/channels_last/threads2"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    add_options(types.SimpleNamespace(addoption=parser.add_argument))
    parser.add_argument("-m", dest="markexpr")
    parser.add_argument("-k", dest="keyword")
    return parser


def selected_specs(key: str) -> list[BurstSpec]:
    """The specs of the throughput cases that ``key_args(key)`` selects: its ``--perf-`` options
    resolved with no [tool.perfsuite], swept into cases, and the cases' test names and markers
    matched by its ``-k`` and ``-m`` as pytest matches them."""
    args = _parser().parse_args(key_args(key, []))
    options = resolve(lambda dest: getattr(args, f"perf_{dest}"), {}, "no pyproject.toml", Path.cwd())
    keyword, markers = Expression.compile(args.keyword), Expression.compile(args.markexpr)
    out = []
    for case in cases.build_cases(options, options.gpus or 0):
        names = ("test_throughput", f"test_throughput[{case.id}]", short_kind(case.device_kind), case.framework)
        marks = {short_kind(case.device_kind), case.framework}
        if keyword.evaluate(_matcher(names, exact=False)) and markers.evaluate(_matcher(marks, exact=True)):
            values = {name: case.value(name) for name in cases.DIMENSIONS}
            out.append(cases.burst_spec(options, values, options.perf_tolerance))
    return out


def _matcher(names: Collection[str], exact: bool) -> Callable[..., bool]:
    """pytest's match of a word: -m's, a marker's name; -k's, within a name, whatever its case."""

    def matches(word: str, /, **_: object) -> bool:
        return word in names if exact else any(word.lower() in name.lower() for name in names)

    return matches


@st.composite
def specs(draw: st.DrawFn) -> BurstSpec:
    """A burst of a registered model, of either workload, in any of the key's dimensions (those a
    run can ask for: XLA is TensorFlow's, torch.compile and activation checkpointing torch's)."""
    framework = draw(st.sampled_from(FRAMEWORKS))
    info = draw(st.sampled_from(all_models(framework)))
    kind = draw(st.sampled_from(DEVICE_KINDS))
    location = draw(st.sampled_from(DATA_LOCATIONS))
    return BurstSpec(
        framework=framework,
        model=info.name,
        device_kind=kind,
        devices=draw(st.integers(1, 8)),
        data_location=location,
        batch_size=draw(st.integers(1, 512)),
        image_size=info.image_size or BurstSpec.image_size,
        seq_len=draw(st.integers(1, 8192)) if info.workload == "token" else 0,
        precision=draw(st.sampled_from(PRECISIONS)),
        variable_update=draw(st.sampled_from(VARIABLE_UPDATES)),
        threads=draw(st.integers(1, 16)) if kind == "cpu" else 0,
        augment_on=draw(st.sampled_from(AUGMENT_PLACES)) if location == "real" else "cpu",
        xla=framework == "tf" and draw(st.booleans()),
        compile=framework == "torch" and draw(st.booleans()),
        memory_format=draw(st.sampled_from(("", *MEMORY_FORMATS))),
        mode=draw(st.sampled_from(MODES)),
        activation_checkpointing=framework == "torch" and draw(st.booleans()),
    )


@given(specs())
def test_the_options_of_a_key_select_the_one_case_of_that_key(spec):
    key = spec.key()
    assert [s.key() for s in selected_specs(key)] == [key]


@pytest.mark.parametrize("key", [TOKEN_KEY, TOKEN_KEY.replace("seq64", "seq8192"), IMAGE_KEY])
def test_a_token_keys_options_ask_for_its_sequence_length(key):
    args = key_args(key, [])
    if "/seq" in key:
        assert args[args.index("--perf-seq-len") + 1] == key.split("/seq")[1].split("/")[0]
    else:  # an image model's size is the model's own: no option sets it
        assert "--perf-seq-len" not in args
    assert [s.key() for s in selected_specs(key)] == [key]


def test_through_pytest_the_options_of_a_token_key_run_its_case(pytester):
    """The plugin itself, given the options, parametrizes the throughput test: one case runs, and
    its burst's key is the key (its sequence length, not the model's default on a CPU worker)."""
    pytester.makepyfile(
        test_throughput="def test_throughput(burst_spec):\n    print('KEY', burst_spec.key())\n",
    )
    result = pytester.runpytest_inprocess("-s", "--perf-missing-baseline", "pass", *key_args(TOKEN_KEY, []))
    result.assert_outcomes(passed=1)
    assert re.findall(r"KEY (\S+)", result.stdout.str()) == [TOKEN_KEY]
