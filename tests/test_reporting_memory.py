"""Peak memory and attribution where results are read: the terminal table, pytest-benchmark's
extra_info, report.md, report.html and the step summary."""

import gzip
from dataclasses import replace

import pytest
from records import judged, pooled, view, worker_record
from records import result as measured

from perfsuite.analysis import stats
from perfsuite.analysis.attribution import attribute
from perfsuite.analysis.memory import compare_memory
from perfsuite.contract.op_profile import OpProfile, OpTime
from perfsuite.contract.spec import BurstSpec
from perfsuite.plugin.benchmark import _extra_info
from perfsuite.reporting import content, folder, markdown, terminal
from perfsuite.reporting.perf_json import row
from perfsuite.reporting.view import RunView

GIB = 2**30
# ms per step of a small CPU profile; the regressed burst's matmul grew by 40 ms.
OPS = {
    "aten::convolution_backward": 28.6,
    "aten::mkldnn_convolution": 13.6,
    "aten::avg_pool3d": 11.0,
    "aten::pow": 7.3,
    "aten::mm": 3.0,
    "aten::addmm": 1.5,
    "aten::add_": 1.2,
    "aten::copy_": 1.0,
}
SLOWER_MM = {**OPS, "aten::mm": 43.0}
TRACE = b'{"traceEvents": []}'


def profile(ops: dict[str, float]) -> OpProfile:
    return OpProfile(
        "test",
        (sum(ops.values()),) * 3,
        tuple(OpTime(n, "op", (ms,) * 3, 1.0) for n, ms in ops.items()),
        0.05,
        (0.1,) * 3,
    )


def burst(
    devices=1,
    *,
    ips=70.0,
    verdict=stats.REGRESSION,
    peaks=(int(1.38 * GIB),),
    base_peak=GIB,
    now=None,
    trace=None,
    note=None,
):
    """A gated burst: its throughput verdict, its peak memory against ``base_peak`` and, with a
    ``now`` op profile, its attribution against OPS."""
    spec = BurstSpec("torch", "cifar10", "cpu", devices=devices, batch_size=64, image_size=24, steps=10, windows=5)
    record = worker_record(
        spec,
        (ips,) * 5,
        peak_memory_bytes=peaks[0],
        op_profile=profile(now).as_dict() if now else None,
        trace_file=str(trace) if trace else None,
    )
    # A confirming rerun, pooled, for each peak after the first.
    r = pooled(
        measured(spec, record),
        *(measured(spec, worker_record(spec, (ips,) * 5, peak_memory_bytes=p)) for p in peaks[1:]),
    )
    return judged(
        r,
        verdict=stats.Verdict(verdict, ips / 100.0, 1e-4, 0.1, "test"),
        baseline={"images_per_sec": 100.0, "peak_memory_bytes": base_peak},
        memory=compare_memory(r.run_peaks, base_peak, 0.1),
        attribution=attribute(profile(OPS), r.op_profile, 100.0, 100.0 * 100.0 / ips) if now else None,
        note=note,
    )


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "burst" / "trace.json.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(TRACE))
    return path


class Run:
    """A run of these bursts, as the reports see it."""

    def __init__(self, folder, results):
        self.folder, self.results = folder, list(results)

    def view(self):
        return view(self.folder, *self.results)


@pytest.fixture
def perf(tmp_path, trace):
    return Run(
        tmp_path,
        (
            burst(1, now=SLOWER_MM, trace=trace),
            burst(
                2,
                ips=100.0,
                verdict=stats.PASS,
                peaks=(GIB // 2,),
                base_peak=GIB // 2,
                note="the baseline entry has no op profile: refresh it with --perf-save-baseline",
            ),
        ),
    )


# -- the terminal table ---------------------------------------------------------------------


def test_the_table_has_a_peak_memory_column_and_shows_a_memory_regression_in_the_verdict(perf):
    lines = terminal.table(terminal.rows(perf.view()))
    header = lines[0].split("  ")
    assert [h.strip() for h in header if h.strip()][-2:] == ["peak mem", "verdict"]
    one, two = (next(line for line in lines if f"/cpu{n}/" in line) for n in (1, 2))
    assert "  1.38 GiB  " in one and one.endswith("REGRESSION, memory REGRESSION +38.0%")
    assert "  512 MiB  " in two and two.endswith("pass")  # a passing peak adds nothing to the verdict
    # The peak sits under its header, right-aligned as the other figures are.
    assert lines[0].index("peak mem") + len("peak mem") == one.index("1.38 GiB") + len("1.38 GiB")


@pytest.mark.parametrize(
    ("peaks", "shown"),
    [
        # the rerun's peak is back within the tolerance: not every burst is beyond it
        ((int(1.38 * GIB), GIB), "pass (2 runs), memory INCONCLUSIVE +19.0%"),
        ((GIB // 2,), "pass, memory improvement -50.0%"),
    ],
)
def test_an_inconclusive_or_smaller_peak_is_marked_too(peaks, shown):
    r = burst(ips=100.0, verdict=stats.PASS, peaks=peaks)
    view = RunView(run=None, results=(r,), rows=(("t.py::test_throughput", "throughput", r),))
    assert terminal.table(terminal.rows(view))[1].endswith(shown)


def test_a_scaling_row_and_a_burst_without_a_peak_show_no_memory():
    r = replace(burst(peaks=(0,)), throughput_case=replace(burst(peaks=(0,)).throughput_case, memory=None))
    scaled = burst()
    view = RunView(
        run=None,
        results=(r, scaled),
        rows=(("t.py::test_throughput", "throughput", r), ("t.py::test_scaling", "scaling", scaled)),
    )
    throughput, scaling = terminal.table(terminal.rows(view))[1:]
    assert throughput.endswith("-  REGRESSION")
    assert "1.38 GiB" in scaling and "memory" not in scaling  # memory is gated with throughput, not scaling


# -- pytest-benchmark's extra_info --------------------------------------------------------------


def test_extra_info_carries_peak_memory_its_verdict_and_the_top_mover(perf):
    regressed, passed = sorted(perf.results, key=lambda r: r.spec.devices)
    info = _extra_info(regressed, row(regressed))
    assert info["peak_memory_bytes"] == int(1.38 * GIB) and info["baseline_peak_memory_bytes"] == GIB
    assert info["memory_change"] == pytest.approx(0.38, abs=1e-3) and info["memory_verdict"] == stats.REGRESSION
    assert info["memory_tolerance"] == 0.1
    assert info["attribution"] == "attributed"
    assert (info["top_mover"], info["top_mover_family"]) == ("aten::mm", "matmul")
    assert info["top_mover_delta_ms"] == pytest.approx(40.0)
    plain = _extra_info(passed, row(passed))
    assert plain["memory_verdict"] == stats.PASS and "attribution" not in plain and "top_mover" not in plain


# -- the report --------------------------------------------------------------------------------


def trace_path(perf) -> str:
    regressed = next(r for r in perf.results if r.spec.devices == 1)
    return folder.trace_name(regressed.id)


def test_report_md_lists_the_memory_regression_the_peak_column_and_the_attribution(perf, tmp_path, monkeypatch):
    monkeypatch.delenv(folder.STEP_SUMMARY, raising=False)
    out = tmp_path / "rep"
    folder.write_report(out, perf.view())
    md = (out / "report.md").read_text()
    head, _, rest = md.partition("## Results")
    assert (
        "🔴 **MEMORY REGRESSION** torch cifar10 on 1 CPU worker, batch 64/device, data location device: "
        "peak 1.38 GiB vs baseline 1 GiB (+38.0%, tolerance 10%)"
    ) in head
    assert "**2 bursts: 1 regression, 1 pass.**" in head
    table, _, attribution = rest.partition("## Attribution")
    header = next(line for line in table.splitlines() if line.startswith("| framework"))
    assert "| peak memory | memory verdict |" in header
    one = next(line for line in table.splitlines() if "| 1 CPU |" in line)
    assert "| 1.38 GiB (base 1 GiB, +38.0%) | 🔴 **REGRESSION** |" in one
    two = next(line for line in table.splitlines() if "| 2 CPU |" in line)
    assert "| 512 MiB (base 512 MiB, +0.0%) | pass |" in two

    assert "### torch cifar10 on 1 CPU worker" in attribution
    assert "attribution (step 100.0 -> 142.9 ms (+42.9 ms); baseline -> now):" in attribution
    assert "| op | family | baseline ms/step | now ms/step | change | share of slowdown |" in attribution
    assert "| aten::mm | matmul | 3.0 | 43.0 | +40.0 ms | 93% |" in attribution
    assert "every other op within its noise" in attribution
    link = trace_path(perf)
    assert f"[{link}]({link})" in attribution and "ui.perfetto.dev" in attribution
    assert "chrome://tracing" in attribution
    assert gzip.decompress((out / link).read_bytes()) == TRACE
    assert "No attribution: the baseline entry has no op profile" in attribution


def test_report_html_has_the_attribution_and_a_local_trace_link(perf, tmp_path):
    folder.write_report(tmp_path / "rep", perf.view())
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "<th>peak memory</th>" in page and "<th>memory verdict</th>" in page
    assert '<td class="regression">REGRESSION</td>\n</tr>' in page  # the memory verdict closes the row
    assert "<h2>Attribution</h2>" in page and "<td>aten::mm</td><td>matmul</td>" in page
    assert f'<a href="{trace_path(perf)}">' in page and "ui.perfetto.dev" in page
    assert "memory regression" in page.lower()


def test_the_step_summary_has_memory_regressions_and_names_the_trace_without_a_link(perf, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv(folder.STEP_SUMMARY, str(summary))
    folder.write_report(tmp_path / "rep", perf.view())
    text = summary.read_text()
    assert "**MEMORY REGRESSION**" in text and "## Attribution" in text and "| aten::mm | matmul |" in text
    assert f"`{trace_path(perf)}` in the report folder" in text and f"]({trace_path(perf)})" not in text


def test_new_vanished_and_faster_ops_join_the_movers_table():
    now = {**OPS, "aten::mm": 43.0, "aten::avg_pool3d": 2.0, "aten::_fused_thing": 12.0}
    del now["aten::pow"]
    rec = row(burst(now=now))
    (part,) = content.attributions([rec], {})
    names = [cells[0] for cells in part.rows]
    assert names == ["aten::mm", "aten::_fused_thing (new)", "aten::pow (vanished)", "aten::avg_pool3d (faster)"]
    vanished, faster = part.rows[2], part.rows[3]
    assert vanished[2:] == ["7.3", "-", "-7.3 ms", "-"] and faster[2:] == ["11.0", "2.0", "-9.0 ms", "-"]
    assert part.trace is None  # no trace was kept: no link


def test_a_uniform_slowdown_is_its_lines_without_a_table():
    rec = row(burst(now={k: v * 1.4 for k, v in OPS.items()}))
    (part,) = content.attributions([rec], {})
    assert part.rows == [] and "every op is slower together" in part.heading
    md = markdown.document(content.build([rec], [], traces={rec["id"]: "traces/x.json.gz"}))
    assert "| op | family |" not in md and "[traces/x.json.gz](traces/x.json.gz)" in md


def test_no_peak_no_memory_columns_and_an_unprofiled_burst_no_attribution():
    rec = row(burst(peaks=(0,), base_peak=None))
    columns, _ = content.table([rec])
    assert "peak memory" not in columns and "memory verdict" not in columns
    assert content.attributions([rec], {}) == []
