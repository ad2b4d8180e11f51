"""Golden losses end to end, through the plugin, in real tiny bursts (tests/tiny_gelu.py): a
baseline saved, then an unchanged rerun is ``same`` in every burst of the matrix (torch and
TensorFlow, on 1 and 2 CPU workers, replicated and, in torch, sharded, in every data location);
then the model with its GELU switched from exact to the tanh approximation is not ``same``, and
its throughput still passes.

The steps sleep a fixed 30 ms each (PERFSUITE_INJECT_STEP_DELAY_MS) and the throughput tolerance
is wide: what is gated here is numerics, which no timing moves; the throughput verdict must only
stand apart from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from suite_files import SUITE, needs

pytest_plugins = ["pytester"]

TINY_GELU = (Path(__file__).parent / "tiny_gelu.py").read_text()
LOCATIONS = ("device", "host", "python", "real")
ARGS = [
    "-m", "cpu", "--perf-model", "tiny_gelu", "--perf-cpu-workers", "2", "--perf-threads-per-worker", "1",
    "--perf-steps", "5", "--perf-windows", "5", "--perf-warmup-steps", "1", "--perf-max-windows", "5",
    "--perf-baseline-runs", "1", "--perf-tolerance", "0.5", "--perf-data-location", ",".join(LOCATIONS),
    "-k", "throughput", "-p", "no:cacheprovider",
]  # fmt: skip


def run(pytester, framework: str, name: str, *extra: str) -> list[dict]:
    result = pytester.runpytest_subprocess(
        *ARGS, "--perf-framework", framework, "--perf-json", f"{name}.json", *extra, timeout=900
    )
    assert result.ret == 0, result.stdout.str()[-4000:]
    return json.loads((pytester.path / f"{name}.json").read_text())["results"]


def check(pytester, monkeypatch, framework: str, updates: str, shapes: int) -> None:
    monkeypatch.setenv("PERFSUITE_INJECT_STEP_DELAY_MS", "30")
    monkeypatch.delenv("PERFSUITE_GELU_APPROXIMATE", raising=False)
    pytester.makeconftest(TINY_GELU)
    pytester.makepyfile(test_suite=SUITE)
    pytester.mkdir("baselines")
    update = ["--perf-variable-update", updates]
    run(pytester, framework, "saved", *update, "--perf-save-baseline")
    rows = run(pytester, framework, "again", *update)
    seen = {(r["world_size"], r["variable_update"], r["data_location"]) for r in rows}
    assert len(rows) == len(seen) == shapes * len(LOCATIONS), sorted(seen)
    for row in rows:
        assert (row["numerics"], row["numerics_note"]) == ("same", None), row["id"]
        assert row["numerics_max_rel_diff"] == 0.0 and len(row["numerics_losses"]) == 10, row["id"]

    monkeypatch.setenv("PERFSUITE_GELU_APPROXIMATE", "tanh")
    for row in run(pytester, framework, "tanh", "-k", "cpu1-device or cpu1-real"):
        assert row["numerics"] in ("drifted", "changed") and row["numerics_first_step"] == 1, row["id"]
        assert row["verdict"] != "regression", row["id"]  # the throughput stands apart from the numerics


@needs("torch")
def test_torch_golden_losses_repeat_everywhere_and_a_gelu_change_shows(pytester, monkeypatch):
    # 1 worker; 2 workers replicated and sharded: three shapes in each data location.
    check(pytester, monkeypatch, "torch", "replicated,sharded", shapes=3)


@needs("tensorflow")
@pytest.mark.xdist_group("tensorflow")
def test_tensorflow_golden_losses_repeat_everywhere_and_a_gelu_change_shows(pytester, monkeypatch):
    check(pytester, monkeypatch, "tf", "replicated", shapes=2)
