"""The load benchmark (benchmarks/history_load.py), small: 10 writers at once against a server
of 5 connections (more writers than it lets in, three times PgBouncer's pool of 3), directly and
through PgBouncer, with `history fleet` and `triage` reading meanwhile. Every run stored exactly
once, every read as before the writes. The writers' bound is far beyond what the burst takes, so
that a busy machine is slower, never wrong; nothing here depends on a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("psycopg")
pytest.importorskip("sqlalchemy")
pytest.importorskip("otava")  # triage's change points

from pgbouncer_server import INSTALL, find_pgbouncer  # noqa: E402
from postgres_server import find_bindir  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WRITERS, CONNECTIONS, POOL = 10, 5, 3


def test_a_burst_of_writers_is_stored_exactly_once_directly_and_through_pgbouncer(tmp_path):
    if find_bindir() is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's postgresql package")
    if find_pgbouncer() is None:
        pytest.skip(INSTALL)
    facts = tmp_path / "facts.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "history_load.py"),
            *("--writers", str(WRITERS), "--max-connections", str(CONNECTIONS), "--pool-size", str(POOL)),
            *("--retry", "600", "--json", str(facts)),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    direct, pooled = json.loads(facts.read_text())
    assert (direct["via"], pooled["via"]) == ("direct", "pgbouncer")
    for f in (direct, pooled):
        assert f["ok"] and all(f["checks"].values()), f
        assert f["stored"] == WRITERS and f["spooled"] == 0 and f["exit_codes"] == {"0": WRITERS}, f
        for name, reads in f["reads"].items():
            assert reads["made"] >= 1 and reads["as_before"] == reads["made"], (name, f)
        assert f["reference_exit"] == {"history fleet": 0, "triage": 0}, f
    assert direct["peak_connections"] <= CONNECTIONS - 1  # the sampler holds the last one
    assert pooled["peak_connections"] <= POOL  # PgBouncer's pool, whatever the number of writers
