"""The fleet read (perfsuite.history.fleet_read.read_fleet) against the rule it states, written out
plainly: in each night's window, each node's figure of each key is that of its latest run
there, a run stands in one night at most (the newest whose window holds it), and of a key a run
measured twice, the most pooled burst stands. Histories are drawn by hypothesis: runs at random
hours, windows of 24 hours and of 60 (which overlap), keys measured twice, bursts that failed."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("sqlalchemy", reason="the history needs its extra: pip install -e '.[history]'")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from memory_folder import backup_history  # noqa: E402

from perfsuite.history import db  # noqa: E402
from perfsuite.history.fleet_read import night_windows, read_fleet  # noqa: E402

START = datetime(2026, 3, 1, tzinfo=UTC)
END = (START + timedelta(hours=100)).replace(tzinfo=None)
NODES = ("n1", "n2", "n3")
KEYS = ("k1", "k2", "k3")
PRINTS = ("cpu-a", "cpu-b")

burst = st.tuples(
    st.sampled_from(KEYS),
    st.one_of(st.none(), st.integers(1, 5000).map(float)),  # None: measured nothing
    st.integers(1, 4),  # bursts pooled
)
run = st.tuples(
    st.sampled_from(NODES),
    st.integers(0, 99),  # hours after START: some before the nights read, none after END
    st.sampled_from(PRINTS),
    st.lists(burst, min_size=1, max_size=4),
)


@pytest.fixture(scope="module")
def empty(tmp_path_factory):
    """A history with its schema and no run: each example starts from a copy, not a new schema."""
    path = tmp_path_factory.mktemp("empty") / "h.db"
    db.open_history(f"sqlite:///{path}").dispose()
    return path


def _write(url: str, runs: list) -> list[dict]:
    """The runs written, as the reference reads them back: id, node, time, fingerprint, rows."""
    engine = db.open_history(url)
    out = []
    try:
        for number, (node, hours, fingerprint, rows) in enumerate(runs, 1):
            at = START + timedelta(hours=hours)
            doc = {
                "uuid": uuid.uuid4().hex,
                "mode": "gate",
                "outcome": "passed",
                "source": "run",
                "run": {"date": at.isoformat(), "node": node, "fingerprints": {"cpu": {"id": fingerprint}}},
                "results": [
                    {
                        "key": k,
                        "device_kind": "cpu",
                        "throughput": x,
                        "unit": "img/s",
                        "ci_low": x,
                        "ci_high": x,
                        "runs": pooled,
                    }
                    for k, x, pooled in rows
                ],
            }
            db.write_run(engine, doc)
            out.append({"id": number, "node": node, "at": at.replace(tzinfo=None), "fp": fingerprint, "rows": rows})
    finally:
        engine.dispose()
    return out


def _expected(runs: list[dict], since: timedelta, nights: int) -> dict:
    """(node, (fingerprint, key), night) -> (figure, run id), by the rule, one cell at a time."""
    windows = night_windows(END, since, nights)
    out, stood = {}, set()  # stood: (node, fleet key, run id) that took a newer night
    for k, (start, end) in enumerate(windows):
        for node in NODES:
            for fp in PRINTS:
                for key in KEYS:
                    chances = [
                        r
                        for r in runs
                        if r["node"] == node and r["fp"] == fp and start < r["at"] <= end
                        and (node, (fp, key), r["id"]) not in stood
                        and any(b[0] == key and b[1] is not None for b in r["rows"])
                    ]  # fmt: skip
                    if not chances:
                        continue
                    latest = max(chances, key=lambda r: (r["at"], r["id"]))
                    measured = [b for b in latest["rows"] if b[0] == key and b[1] is not None]
                    best = max(b[2] for b in measured)
                    out[(node, (fp, key), k)] = ([b[1] for b in measured if b[2] == best], latest["id"])
                    stood.add((node, (fp, key), latest["id"]))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=st.lists(run, min_size=1, max_size=12), hours=st.sampled_from([24, 60]), nights=st.integers(1, 4))
def test_each_figure_is_its_nights_latest_and_a_run_stands_once(empty, tmp_path_factory, runs, hours, nights):
    path = tmp_path_factory.mktemp("read") / "h.db"
    backup_history(empty, path)
    url = f"sqlite:///{path}"
    written = _write(url, runs)
    engine = db.open_history(url, write=False)
    try:
        fleet = read_fleet(engine, END, timedelta(hours=hours), nights)
    finally:
        engine.dispose()
    want = _expected(written, timedelta(hours=hours), nights)
    got = {}
    for i, node in enumerate(fleet.nodes):
        for j, (fp, key) in enumerate(fleet.keys):
            for k in range(nights):
                if not math.isnan(fleet.figures[i, j, k]):
                    got[(node, (fp, key), k)] = (float(fleet.figures[i, j, k]), int(fleet.runs_at[i, j, k]))
                else:
                    assert fleet.runs_at[i, j, k] == -1
    assert got.keys() == want.keys()
    for cell, (figure, run_id) in got.items():
        figures, expected_run = want[cell]
        # Of equally pooled bursts of one key in one run, the history's order decides: any of them.
        assert run_id == expected_run and figure in figures, cell
    for (node, fkey, k), (figure, run_id) in got.items():
        if k == 0:
            i, j = fleet.nodes.index(node), fleet.keys.index(fkey)
            assert fleet.run_ids[i, j] == run_id and fleet.ci[i, j, 0] == figure  # ci_low was written as the figure
    # Every key of a run in the nights read is a column, every node of one a row.
    windows = night_windows(END, timedelta(hours=hours), nights)
    inside = [r for r in written if any(s < r["at"] <= e for s, e in windows)]
    assert set(fleet.nodes) == {r["node"] for r in inside}
    assert set(fleet.keys) >= {(fp, key) for (_, (fp, key), _) in want}
