"""``python -m perfsuite history fleet`` on synthetic fleet histories (SQLite, and one run on
a PostgreSQL server), and the schema version that added each run's node."""

from __future__ import annotations

import json
import random
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy", reason="the history needs its extra: pip install -e '.[history]'")

import sqlalchemy as sa  # noqa: E402
from memory_folder import memory_folder, one_connection  # noqa: E402

from perfsuite.analysis import stats  # noqa: E402
from perfsuite.commands.main import main  # noqa: E402
from perfsuite.history import db, schema  # noqa: E402

START = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)  # night 1
KEYS = ("torch/resnet50/cuda8/nodes1/device/bs64/img224/fp32", "tf/resnet50/cuda8/nodes1/device/bs64/img224/fp32")
FINGERPRINT = "gpu-h100-sxm-80gb-x8"
NODES = [f"node-{c}" for c in "abcdefgh"]
SLOW = "node-h"


def _figure(rnd: random.Random, level: float, noise: float) -> tuple[float, float, float]:
    """A burst of 10 windows at ``noise`` (relative standard deviation per window): its median
    and 95% interval, as the history keeps them."""
    samples = [level * (1 + rnd.gauss(0, noise)) for _ in range(10)]
    lo, hi = stats.median_ci(samples)
    return stats.median(samples), lo, hi


def fill(
    url: str,
    *,
    nights: int = 10,
    nodes=NODES,
    slow: str | None = SLOW,
    slow_from: int = 6,
    slowdown: float = 0.08,
    noise: float = 0.02,
    seed: int = 0,
    labels=lambda node: {"pool": "a" if node < "node-e" else "b"},
    figure_noise: bool = False,
    absent: tuple[tuple[str, int], ...] = (),
    failing: tuple[tuple[str, int], ...] = (),
) -> None:
    """``nodes`` x ``nights`` runs of KEYS, one an hour apart at most; ``slow`` runs ``slowdown``
    slower from night ``slow_from`` (1-based) on. Every run has the same host name, as pods often do.
    ``figure_noise``: each figure wanders ``noise`` itself (not each of its windows); ``absent``:
    (node, night) without a run; ``failing``: (node, night) whose bursts measured nothing."""
    rnd = random.Random(seed)
    engine = one_connection(url) if url.startswith("sqlite:") else db.open_history(url)
    try:
        for night in range(1, nights + 1):
            for i, node in enumerate(nodes):
                level = 1 - slowdown if node == slow and night >= slow_from else 1.0
                if (node, night) in absent:
                    continue
                rows = []
                for k, key in enumerate(KEYS):
                    ips, lo, hi = _figure(rnd, (1000.0 + 500 * k) * level, noise)
                    if figure_noise:
                        ips = (1000.0 + 500 * k) * level * (1 + rnd.gauss(0, noise))
                        lo, hi = ips * 0.99, ips * 1.01
                    if (node, night) in failing:
                        ips = lo = hi = None
                    rows.append(
                        {
                            "key": key,
                            "device_kind": "cuda",
                            "images_per_sec": ips,
                            "ci_low": lo,
                            "ci_high": hi,
                            "runs": 1,
                        }
                    )
                run = {
                    "date": (START + timedelta(days=night - 1, minutes=7 * i)).isoformat(),
                    "host": "pod",
                    "node": node,
                    "python": "3.11",
                    "fingerprints": {"cpu": {"id": "cpu-x"}, "gpu": {"id": FINGERPRINT}},
                    "labels": labels(node),
                }
                doc = {"uuid": uuid.uuid4().hex, "mode": "gate", "outcome": "passed", "source": "run"}
                db.write_run(engine, {**doc, "run": run, "results": rows})
    finally:
        engine.dispose()


def _night(n: int) -> str:
    """--at for night n: an hour after its last run."""
    return (START + timedelta(days=n - 1, hours=1)).isoformat()


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(["history", "fleet", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def _json(capsys, *argv) -> dict:
    rc, out, err = _run(capsys, *argv, "--json", "--limit", "0")
    assert rc in (0, 3), err
    return json.loads(out)


@pytest.fixture
def mem(tmp_path_factory) -> Path:
    """This test's folder for its history: in memory where the machine has it (tests/memory_folder.py)."""
    return memory_folder(tmp_path_factory, "fleet")


@pytest.fixture(scope="module")
def slow_fleet(tmp_path_factory) -> str:
    url = f"sqlite:///{memory_folder(tmp_path_factory, 'fleet') / 'fleet.db'}"
    fill(url)
    return url


# --- the slow host -----------------------------------------------------------------


def _flags(report: dict) -> dict[tuple[str, str], list[int]]:
    return {(r["node"], r["key"]): r["flagged_nights"] for r in report["rows"] if r["flagged_nights"]}


def test_the_slow_host_is_flagged_from_its_first_slow_night_alone(slow_fleet, capsys):
    report = _json(capsys, "--history", slow_fleet, "--at", _night(10), "--nights", "10")
    # Nights ago: 0 is night 10, 4 is night 6, the first slow one; nothing before it, no other host.
    assert _flags(report) == {(SLOW, key): [0, 1, 2, 3, 4] for key in KEYS}
    assert report["host_count"] == 8 and len(report["groups"]) == 2
    assert [h["node"] for h in report["flagged_hosts"]] == [SLOW]
    worst = report["rows"][0]
    assert worst["node"] == SLOW and worst["flagged"] and worst["judged"]
    assert worst["deviation"] == pytest.approx(-0.08, abs=0.02) and worst["score"] < -3.5
    assert worst["nights_flagged"] == 5 and worst["nights_judged"] == 10 and worst["hosts"] == 8
    assert all(r["ci_low"] < r["images_per_sec"] < r["ci_high"] for r in report["rows"])
    # Night by night: unflagged up to night 5, flagged from night 6.
    for night in range(1, 11):
        tonight = _json(capsys, "--history", slow_fleet, "--at", _night(night), "--nights", "1")
        assert [h["node"] for h in tonight["flagged_hosts"]] == ([SLOW] if night >= 6 else []), night


def _table(out: str) -> list[str]:
    """The per-key evidence table: its header line and rows."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("each key tonight"))
    return [line for line in lines[start + 1 :] if line and not line.startswith("(showing")]


def test_text_worst_first_and_fail_on_flagged(slow_fleet, capsys):
    rc, out, err = _run(capsys, "--history", slow_fleet, "--at", _night(10), "--fail-on-flagged")
    assert rc == 3 and err == ""
    lines = out.splitlines()
    assert "8 hosts, 2 keys on 1 fingerprint, 2 groups" in lines[0] and "24 h before 2026-01-10 03:00 UTC" in lines[0]
    assert lines[1].startswith("1 node slow (pooled over each node's keys and the last 7 nights: slower than its peers")
    assert "after Holm's correction over each fleet's nodes (8 nodes judged in 1 fleet)" in lines[1]
    assert (
        lines[2].startswith(f"  {SLOW}  [fingerprint {FINGERPRINT}]  -")
        and "slow on 5 of the last 7 nights" in lines[2]
    )
    assert "(2 of 2 keys slow tonight" in lines[2]
    table = _table(out)
    assert table[0].split()[:3] == ["host", "fingerprint", "key"]
    assert table[1].startswith(SLOW) and "FLAGGED" in table[1] and "5 of 7" in table[1]
    assert table[2].startswith(SLOW) and "FLAGGED" not in "".join(table[3:])
    rc, _, _ = _run(capsys, "--history", slow_fleet, "--at", _night(5), "--fail-on-flagged")
    assert rc == 0


def test_a_flat_fleet_flags_none(mem, capsys):
    url = f"sqlite:///{mem / 'flat.db'}"
    fill(url, slow=None, seed=1)
    report = _json(capsys, "--history", url, "--at", _night(10), "--nights", "10")
    assert report["flagged_hosts"] == [] and _flags(report) == {}
    assert all(r["judged"] and abs(r["deviation"]) < 0.03 for r in report["rows"])
    rc, out, _ = _run(capsys, "--history", url, "--at", _night(10), "--fail-on-flagged")
    assert rc == 0 and "no node slow" in out


def test_labels_filter_and_group(slow_fleet, capsys):
    pool_b = _json(capsys, "--history", slow_fleet, "--at", _night(10), "--label", "pool=b")
    assert {r["node"] for r in pool_b["rows"]} == {"node-e", "node-f", "node-g", "node-h"}
    assert [h["node"] for h in pool_b["flagged_hosts"]] == [SLOW]
    grouped = _json(capsys, "--history", slow_fleet, "--at", _night(10), "--group-by", "pool")
    assert sorted((g["key"], g["group"]["pool"], g["hosts"]) for g in grouped["groups"]) == sorted(
        (key, pool, 4) for key in KEYS for pool in "ab"
    )
    assert {(r["node"], r["group"]["pool"]) for r in grouped["rows"] if r["flagged"]} == {(SLOW, "b")}
    rc, out, _ = _run(capsys, "--history", slow_fleet, "--at", _night(10), "--group-by", "pool", "--limit", "1")
    header = _table(out)[0]
    assert header.split()[:4] == ["host", "fingerprint", "key", "pool"]
    assert "(showing the worst 1 of 16 rows; --limit 0 for all)" in out


def test_filters_by_key_and_fingerprint(slow_fleet, capsys):
    report = _json(capsys, "--history", slow_fleet, "--at", _night(10), "--key", "tf/*", "--fingerprint", FINGERPRINT)
    assert {r["key"] for r in report["rows"]} == {KEYS[1]}
    rc, _, err = _run(capsys, "--history", slow_fleet, "--at", _night(10), "--fingerprint", "gpu-other")
    assert rc == 1 and err.startswith("error: no measured run on fingerprint gpu-other in the 24 h before")


def test_a_group_of_two_hosts_cannot_judge(mem, capsys):
    url = f"sqlite:///{mem / 'two.db'}"
    fill(url, nodes=NODES[:2], slow="node-b", nights=2, slow_from=1, slowdown=0.3)
    rc, out, _ = _run(capsys, "--history", url, "--at", _night(2), "--fail-on-flagged")
    assert rc == 0 and "no node slow" in out
    assert (
        "2 keys with fewer than 3 hosts tonight: cannot judge" in out
        and f"{KEYS[0]} [fingerprint {FINGERPRINT}]: 2 hosts" in out
    )
    assert "not judged" in out
    report = _json(capsys, "--history", url, "--at", _night(2))
    assert not any(g["judged"] for g in report["groups"]) and all(r["score"] is None for r in report["rows"])


def test_each_host_counts_once_with_its_latest_run(mem, capsys):
    url = f"sqlite:///{mem / 'twice.db'}"
    fill(url, nights=2)
    # node-a ran again an hour later, 8% slower this time: its latest run stands.
    engine = db.open_history(url)
    run = {"date": (START + timedelta(days=1, minutes=59)).isoformat(), "host": "pod", "node": "node-a",
           "fingerprints": {"gpu": {"id": FINGERPRINT}}, "labels": {}}  # fmt: skip
    rows = [{"key": KEYS[0], "device_kind": "cuda", "images_per_sec": 900.0, "runs": 1}]
    db.write_run(
        engine, {"uuid": "again", "mode": "gate", "outcome": "passed", "source": "run", "run": run, "results": rows}
    )
    engine.dispose()
    report = _json(capsys, "--history", url, "--at", _night(2), "--key", KEYS[0])
    (row,) = [r for r in report["rows"] if r["node"] == "node-a"]
    assert row["images_per_sec"] == 900.0 and row["hosts"] == 8


def test_plot(slow_fleet, tmp_path, capsys):
    rc, out, _ = _run(capsys, "--history", slow_fleet, "--at", _night(10), "--plot", tmp_path / "fleet.png")
    assert rc == 0 and f"plot: {tmp_path / 'fleet.png'}" in out
    assert (tmp_path / "fleet.png").read_bytes().startswith(b"\x89PNG")


def test_the_plot_labels_each_strip_by_what_sets_it_apart():
    """The long keys' shared parts are said once, so the labels leave the width to the strips."""
    from perfsuite.reporting.fleet_plot import MAX_LABEL, Strip, short_labels

    strips = [Strip(key, FINGERPRINT, [], (("pool", "a"),)) for key in KEYS]
    strips.append(Strip(KEYS[0], "gpu-a100-sxm-40gb-x8", [], (("pool", "b"),)))
    labels, shared = short_labels(strips)
    assert labels == ["torch [h100-80gb, pool=a]", "tf [h100-80gb, pool=a]", "torch [a100-40gb, pool=b]"]
    assert shared == "resnet50/cuda8/nodes1/device/bs64/img224/fp32"
    alone, everything = short_labels(strips[:1])
    assert alone == [""] and everything == f"{KEYS[0]} [fingerprint {FINGERPRINT}, pool=a]"
    long = [Strip(f"{k}/{'x' * 80}{i}", FINGERPRINT, []) for i, k in enumerate(KEYS)]
    assert all(len(label) <= MAX_LABEL for label in short_labels(long)[0])


# --- the node verdict: pooled, and the nodes that did not report -----------------------------


def test_a_slow_node_in_noisy_nightly_figures_is_named_by_its_pooled_verdict(mem, capsys):
    """8 nodes x 10 nights, each nightly figure wandering 2%, node-f 8% slower from night 6: no
    single night's key flags it reliably (each key-night stands 4 standard deviations out), the
    verdict pooled over its two keys and five slow nights does, and no other node."""
    url = f"sqlite:///{mem / 'noisy.db'}"
    fill(url, slow="node-f", figure_noise=True, seed=3)
    report = _json(capsys, "--history", url, "--at", _night(10))
    assert [v["node"] for v in report["flagged_hosts"]] == ["node-f"]
    slow = report["flagged_hosts"][0]
    assert (
        slow["deviation"] == pytest.approx(-0.08, abs=0.02) and slow["adjusted_p"] <= 0.01 and slow["slow_nights"] >= 3
    )
    assert report["nights_read"] == 13  # 8 nodes: the noise is learnt over 100 node-nights
    assert all(v["status"] == "ok" for v in report["nodes"] if v["node"] != "node-f")
    # Before it turned slow, nobody.
    assert _json(capsys, "--history", url, "--at", _night(5))["flagged_hosts"] == []


def test_a_node_that_did_not_report_tonight_is_named_and_fails_the_sweep(mem, capsys):
    url = f"sqlite:///{mem / 'absent.db'}"
    fill(url, slow=None, seed=4, absent=(("node-c", 10),))
    tonight = ["--history", url, "--at", _night(10)]
    rc, out, err = _run(capsys, *tonight, "--fail-on-flagged")
    assert rc == 3 and err == ""
    assert "did not report: node-c (its last run 2026-01-09 02:14)" in out and "no node slow" in out
    report = _json(capsys, *tonight)
    assert [m["node"] for m in report["did_not_report"]] == ["node-c"] and report["flagged_hosts"] == []
    assert "node-c" not in {v["node"] for v in report["nodes"] if v["status"] != "not judged"}
    # A node named by --expect that never ran is missing too; one that ran is not.
    report = _json(capsys, *tonight, "--expect", "node-a,node-z", "--expect", "node-y")
    assert [m["node"] for m in report["did_not_report"]] == ["node-c", "node-y", "node-z"]
    assert _run(capsys, "--history", url, "--at", _night(9), "--fail-on-flagged")[0] == 0


def test_a_node_whose_bursts_failed_is_failed_not_absent(mem, capsys):
    url = f"sqlite:///{mem / 'failing.db'}"
    fill(url, slow=None, seed=5, failing=(("node-d", 10),))
    tonight = ["--history", url, "--at", _night(10)]
    rc, out, _ = _run(capsys, *tonight, "--fail-on-flagged")
    assert rc == 3
    assert f"failed: node-d [fingerprint {FINGERPRINT}]: 2 bursts measured nothing tonight" in out
    report = _json(capsys, *tonight)
    assert report["failed"] == [{"node": "node-d", "fingerprint": FINGERPRINT, "bursts": 2, "judged": False}]
    assert report["did_not_report"] == [] and report["flagged_hosts"] == []


# --- errors --------------------------------------------------------------------------


def test_no_run_in_the_window_exit_1(slow_fleet, capsys):
    rc, out, err = _run(capsys, "--history", slow_fleet, "--at", "2026-03-01")
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("error: no measured run in the 24 h before 2026-03-01 00:00 UTC in sqlite:///")


@pytest.mark.parametrize(
    "argv, says",
    [
        # the fleet rule's arguments are checked by the option table, as the gate's options are
        (["--since", "0"], "argument --since: must be >= 0.01, got '0'"),
        (["--at", "yesterday"], "expected an ISO date"),
        (["--tolerance", "5"], "argument --tolerance: must be <= 0.99, got '5' (a fraction: 0.10 means 10%)"),
        (["--nights", "0"], "argument --nights: must be >= 1"),
        (["--alpha", "0.7"], "argument --alpha: must be <= 0.5"),
        (["--min-nodes", "2"], "argument --min-nodes: must be >= 3"),
        (["--label", "pool"], "expected KEY=VALUE"),
        (["--cutoff", "-1"], "expected a number above 0"),
    ],
)
def test_bad_arguments_exit_2(slow_fleet, capsys, argv, says):
    with pytest.raises(SystemExit) as stop:
        main(["history", "fleet", "--history", slow_fleet, *argv])
    assert stop.value.code == 2 and says in capsys.readouterr().err


def test_a_window_of_minutes_is_a_window(slow_fleet, capsys):
    """A sweep's own fleet check reads the hours since it began (examples/slurm-fleet.sh): 0.043 h
    is a window, judged like any other (here it holds no run: exit 1, saying so)."""
    rc, out, err = _run(capsys, "--history", slow_fleet, "--since", "0.043")
    assert rc == 1 and "argument --since" not in err
    assert err.startswith("error: no measured run in the 0.043 h before ")


def test_a_missing_history_exit_1(tmp_path, capsys):
    rc, _, err = _run(capsys, "--history", tmp_path / "none.db")
    assert rc == 1 and err.startswith("error: no history at") and not (tmp_path / "none.db").exists()


# --- the schema version that added the node ------------------------------------------------


def test_version_1_runs_get_their_host_as_node(tmp_path):
    path = tmp_path / "v1.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        schema.migrate(conn, {1: schema.MIGRATIONS[1]})
        columns = {c["name"] for c in sa.inspect(conn).get_columns("runs")}
        assert "node" not in columns
        conn.execute(
            sa.text(
                "INSERT INTO runs (uuid, started_at, date, host, frameworks, labels, mode, outcome, source, info) "
                "VALUES ('u1', '2026-01-01 02:00:00', '2026-01-01T02:00:00+00:00', 'old-host', '{}', '{}', "
                "'gate', 'passed', 'run', '{}')"
            )
        )
    engine.dispose()
    with pytest.raises(db.HistoryError, match=f"older than this perfsuite's {schema.SCHEMA_VERSION}"):
        db.open_history(f"sqlite:///{path}", write=False)  # readers migrate nothing
    db.open_history(f"sqlite:///{path}").dispose()  # a writer brings it forward
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT node, host FROM runs").fetchall() == [("old-host", "old-host")]
        assert conn.execute("SELECT version FROM perfsuite_schema").fetchall() == [(schema.SCHEMA_VERSION,)]
        indexes = {row[1] for row in conn.execute("PRAGMA index_list('bursts')")}
    assert "ix_bursts_fleet" in indexes


def test_a_run_without_a_node_is_named_by_its_host(mem):
    from history_docs import run_doc

    url = f"sqlite:///{mem / 'h.db'}"
    engine = db.open_history(url)
    db.write_run(engine, run_doc(100.0, host="h1"))  # a --perf-json file from before --perf-node
    db.write_run(engine, run_doc(100.0, host="h2", node="n2"))
    assert sorted((r["host"], r["node"]) for r in db.runs(engine)) == [("h1", "h1"), ("h2", "n2")]
    engine.dispose()


# --- PostgreSQL ------------------------------------------------------------------------


def test_postgresql_flags_the_slow_host(postgres_db, capsys):
    fill(postgres_db)
    report = _json(capsys, "--history", postgres_db, "--at", _night(10), "--nights", "10")
    assert _flags(report) == {(SLOW, key): [0, 1, 2, 3, 4] for key in KEYS}
    assert report["host_count"] == 8


def test_identical_peers_leave_the_tolerance_to_decide(mem, capsys):
    url = f"sqlite:///{mem / 'same.db'}"
    fill(url, nights=1, slow_from=1, noise=0.0)  # seven identical figures, one 8% below
    report = _json(capsys, "--history", url, "--at", _night(1), "--nights", "1")
    slow = [r for r in report["rows"] if r["node"] == SLOW]
    assert all(r["flagged"] and r["mad"] == 0 and r["score"] is None for r in slow)  # JSON has no -inf
    assert all(not r["flagged"] and r["score"] == 0 for r in report["rows"] if r["node"] != SLOW)
    _, out, _ = _run(capsys, "--history", url, "--at", _night(1), "--nights", "1")
    assert next(line for line in out.splitlines() if line.startswith(SLOW)).split()[-5] == "-inf"
