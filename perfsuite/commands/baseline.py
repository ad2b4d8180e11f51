"""``python -m perfsuite baseline show|diff|prune``: look after baseline files between runs.

Exit codes: 0 done (a diff with changes is still 0: it reports, the gate decides);
1 a file cannot be used (missing, unreadable, not JSON, wrong schema, cannot be
written or locked); 2 bad command-line arguments. Errors are one ``error:`` line.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perfsuite.commands import Failure, UsageError
from perfsuite.common.numbers import fixed
from perfsuite.common.text import columns
from perfsuite.config import arguments, project
from perfsuite.config.options import OptionError
from perfsuite.store import baseline
from perfsuite.store.summary import as_date, as_number, compare, prune_selector, summarize
from perfsuite.workloads import MIXED, figure_name, unit_column

TREND_POINTS = 3  # history values shown in the trend; the JSON output has them all
THIS_MACHINE = (
    "a baseline file (default: the one the gate reads on this machine, its GPUs' where it has any, else its "
    "CPU's, in baseline_dir of [tool.perfsuite], default baselines/)"
)


# --- reading ---------------------------------------------------------------------


def _load(path: Path) -> baseline.BaselineFile:
    bf = baseline.load(path)
    if bf is None:
        raise baseline.BaselineError(f"{path}: no such file")
    return bf


def _this_machine(given: Path | None) -> Path:
    """FILE, else the file the gate reads on this machine: its GPUs' where it has any, else its
    CPU's, in baseline_dir of [tool.perfsuite] (default baselines/)."""
    if given is not None:
        return given
    from perfsuite.common import hardware

    try:
        folder = project.load(Path.cwd()).baseline_dir
    except OptionError as exc:
        raise Failure(str(exc)) from None
    fp = hardware.gpu_fingerprint() or hardware.cpu_fingerprint()
    found, unused = baseline.find(folder, fp)
    if found is None:
        why = unused or f"no {baseline.baseline_path(folder, fp).name} there"
        raise Failure(f"no baseline file of this machine in {folder}: {why}; name the FILE")
    return found.path


def _fmt(value: float | None, spec: str) -> str:
    if value is None:
        return "-"
    return fixed(value, int(spec[1:-1])) if spec.endswith("g") else format(value, spec)


def _tolerance(value: Any) -> str:
    if value is None:
        return "-"
    number = as_number(value)
    return "invalid" if number is None else f"{number:.1%}"


def _versions(frameworks: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(frameworks.items())) or "-"


def _units(rows: list[dict[str, Any]]) -> tuple[str, bool]:
    """(what the throughput columns are headed by, whether each figure says its unit): the entries'
    one unit, else "throughput" with "img/s" or "tokens/s" after every figure."""
    head, _ = unit_column(e["unit"] for e in rows)
    return head, head == MIXED


def _figure(e: dict[str, Any], prefix: str, mixed: bool) -> str:
    """The row's figure (``prefix`` "", "old_" or "new_"), with its unit where ``mixed``; "-" where none."""
    figure = e[prefix + figure_name(e["unit"])]
    return _fmt(figure, ".4g") + (f" {e['unit']}" if mixed and figure is not None else "")


def _show(args: argparse.Namespace) -> int:
    info = summarize(_load(_this_machine(args.file)))
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    n = len(info["entries"])
    print(f"{info['file']}: schema {info['schema']}, {n} entr{'y' if n == 1 else 'ies'}")
    fp_id = info["fingerprint_id"]
    print(f"hardware {info['hardware']}" + (f"  [fingerprint {fp_id}]" if fp_id else ""))
    print(f"frameworks: {_versions(info['frameworks'])}")
    if not n:
        return 0
    named, mixed = _units(info["entries"])
    header = ("key", named, "95% CI", "run spread", "scaling eff", "tolerance", "saved", "history", "trend")
    rows = []
    for e in info["entries"]:
        known = e["ci_low"] is not None and e["ci_high"] is not None
        ci = f"{fixed(e['ci_low'])}-{fixed(e['ci_high'])}" if known else "-"
        when = as_date(e["date"])
        history = e["history_" + figure_name(e["unit"])]
        trend = "-"
        if history:
            recent = [fixed(v) for v in history[-TREND_POINTS:]]
            trend = " > ".join([*recent, _figure(e, "", False)])
            if e["change_since_oldest"] is not None:
                trend += f" ({e['change_since_oldest']:+.1%} since oldest)"
        rows.append(
            (
                e["key"],
                _figure(e, "", mixed),
                ci,
                _fmt(e["run_spread"], ".1%"),
                _fmt(e["scaling_efficiency"], ".1%"),
                _tolerance(e["tolerance"]),
                when.strftime("%Y-%m-%d") if when else "-",
                str(e["history_points"]),
                trend,
            )
        )
    print()
    for line in columns(header, rows):
        print(line)
    return 0


def _diff(args: argparse.Namespace) -> int:
    d = compare(_load(args.old), _load(args.new), args.threshold)
    if args.json:
        print(json.dumps(d, indent=1))
        return 0
    print(f"old: {d['old']}  (hardware {d['old_hardware']})")
    print(f"new: {d['new']}  (hardware {d['new_hardware']})")
    if not d["same_hardware"]:
        print("note: the fingerprints name different hardware; the changes compare different machines")
    elif not d["same_fingerprint"]:
        print("note: same hardware, but the fingerprints differ (driver or CUDA version)")
    if d["old_frameworks"] != d["new_frameworks"]:
        print(f"note: framework versions {_versions(d['old_frameworks'])} -> {_versions(d['new_frameworks'])}")
    if d["both"]:
        named, mixed = _units(d["both"])
        header = (
            "key",
            f"old {named}",
            f"new {named}",
            "change",
            "old eff",
            "new eff",
            "eff change",
            f"beyond ±{args.threshold * 100:g}%",
        )
        rows = [
            (
                e["key"],
                _figure(e, "old_", mixed),
                _figure(e, "new_", mixed),
                _fmt(e["change"], "+.1%"),
                _fmt(e["old_scaling_efficiency"], ".1%"),
                _fmt(e["new_scaling_efficiency"], ".1%"),
                "-" if e["scaling_change_points"] is None else f"{e['scaling_change_points'] * 100:+.1f} pp",
                ", ".join(e["beyond_threshold"]) or "-",
            )
            for e in d["both"]
        ]
        print()
        for line in columns(header, rows):
            print(line)
    for side, label in (("only_old", d["old"]), ("only_new", d["new"])):
        if d[side]:
            print(f"\nonly in {label}:")
            for key in d[side]:
                print(f"  {key}")
    flagged = sum(1 for e in d["both"] if e["beyond_threshold"])
    print(
        f"\n{len(d['both'])} in both ({flagged} beyond ±{args.threshold * 100:g}% or {args.threshold * 100:g} pp), "
        f"{len(d['only_old'])} only in old, {len(d['only_new'])} only in new"
    )
    return 0


def _prune(args: argparse.Namespace) -> int:
    patterns = args.key or []
    if not patterns and args.older_than is None:
        raise UsageError("prune needs --older-than DAYS or --key PATTERN (or both)")
    args.file = _this_machine(args.file)
    current = _load(args.file)
    select = prune_selector(patterns, args.older_than, datetime.now(UTC))
    for p in patterns:
        if not any(fnmatch.fnmatchcase(k, p) for k in current.entries):
            print(f"note: --key {p!r} matches no entry")
    if args.older_than is not None:
        undated = sorted(k for k, e in current.entries.items() if as_date(e.get("date")) is None)
        for key in undated:
            print(f"note: {key} has no readable date; --older-than keeps it")
    if args.dry_run:
        gone = sorted(k for k, e in current.entries.items() if select(k, e))
        total, verb = len(current.entries), "would remove"
    else:
        gone, left = baseline.remove_entries(args.file, select)
        total, verb = len(gone) + len(left.entries), "removed"  # as re-read under the lock
    if not gone:
        print(f"nothing to prune in {args.file}: none of its {total} entries is selected")
        return 0
    print(f"{verb} {len(gone)} of {total} entries from {args.file}:")
    for key in gone:
        saved = as_date(current.entries.get(key, {}).get("date"))
        print(f"  {key}" + (f"  (saved {saved:%Y-%m-%d})" if saved else ""))
    return 0


# --- wiring ----------------------------------------------------------------------


def add_parser(sub: Any) -> None:
    """Add ``baseline`` and its commands to the subparsers of ``python -m perfsuite``."""
    p = sub.add_parser(
        "baseline",
        help="show, compare or prune baseline files",
        description="Look after baseline files between runs.",
        epilog="exit codes: 0 done, 1 a file cannot be used, 2 bad arguments",
    )
    cmds = p.add_subparsers(dest="baseline_command", required=True, metavar="{show,diff,prune}")
    show = cmds.add_parser("show", help="fingerprint and one row per entry")
    show.add_argument("file", type=Path, nargs="?", metavar="FILE", help=THIS_MACHINE)
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(run=run, action=_show)
    diff = cmds.add_parser("diff", help="compare two baseline files entry by entry")
    diff.add_argument("old", type=Path, metavar="OLD")
    diff.add_argument("new", type=Path, metavar="NEW")
    diff.add_argument("--json", action="store_true", help="machine-readable output")
    diff.add_argument(
        "--threshold",
        type=arguments.non_negative,
        default=0.05,
        metavar="FRACTION",
        help="mark throughput changes beyond this fraction and scaling efficiency changes "
        "beyond this many points (default: 0.05 = 5%% / 5 pp)",
    )
    diff.set_defaults(run=run, action=_diff)
    prune = cmds.add_parser(
        "prune",
        help="drop old or unwanted entries (atomic, under the plugin's lock)",
        description="Drop the entries every given criterion selects: any --key pattern "
        "matches and, with --older-than, the last save is older.",
    )
    prune.add_argument("file", type=Path, nargs="?", metavar="FILE", help=THIS_MACHINE)
    prune.add_argument(
        "--older-than", type=arguments.non_negative, metavar="DAYS", help="entries last saved more than DAYS days ago"
    )
    prune.add_argument(
        "--key",
        action="append",
        metavar="PATTERN",
        help="entries whose key matches this fnmatch pattern ('*' spans '/'); repeatable",
    )
    prune.add_argument("--dry-run", action="store_true", help="list what would be removed, change nothing")
    prune.set_defaults(run=run, action=_prune)


def run(args: argparse.Namespace) -> int:
    try:
        return args.action(args)
    except baseline.BaselineError as exc:
        raise Failure(str(exc)) from None
