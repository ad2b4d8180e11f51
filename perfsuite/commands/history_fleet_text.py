"""``history fleet``'s report as a person reads it in a terminal: the slow nodes, those that did
not report or failed, and each key's figure tonight, worst first, in the key's unit (img/s, or
tokens/s for a token model; a table of both says each figure's). It prints what the report holds
(perfsuite.commands.history_fleet) and judges nothing."""

from __future__ import annotations

from typing import Any

from perfsuite.commands import shared
from perfsuite.common.numbers import fixed
from perfsuite.common.text import columns
from perfsuite.workloads import unit_column, unit_of_key

LISTED = 20  # keys that cannot be judged, named one by one


def _interval(lo: float | None, hi: float | None) -> str:
    return f"{fixed(lo)}-{fixed(hi)}" if lo is not None and hi is not None else "-"


def _score(r: dict[str, Any]) -> str:
    if not r["judged"]:
        return "-"
    if r["score"] is None:  # infinite: the group's MAD is 0
        return "-inf" if r["deviation"] < 0 else "+inf"
    return f"{r['score']:+.1f}"


def _p(p: float | None) -> str:
    if p is None:
        return "-"
    return "< 1e-300" if p == 0 else f"{p:.2g}"  # beyond a double's reach


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _verdict_line(v: dict[str, Any]) -> str:
    keys = f"{v['slow_keys']} of {_plural(v['keys'], 'key')} slow tonight"
    tonight = "" if v["tonight"] is None else f", {v['tonight']:+.1%}"
    return (
        f"  {v['node']}  [{v['group_name']}]  {v['deviation']:+.1%} against its peers, slow on {v['slow_nights']} "
        f"of the last {_plural(v['nights_judged'], 'night')} ({keys}{tonight}); "
        f"p {_p(v['p_value'])}, after Holm's correction {_p(v['adjusted_p'])}"
    )


def text(s: dict[str, Any], group_by: list[str]) -> None:
    prints = len({g["fingerprint"] for g in s["groups"]})
    keys = len({(g["fingerprint"], g["key"]) for g in s["groups"]})
    print(
        f"fleet of {s['history']}: {_plural(s['host_count'], 'host')}, {_plural(keys, 'key')} on "
        f"{_plural(prints, 'fingerprint')}, {_plural(len(s['groups']), 'group')}; each host's latest run in the "
        f"{s['since_hours']:g} h before {shared.when(s['at'])}"
    )
    rule = (
        f"pooled over each node's keys and the last {s['nights']} nights: slower than its peers by more than "
        f"{s['tolerance']:.0%}, p <= {s['alpha']:g} after Holm's correction over each fleet's nodes "
        f"({_plural(s['nodes_judged'], 'node')} judged in {_plural(s['fleets_judged'], 'fleet')})"
    )
    slow = s["flagged_hosts"]
    if slow:
        print(f"{_plural(len(slow), 'node')} slow ({rule}):")
        for v in slow:
            print(_verdict_line(v))
    else:
        print(f"no node slow ({rule})")
    for m in s["did_not_report"]:
        last = f"its last run {m['last_run'][:16].replace('T', ' ')}" if m["last_run"] else "no run in the nights read"
        print(f"did not report: {m['node']} ({last})")
    for f in s["failed"]:
        judged_too = "; judged on the rest" if f["judged"] else ""
        print(
            f"failed: {f['node']} [fingerprint {shared.fp(f['fingerprint'])}]: {_plural(f['bursts'], 'burst')} "
            f"measured nothing tonight{judged_too}"
        )
    if s["rows"]:
        _table(s, group_by)
    unjudged = [g for g in s["groups"] if not g["judged"]]
    if unjudged:
        print(f"\n{_plural(len(unjudged), 'key')} with fewer than {s['min_nodes']} hosts tonight: cannot judge")
        for g in unjudged[:LISTED]:
            print(f"  {g['name']}: {_plural(g['hosts'], 'host')}")
        if len(unjudged) > LISTED:
            print(f"  ... and {len(unjudged) - LISTED} more (--json lists them all)")
    if s["plot"]:
        print(f"\nplot: {s['plot']}")
    if s.get("openmetrics"):
        print(f"metrics: {s['openmetrics']}")


def _units(rows: list[dict[str, Any]]) -> tuple[str, Any]:
    """(the figure column's head: the rows' one unit, else MIXED; the unit each figure then says)."""
    head, says = unit_column(unit_of_key(r["key"]) for r in rows)
    return head, lambda r: says(unit_of_key(r["key"]))


def _table(s: dict[str, Any], group_by: list[str]) -> None:
    from perfsuite.workloads import figure_of

    named, unit = _units(s["rows"])
    header = ("host", "fingerprint", "key", *group_by, named, "95% CI", "median", "deviation", "score", "key flag",
              "nights flagged")  # fmt: skip
    table = [
        (
            r["node"],
            shared.fp(r["fingerprint"]),
            r["key"],
            *(r["group"].get(name, "-") for name in group_by),
            fixed(figure_of(r)) + unit(r),
            _interval(r["ci_low"], r["ci_high"]),
            fixed(r["median"]) + unit(r) if r["judged"] else "-",
            f"{r['deviation']:+.1%}" if r["judged"] else "-",
            _score(r),
            "FLAGGED" if r["flagged"] else ("outlier" if r["outlier"] else ("-" if r["judged"] else "not judged")),
            f"{r['nights_flagged']} of {r['nights_judged']}",
        )
        for r in s["rows"]
    ]
    print("\neach key tonight (a key's flag is a hint; the verdicts above pool them), worst first:")
    for line in columns(header, table, left=(0, 1, 2, *range(3, 3 + len(group_by)), -2)):
        print(line)
    if len(s["rows"]) < s["total_rows"]:
        print(f"(showing the worst {len(s['rows'])} of {s['total_rows']} rows; --limit 0 for all)")
