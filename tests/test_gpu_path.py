"""The CUDA-only paths, checked on CPU with the device facts mocked: capabilities, NVML
handles, strides. Each test fails on the defect it is named after."""

from __future__ import annotations

import contextlib
import sys
from types import SimpleNamespace

import pytest
from records import judged, result, worker_record

from perfsuite.analysis import diagnosis, mfu
from perfsuite.analysis.diagnosis import COMMUNICATION_BOUND, INPUT_BOUND
from perfsuite.analysis.findings import Context, Limits, Measured, judge_scaling
from perfsuite.common import hardware
from perfsuite.config.options import resolve
from perfsuite.contract.spec import BurstSpec
from perfsuite.plugin import cases
from perfsuite.worker import measure
from perfsuite.worker.progress import progress_writer
from perfsuite.worker.record import fp32_kind

GPU = BurstSpec(framework="torch", model="resnet50", device_kind="cuda", batch_size=64)


# -- 1. amp picks its dtype by compute capability ------------------------------------------


@pytest.mark.parametrize(
    "capability, dtype, scaled",
    [((7, 0), "float16", True), ((7, 5), "float16", True), ((8, 0), "bfloat16", False), ((9, 0), "bfloat16", False)],
)
def test_amp_uses_fp16_with_loss_scaling_below_ampere(monkeypatch, capability, dtype, scaled):
    pytest.importorskip("torch")
    import torch

    from perfsuite.worker.backends.torch import train

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # emulation counts, by default
    # A CPU build's GradScaler warns that CUDA is not there; a CUDA build's does not.
    warns = scaled and not torch.cuda.is_available()
    with pytest.warns(UserWarning) if warns else contextlib.nullcontext():
        policy = train.precision_policy(GPU.replace(precision="amp"), torch.device("cuda", 0))
    assert policy.dtype == dtype and (policy.scaler is not None) == scaled


def test_the_torch_floor_has_the_amp_api():
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]
    torch_pins = [d for extra in project["optional-dependencies"].values() for d in extra if d.startswith("torch")]
    floors = [tuple(int(n) for n in d.split(">=")[1].split(".")[:2]) for d in torch_pins if ">=" in d]
    assert torch_pins and len(floors) == len(torch_pins), torch_pins
    assert all(floor >= (2, 3) for floor in floors), torch_pins  # torch.amp.GradScaler("cuda")


# -- 2. a TensorFlow entry drives all of its node's replicas ----------------------------------


def test_tf_step_time_counts_every_replica_of_the_process():
    spec = BurstSpec(framework="tf", model="resnet50", device_kind="cuda", batch_size=64)
    one = result(
        spec,
        worker_record(spec, [1000.0] * 5, per_rank_ips=1000, utilisation={"gpus": [{"util_percent": {"mean": 98.0}}]}),
    )
    eight = spec.replace(devices=8)
    # One process, 8 replicas, 5,000 img/s in all: each replica's step takes 64 / 625 s, 1.6x the 1-GPU step.
    r = result(
        eight,
        worker_record(
            eight, [5000.0] * 5, per_rank_ips=625, utilisation={"gpus": [{"util_percent": {"mean": 60.0}}] * 8}
        ),
    )
    assert len(r.record.per_rank) == 1 and r.record.per_rank[0].throughput == 5000
    r = judged(r, scaling=0.625)
    limits = Limits(tolerance=0.1, memory_tolerance=0.1, scaling_tolerance=0.1, min_scaling_efficiency=0.9)
    [f] = judge_scaling("t", eight.key(), Measured(r.measurement, single=one.measurement), Context(limits)).diagnosis
    assert f.kind == COMMUNICATION_BOUND and "per-device step 1.60x the 1-device step" in f.text


# -- 3. input workers sized to the node, recorded, and read by the diagnosis -------------------


def test_loader_workers_share_the_node_cores_among_its_ranks(monkeypatch):
    pytest.importorskip("torch")
    from perfsuite.worker.backends.torch import data

    monkeypatch.delenv("PERFSUITE_LOADER_WORKERS", raising=False)
    monkeypatch.setattr(data, "cpu_cores", lambda: 64)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    real = GPU.replace(devices=8, data_location="real")
    assert data.loader_workers(real) == 8  # not a fixed pool of 4 per rank
    assert data.loader_workers(real.replace(device_kind="cpu")) == data.CPU_WORKER_LOADERS  # compute needs cores
    assert data.input_workers(real) == 8 and data.input_workers(real.replace(data_location="device")) == 0
    monkeypatch.setenv("PERFSUITE_LOADER_WORKERS", "3")
    assert data.loader_workers(real) == 3


def test_saturated_input_workers_on_an_idle_host_are_input_bound():
    spec = GPU.replace(devices=8)
    util = {
        "cpu": {"busy_cores_mean": 10, "cores": 64, "percent_mean": 20.0},
        "gpus": [{"util_percent": {"mean": 40.0}}] * 8,
        "loaders": {"processes": 4, "cores_busy": 3.9},
    }
    device = result(spec, worker_record(spec, [4000.0] * 5))
    real = result(
        spec.replace(data_location="real"),
        worker_record(spec.replace(data_location="real"), [1000.0] * 5, utilisation=util, input_workers=4),
    )
    f = diagnosis.data_location(real.measurement, device.measurement)
    assert f.kind == INPUT_BOUND and "its 4 input workers kept 3.9 cores busy" in f.text


BURN = """
import sys, time
while time.process_time() < 0.3:  # 0.3 s of CPU, however long a busy machine takes to give it
    pass
open(sys.argv[1], "w").close()
time.sleep(600)
"""


def test_the_sampler_measures_its_children_cpu(tmp_path):
    import subprocess
    import time

    from perfsuite.worker.sampler import Sampler

    done = tmp_path / "burnt"
    started = time.monotonic()
    sampler = Sampler().start()
    child = subprocess.Popen([sys.executable, "-c", BURN, str(done)])
    try:
        while not done.exists():
            assert child.poll() is None
            time.sleep(0.05)
        loaders = sampler.stop()["loaders"]
        wall = time.monotonic() - started
    finally:
        child.kill()
        child.wait()
    assert loaders["processes"] >= 1  # the burner, and any other child of this test process
    assert loaders["cores_busy"] * wall >= 0.29  # at least the CPU time the burner used


# -- 4. MIG slices ----------------------------------------------------------------------


class _MigNvml:
    """pynvml with one A100 in MIG mode holding two 3g.20gb slices, and one plain H100."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def nvmlDeviceGetMigMode(self, h):
        return (1, 1) if h == ("gpu", 0) else (0, 0)

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, k):
        if k >= 2:
            raise self.NVMLError("Not Found")
        return ("mig", k)

    def nvmlDeviceGetName(self, h):
        return {("gpu", 0): "NVIDIA A100-SXM4-40GB", ("gpu", 1): "NVIDIA H100 80GB HBM3"}.get(
            h, "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
        )

    def nvmlDeviceGetUUID(self, h):
        return f"MIG-{h[1]:04d}" if h[0] == "mig" else f"GPU-{h[1]:04d}"

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("Memory", (), {"total": (20 if h[0] == "mig" else 80) * 2**30})()

    def nvmlSystemGetDriverVersion(self):
        return "580.1"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000


@pytest.fixture
def mig(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _MigNvml())
    hardware.clear_cache()
    yield
    hardware.clear_cache()


def test_mig_slices_are_the_devices_cuda_sees(mig, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-0001")
    [device] = hardware.cuda_devices()
    assert (device.uuid, device.mig_profile) == ("MIG-0001", "3g.20gb")
    fp = hardware.fingerprint("gpu")
    assert fp.gpu_model == "NVIDIA A100-SXM4-40GB MIG 3g.20gb" and fp.id == "gpu-nvidia-a100-sxm4-40gb-mig-3g-20gb-x1"
    assert mfu.lookup(fp.gpu_model) is None  # a slice has a fraction of the GPU's peak


def test_mig_on_and_the_variable_unset_shows_one_slice_not_the_whole_gpu(mig, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    names = [d.name for d in hardware.cuda_devices()]
    assert names == ["NVIDIA A100-SXM4-40GB MIG 3g.20gb", "NVIDIA H100 80GB HBM3"]


# -- 6. progress writes throttled; GPU windows sized by work ------------------------------------


def test_progress_is_written_at_most_twice_a_second(tmp_path):
    clock = iter([0.0, 0.001, 0.002, 0.3, 0.6, 0.61, 0.62]).__next__
    written = []
    report = progress_writer(str(tmp_path / "p.json"), 64, clock=clock, write=lambda path, state: written.append(state))
    for done in range(1, 8):
        report(done, 7, 0.01 if done % 2 == 0 else None)
    assert [s["step"] for s in written] == [1, 5, 7]  # the first, one 0.5 s later, and the last
    assert written[-1]["windows"] == 3 and written[-1]["throughput"] == 6400.0


def test_gpu_windows_hold_enough_work_to_outlast_jitter():
    options = resolve(lambda dest: None, {}, "", __import__("pathlib").Path.cwd())
    cifar = 3 * 37.3e6 * 128  # training FLOPs of one cifar10 step, batch 128
    warm, steps, windows = cases.burst_length(options, "cuda", cifar)
    assert windows == 10 and steps // windows >= 1000 // 2  # hundreds of steps, not 10
    _, steps, windows = cases.burst_length(options, "cuda", 3 * 11.6e9 * 64)  # resnet152: heavy steps
    assert steps // windows == 10
    assert cases.burst_length(options, "cpu", cifar) == (2, 10, 5)  # CPU as before: ~25 GFLOP a window, 2 steps
    assert cases.burst_length(options, "cuda", None)[1] == 100


# -- 7. device augmentation keeps the NCHW layout ---------------------------------------


def test_cifar_device_augmentation_returns_nchw_strides():
    pytest.importorskip("torch")
    import torch

    from perfsuite.worker.backends.torch.real import CifarDeviceAugment

    images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
    out = CifarDeviceAugment(24, torch.device("cpu"), seed=0)(images)
    assert out.shape == (4, 3, 24, 24) and out.is_contiguous()  # NCHW, as every other cifar10 burst


# -- 9. peak memory counters start after the warm-up --------------------------------------------


def test_the_peak_reset_comes_between_the_warm_up_and_the_first_window():
    events = []

    def step():
        events.append("step")
        return 1.0

    measure.run_windows(
        step,
        lambda: None,
        float,
        warmup_steps=2,
        windows=2,
        steps_per_window=1,
        after_warmup=lambda: events.append("reset"),
    )
    assert events == ["step", "step", "reset", "step", "step"]


# -- 10. what fp32 ran as, and the peaks it is measured against ---------------------------------


def test_fp32_is_ieee_on_a_gpu_without_tf32_units():
    assert fp32_kind(True, (7, 0)) == "ieee" and fp32_kind(True, (8, 0)) == "tf32"
    assert fp32_kind(False, (9, 0)) == "ieee"
    v100 = worker_record(GPU, [1000.0] * 5, flops=4.1e9, device_name="Tesla V100-SXM2-16GB", fp32_math="ieee")
    assert mfu.fields(v100, GPU, 1000)["mfu_precision"] == "fp32"


@pytest.mark.parametrize(
    "name, entry, precision, peak",
    [
        ("NVIDIA B200", "B200", "fp32", 80),
        ("NVIDIA A10G", "A10G", "tf32", 35),
        ("NVIDIA A10", "A10", "tf32", 62.5),
        ("Tesla V100-SXM3-32GB", "V100 SXM3", "fp32", 16.4),
        ("Tesla V100-DGXS-32GB", "V100 SXM2", "fp32", 15.7),
    ],
)
def test_peaks_of_the_parts_nightly_fleets_run(name, entry, precision, peak):
    tflops, found, _ = mfu.peak_tflops(name, precision)
    assert found.name == entry and tflops == peak


def test_the_record_says_both_fp32_switches(monkeypatch):
    pytest.importorskip("torch")
    import torch

    from perfsuite.worker.backends.torch import burst

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    matmul = torch.backends.cuda.matmul  # its flag is a property of a module object: set and restored by hand
    before = (torch.backends.cudnn.allow_tf32, matmul.allow_tf32)
    try:
        torch.backends.cudnn.allow_tf32, matmul.allow_tf32 = True, False  # torch's defaults
        facts = burst._fp32_facts(torch.device("cuda", 0))
    finally:
        torch.backends.cudnn.allow_tf32, matmul.allow_tf32 = before
    assert facts == {"fp32_math": "tf32", "fp32_matmul": "ieee", "compute_capability": "8.0"}


# -- 5. a framework that sees fewer GPUs than NVML skips, and says why --------------------------


def test_cases_skip_when_the_framework_sees_fewer_gpus_than_nvml(monkeypatch):
    from perfsuite.plugin import framework_gpus

    monkeypatch.setattr(framework_gpus, "framework_gpus", lambda fw: {"torch": 8, "tf": 0}[fw])
    monkeypatch.setattr(cases, "framework_installed", lambda fw: True)

    def case(fw):
        return cases.Case(fw, "resnet50", "cuda", 8, "device", "replicated", "fp32", None)

    assert cases.skip_reason(case("torch"), gpu_count=8) is None
    assert cases.skip_reason(case("tf"), gpu_count=8) == (
        'tensorflow sees 0 GPUs of the 8 NVML lists: pip install -e ".[tf-gpu]" (tensorflow[and-cuda]; '
        "in an environment of its own)"
    )


def test_the_probe_asks_the_framework_itself():
    pytest.importorskip("torch")
    import torch

    from perfsuite.plugin import framework_gpus

    framework_gpus.framework_gpus.cache_clear()
    assert framework_gpus.framework_gpus("torch") == torch.cuda.device_count()  # 0 on a CPU build


def test_extras_give_tensorflow_its_cuda_libraries():
    import tomllib
    from pathlib import Path

    extras = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(d.startswith("tensorflow[and-cuda]") for d in extras["tf-gpu"])


# -- 8. parameter_server traffic in buckets, not one collective per tensor ---------------------


def test_parameter_server_reduces_and_broadcasts_in_buckets(monkeypatch):
    pytest.importorskip("torch")
    import torch

    from perfsuite.worker.backends.torch import train

    calls = []
    monkeypatch.setattr(train.dist, "get_rank", lambda: 0)
    monkeypatch.setattr(train.dist, "reduce", lambda t, dst, op: calls.append(("reduce", t.numel())))
    monkeypatch.setattr(train.dist, "broadcast", lambda t, src: calls.append(("broadcast", t.numel())))
    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(200)], torch.nn.BatchNorm1d(16))
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    train._average_gradients_to_root(list(model.parameters()), world=2)
    train._broadcast_state(model)
    params = sum(p.numel() for p in model.parameters())
    # 402 gradients in one reduce; parameters and float buffers in one broadcast, the int64 step count in another
    assert calls == [("reduce", params), ("broadcast", params + 32), ("broadcast", 1)]
    assert all(torch.equal(p.grad, torch.full_like(p, 0.5)) for p in model.parameters())  # averaged on rank 0


def test_a_bucket_holds_one_dtype_up_to_its_size():
    pytest.importorskip("torch")
    import torch

    from perfsuite.worker.backends.torch import train

    big = train.BUCKET_BYTES // 4
    tensors = [
        torch.zeros(big // 2),
        torch.zeros(big // 2),
        torch.zeros(1),
        torch.zeros(1, dtype=torch.int64),
        torch.zeros(2 * big),
    ]
    assert [[t.numel() for t in b] for b in train._buckets(tensors)] == [[big // 2, big // 2], [1], [1], [2 * big]]


def test_the_sampler_finds_the_mig_slice_cuda_was_given():
    from perfsuite.worker.sampler import nvml_indices

    uuids = ["MIG-0000", "MIG-0001", "GPU-0001"]  # an A100 in MIG mode (two slices), then an H100
    assert nvml_indices([0], "MIG-0001", uuids) == [1]
    assert nvml_indices([0, 1], None, uuids) == [0, 2]  # unset: the first slice and the whole GPUs


# -- 11. tf32 and bf16 run only where the GPU has them, and say why elsewhere ------------------


@pytest.fixture
def tf32_switches():
    """torch's process-wide TF32 switches, as they were before the test."""
    pytest.importorskip("torch")
    import torch

    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_torch_tf32_and_bf16_are_unsupported_before_ampere(monkeypatch, tf32_switches, precision):
    pytest.importorskip("torch")
    import torch

    from perfsuite.contract.burst_files import Unsupported
    from perfsuite.worker.backends.torch import train

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    spec, device = GPU.replace(precision=precision), torch.device("cuda", 0)
    with pytest.raises(Unsupported, match=rf"^{precision} needs compute capability 8.0 or later; this GPU is 7.0$"):
        train.set_tf32(spec, device)
        train.precision_policy(spec, device)


def test_torch_tf32_turns_tf32_on_and_fp32_turns_it_off_on_ampere(monkeypatch, tf32_switches):
    pytest.importorskip("torch")
    import torch

    from perfsuite.worker.backends.torch import train

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    train.set_tf32(GPU.replace(precision="tf32"), torch.device("cuda", 0))
    assert torch.backends.cudnn.allow_tf32 is True and torch.backends.cuda.matmul.allow_tf32 is True
    train.set_tf32(GPU.replace(precision="fp32"), torch.device("cuda", 0))
    assert torch.backends.cudnn.allow_tf32 is False and torch.backends.cuda.matmul.allow_tf32 is False
    assert train.precision_policy(GPU.replace(precision="bf16"), torch.device("cuda", 0)).dtype == "bfloat16"


@pytest.mark.parametrize(
    "ampere, precision, outcome",
    [
        (False, "tf32", "tf32 needs compute capability 8.0 or later on every GPU"),
        (False, "bf16", "bf16 needs compute capability 8.0 or later on every GPU"),
        (False, "amp", "float16"),
        (True, "amp", "bfloat16"),
        (True, "bf16", "bfloat16"),
        (True, "tf32", "float32"),
    ],
)
@pytest.mark.xdist_group("tensorflow")  # TensorFlow in this process: on the worker that has it already
def test_tf_tf32_and_bf16_need_ampere_on_every_gpu(monkeypatch, ampere, precision, outcome):
    pytest.importorskip("tensorflow")
    import tensorflow as tf

    from perfsuite.contract.burst_files import Unsupported
    from perfsuite.worker.backends.tf import precision as tf_precision

    monkeypatch.setattr(tf_precision, "_gpus_have_bf16", lambda: ampere)
    switched = []
    monkeypatch.setattr(tf.config.experimental, "enable_tensor_float_32_execution", switched.append)
    spec = GPU.replace(framework="tf", precision=precision)
    if outcome.endswith("GPU"):
        with pytest.raises(Unsupported, match=f"^{outcome}$"):
            tf_precision.precision_policy(spec)
        assert switched == []  # nothing is set up for a burst that does not run
    else:
        assert tf_precision.precision_policy(spec).dtype == outcome
        assert switched == [precision == "tf32"]


# -- forking after CUDA: the ranks of a warm start, the cuDNN version, the device batch ----------


def test_the_agent_of_forked_ranks_asks_nvml_whether_cuda_is_there(monkeypatch):
    """torch's LaunchConfig asks torch.cuda.is_available(); answered by the CUDA runtime, that
    initialises CUDA in the agent, and every rank forked from it fails at its first CUDA call."""
    pytest.importorskip("torch")
    import os

    import torch.distributed.launcher.api as api

    from perfsuite.worker import torchrun

    seen = {}

    class Config:
        def __init__(self, **kwargs):
            seen["check"] = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
            seen["start_method"] = kwargs["start_method"]

    # Set, not deleted, so that its undo removes the "1" the agent sets (a delenv of an unset
    # variable records nothing) and it does not leak into the warm starts of later tests.
    monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "0")
    monkeypatch.setattr(torchrun, "_become_agent", lambda: None)
    monkeypatch.setattr(api, "LaunchConfig", Config)
    monkeypatch.setattr(api, "elastic_launch", lambda config, entrypoint: lambda *argv: None)
    assert torchrun.forked_ranks(2, ["job", "out"]) == 0
    assert seen == {"check": "1", "start_method": "fork"}


@pytest.mark.parametrize("number, text", [(90100, "9.1.0"), (91002, "9.10.2"), (8902, "8.9.2"), (8700, "8.7.0")])
def test_the_cudnn_version_reads_both_numberings(number, text):
    from perfsuite.worker.backends.torch.burst import cudnn_version

    assert cudnn_version(number) == text


def test_device_batches_are_made_in_the_bursts_layout_once():
    """The step converts its images to channels_last; on the device's own batch that must be no
    copy, or every timed step would hold one that no training loop does."""
    pytest.importorskip("torch")
    import torch

    from perfsuite.worker.backends.torch import data

    spec = GPU.replace(device_kind="cpu", batch_size=2, image_size=32, memory_format="channels_last")
    images, _ = next(data.device_batches(spec, SimpleNamespace(num_classes=10), torch.device("cpu"), seed=0))
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert images.contiguous(memory_format=torch.channels_last) is images
    nchw = spec.replace(memory_format="channels_first")
    assert next(data.device_batches(nchw, SimpleNamespace(num_classes=10), torch.device("cpu"), seed=0))[
        0
    ].is_contiguous()
