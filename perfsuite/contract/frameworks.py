"""What each framework backend can run, known to both sides; nothing here imports a framework.

``SUPPORTED`` says, without importing anything heavy, which data locations and variable
updates each backend implements, whether it checkpoints activations and whether it runs tensor
parallelism, and ``multinode_gap`` which multi-node shapes it cannot run, so the plugin can refuse
or skip a case up front.
"""

from typing import TypedDict


class Support(TypedDict):
    data_locations: tuple[str, ...]
    variable_updates: tuple[str, ...]
    activation_checkpointing: bool  # per block of the model's `blocks`
    tensor_parallel: bool  # --perf-tp: the model's TP plan over a 2-D mesh, data parallel x TP
    backend: str  # the module a burst worker runs (perfsuite.worker.main.Backend)
    package: str  # what a machine needs installed to run it


SUPPORTED: dict[str, Support] = {
    "torch": {
        "data_locations": ("device", "host", "python", "real"),
        # sharded: FSDP2 (fully_shard), each block of the model's `blocks` then the root.
        "variable_updates": ("replicated", "parameter_server", "independent", "sharded"),
        "activation_checkpointing": True,
        "tensor_parallel": True,
        "backend": "perfsuite.worker.backends.torch.burst",
        "package": "torch",
    },
    "tf": {
        "data_locations": ("device", "host", "python", "real"),
        "variable_updates": ("replicated", "parameter_server", "independent"),
        "activation_checkpointing": False,
        "tensor_parallel": False,
        "backend": "perfsuite.worker.backends.tf.burst",
        "package": "tensorflow",
    },
}


# Why a sharded burst does not run in fp16, up front and in the worker alike.
SHARDED_FP16 = (
    "sharded fp16 is not run: loss scaling (GradScaler) would see each rank's shard of the gradients only, "
    "and the ranks could disagree on an overflow; use bf16"
)


# Why a TP burst does not run in fp16, up front and in the worker alike.
TP_FP16 = (
    "TP fp16 is not run: loss scaling (GradScaler) would see each TP rank's shard of the gradients only, "
    "and the ranks could disagree on an overflow; use bf16"
)
# What TensorFlow would need for tensor parallelism: a layout for each weight, split over a mesh.
TF_TP_NEEDS = "it would need DTensor layouts or a keras.distribution.ModelParallel layout map for each weight"


def no_tp_plan(model: str) -> str:
    """Why a model does not run with TP (a model registered without a plan)."""
    return f"{model} has no tensor-parallel plan (a token model brings one: register_token_model(..., tp_plan=...))"


def no_blocks(model: str) -> str:
    """Why a model cannot be checkpointed per block (the torch worker finds it building the model)."""
    return f"activation checkpointing wraps each block of a model's `blocks` (an nn.ModuleList), and {model} has none"


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
