"""The figures as Prometheus metrics: ``--perf-openmetrics FILE`` and ``history fleet
--openmetrics FILE``, each file read back with prometheus-client's OpenMetrics parser."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from suite_files import FAKE_ARGS, faked_project

pytest.importorskip("prometheus_client")

from prometheus_client.openmetrics.parser import text_string_to_metric_families  # noqa: E402

from perfsuite.reporting import openmetrics  # noqa: E402
from perfsuite.reporting.openmetrics import KeyFigures  # noqa: E402

pytest_plugins = ["pytester"]

KEY = "torch/resnet50/cuda8/nodes1/device/bs64/img224/fp32"


def samples(path: Path) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """metric -> (its labels, sorted) -> value, parsed as OpenMetrics (which requires the # EOF)."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(path.read_text()):
        assert family.type == "gauge", family.name
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def labels(**given: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(given.items()))


# --- the file ---------------------------------------------------------------------------------


def test_the_file_has_each_figure_once_under_its_labels(tmp_path):
    path = tmp_path / "perf.prom"
    figures = [
        KeyFigures('a/"quoted"\\key', "n1", "gpu-x", 1234.5, 0.85, openmetrics.BASELINE, "regression"),
        KeyFigures("b", "n1", None, None, None, openmetrics.BASELINE, "error"),
    ]
    openmetrics.write(path, figures, {("n1", "gpu-x"): True, ("n2", None): False})
    text = path.read_text()
    assert text.endswith("# EOF\n")
    found = samples(path)
    one = labels(key='a/"quoted"\\key', node="n1", fingerprint="gpu-x")
    assert found["perfsuite_images_per_second"] == {one: 1234.5}
    assert found["perfsuite_change_ratio"] == {(*one, ("reference", "baseline")): 0.85}
    assert found["perfsuite_verdict"] == {one: 1, labels(key="b", node="n1", fingerprint="-"): 5}
    assert found["perfsuite_fleet_flagged"] == {
        labels(node="n1", fingerprint="gpu-x"): 1,
        labels(node="n2", fingerprint="-"): 0,
    }
    assert '"' not in "".join(line for line in text.splitlines() if line.startswith("# HELP"))


def test_a_runs_rows_give_its_figures_and_the_fleet_checks_flag():
    run = {"node": "n1", "host": "pod", "fingerprints": {"cpu": {"id": "cpu-x"}, "gpu": {"id": "gpu-x"}}}
    fleet = {"verdict": {"flagged": True}}
    rows = [
        {"key": "a", "device_kind": "cuda", "images_per_sec": 90.0, "change": -0.1, "verdict": "pass", "fleet": fleet},
        {"key": "b", "device_kind": "cuda", "images_per_sec": 50.0, "verdict": None, "saved": True, "fleet": None},
        {"key": "c", "device_kind": "cpu", "images_per_sec": None, "verdict": "error"},
    ]
    keys, flagged = openmetrics.from_results(run, rows)
    assert keys == [
        KeyFigures("a", "n1", "gpu-x", 90.0, pytest.approx(0.9), openmetrics.BASELINE, "pass"),
        KeyFigures("b", "n1", "gpu-x", 50.0, None, openmetrics.BASELINE, "saved"),
        KeyFigures("c", "n1", "cpu-x", None, None, openmetrics.BASELINE, "error"),
    ]
    assert flagged == {("n1", "gpu-x"): True}


TOKEN_KEY = "torch/gpt2/cuda8/nodes1/device/bs8/seq1024/bf16"


def test_a_token_models_throughput_is_its_own_metric_in_tokens_per_second(tmp_path):
    """One unit per metric name: a token key's figure goes to perfsuite_tokens_per_second, never
    into perfsuite_images_per_second; the ratio and the verdict have no unit and are shared."""
    run = {"node": "n1", "fingerprints": {"gpu": {"id": "gpu-x"}}}
    rows = [
        {"key": TOKEN_KEY, "device_kind": "cuda", "tokens_per_sec": 250_000.0, "change": -0.2, "verdict": "regression"},
        {"key": KEY, "device_kind": "cuda", "images_per_sec": 600.0, "change": 0.0, "verdict": "pass"},
    ]
    keys, _ = openmetrics.from_results(run, rows)
    assert [k.throughput for k in keys] == [250_000.0, 600.0]
    path = tmp_path / "perf.prom"
    openmetrics.write(path, keys, {})
    found = samples(path)
    token, image = (labels(key=k, node="n1", fingerprint="gpu-x") for k in (TOKEN_KEY, KEY))
    assert found["perfsuite_tokens_per_second"] == {token: 250_000.0}
    assert found["perfsuite_images_per_second"] == {image: 600.0}
    assert found["perfsuite_change_ratio"] == {
        (*token, ("reference", "baseline")): pytest.approx(0.8),
        (*image, ("reference", "baseline")): 1.0,
    }
    assert set(found["perfsuite_verdict"]) == {token, image}
    # a file of image models alone has no token metric, as before token models
    openmetrics.write(path, [KeyFigures(KEY, "n1", "gpu-x", 600.0)], {})
    assert "tokens_per_second" not in path.read_text()


def test_a_failure_while_writing_leaves_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "perf.prom"
    openmetrics.write(path, [KeyFigures("k", "n", "fp", 100.0)], {})
    before = path.read_bytes()

    def fails(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("perfsuite.common.files.os.replace", fails)
    with pytest.raises(OSError):
        openmetrics.write(path, [KeyFigures("k", "n", "fp", 50.0)], {})
    monkeypatch.undo()
    monkeypatch.setattr(openmetrics, "VERDICT_CODES", None)  # rendering fails half-way
    with pytest.raises(TypeError):
        openmetrics.write(path, [KeyFigures("k", "n", "fp", 50.0, verdict="pass")], {})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["perf.prom"]  # no temporary file left behind


def test_the_file_is_readable_by_others_as_a_plain_file_would_be(tmp_path):
    """The temporary file starts private (0600); node_exporter runs as another user."""
    path = tmp_path / "perf.prom"
    openmetrics.write(path, [KeyFigures("k", "n", "fp", 100.0)], {})
    probe = tmp_path / "plain"
    probe.write_text("")
    assert path.stat().st_mode & 0o777 == probe.stat().st_mode & 0o777


def test_the_plugin_imports_prometheus_client_only_to_write():
    code = "import sys, perfsuite.plugin.hooks; sys.exit(1 if 'prometheus_client' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# --- --perf-openmetrics ---------------------------------------------------------------------


def test_perf_openmetrics_writes_the_runs_figures_when_a_test_fails(pytester, monkeypatch):
    project = faked_project(pytester)
    project.runpytest_inprocess(*FAKE_ARGS, "--perf-save-baseline").assert_outcomes(passed=1)
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "50")
    args = [*FAKE_ARGS, "--perf-node", "gpu-node-01", "--perf-json", "r.json", "--perf-openmetrics", "m/perf.prom"]
    result = project.runpytest_inprocess(*args)
    result.assert_outcomes(failed=1)
    assert "metrics: " in result.stdout.str()
    results = json.loads((project.path / "r.json").read_text())
    (key,) = [r["key"] for r in results["results"]]
    found = samples(project.path / "m" / "perf.prom")
    one = labels(key=key, node="gpu-node-01", fingerprint=results["run"]["fingerprints"]["cpu"]["id"])
    assert found["perfsuite_images_per_second"] == {one: 50.0}
    assert found["perfsuite_change_ratio"] == {(*one, ("reference", "baseline")): pytest.approx(0.5)}
    assert found["perfsuite_verdict"] == {one: openmetrics.VERDICT_CODES["regression"]}
    assert "perfsuite_fleet_flagged" not in found  # no --perf-fleet-check: the node was not judged


@pytest.mark.parametrize(
    "where, says",
    [
        ("{dir}", "is a directory, not a file"),
        ("{file}/perf.prom", "cannot write"),
    ],
)
def test_a_path_that_cannot_be_written_is_one_usage_error(pytester, where, says):
    project = faked_project(pytester)
    plain = project.path / "plain"
    plain.write_text("")
    target = where.format(dir=project.path, file=plain)
    result = project.runpytest_inprocess(*FAKE_ARGS, "--perf-missing-baseline", "pass", "--perf-openmetrics", target)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and "--perf-openmetrics" in errors[0] and says in errors[0], result.stderr.str()
    assert not (project.path / "bursts.log").exists()  # refused before any burst


# --- history fleet --openmetrics ------------------------------------------------------------

START = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
FINGERPRINT = "gpu-h100-sxm-80gb-x8"
NODES = ("node-a", "node-b", "node-c", "node-d", "node-e")
SLOW, GONE = "node-d", "node-e"
RATES = {"node-a": 1000.0, "node-b": 1010.0, "node-c": 990.0, "node-d": 600.0, "node-e": 1000.0}


def _fleet(url: str, nights: int = 3) -> None:
    """Five nodes of one key; node-d 40% slow (a regression against its baseline) every night,
    node-e absent on the last night."""
    pytest.importorskip("sqlalchemy")
    from perfsuite.history import db

    engine = db.open_history(url)
    try:
        for night in range(nights):
            for i, node in enumerate(NODES):
                if node == GONE and night == nights - 1:
                    continue
                ips = RATES[node] * (1 + 0.002 * night)
                row = {
                    "key": KEY,
                    "device_kind": "cuda",
                    "images_per_sec": ips,
                    "ci_low": ips * 0.99,
                    "ci_high": ips * 1.01,
                    "runs": 1,
                    "verdict": "regression" if node == SLOW else "pass",
                    "change": ips / 1000.0 - 1,
                }
                run = {
                    "date": (START + timedelta(days=night, minutes=5 * i)).isoformat(),
                    "host": node,
                    "node": node,
                    "python": "3.11",
                    "fingerprints": {"cpu": {"id": "cpu-x"}, "gpu": {"id": FINGERPRINT}},
                    "labels": {},
                }
                doc = {"uuid": uuid.uuid4().hex, "mode": "gate", "outcome": "passed", "source": "run"}
                db.write_run(engine, {**doc, "run": run, "results": [row]})
    finally:
        engine.dispose()


def test_history_fleet_writes_each_nodes_figures_and_flags(tmp_path, capsys):
    from perfsuite.commands.main import main

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    _fleet(url)
    path = tmp_path / "fleet.prom"
    at = (START + timedelta(days=2, hours=1)).isoformat()
    rc = main(["history", "fleet", "--history", url, "--at", at, "--openmetrics", str(path), "--limit", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and f"metrics: {path}" in out
    found = samples(path)
    on = {node: labels(key=KEY, node=node, fingerprint=FINGERPRINT) for node in NODES}
    tonight = {node: RATES[node] * 1.004 for node in NODES if node != GONE}
    # every node's figure, not only the --limit rows the table shows
    assert found["perfsuite_images_per_second"] == {on[n]: pytest.approx(v) for n, v in tonight.items()}
    median = sorted(tonight.values())[len(tonight) // 2 - 1 : len(tonight) // 2 + 1]
    centre = sum(median) / 2
    assert found["perfsuite_change_ratio"] == {
        (*on[n], ("reference", "peers")): pytest.approx(v / centre) for n, v in tonight.items()
    }
    assert found["perfsuite_verdict"] == {on[n]: 1 if n == SLOW else 0 for n in tonight}
    flags = {dict(k)["node"]: v for k, v in found["perfsuite_fleet_flagged"].items()}
    assert flags == {"node-a": 0, "node-b": 0, "node-c": 0, "node-d": 1, "node-e": 1}  # slow; did not report


def test_history_fleet_cannot_write_is_one_line(tmp_path, capsys):
    from perfsuite.commands.main import main

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    _fleet(url)
    at = (START + timedelta(days=2, hours=1)).isoformat()
    rc = main(["history", "fleet", "--history", url, "--at", at, "--openmetrics", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "--openmetrics" in err, err


def test_the_guide_lists_every_verdict_code():
    page = (Path(__file__).resolve().parent.parent / "docs" / "guide" / "metrics.md").read_text()
    for name, code in openmetrics.VERDICT_CODES.items():
        assert f"| {code} | {name}" in page, name
    for name, text in openmetrics.HELP.items():  # the sample file's help lines are the code's
        assert f"# HELP perfsuite_{name} {text}\n" in page, name
