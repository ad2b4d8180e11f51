"""``python -m perfsuite history runs|trend|changes|import`` on real SQLite histories."""

from __future__ import annotations

import json
import random
import re
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy")
pytest.importorskip("otava")

from perfsuite.commands.main import main  # noqa: E402
from perfsuite.history import db, spool  # noqa: E402
from perfsuite.reporting.perf_json import document  # noqa: E402
from perfsuite.store.run import RunInfo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STEP = "torch/resnet18/cpu1/nodes1/device/bs32/img64/fp32/threads1"  # -8% at run 31
JUMP = "torch/cifar10/cpu1/nodes1/device/bs64/img24/fp32/threads1"  # +15% at run 36
SHARED = "tf/cifar10/cpu1/nodes1/device/bs64/img24/fp32/threads1"  # on both machines
NIGHTS = 50
STEP_AT, JUMP_AT = 30, 35  # indices: runs 31 and 36
START = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)


def _row(key: str, ips: float, verdict: str = "pass") -> dict:
    return {
        "key": key,
        "framework": key.split("/")[0],
        "model": key.split("/")[1],
        "device_kind": "cpu",
        "devices": 1,
        "nodes": 1,
        "images_per_sec": ips,
        "ci_low": ips * 0.99,
        "ci_high": ips * 1.01,
        "runs": 1,
        "verdict": verdict,
    }


def _doc(
    uuid: str,
    date: datetime,
    rows: list[dict],
    *,
    host: str = "node1",
    fp: str = "cpu-aaa",
    commit: str = "c0",
    torch: str = "2.12.0",
    container: str = "ngc 25.01",
    pool: str = "a",
) -> dict:
    run = {
        "date": date.isoformat(),
        "host": host,
        "python": "3.12.0",
        "git_commit": commit,
        "fingerprints": {"cpu": {"id": fp}},
        "frameworks": {"torch": torch, "tf": "2.20.0"},
        "container": container,
        "labels": {"pool": pool},
    }
    return {"uuid": uuid, "mode": "gate", "outcome": "passed", "source": "run", "run": run, "results": rows}


def _fill(path: Path) -> str:
    """50 nights on node1 (STEP drops 8% at run 31, where torch, the container and a label
    change; JUMP rises 15% at run 36, where nothing does), then 3 older runs on node2."""
    url = f"sqlite:///{path}"
    rnd = random.Random(7)
    engine = db.open_history(url)
    try:
        for i in range(NIGHTS):
            after = i >= STEP_AT
            rows = [
                _row(STEP, (92.0 if after else 100.0) * (1 + rnd.gauss(0, 0.01))),
                _row(
                    JUMP,
                    (230.0 if i >= JUMP_AT else 200.0) * (1 + rnd.gauss(0, 0.01)),
                    "regression" if i == NIGHTS - 1 else "pass",
                ),
            ]
            if i < 5:
                rows.append(_row(SHARED, 50.0))
            # the commit moves every 10 nights, so run 36 has the same metadata as run 35
            db.write_run(
                engine,
                _doc(
                    f"n{i}",
                    START + timedelta(days=i),
                    rows,
                    commit=f"{i // 10:x}" * 12,
                    torch="2.13.0" if after else "2.12.0",
                    container="ngc 25.02" if after else "ngc 25.01",
                    pool="b" if after else "a",
                ),
            )
        for j in range(3):
            db.write_run(
                engine,
                _doc(
                    f"m{j}", START + timedelta(days=10 + j, hours=6), [_row(SHARED, 80.0)], host="node2", fp="cpu-bbb"
                ),
            )
    finally:
        engine.dispose()
    return url


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("history") / "h.db"
    _fill(path)
    return path


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(["history", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def _count_runs(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT count(*) FROM runs").fetchone()[0]


# --- runs ----------------------------------------------------------------------------


def test_runs_newest_first_with_limit(history, capsys):
    rc, out, err = _run(capsys, "runs", "--history", history, "--limit", "3")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("run"))
    rows = lines[header + 1 :]
    assert [r.split()[0] for r in rows] == ["50", "49", "48"]
    assert "(--limit 3; 0 for all)" in lines[0]
    newest = rows[0]
    assert "2026-02-19 02:00" in newest and "4444444444" in newest and "node1" in newest
    assert "2 (1 failing)" in newest and "tf 2.20.0, torch 2.13.0" in newest and "ngc 25.02" in newest
    assert "pool=b" in newest


def test_runs_orders_by_date_not_id_and_limit_0_is_all(history, capsys):
    rc, out, _ = _run(capsys, "runs", "--history", history, "--limit", "0", "--json")
    info = json.loads(out)
    ids = [r["id"] for r in info["runs"]]
    assert rc == 0 and len(ids) == NIGHTS + 3
    # node2's runs were written last but ran on days 11-13: after run 11, before run 12 and so on
    assert ids.index(51) == ids.index(11) - 1 and ids.index(53) == ids.index(13) - 1
    newest = info["runs"][0]
    assert newest["host"] == "node1" and newest["frameworks"]["torch"] == "2.13.0"
    assert newest["bursts"] == 2 and newest["failing"] == 1 and info["spooled"] == 0


# --- trend -----------------------------------------------------------------------------


def test_trend_marks_the_step_at_the_run_it_happened(history, capsys):
    rc, out, err = _run(capsys, "trend", STEP, "--history", history)
    assert rc == 0 and err == ""
    marked = [line for line in out.splitlines() if "<- change" in line]
    assert len(marked) == 1
    assert marked[0].split()[0] == str(STEP_AT + 1)
    found = re.search(r"<- change (-\d+\.\d)% \((\S+) -> (\S+)\), p=(\S+)$", marked[0])
    assert found, marked[0]
    assert -9 < float(found[1]) < -7 and float(found[4]) < 1e-4
    assert float(found[2]) == pytest.approx(100, rel=0.01) and float(found[3]) == pytest.approx(92, rel=0.01)
    assert f"{STEP} on fingerprint cpu-aaa: {NIGHTS} runs" in out
    assert "1 change point, marked on the first run after it" in out


def test_trend_json_carries_the_same_facts(history, capsys):
    rc, out, _ = _run(capsys, "trend", STEP, "--history", history, "--json")
    info = json.loads(out)
    assert rc == 0 and info["key"] == STEP and info["fingerprint"] == "cpu-aaa" and info["plot"] is None
    assert len(info["runs"]) == NIGHTS and [r["run_id"] for r in info["runs"]] == list(range(1, NIGHTS + 1))
    assert info["runs"][0]["ci_low"] < info["runs"][0]["images_per_sec"] < info["runs"][0]["ci_high"]
    (cp,) = info["change_points"]
    assert cp["index"] == STEP_AT and cp["run_id"] == STEP_AT + 1 and cp["git_commit"] == "3" * 12
    assert cp["change"] == pytest.approx(-0.08, abs=0.01) and cp["p_value"] < 1e-4
    assert cp["before"] == pytest.approx(100, rel=0.01) and cp["after"] == pytest.approx(92, rel=0.01)
    assert [r["change_point"] for r in info["runs"]].index(True) == STEP_AT


def test_trend_plot_writes_a_png(history, tmp_path, capsys):
    png = tmp_path / "plots" / "step.png"
    rc, out, _ = _run(capsys, "trend", STEP, "--history", history, "--plot", png)
    assert rc == 0 and f"plot: {png}" in out
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_trend_plot_into_a_folder_that_cannot_be_made(history, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    rc, out, err = _run(capsys, "trend", STEP, "--history", history, "--plot", tmp_path / "file" / "x.png")
    assert rc == 1 and out == ""
    assert err.startswith("error: --plot ") and err.count("\n") == 1


def test_trend_of_a_key_on_two_fingerprints_needs_one(history, capsys):
    rc, out, err = _run(capsys, "trend", SHARED, "--history", history)
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "--fingerprint" in err and "cpu-aaa (5 runs)" in err and "cpu-bbb (3 runs)" in err
    rc, out, _ = _run(capsys, "trend", SHARED, "--history", history, "--fingerprint", "cpu-bbb", "--json")
    info = json.loads(out)
    assert rc == 0 and [r["run_id"] for r in info["runs"]] == [51, 52, 53] and info["change_points"] == []
    rc, _, err = _run(capsys, "trend", SHARED, "--history", history, "--fingerprint", "cpu-zzz")
    assert rc == 1 and "cpu-aaa, cpu-bbb" in err


def test_trend_of_an_unknown_key_names_the_nearest(history, capsys):
    rc, out, err = _run(capsys, "trend", STEP.replace("bs32", "bs23"), "--history", history)
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("error: no key ") and f"nearest: {STEP}" in err


# --- changes ---------------------------------------------------------------------------


def test_changes_newest_first_with_what_changed(history, capsys):
    rc, out, err = _run(capsys, "changes", "--history", history)
    assert rc == 0 and err == ""
    assert out.startswith("2 change points in 4 series")
    assert "2 series with fewer than 8 runs" in out  # SHARED on node1 and on node2
    blocks = out.split("\n\n")[1:]
    assert len(blocks) == 2
    jump, step = blocks
    assert JUMP in jump.splitlines()[0] and re.match(r"\+1[45]\.\d%  ", jump)
    assert f"at run {JUMP_AT + 1} (2026-02-05 02:00, commit 3333333333)" in jump
    assert "no metadata changed" in jump
    assert STEP in step.splitlines()[0] and re.match(r"-[78]\.\d%  ", step)
    assert f"at run {STEP_AT + 1} (2026-01-31 02:00" in step
    changed = step.splitlines()[2]
    assert changed.startswith(f"  changed since run {STEP_AT}: ")
    assert "commit 2222222222 -> 3333333333" in changed and "torch 2.12.0 -> 2.13.0" in changed
    assert "container ngc 25.01 -> ngc 25.02" in changed and "label pool: a -> b" in changed
    assert "tf " not in changed and "host" not in changed


def test_changes_between_two_commits_print_the_bisect_that_pins_them_down(history, capsys):
    rc, out, _ = _run(capsys, "changes", "--history", history)
    jump, step = out.split("\n\n")[1:]
    assert step.splitlines()[3] == (
        f"  to find the commit: python -m perfsuite bisect {'2' * 12} {'3' * 12} {STEP} --min-change 0.03"
    )
    assert "to find the commit" not in jump  # the same commit on either side: nothing to bisect
    rc, out, _ = _run(capsys, "changes", "--history", history, "--json")
    jump, step = json.loads(out)["changes"]
    assert jump["bisect"] is None and step["bisect"].startswith(f"python -m perfsuite bisect {'2' * 12} ")


def test_changes_json_patterns_and_limit(history, capsys):
    rc, out, _ = _run(capsys, "changes", "--history", history, "--json")
    info = json.loads(out)
    assert rc == 0 and info["total"] == 2 and [c["key"] for c in info["changes"]] == [JUMP, STEP]
    jump, step = info["changes"]
    assert jump["run_id"] == JUMP_AT + 1 and jump["previous_run_id"] == JUMP_AT and jump["metadata_changes"] == []
    assert jump["change"] == pytest.approx(0.15, abs=0.015) and jump["fingerprint"] == "cpu-aaa"
    assert {c["field"]: (c["before"], c["after"]) for c in step["metadata_changes"]} == {
        "git_commit": ("2" * 12, "3" * 12),
        "frameworks.torch": ("2.12.0", "2.13.0"),
        "container": ("ngc 25.01", "ngc 25.02"),
        "labels.pool": ("a", "b"),
    }

    rc, out, _ = _run(capsys, "changes", "--history", history, "--key", "*resnet*", "--json")
    assert [c["key"] for c in json.loads(out)["changes"]] == [STEP]
    rc, out, _ = _run(capsys, "changes", "--history", history, "--limit", "1")
    assert "(showing 1; --limit 0 for all)" in out and STEP not in out
    rc, out, _ = _run(capsys, "changes", "--history", history, "--key", "nothing*", "--fingerprint", "cpu-bbb")
    assert rc == 0 and "note: --key 'nothing*' matches no key" in out and "no change points in 0 series" in out


# --- import ----------------------------------------------------------------------------


def _results_file(path: Path, date: str = "2026-03-01T02:00:00+01:00", commit: str = "feedbeef" * 5) -> Path:
    info = RunInfo(
        date=date,
        host="gpu7",
        python="3.12.1",
        git_commit=commit,
        fingerprints={"cpu": {"id": "cpu-ccc"}},
        frameworks={"torch": "2.13.0"},
        container="ngc 25.03",
        labels={"pool": "c"},
    )
    path.write_text(json.dumps(document(info, [_row(STEP, 91.0), _row(JUMP, 229.0)])))
    return path


def test_import_writes_the_files_run_once(tmp_path, capsys):
    hist = tmp_path / "h.db"
    results = _results_file(tmp_path / "results.json")
    rc, out, err = _run(capsys, "import", results, "--history", hist)
    assert rc == 0 and err == ""
    assert f"imported {results} as run 1 (2 bursts)" in out
    rc, out, _ = _run(capsys, "runs", "--history", hist, "--json")
    (run,) = json.loads(out)["runs"]
    assert run["date"] == "2026-03-01T02:00:00+01:00" and run["git_commit"] == "feedbeef" * 5
    assert run["host"] == "gpu7" and run["container"] == "ngc 25.03" and run["cpu_fingerprint"] == "cpu-ccc"
    assert run["source"] == str(results) and run["bursts"] == 2

    rc, out, _ = _run(capsys, "import", results, "--history", hist, "--json")
    assert rc == 0 and json.loads(out)["files"] == [
        {"file": str(results), "run_id": None, "bursts": 2, "already_there": True}
    ]
    rc, out, _ = _run(capsys, "import", results, "--history", hist)
    assert out == f"{results}: already in the history\n" and _count_runs(hist) == 1


def test_import_writes_spooled_runs_first(tmp_path, capsys):
    hist = tmp_path / "h.db"
    spool.spool(f"sqlite:///{hist}", _doc("spooled", START, [_row(STEP, 100.0)]))
    rc, out, _ = _run(capsys, "import", _results_file(tmp_path / "r.json"), "--history", hist)
    assert rc == 0 and out.startswith("wrote 1 spooled run to ") and "as run 2 (2 bursts)" in out
    assert spool.pending(f"sqlite:///{hist}") == [] and _count_runs(hist) == 2


@pytest.mark.parametrize(
    "content, says",
    [
        (json.dumps({"results": [{"key": STEP, "images_per_sec": 1.0}]}), "schema version 1 carries no run metadata"),
        ("not json {", "not JSON"),
    ],
)
def test_import_checks_every_file_before_writing_any(tmp_path, capsys, content, says):
    hist = tmp_path / "h.db"
    good = _results_file(tmp_path / "good.json")
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    rc, out, err = _run(capsys, "import", good, bad, "--history", hist)
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: {bad}: ") and says in err
    assert not hist.exists()


def test_import_refuses_a_date_that_is_not_iso(tmp_path, capsys):
    hist = tmp_path / "h.db"
    rc, _, err = _run(capsys, "import", _results_file(tmp_path / "r.json", date="last night"), "--history", hist)
    assert rc == 1 and "is not an ISO date" in err and not hist.exists()


# --- where the history is, and when it cannot be used --------------------------------------


def test_history_from_pyproject_relative_to_it(tmp_path, monkeypatch, capsys):
    (tmp_path / "data").mkdir()
    _run(capsys, "import", _results_file(tmp_path / "r.json"), "--history", tmp_path / "data" / "h.db")
    (tmp_path / "pyproject.toml").write_text('[tool.perfsuite]\nperf_history = "data/h.db"\n')
    monkeypatch.chdir(tmp_path)
    rc, out, _ = _run(capsys, "runs", "--json")
    assert rc == 0 and [r["host"] for r in json.loads(out)["runs"]] == ["gpu7"]


def test_no_history_given_anywhere(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc, out, err = _run(capsys, "changes")
    assert rc == 2 and out == ""
    assert err == "error: needs --history URL (or perf_history in [tool.perfsuite] of pyproject.toml)\n"
    (tmp_path / "pyproject.toml").write_text("[tool.perfsuite]\ncpu_workers = 2\n")
    assert _run(capsys, "runs")[0] == 2


def test_reading_a_missing_file_does_not_create_it(tmp_path, capsys):
    rc, _, err = _run(capsys, "runs", "--history", tmp_path / "typo.db")
    assert rc == 1 and err == f"error: no history at {tmp_path / 'typo.db'}\n"
    assert not (tmp_path / "typo.db").exists()


def test_a_history_at_a_newer_schema_is_refused(tmp_path, capsys):
    hist = tmp_path / "h.db"
    _run(capsys, "import", _results_file(tmp_path / "r.json"), "--history", hist)
    with sqlite3.connect(hist) as conn:
        conn.execute("UPDATE perfsuite_schema SET version = 99")
    rc, out, err = _run(capsys, "trend", STEP, "--history", hist)
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert "schema version 99, newer than" in err


def test_bad_arguments_exit_2(tmp_path, capsys):
    rc, _, err = _run(capsys, "runs", "--history", "mysql://x/y")
    assert rc == 2 and err.startswith("error: --history: unsupported URL scheme 'mysql'")
    with pytest.raises(SystemExit) as stop:
        main(["history", "runs", "--history", str(tmp_path / "h.db"), "--limit", "-1"])
    assert stop.value.code == 2


def _cli(*argv, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "perfsuite", "history", *map(str, argv)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_unknown_key_exit_1_one_line_without_traceback(history, tmp_path):
    unknown = _cli("trend", "torch/nope", "--history", history, cwd=tmp_path)
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.startswith("error: no key torch/nope") and unknown.stderr.count("\n") == 1
    missing = _cli("runs", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.startswith("error: needs --history URL")


def test_unreachable_server_exit_1_one_line_without_traceback(tmp_path):
    nowhere = _cli("runs", "--history", "postgresql://postgres@127.0.0.1:1/x", cwd=tmp_path)  # nothing on port 1
    assert nowhere.returncode == 1 and nowhere.stdout == "" and nowhere.stderr.count("\n") == 1
    assert nowhere.stderr.startswith("error: postgresql://postgres@127.0.0.1:1/x: ")
    assert "Traceback" not in nowhere.stderr
