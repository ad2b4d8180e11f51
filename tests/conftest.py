import contextlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import scipy.stats  # noqa: F401  (see below)
from hypothesis import settings
from postgres_server import create_database, postgres_server
from suite_files import FAST, SUITE, TINY, TINY_STEP_MS

# pytester's in-process runs forget the modules they import. Those the plugin's sessions use
# are imported here once: numpy cannot be imported twice, SQLAlchemy warns when its dialects
# register their functions again, scipy.stats would cost each run 0.6 s, and psycopg imported
# again keeps its compiled part's exception classes from the first import, which SQLAlchemy
# then does not recognise (a refused connection escaped as psycopg's own OperationalError).
with contextlib.suppress(ImportError):
    import psycopg  # noqa: F401
    import sqlalchemy.dialects.postgresql  # noqa: F401
    import sqlalchemy.dialects.sqlite  # noqa: F401

NO_HYPOTHESIS = "-p no:hypothesispytest"

# XLA compiles the TensorFlow tests' jit-compiled steps at LLVM's lowest optimisation level, in
# pytest and in every process it starts: the tests check what a compiled step computes and
# counts, never how fast it runs, and the compile takes about half the CPU.
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0".strip()

# The first example pays for importing scipy; wall-clock deadlines only add flakiness.
settings.register_profile("perfsuite", deadline=None)
settings.load_profile("perfsuite")


def _no_local_constants() -> None:
    """hypothesis draws 5% of its choices from the constants of whichever project modules are
    imported at the time; under pytest-xdist that depends on what else a worker ran, so even a
    derandomized test drew other examples from one run to the next. The pool is left empty."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - another hypothesis: its draws as they come
        return
    if hasattr(providers, "_get_local_constants") and hasattr(providers, "Constants"):
        empty = providers.Constants()
        providers._get_local_constants = lambda: empty


_no_local_constants()


def _run_folder(config, tmp_path_factory) -> Path:
    """This test run's temporary folder; under pytest-xdist, the one all workers share."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if hasattr(config, "workerinput") else root


# The real-process tier (make test-e2e, which CI runs beside make test): what only real processes
# can show, end to end. Nodes meeting over loopback, real bisects of real commits, warm starts
# forked and killed, stops and hangs, collectives of several ranks, trained bursts; make test
# runs the rest, each decision among them on simulated figures.
E2E_MODULES = frozenset(
    {
        "test_attribution_bursts.py",
        "test_bisect.py",
        "test_dimension_bursts.py",
        "test_hang.py",
        "test_moe_bursts.py",
        "test_moe_tf_bursts.py",
        "test_multinode.py",
        "test_numerics_e2e.py",
        "test_sharded_bursts.py",
        "test_sharded_parity.py",
        "test_stops.py",
        "test_tensor_parallel_bursts.py",
        "test_tensor_parallel_parity.py",
        "test_tf_multinode.py",
        "test_token_bursts.py",
        "test_warm_start.py",
    }
)


def pytest_configure(config):
    # pytest-xdist's marker (--dist loadgroup), declared too for runs without it
    config.addinivalue_line("markers", "xdist_group(name): run on the same pytest-xdist worker as the group")
    config.addinivalue_line("markers", "e2e: the real-process tier (make test-e2e): real processes, end to end")
    if config.getoption("dist", None) == "loadgroup" and not hasattr(config, "workerinput"):
        _check_loadgroup_works()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in E2E_MODULES:
            item.add_marker(pytest.mark.e2e)


def _check_loadgroup_works():
    """pytest-xdist up to 3.8 drops every xdist_group mark without a word under pytest 9.2
    (pytest-dev/pytest-xdist#1386): the groups' shared fixtures would be built on every worker
    and the run would take half as long again."""
    from importlib.metadata import version

    from packaging.version import Version

    if Version(version("pytest")) >= Version("9.2") and Version(version("pytest-xdist")) <= Version("3.8.0"):
        raise pytest.UsageError(
            f"pytest {version('pytest')} with pytest-xdist {version('pytest-xdist')} ignores xdist_group "
            "(pytest-dev/pytest-xdist#1386): install the pytest the dev extra names (pip install -e '.[dev]')"
        )


@pytest.fixture(scope="session", autouse=True)
def _test_environment(request, tmp_path_factory):
    """Baseline locks and generated datasets of the tests stay out of the user's cache
    (datasets are generated atomically, so workers sharing the folder is safe)."""
    from perfsuite.plugin import warm

    patch = pytest.MonkeyPatch()
    cache = _run_folder(request.config, tmp_path_factory) / "perfsuite-cache"
    cache.mkdir(exist_ok=True)
    patch.setenv("PERFSUITE_CACHE", str(cache))
    # The pytest sessions the tests start need no hypothesis, whose plugin costs each a second.
    patch.setenv("PYTEST_ADDOPTS", " ".join(filter(None, [os.environ.get("PYTEST_ADDOPTS"), NO_HYPOTHESIS])))
    # Under pytest-xdist, the sessions the tests start are no xdist workers (pytest-benchmark
    # would switch itself off in them).
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        patch.delenv(name, raising=False)
    # One warm start share per pytest-xdist worker: the bursts of the pytest processes its
    # tests start (and of its own in-process sessions) are forked from warm starts that
    # imported their framework once, not once per pytest process. A share serves only an
    # environment its warm start imported in (perfsuite.plugin.warm's key), so a test that
    # sets a variable of its own gets a warm start of its own. Tests of how a pytest
    # process starts its own warm starts, or of its process tree, leave it (no_warm_share).
    share = warm.Share(keep=3)
    # The tests that start pytest processes of their own (pytester) run them in a shared home
    # with PY_COLORS=0 (_quick_inner_sessions); the others' bursts see the same environment,
    # so both borrow one warm start per framework, not one each.
    for name, value in {**_inner_session_env(tmp_path_factory), "PY_COLORS": "0"}.items():
        patch.setenv(name, value)
    patch.setenv(warm.SHARE_ENV, share.env()[warm.SHARE_ENV])
    yield
    warm.stop_all()  # this process's sessions of it
    share.close()
    patch.undo()


@pytest.fixture
def no_warm_share(monkeypatch):
    """This test's pytest processes start warm starts of their own, as without a share."""
    from perfsuite.plugin import warm

    monkeypatch.delenv(warm.SHARE_ENV, raising=False)


# -- a real PostgreSQL server, started by the tests themselves ---------------------------------

# Modules that register test models when imported (the rest of the suite sees the zoo only).
MODEL_MODULES = ("tiny_model", "attribution_models")


@pytest.fixture(autouse=True)
def _the_real_launcher_after_each_test():
    """A faked project's launcher must not outlive its in-process pytest session: a later real
    burst on the same worker would be faked and pass without measuring anything."""
    from perfsuite.plugin import launch, session

    yield
    assert session.run_burst is launch.run_burst, "a faked launcher outlived its pytest session"


@pytest.fixture(autouse=True)
def _registered_models():
    """Models a test registers in this process leave with it, and their module too, so the
    next test that imports it registers them again: what the zoo lists never depends on
    which tests ran before on the same worker."""
    from perfsuite.models import registry

    registry.all_models()  # the zoo itself is loaded before the snapshot
    before = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(before)
    for name in MODEL_MODULES:
        sys.modules.pop(name, None)


@pytest.fixture(scope="session")
def postgres_url():
    """One server per pytest-xdist worker; skips with the reason where PostgreSQL is absent."""
    with postgres_server() as url:
        yield url


@pytest.fixture
def postgres_db(postgres_url):
    """A fresh database on it, for tests that must not see each other's tables."""
    return create_database(postgres_url, f"test_{uuid.uuid4().hex}")


# -- one saved baseline of the tiny suite, shared by the tests that gate against it ---------


@pytest.fixture(scope="session")
def saved_tiny(request, tmp_path_factory) -> Path:
    """A project folder in which the tiny suite (1 and 2 CPU workers) was saved with
    --perf-save-baseline (1 burst per entry: pooling is tested with fake bursts); its output is in
    save.out and its records in
    saved.json. Made once per test run, even across pytest-xdist workers."""
    import filelock

    root = _run_folder(request.config, tmp_path_factory)
    folder = root / "saved-tiny"
    with filelock.FileLock(str(root / "saved-tiny.lock")):
        if not (folder / "save.out").exists():
            folder.mkdir(exist_ok=True)
            (folder / "conftest.py").write_text(TINY)
            (folder / "test_suite.py").write_text(SUITE)
            env = dict(os.environ, PERFSUITE_TINY_STEP_MS=TINY_STEP_MS)
            # The environment of the in-process sessions (pytester, _quick_inner_sessions) of the
            # tests that gate against it: their bursts and these borrow the same warm start.
            env.update(_inner_session_env(tmp_path_factory), PY_COLORS="0", PYTEST_ADDOPTS=NO_HYPOTHESIS)
            env.pop("TOX_ENV_DIR", None)
            for name in ("PERFSUITE_TINY_SLOWDOWN", "PERFSUITE_TINY_JITTER", "PERFSUITE_TINY_CRASH"):
                env.pop(name, None)
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    *FAST,
                    "--perf-save-baseline",
                    "--perf-baseline-runs",
                    "1",
                    "--perf-baseline-dir",
                    "baselines",
                    "--perf-json",
                    "saved.json",
                ],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"saving the tiny suite's baseline failed:\n{proc.stdout}\n{proc.stderr}")
            (folder / "save.out").write_text(proc.stdout)
    return folder


@pytest.fixture(autouse=True)
def _quick_inner_sessions(request, monkeypatch, tmp_path_factory):
    """pytester clears PYTEST_ADDOPTS; the sessions it starts need no hypothesis either. It
    also gives each test a home and a temporary root of its own, which would make each
    test's environment a new one to the warm start share (perfsuite.plugin.warm keys a warm
    start on the environment its imports saw): the inner sessions of every test share one
    of each instead (the plugin keeps nothing there: its cache is PERFSUITE_CACHE, its
    bursts' folders are in the temporary folder), so their bursts are forked from one warm
    start."""
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")
        monkeypatch.setenv("PYTEST_ADDOPTS", NO_HYPOTHESIS)
        for name, value in _inner_session_env(tmp_path_factory).items():
            monkeypatch.setenv(name, value)


def _inner_session_env(tmp_path_factory) -> dict[str, str]:
    """The home and temporary root that the inner sessions of every test share."""
    shared = tmp_path_factory.getbasetemp() / "pytester-shared"
    (shared / "home").mkdir(parents=True, exist_ok=True)
    (shared / "tmp").mkdir(exist_ok=True)
    home = str(shared / "home")
    return {"HOME": home, "USERPROFILE": home, "PYTEST_DEBUG_TEMPROOT": str(shared / "tmp")}
