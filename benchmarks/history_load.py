"""A fleet's burst of writers on one PostgreSQL history: every run stored exactly once.

    .venv/bin/python benchmarks/history_load.py [--writers 200] [--max-connections 20]
        [--pool-size 15] [--retry 60] [--via direct,pgbouncer] [--cli] [--json FILE]

Starts a throwaway PostgreSQL server with ``max_connections`` (tests/postgres_server.py) and,
for ``--via pgbouncer``, a PgBouncer in transaction pooling mode in front of it with
``--pool-size`` server connections (tests/pgbouncer_server.py). In each way a fresh database
is seeded with a small fleet (6 nodes x 4 keys x 10 nights, one node 10% slow); then WRITERS
nodes each run ``python -m perfsuite history import --history URL --retry S run.json`` at the
same instant, released together after every one has started, while ``history fleet`` and
``triage`` (``--at`` the end of the seeded nights: the new runs are after it) read the history
again and again, each waiting READ_PAUSE_S between its reads. A thread samples the server's
client connections in ``pg_stat_activity`` every 5 ms, on a connection of its own (one of
``max_connections``).

The writers and readers are processes forked from a server that has imported perfsuite,
SQLAlchemy, psycopg and what the reads need (Otava, SciPy), each calling the command's entry
point (perfsuite.commands.main.main) as ``python -m perfsuite`` does: a fleet's nodes start
their writes within milliseconds, as here, and pay for their interpreter on their own cores,
not on the database's. ``--cli`` starts each as a real ``python -m perfsuite`` process instead
(the interpreter and imports on this machine's cores spread the burst out).

Checked, each a line of the result and the exit code (1 if any fails): every run stored or
spooled, none both, none twice; a writer's exit 0 is its run stored, 75 its run spooled; every
read during the writes answers as it did before them (the same output, the same exit code);
through PgBouncer, the server's client connections never above the pool. Reported: the time from the release
to the last run stored, the median writer's, the writers refused at least once, the peak of
the server's client connections, and the reads made while writes were going on.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

FINGERPRINT = "cpu-load-fleet"
AT = datetime.datetime(2026, 1, 10, 6, 0)  # the reads' --at (UTC): the seeded nights end here
SEED_NODES, SEED_KEYS, SEED_NIGHTS, SLOW = 6, 4, 10, 0.10
READS = {
    "history fleet": ["history", "fleet", "--json"],
    "triage": ["triage", "--json"],
}
SPOOLED_EXIT = 75
READ_PAUSE_S = 0.2  # between one reader's reads: a read then starts within this of the writers' end
# What the writers import, and what the readers' commands import on their first read (Otava
# and SciPy among them): imported once in the forkserver, not once in each process it forks.
PRELOAD = [
    "perfsuite.commands.main",
    "perfsuite.history.db",
    "perfsuite.history.recorder",
    "sqlalchemy.dialects.postgresql.psycopg",
    "psycopg",
    "perfsuite.history.fleet_read",
    "perfsuite.analysis.node_verdict",
    "perfsuite.history.triage",
    "perfsuite.commands.triage_report",
    "otava.analysis",
]


def _row(key: str, ips: float) -> dict[str, Any]:
    return {
        "key": key,
        "device_kind": "cpu",
        "framework": "torch",
        "model": "load",
        "devices": 1,
        "nodes": 1,
        "images_per_sec": ips,
        "ci_low": ips * 0.995,
        "ci_high": ips * 1.005,
        "runs": 1,
        "verdict": "pass",
    }


def _results(node: str, when: datetime.datetime, figures: list[float]) -> dict[str, Any]:
    """A --perf-json file's content: one run of ``node`` at ``when``."""
    run = {
        "date": when.replace(tzinfo=datetime.UTC).isoformat(),
        "host": node,
        "node": node,
        "python": "3.11",
        "git_commit": "c0ffee",
        "fingerprints": {"cpu": {"id": FINGERPRINT}},
        "frameworks": {"torch": "2.13.0"},
        "labels": {},
    }
    return {"schema_version": 5, "run": run, "results": [_row(f"load/k{k}", ips) for k, ips in enumerate(figures)]}


def seed(url: str) -> int:
    """The fleet the reads read: SEED_NODES nodes, each key every night at 02:00; node 0 SLOW."""
    import sqlalchemy as sa

    from perfsuite.history import db, document
    from perfsuite.history.url import engine_url

    db.open_history(url).dispose()  # the schema
    engine = sa.create_engine(engine_url(url), pool_size=1)  # one connection for the seeding, not one a run
    try:
        for night in range(SEED_NIGHTS):
            when = AT - datetime.timedelta(days=SEED_NIGHTS - 1 - night, hours=4)
            for n in range(SEED_NODES):
                wobble = [1 + 0.004 * (((n * 7 + k * 3 + night * 5) % 5) - 2) for k in range(SEED_KEYS)]
                level = (1 - SLOW) if n == 0 else 1.0
                data = _results(f"seed-{n}", when + datetime.timedelta(seconds=n), [100 * level * w for w in wobble])
                doc = {
                    "uuid": f"seed-{night}-{n}",
                    "mode": "gate",
                    "outcome": "passed",
                    "source": "seed",
                    "run": data["run"],
                    "results": [document.for_history(r) for r in data["results"]],
                }
                db.write_run(engine, doc)
    finally:
        engine.dispose()
    return SEED_NIGHTS * SEED_NODES


# --- the processes: each writer and reader calls the command as python -m perfsuite does -------------


def _command(argv: list[str], workdir: str, cache: str) -> tuple[int, str, str]:
    """``python -m perfsuite ARGV`` in this process, in ``workdir`` (no pyproject.toml of this
    repository steers it), its spool under ``cache``: (exit code, stdout, stderr)."""
    from perfsuite.commands.main import main

    os.environ["PERFSUITE_CACHE"] = cache
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(workdir), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def _answer(results: Any, function: Any, *args: Any) -> None:
    results.put(function(*args))


def _forked(ctx: Any, function: Any, *args: Any) -> Any:
    """``function(*args)`` in a process forked from the forkserver, which has imported what it
    needs: this process (the server's sampler, the checks) never imports what the reads import."""
    answer = ctx.Queue()
    proc = ctx.Process(target=_answer, args=(answer, function, *args))
    proc.start()
    try:
        return answer.get(timeout=600)
    finally:
        proc.join()


def _writer(node: str, argv: list[str], where: tuple[str, str], cli: bool, ready: Any, go: Any, results: Any) -> None:
    ready.put(node)
    go.wait()
    if cli:
        env = dict(os.environ, PERFSUITE_CACHE=where[1])
        done = subprocess.run(
            [sys.executable, "-m", "perfsuite", *argv], cwd=where[0], env=env, capture_output=True, text=True
        )
        code, err = done.returncode, done.stderr
    else:
        code, _, err = _command(argv, *where)
    results.put(("write", node, code, err, time.monotonic()))


def _reader(name: str, argv: list[str], where: tuple[str, str], ready: Any, go: Any, done: Any, results: Any) -> None:
    ready.put(name)
    go.wait()
    while True:  # at least once, then until the writers are done
        started = time.monotonic()
        code, out, err = _command(argv, *where)
        last = done.is_set()
        results.put(("read", name, code, out, err, started, last))
        if last:
            return
        done.wait(READ_PAUSE_S)  # as a dashboard reads: the cores and the server left to the writers


class Sampler(threading.Thread):
    """The server's client connections, its own left out, every 5 ms: the peak."""

    def __init__(self, server: str) -> None:
        import psycopg

        super().__init__(daemon=True)
        self.conn = psycopg.connect(server, autocommit=True)
        self.peak, self.samples, self.stop = 0, 0, threading.Event()

    def run(self) -> None:
        query = (
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        while not self.stop.is_set():
            (count,) = self.conn.execute(query).fetchone() or (0,)
            self.peak, self.samples = max(self.peak, count), self.samples + 1
            time.sleep(0.005)
        self.conn.close()


# --- one way to the database ------------------------------------------------------------------------


def scenario(ctx: Any, server: str, url: str, via: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """WRITERS imports at once through ``url`` while the reads go on; the facts and the checks."""
    files = work / "runs"
    files.mkdir(parents=True)
    start = AT + datetime.timedelta(days=1)
    nodes = [f"load-{i:04d}" for i in range(args.writers)]
    for i, node in enumerate(nodes):
        run = _results(node, start + datetime.timedelta(seconds=i), [100.0] * SEED_KEYS)
        (files / f"{node}.json").write_text(json.dumps(run))
    where = (str(work), str(work / "cache"))
    common = ["--history", url, "--retry", f"{args.retry:g}"]
    reads = {name: [*argv, *common, "--at", AT.isoformat() + "Z"] for name, argv in READS.items()}
    ready, go, done, results = ctx.Queue(), ctx.Event(), ctx.Event(), ctx.Queue()
    reference = {name: _forked(ctx, _command, argv, *where) for name, argv in reads.items()}
    procs = [
        ctx.Process(
            target=_writer,
            args=(
                node,
                ["history", "import", *common, str(files / f"{node}.json")],
                where,
                args.cli,
                ready,
                go,
                results,
            ),
        )
        for node in nodes
    ]
    procs += [
        ctx.Process(target=_reader, args=(name, argv, where, ready, go, done, results)) for name, argv in reads.items()
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=600)  # every process forked and waiting: one release for all
    sampler = Sampler(server)
    sampler.start()
    released = time.monotonic()
    go.set()
    writes, read = _collect(results, args.writers, done, len(reads))
    sampler.stop.set()
    sampler.join()
    for p in procs:
        p.join()
    return _facts(url, via, args, where[1], released, writes, read, reference, sampler)


def _collect(results: Any, writers: int, done: Any, readers: int) -> tuple[list[tuple], list[tuple]]:
    """Every writer's outcome, and every read until each reader made its last."""
    writes: list[tuple] = []
    reads: list[tuple] = []
    while len(writes) < writers or sum(r[6] for r in reads) < readers:
        item = results.get(timeout=900)
        (writes if item[0] == "write" else reads).append(item)
        if len(writes) == writers:
            done.set()
    return writes, reads


def _stored(url: str) -> list[str]:
    """The node of each run of the writers' nodes in the history, once per run."""
    import psycopg

    with psycopg.connect(url) as conn:
        return [node for (node,) in conn.execute("SELECT node FROM runs WHERE node LIKE 'load-%'")]


def _spooled(url: str, cache: str) -> list[str]:
    from perfsuite.history import spool

    os.environ["PERFSUITE_CACHE"] = cache
    return [spool.read(p)["run"]["node"] for p in spool.pending(url)]


def _facts(url, via, args, cache, released, writes, reads, reference, sampler) -> dict[str, Any]:  # noqa: ANN001
    stored, spooled = _stored(url), _spooled(url, cache)
    codes = Counter(code for _, _, code, _, _ in writes)
    exited = {code: {node for _, node, c, _, _ in writes if c == code} for code in codes}
    ends = sorted(end - released for *_, end in writes)
    last_write = released + ends[-1]
    same = {name: sum(1 for r in reads if r[1] == name and (r[2], r[3]) == reference[name][:2]) for name in READS}
    during = {name: sum(1 for r in reads if r[1] == name and r[5] < last_write) for name in READS}
    made = {name: sum(1 for r in reads if r[1] == name) for name in READS}
    every = {w[1] for w in writes}
    checks = {
        "every run stored or spooled, none twice": sorted(stored + spooled) == sorted(every),
        "exit 0: its run stored; 75: stored or spooled; no other": set(codes) <= {0, SPOOLED_EXIT}
        and exited.get(0, set()) <= set(stored),
        "every read answers as before the writes": all(same[n] == made[n] for n in READS),
        # PgBouncer holds the server to its pool, whatever the writers; the server itself holds a
        # direct writer to max_connections (the sampler's connection among them)
        "the server's connections within the pool (PgBouncer) or max_connections": sampler.peak
        <= (args.pool_size if via == "pgbouncer" else args.max_connections - 1),
    }
    return {
        "via": via,
        "writers": args.writers,
        "max_connections": args.max_connections,
        "pool_size": args.pool_size if via == "pgbouncer" else None,
        "retry_s": args.retry,
        "cli": args.cli,
        "stored": len(stored),
        "spooled": len(spooled),
        "exit_codes": {str(k): v for k, v in sorted(codes.items())},
        "refused_writers": sum(1 for w in writes if "refuses for now" in w[3]),
        "last_stored_s": round(ends[-1], 3),
        "median_stored_s": round(statistics.median(ends), 3),
        "peak_connections": sampler.peak,
        "samples": sampler.samples,
        "reads": {n: {"made": made[n], "during_writes": during[n], "as_before": same[n]} for n in READS},
        "reference_exit": {n: reference[n][0] for n in READS},
        "errors": sorted({w[3].strip().splitlines()[-1] for w in writes if w[2] not in (0,) and w[3].strip()})[:5],
        "checks": checks,
        "ok": all(checks.values()),
    }


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from pgbouncer_server import pgbouncer
    from postgres_server import create_database, postgres_server

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    out = []
    with (
        tempfile.TemporaryDirectory(prefix="history-load-") as tmp,
        postgres_server({"max_connections": str(args.max_connections)}) as server,
    ):
        for via in args.via:
            url = create_database(server, f"load_{via}")
            seed(url)
            with contextlib.ExitStack() as stack:
                if via == "pgbouncer":
                    url = stack.enter_context(pgbouncer(url, pool_size=args.pool_size))
                out.append(scenario(ctx, server, url, via, args, Path(tmp) / via))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--writers", type=int, default=200)
    p.add_argument("--max-connections", type=int, default=20)
    p.add_argument("--pool-size", type=int, default=15, help="PgBouncer's server connections")
    p.add_argument("--retry", type=float, default=60.0, help="each writer's --retry")
    p.add_argument("--via", type=lambda s: s.split(","), default=["direct", "pgbouncer"])
    p.add_argument("--cli", action="store_true", help="each writer a python -m perfsuite process of its own")
    p.add_argument("--json", type=Path, help="also write the facts here")
    args = p.parse_args(argv)
    facts = run(args)
    for f in facts:
        print(
            f"{f['via']:9s} {f['writers']} writers, max_connections {f['max_connections']}"
            + (f", pool {f['pool_size']}" if f["pool_size"] else "")
            + f": stored {f['stored']}, spooled {f['spooled']}, exit codes {f['exit_codes']}, "
            f"refused at least once {f['refused_writers']}; last stored {f['last_stored_s']:.2f} s "
            f"(median {f['median_stored_s']:.2f} s); peak connections {f['peak_connections']} "
            f"(+1 sampling, {f['samples']} samples); reads during the writes "
            + ", ".join(
                f"{n} {r['during_writes']} of {r['made']} as before {r['as_before']}" for n, r in f["reads"].items()
            )
        )
        for check, ok in f["checks"].items():
            print(f"  {'ok ' if ok else 'FAILED'} {check}")
    if args.json:
        args.json.write_text(json.dumps(facts, indent=1))
    return 0 if all(f["ok"] for f in facts) else 1


if __name__ == "__main__":
    sys.exit(main())
