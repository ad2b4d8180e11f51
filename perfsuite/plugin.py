"""perfsuite's pytest hooks: options, markers, fixtures, parametrization, summary.

Engine logic lives elsewhere (cases, session, gate, launch); nothing here imports a
framework, so ``pytest --help`` stays fast with neither torch nor tensorflow installed.
"""

from __future__ import annotations


import pytest

from perfsuite import cases as matrix
from perfsuite import benchmark_json, progress, report
from perfsuite.baseline import BaselineError
from perfsuite.gate import PerfGate, marker_tolerance
from perfsuite.hardware import HardwareError, cuda_device_count
from perfsuite.models.registry import ModelError, get_model, model_names
from perfsuite.options import OptionError, PerfOptions, add_options, read_table, resolve
from perfsuite.processes import stop_all
from perfsuite.session import PerfSession
from perfsuite.spec import BurstSpec
from perfsuite.stops import stop_signals_interrupt

SESSION = pytest.StashKey[PerfSession]()

MARKERS = (
    "gpu: a burst on CUDA devices",
    "cpu: a burst on CPU workers standing in for devices",
    "multinode: a burst spanning several nodes",
    "torch: a PyTorch burst",
    "tf: a TensorFlow burst",
    "slow: a long burst (big model on CPU workers)",
    "perf(tolerance=None, min_devices=1): perfsuite gate settings for one test",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser.getgroup("perfsuite", "perfsuite: training bursts gated against baselines"))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    inipath = config.inipath
    pyproject = inipath if inipath is not None and inipath.name == "pyproject.toml" else config.rootpath / "pyproject.toml"
    try:
        table, source = read_table(pyproject)
        options = resolve(lambda dest: config.getoption(f"perf_{dest}"), table, source, pyproject.parent)
        _check_models(options)
    except (OptionError, ModelError) as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[SESSION] = PerfSession(options, config.rootpath)


def pytest_sessionstart(session: pytest.Session) -> None:
    # Here, not in pytest_configure: the terminal reporter registers itself there.
    _session(session.config).progress = progress.display_for(session.config)


def _check_models(options: PerfOptions) -> None:
    frameworks = options.framework or None
    known = set()
    for fw in frameworks or ("torch", "tf"):
        known.update(model_names(fw))
    for name in options.model:
        if name not in known:
            where = options.sources.get("model", "--model")
            raise ModelError(f"{where}: unknown model {name!r} (known: {', '.join(sorted(known)) or 'none'})")


def _session(config: pytest.Config) -> PerfSession:
    return config.stash[SESSION]


PERF_FIXTURES = ("perf", "burst", "burst_spec")


def _is_perf_item(item: pytest.Item) -> bool:
    """A test that runs bursts: the plugin's checks and signal handling concern it alone."""
    return any(name in getattr(item, "fixturenames", ()) for name in PERF_FIXTURES)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = [d for d in matrix.DIMENSIONS if d in metafunc.fixturenames]
    marker = metafunc.definition.get_closest_marker("perf")
    wanted = "burst_spec" in metafunc.fixturenames or marker is not None or "device_count" in metafunc.fixturenames
    if not names or not wanted:
        return
    options = _session(metafunc.config).options
    gpus = cuda_device_count()
    min_devices = int(marker.kwargs.get("min_devices", 1)) if marker else 1
    seen, params = set(), []
    for case in matrix.build_cases(options, gpus, min_devices):
        values = tuple(case.value(n) for n in names)
        if values in seen:
            continue
        seen.add(values)
        marks = [pytest.mark.gpu if case.device_kind == "cuda" else pytest.mark.cpu]
        if "framework" in names:
            marks.append(getattr(pytest.mark, case.framework))
        if case.nodes > 1:
            marks.append(pytest.mark.multinode)
        if "model_name" in names and matrix.is_slow(case):
            marks.append(pytest.mark.slow)
        reason = matrix.skip_reason(case, gpus, framework_matters="framework" in names)
        if reason:
            marks.append(pytest.mark.skip(reason=reason))
        case_id = case.id if len(names) == len(matrix.DIMENSIONS) else "-".join(
            _short(n, case) for n in names if not (n == "device_kind" and "device_count" in names)
        )
        params.append(pytest.param(*values, marks=marks, id=case_id))
    if not params:
        params = [pytest.param(*([None] * len(names)), marks=pytest.mark.skip(reason="no case matches the options"),
                               id="no-cases")]
    metafunc.parametrize(names, params)


def _short(name: str, case: matrix.Case) -> str:
    if name == "device_count":
        return f"{'gpu' if case.device_kind == 'cuda' else 'cpu'}{case.device_count}"
    if name == "device_kind":
        return "gpu" if case.device_kind == "cuda" else "cpu"
    value = case.value(name)
    return "default" if value is None else str(value)


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
def burst_spec(request, framework, model_name, device_kind, device_count, data_location, variable_update,
               precision, batch_size) -> BurstSpec:
    """The BurstSpec of this test case: parametrized dimensions plus the session's options."""
    options = _session(request.config).options
    info = get_model(framework, model_name)
    batch = batch_size or (info.cpu_batch_size if device_kind == "cpu" else info.batch_size)
    warm, steps, windows = matrix.burst_length(options, device_kind, 3 * info.flops * batch)
    return BurstSpec(
        framework=framework,
        model=model_name,
        device_kind=device_kind,
        devices=device_count,
        nodes=options.nnodes,
        data_location=data_location,
        batch_size=batch,
        image_size=info.image_size,
        precision=precision,
        variable_update=variable_update,
        warmup_steps=warm,
        steps=steps,
        windows=windows,
        max_windows=max(windows, options.max_windows or 2 * windows),
        stable_within=_gate_tolerance(request.node, options),
        threads=matrix.default_threads(options) if device_kind == "cpu" else 0,
        augment_on=options.augment_on,
        data_dir=str(options.data_dir) if options.data_dir else None,
        xla=options.xla and framework == "tf",
    )


def _gate_tolerance(item: pytest.Item, options: PerfOptions) -> float:
    """The tolerance this test gates at: its burst is lengthened until it can decide at it."""
    tolerance = marker_tolerance(item)
    return options.perf_tolerance if tolerance is None else tolerance


@pytest.fixture
def perf(request: pytest.FixtureRequest) -> PerfGate:
    """Run bursts and gate them: ``perf.assert_throughput(spec)``, ``perf.assert_scaling(spec)``."""
    return PerfGate(_session(request.config), request.node)


@pytest.fixture
def burst(perf: PerfGate):
    """``burst(spec) -> BurstResult``: one burst per spec per session, reused across tests."""
    return perf.burst


# -- collection, reporting, saving

def pytest_collection_finish(session: pytest.Session) -> None:
    """Read every baseline file the collected cases need, so a bad file stops the run up front."""
    perf = _session(session.config)
    kinds = {item.callspec.params.get("device_kind") for item in session.items if hasattr(item, "callspec")}
    for kind in kinds & {"cpu", "cuda"}:
        if kind == "cuda" and cuda_device_count() == 0:
            continue
        try:
            perf.baseline_file(kind)
        except (BaselineError, HardwareError) as exc:
            raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session):
    """While bursts may run, SIGTERM and SIGHUP stop the session as Ctrl-C does; after the
    last test, the scaling figures and pytest-benchmark's list (before its own session finish)."""
    try:
        if any(_is_perf_item(item) for item in session.items):
            with stop_signals_interrupt():
                return (yield)
        return (yield)
    finally:
        perf = _session(session.config)
        for result in perf.results.values():
            perf.fill_scaling(result)
        benchmark_json.add_bursts(session.config, perf)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    perf = config.stash.get(SESSION, None)
    if perf is not None:
        machine_info["perfsuite"] = benchmark_json.machine_info(perf)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        _session(item.config).failed_tests.add(item.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    perf = _session(session.config)  # scaling figures were filled in after the test loop
    options = perf.options
    perf.interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    kept = perf.remove_burst_dirs()
    if kept:
        perf.messages.append(kept)
    if options.perf_json is not None and perf.results:
        try:
            report.write_json(options.perf_json, [r.as_record() for r in perf.results.values()],
                              interrupted=perf.interrupted)
        except OSError as exc:
            perf.messages.append(f"--perf-json: cannot write {options.perf_json}: {exc}")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED if exitstatus == 0 else exitstatus
    if options.perf_report is not None and exitstatus != pytest.ExitCode.USAGE_ERROR:
        from perfsuite.reporting.folder import write_report  # loaded only when a report is asked for

        try:
            perf.messages.extend(write_report(options.perf_report, perf, session.config.invocation_params.args))
        except Exception as exc:  # a report that cannot be written fails the run with one line, not a traceback
            what = "cannot write" if isinstance(exc, OSError) else f"failed ({type(exc).__name__})"
            perf.messages.append(f"--perf-report: {what} {options.perf_report}: {exc}")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED if exitstatus == 0 else exitstatus
    interrupted = exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR,
                                 pytest.ExitCode.USAGE_ERROR)
    if options.save_baseline and perf.results:
        if interrupted:
            perf.messages.append("baselines not saved: the run was interrupted")
        elif options.node_rank != 0:
            perf.messages.append(f"baselines are saved by node 0; this is node {options.node_rank}")
        else:
            try:
                for path, count in perf.save_baselines():
                    perf.messages.append(f"saved {count} baseline entr{'y' if count == 1 else 'ies'} to {path}")
            except BaselineError as exc:
                perf.messages.append(f"baselines not saved: {exc}")
                session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    stop_all()  # a burst still running here escaped every other stop: it must not outlive pytest


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    perf = config.stash.get(SESSION, None)
    if perf is not None and (perf.results or perf.messages):
        report.terminal_summary(terminalreporter, perf)
