"""--perf-fleet-check through pytest: a node against the latest figures of its peers in a
shared history, with faked bursts and peers written into the history beforehand."""

from __future__ import annotations

import json
import uuid
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("sqlalchemy", reason="the history needs its extra: pip install -e '.[history]'")

from suite_files import FAKE_ARGS, FAKE_BURSTS, faked_project  # noqa: E402

from perfsuite.history import db  # noqa: E402
from perfsuite.reporting.perf_json import SCHEMA_VERSION  # noqa: E402

pytest_plugins = ["pytester"]

# Six peers (with the node, fewer runs than a drift check needs: its warning stays out of these tests).
PEERS = {f"node-{c}": 100.0 * (1 + d) for c, d in zip("abcdef", (-0.003, -0.002, -0.001, 0.001, 0.002, 0.003))}
FLEET = [*FAKE_ARGS, "--perf-history", "perf.db", "--perf-node", "node-x"]


@pytest.fixture
def faked(pytester):
    return faked_project(pytester)


_PROBED: list[tuple[str, str]] = []


@pytest.fixture
def probe(faked) -> tuple[str, str]:
    """The fake burst's key and this machine's CPU fingerprint id, from one run's --perf-json: run
    once, in the first test's project (in process, as the tests run theirs) and cleared away after."""
    if not _PROBED:
        run = faked.runpytest_inprocess(*FAKE_ARGS, "--perf-missing-baseline", "pass", "--perf-json", "probe.json")
        run.assert_outcomes(passed=1)
        doc = json.loads((faked.path / "probe.json").read_text())
        _PROBED.append((doc["results"][0]["key"], doc["run"]["fingerprints"]["cpu"]["id"]))
        for name in ("probe.json", "bursts.log"):
            (faked.path / name).unlink()
    return _PROBED[0]


def write_peers(path, key: str, fingerprint: str, rates: dict[str, float], hours_ago: float = 3.0) -> None:
    """One run per node, ``hours_ago`` hours before now, measuring ``key`` at its rate."""
    engine = db.open_history(f"sqlite:///{path}")
    when = datetime.now(UTC) - timedelta(hours=hours_ago)
    try:
        for i, (node, ips) in enumerate(rates.items()):
            run = {
                "date": (when + timedelta(minutes=i)).isoformat(),
                "host": "pod",
                "node": node,
                "fingerprints": {"cpu": {"id": fingerprint}},
                "labels": {},
            }
            row = {"key": key, "device_kind": "cpu", "images_per_sec": ips, "ci_low": ips * 0.99, "ci_high": ips * 1.01}
            doc = {"uuid": uuid.uuid4().hex, "mode": "gate", "outcome": "passed", "source": "run"}
            db.write_run(engine, {**doc, "run": run, "results": [row]})
    finally:
        engine.dispose()


def _junit(path) -> dict[str, str]:
    case = next(ET.parse(path).getroot().iter("testcase"))
    return {p.get("name"): p.get("value") for p in case.iter("property")}


def test_a_slow_node_fails_its_test_with_fail(faked, probe, monkeypatch):
    key, fingerprint = probe
    write_peers(faked.path / "perf.db", key, fingerprint, PEERS)
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "90")
    # What is checked is the report's text; drawing its plots (matplotlib) would cost most of this test.
    monkeypatch.setattr("perfsuite.reporting.folder._draw", lambda records, series, view: ([], {}, []))
    result = faked.runpytest_inprocess(
        *FLEET,
        "--perf-fleet-check",
        "fail",
        "--perf-missing-baseline",
        "pass",
        "--perf-json",
        "r.json",
        "--perf-report",
        "report",
        "--junitxml",
        "junit.xml",
    )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    line = next(x for x in out.splitlines() if "fleet check: node node-x is slow" in x)
    # The node's verdict, pooled over its keys and nights as history fleet pools them: one key
    # on one night here, 10% below the trimmed mean of its six peers.
    assert line.startswith(
        f"fleet check: node node-x is slow: -10.0% against its peers over 1 key of fingerprint {fingerprint}, "
        "slow on 1 of the last 1 night (p="
    )
    assert "after Holm's correction over 7 nodes; alpha 0.01, tolerance 5%)" in line
    # This key tonight, among its peers (their median and this node's).
    assert (
        f"({key}): 90 img/s, -9.9% against the median of the 7 nodes tonight (6 peers and this one), 99.9 img/s" in line
    )
    assert "in the last 24 h" in line
    assert "SLOW NODE -10.0%, 1 slow night" in out  # the table
    doc = json.loads((faked.path / "r.json").read_text())
    assert doc["schema_version"] == SCHEMA_VERSION and doc["run"]["node"] == "node-x"
    (row,) = doc["results"]
    check = row["fleet"]
    assert check["flagged"] and check["peers"] == 6 and check["policy"] == "fail" and check["node"] == "node-x"
    assert check["median"] == pytest.approx(99.9) and check["deviation"] == pytest.approx(90 / 99.9 - 1)
    assert check["score"] < -3.5 and check["message"] == line.strip().removeprefix("E").strip()
    verdict = check["verdict"]
    assert (
        verdict["status"] == "slow" and verdict["nights"] == 1 and verdict["keys"] == 1 and verdict["slow_nights"] == 1
    )
    assert verdict["deviation"] == pytest.approx(-0.10, abs=1e-4) and verdict["adjusted_p"] <= 0.01
    assert check["nodes"] == 7 and check["alpha"] == 0.01
    props = _junit(faked.path / "junit.xml")
    assert props["fleet_flagged"] == "True" and props["fleet_peers"] == "6" and props["fleet_node"] == "node-x"
    assert float(props["fleet_deviation"]) == pytest.approx(90 / 99.9 - 1, abs=1e-4)
    assert float(props["fleet_median"]) == 99.9
    report = (faked.path / "report" / "report.md").read_text()
    assert "- **node**: node-x" in report and "-9.9% vs 6 peers; SLOW NODE -10.0%, 1 slow night" in report
    assert "🔴 **SLOW NODE** node node-x is slow" in report
    # The history keeps the night, the node and the check.
    engine = db.open_history(f"sqlite:///{faked.path / 'perf.db'}", write=False)
    (mine,) = [r for r in db.runs(engine) if r["node"] == "node-x"]
    assert mine["outcome"] == "failed"
    import sqlalchemy as sa

    from perfsuite.history import schema

    with engine.connect() as conn:
        stored = conn.execute(sa.select(schema.bursts.c.row).where(schema.bursts.c.run_id == mine["id"])).scalar_one()
    engine.dispose()
    assert stored["fleet"]["flagged"] is True


def test_warn_passes_with_a_warning(faked, probe, monkeypatch):
    key, fingerprint = probe
    write_peers(faked.path / "perf.db", key, fingerprint, PEERS)
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "90")
    result = faked.runpytest_inprocess(*FLEET, "--perf-fleet-check", "warn", "--perf-missing-baseline", "pass")
    result.assert_outcomes(passed=1, warnings=1)
    assert "PerfWarning: fleet check: node node-x is slow" in result.stdout.str()


def test_a_node_among_its_peers_passes(faked, probe, monkeypatch):
    key, fingerprint = probe
    write_peers(faked.path / "perf.db", key, fingerprint, PEERS)
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "99.5")
    result = faked.runpytest_inprocess(
        *FLEET, "--perf-fleet-check", "fail", "--perf-missing-baseline", "pass", "--perf-json", "r.json"
    )
    result.assert_outcomes(passed=1)
    (row,) = json.loads((faked.path / "r.json").read_text())["results"]
    assert row["fleet"]["judged"] and not row["fleet"]["flagged"] and row["fleet"]["peers"] == 6


def test_a_regression_against_the_baseline_and_a_slow_node_both_say_so(faked, probe, monkeypatch):
    key, fingerprint = probe
    faked.runpytest_inprocess(*FAKE_ARGS, "--perf-save-baseline").assert_outcomes(passed=1)  # at 100 img/s
    write_peers(faked.path / "perf.db", key, fingerprint, PEERS)
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "80")
    result = faked.runpytest_inprocess(*FLEET, "--perf-fleet-check", "fail")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "regression: torch cifar10" in out and "fleet check: node node-x is slow" in out


def test_peers_outside_the_window_and_the_nodes_own_runs_are_not_peers(faked, probe, monkeypatch):
    key, fingerprint = probe
    write_peers(faked.path / "perf.db", key, fingerprint, PEERS, hours_ago=40)  # before the 24 h window
    write_peers(faked.path / "perf.db", key, fingerprint, {"node-x": 100.0, "node-y": 100.0})  # itself, one peer
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "50")
    result = faked.runpytest_inprocess(
        *FLEET, "--perf-fleet-check", "fail", "--perf-missing-baseline", "pass", "--perf-json", "r.json"
    )
    result.assert_outcomes(passed=1)
    (row,) = json.loads((faked.path / "r.json").read_text())["results"]
    assert row["fleet"]["peers"] == 1 and not row["fleet"]["judged"] and not row["fleet"]["flagged"]
    wider = faked.runpytest_inprocess(
        *FLEET, "--perf-fleet-check", "fail", "--perf-fleet-window", "48", "--perf-missing-baseline", "pass"
    )
    wider.assert_outcomes(failed=1)
    assert "against the median of the 8 nodes tonight (7 peers and this one)" in wider.stdout.str()


def test_the_gate_and_history_fleet_judge_a_node_alike(faked, probe, monkeypatch, capsys):
    """90 against peers at 100, 100 and 92: among them it is no outlier (median 96, MAD 4), for
    the gate's check as for history fleet, which reads the run the gate wrote."""
    from perfsuite.commands.main import main

    key, fingerprint = probe
    write_peers(faked.path / "perf.db", key, fingerprint, {"node-a": 100.0, "node-b": 100.0, "node-c": 92.0})
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "90")
    result = faked.runpytest_inprocess(
        *FLEET, "--perf-fleet-check", "fail", "--perf-missing-baseline", "pass", "--perf-json", "r.json"
    )
    result.assert_outcomes(passed=1)
    (row,) = json.loads((faked.path / "r.json").read_text())["results"]
    gate = row["fleet"]
    assert gate["judged"] and not gate["flagged"] and gate["median"] == pytest.approx(96.0)
    capsys.readouterr()
    assert main(["history", "fleet", "--history", str(faked.path / "perf.db"), "--json", "--limit", "0"]) == 0
    fleet = json.loads(capsys.readouterr().out)
    mine = next(r for r in fleet["rows"] if r["node"] == "node-x")
    assert not fleet["flagged_hosts"] and not mine["flagged"]
    for field in ("median", "mad", "deviation", "score", "outlier"):
        assert mine[field] == pytest.approx(gate[field]), field
    # And the node's verdict, pooled, is the same one.
    (verdict,) = [v for v in fleet["nodes"] if v["node"] == "node-x"]
    assert verdict["status"] == gate["verdict"]["status"] == "ok"
    for field in ("deviation", "nights", "keys", "p_value", "adjusted_p"):
        assert verdict[field] == pytest.approx(gate["verdict"][field]), field


def test_the_fleet_rules_settings_of_pyproject_reach_the_gate(faked, probe, monkeypatch):
    """fleet_min_nodes of [tool.perfsuite]: with 8 nodes asked for and 7 in the fleet, no node
    is judged, however slow."""
    key, fingerprint = probe
    write_peers(faked.path / "perf.db", key, fingerprint, PEERS)
    faked.makepyprojecttoml("[tool.perfsuite]\nfleet_min_nodes = 8\n")
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "90")
    result = faked.runpytest_inprocess(
        *FLEET, "--perf-fleet-check", "fail", "--perf-missing-baseline", "pass", "--perf-json", "r.json"
    )
    result.assert_outcomes(passed=1)
    (row,) = json.loads((faked.path / "r.json").read_text())["results"]
    assert row["fleet"]["peers"] == 6 and not row["fleet"]["judged"] and row["fleet"]["verdict"] is None
    assert row["fleet"]["nodes"] == 0 and not row["fleet"]["flagged"]


def test_the_history_is_read_once_for_every_key(faked, probe):
    key, fingerprint = probe
    faked.makeconftest(
        FAKE_BURSTS
        + """
import perfsuite.history.fleet_read as fleet
_read = fleet.read_for_gate
def counted(*args, **kwargs):
    with open("peer-reads.log", "a") as log:
        log.write("read\\n")
    return _read(*args, **kwargs)
fleet.read_for_gate = counted
"""
    )
    write_peers(faked.path / "perf.db", key, fingerprint, PEERS)
    argv = [a for a in FLEET if a != "1"]  # two CPU workers: a key per worker count, each tested
    argv[argv.index("--perf-cpu-workers") + 1 : argv.index("--perf-cpu-workers") + 1] = ["2"]
    result = faked.runpytest_inprocess(
        *argv, "--perf-fleet-check", "warn", "--perf-missing-baseline", "pass", "-k", "throughput"
    )
    result.assert_outcomes(passed=2)
    assert (faked.path / "peer-reads.log").read_text().count("read") == 1


def test_the_node_defaults_to_slurms_then_the_hosts_name(faked, monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "gpu042")
    faked.runpytest_inprocess(
        *FAKE_ARGS, "--perf-history", "perf.db", "--perf-missing-baseline", "pass", "--perf-json", "r.json"
    ).assert_outcomes(passed=1)
    assert json.loads((faked.path / "r.json").read_text())["run"]["node"] == "gpu042"
    monkeypatch.delenv("SLURMD_NODENAME")
    import socket

    faked.runpytest_inprocess(*FAKE_ARGS, "--perf-missing-baseline", "pass", "--perf-json", "r.json")
    assert json.loads((faked.path / "r.json").read_text())["run"]["node"] == socket.gethostname()
    engine = db.open_history(f"sqlite:///{faked.path / 'perf.db'}", write=False)
    assert [r["node"] for r in db.runs(engine)] == ["gpu042"]
    engine.dispose()


def test_an_unusable_history_skips_the_check_and_says_so(faked, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path / "cache"))
    result = faked.runpytest_inprocess(
        *FAKE_ARGS,
        "--perf-history",
        "postgresql://perf@127.0.0.1:1/nightly",  # nothing listens on port 1
        "--perf-history-retry",  # the run's write spools at once
        "0",
        "--perf-fleet-check",
        "fail",
        "--perf-missing-baseline",
        "pass",
    )
    result.assert_outcomes(passed=1)
    assert (
        "warning: no fleet check: perf history unusable (postgresql://perf@127.0.0.1:1/nightly" in result.stdout.str()
    )


# -- options (no pytest session needed) ----------------------------------------------------


def _options(cli: dict, table: dict, base):
    from perfsuite.config.options import resolve

    return resolve(lambda dest: cli.get(dest), table, "pyproject.toml", base)


def test_fleet_options_and_their_defaults(tmp_path):
    default = _options({}, {}, tmp_path)
    assert (default.node, default.fleet_check, default.fleet_window, default.fleet_tolerance) == (
        None,
        "off",
        24.0,
        0.05,
    )
    assert (default.fleet_alpha, default.fleet_nights, default.fleet_min_nodes) == (0.01, 7, 3)
    table = _options({}, {"perf_history": "h.db", "fleet_check": "warn", "fleet_window": 12, "node": "n1"}, tmp_path)
    assert (table.fleet_check, table.fleet_window, table.node) == ("warn", 12.0, "n1")
    rule = _options({"fleet_nights": "10"}, {"fleet_alpha": 0.001, "fleet_min_nodes": 5}, tmp_path).fleet_rule
    assert (rule.tolerance, rule.alpha, rule.nights, rule.min_nodes) == (0.05, 0.001, 10, 5)


@pytest.mark.parametrize(
    "cli, message",
    [
        ({"fleet_check": "fail"}, "--perf-fleet-check: the fleet check reads the other nodes' figures from a shared"),
        ({"fleet_check": "loud", "perf_history": "h.db"}, "'loud' is not one of off, warn, fail"),
        ({"fleet_window": "0"}, "--perf-fleet-window: must be >= 0.01"),
        ({"fleet_tolerance": "1.5"}, "--perf-fleet-tolerance: must be <= 0.99"),
        ({"fleet_alpha": "0.7"}, "--perf-fleet-alpha: must be <= 0.5"),
        ({"fleet_nights": "0"}, "--perf-fleet-nights: must be >= 1"),
        ({"fleet_min_nodes": "2"}, "--perf-fleet-min-nodes: must be >= 3"),
    ],
)
def test_bad_fleet_options_are_one_line(tmp_path, cli, message):
    from perfsuite.config.options import OptionError

    with pytest.raises(OptionError, match=message):
        _options(cli, {}, tmp_path)


def test_the_check_without_a_history_is_refused_up_front(faked):
    result = faked.runpytest_inprocess(*FAKE_ARGS, "--perf-fleet-check", "warn")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "add --perf-history URL" in result.stderr.str() and result.stderr.str().count("\n") <= 2
