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

from history_docs import FINGERPRINT, KEY, run_doc  # noqa: E402
from memory_folder import memory_folder, one_connection  # noqa: E402

from perfsuite.analysis.changes import change_points  # noqa: E402
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
    engine = one_connection(url)
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
    path = memory_folder(tmp_path_factory, "history") / "h.db"
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
    assert lines[header].split()[3:5] == ["host", "node"]
    newest = rows[0]
    assert "2026-02-19 02:00" in newest and "4444444444" in newest and newest.split()[4:6] == ["node1", "node1"]
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
    assert newest["host"] == newest["node"] == "node1" and newest["frameworks"]["torch"] == "2.13.0"
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
    # node1 and node2 write to this history: each change point names its node
    assert jump.splitlines()[0].endswith(f"{JUMP}  [fingerprint cpu-aaa, node node1]")
    assert re.match(r"\+1[45]\.\d%  ", jump)
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
    assert jump["node"] == step["node"] == "node1"
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


# --- a shared history: each node's runs are a series of their own -----------------------

NODES = {"node-a": 100.0, "node-b": 100.0, "node-c": 85.0}  # node-c: a slower node, steady
SHARED_NIGHTS, NODE_STEP_AT = 30, 18  # node-b: -10% from its 19th night, when its driver changes
ONLY_A = f"{KEY}#1"  # a key that node-a alone ran, on its last 10 nights


def _shared_run_id(night: int, node: str) -> int:
    return night * len(NODES) + list(NODES).index(node) + 1  # written night by night, node by node


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """Three nodes of one fingerprint writing to one history for 30 nights, 10 minutes apart."""
    path = memory_folder(tmp_path_factory, "shared") / "fleet.db"
    rnd = random.Random(11)
    engine = one_connection(f"sqlite:///{path}")
    try:
        for night in range(SHARED_NIGHTS):
            for n, (node, level) in enumerate(NODES.items()):
                stepped = node == "node-b" and night >= NODE_STEP_AT
                ips = level * (0.9 if stepped else 1.0) * (1 + rnd.gauss(0, 0.01))
                date = START + timedelta(days=night, minutes=10 * n)
                doc = run_doc(
                    round(ips, 2),
                    bursts=2 if node == "node-a" and night >= SHARED_NIGHTS - 10 else 1,
                    date=date.isoformat(),
                    host=node,
                    node=node,
                    driver="590.10" if stepped else "580.95",
                )
                db.write_run(engine, doc)
    finally:
        engine.dispose()
    return path


def test_changes_finds_a_step_in_its_nodes_series_only(shared, capsys):
    rc, out, err = _run(capsys, "changes", "--history", shared)
    assert rc == 0 and err == ""
    assert out.startswith("1 change point in 4 series of ")  # KEY on each node, and ONLY_A
    (block,) = out.split("\n\n")[1:]
    title, at, changed = block.splitlines()
    assert re.match(r"-(9|10)\.\d%  ", title) and title.endswith(f"{KEY}  [fingerprint {FINGERPRINT}, node node-b]")
    before = _shared_run_id(NODE_STEP_AT - 1, "node-b")
    assert at.startswith(f"  at run {_shared_run_id(NODE_STEP_AT, 'node-b')} (2026-01-19 02:10, ")
    assert changed == f"  changed since run {before}: driver 580.95 -> 590.10"  # node-b's own previous night

    rc, out, _ = _run(capsys, "changes", "--history", shared, "--json")
    info = json.loads(out)
    (change,) = info["changes"]
    assert info["series"] == 4 and info["node"] is None
    assert change["node"] == "node-b" and change["key"] == KEY and change["index"] == NODE_STEP_AT
    assert change["before"] == pytest.approx(100, rel=0.02) and change["after"] == pytest.approx(90, rel=0.02)
    assert change["metadata_changes"] == [{"field": "driver", "before": "580.95", "after": "590.10"}]


def test_the_nodes_mixed_in_one_series_hide_the_step(shared):
    """What `history changes` said before series were per node: node-c's slower runs,
    interleaved with its peers', hide node-b's 10% step."""
    engine = db.open_history(f"sqlite:///{shared}", write=False)
    try:
        mixed = db.all_series(engine, key=KEY)[(FINGERPRINT, KEY)]
        per_node = db.all_series(engine, key=KEY, by_node=True)
    finally:
        engine.dispose()
    assert len(mixed) == SHARED_NIGHTS * len(NODES)
    assert change_points([p.throughput for p in mixed]) == []
    found = {node: change_points([p.throughput for p in points]) for (_, _, node), points in per_node.items()}
    assert [cp.index for cp in found.pop("node-b")] == [NODE_STEP_AT]
    assert found == {"node-a": [], "node-c": []}


def test_node_filters_each_command(shared, capsys):
    rc, out, _ = _run(capsys, "runs", "--history", shared, "--node", "node-c", "--limit", "0", "--json")
    info = json.loads(out)
    assert rc == 0 and info["node"] == "node-c" and len(info["runs"]) == SHARED_NIGHTS
    assert {(r["host"], r["node"]) for r in info["runs"]} == {("node-c", "node-c")}
    rc, out, _ = _run(capsys, "runs", "--history", shared, "--node", "node-c", "--limit", "2")
    lines = out.splitlines()
    assert lines[0].endswith(": 2 runs of node node-c, newest first (--limit 2; 0 for all)")
    newest = [_shared_run_id(night, "node-c") for night in (SHARED_NIGHTS - 1, SHARED_NIGHTS - 2)]
    assert [line.split()[0] for line in lines[3:]] == [str(i) for i in newest]
    assert {line.split()[4] for line in lines[3:]} == {"node-c"}

    rc, out, _ = _run(capsys, "changes", "--history", shared, "--node", "node-a")
    assert rc == 0 and out.startswith("no change points in 2 series of node node-a in ")
    rc, out, _ = _run(capsys, "changes", "--history", shared, "--node", "node-b")
    assert out.startswith("1 change point in 1 series of node node-b in ")
    assert f"{KEY}  [fingerprint {FINGERPRINT}]" in out  # one node: its change points need not name it
    rc, out, _ = _run(capsys, "changes", "--history", shared, "--node", "node-b", "--json")
    info = json.loads(out)
    assert info["node"] == "node-b" and [c["node"] for c in info["changes"]] == ["node-b"]

    rc, out, err = _run(capsys, "trend", KEY, "--history", shared, "--node", "node-b")
    assert rc == 0 and err == ""
    assert f"{KEY} on fingerprint {FINGERPRINT}, node node-b: {SHARED_NIGHTS} runs in " in out
    (marked,) = [line for line in out.splitlines() if "<- change" in line]
    assert marked.split()[0] == str(_shared_run_id(NODE_STEP_AT, "node-b"))
    rc, out, _ = _run(capsys, "trend", KEY, "--history", shared, "--node", "node-c", "--json")
    info = json.loads(out)
    assert rc == 0 and info["node"] == "node-c" and info["change_points"] == []
    assert [r["run_id"] for r in info["runs"]] == [_shared_run_id(night, "node-c") for night in range(SHARED_NIGHTS)]


def test_trend_of_a_key_several_nodes_ran_needs_one(shared, tmp_path, capsys):
    rc, out, err = _run(capsys, "trend", KEY, "--history", shared)
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err == (
        f"error: {KEY} ran on 3 nodes, each a series of its own: give --node NAME, "
        "one of node-a (30 runs), node-b (30 runs), node-c (30 runs)\n"
    )
    # a key one node ran reads as before, and --plot draws the chosen node's series
    rc, out, _ = _run(capsys, "trend", ONLY_A, "--history", shared)
    assert rc == 0 and out.startswith(f"{ONLY_A} on fingerprint {FINGERPRINT}: 10 runs in ")
    png = tmp_path / "node-b.png"
    rc, out, _ = _run(capsys, "trend", KEY, "--history", shared, "--node", "node-b", "--plot", png)
    assert rc == 0 and f"plot: {png}" in out and png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.parametrize("command", [["runs"], ["trend", KEY], ["changes"]])
def test_a_node_not_in_the_history_names_the_nearest(shared, capsys, command):
    rc, out, err = _run(capsys, *command, "--history", shared, "--node", "nodeb")
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: no node nodeb in sqlite:///{shared} (nearest: node-b, ")
    rc, out, err = _run(capsys, *command, "--history", shared, "--node", "gpu042")
    assert rc == 1 and err == f"error: no node gpu042 in sqlite:///{shared} (it holds 3 nodes)\n"


def test_trend_of_a_key_the_node_did_not_run(shared, capsys):
    rc, out, err = _run(capsys, "trend", ONLY_A, "--history", shared, "--node", "node-b")
    assert rc == 1 and out == "" and err == f"error: {ONLY_A} has no runs on node node-b (it ran on: node-a)\n"


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
    nowhere = _cli(
        "runs", "--history", "postgresql://postgres@127.0.0.1:1/x", "--retry", "0", cwd=tmp_path
    )  # nothing on port 1
    assert nowhere.returncode == 1 and nowhere.stdout == "" and nowhere.stderr.count("\n") == 1
    assert nowhere.stderr.startswith("error: postgresql://postgres@127.0.0.1:1/x: ")
    assert "Traceback" not in nowhere.stderr
