"""``python -m perfsuite baseline show|diff|prune`` on files written by the store itself."""

from __future__ import annotations

import fnmatch
import json
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfsuite.commands.main import main
from perfsuite.common.hardware import Fingerprint
from perfsuite.store import baseline, summary
from perfsuite.store.baseline import BaselineError

ROOT = Path(__file__).resolve().parents[1]
CPU = Fingerprint("cpu", "Intel(R) Xeon(R) Processor", 2)
GPU = Fingerprint("gpu", "Intel(R) Xeon(R) Processor", 16, "NVIDIA H100 80GB HBM3", 8, "580.1", "13.0")
VERSIONS = {"torch": "2.13.0"}
ONE = "torch/cifar10/cpu1/nodes1/device/bs64/img24/fp32/threads1"
TWO = "torch/cifar10/cpu2/nodes1/device/bs64/img24/fp32/replicated/threads1"
TF = "tf/cifar10/cpu1/nodes1/device/bs64/img24/fp32/threads1"


def _days_ago(days: float) -> str:
    return (datetime.now(UTC) - timedelta(days=days)).replace(microsecond=0).isoformat()


def _entry(ips: float, eff: float | None = None, days: float = 0, **extra) -> dict:
    return {
        "images_per_sec": ips,
        "ci_low": ips * 0.9,
        "ci_high": ips * 1.1,
        "samples": [ips] * 5,
        "run_medians": [ips * 0.95, ips, ips * 1.05],
        "scaling_efficiency": eff,
        "date": _days_ago(days),
        "git_commit": "abc1234",
        **extra,
    }


def _write(path: Path, entries: dict, fp: Fingerprint = CPU) -> Path:
    baseline.save_entries(path, fp, entries, VERSIONS)
    return path


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["baseline", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


# --- show ------------------------------------------------------------------------


def test_show_lists_fingerprint_entries_tolerance_and_trend(tmp_path, capsys):
    path = tmp_path / "b.json"
    _write(path, {ONE: _entry(100.0), TWO: _entry(190.0, eff=0.95, tolerance=0.2)})
    _write(path, {ONE: _entry(110.0)})
    _write(path, {ONE: _entry(121.0)})  # two history points: 100, 110
    rc, out, err = _run(capsys, "show", path)
    assert rc == 0 and err == ""
    assert "2 x Intel(R) Xeon(R) Processor" in out and "cpu-intel-xeon-processor-2c" in out
    assert "torch 2.13.0" in out
    row_one = next(line for line in out.splitlines() if line.startswith(ONE))
    assert "121" in row_one and "108.9-133.1" in row_one and "10.0%" in row_one  # img/s, CI, run spread
    assert "100 > 110 > 121 (+21.0% since oldest)" in row_one
    row_two = next(line for line in out.splitlines() if line.startswith(TWO))
    assert "95.0%" in row_two and "20.0%" in row_two  # scaling efficiency, per-entry tolerance


def test_show_json(tmp_path, capsys):
    path = _write(tmp_path / "b.json", {ONE: _entry(100.0)})
    _write(path, {ONE: _entry(80.0)})
    rc, out, _ = _run(capsys, "show", path, "--json")
    info = json.loads(out)
    assert rc == 0 and info["fingerprint_id"] == CPU.id and info["schema"] == 1
    (row,) = info["entries"]
    assert row["key"] == ONE and row["images_per_sec"] == 80.0
    assert row["history_points"] == 1 and row["history_images_per_sec"] == [100.0]
    assert row["change_since_oldest"] == pytest.approx(-0.2)


def test_show_copes_with_hand_edited_fields(tmp_path, capsys):
    path = tmp_path / "b.json"
    doc = {
        "schema": 1,
        "fingerprint": {"kind": "tpu"},
        "frameworks": {},
        "entries": {
            "x": {"images_per_sec": "fast", "tolerance": "loose", "history": [1, {"images_per_sec": None}]},
            "y": {},
        },
    }
    path.write_text(json.dumps(doc))
    rc, out, err = _run(capsys, "show", path)
    assert rc == 0 and err == ""
    assert "unrecognised fingerprint" in out and "invalid" in out


def test_show_the_repository_baseline(capsys):
    path = ROOT / "baselines" / "cpu-intel-xeon-processor-2c.json"
    if not path.exists():
        pytest.skip("no stored CPU baseline in this checkout")
    rc, out, _ = _run(capsys, "show", path, "--json")
    info = json.loads(out)
    assert rc == 0 and info["entries"]
    assert all(e["images_per_sec"] > 0 for e in info["entries"])


# --- diff ------------------------------------------------------------------------


def test_diff_changes_threshold_and_one_sided_entries(tmp_path, capsys):
    old = _write(tmp_path / "old.json", {ONE: _entry(100.0), TWO: _entry(190.0, eff=0.95), TF: _entry(50.0)})
    new = _write(
        tmp_path / "new.json", {ONE: _entry(97.0), TWO: _entry(150.0, eff=0.75), "torch/resnet50/x": _entry(2.0)}
    )
    rc, out, err = _run(capsys, "diff", old, new)
    assert rc == 0 and err == ""
    row_one = next(line for line in out.splitlines() if line.startswith(ONE))
    assert "-3.0%" in row_one and row_one.endswith("-")  # within the default 5%
    row_two = next(line for line in out.splitlines() if line.startswith(TWO))
    assert "-21.1%" in row_two and "-20.0 pp" in row_two and "slower, scaling down" in row_two
    assert f"only in {old}:\n  {TF}" in out and f"only in {new}:\n  torch/resnet50/x" in out
    assert "2 in both (1 beyond" in out and "note:" not in out

    rc, out, _ = _run(capsys, "diff", old, new, "--threshold", "0.01")
    assert next(line for line in out.splitlines() if line.startswith(ONE)).endswith("slower")


def test_diff_json_and_different_hardware(tmp_path, capsys):
    old = _write(tmp_path / "cpu.json", {ONE: _entry(100.0)})
    new = _write(tmp_path / "gpu.json", {ONE: _entry(300.0)}, fp=GPU)
    rc, out, _ = _run(capsys, "diff", old, new)
    assert rc == 0 and "note: the fingerprints name different hardware" in out
    rc, out, _ = _run(capsys, "diff", old, new, "--json")
    d = json.loads(out)
    assert d["same_hardware"] is False and d["both"][0]["change"] == pytest.approx(2.0)
    assert d["both"][0]["beyond_threshold"] == ["faster"]


def test_diff_notes_a_new_driver_on_the_same_hardware(tmp_path, capsys):
    newer = Fingerprint("gpu", GPU.cpu_model, GPU.cpu_cores, GPU.gpu_model, GPU.gpu_count, "590.0", "13.1")
    old = _write(tmp_path / "a.json", {ONE: _entry(100.0)}, fp=GPU)
    new = _write(tmp_path / "b.json", {ONE: _entry(100.0)}, fp=newer)
    _, out, _ = _run(capsys, "diff", old, new)
    assert "note: same hardware, but the fingerprints differ" in out


key_sets = st.sets(st.sampled_from([ONE, TWO, TF, "a", "b/c", "d*e"]), max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=key_sets, b=key_sets)
def test_diff_counts_are_symmetric(tmp_path, a, b):
    fa = baseline.BaselineFile(tmp_path / "a.json", CPU.as_dict(), {}, {k: _entry(10.0) for k in a})
    fb = baseline.BaselineFile(tmp_path / "b.json", CPU.as_dict(), {}, {k: _entry(20.0) for k in b})
    ab, ba = summary.compare(fa, fb, 0.05), summary.compare(fb, fa, 0.05)
    assert ab["only_old"] == ba["only_new"] and ab["only_new"] == ba["only_old"]
    assert [e["key"] for e in ab["both"]] == [e["key"] for e in ba["both"]]
    assert len(ab["both"]) + len(ab["only_old"]) == len(a)
    assert len(ab["both"]) + len(ab["only_new"]) == len(b)


# --- prune -----------------------------------------------------------------------


def test_prune_by_age_keeps_the_rest_untouched(tmp_path, capsys):
    path = _write(tmp_path / "b.json", {ONE: _entry(100.0, days=40), TWO: _entry(190.0, days=1), TF: _entry(5.0)})
    _write(path, {TF: _entry(6.0, days=50)})  # an entry with history, now old
    before = baseline.load(path)
    rc, out, err = _run(capsys, "prune", path, "--older-than", "30")
    assert rc == 0 and err == ""
    assert f"removed 2 of 3 entries from {path}" in out and ONE in out and TF in out
    after = baseline.load(path)
    assert after.entries == {TWO: before.entries[TWO]}
    assert after.fingerprint == before.fingerprint and after.frameworks == before.frameworks


def test_prune_dry_run_changes_nothing(tmp_path, capsys):
    path = _write(tmp_path / "b.json", {ONE: _entry(100.0), TWO: _entry(190.0), TF: _entry(5.0)})
    raw = path.read_bytes()
    rc, out, _ = _run(capsys, "prune", path, "--key", "torch/*", "--dry-run")
    assert rc == 0 and f"would remove 2 of 3 entries from {path}" in out
    assert ONE in out and TWO in out and TF not in out
    assert path.read_bytes() == raw


def test_prune_criteria_combine(tmp_path, capsys):
    path = _write(tmp_path / "b.json", {ONE: _entry(100.0, days=40), TWO: _entry(190.0), TF: _entry(5.0, days=40)})
    rc, out, _ = _run(capsys, "prune", path, "--key", "torch/*", "--older-than", "30")
    assert rc == 0 and sorted(baseline.load(path).entries) == sorted([TWO, TF])


def test_prune_says_when_nothing_matches(tmp_path, capsys):
    path = _write(tmp_path / "b.json", {ONE: _entry(100.0)})
    rc, out, _ = _run(capsys, "prune", path, "--key", "tf/*", "--key", "*cpu1*")
    assert rc == 0 and "note: --key 'tf/*' matches no entry" in out and "removed 1 of 1" in out
    rc, out, _ = _run(capsys, "prune", tmp_path / "b.json", "--older-than", "1")
    assert rc == 0 and "nothing to prune" in out


def test_prune_older_than_any_date_keeps_everything(tmp_path, capsys):
    path = _write(tmp_path / "b.json", {ONE: _entry(100.0, days=3000)})
    rc, out, err = _run(capsys, "prune", path, "--older-than", "1e12")
    assert rc == 0 and err == "" and "nothing to prune" in out


def test_prune_keeps_entries_without_a_date(tmp_path, capsys):
    path = _write(tmp_path / "b.json", {ONE: _entry(100.0, date="yesterday"), TWO: _entry(1.0, days=9)})
    rc, out, _ = _run(capsys, "prune", path, "--older-than", "7")
    assert rc == 0 and f"note: {ONE} has no readable date" in out
    assert list(baseline.load(path).entries) == [ONE]


def test_prune_waits_for_the_plugins_lock(tmp_path, capsys, monkeypatch):
    import filelock

    path = _write(tmp_path / "b.json", {ONE: _entry(100.0)})
    raw = path.read_bytes()
    monkeypatch.setattr(baseline, "LOCK_TIMEOUT_S", 0.05)
    holder = filelock.FileLock(baseline.lock_file(path), thread_local=False)
    holder.acquire()
    try:
        result = []
        worker = threading.Thread(target=lambda: result.append(main(["baseline", "prune", str(path), "--key", "*"])))
        worker.start()
        worker.join()
    finally:
        holder.release()
    _, err = capsys.readouterr()
    assert result == [1] and err.startswith("error:") and "timed out" in err
    assert path.read_bytes() == raw


def test_remove_entries_on_a_missing_file_leaves_no_lock(tmp_path):
    with pytest.raises(BaselineError, match="no such file"):
        baseline.remove_entries(tmp_path / "none.json", lambda k, e: True)
    assert list(tmp_path.iterdir()) == []


patterns = st.lists(st.sampled_from(["torch/*", "tf/*", "*cpu2*", "a", "b/?", "[ab]*", "nothing"]), max_size=3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    keys=st.sets(st.sampled_from([ONE, TWO, TF, "a", "b/c", "ab"]), min_size=1),
    pats=patterns,
    ages=st.lists(st.integers(0, 100), min_size=6, max_size=6),
    older=st.none() | st.integers(0, 100),
)
def test_prune_drops_exactly_the_matched_entries(tmp_path, keys, pats, ages, older):
    path = tmp_path / "b.json"
    path.unlink(missing_ok=True)
    entries = {k: _entry(1.0 + i, days=age + 0.5) for i, (k, age) in enumerate(zip(sorted(keys), ages))}
    _write(path, entries)
    before = baseline.load(path).entries
    select = summary.prune_selector(pats, older, datetime.now(UTC))
    removed, left = baseline.remove_entries(path, select)

    def matched(k):
        by_key = not pats or any(fnmatch.fnmatchcase(k, p) for p in pats)
        by_age = older is None or ages[sorted(keys).index(k)] + 0.5 > older
        return by_key and by_age

    assert set(removed) == {k for k in keys if matched(k)}
    assert baseline.load(path).entries == {k: v for k, v in before.items() if not matched(k)} == left.entries


# --- errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, rc, words",
    [
        (["show", "{d}/missing.json"], 1, "no such file"),
        (["show", "{d}/bad.json"], 1, "not valid JSON"),
        (["show", "{d}/schema2.json"], 1, "schema 2 is not supported"),
        (["diff", "{d}/schema2.json", "{d}/bad.json"], 1, "schema 2"),
        (["prune", "{d}/bad.json", "--key", "*"], 1, "not valid JSON"),
        (["prune", "{d}/missing.json", "--older-than", "3", "--dry-run"], 1, "no such file"),
        (["prune", "{d}/ok.json"], 2, "needs --older-than"),
        (["prune", "{d}/ok.json", "--older-than", "-1"], 2, "--older-than"),
        (["prune", "{d}/ok.json", "--older-than", "inf"], 2, "finite"),
        (["diff", "{d}/ok.json", "{d}/ok.json", "--threshold", "abc"], 2, "--threshold"),
        (["diff", "{d}/ok.json"], 2, "required"),
        (["show", "--frob"], 2, "unrecognized arguments"),
        (["frob"], 2, "invalid choice"),
        ([], 2, "required"),
    ],
)
def test_errors_are_one_line_with_an_exit_code(tmp_path, capsys, argv, rc, words):
    _write(tmp_path / "ok.json", {ONE: _entry(1.0)})
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "schema2.json").write_text('{"schema": 2}')
    raw = (tmp_path / "bad.json").read_bytes()
    argv = [a.format(d=tmp_path) for a in argv]
    try:
        code = main(["baseline", *argv])
    except SystemExit as exc:  # argparse stops there for usage mistakes
        code = exc.code
    out, err = capsys.readouterr()
    assert code == rc
    assert err.startswith("error:") and err.count("\n") == 1 and words in err
    assert (tmp_path / "bad.json").read_bytes() == raw  # an unusable file is never rewritten


def test_without_a_file_show_and_prune_take_this_machines_in_the_projects_baseline_dir(tmp_path, monkeypatch, capsys):
    from perfsuite.common import hardware

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(hardware, "gpu_fingerprint", lambda: None)
    assert main(["baseline", "show"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no baseline file of this machine in baselines: no cpu-") and "name the FILE" in err
    (tmp_path / "pyproject.toml").write_text('[tool.perfsuite]\nbaseline_dir = "stored"\n')
    here = hardware.cpu_fingerprint()
    mine = _write(baseline.baseline_path(tmp_path / "stored", here), {ONE: _entry(100.0)}, here)
    assert main(["baseline", "show", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["file"] == str(mine)
    assert main(["baseline", "prune", "--key", "*", "--dry-run"]) == 0
    assert f"would remove 1 of 1 entries from {mine}" in capsys.readouterr().out
    # A table pytest would refuse is refused here too.
    (tmp_path / "pyproject.toml").write_text("[tool.perfsuite]\nbaseline_dirs = 1\n")
    assert main(["baseline", "show"]) == 1
    assert "unknown key 'baseline_dirs' in [tool.perfsuite]" in capsys.readouterr().err


def test_module_entry_point_exit_codes(tmp_path):
    path = _write(tmp_path / "b.json", {ONE: _entry(100.0)})
    ok = subprocess.run(
        [sys.executable, "-m", "perfsuite", "baseline", "show", str(path)], capture_output=True, text=True
    )
    assert ok.returncode == 0 and ONE in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "perfsuite", "baseline", "show", str(tmp_path / "no.json")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr
