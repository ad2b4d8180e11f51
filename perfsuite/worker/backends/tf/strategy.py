"""Devices and the tf.distribute strategy that stands for a variable update.

One process drives all of a node's devices: GPUs as they are, or on a CPU burst
``spec.devices`` logical CPU devices standing in for devices. Everything here must run
before TensorFlow executes its first op, which freezes the device configuration.
"""

from __future__ import annotations

import tensorflow as tf

from perfsuite.contract.spec import BurstSpec


def configure_devices(spec: BurstSpec) -> list[str]:
    """Make ``spec.devices`` compute devices visible and return their names."""
    if spec.device_kind == "cuda":
        gpus = tf.config.list_physical_devices("GPU")
        if len(gpus) < spec.devices:
            raise RuntimeError(f"{spec.devices} GPUs requested, TensorFlow sees {len(gpus)}")
        gpus = gpus[: spec.devices]
        tf.config.set_visible_devices(gpus, "GPU")
        for gpu in gpus:
            # Grow on demand: never grab a whole card, and report real peak use.
            tf.config.experimental.set_memory_growth(gpu, True)
        return [f"/gpu:{i}" for i in range(spec.devices)]

    cpu = tf.config.list_physical_devices("CPU")[0]
    if spec.devices > 1:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(spec.devices)]
        )
    # Logical CPU devices share the process's intra-op pool, so it gets the cores that
    # ``devices`` torch workers of ``threads`` each would use; one inter-op thread per
    # device lets every replica have an op running at once.
    tf.config.threading.set_intra_op_parallelism_threads(spec.threads * spec.devices)
    tf.config.threading.set_inter_op_parallelism_threads(spec.devices)
    return [f"/cpu:{i}" for i in range(spec.devices)]


def make_strategy(spec: BurstSpec, devices: list[str], join_file: str | None = None) -> tf.distribute.Strategy:
    """``replicated``: a mirrored copy of the variables per device, gradients all-reduced.
    ``parameter_server``: variables on the host CPU, compute on the devices.
    ``independent``: mirrored copies, each trained by its own device alone.
    Several nodes: MultiWorkerMirroredStrategy (replicated only), once every node joined;
    ``join_file`` lets the launcher hold the joining to its deadline.
    """
    if spec.nodes > 1:
        from perfsuite.contract.frameworks import multinode_gap
        from perfsuite.worker.backends.tf.cluster import join

        gap = multinode_gap(spec.framework, spec.device_kind, spec.devices, spec.variable_update)
        if gap:
            raise ValueError(gap)
        return join(spec, join_file)
    if len(devices) == 1:
        return tf.distribute.OneDeviceStrategy(devices[0])
    if spec.variable_update == "parameter_server":
        return tf.distribute.experimental.CentralStorageStrategy(compute_devices=devices, parameter_device="/cpu:0")
    # independent: mirrored copies that the step updates each with its own replica's
    # gradients (perfsuite.worker.backends.tf.train), so no all-reduce ever runs.
    on_gpu = spec.device_kind == "cuda"
    # NCCL between GPUs; logical CPU devices share memory, so reducing on one is enough.
    cross = tf.distribute.NcclAllReduce() if on_gpu else tf.distribute.ReductionToOneDevice()
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=cross)
