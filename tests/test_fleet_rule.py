"""One fleet rule everywhere: on histories of several fingerprints, written through the history's
own writer, the gate's peer check, ``history fleet --json``, the site's data and triage's slow
nodes name the same nodes with the same p-values, with the settings of [tool.perfsuite]."""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import random
import uuid
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

pytest.importorskip("sqlalchemy", reason="the history needs its extra: pip install -e '.[history]'")
pytest.importorskip("otava", reason="triage's change points need Apache Otava (the history extra)")

from memory_folder import memory_folder, one_connection  # noqa: E402

from perfsuite.analysis.peer_check import Peers, fleet_check  # noqa: E402
from perfsuite.commands import site as site_command  # noqa: E402
from perfsuite.commands.main import main  # noqa: E402
from perfsuite.config import project  # noqa: E402
from perfsuite.history import db  # noqa: E402
from perfsuite.history.fleet_read import DAY, read_for_gate  # noqa: E402
from perfsuite.site import data  # noqa: E402

START = datetime.datetime(2026, 3, 1, 2, 0)  # naive UTC: night 0's runs start here
WINDOW = 24.0
NOISE = 0.02

# One fingerprint's fleet: (nodes, keys, the slow node's slowdown and its slow nights, a node absent tonight)
fleets = st.tuples(
    st.integers(3, 8),
    st.integers(1, 3),
    st.one_of(st.none(), st.tuples(st.floats(0.04, 0.3), st.integers(1, 20))),
    st.booleans(),
)
rules = st.fixed_dictionaries(
    {
        "fleet_alpha": st.sampled_from([0.01, 0.05]),
        "fleet_nights": st.sampled_from([2, 3, 7]),
        "fleet_min_nodes": st.sampled_from([3, 4]),
    }
)


def _key(j: int) -> str:
    return f"torch/m{j}/cpu1/nodes1/device/bs8/img32/fp32/replicated"


def _write(url: str, shape: list[tuple], nights: int, seed: int) -> list[str]:
    """Night by night, every node of every fingerprint a run; returns the fingerprints."""
    rnd = random.Random(seed)
    prints = [f"cpu-{chr(ord('a') + f)}" for f in range(len(shape))]
    engine = one_connection(url)
    try:
        for fp, (nodes, keys, slow, absent) in zip(prints, shape):
            for i in range(nodes):
                for night in range(nights):
                    if absent and i == 0 and night == nights - 1:
                        continue  # did not report tonight
                    factor = 1.0
                    if slow is not None and i == nodes - 1 and night >= nights - slow[1]:
                        factor = 1 - slow[0]
                    when = START + datetime.timedelta(days=night, minutes=i)
                    run = {"date": when.isoformat() + "+00:00", "host": f"{fp}-{i:02d}", "node": f"{fp}-{i:02d}"}
                    run.update(fingerprints={"cpu": {"id": fp}}, labels={})
                    rows = []
                    for j in range(keys):
                        ips = 100.0 * (1 + j) * factor * (1 + rnd.gauss(0, NOISE))
                        rows.append(
                            {"key": _key(j), "device_kind": "cpu", "images_per_sec": ips, "ci_low": ips, "ci_high": ips}
                        )
                    doc = {"uuid": uuid.uuid4().hex, "mode": "gate", "outcome": "passed", "source": "run"}
                    db.write_run(engine, {**doc, "run": run, "results": rows})
    finally:
        engine.dispose()
    return prints


def _history_fleet(url: str, at: str, capsys) -> dict[tuple[str, str], dict]:
    assert main(["history", "fleet", "--history", url, "--at", at, "--json", "--limit", "0"]) == 0
    report = json.loads(capsys.readouterr().out)
    return {(v["fingerprint"], v["node"]): v for v in report["nodes"] if v["p_value"] is not None}


def _triage(url: str, at: str, capsys) -> dict[tuple[str, str], dict]:
    assert main(["triage", "--history", url, "--at", at, "--json"]) in (0, 3)
    report = json.loads(capsys.readouterr().out)
    return {(v["fingerprint"], v["node"]): v for v in report["slow_nodes"]}


def _site(url: str, end: datetime.datetime, rule) -> dict[tuple[str, str], dict]:
    judge = functools.partial(site_command.judgements, window=DAY, rule=rule)
    site = data.read(url, end, 30, None, judge, rule.tolerance)
    assert site is not None
    return {(f.fingerprint, v["node"]): v for f in site.fleets for v in f.verdicts if v["p_value"] is not None}


def _gate(
    url: str, shape: list[tuple], prints: list[str], end: datetime.datetime, rule
) -> dict[tuple[str, str], object]:
    """Each node that ran tonight, as its own pytest run's peer check judges it: its fingerprint's
    fleet read as the gate reads it, this node's figures tonight as this run's."""
    out = {}
    for fp, (nodes, *_) in zip(prints, shape):
        names = [f"{fp}-{i:02d}" for i in range(nodes)]
        # A node that ran tonight counts among tonight's nodes whoever reads: every such node's
        # gate reads the same fleet. Read as two of them (the last two: node 0 may be absent),
        # held equal, and shared by all.
        history, warning = read_for_gate(url, fp, WINDOW, rule, names[-1], now=end)
        assert warning is None and history is not None
        again, warning = read_for_gate(url, fp, WINDOW, rule, names[-2], now=end)
        assert warning is None and again is not None
        assert (again.nodes, again.keys, again.windows) == (history.nodes, history.keys, history.windows)
        assert np.array_equal(again.figures, history.figures, equal_nan=True)
        for node in names:
            row = history.nodes.index(node) if node in history.nodes else None
            tonight = (
                {} if row is None else {k: float(history.figures[row, j, 0]) for j, (_, k) in enumerate(history.keys)}
            )
            tonight = {k: v for k, v in tonight.items() if v == v}  # v == v: not NaN
            if not tonight:
                continue  # it did not run tonight: no gate judges it
            key, ips = next(iter(tonight.items()))
            peers = Peers(
                node, fp, tuple(history.nodes), tuple(k for _, k in history.keys), history.figures, tonight,
                WINDOW, rule, "warn",
            )  # fmt: skip
            burst = SimpleNamespace(throughput=ips, spec=SimpleNamespace(key=lambda k=key: k, label=key, unit="img/s"))
            check = fleet_check(burst, peers)
            if check is not None and check.verdict is not None:
                out[(fp, node)] = check
    return out


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    phases=[
        Phase.explicit,
        Phase.reuse,
        Phase.generate,
    ],  # a failing history is shown as drawn: shrinking one takes minutes
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    shape=st.lists(fleets, min_size=2, max_size=3), nights=st.integers(1, 20), table=rules, seed=st.integers(0, 2**31)
)
def test_the_gate_history_fleet_the_site_and_triage_name_the_same_slow_nodes(
    shape, nights, table, seed, tmp_path_factory, capsys
):
    folder = tmp_path_factory.mktemp("fleet-rule")
    url = f"sqlite:///{memory_folder(tmp_path_factory, 'fleet-rule') / 'history.db'}"
    prints = _write(url, shape, nights, seed)
    (folder / "pyproject.toml").write_text("[tool.perfsuite]\n" + "".join(f"{k} = {v}\n" for k, v in table.items()))
    end = START + datetime.timedelta(days=nights - 1, hours=6)
    at = end.strftime("%Y-%m-%dT%H:%MZ")
    with contextlib.chdir(folder):  # the commands read [tool.perfsuite] of ./pyproject.toml
        rule = project.load(folder).fleet_rule  # as the plugin resolves it
        fleet = _history_fleet(url, at, capsys)
        slow = _triage(url, at, capsys)
        shown = _site(url, end, rule)
        gate = _gate(url, shape, prints, end, rule)
    assert (rule.alpha, rule.nights, rule.min_nodes) == (
        table["fleet_alpha"],
        table["fleet_nights"],
        table["fleet_min_nodes"],
    )
    flagged = {where for where, v in fleet.items() if v["flagged"]}
    assert set(slow) == flagged
    assert {where for where, v in shown.items() if v["flagged"]} == flagged
    assert {where for where, check in gate.items() if check.flagged} == flagged
    assert set(shown) == set(fleet) and set(gate) == set(fleet)
    for where, v in fleet.items():
        for other in (shown[where], gate[where].verdict.as_dict(), *([slow[where]] if where in slow else [])):
            assert other["p_value"] == pytest.approx(v["p_value"], rel=1e-9, abs=1e-300), where
            assert other["adjusted_p"] == pytest.approx(v["adjusted_p"], rel=1e-9, abs=1e-300), where
            assert other["status"] == v["status"], where
