"""--perf-report: the report folder from hand-made results, and the option end to end."""

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from records import judged, view, worker_record
from records import result as measured

from perfsuite.analysis import stats
from perfsuite.analysis.diagnosis import COMPUTE_BOUND, INPUT_BOUND, Diagnosis
from perfsuite.contract.spec import BurstSpec
from perfsuite.reporting import content, folder, markdown, terminal
from perfsuite.reporting.perf_json import row

pytest_plugins = ["pytester"]


def result(
    devices=1,
    location="device",
    samples=(100.0, 101.0, 99.0, 100.5, 100.2),
    verdict=None,
    baseline=None,
    scaling=None,
    scaling_verdict=None,
    utilisation=None,
    error=None,
    kind="cpu",
    **extra,
):
    spec = BurstSpec(
        "torch",
        "cifar10",
        kind,
        devices=devices,
        data_location=location,
        batch_size=64,
        image_size=24,
        steps=10,
        windows=5,
    )
    record = (
        None
        if error
        else worker_record(
            spec,
            samples,
            flops=37.3e6,
            window_seconds=(0.5,) * len(samples),
            loss_first=2.3,
            loss_last=2.1,
            framework_version="2.13.0+cpu",
            utilisation=utilisation,
            **extra,
        )
    )
    return judged(
        measured(spec, record, error),
        verdict=stats.Verdict(verdict, 0.7 if verdict == stats.REGRESSION else 1.0, 1e-4, 0.1, "test")
        if verdict
        else None,
        baseline={"images_per_sec": baseline, "scaling_efficiency": 0.98} if baseline else None,
        scaling=scaling,
        interval=(scaling - 0.05, scaling + 0.05) if scaling else None,
        scaling_verdict=stats.Verdict(scaling_verdict, None, None, 0.1, "test") if scaling_verdict else None,
    )


SERIES = {
    "t": [0.0, 0.1, 0.2, 0.3],
    "cpu_percent": [50.0, 90.0, 95.0, float("nan")],
    "per_core": [[40, 60], [90, 90], [95, 95], [0, 0]],
    "rss_bytes": [1, 2, 3, 4],
    "gpus": [],
}
UTIL = {
    "cpu": {"percent_mean": 78.3, "percent_p95": 95.0, "per_core_mean": [75, 81], "busy_cores_mean": 1.3, "cores": 2},
    "rss_bytes": {"mean": 2.5, "p95": 4, "max": 4},
    "gpus": [],
    "series": SERIES,
}


class Run:
    """A run of these bursts, as the reports see it."""

    def __init__(self, folder, results):
        self.folder, self.results = folder, list(results)

    def view(self, command=()):
        return view(self.folder, *self.results, command=command)


def session(tmp_path, *results):
    return Run(tmp_path, results)


def perf_run(folder):
    return session(
        folder,
        result(1, verdict="pass", baseline=101.0, utilisation=UTIL),
        result(
            2,
            samples=(140, 141, 139, 142, 138),
            verdict="regression",
            baseline=198.0,
            scaling=0.70,
            scaling_verdict="regression",
        ),
        result(1, "host", samples=(90, 91, 92, 89, 90), verdict="improvement", baseline=70.0),
        result(2, "host", error="burst worker killed by SIGKILL (out of host memory?)"),
    )


@pytest.fixture
def perf(tmp_path):
    return perf_run(tmp_path)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """perf_run's report, written once (its plots cost a second) for the tests that read it: into a
    folder an earlier report left plots in, with a step summary that holds an earlier step's."""
    base = tmp_path_factory.mktemp("written")
    out, summary = base / "rep", base / "summary.md"
    (out / "utilisation").mkdir(parents=True)
    (out / "scaling-tf-vgg16.png").write_bytes(b"old")
    (out / "utilisation" / "old.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    summary.write_text("earlier step\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(folder.STEP_SUMMARY, str(summary))
        lines = folder.write_report(out, perf_run(base).view(["tests_perf", "--perf-report", str(out)]))
    return SimpleNamespace(out=out, lines=lines, summary=summary)


def test_folder_has_every_file(written):
    out, lines = written.out, written.lines
    assert lines[0] == f"report: {out / 'report.html'}"
    names = {p.relative_to(out).as_posix() for p in out.rglob("*")}
    assert {
        "results.json",
        "report.md",
        "report.html",
        "scaling-torch-cifar10.png",
        "data-locations-torch-cifar10.png",
        "utilisation",
    } <= names
    util = [n for n in names if n.startswith("utilisation/")]
    assert sorted(Path(n).suffix for n in util) == [".json", ".png"]
    data = json.loads((out / util[0] if util[0].endswith(".json") else out / util[1]).read_text())
    assert data["series"]["cpu_percent"][-1] is None  # NaN became null
    assert len(json.loads((out / "results.json").read_text())["results"]) == 4
    for png in out.rglob("*.png"):
        assert png.read_bytes().startswith(b"\x89PNG")
    assert not list(out.rglob(".*.tmp"))


def test_markdown_calls_out_regressions_first_and_marks_the_row(written):
    md = (written.out / "report.md").read_text()
    head, _, table = md.partition("## Results")
    assert "**REGRESSION** torch cifar10 on 2 CPU workers" in head
    assert "**SCALING REGRESSION**" in head and "**BURST FAILED**" in head and "SIGKILL" in head
    assert head.index("BURST FAILED") < head.index("IMPROVEMENT")
    row = next(line for line in table.splitlines() if "| 2 CPU | device |" in line)
    assert "🔴 **REGRESSION**" in row and "-30.0%" in row
    assert "| 140 |" in row and "| 198 |" in row and "70.0% (65.0%-75.0%)" in row
    assert "| 0.0157 |" in row  # 3 x 37.3 MFLOP x 140 img/s
    header = table.splitlines()[2]
    assert "TFLOP/s" in header and "CPU % (mean)" in header
    assert "GPU util" not in header and "MFU" not in header  # no burst on a GPU: no column
    assert "78%" in md
    for fact in ("**date**", "**hardware (cpu)**", "**frameworks**: torch 2.13.0+cpu"):
        assert fact in md
    assert "](scaling-torch-cifar10.png)" in md


def test_html_is_self_contained_and_coloured(written):
    page = (written.out / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page and "<script" not in page
    srcs = re.findall(r'<img src="([^"]+)"', page)
    assert len(srcs) == 3 and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert '<tr class="regression">' in page and '<tr class="improvement">' in page
    assert "#c62828" in page and "#e8f5e9" in page  # red and green in the inline CSS


def test_step_summary_is_appended(written):
    text = written.summary.read_text()
    assert text.startswith("earlier step\n# perfsuite report")
    assert "🔴 **REGRESSION**" in text and "report.html" in text
    assert ".png)" not in text  # images would not resolve in a step summary


def test_stale_plots_of_an_earlier_report_go(written):
    out = written.out
    assert not (out / "scaling-tf-vgg16.png").exists() and not (out / "utilisation" / "old.json").exists()
    assert (out / "notes.txt").read_text() == "mine"


def test_unwritable_folder_raises_oserror(perf, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError):
        folder.write_report(blocker / "rep", perf.view())


def test_missing_figures_stay_missing():
    rec = row(result(1))
    columns, rows = content.table([rec])
    cells = dict(zip(columns, rows[0][1]))
    assert cells["baseline"] == "-" and cells["change"] == "-" and cells["verdict"] == "measured"
    assert "MFU" not in columns and "scaling eff (95% CI)" not in columns


def test_how_bursts_started_is_a_column_only_where_a_run_has_both():
    warm, fresh = dict(row(result(1)), start="warm"), dict(row(result(2)), start="fresh")
    assert "start" not in content.table([warm, dict(warm)])[0]
    columns, rows = content.table([warm, fresh])
    assert [dict(zip(columns, cells))["start"] for _, cells in rows] == ["warm", "fresh"]


def test_gpu_columns():
    gpu_util = {
        "cpu": {"percent_mean": 12.0},
        "gpus": [
            {"index": 0, "util_percent": {"mean": 97.0, "p95": 99.0}},
            {"index": 1, "util_percent": {"mean": 93.0}},
        ],
    }
    rec = row(result(2, kind="cuda", samples=(5000.0,) * 5, device_name="NVIDIA H100 80GB HBM3", utilisation=gpu_util))
    columns, rows = content.table([rec])
    cells = dict(zip(columns, rows[0][1]))
    assert cells["GPU util (mean)"] == "95%" and cells["CPU % (mean)"] == "12%"
    assert re.fullmatch(r"[0-9.]+% \((fp32|tf32)\)", cells["MFU"]) and cells["devices"] == "2 GPU"


def test_empty_run_still_reports(tmp_path):
    report = content.build([], [("date", "today")])
    assert "No bursts ran." in markdown.document(report)


def test_the_diagnoses_the_findings_carry_are_listed(tmp_path):
    """The report lists what the cases' diagnoses said, healthy bursts included, each line once,
    and diagnoses nothing itself."""
    spec_key = "torch/cifar10/cpu1/nodes1/host/bs64/img24/fp32/threads1"
    slow = Diagnosis(spec_key, INPUT_BOUND, "cifar10-cpu1-host: input-bound — the host copy takes 40% of the step")
    healthy = Diagnosis(spec_key, COMPUTE_BOUND, "cifar10-cpu1-device: compute-bound — 2 cores busy", flagged=False)
    bursts = [
        judged(result(1, "host"), diagnosis=(slow,)),
        judged(result(1), diagnosis=(healthy,)),
        judged(result(2, "host"), diagnosis=(slow,)),  # the same line twice: shown once
    ]
    folder.write_report(tmp_path / "rep", session(tmp_path, *bursts).view())
    md = (tmp_path / "rep" / "report.md").read_text()
    findings = md.partition("## Findings")[2]
    assert findings.count("the host copy takes 40% of the step") == 1 and "2 cores busy" in findings
    tr = Writer()
    terminal.terminal_summary(tr, session(tmp_path, *bursts).view())
    assert [x for x in tr.lines if x.startswith("diagnosis: ")] == [f"diagnosis: {slow.text}"]  # the flagged one
    rows = json.loads((tmp_path / "rep" / "results.json").read_text())["results"]
    assert rows[0]["diagnosis"] == [{"kind": INPUT_BOUND, "text": slow.text, "flagged": True}]


def test_without_diagnoses_or_matplotlib_the_report_says_so(perf, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    lines = folder.write_report(tmp_path / "rep", perf.view())
    assert any("plots left out: matplotlib is not installed" in line for line in lines)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "nothing stood out" in md and "## Results" in md
    assert not list((tmp_path / "rep").glob("*.png"))


class Writer:
    def __init__(self):
        self.lines = []

    def write_sep(self, sep, title):
        self.lines.append(f"== {title} ==")

    def write_line(self, line, **kw):
        self.lines.append(line)


# -- the option, end to end -------------------------------------------------------------

INJECT = """
from perfsuite.analysis.measurement import Measurement
from perfsuite.plugin.hooks import SESSION
from perfsuite.plugin.session import Burst
from perfsuite.contract.spec import BurstSpec
from records import worker_record

def pytest_sessionstart(session):
    perf = session.config.stash[SESSION]
    spec = BurstSpec("torch", "cifar10", "cpu", devices=1, batch_size=64, image_size=24, steps=10, windows=5)
    perf.bursts[spec] = Burst(Measurement.of(spec, worker_record(spec, [10.0, 11.0, 12.0, 11.5, 10.5])), spec.key())
"""


@pytest.fixture
def injected(pytester):
    pytester.makeconftest(INJECT)
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    return pytester


def test_option_writes_the_folder(injected):
    result = injected.runpytest("--perf-report", "rep", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert result.ret == 0
    rep = injected.path / "rep"
    assert (rep / "report.html").is_file() and (rep / "results.json").is_file()
    assert f"report: {rep / 'report.html'}" in result.stdout.str()


def test_unwritable_folder_is_a_message_and_a_failing_status(injected):
    (injected.path / "blocker").write_text("")
    result = injected.runpytest("--perf-report", "blocker/rep", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert result.ret == 1
    out = result.stdout.str()
    assert "--perf-report: cannot write" in out and "Traceback" not in out and "INTERNALERROR" not in out


def test_folder_that_is_a_file_is_a_usage_error(pytester):
    (pytester.path / "taken").write_text("")
    result = pytester.runpytest("--perf-report", "taken")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--perf-report" in result.stderr.str() and "not a directory" in result.stderr.str()


def test_option_from_pyproject(injected):
    injected.makepyprojecttoml('[tool.perfsuite]\nperf_report = "from-table"\n')
    injected.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert (injected.path / "from-table" / "report.md").is_file()


def test_help_lists_the_option_and_plotting_stays_unimported(pytester):
    assert "--perf-report=DIR" in pytester.runpytest("--help").stdout.str()
    code = "import sys, perfsuite.plugin.hooks, perfsuite.reporting; sys.exit('matplotlib' in sys.modules)"
    assert pytester.run(sys.executable, "-c", code).ret == 0


def test_the_baseline_trend_shows_the_entrys_past_saves(tmp_path):
    r = result(1, verdict="pass", baseline=101.0)
    r.baseline["history"] = [{"images_per_sec": 90.0}, {"images_per_sec": 95.5}]  # the entry, as read
    plain = result(1, "host", verdict="pass", baseline=99.0)
    columns, rows = content.table([row(r), row(plain)])
    col = columns.index("baseline trend")
    cells = {row[columns.index("data location")]: row[col] for _, row in rows}
    assert cells == {"device": "90 → 95.5 → 101", "host": "99"}
    # no entry with a past save: no column
    assert "baseline trend" not in content.table([row(plain)])[0]


def test_perf_json_names_its_schema_and_the_run(injected):
    injected.runpytest("--perf-json", "r.json", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    doc = json.loads((injected.path / "r.json").read_text())
    assert doc["schema_version"] == 8 and "interrupted" not in doc
    run = doc["run"]
    assert set(run) == {
        "date",
        "host",
        "python",
        "git_commit",
        "fingerprints",
        "frameworks",
        "driver",
        "cuda",
        "command",
        "interrupted",
        "cudnn",
        "nccl",
        "container",
        "labels",
        "node",
    }
    assert run["command"][:4] == ["--perf-json", "r.json", "-p", "no:cacheprovider"] and run["interrupted"] is False
    assert run["fingerprints"]["cpu"]["id"].startswith("cpu-") and run["frameworks"] == {"torch": "test"}
    assert [r["key"] for r in doc["results"]] == ["torch/cifar10/cpu1/nodes1/device/bs64/img24/fp32/threads1"]
