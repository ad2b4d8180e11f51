"""What ``python -m perfsuite bisect`` says of its outcome: the answer and why, its cost, the
table of the commits measured (``report``), and the same as JSON (``as_json``, also what the
state file and the history keep). Every figure is in the burst key's unit: img/s, or tokens/s for
a token model, whose tested commits' JSON names it ``tokens_per_sec``."""

from __future__ import annotations

import math
from typing import Any

from perfsuite.commands import named_by_unit
from perfsuite.workloads import unit_of_key


def table_header(unit: str) -> tuple[str, ...]:
    """The commits' table's head; ``unit``: the key's (img/s, or tokens/s for a token model)."""
    return ("#", "commit", "subject", unit, "95% CI", "bursts", "position", "verdict")


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def figures(t, unit: str) -> str:
    """A commit's throughput and its interval in ``unit`` (the key's), as a line says them."""
    from perfsuite.common.numbers import fixed

    fig = t.figures()
    return "-" if fig is None else f"{fixed(fig[0])} {unit} (95% CI {fixed(fig[1])}-{fixed(fig[2])})"


def as_json(outcome) -> dict[str, Any]:
    info = outcome.info
    first = outcome.first_bad
    span = outcome.ends.span
    return {
        "status": outcome.status,
        "key": outcome.key,
        "fingerprint": outcome.fingerprint,
        "good": outcome.commits[0],
        "bad": outcome.commits[-1],
        "commits": len(outcome.commits) - 1,
        "change": {**outcome.change.as_dict(), "ratio": outcome.change.ratio},
        "pairs": len(outcome.ends.pairs),
        "rounds_needed": outcome.ends.rounds_needed(),
        "alpha": outcome.ends.alpha,
        "windows_alpha": outcome.ends.windows_alpha,
        "first_bad": info[first].as_dict() if first and first in info else ({"commit": first} if first else None),
        "candidates": [info[c].as_dict() if c in info else {"commit": c} for c in outcome.candidates]
        if outcome.status == "unresolved"
        else [],
        "step": None
        if outcome.step is None
        else {"change": outcome.step[0], "ci_low": outcome.step[1], "ci_high": outcome.step[2]},
        "midpoints": outcome.midpoints,
        "checks": outcome.checks,
        "expected_midpoints": outcome.expected_midpoints,
        "bursts": outcome.bursts,
        "bursts_run": outcome.bursts_run,
        "seconds": round(outcome.seconds, 1),
        "tested": [named_by_unit(t.as_dict(info.get(t.sha), span), outcome.key) for t in outcome.tested_in_order()],
    }


def report(outcome) -> list[str]:
    """The outcome as a person reads it: the answer, the burst and its cost, then every commit measured."""
    if outcome.status == "no change":
        return _no_change(outcome)
    lines = _first_bad(outcome) if outcome.first_bad is not None else _unresolved(outcome)
    change = outcome.change
    lines.append(
        f"burst {outcome.key} on {outcome.fingerprint}; GOOD -> BAD {_pct(change.change)} "
        f"(pairs p={change.p_pairs:.2g}, windows p={change.p_value:.2g}, min change {change.min_change:.0%})"
    )
    lines.append(
        f"cost: {outcome.midpoints} midpoint{'s' if outcome.midpoints != 1 else ''} "
        f"(at most {outcome.expected_midpoints} for {len(outcome.commits) - 1} commits without skips), "
        f"{outcome.checks} judged again, "
        f"{outcome.bursts} bursts ({outcome.bursts_run} run now, {max(0, outcome.bursts - outcome.bursts_run)} "
        f"from the cache), {_minutes(outcome.seconds)}"
    )
    return [*lines, "", *_table(outcome), ""] + [
        "bursts: the commit's own (+ an end's beside each, its rounds); position: 0 like GOOD, 1 like BAD, "
        "from the rounds"
    ]


def _no_change(outcome) -> list[str]:
    """GOOD and BAD alike: why, and the ends' bursts side by side."""
    from perfsuite.analysis.stats import ALPHA

    change = outcome.change
    ends = {t.role: t for t in outcome.tested if t.role in ("GOOD", "BAD")}
    pairs = len(outcome.ends.pairs)
    interval = f"95% interval {_pct(change.low)} to {_pct(change.high)}"
    if change.within:
        why = f"{_pct(change.change)} ({interval}) is within --min-change {change.min_change:.0%} of no change"
    elif not change.beyond:
        why = (
            f"{_pct(change.change)} is smaller than --min-change {change.min_change:.0%}, "
            f"though after {pairs} pairs its {interval} still reaches past it"
        )
    else:
        why = (
            f"{_pct(change.change)} is not significant (pairs p={change.p_pairs:.2g}, "
            f"windows p={change.p_value:.2g}, needs {ALPHA:g})"
        )
    ratios = ", ".join(f"{math.expm1(r):+.1%}" for r in outcome.ends.ratios)
    return [
        f"no reproducible change between GOOD and BAD: {why} ({outcome.key})",
        _distribution("GOOD", ends["GOOD"], unit_of_key(outcome.key)),
        _distribution("BAD ", ends["BAD"], unit_of_key(outcome.key)),
        f"  BAD against GOOD in each of the {pairs} pairs measured side by side: {ratios}",
    ]


def _first_bad(outcome) -> list[str]:
    """The first bad commit, who wrote it and when, and the step's size."""
    from perfsuite.common.numbers import fixed

    first = outcome.first_bad
    info = outcome.info.get(first)
    lines = [f"first bad commit: {first}"]
    if info:
        lines += [f"  subject: {info.subject}", f"  author:  {info.author}", f"  date:    {info.date}"]
    step, lo, hi = outcome.step
    by_order = {t.order: t for t in outcome.tested if t.role != "check"}
    before, after = by_order[outcome.found.lo], by_order[outcome.found.hi]
    unit = unit_of_key(outcome.key)
    lines.append(
        f"step: {_pct(step)} (95% interval {_pct(lo)} to {_pct(hi)}), GOOD to BAD in {len(outcome.ends.pairs)} "
        f"pairs measured side by side; the last good commit {before.sha[:10]} ({before.order}) "
        f"{fixed(before.figures()[0])} {unit}, the first bad {after.sha[:10]} ({after.order}) "
        f"{fixed(after.figures()[0])} {unit}"
    )
    return lines


def _unresolved(outcome) -> list[str]:
    """No single commit: the candidates, each with why it was left undecided."""
    cands = outcome.candidates
    lines = [
        f"no single commit: the first bad commit is one of {len(cands)}, every one between "
        f"{outcome.commits[outcome.found.lo][:10]} (good) and {outcome.commits[outcome.found.hi][:10]} (bad) "
        "was skipped:"
    ]
    skipped = {t.sha: t for t in outcome.tested if t.verdict == "skipped"}
    verdicts: dict[str, list[str]] = {}
    for t in outcome.tested:
        verdicts.setdefault(t.sha, []).append(t.verdict)
    left = {outcome.commits[i] for i in outcome.found.skipped}
    for c in cands:
        subject = outcome.info[c].subject if c in outcome.info else ""
        if c in left and len(verdicts.get(c, [])) > 1:
            why = f" (judged {', '.join(verdicts[c])}: no two verdicts alike)"
        elif c in skipped:
            why = f" (skipped: {skipped[c].reason})"
        else:
            why = ""
        lines.append(f"  {c[:10]} {subject}{why}")
    return lines


def _table(outcome) -> list[str]:
    """Every commit measured, in commit order, with its figures, bursts, position and verdict."""
    from perfsuite.common.numbers import fixed
    from perfsuite.common.text import columns

    rows = []
    for t in outcome.tested_in_order():
        fig = t.figures()
        subject = outcome.info[t.sha].subject if t.sha in outcome.info else ""
        verdict = t.role if t.role in ("GOOD", "BAD") else t.verdict
        if t.role == "check":
            verdict = f"again {verdict}"
        if t.verdict == "skipped":
            verdict += f": {t.reason}"
        if t.sha == outcome.first_bad:
            verdict += "  <- first bad"
        position = (
            "0" if t.role == "GOOD" else "1" if t.role == "BAD" else (f"{t.call.position:.2f}" if t.call else "-")
        )
        rows.append(
            (
                str(t.order),
                t.sha[:10],
                subject[:40],
                fixed(fig[0]) if fig else "-",
                f"{fixed(fig[1])}-{fixed(fig[2])}" if fig else "-",
                f"{len(t.bursts)}" + (f"+{t.references}" if t.references else ""),
                position,
                verdict,
            )
        )
    return columns(table_header(unit_of_key(outcome.key)), rows, left=(1, 2, 7))


def _distribution(name: str, t, unit: str) -> str:
    from perfsuite.analysis import stats
    from perfsuite.common.numbers import fixed

    samples = t.samples
    medians = ", ".join(fixed(stats.median(b)) for b in t.bursts)
    return (
        f"  {name} {t.sha[:10]}: {figures(t, unit)}, {len(t.bursts)} bursts, {len(samples)} windows, "
        f"range {fixed(min(samples))}-{fixed(max(samples))}; burst medians {medians}"
    )


def _minutes(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s" if m else f"{s} s"
