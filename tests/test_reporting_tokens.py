"""Token models in every figure a run shows: tokens/s (and sequences/s) where an image model has
img/s, in --perf-json, JUnit, pytest-benchmark, the terminal, the report, the failing lines, the
metrics, the trend and triage plots' axes and the history document; an image model's row as it was."""

from __future__ import annotations

import json

import pytest
from records import judged, result, view, worker_record

from perfsuite.analysis import stats
from perfsuite.analysis.findings import THROUGHPUT, Findings, InputEfficiency, Throughput
from perfsuite.config.options import resolve
from perfsuite.history import document
from perfsuite.plugin import benchmark, policy
from perfsuite.plugin.record import junit_properties
from perfsuite.reporting import content, perf_json, terminal
from perfsuite.reporting import triage as triage_text
from perfsuite.reporting.perf_json import row
from perfsuite.reporting.trend import Trend

GPT = dict(params=1_000_000, embedding_params=200_000, layers=2, heads=4, head_dim=16)
SEQ = 128
TOKEN_SAMPLES = [25_600.0, 25_700.0, 25_800.0, 25_900.0, 26_000.0]  # tokens/s: 200 sequences/s at the median
IMAGE_SAMPLES = [100.0, 101.0, 102.0, 103.0, 104.0]


def token_spec(**changes):
    from perfsuite.contract.spec import BurstSpec

    return BurstSpec(framework="torch", model="gpt2", devices=2, seq_len=SEQ, batch_size=4).replace(**changes)


def image_spec(**changes):
    from perfsuite.contract.spec import BurstSpec

    return BurstSpec(framework="torch", model="cifar10", devices=2, image_size=24, batch_size=64).replace(**changes)


REGRESSION = stats.Verdict(stats.REGRESSION, 0.8, 0.001, 0.05, "slower")
TOKEN_ENTRY = {
    "tokens_per_sec": 32_000.0,
    "samples": [32_000.0] * 5,
    "history": [{"tokens_per_sec": 31_000.0}, {"tokens_per_sec": 31_500.0}],
}
IMAGE_ENTRY = {"images_per_sec": 130.0, "samples": [130.0] * 5, "history": [{"images_per_sec": 128.0}]}


def token_result(verdict=REGRESSION, baseline=TOKEN_ENTRY, **spec):
    s = token_spec(**spec)
    rec = worker_record(s, TOKEN_SAMPLES, per_rank_ips=12_900.0, model_fields=GPT, items_per_window=2560)
    return judged(result(s, rec), verdict=verdict, baseline=baseline)


def image_result(verdict=REGRESSION, baseline=IMAGE_ENTRY):
    s = image_spec()
    rec = worker_record(s, IMAGE_SAMPLES, flops=3.69e7, per_rank_ips=51.0, model_image_size=24)
    return judged(result(s, rec), verdict=verdict, baseline=baseline)


# -- --perf-json ------------------------------------------------------------------------------


def test_a_token_rows_throughput_is_tokens_per_sec_with_sequences_beside_it():
    r = row(token_result())
    assert r["tokens_per_sec"] == 25_800.0 and r["sequences_per_sec"] == pytest.approx(25_800.0 / SEQ)
    assert (r["ci_low"], r["ci_high"]) == (25_600.0, 26_000.0) and r["samples"] == TOKEN_SAMPLES
    assert r["baseline_tokens_per_sec"] == 32_000.0 and r["change"] == pytest.approx(-0.2)
    assert r["baseline_trend"] == [31_000.0, 31_500.0, 32_000.0]  # the entry's saves, in tokens/s
    assert r["seq_len"] == SEQ and [p["tokens_per_sec"] for p in r["per_rank"]] == [12_900.0, 12_900.0]
    for image_name in ("images_per_sec", "baseline_images_per_sec", "image_size"):
        assert image_name not in r
    assert all("images_per_sec" not in p for p in r["per_rank"])
    per_token = 6 * 800_000 + 12 * 2 * 4 * 16 * SEQ
    assert r["achieved_tflops"] == pytest.approx(per_token * 25_800.0 / 1e12)


def test_an_image_rows_fields_are_as_they_were_with_throughput_and_unit_beside_them():
    r = row(image_result())
    assert r["images_per_sec"] == 102.0 and r["baseline_images_per_sec"] == 130.0 and r["image_size"] == 24
    assert r["throughput"] == 102.0 and r["baseline_throughput"] == 130.0 and r["unit"] == "img/s"
    assert r["workload"] == "image"
    assert list(r).index("images_per_sec") == list(r).index("throughput") + 1
    assert r["baseline_trend"] == [128.0, 130.0] and "images_per_sec" in r["per_rank"][0]
    assert not [k for k in r if "token" in k or "sequence" in k or k == "seq_len"]
    assert perf_json.SCHEMA_VERSION == 8


# -- JUnit and pytest-benchmark ----------------------------------------------------------------


def test_junit_names_a_token_models_figures_by_their_unit():
    props = dict(junit_properties(token_result().throughput_case))
    assert props["tokens_per_sec"] == 25_800.0 and props["sequences_per_sec"] == pytest.approx(201.562, abs=1e-3)
    assert props["baseline_tokens_per_sec"] == 32_000.0 and props["ci_low"] == 25_600.0
    assert "images_per_sec" not in props and "baseline_images_per_sec" not in props
    image = dict(junit_properties(image_result().throughput_case))
    assert image["images_per_sec"] == 102.0 and image["baseline_images_per_sec"] == 130.0
    assert not [k for k in image if "token" in k or "sequence" in k]


def test_benchmark_extra_info_names_the_unit_and_the_tokens_a_window_trains():
    r = token_result()
    info = benchmark._extra_info(r, row(r))
    assert info["tokens_per_sec"] == 25_800.0 and info["baseline_tokens_per_sec"] == 32_000.0
    assert info["tokens_per_window"] == 2560 and "images_per_window" not in info
    assert info["unit"] == "tokens/s" and info["throughput"] == info["tokens_per_sec"]
    image = benchmark._extra_info(image_result(), row(image_result()))
    assert image["images_per_sec"] == 102.0 and image["images_per_window"] == 1
    assert (
        image["unit"] == "img/s"
        and image["rounds"] == "seconds per window; the throughput is extra_info.throughput, in extra_info.unit"
    )


# -- the terminal and the report ----------------------------------------------------------------


def test_a_run_of_token_models_heads_its_column_tokens_per_s(tmp_path):
    v = view(tmp_path, token_result())
    assert terminal.throughput_column(v) == "tokens/s"
    lines = terminal.table(terminal.rows(v), terminal.throughput_column(v))
    assert lines[0].split()[1] == "tokens/s" and "25800" in lines[1] and "32000" in lines[1]


def test_a_run_of_both_kinds_says_each_figures_unit(tmp_path):
    v = view(tmp_path, token_result(), image_result())
    assert terminal.throughput_column(v) == "throughput"
    header, *body = terminal.table(terminal.rows(v), "throughput")
    assert "throughput" in header and "img/s" not in header
    token, image = (next(line for line in body if model in line) for model in ("gpt2", "cifar10"))
    assert "25800 tokens/s" in token and "32000 tokens/s" in token
    assert "102 img/s" in image and "130 img/s" in image
    # the report's table likewise, with both kinds' dimensions as columns
    columns, rows = content.table([row(token_result()), row(image_result())])
    assert "throughput" in columns and "img/s" not in columns
    assert "sequence length" in columns and "image" in columns
    cells = {r[1][1]: dict(zip(columns, r[1])) for r in rows}
    assert cells["gpt2"]["throughput"] == "25800 tokens/s" and cells["gpt2"]["baseline"] == "32000 tokens/s"
    assert cells["gpt2"]["sequence length"] == "128" and cells["gpt2"]["image"] == "-"
    assert cells["cifar10"]["throughput"] == "102 img/s" and cells["cifar10"]["sequence length"] == "-"


def test_the_reports_callout_and_column_say_tokens_per_s():
    records = [row(token_result())]
    columns, _ = content.table(records)
    assert "tokens/s" in columns and "img/s" not in columns
    (callout,) = content.callouts(records)
    assert "25800 tokens/s vs baseline 32000 tokens/s (-20.0%" in callout[2]


def test_the_report_folder_of_a_token_run(tmp_path):
    from perfsuite.reporting.folder import write_report

    write_report(tmp_path / "rep", view(tmp_path, token_result(), token_result(baseline=None, verdict=None, devices=1)))
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| tokens/s |" in md and "img/s" not in md
    results = json.loads((tmp_path / "rep" / "results.json").read_text())["results"]
    assert all("tokens_per_sec" in r for r in results)


def test_the_scaling_plot_of_a_token_model_is_labelled_tokens_per_s(monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    from perfsuite.reporting import plots

    labels: list[str] = []
    monkeypatch.setattr(Axes, "set_ylabel", lambda self, text, *a, **k: labels.append(text))
    one = token_result(baseline=None, verdict=None, devices=1)
    plots.render([row(token_result()), row(one)])
    plots.render([row(image_result())])
    assert labels == ["throughput (tokens/s)", "throughput (images/s)"]


def test_a_trends_axis_is_in_its_keys_unit(monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    from perfsuite.reporting.trend import trend_png

    labels: list[str] = []
    monkeypatch.setattr(Axes, "set_ylabel", lambda self, text, *a, **k: labels.append(text))
    for key in (token_spec().key(), image_spec().key()):
        trend = Trend(title=f"{key} on cpu-x", runs=["a", "b"], throughput=[1.0, 2.0])
        trend_png(trend)
    assert labels == ["tokens/s", "images/s"]
    assert Trend("anything", [], [], unit="tokens/s").shown_unit == "tokens/s"


# -- the failing lines -------------------------------------------------------------------------


def test_a_token_models_regression_and_input_efficiency_lines_say_tokens_per_s(tmp_path):
    r = token_result()
    options = resolve(lambda dest: None, {}, "", tmp_path)
    f = Findings(
        "t.py::test_throughput",
        THROUGHPUT,
        r.measurement,
        r.id,
        TOKEN_ENTRY,
        "b.json",
        throughput=Throughput(REGRESSION, 0.05, 0.05, 32_000.0),
        input_efficiency=InputEfficiency(0.9, 0.5, 51_600.0),
    )
    regression, efficiency = policy.decide(f, options).failures
    assert ": 25800 tokens/s vs baseline 32000 tokens/s (-20.0%" in regression
    assert "25800 tokens/s is 0.50 of the device data location's 51600 tokens/s" in efficiency
    assert "img/s" not in regression + efficiency


# -- the history document ------------------------------------------------------------------------


def test_the_history_keeps_a_token_models_throughput_in_its_throughput_column(tmp_path):
    token, image = row(token_result()), row(image_result())
    run = {"date": "2026-11-28T00:00:00+00:00", "host": "h"}
    doc = document.live(run, [token, image], save_baseline=False, outcome="failed")
    kept_token, kept_image = doc["results"]
    assert kept_token["throughput"] == kept_token["tokens_per_sec"] == 25_800.0 and kept_token["unit"] == "tokens/s"
    assert (kept_image["throughput"], kept_image["unit"]) == (102.0, "img/s")
    assert {k: kept_image[k] for k in image} == image  # nothing else of the row changes
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema_version": 6, "run": run, "results": [token, image]}))
    assert document.from_file(path)["results"][0]["throughput"] == 25_800.0
    path.write_text(json.dumps({"schema_version": 6, "run": run, "results": [{**token, "tokens_per_sec": "fast"}]}))
    with pytest.raises(document.HistoryError, match="non-numeric throughput, images_per_sec or tokens_per_sec"):
        document.from_file(path)


# -- triage's tables ---------------------------------------------------------------------------


def incident(keys: list[str]) -> dict:
    return {
        "id": 1,
        "open": True,
        "kind": "unexplained",
        "cause": [],
        "scope": "all nodes",
        "size": {"median": -0.2, "worst": -0.25, "least": -0.15, "keys": len(keys), "models": 1, "nodes": 2},
        "fingerprints": ["cpu-x"],
        "nodes": ["n1", "n2"],
        "also_slower": [],
        "unaffected": [],
        "onset": {"last_good": "2026-11-26", "first_bad": "2026-11-27"},
        "onsets": [],
        "changes": [],
        "commits": None,
        "bisect": None,
        "bisect_command": None,
        "ops": None,
        "ops_command": "pytest --perf-profile",
        "keys": [
            {"key": k, "change": -0.2, "before": 100.0, "after": 80.0, "nodes": 2, "worst_node": "n1"} for k in keys
        ],
    }


def test_triage_says_each_keys_unit():
    tokens = incident([token_spec().key()])
    assert "| tokens/s before |" in triage_text.markdown_incident(tokens)
    assert any(line.endswith("100 -> 80 tokens/s  (2 nodes, worst n1)") for line in triage_text.incident_lines(tokens))
    both = triage_text.markdown_incident(incident([token_spec().key(), image_spec().key()]))
    assert "| before |" in both and "| 100 tokens/s | 80 tokens/s |" in both and "| 100 img/s | 80 img/s |" in both
    assert "| img/s before |" in triage_text.markdown_incident(incident([image_spec().key()]))
