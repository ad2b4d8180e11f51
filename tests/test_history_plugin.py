"""--perf-history through pytest: every run appended with its metadata, drift gated, the
report's trend plots, and a database that cannot be reached never failing the gate."""

from __future__ import annotations

import json
import re
import shutil
import sys

import pytest

pytest.importorskip("sqlalchemy", reason="the history needs its extra: pip install -e '.[history]'")

from history_docs import run_doc  # noqa: E402
from suite_files import FAKE_ARGS, faked_project  # noqa: E402

from perfsuite.history import db, spool  # noqa: E402

pytest_plugins = ["pytester"]

FAKE = FAKE_ARGS
NODE_A = ("--perf-node", "node-a")  # the node history_docs.run_doc's runs ran on


@pytest.fixture
def faked(pytester):
    return faked_project(pytester)


@pytest.fixture(scope="module", autouse=True)
def _imported_once(tmp_path_factory):
    """pytester's in-process sessions forget the modules they import (tests/conftest.py): what
    opening a history (Alembic's migrations) and drawing a report's trends (matplotlib) import is
    imported here once, not again in every session."""
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401

    db.open_history(f"sqlite:///{tmp_path_factory.mktemp('imports') / 'h.db'}").dispose()


def _history(pytester):
    return db.open_history(f"sqlite:///{pytester.path / 'perf.db'}")


def test_every_run_is_appended_with_its_metadata(faked, monkeypatch):
    monkeypatch.setenv("NVIDIA_PYTORCH_VERSION", "24.05")
    monkeypatch.setenv("NVIDIA_BUILD_ID", "9001")
    first = faked.runpytest_inprocess(
        *FAKE,
        "--perf-history",
        "perf.db",
        "--perf-label",
        "pool=a",
        "--perf-label",
        "note=x=y, z",
        "--perf-missing-baseline",
        "pass",
        "--perf-json",
        "r.json",
    )
    first.assert_outcomes(passed=1)
    assert "perf history: run 1 (1 burst) written to sqlite:///" in first.stdout.str()
    saved = faked.runpytest_inprocess(*FAKE, "--perf-history", "perf.db", "--perf-save-baseline")
    saved.assert_outcomes(passed=1)

    engine = _history(faked)
    runs = db.runs(engine)
    assert [(r["mode"], r["outcome"]) for r in runs] == [("save", "passed"), ("gate", "passed")]
    gate = runs[1]
    assert gate["labels"] == {"pool": "a", "note": "x=y, z"}
    assert gate["container"] == "NGC PyTorch 24.05 (build 9001)"
    assert gate["frameworks"] == {"torch": "fake"} and gate["bursts"] == 1
    record = json.loads((faked.path / "r.json").read_text())
    assert (
        gate["date"] == record["run"]["date"] and gate["cpu_fingerprint"] == record["run"]["fingerprints"]["cpu"]["id"]
    )
    (((fp, key), points),) = db.all_series(engine).items()
    assert key == record["results"][0]["key"] and [p.throughput for p in points] == [100.0, 100.0]


def test_a_failed_run_is_kept_too(faked, monkeypatch):
    faked.runpytest_inprocess(*FAKE, "--perf-save-baseline").assert_outcomes(passed=1)
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "50")
    faked.runpytest_inprocess(*FAKE, "--perf-history", "perf.db").assert_outcomes(failed=1)
    (run,) = db.runs(_history(faked))
    assert run["outcome"] == "failed" and run["failing"] == 1


def test_without_a_history_nothing_new_is_written(faked, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path / "cache"))

    def files():  # pytester's own (its temporary folder, captured output) and Python's bytecode cache
        own = ("runpytest", "stdout", "stderr", "__pycache__")
        return {p.name for p in faked.path.iterdir() if not p.name.startswith(own)}

    before = files()
    # pytest-benchmark makes its .benchmarks folder on its own: left out, to see perfsuite's files.
    faked.runpytest_inprocess(*FAKE, "--perf-missing-baseline", "pass", "-p", "no:benchmark").assert_outcomes(passed=1)
    assert files() - before == {"bursts.log"}
    assert not (tmp_path / "cache" / "history-spool").exists()


def test_labels_need_a_history_and_a_form(faked):
    result = faked.runpytest_inprocess(*FAKE, "--perf-label", "pool=a")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "labels are kept by the results history" in result.stderr.str()
    result = faked.runpytest_inprocess(*FAKE, "--perf-history", "h.db", "--perf-label", "no-equals")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "expected KEY=VALUE" in result.stderr.str()
    result = faked.runpytest_inprocess(*FAKE, "--perf-history", "mysql://h/db")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "unsupported URL scheme 'mysql'" in result.stderr.str()


def test_an_unreachable_history_spools_and_the_gate_stays_green(faked, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path / "cache"))
    url = "postgresql://perf:secret@127.0.0.1:1/nightly"  # nothing listens on port 1
    result = faked.runpytest_inprocess(
        *FAKE, "--perf-history", url, "--perf-history-retry", "0", "--perf-missing-baseline", "pass"
    )
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    out = result.stdout.str()
    assert "warning: perf history unusable (postgresql://perf:***@127.0.0.1:1/nightly" in out
    assert "secret" not in out
    assert "warning: no drift check" in out
    (spooled,) = (tmp_path / "cache" / "history-spool").rglob("*.json")
    assert spooled.parent == spool.folder(url)
    doc = json.loads(spooled.read_text())["document"]
    assert doc["outcome"] == "passed" and len(doc["results"]) == 1


def test_the_runs_write_waits_its_bound_while_the_server_is_full(faked, tmp_path, monkeypatch, postgres_url):
    """--perf-history-retry reaches the write: refused while every connection its role may open
    is held (the server's "too many connections", SQLSTATE 53300, as for a full server), the
    run waits, and once they are released it is written, not spooled. The role's limit lets
    this test share the session's server instead of starting one of its own."""
    import threading
    import time
    import uuid

    psycopg = pytest.importorskip("psycopg")
    import postgres_server as pg
    from psycopg import sql

    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path / "cache"))
    role = f"full_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT 2").format(sql.Identifier(role)))
        admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(role), sql.Identifier(role)))
    url = f"postgresql://{role}@127.0.0.1:{pg._server(postgres_url)[3]}/{role}"
    log = pg._server(postgres_url)[2]
    refusal = f'too many connections for role "{role}"'
    held = [psycopg.connect(url) for _ in range(2)]
    with pytest.raises(psycopg.OperationalError, match=refusal):
        psycopg.connect(url)  # full: the role's limit refuses a third

    def release_after_a_refusal() -> None:
        # The drift check reads once (refused: no drift check tonight); the next refusal is the write's.
        while log.read_text(errors="replace").count(refusal) < 3:
            time.sleep(0.02)
        for conn in held:
            conn.close()

    releasing = threading.Thread(target=release_after_a_refusal, daemon=True)
    releasing.start()
    args = ("--perf-history", url, "--perf-history-retry", "600", "--perf-missing-baseline", "pass")
    result = faked.runpytest_inprocess(*FAKE, *args)
    releasing.join(timeout=60)
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert re.search(r"perf history: run 1 \(1 burst\) written to \S+, refused \d+ times? first", out), out
    assert "warning: no drift check: perf history unusable (" in out and spool.pending(url) == []
    engine = db.open_history(url, write=False)
    assert len(db.runs(engine)) == 1
    engine.dispose()


# -- drift ---------------------------------------------------------------------------


# What _drifting_history leaves in the project: the history, the probe's record and the baseline.
DRIFT_FILES = ("perf.db", "probe.json", "baselines")


@pytest.fixture(scope="module")
def drift_built(tmp_path_factory) -> dict:
    """Each drifting history, built once for the module's tests and copied into each project:
    every test then appends its own run to a history of its own."""
    return {"folder": tmp_path_factory.mktemp("drift-built")}


def _drifting_history(faked, monkeypatch, built, nights: int = 25, drift_nights: int = 9) -> None:
    """``nights`` flat nights, then ``drift_nights`` each 3% slower than the one before; tonight
    (the fake burst, 100 img/s) is the next 3% down. Built once a module (``built``), copied after."""
    template = built["folder"] / f"{nights}-{drift_nights}"
    if (nights, drift_nights) not in built:
        _build_drifting_history(faked, monkeypatch, built, nights, drift_nights)
        template.mkdir()
        for name in DRIFT_FILES:
            (shutil.copytree if (faked.path / name).is_dir() else shutil.copyfile)(faked.path / name, template / name)
        built[(nights, drift_nights)] = template
    else:
        for name in DRIFT_FILES:
            shutil.rmtree(faked.path / name, ignore_errors=True)
            (shutil.copytree if (template / name).is_dir() else shutil.copyfile)(template / name, faked.path / name)
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "100")


def _build_drifting_history(faked, monkeypatch, built, nights: int, drift_nights: int) -> None:
    # The probe (the fake burst's key and fingerprint) is the same for every history: run once.
    if "probe" not in built:
        first = faked.runpytest_inprocess(*FAKE, "--perf-missing-baseline", "pass", "--perf-json", "probe.json")
        first.assert_outcomes(passed=1)
        built["probe"] = (faked.path / "probe.json").read_text()
    (faked.path / "probe.json").write_text(built["probe"])
    probe = json.loads(built["probe"])
    (row,) = probe["results"]
    fingerprint = probe["run"]["fingerprints"]["cpu"]["id"]
    engine = _history(faked)
    level = 100.0 / 0.97 ** (drift_nights + 1)
    levels = [level] * nights + [level * 0.97**k for k in range(1, drift_nights + 1)]
    for day, ips in enumerate(levels):
        noisy = ips * (1 + 0.004 * ((day * 7) % 5 - 2))  # a little wander, the same every time
        db.write_run(engine, run_doc(noisy, day=day, key=row["key"], fingerprint=fingerprint, commit=f"n{day}"))
    engine.dispose()
    # Yesterday's level as the baseline: tonight is 3% below it, inside the 10% tolerance.
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", f"{levels[-1]:.3f}")
    faked.runpytest_inprocess(*FAKE, "--perf-save-baseline").assert_outcomes(passed=1)


def test_drift_fails_a_run_the_baseline_passes(faked, monkeypatch, drift_built):
    _drifting_history(faked, monkeypatch, drift_built)
    result = faked.runpytest_inprocess(
        *FAKE,
        *NODE_A,
        "--perf-history",
        "perf.db",
        "--perf-drift",
        "fail",
        "--perf-json",
        "r.json",
        "--perf-report",
        "report",
    )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    line = next(x for x in out.splitlines() if "drift: torch cifar10 on 1 CPU worker" in x)
    assert "in the last 14 runs, beyond the 10% tolerance" in line and "at 2026-01-2" in line and "commit n2" in line
    assert "this run 100 img/s, -26.3% against the level before" in line
    # the commits on either side of the change, as the bisect that would pin it down
    assert re.search(
        r"; to find the commit: python -m perfsuite bisect n\d+ n\d+ torch/cifar10/\S+ --min-change 0\.\d\d]$", line
    )
    assert "regression:" not in out
    (row,) = json.loads((faked.path / "r.json").read_text())["results"]
    assert row["verdict"] == "pass" and row["change"] > -0.10  # the fixed baseline passed tonight
    assert row["drift"]["change"] < -0.10 and row["drift_runs"] == 25 + 9 + 1
    assert all(0 <= p["runs_ago"] < 14 for p in row["drift"]["change_points"])
    assert list((faked.path / "report").glob("trend-*.png"))
    report = (faked.path / "report" / "report.md").read_text()
    assert "trend-" in report and "in the last 14 runs, beyond the 10% tolerance" in report
    # The failed night is in the history too.
    assert db.runs(_history(faked))[0]["outcome"] == "failed"


def test_drift_failing_without_a_baseline_reports_the_same_lines_as_with_one(faked, monkeypatch, drift_built):
    """--perf-drift fail and --perf-fleet-check fail on a drifting, slow node: every failing line,
    whether or not the key has a baseline entry (the drift once failed the test alone without
    one, and went unsaid with one)."""
    import datetime

    _drifting_history(faked, monkeypatch, drift_built)
    key = json.loads((faked.path / "probe.json").read_text())["results"][0]["key"]
    fingerprint = json.loads((faked.path / "probe.json").read_text())["run"]["fingerprints"]["cpu"]["id"]
    engine = _history(faked)
    now = datetime.datetime.now(datetime.UTC)
    for i, node in enumerate(("peer-1", "peer-2", "peer-3")):  # the peers run 30% faster tonight
        when = (now - datetime.timedelta(hours=3, minutes=i)).isoformat()
        db.write_run(engine, run_doc(130.0 + i, key=key, fingerprint=fingerprint, node=node, host=node, date=when))
    engine.dispose()
    argv = [*FAKE, *NODE_A, "--perf-history", "perf.db", "--perf-drift", "fail", "--perf-fleet-check", "fail"]

    def failing_lines(*extra):
        result = faked.runpytest_inprocess(*argv, *extra)
        result.assert_outcomes(failed=1)
        out = result.stdout.str()
        message = out.split("= FAILURES =", 1)[1].split("= perfsuite =", 1)[0]
        return [line.split(": ", 1)[0] for line in message.splitlines() if line.startswith(("drift:", "fleet check:"))]

    with_entry = failing_lines()
    for path in (faked.path / "baselines").glob("*.json"):
        path.unlink()
    without = failing_lines("--perf-missing-baseline", "pass")
    assert with_entry == without == ["drift", "fleet check"]


def test_drift_warns_by_default(faked, monkeypatch, drift_built):
    _drifting_history(faked, monkeypatch, drift_built)
    result = faked.runpytest_inprocess(*FAKE, *NODE_A, "--perf-history", "perf.db")
    result.assert_outcomes(passed=1, warnings=1)
    assert "PerfWarning: drift: torch cifar10 on 1 CPU worker" in result.stdout.str()


def test_without_otava_the_run_is_recorded_and_the_drift_check_says_why(faked, monkeypatch, drift_built):
    """The history extra without Apache Otava (installed apart, without its pins): the run is
    written, the report keeps the trend, and the drift check and change points say in one line
    what they need."""
    _drifting_history(faked, monkeypatch, drift_built)
    monkeypatch.setitem(sys.modules, "otava", None)  # an import of Otava fails, as where it is not installed
    monkeypatch.setitem(sys.modules, "otava.analysis", None)
    result = faked.runpytest_inprocess(
        *FAKE,
        *NODE_A,
        "--perf-history",
        "perf.db",
        "--perf-drift",
        "fail",
        "--perf-json",
        "r.json",
        "--perf-report",
        "report",
    )
    result.assert_outcomes(passed=1)  # the drift that fails this run with Otava goes unseen
    out = result.stdout.str()
    (line,) = [x for x in out.splitlines() if "Apache Otava" in x]
    assert line == (
        "warning: no drift check and no change points without Apache Otava "
        "(pip install --no-deps apache-otava==0.8.0); the run is recorded all the same"
    )
    assert "perf history: run 35 (1 burst) written to sqlite:///" in out
    assert len(db.runs(_history(faked))) == 25 + 9 + 1
    (row,) = json.loads((faked.path / "r.json").read_text())["results"]
    assert row["drift"] is None and row["verdict"] == "pass"
    assert list((faked.path / "report").glob("trend-*.png"))  # the series, without change points


def test_a_flat_history_is_no_drift(faked, monkeypatch, drift_built):
    _drifting_history(faked, monkeypatch, drift_built, nights=30, drift_nights=0)
    result = faked.runpytest_inprocess(
        *FAKE, *NODE_A, "--perf-history", "perf.db", "--perf-drift", "fail", "--perf-json", "r.json"
    )
    result.assert_outcomes(passed=1)
    (row,) = json.loads((faked.path / "r.json").read_text())["results"]
    assert row["drift"] is None and row["drift_runs"] == 31


def test_drift_reads_this_nodes_runs_only(faked, monkeypatch, drift_built):
    # In a fleet's shared history the drifting series is node-a's: node-b has no drift of its
    # own (how it compares with node-a is the peer check's question, not drift's).
    _drifting_history(faked, monkeypatch, drift_built)
    result = faked.runpytest_inprocess(
        *FAKE, "--perf-node", "node-b", "--perf-history", "perf.db", "--perf-drift", "fail", "--perf-json", "r.json"
    )
    result.assert_outcomes(passed=1)
    (row,) = json.loads((faked.path / "r.json").read_text())["results"]
    assert row["drift"] is None and row["drift_runs"] == 1  # this run alone: node-b's first night


# -- options and preflight (no pytest session needed) ---------------------------------


def _options(cli: dict, table: dict, base):
    from perfsuite.config.options import resolve

    return resolve(lambda dest: cli.get(dest), table, "pyproject.toml", base)


def test_history_options_from_the_table(tmp_path):
    opts = _options(
        {},
        {
            "perf_history": "nightly/perf.db",
            "perf_labels": {"pool": "a", "image": "ngc:24.05"},
            "drift": "fail",
            "drift_window": 20,
            "perf_history_retry": 300,
        },
        tmp_path,
    )
    assert opts.perf_history == f"sqlite:///{tmp_path / 'nightly' / 'perf.db'}"  # relative to pyproject
    assert opts.perf_label == (("image", "ngc:24.05"), ("pool", "a"))
    assert (opts.drift, opts.drift_window, opts.perf_history_retry) == ("fail", 20, 300.0)
    cli = _options(
        {"perf_history": "postgresql://perf@db/nightly", "perf_label": ["pool=b"], "perf_history_retry": "0"},
        {"perf_history": "x.db", "perf_label": ["pool=a"], "perf_history_retry": 300},
        tmp_path,
    )
    assert cli.perf_history == "postgresql://perf@db/nightly" and cli.perf_label == (("pool", "b"),)
    assert cli.perf_history_retry == 0.0
    default = _options({}, {}, tmp_path)
    assert (default.perf_history, default.perf_label, default.drift, default.drift_window) == (None, (), "warn", 14)
    assert default.perf_history_retry == 60.0  # a burst of nodes at 02:00 waits a minute before it spools


@pytest.mark.parametrize(
    "cli, message",
    [
        ({"drift_window": "2"}, "--perf-drift-window: must be >= 3"),
        ({"drift": "error"}, "--perf-drift: 'error' is not one of warn, fail"),
        ({"perf_history": "sqlite://"}, "a SQLite URL needs a file"),
        ({"perf_history_retry": "-5"}, "--perf-history-retry: must be >= 0"),
        ({"perf_history_retry": "a minute"}, "--perf-history-retry: expected a number"),
    ],
)
def test_bad_history_options_are_one_line(tmp_path, cli, message):
    from perfsuite.config.options import OptionError

    with pytest.raises(OptionError, match=message):
        _options(cli, {}, tmp_path)


def test_a_history_without_its_libraries_stops_the_run_up_front(tmp_path):
    from perfsuite.plugin.preflight import PreflightError, check_history

    opts = _options({"perf_history": "postgresql://perf@db/nightly"}, {}, tmp_path)
    with pytest.raises(PreflightError, match=r"needs sqlalchemy, alembic, psycopg: pip install -e \"\.\[history\]\""):
        check_history(opts, installed=lambda name: name == "otava")
    check_history(opts, installed=lambda name: name != "otava")  # without Otava the run is recorded
    check_history(_options({"perf_history": "h.db"}, {}, tmp_path), installed=lambda name: name != "psycopg")
