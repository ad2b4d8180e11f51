"""A token model's baseline entry: its throughput as tokens_per_sec, read wherever an entry's figure is
(its history, `baseline show` and `diff`, the gate's attribution); an image model's entry as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from records import result, worker_record

from perfsuite.analysis.findings import _attribution
from perfsuite.commands.main import main
from perfsuite.common.hardware import Fingerprint
from perfsuite.contract.op_profile import OpProfile, OpTime
from perfsuite.contract.spec import BurstSpec
from perfsuite.store import baseline, summary

CPU = Fingerprint("cpu", "Intel(R) Xeon(R) Processor", 2)
TOKEN = BurstSpec(framework="torch", model="gpt2", seq_len=128, batch_size=4)
IMAGE = BurstSpec(framework="torch", model="cifar10", image_size=24, batch_size=64)
GPT = dict(params=1_000_000, embedding_params=200_000, layers=2, heads=4, head_dim=16)


def entry(spec: BurstSpec, samples) -> dict:
    rec = worker_record(spec, samples, model_fields=GPT if spec.workload == "token" else None)
    return baseline.entry_for(result(spec, rec), "2026-11-28T00:00:00+00:00", "abc1234")


def test_a_token_models_entry_stores_tokens_per_sec_and_its_figures_in_tokens():
    e = entry(TOKEN, [1000.0, 1010.0, 1020.0])
    assert e["tokens_per_sec"] == 1010.0 and "images_per_sec" not in e
    assert e["samples"] == [1000.0, 1010.0, 1020.0] and e["run_medians"] == [1010.0]
    image = entry(IMAGE, [100.0, 101.0, 102.0])
    assert image["images_per_sec"] == 101.0 and "tokens_per_sec" not in image
    assert baseline.throughput(e) == 1010.0 and baseline.throughput(image) == 101.0
    assert baseline.throughput({"images_per_sec": True}) is None  # a hand edit that holds no number


def test_a_token_entrys_history_keeps_its_tokens_per_sec(tmp_path):
    path = tmp_path / "b.json"
    for level in (1000.0, 1100.0, 1200.0):
        baseline.save_entries(path, CPU, {TOKEN.key(): entry(TOKEN, [level] * 3)}, {"torch": "2.13.0"})
    saved = baseline.load(path).get(TOKEN.key())
    assert saved["tokens_per_sec"] == 1200.0
    assert [h["tokens_per_sec"] for h in saved["history"]] == [1000.0, 1100.0]
    assert all("images_per_sec" not in h for h in saved["history"])


def write(path: Path, entries: dict) -> Path:
    baseline.save_entries(path, CPU, entries, {"torch": "2.13.0"})
    return path


def run(capsys, *argv) -> str:
    assert main(["baseline", *map(str, argv)]) == 0
    return capsys.readouterr().out


def test_show_reads_either_figure_and_names_it_by_the_keys_unit(tmp_path, capsys):
    path = write(tmp_path / "b.json", {TOKEN.key(): entry(TOKEN, [1000.0] * 3)})
    write(path, {TOKEN.key(): entry(TOKEN, [1200.0] * 3)})
    info = summary.summarize(baseline.load(path))
    (row,) = info["entries"]
    assert row["unit"] == "tokens/s" and row["tokens_per_sec"] == 1200.0 and "images_per_sec" not in row
    assert row["history_tokens_per_sec"] == [1000.0] and row["change_since_oldest"] == pytest.approx(0.2)
    out = run(capsys, "show", path)
    header = next(line for line in out.splitlines() if line.startswith("key"))
    assert header.split()[1] == "tokens/s"
    assert "1000 > 1200 (+20.0% since oldest)" in out
    assert json.loads(run(capsys, "show", path, "--json"))["entries"][0]["tokens_per_sec"] == 1200.0


def test_show_and_diff_of_both_kinds_say_each_figures_unit(tmp_path, capsys):
    both = {TOKEN.key(): entry(TOKEN, [1000.0] * 3), IMAGE.key(): entry(IMAGE, [100.0] * 3)}
    old = write(tmp_path / "old.json", both)
    out = run(capsys, "show", old)
    assert next(line for line in out.splitlines() if line.startswith("key")).split()[1] == "throughput"
    assert "1000 tokens/s" in out and "100 img/s" in out
    new = write(tmp_path / "new.json", {TOKEN.key(): entry(TOKEN, [800.0] * 3), IMAGE.key(): entry(IMAGE, [100.0] * 3)})
    d = summary.compare(baseline.load(old), baseline.load(new), 0.05)
    token = next(e for e in d["both"] if e["key"] == TOKEN.key())
    assert token["old_tokens_per_sec"] == 1000.0 and token["new_tokens_per_sec"] == 800.0
    assert token["change"] == pytest.approx(-0.2) and token["beyond_threshold"] == ["slower"]
    image = next(e for e in d["both"] if e["key"] == IMAGE.key())
    assert image["unit"] == "img/s" and image["old_images_per_sec"] == 100.0
    out = run(capsys, "diff", old, new)
    assert "old throughput" in out and "1000 tokens/s" in out and "800 tokens/s" in out and "100 img/s" in out


def test_diff_of_token_entries_heads_its_columns_tokens_per_s(tmp_path, capsys):
    old = write(tmp_path / "old.json", {TOKEN.key(): entry(TOKEN, [1000.0] * 3)})
    new = write(tmp_path / "new.json", {TOKEN.key(): entry(TOKEN, [1100.0] * 3)})
    out = run(capsys, "diff", old, new)
    assert "old tokens/s" in out and "new tokens/s" in out and "+10.0%" in out


def test_the_gates_attribution_reads_a_token_entrys_step_time():
    """The step a token model's entry held, from its tokens/s: batch x world x sequence length tokens."""
    profile = OpProfile("torch.profiler", (900.0, 900.0), (OpTime("aten::mm", "op", (800.0, 800.0), 1.0),)).as_dict()
    now = worker_record(TOKEN, [256.0] * 5, model_fields=GPT, op_profile=profile)
    found, note = _attribution(result(TOKEN, now).measurement, {"tokens_per_sec": 512.0, "op_profile": profile})
    assert note is None and found is not None
    assert (found.base_step_ms, found.now_step_ms) == pytest.approx((1000.0, 2000.0))  # 4 x 128 tokens a step
