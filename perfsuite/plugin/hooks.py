"""perfsuite's pytest hooks: options, markers, fixtures, parametrization, summary.

Engine logic lives elsewhere (cases, session, gate, launch); nothing here imports a
framework, so ``pytest --help`` stays fast with neither torch nor tensorflow installed.
"""

from __future__ import annotations

import sys

import pytest

from perfsuite.common import hardware
from perfsuite.common.hardware import HardwareError, cuda_device_count
from perfsuite.contract.spec import BurstSpec
from perfsuite.models.registry import model_names
from perfsuite.plugin import benchmark, cases, markers, meet, preflight, progress, record
from perfsuite.plugin.options import add_options, session_options, some_options
from perfsuite.plugin.pipeline import PerfGate
from perfsuite.plugin.preflight import PreflightError
from perfsuite.plugin.processes import stop_all
from perfsuite.plugin.session import PerfSession
from perfsuite.plugin.stops import stop_signals_interrupt
from perfsuite.reporting import terminal
from perfsuite.store.baseline import BaselineError

SESSION = pytest.StashKey[PerfSession]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser.getgroup("perfsuite", "perfsuite: training bursts gated against baselines"))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    markers.register_gate_marker(config)
    try:
        options = session_options(config)
    except pytest.UsageError as exc:
        if not config.option.help:
            _meet_refused(config, str(exc))
        raise
    config.stash[SESSION] = PerfSession(options, config.rootpath)


def _meet_refused(config: pytest.Config, error: str) -> None:
    """One node of several refused its options: it tells the others before it stops (perfsuite.plugin.meet)."""
    some = some_options(config, ("nnodes", "node_rank", "rdzv_endpoint", "rdzv_timeout"))
    if meet.can_meet(some["nnodes"], some["rdzv_endpoint"]) and some["node_rank"] < some["nnodes"]:
        plan = meet.Plan.of(some["node_rank"], some["rdzv_timeout"], error=error)
        meet.meet(plan, some["nnodes"], some["rdzv_endpoint"])


def _meet(session: pytest.Session, error: str | None) -> str | None:
    """The nodes of a multi-node run meet before the first burst: why this one stops with the others, or None."""
    options = _session(session.config).options
    if not meet.can_meet(options.nnodes, options.rdzv_endpoint) or session.config.option.collectonly:
        return None
    assert options.rdzv_endpoint is not None
    ids = [item.nodeid for item in session.items if _is_perf_item(item)]
    plan = meet.Plan.of(options.node_rank, options.rdzv_timeout, error=error, case_ids=ids)
    plans = meet.meet(plan, options.nnodes, options.rdzv_endpoint)
    if isinstance(plans, str):
        if error is None:  # not this run's usage: a node that did not come, as a burst's rendezvous fails
            pytest.exit(plans, returncode=pytest.ExitCode.TESTS_FAILED)
        return None
    return meet.verdict(plans, options.node_rank)


def pytest_sessionstart(session: pytest.Session) -> None:
    # Here, not in pytest_configure: the terminal reporter registers itself there.
    _session(session.config).progress = progress.display_for(session.config)


def _session(config: pytest.Config) -> PerfSession:
    return config.stash[SESSION]


def _is_perf_item(item: pytest.Item) -> bool:
    """A case of a test the plugin parametrized: the checks and the signal handling concern it alone."""
    return item.nodeid.split("[", 1)[0] in _session(item.config).case_functions


def _xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


XDIST_REFUSED = (
    "perfsuite does not run under pytest-xdist (-n): its workers would run bursts side by side on "
    "the same cores and devices, and each would measure the others; run the perf suite without -n"
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = [d for d in cases.DIMENSIONS if d in metafunc.fixturenames]
    marker = markers.gate_marker(metafunc.definition)
    wanted = "burst_spec" in metafunc.fixturenames or marker is not None or "device_count" in metafunc.fixturenames
    if not names or not wanted:
        return
    perf = _session(metafunc.config)
    markers.register_markers(metafunc.config)  # a perf suite runs here: its case markers are registered
    perf.case_functions.add(metafunc.definition.nodeid)
    gpus = cuda_device_count()
    min_devices = int(marker.kwargs.get("min_devices", 1)) if marker else 1
    seen, params = set(), []
    for case in cases.build_cases(perf.options, gpus, min_devices):
        values = tuple(case.value(n) for n in names)
        if values in seen:
            continue
        seen.add(values)
        marks = [pytest.mark.gpu if case.device_kind == "cuda" else pytest.mark.cpu]
        if "framework" in names:
            marks.append(getattr(pytest.mark, case.framework))
        if case.nodes > 1:
            marks.append(pytest.mark.multinode)
        if "model_name" in names and cases.is_slow(case):
            marks.append(pytest.mark.slow)
        reason = cases.skip_reason(case, gpus, framework_matters="framework" in names, options=perf.options)
        if reason:
            marks.append(pytest.mark.skip(reason=reason))
        params.append(pytest.param(*values, marks=marks, id=cases.short_id(names, case)))
    if not params:
        params = [
            pytest.param(
                *([None] * len(names)), marks=pytest.mark.skip(reason="no case matches the options"), id="no-cases"
            )
        ]
    metafunc.parametrize(names, params)


# -- fixtures: each dimension falls back to the first selected value when a test is not
# parametrized by the plugin.


@pytest.fixture
def framework(request: pytest.FixtureRequest) -> str:
    return (_session(request.config).options.framework or ("torch",))[0]


@pytest.fixture
def model_name(request: pytest.FixtureRequest) -> str:
    return (_session(request.config).options.model or ("cifar10",))[0]


@pytest.fixture
def device_kind() -> str:
    return "cpu"


@pytest.fixture
def device_count() -> int:
    return 1


@pytest.fixture
def data_location(request: pytest.FixtureRequest) -> str:
    return _session(request.config).options.data_location[0]


@pytest.fixture
def variable_update(request: pytest.FixtureRequest) -> str:
    return _session(request.config).options.variable_update[0]


@pytest.fixture
def precision(request: pytest.FixtureRequest) -> str:
    return _session(request.config).options.precision[0]


@pytest.fixture
def batch_size(request: pytest.FixtureRequest) -> int | None:
    sizes = _session(request.config).options.batch_size
    return sizes[0] if sizes else None


@pytest.fixture
def seq_len(request: pytest.FixtureRequest) -> int | None:
    """A token model's sequence length; None: the model's default (image models have none)."""
    lengths = _session(request.config).options.seq_len
    return lengths[0] if lengths else None


@pytest.fixture
def memory_format(request: pytest.FixtureRequest) -> str:
    """ "" : the framework's default layout for the case."""
    return (_session(request.config).options.memory_format or ("",))[0]


@pytest.fixture
def mode(request: pytest.FixtureRequest) -> str:
    return _session(request.config).options.mode[0]


@pytest.fixture
def augment_on(request: pytest.FixtureRequest) -> str:
    return _session(request.config).options.augment_on[0]


@pytest.fixture
def activation_checkpointing(request: pytest.FixtureRequest) -> bool:
    """torch: each block of the model's ``blocks`` recomputes its forward in the backward pass."""
    return _session(request.config).options.activation_checkpointing[0] == "on"


@pytest.fixture
def tp(request: pytest.FixtureRequest) -> int:
    """torch: the tensor-parallel degree, each model split over this many devices."""
    return _session(request.config).options.tp[0]


@pytest.fixture
def burst_spec(
    request,
    framework,
    model_name,
    device_kind,
    device_count,
    data_location,
    variable_update,
    precision,
    batch_size,
    seq_len,
    memory_format,
    mode,
    augment_on,
    activation_checkpointing,
    tp,
) -> BurstSpec:
    """The BurstSpec of this test case: parametrized dimensions plus the session's options."""
    options = _session(request.config).options
    tolerance = markers.marker_tolerance(request.node)
    values = {
        "framework": framework,
        "model_name": model_name,
        "device_kind": device_kind,
        "device_count": device_count,
        "data_location": data_location,
        "variable_update": variable_update,
        "precision": precision,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "memory_format": memory_format,
        "mode": mode,
        "augment_on": augment_on,
        "activation_checkpointing": activation_checkpointing,
        "tp": tp,
    }
    return cases.burst_spec(options, values, options.perf_tolerance if tolerance is None else tolerance)


@pytest.fixture
def perf(request: pytest.FixtureRequest) -> PerfGate:
    """Run bursts and gate them: ``perf.assert_throughput(spec)``, ``perf.assert_scaling(spec)``."""
    if _xdist_worker(request.config):
        pytest.fail(XDIST_REFUSED, pytrace=False)
    return PerfGate(_session(request.config), request.node)


@pytest.fixture
def burst(perf: PerfGate):
    """``burst(spec) -> Measurement``: one burst per spec per session, reused across tests."""
    return perf.burst


# -- collection, reporting, saving


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, a worker that collected perf cases runs nothing and says why."""
    if _xdist_worker(config) and any(_is_perf_item(item) for item in items):
        # pytest-xdist gives a worker's config its workeroutput; pytest's Config does not declare it.
        config.workeroutput["perfsuite_refused"] = XDIST_REFUSED  # type: ignore[attr-defined]
        config.hook.pytest_deselected(items=list(items))
        items[:] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    refused = getattr(node, "workeroutput", {}).get("perfsuite_refused")
    if refused:
        _session(node.config).refused = refused


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before the first burst: what the run asks for is there, and what it writes can be written."""
    perf = _session(session.config)
    if not perf.case_functions:
        return  # no perf test here: this run is none of perfsuite's business
    selected = [_selected(item) for item in session.items if _is_perf_item(item)]
    perf.selected_cases = len(selected)
    perf.warm_frameworks = tuple(sorted({c.framework for c in selected if c.framework}))
    try:
        preflight.check_models(perf.options, model_names())
        warning = preflight.oversubscription(
            perf.options, selected, cases.default_threads(perf.options), hardware.cpu_fingerprint().cpu_cores
        )
        if warning:
            perf.messages.append(f"warning: {warning}")  # at the end too, beside the figures it explains
            reporter = session.config.pluginmanager.getplugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"perfsuite warning: {warning}", yellow=True)
        if session.config.option.collectonly:
            return  # nothing will run or be written: listing the matrix needs no GPU and no folder
        if selected:
            _preflight(perf, selected)
    except (PreflightError, BaselineError, HardwareError) as exc:
        _meet(session, str(exc))
        raise pytest.UsageError(str(exc)) from None
    stop = _meet(session, None)
    if stop is not None:
        raise pytest.UsageError(stop)


def _preflight(perf: PerfSession, selected: list[preflight.SelectedCase]) -> None:
    preflight.check_frameworks(perf.options, selected, cases.framework_installed)
    preflight.check_gpus(perf.options, selected, cuda_device_count(), hardware.visibility())
    preflight.check_outputs(perf.options)
    preflight.check_history(perf.options)
    for kind in {c.device_kind or "" for c in selected} & {"cpu", "cuda"}:
        if kind == "cuda" and cuda_device_count() == 0:
            continue
        perf.baseline_file(kind)  # a bad file stops the run up front


def _selected(item: pytest.Item) -> preflight.SelectedCase:
    params = getattr(item, "callspec", None)
    params = params.params if params is not None else {}
    return preflight.SelectedCase(
        params.get("framework"), params.get("model_name"), params.get("device_kind"), params.get("device_count")
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session):
    """While bursts may run, SIGTERM and SIGHUP stop the session as Ctrl-C does; after the
    last test, the bursts join pytest-benchmark's list (before its own session finish)."""
    try:
        if _session(session.config).selected_cases:
            with stop_signals_interrupt():
                return (yield)
        return (yield)
    finally:
        benchmark.add_bursts(session.config, _session(session.config))


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    perf = config.stash.get(SESSION, None)
    if perf is not None:
        machine_info["perfsuite"] = benchmark.machine_info(perf)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    rep = yield
    perf = _session(item.config)
    if rep.failed:
        perf.failed_tests.add(item.nodeid)
    elif rep.skipped and isinstance(rep.longrepr, tuple) and _is_perf_item(item):
        perf.skip_reasons.append(str(rep.longrepr[2]).removeprefix("Skipped: "))
    return rep


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    perf = _session(session.config)
    session.exitstatus = record.finish(
        perf, exitstatus, session.config.invocation_params.args, collect_only=session.config.option.collectonly
    )
    benchmark.drop_from_terminal_table(session.config)
    if perf.refused:
        sys.stderr.write(f"ERROR: {perf.refused}\n")
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


def pytest_unconfigure(config: pytest.Config) -> None:
    stop_all()  # a burst still running here escaped every other stop: it must not outlive pytest


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    perf = config.stash.get(SESSION, None)
    if perf is not None and (perf.bursts or perf.messages):
        terminal.terminal_summary(terminalreporter, record.view(perf))
