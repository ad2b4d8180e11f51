"""What a run does with its history: write itself (after any spooled runs), or spool itself
when the database cannot be used; and read the series the drift check needs (the check
itself, and the change points, need Apache Otava: without it they say so, and the run is
recorded all the same).

Nothing here raises for an unusable database: the gate never fails for it and no run is
lost. Every outcome is a line for the run's summary. The write waits out what PostgreSQL
refuses for now (too many clients at 02:00, a restart: perfsuite.history.retry) up to the
run's bound, then spools; the reads for the checks try once, and a refused read skips its
check, said in one line, rather than hold the session up.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import sqlalchemy as sa

from perfsuite.analysis import changes
from perfsuite.common.text import redact
from perfsuite.history import db, spool
from perfsuite.history.document import THROUGHPUT, for_history, row_fingerprint
from perfsuite.history.retry import Retry, detail
from perfsuite.history.url import shown


def flush(engine: sa.Engine, url: str, retry: Retry | None = None) -> tuple[int, list[str]]:
    """Write every spooled run of ``url``; (runs written, lines about unreadable spool files)."""
    written, notes = 0, []
    for path in spool.pending(url):
        try:
            doc = spool.read(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            notes.append(f"perf history: spooled run {path} unreadable ({exc}); left in place")
            continue
        if db.write_run(engine, doc, retry) is not None:
            written += 1
        path.unlink(missing_ok=True)  # written now, or by an earlier flush that died before this
    return written, notes


def record(url: str, doc: dict[str, Any], retry_s: float = 0.0) -> list[str]:
    """Write ``doc`` to the history at ``url``, waiting up to ``retry_s`` seconds while it
    refuses for now; spool it if that fails. Lines for the summary."""
    lines: list[str] = []
    engine = None
    retry = Retry(retry_s)
    try:
        engine = db.open_history(url, retry=retry)
        flushed, notes = flush(engine, url, retry)
        lines.extend(notes)
        if flushed:
            lines.append(f"perf history: wrote {flushed} spooled run{'s' if flushed != 1 else ''} to {shown(url)}")
        run_id = db.write_run(engine, doc, retry)
        n = len(doc["results"])
        if run_id is None:  # written by an earlier try whose answer was lost, or spooled and flushed
            lines.append(f"perf history: this run is in {shown(url)} already" + _waited(retry))
        else:
            lines.append(
                f"perf history: run {run_id} ({n} burst{'s' if n != 1 else ''}) written to {shown(url)}"
                + _waited(retry)
            )
    except db.UNAVAILABLE as exc:
        lines.append(_spool(url, doc, db.describe_error(url, exc)))
    finally:
        if engine is not None:
            engine.dispose()
    return lines


def _waited(retry: Retry) -> str:
    """What the write waited for, where it did: the operator sizes the database by it."""
    if retry.last is None:
        return ""
    times = f"{retry.refused} time{'s' if retry.refused != 1 else ''}"
    return f", refused {times} first over {retry.waited:.1f} s ({redact(detail(retry.last))})"


def _spool(url: str, doc: dict[str, Any], why: str) -> str:
    try:
        path = spool.spool(url, doc)
    except OSError as exc:
        return f"warning: perf history unusable ({why}) and the run could not be spooled either: {exc}"
    waiting = len(spool.pending(url))
    return (
        f"warning: perf history unusable ({why}): run spooled to {path}; it is written on the next run "
        f"that reaches the history ({waiting} run{'s' if waiting != 1 else ''} waiting)"
    )


def load_series(
    url: str, fingerprints: Iterable[str], node: str | None = None
) -> tuple[dict[tuple[str | None, str], list[db.SeriesPoint]] | None, str | None]:
    """(fingerprint, key) -> past points oldest first, spooled runs included; or (None, why).

    ``node``: only that node's runs. In a fleet's shared history the nodes of one
    fingerprint interleave in each series, and a drift made of peers' runs is none of
    this node's (the peer check compares nodes)."""
    fingerprints = [f for f in fingerprints if f]
    engine = None
    warning = without_change_points()
    try:
        engine = db.open_history(url, write=False)
        found = db.all_series(engine, fingerprints, node=node)
    except db.NoHistory:
        found = {}  # the first night of a new history
    except db.UNAVAILABLE as exc:
        return None, f"warning: no drift check: perf history unusable ({db.describe_error(url, exc)})"
    finally:
        if engine is not None:
            engine.dispose()
    for path in spool.pending(url):  # not in the database yet, but nights all the same
        try:
            doc = spool.read(path)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if node is not None and doc["run"].get("node", doc["run"].get("host")) != node:
            continue
        for series, point in spooled_points(doc, fingerprints):
            found.setdefault(series, []).append(point)
    return found, warning


def without_change_points() -> str | None:
    """The line that says the drift check and change points are off, where Apache Otava cannot be
    imported (the history extra leaves it out: pyproject.toml says why); None where it can."""
    try:
        changes.load()
    except ImportError:
        return (
            f"warning: no drift check and no change points without Apache Otava ({changes.OTAVA_INSTALL}); "
            "the run is recorded all the same"
        )
    return None


def spooled_points(doc: dict[str, Any], fingerprints: list[str]) -> Iterator[tuple[tuple[str, str], db.SeriesPoint]]:
    """((fingerprint, key), SeriesPoint) of a run document's measured bursts on these fingerprints."""
    run = doc["run"]
    meta = {f: run.get(f) for f in db.META_FIELDS}
    seen: set[tuple[str, str]] = set()
    for row in map(for_history, doc["results"]):  # spooled by an older perfsuite: named by unit
        fp = row_fingerprint(run, row)
        ips = row.get(THROUGHPUT)
        if (
            fp is not None
            and fp in fingerprints
            and isinstance(ips, (int, float))
            and ips > 0
            and (fp, row["key"]) not in seen
        ):
            seen.add((fp, row["key"]))
            yield (
                (fp, row["key"]),
                db.SeriesPoint(None, run.get("date"), float(ips), row.get("ci_low"), row.get("ci_high"), meta),
            )
