"""What each framework backend can run, known to both sides; nothing here imports a framework.

``SUPPORTED`` says, without importing anything heavy, which data locations and variable
updates each backend implements, and ``multinode_gap`` which multi-node shapes it cannot
run, so the plugin can refuse or skip a case up front.
"""

from typing import TypedDict


class Support(TypedDict):
    data_locations: tuple[str, ...]
    variable_updates: tuple[str, ...]
    backend: str  # the module a burst worker runs (perfsuite.worker.main.Backend)
    package: str  # what a machine needs installed to run it


SUPPORTED: dict[str, Support] = {
    "torch": {
        "data_locations": ("device", "host", "python", "real"),
        "variable_updates": ("replicated", "parameter_server", "independent"),
        "backend": "perfsuite.worker.backends.torch.burst",
        "package": "torch",
    },
    "tf": {
        "data_locations": ("device", "host", "python", "real"),
        "variable_updates": ("replicated", "parameter_server", "independent"),
        "backend": "perfsuite.worker.backends.tf.burst",
        "package": "tensorflow",
    },
}


def multinode_gap(framework: str, device_kind: str, devices: int, variable_update: str) -> str | None:
    """Why a backend cannot run a multi-node burst of this shape, or None."""
    if framework != "tf":
        return None
    if variable_update == "parameter_server":
        # ParameterServerStrategy needs separate ps and chief tasks, and its chief hands
        # steps to workers asynchronously through a ClusterCoordinator: no node steps in
        # lockstep, so a window's time is not the cluster's time for its images.
        return "the tf backend has no multi-node parameter_server (ParameterServerStrategy runs asynchronous steps)"
    if device_kind == "cpu" and devices > 1:
        return (
            "the tf backend runs one CPU replica per node across nodes "
            "(MultiWorkerMirroredStrategy drives a node's CPU as one device): use --perf-cpu-workers 1"
        )
    return None
