"""How long ``python -m perfsuite history fleet`` and ``python -m perfsuite triage`` take on a
fleet-sized history.

    .venv/bin/python benchmarks/fleet_query.py [--hosts 1000] [--keys 80] [--nights 30]
        [--sqlite PATH] [--postgresql URL | --start-postgresql] [--only {fleet,triage}]
        [--repeats 3] [--json FILE]

Builds a history of HOSTS nodes x KEYS burst keys x NIGHTS nights (by default 30,000 runs and
2,400,000 bursts, one hardware fingerprint) in SQLite and/or PostgreSQL, then times both
commands as a user runs them, a fresh process each time (interpreter start and imports
included), with ``--history URL --at <05:00 UTC of the last night, 3 hours after its first run>``:
``history fleet`` with its defaults (24 h nights, 7 nights pooled), with ``--nights 1`` and
with ``--json --limit 0``; ``triage`` with its defaults (the last 30 nights), with
``--markdown FILE`` and with ``--json``. ``--only fleet`` or ``--only triage`` times one of
the two (default: both). ``--start-postgresql`` runs a throwaway server
(tests/postgres_server.py: initdb and pg_ctl, deleted afterwards).

The history: every host runs every key each night at 02:00 UTC plus 7 s per host; each
figure is its key's level times 1 + N(0, 1%); hosts 0-2 run 8% slower from night NIGHTS-5
on (the ones ``history fleet`` flags). ``triage`` should report one incident, of 3 nodes
(those hosts: gpu0000-gpu0002), open (exit 3); both commands exit 0 or 3, and either counts
as success here. Runs and bursts are bulk-inserted (SQLite: executemany in batches;
PostgreSQL: COPY), not through ``db.write_run``, whose transaction per run would take an
hour here; each burst's stored JSON row is a --perf-json row of 31 fields (about 900
bytes). A database already built with the same shape is reused (--rebuild to build anew).
PostgreSQL gets VACUUM ANALYZE after the load, as its autovacuum would do on its own.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import sqlalchemy as sa  # noqa: E402

from perfsuite.history import db, schema  # noqa: E402
from perfsuite.history.url import normalise, shown  # noqa: E402

START = datetime.datetime(2026, 1, 1, 2, 0)  # naive UTC, as the history keeps it
FINGERPRINT = "cpu-bench-fleet"
SLOW_HOSTS, SLOWDOWN, NOISE = 3, 0.08, 0.01
BATCH = 20_000


def key_name(k: int) -> str:
    return f"torch/model{k:02d}/cuda8/nodes1/device/bs{32 << (k % 3)}/img224/fp32"


def shape(hosts: int, keys: int, nights: int) -> dict:
    return {"hosts": hosts, "keys": keys, "nights": nights, "runs": hosts * nights, "bursts": hosts * keys * nights}


def _run_object(host: int, night: int, when: datetime.datetime, rnd: random.Random) -> dict:
    return {
        "date": when.isoformat() + "+00:00",
        "host": f"pod-{rnd.getrandbits(32):08x}",  # pods: host names say nothing
        "node": f"gpu{host:04d}",
        "python": "3.11.9",
        "git_commit": f"{night:040x}",
        "fingerprints": {"cpu": {"id": FINGERPRINT, "kind": "cpu"}},
        "frameworks": {"torch": "2.13.0"},
        "driver": "580.65",
        "cuda": "13.0",
        "labels": {"pool": "a" if host % 2 else "b"},
    }


def _row(key: str, k: int, ips: float) -> dict:
    samples = [round(ips * (1 + 0.004 * ((i * 7) % 5 - 2)), 3) for i in range(10)]
    return {
        "key": key,
        "id": key,
        "label": f"torch model{k:02d} on 8 GPUs",
        "framework": "torch",
        "framework_version": "2.13.0",
        "model": f"model{k:02d}",
        "device_kind": "cpu",
        "device_name": "bench",
        "devices": 8,
        "nodes": 1,
        "world_size": 8,
        "data_location": "device",
        "batch_size": 32,
        "image_size": 224,
        "precision": "fp32",
        "variable_update": "replicated",
        "mode": "train",
        "windows": 10,
        "runs": 1,
        "run_medians": [ips],
        "images_per_sec": ips,
        "ci_low": ips * 0.995,
        "ci_high": ips * 1.005,
        "samples": samples,
        "window_seconds": [1.0] * 10,
        "verdict": "pass",
        "change": 0.001,
        "p_value": 0.4,
        "baseline_images_per_sec": ips,
        "saved": False,
        "tests": [f"tests_perf/test_suite.py::test_throughput[{key}]"],
    }


def _generate(hosts: int, keys: int, nights: int, with_bursts: bool = True):
    """(run values, [burst values]) night by night, host by host; run ids from 1. Each run's
    figures come from a generator seeded with its id: the same history every time."""
    levels = [100.0 * (1 + 0.5 * k) for k in range(keys)]
    names = [key_name(k) for k in range(keys)]
    run_id = 0
    for night in range(nights):
        for host in range(hosts):
            run_id += 1
            rnd = random.Random(run_id)
            when = START + datetime.timedelta(days=night, seconds=7 * host)
            info = _run_object(host, night, when, rnd)
            run = {
                "id": run_id,
                "uuid": f"bench-{run_id}",
                "started_at": when,
                "date": info["date"],
                "git_commit": info["git_commit"],
                "host": info["host"],
                "node": info["node"],
                "cpu_fingerprint": FINGERPRINT,
                "gpu_fingerprint": None,
                "frameworks": info["frameworks"],
                "driver": info["driver"],
                "cuda": info["cuda"],
                "cudnn": None,
                "nccl": None,
                "container": None,
                "labels": info["labels"],
                "mode": "gate",
                "outcome": "passed",
                "source": "run",
                "info": info,
            }
            slow = 1 - SLOWDOWN if host < SLOW_HOSTS and night >= nights - 5 else 1.0
            bursts = []
            for k, key in enumerate(names if with_bursts else ()):
                ips = round(levels[k] * slow * (1 + rnd.gauss(0, NOISE)), 3)
                bursts.append(
                    {
                        "run_id": run_id,
                        "fingerprint": FINGERPRINT,
                        "key": key,
                        "framework": "torch",
                        "model": f"model{k:02d}",
                        "device_kind": "cpu",
                        "devices": 8,
                        "nodes": 1,
                        "data_location": "device",
                        "variable_update": "replicated",
                        "precision": "fp32",
                        "batch_size": 32,
                        "throughput": ips,
                        "unit": "img/s",
                        "ci_low": ips * 0.995,
                        "ci_high": ips * 1.005,
                        "bursts_pooled": 1,
                        "scaling_efficiency": None,
                        "verdict": "pass",
                        "change": 0.001,
                        "row": _row(key, k, ips),
                    }
                )
            yield run, bursts


def _counts(url: str) -> tuple[int, int] | None:
    try:
        engine = db.open_history(url, write=False)
    except db.UNAVAILABLE:
        return None
    try:
        with engine.connect() as conn:
            runs = conn.execute(sa.select(sa.func.count()).select_from(schema.runs)).scalar()
            bursts = conn.execute(sa.select(sa.func.count()).select_from(schema.bursts)).scalar()
        return runs, bursts
    finally:
        engine.dispose()


def build(url: str, hosts: int, keys: int, nights: int, rebuild: bool) -> float | None:
    """Fill ``url``; seconds it took, or None when a history of this shape was there."""
    want = shape(hosts, keys, nights)
    found = None if rebuild else _counts(url)
    if found == (want["runs"], want["bursts"]):
        return None
    t0 = time.perf_counter()
    engine = db.open_history(url)  # the schema, at this perfsuite's version
    try:
        with engine.begin() as conn:
            conn.execute(sa.delete(schema.bursts))
            conn.execute(sa.delete(schema.runs))
        if engine.dialect.name == "postgresql":
            _copy_postgresql(engine, hosts, keys, nights)
        else:
            _insert(engine, hosts, keys, nights)
    finally:
        engine.dispose()
    return time.perf_counter() - t0


def _insert(engine: sa.Engine, hosts: int, keys: int, nights: int) -> None:
    runs, bursts = [], []

    def flush():
        with engine.begin() as conn:
            if runs:
                conn.execute(sa.insert(schema.runs), runs)
            if bursts:
                conn.execute(sa.insert(schema.bursts), bursts)
        runs.clear()
        bursts.clear()

    for run, rows in _generate(hosts, keys, nights):
        runs.append(run)
        bursts.extend(rows)
        if len(bursts) >= BATCH:
            flush()
    flush()


def _copy_postgresql(engine: sa.Engine, hosts: int, keys: int, nights: int) -> None:
    run_cols = [c.name for c in schema.runs.columns]
    burst_cols = [c.name for c in schema.bursts.columns if c.name != "id"]
    json_cols = {"frameworks", "labels", "info", "row"}

    def values(row: dict, cols: list[str]) -> list:
        return [json.dumps(row[c]) if c in json_cols and row[c] is not None else row[c] for c in cols]

    raw = engine.raw_connection()
    try:
        with raw.cursor() as cur:
            with cur.copy(f"COPY runs ({', '.join(run_cols)}) FROM STDIN") as runs_copy:
                for run, _ in _generate(hosts, keys, nights, with_bursts=False):
                    runs_copy.write_row(values(run, run_cols))
            with cur.copy(f"COPY bursts ({', '.join(burst_cols)}) FROM STDIN") as bursts_copy:
                for _, rows in _generate(hosts, keys, nights):
                    for row in rows:
                        bursts_copy.write_row(values(row, burst_cols))
            cur.execute("SELECT setval(pg_get_serial_sequence('runs', 'id'), (SELECT max(id) FROM runs))")
        raw.commit()
        raw.driver_connection.autocommit = True
        with raw.cursor() as cur:
            cur.execute("VACUUM ANALYZE runs")
            cur.execute("VACUUM ANALYZE bursts")
    finally:
        raw.close()


def time_command(url: str, at: str, repeats: int, argv: list[str]) -> tuple[list[float], list[float], str]:
    """``python -m perfsuite *argv --history URL --at AT`` (argv: ``["history", "fleet", ...]``,
    ``["triage", ...]``) run ``repeats`` times: wall-clock seconds of each run, the CPU seconds
    (user + system) of the command's own process, and the last run's standard output. On a busy
    machine the first grows with the load, the second hardly does. A PostgreSQL server's own CPU
    time is in neither list. Exit codes 0 and 3 (nothing to report, something to report) both
    count as success."""
    cmd = [sys.executable, "-m", "perfsuite", *argv, "--history", url, "--at", at]
    times, cpu, out = [], [], ""
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if proc.returncode not in (0, 3):
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
        out = proc.stdout
    return times, cpu, out


def measure(name: str, url: str, args: argparse.Namespace) -> dict:
    built = build(url, args.hosts, args.keys, args.nights, args.rebuild)
    print(
        f"{name}: {shown(url)}: "
        + ("reused the history already there" if built is None else f"built in {built:.0f} s"),
        flush=True,
    )
    at = (START + datetime.timedelta(days=args.nights - 1, hours=3)).isoformat() + "Z"
    result = {"backend": name, "history": shown(url), "build_seconds": built, "at": at, "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="perfsuite-fleet-bench-") as tmp:
        variants = []
        if args.only in (None, "fleet"):
            fleet = ["history", "fleet"]
            variants += [
                ("default", fleet, []),
                ("one_night", fleet, ["--nights", "1"]),
                ("json_all_rows", fleet, ["--json", "--limit", "0"]),
            ]
        if args.only in (None, "triage"):
            variants += [
                ("triage", ["triage"], []),
                ("triage_markdown", ["triage"], ["--markdown", str(Path(tmp) / "triage.md")]),
                ("triage_json", ["triage"], ["--json"]),
            ]
        for label, command, extra in variants:
            times, cpu, out = time_command(url, at, args.repeats, [*command, *extra])
            result[label] = {"seconds": times, "best": min(times), "cpu_seconds": cpu}
            print(
                f"  {' '.join(command)} {' '.join(extra) or '(defaults)'}: best {min(times):.2f} s of "
                f"{args.repeats} ({', '.join(f'{t:.2f}' for t in times)}); CPU {', '.join(f'{t:.2f}' for t in cpu)} s",
                flush=True,
            )
            if label in ("default", "triage"):
                lines = out.splitlines()[:6]
                result["first_lines" if label == "default" else "triage_first_lines"] = lines
                print("    " + "\n    ".join(lines))
    result["load_after"] = os.getloadavg()
    print(f"  load average before {_load(result['load_before'])}, after {_load(result['load_after'])}")
    return result


def _load(load: tuple[float, float, float]) -> str:
    return " ".join(f"{x:.2f}" for x in load)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=1000)
    p.add_argument("--keys", type=int, default=80)
    p.add_argument("--nights", type=int, default=30)
    p.add_argument("--sqlite", metavar="PATH", help="the SQLite file (default: /tmp/perfsuite-fleet-bench.db)")
    p.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    p.add_argument("--postgresql", metavar="URL", help="a PostgreSQL database to fill (its tables are emptied)")
    p.add_argument("--start-postgresql", action="store_true", help="fill a throwaway PostgreSQL server")
    p.add_argument(
        "--only", choices=("fleet", "triage"), help="time only `history fleet` or only `triage` (default: both)"
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rebuild", action="store_true", help="build the history even when one of this shape is there")
    p.add_argument("--json", metavar="FILE", help="write the figures here too")
    args = p.parse_args(argv)
    from perfsuite.common import hardware

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    context = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit.strip() or None,
        "hardware": hardware.describe(hardware.cpu_fingerprint()),
        "python": platform.python_version(),
        "history": shape(args.hosts, args.keys, args.nights),
    }
    print(" ".join(f"{k}: {v};" for k, v in context.items()))
    results: list[dict] = [context]
    if not args.no_sqlite:
        path = Path(args.sqlite or "/tmp/perfsuite-fleet-bench.db")
        results.append(measure("sqlite", normalise(str(path), Path.cwd()), args))
    if args.postgresql:
        results.append(measure("postgresql", args.postgresql, args))
    elif args.start_postgresql:
        from postgres_server import postgres_server

        with contextlib.ExitStack() as stack:
            url = stack.enter_context(postgres_server())
            results.append(measure("postgresql", url, args))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
