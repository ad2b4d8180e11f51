import pytest
from hypothesis import settings

# The first example pays for importing scipy; wall-clock deadlines only add flakiness.
settings.register_profile("perfsuite", deadline=None)
settings.load_profile("perfsuite")


@pytest.fixture(scope="session", autouse=True)
def _own_cache(tmp_path_factory):
    """Baseline locks and generated datasets of the tests stay out of the user's cache."""
    patch = pytest.MonkeyPatch()
    patch.setenv("PERFSUITE_CACHE", str(tmp_path_factory.mktemp("perfsuite-cache")))
    yield
    patch.undo()
