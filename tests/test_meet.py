"""What the nodes of a multi-node run decide when they meet (perfsuite.plugin.meet.verdict), and
the options a node that refused its run still reads to tell the others."""

from pathlib import Path

import pytest

from perfsuite.config.project import load_some
from perfsuite.plugin.meet import Plan, verdict

IDS = ["test_suite.py::test_throughput[a]", "test_suite.py::test_scaling[a]"]


def plan(rank, **kw):
    return Plan.of(rank, 120.0, **{"case_ids": IDS, **kw})


def test_nodes_with_the_same_plan_go_on():
    assert verdict([plan(0), plan(1)], 0) is None
    assert Plan.of(0, 1, case_ids=IDS).digest == Plan.of(0, 1, case_ids=IDS[::-1]).digest


def test_a_node_that_refused_stops_the_others_with_its_line():
    plans = [plan(0, error="--perf-windows: must be >= 1, got '0'", case_ids=[]), plan(1), plan(2)]
    assert verdict(plans, 1) == "node 0 stopped before its first burst: --perf-windows: must be >= 1, got '0'"
    assert verdict(plans, 0) is None  # its own error says why


def test_several_refusals_are_counted():
    plans = [plan(0), plan(1, error="a"), plan(2, error="b")]
    assert verdict(plans, 0) == "node 1 stopped before its first burst (and 1 more nodes): a"


def test_different_selections_stop_every_node():
    plans = [plan(0), plan(1, case_ids=IDS[:1])]
    line = verdict(plans, 0)
    assert line is not None and line.startswith("the nodes selected different cases (node 0 2, node 1 1 cases")
    assert verdict(plans, 1) == line


def test_different_versions_stop_every_node():
    other = Plan(1, None, 2, plan(0).digest, "0.0.1", 120.0)
    assert "different perfsuite versions" in verdict([plan(0), other], 0)


def test_the_meet_options_survive_a_refused_option(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.perfsuite]\nnnodes = 2\nwindows = 0\nrdzv_timeout = "soon"\n')
    given = {"node_rank": "1", "rdzv_endpoint": "node0:29400"}
    some = load_some(tmp_path, ("nnodes", "node_rank", "rdzv_endpoint", "rdzv_timeout"), given)
    assert some == {"nnodes": 2, "node_rank": 1, "rdzv_endpoint": "node0:29400", "rdzv_timeout": 120.0}


@pytest.mark.parametrize("text", ["not toml [", ""])
def test_an_unreadable_table_gives_the_defaults(tmp_path: Path, text):
    (tmp_path / "pyproject.toml").write_text(text)
    assert load_some(tmp_path, ("nnodes",), {}) == {"nnodes": 1}
