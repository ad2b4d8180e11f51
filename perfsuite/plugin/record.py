"""What the run writes, all of it from the findings: a case's JUnit properties as it ends, and at
the end of the run the bursts as the records show them, the saved baselines, --perf-json,
--perf-openmetrics, the report folder, the history and the terminal summary (pytest-benchmark
reads the same bursts, perfsuite.plugin.benchmark).

A burst's figures in every record are the ones its throughput case judged (else its scaling
case's, else the latest), so no record shows a figure no verdict saw; and every judgement a
record shows (a baseline figure, a scaling efficiency, a diagnosis, a trend's change points) is
the findings', made once: nothing here judges (tests/test_judged_once.py holds it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from perfsuite.analysis.findings import SCALING, THROUGHPUT, Findings
from perfsuite.analysis.result import BurstResult
from perfsuite.common import hardware
from perfsuite.common.files import shown_path
from perfsuite.contract.spec import device_kind_of, short_kind
from perfsuite.plugin.session import PerfSession
from perfsuite.reporting import terminal
from perfsuite.reporting.view import RunView
from perfsuite.store import baseline
from perfsuite.workloads import named

# -- a case, as it ends ---------------------------------------------------------------------


def case(session: PerfSession, item: pytest.Item, f: Findings) -> None:
    """Keep the case's findings for the run's records, and write its JUnit properties now."""
    session.findings.append(f)
    item.user_properties.extend(junit_properties(f))


def junit_properties(f: Findings) -> list[tuple[str, object]]:
    """The case's figures and verdicts as --junitxml writes them (and CI dashboards read them): the
    throughput as ``throughput`` with its ``unit``, and under its unit's name (a token model's
    ``tokens_per_sec``, with ``sequences_per_sec``; an image model's ``images_per_sec``), and its
    baseline figure as ``baseline_throughput`` and ``baseline_tokens_per_sec`` or the like."""
    if f.errors:
        return [("verdict", "error"), ("burst_error", f.errors[0])]
    if f.rerun_error:  # the confirming burst measured nothing: the test fails as an error would
        return [*_judged_properties(f), ("burst_error", f.rerun_error)]
    return _judged_properties(f)


def _judged_properties(f: Findings) -> list[tuple[str, object]]:
    if not f.judged:
        return []
    m, scaling = f.measurement, f.kind == SCALING
    props: list[tuple[str, object]] = [("burst", f.spec.key())]
    if m.throughput is not None and m.interval is not None:
        lo, hi = m.interval
        props += named({"throughput": round(m.throughput, 3)}, m.unit).items()
        props += [(k, round(v, 3)) for k, v in m.extra_figures.items() if v is not None]
        props += [
            ("ci_low", round(lo, 3)),
            ("ci_high", round(hi, 3)),
            ("windows", len(m.samples)),
            ("bursts", m.runs),
        ]
    if f.drift is not None and f.drift.drift is not None:
        props.append(("drift", round(f.drift.drift.change, 4)))
    props += _fleet_properties(f)
    if not scaling:
        props += _memory_properties(f)
        props += _numerics_properties(f)
    if f.attribution is not None:
        props.append(("attribution", f.attribution.status))
        if f.attribution.movers:
            top = f.attribution.movers[0]
            props += [
                ("top_mover", top.name),
                ("top_mover_family", top.family),
                ("top_mover_delta_ms", round(top.delta_ms, 3)),
            ]
    verdict = f.verdict
    if verdict is not None:
        props += [("verdict", verdict.status), ("tolerance", round(verdict.tolerance, 4))]
        if verdict.change is not None:
            props.append(("change", round(verdict.change, 4)))
    if f.throughput is not None and f.throughput.baseline is not None:
        baseline = named({"baseline_throughput": round(f.throughput.baseline, 3)}, m.unit)
        props += [(k, v) for k, v in baseline.items() if k != "unit"]
    if scaling and f.scaling is not None:
        props.append(("scaling_efficiency", round(f.scaling.efficiency, 4)))
        if f.scaling.baseline is not None:
            props.append(("baseline_scaling_efficiency", round(f.scaling.baseline, 4)))
    return props


def _fleet_properties(f: Findings) -> list[tuple[str, object]]:
    check = f.fleet
    if check is None:
        return []
    props: list[tuple[str, object]] = [
        ("fleet_node", check.node),
        ("fleet_peers", check.peers),
        ("fleet_flagged", check.flagged),
    ]
    if check.judgement is not None:
        props += [
            ("fleet_median", round(check.judgement.median, 3)),
            ("fleet_deviation", round(check.judgement.deviation, 4)),
            ("fleet_score", round(check.judgement.score, 2)),
        ]
    return props


def _numerics_properties(f: Findings) -> list[tuple[str, object]]:
    """The burst's first losses against the golden ones: same, drifted or changed, where it differs
    first and by how much at most; else why they were not compared."""
    found = f.numerics
    if found is None:
        return []
    if found.outcome is None:
        return [("numerics_note", found.note)] if found.note else []
    props: list[tuple[str, object]] = [("numerics", found.outcome)]
    if found.first_step is not None and found.max_rel_diff is not None:
        props += [("numerics_first_step", found.first_step), ("numerics_max_rel_diff", f"{found.max_rel_diff:.3g}")]
    if found.changes:
        props.append(("numerics_changes", "; ".join(found.changes)))
    if found.note:
        props.append(("numerics_note", found.note))
    return props


def _memory_properties(f: Findings) -> list[tuple[str, object]]:
    peak, found = f.measurement.peak_memory_bytes, f.memory
    if peak is None:
        return []
    props: list[tuple[str, object]] = [("peak_memory_bytes", peak)]
    if found is not None and found.change is not None:  # a baseline peak to compare with
        props += [
            ("baseline_peak_memory_bytes", found.baseline_bytes),
            ("memory_change", round(found.change, 4)),
            ("memory_verdict", found.status),
            ("memory_tolerance", round(found.tolerance, 4)),
        ]
    return props


# -- the bursts, as the run's records show them ---------------------------------------------------


def bursts(session: PerfSession) -> tuple[BurstResult, ...]:
    """Every burst of the run, each with the findings of the cases that judged it."""
    judged: dict[tuple[object, str], Findings] = {}
    for f in session.findings:
        if f.judged:
            judged[(f.spec, f.kind)] = f  # the last case of a spec and kind stands
    out = []
    for spec, b in session.bursts.items():
        throughput, scaled = judged.get((spec, THROUGHPUT)), judged.get((spec, SCALING))
        shown = throughput or scaled
        measurement = shown.measurement if shown is not None else b.measurement
        out.append(
            BurstResult(measurement, b.burst_id, tuple(b.tests), throughput, scaled, saved=spec in session.saved)
        )
    return tuple(out)


def cases(session: PerfSession, shown: Sequence[BurstResult]) -> tuple[tuple[str, str, BurstResult], ...]:
    """(test, kind, the burst as that case saw it) per case judged here or failed, for the terminal table."""
    by_spec = {r.spec: r for r in shown}
    out = []
    for f in session.findings:
        if not (f.judged or f.errors) or f.spec not in by_spec:
            continue  # a case skipped, or judged on another node
        seen = dataclasses.replace(
            by_spec[f.spec],
            measurement=f.measurement,
            throughput_case=f if f.kind == THROUGHPUT else None,
            scaling_case=f if f.kind == SCALING else None,
        )
        out.append((f.test, f.kind, seen))
    return tuple(out)


def view(session: PerfSession, command: Sequence[str] = ()) -> RunView:
    shown = bursts(session)
    fingerprints, errors = session.report_fingerprints()
    o = session.options
    return RunView(
        run=session.run_info(command),
        results=shown,
        rows=cases(session, shown),
        messages=tuple(session.messages),
        fingerprints=fingerprints,
        fingerprint_errors=errors,
        baseline_files={kind: baseline.baseline_path(o.baseline_dir, fp) for kind, fp in fingerprints.items()},
        local_baseline_files={
            kind: baseline.baseline_path(o.local_baselines, fp)
            for kind, fp in fingerprints.items()
            if session.local_baselines.get(kind) is not None
            or any(short_kind(s.device_kind) == kind and session.saves_locally(s) for s in session.saved)
        },
        trends=trends(session, shown),
    )


def trends(session: PerfSession, shown: Sequence[BurstResult]) -> dict:
    """Burst id -> its history with this run last (perfsuite.reporting.trend.Trend), for the report:
    the series its drift check read, with the change points it found there."""
    from perfsuite.reporting.trend import Trend

    out = {}
    for result in shown:
        check, ips = result.drift_check, result.throughput
        if check is None or not check.past or ips is None:
            continue
        try:
            where = session.fingerprint(result.spec.device_kind).id
        except hardware.HardwareError:
            continue
        lo, hi = result.interval or (None, None)
        out[result.id] = Trend(
            title=f"{result.spec.key()} on {where}",
            runs=[str(p.date)[:10] for p in check.past] + ["this run"],
            throughput=[p.throughput for p in check.past] + [ips],
            ci_low=[p.ci_low for p in check.past] + [lo],
            ci_high=[p.ci_high for p in check.past] + [hi],
            change_points=[(c.index, c.change) for c in check.points],
            current=len(check.past),
            unit=result.unit,
        )
    return out


# -- the end of the run ---------------------------------------------------------------------------


def finish(session: PerfSession, exitstatus: int, command: Sequence[str] = (), collect_only: bool = False) -> int:
    """Save baselines, write --perf-json, --perf-openmetrics, --perf-report and the history, remove
    the burst folders; return the run's exit status, which a file that could not be written, or a
    run in which no burst ran, turns into a failure."""
    session.interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    status = exitstatus
    if session.options.save_baseline and session.bursts:
        status = _save(session, exitstatus, status)
    elif session.options.missing_baseline == "save" and session.bursts:
        status = _save(session, exitstatus, status, local=True)
    shown = bursts(session)
    status = _write_results(session, shown, command, exitstatus, status)
    _write_history(session, shown, command, status)
    kept = session.remove_burst_dirs()
    if kept:
        session.messages.append(kept)
    spent = terminal.duty_cycle_line(session.spent, session.warm_started)
    if spent:
        session.messages.append(spent)
    for what, keys in sorted(_entries_lacking(session).items()):
        session.messages.append(
            f"{len(keys)} baseline entr{'y has' if len(keys) == 1 else 'ies have'} no {what} to "
            f"compare with: refresh {'it' if len(keys) == 1 else 'them'} with --perf-save-baseline"
        )
    session.messages.extend(_no_baseline_file(session))
    if session.selected_cases and not session.bursts and not collect_only and status == pytest.ExitCode.OK:
        session.messages.append(_nothing_ran(session))
        status = pytest.ExitCode.TESTS_FAILED
    return status


def _entries_lacking(session: PerfSession) -> dict[str, set[str]]:
    """Keys of gated entries saved before peak memory and op profiles were stored, per what they lack."""
    out: dict[str, set[str]] = {}
    if session.options.save_baseline:
        return out
    for f in session.findings:
        if f.kind != THROUGHPUT or not f.judged or f.baseline is None or not f.measurement.run_peaks:
            continue
        for what, missing in (
            ("peak memory", f.memory is not None and f.memory.baseline_bytes is None),
            ("op profile", not f.baseline.get("op_profile")),
        ):
            if missing:
                out.setdefault(what, set()).add(f.spec.key())
    return out


def _no_baseline_file(session: PerfSession) -> list[str]:
    """A machine kind the suite has no baseline for: measured and reported, and how to keep it."""
    if session.options.save_baseline or session.options.missing_baseline == "save":
        return []
    lines = []
    for kind, found in sorted(session.baselines.items()):
        measured = [s for s, b in session.bursts.items() if short_kind(s.device_kind) == kind and b.measurement.ok]
        local = session.local_baselines.get(kind) is not None
        if found is None and not local and kind not in session.baselines_unused and measured:
            path = shown_path(session.baseline_path(device_kind_of(kind)))
            lines.append(
                f"no baseline file for this hardware ({path}): "
                f"{len(measured)} burst{'s were' if len(measured) != 1 else ' was'} measured and reported, not "
                "gated; run the same command with --perf-save-baseline to keep them as its baseline, or with "
                "--perf-missing-baseline save to keep them as this machine's local one"
            )
    return lines


def _nothing_ran(session: PerfSession) -> str:
    from collections import Counter

    n = session.selected_cases
    head = f"no burst ran: {n} selected case{'s' if n != 1 else ''}"
    if not session.skip_reasons:
        return f"{head} measured nothing"
    counts = Counter(session.skip_reasons)
    reasons = "; ".join(f"{reason} ({count})" for reason, count in counts.most_common())
    return f"{head}, all skipped: {reasons}"


def _save(session: PerfSession, exitstatus: int, status: int, local: bool = False) -> int:
    what = "local baselines" if local else "baselines"
    if exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR):
        session.messages.append(f"{what} not saved: the run was interrupted")
    elif session.options.node_rank != 0:
        if not local:
            session.messages.append(f"baselines are saved by node 0; this is node {session.options.node_rank}")
    else:
        try:
            for path, count in save_baselines(session, local):
                entries = f"{count} baseline entr{'y' if count == 1 else 'ies'}"
                session.messages.append(
                    f"saved {entries} to this machine's local baseline {path}: the next run gates against "
                    f"{'it' if count == 1 else 'them'} (entries in {shown_path(session.options.baseline_dir)} "
                    "take precedence; --perf-save-baseline writes there)"
                    if local
                    else f"saved {entries} to {path}"
                )
        except baseline.BaselineError as exc:
            session.messages.append(f"{what} not saved: {exc}")
            return pytest.ExitCode.TESTS_FAILED
    return status


def entries_to_save(session: PerfSession, local: bool = False) -> dict:
    """Entries of every clean burst, grouped by baseline file: path -> (fingerprint, entries,
    versions). ``local``: only the bursts no baseline holds, for the machine's local file."""
    commit = baseline.git_commit(session.rootdir)
    date = baseline.now_iso()
    out: dict = {}
    for result in bursts(session):
        record = result.record
        if not result.ok or result.remote or record is None:
            continue
        if result.tests and all(t in session.failed_tests for t in result.tests):
            continue  # only bursts from tests that ran cleanly
        spec = result.spec
        if local and not session.saves_locally(spec):
            continue
        path = session.local_baseline_path(spec.device_kind) if local else session.baseline_path(spec.device_kind)
        fp, entries, versions = out.setdefault(path, (session.fingerprint(spec.device_kind), {}, {}))
        entries[spec.key()] = baseline.entry_for(result, date, commit, None if local else session.baseline_entry(spec))
        versions[spec.framework] = record.framework_version
    return out


def save_baselines(session: PerfSession, local: bool = False) -> list:
    saved = []
    for path, (fp, entries, versions) in entries_to_save(session, local).items():
        baseline.save_entries(path, fp, entries, versions)
        saved.append((path, len(entries)))
        for spec in session.bursts:
            if spec.key() in entries and path in (
                session.baseline_path(spec.device_kind),
                session.local_baseline_path(spec.device_kind),
            ):
                session.saved.add(spec)
    return saved


def _write_results(
    session: PerfSession, shown: Sequence[BurstResult], command: Sequence[str], exitstatus: int, status: int
) -> int:
    from perfsuite.reporting.perf_json import row, write_json

    o = session.options
    failed = pytest.ExitCode.TESTS_FAILED if status == pytest.ExitCode.OK else status
    rows = [row(r) for r in shown] if shown and (o.perf_json or o.perf_openmetrics) else []
    if o.perf_json is not None and rows:
        try:
            write_json(o.perf_json, session.run_info(command), rows)
            session.messages.append(f"results: {o.perf_json}")
        except OSError as exc:
            session.messages.append(f"--perf-json: cannot write {o.perf_json}: {exc}")
            status = failed
    if o.perf_openmetrics is not None and rows:
        from perfsuite.reporting import openmetrics  # prometheus-client is imported when metrics are written

        try:
            openmetrics.write(o.perf_openmetrics, *openmetrics.from_results(session.run_info(command).as_dict(), rows))
            session.messages.append(f"metrics: {o.perf_openmetrics}")
        except (OSError, ImportError) as exc:
            session.messages.append(f"--perf-openmetrics: cannot write {o.perf_openmetrics}: {exc}")
            status = failed
    if o.perf_report is not None and exitstatus != pytest.ExitCode.USAGE_ERROR:
        from perfsuite.reporting.folder import write_report  # loaded only when a report is asked for

        try:
            session.messages.extend(write_report(o.perf_report, view(session, command)))
        except Exception as exc:  # noqa: BLE001 - a report that cannot be written fails the run in one line
            what = "cannot write" if isinstance(exc, OSError) else f"failed ({type(exc).__name__})"
            session.messages.append(f"--perf-report: {what} {o.perf_report}: {exc}")
            status = failed
    return status


def _write_history(session: PerfSession, shown: Sequence[BurstResult], command: Sequence[str], status: int) -> None:
    """Every run goes into the history, gated or saved, passed or failed; never fails the run."""
    o = session.options
    if o.perf_history is None or not shown or o.node_rank != 0:
        return
    from perfsuite.history import document, recorder
    from perfsuite.reporting.perf_json import row

    doc = document.live(
        session.run_info(command).as_dict(),
        [row(r) for r in shown],
        save_baseline=o.save_baseline,
        outcome=document.outcome_of(status, session.interrupted),
    )
    session.messages.extend(recorder.record(o.perf_history, doc, o.perf_history_retry))
