"""Several nodes: MultiWorkerMirroredStrategy over one TF worker process per node.

The cluster comes from TF_CONFIG (the launcher writes it from ``--perf-worker-hosts``) or,
under Slurm's srun without ``--perf-worker-hosts``, from SlurmClusterResolver. Every worker
drives all of its node's devices; gradients meet in collective all-reduces (RING over
gRPC between CPUs, NCCL between GPUs), the same custom training loop as on one node.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from perfsuite.contract.spec import BurstSpec

SLURM_PORT = 8888  # SlurmClusterResolver's default port on every node


def cluster_resolver(spec: BurstSpec) -> tf.distribute.cluster_resolver.ClusterResolver:
    """This node's place in a cluster of ``spec.nodes`` workers.

    MultiWorkerMirroredStrategy takes its local device count from the resolver, so the
    one it gets says ``spec.devices`` GPUs (none on CPU: one replica per node there).
    """
    resolvers = tf.distribute.cluster_resolver
    if os.environ.get("TF_CONFIG"):
        base = resolvers.TFConfigClusterResolver()
        cluster, task = base.cluster_spec(), (base.task_type, base.task_id)
    elif os.environ.get("SLURM_STEP_NODELIST"):
        cluster, task = _slurm_cluster(spec)
    else:
        raise ValueError("a multi-node TensorFlow burst needs --perf-worker-hosts (or to run under Slurm's srun)")
    workers = cluster.job_tasks("worker") if "worker" in cluster.jobs else []
    if len(workers) != spec.nodes or set(cluster.jobs) != {"worker"}:
        raise ValueError(f"the TF cluster {cluster.as_dict()} is not {spec.nodes} workers (--perf-nnodes {spec.nodes})")
    if task[0] != "worker" or task[1] is None:
        raise ValueError(f"this process is not one of the TF cluster's workers (task {task})")
    accelerators = {"GPU": spec.devices} if spec.device_kind == "cuda" else {}
    return resolvers.SimpleClusterResolver(
        cluster, task_type="worker", task_id=int(task[1]), num_accelerators=accelerators, rpc_layer="grpc"
    )


def _slurm_cluster(spec: BurstSpec):
    # GPU counts only size the resolver's CUDA_VISIBLE_DEVICES plan, which stays unused
    # (the devices are already configured); at least 1 keeps its arithmetic valid on CPU.
    gpus = spec.devices if spec.device_kind == "cuda" else 1
    try:
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
            jobs={"worker": spec.nodes},
            port_base=SLURM_PORT,
            gpus_per_node=gpus,
            gpus_per_task=gpus,
            auto_set_gpu=False,
        )
        cluster = resolver.cluster_spec()
    except (RuntimeError, KeyError, ValueError) as exc:
        raise ValueError(
            "under Slurm a multi-node TensorFlow burst needs one srun task per node and "
            f"--perf-nnodes {spec.nodes}: {exc}"
        ) from None
    return cluster, (resolver.task_type, resolver.task_id)


def join(spec: BurstSpec, join_file: str | None) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy once every worker has joined.

    The strategy's constructor waits for the other workers with no deadline of its own,
    holding the GIL (and TensorFlow's preemption handler swallows SIGTERM), so the
    launcher keeps the deadline: ``join_file`` tells it when joining began and ended,
    and which workers to look for.
    """
    resolver = cluster_resolver(spec)
    hosts = resolver.cluster_spec().job_tasks("worker")
    me = resolver.task_id
    _mark(join_file, hosts, me, joined=False)
    implementation = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=implementation.NCCL if spec.device_kind == "cuda" else implementation.RING
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver, communication_options=options)
    # A first collective: every worker answers, with its index and the burst it runs
    # (the nodes meet on the same ports burst after burst, so they must agree on it).
    burst = int(hashlib.sha1(spec.key().encode()).hexdigest()[:7], 16)
    answers = all_gather(strategy, np.array([me, burst], np.int32))
    if sorted(answers[:, 0].tolist()) != list(range(spec.nodes)):
        raise RuntimeError(f"TF workers answered as {answers[:, 0].tolist()}, expected 0..{spec.nodes - 1}")
    if len(set(answers[:, 1].tolist())) > 1:
        raise RuntimeError(f"the nodes are not all running {spec.key()}: did every node run the same pytest command?")
    _mark(join_file, hosts, me, joined=True)
    return strategy


def _mark(join_file: str | None, hosts: list[str], me: int, joined: bool) -> None:
    if join_file is None:
        return
    path = Path(join_file)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"hosts": hosts, "me": me, "joined": joined, "t": time.time()}))
    os.replace(tmp, path)


def all_gather(strategy: tf.distribute.Strategy, row: np.ndarray) -> np.ndarray:
    """Every worker's ``row`` (same shape on each), stacked in worker order."""
    value = tf.constant(row[None])

    @tf.function
    def gather():
        return strategy.run(lambda: tf.distribute.get_replica_context().all_gather(value, axis=0))

    rows = strategy.experimental_local_results(gather())[0].numpy()
    # Replica ids run worker by worker, so each worker's first replica holds its row.
    return rows[:: len(strategy.extended.worker_devices)]


def all_gather_json(strategy: tf.distribute.Strategy, obj) -> list:
    """Every worker's JSON-able ``obj``, in worker order, through two collectives."""
    data = np.frombuffer(json.dumps(obj).encode(), np.uint8)
    sizes = all_gather(strategy, np.array([data.size], np.int32))[:, 0]
    padded = np.zeros(int(sizes.max()), np.int32)  # int32: collectives take no uint8
    padded[: data.size] = data
    rows = all_gather(strategy, padded)
    return [json.loads(row[:size].astype(np.uint8).tobytes()) for row, size in zip(rows, sizes)]


def leave_together(strategy: tf.distribute.Strategy) -> None:
    """A last collective before any worker exits, as torch's barrier before teardown.

    A worker that leaves as soon as its own part of the figures' all-gather is done closes
    its sockets while a slower worker may still be receiving: the slower one then fails
    with "Socket closed" though every figure was exchanged. Once a worker has entered this
    collective, it holds every figure; an error in it only means a peer has already left.
    """
    try:
        all_gather(strategy, np.array([1], np.int32))
    except (tf.errors.OpError, RuntimeError):
        pass


def sync_local_devices(strategy: tf.distribute.Strategy):
    """``sync()`` for timing windows: wait for this worker's devices only.

    tf.test.experimental.sync_devices visits every logical device, the other workers'
    included, which a multi-worker eager context cannot run ops on.
    """
    devices = list(strategy.extended.worker_devices)

    def sync() -> None:
        for device in devices:
            with tf.device(device):
                tf.raw_ops.SyncDevice()

    return sync
