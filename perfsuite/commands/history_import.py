"""``python -m perfsuite history import [FILE ...]``: back-fill the history, and write what waits in the spool.

Every file is read and checked before any is written; each run is one transaction, and a
run already there (its uuid) is not written twice. While PostgreSQL refuses for now (too
many clients, a restart) the writes wait up to ``--retry``; past it the runs not yet written
are spooled, as a run of the suite spools its own, and the command exits with
``shared.SPOOLED``'s code: a scheduler's job learns that the runs are safe but not yet
written, and a later run or import writes them. A permanent error (a wrong password, a
missing database, a schema too new) is not retried: one line, exit 1, nothing spooled (the
files are where they were).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from perfsuite.commands import CommandError, Failure, shared
from perfsuite.history import spool
from perfsuite.history.url import HistoryError, shown

EXIT_CODES = (
    shared.DONE,
    (
        1,
        "the history or a file cannot be used (a permanent error: a wrong password, a missing database, a newer "
        "schema; a locked file, not a results file)",
    ),
    shared.BAD_ARGUMENTS,
    shared.SPOOLED,
)


class Spooled(CommandError):
    """The history refused past the bound: the runs wait in the spool."""

    exit_code = shared.SPOOLED[0]


def run(args: argparse.Namespace, url: str) -> int:
    from perfsuite.history import db, recorder
    from perfsuite.history.retry import StillRefused

    docs = [(path, _read(path)) for path in args.files]
    retry = shared.retry(args)
    report: dict[str, Any] = {"history": shown(url), "spooled": 0, "files": []}
    engine = None
    try:
        engine = db.open_history(url, write=True, retry=retry)
        report["spooled"], notes = recorder.flush(engine, url, retry)
        _flushed(args, url, report["spooled"], notes)
        for path, doc in docs:
            run_id = db.write_run(engine, doc, retry)
            report["files"].append(_written(args, path, doc, run_id))
    except StillRefused as exc:
        raise _spooled(url, exc, docs[len(report["files"]) :]) from None
    finally:
        if engine is not None:
            engine.dispose()
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    return 0


def _read(path: Path) -> dict[str, Any]:
    from perfsuite.history import document

    try:
        return document.from_file(path)
    except HistoryError as exc:
        text = str(exc)
        raise Failure(text if text.startswith(str(path)) else f"{path}: {text}") from None


def _flushed(args: argparse.Namespace, url: str, written: int, notes: list[str]) -> None:
    if args.json:
        return
    for note in notes:
        print(note)
    if written:
        print(f"wrote {written} spooled run{'s' if written != 1 else ''} to {shown(url)}")


def _written(args: argparse.Namespace, path: Path, doc: dict[str, Any], run_id: int | None) -> dict[str, Any]:
    bursts = len(doc["results"])
    if not args.json:
        print(
            f"{path}: already in the history"
            if run_id is None
            else f"imported {path} as run {run_id} ({bursts} burst{'s' if bursts != 1 else ''})"
        )
    return {"file": str(path), "run_id": run_id, "bursts": bursts, "already_there": run_id is None}


def _spooled(url: str, exc: BaseException, left: list[tuple[Path, dict[str, Any]]]) -> CommandError:
    """The runs not written yet, spooled; the line that says so (or, where the spool cannot be
    written, that the files are all there is)."""
    from perfsuite.history import db

    why = db.describe_error(url, exc)
    try:
        for _, doc in left:
            spool.spool(url, doc)
    except OSError as err:
        return Failure(f"{why}; the runs could not be spooled either ({err}): import the files again")
    waiting = len(spool.pending(url))
    runs = f"{len(left)} run{'s' if len(left) != 1 else ''} spooled to" if left else "the spooled runs stay in"
    return Spooled(
        f"{why}: {runs} {spool.folder(url)} ({waiting} waiting); a later run, or `history import` "
        "with no file, writes them"
    )


def add_parser(command: Any) -> None:
    """``history import``, made by ``history``'s ``command`` helper (its shared arguments)."""
    imp = command(
        "import",
        run,
        help="back-fill runs from --perf-json or report results.json files",
        description="Write each file's run, with its own date, commit and hardware, in a transaction "
        "of its own; all files are read and checked first. A file already imported is "
        "skipped. Runs spooled while the history was unreachable are written first; with no FILE, "
        "only they are (a job writes its run as soon as the history is back). While PostgreSQL "
        "refuses for now (too many clients, a restart) the writes wait up to --retry; past it the "
        f"runs not written are spooled and the exit code is {shared.SPOOLED[0]}.",
        epilog=shared.epilog(EXIT_CODES),
    )
    imp.add_argument("files", nargs="*", type=Path, metavar="FILE")
