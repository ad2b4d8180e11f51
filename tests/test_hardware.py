"""Device discovery and fingerprints, with the raw device source replaced by fakes."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.common import hardware
from perfsuite.common.hardware import Discovery, Fingerprint, GpuInfo, HardwareError

H100 = "NVIDIA H100 80GB HBM3"
UUIDS = (
    "GPU-8a3f0000-1111-2222-3333-444444444444",
    "GPU-8a3f9999-1111-2222-3333-444444444444",
    "GPU-c0ffee00-1111-2222-3333-444444444444",
    "GPU-deadbeef-1111-2222-3333-444444444444",
)
FOUR_GPUS = Discovery(
    devices=tuple(GpuInfo(i, H100, 80 * 2**30, uuid) for i, uuid in enumerate(UUIDS)),
    driver="580.159.04",
    cuda="13.0",
)
SLUG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


@pytest.fixture(autouse=True)
def _fresh_cache():
    hardware.clear_cache()
    yield
    hardware.clear_cache()


@pytest.fixture
def fake_gpus(monkeypatch):
    """Four H100s behind the raw source, with CUDA_VISIBLE_DEVICES unset."""
    calls = []

    def source():
        calls.append(1)
        return FOUR_GPUS

    monkeypatch.setattr(hardware, "_query_devices", source)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return calls


def _fp(kind="cpu", cpu_model="Intel(R) Xeon(R) Processor", cores=2, gpu_model=None, gpus=0):
    return Fingerprint(kind, cpu_model, cores, gpu_model, gpus, "580.159.04", "13.0")


# --- ids -------------------------------------------------------------------------


def test_id_examples():
    assert _fp().id == "cpu-intel-xeon-processor-2c"
    assert _fp("gpu", gpu_model=H100, gpus=1).id == "gpu-nvidia-h100-80gb-hbm3-x1"
    assert _fp(cpu_model="Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", cores=80).id == (
        "cpu-intel-xeon-gold-6248-cpu-2-50ghz-80c"
    )
    assert _fp(cpu_model="").id == "cpu-unknown-2c"


def test_id_ignores_software_versions():
    old = Fingerprint("gpu", "x", 8, H100, 8, "550.54.15", "12.4")
    new = Fingerprint("gpu", "x", 8, H100, 8, "580.159.04", "13.0")
    assert old.id == new.id


@given(model=st.text(max_size=300), cores=st.integers(1, 4096), gpus=st.integers(1, 64))
def test_any_model_string_gives_a_safe_stable_id(model, cores, gpus):
    for fp in (_fp(cpu_model=model, cores=cores), _fp("gpu", gpu_model=model, gpus=gpus)):
        assert SLUG.match(fp.id), fp.id
        assert len(fp.id) <= 100
        assert Fingerprint.from_dict(fp.as_dict()).id == fp.id


def test_dict_round_trip_ignores_unknown_keys():
    fp = _fp("gpu", gpu_model=H100, gpus=2)
    assert Fingerprint.from_dict({**fp.as_dict(), "added_later": 1}) == fp


def test_bad_kind():
    with pytest.raises(ValueError):
        _fp(kind="tpu")
    with pytest.raises(ValueError):
        hardware.fingerprint("tpu")


def test_describe():
    assert hardware.describe(_fp()) == "2 x Intel(R) Xeon(R) Processor"
    gpu = _fp("gpu", gpu_model=H100, gpus=1)
    assert hardware.describe(gpu) == f"1 x {H100}, driver 580.159.04, CUDA 13.0"


# --- this machine ----------------------------------------------------------------


def test_cpu_fingerprint_here():
    fp = hardware.cpu_fingerprint()
    assert fp.kind == "cpu" and fp.cpu_model and fp.cpu_cores >= 1
    assert fp.gpu_model is None and fp.gpu_count == 0
    assert SLUG.match(fp.id) and fp.id.endswith(f"-{fp.cpu_cores}c")
    assert hardware.fingerprint("cpu") == fp


def test_no_gpu_machine(monkeypatch):
    """Without a driver, NVML fails and nvidia-smi is missing: zero devices, no error."""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError

    def missing(*args, **kwargs):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(subprocess, "run", missing)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert hardware.cuda_devices() == []
    assert hardware.cuda_device_count() == 0
    assert hardware.gpu_fingerprint() is None
    with pytest.raises(HardwareError, match="no CUDA device visible"):
        hardware.fingerprint("gpu")


def test_nvidia_smi_fallback(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    out = (
        "0, NVIDIA H100 80GB HBM3, 81559, GPU-aaaa, 580.159.04\n1, NVIDIA H100 80GB HBM3, 81559, GPU-bbbb, 580.159.04\n"
    )
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=out, stderr=""))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert hardware.cuda_devices() == [
        GpuInfo(0, H100, 81559 * 2**20, "GPU-aaaa"),
        GpuInfo(1, H100, 81559 * 2**20, "GPU-bbbb"),
    ]
    fp = hardware.gpu_fingerprint()
    assert fp is not None and fp.driver == "580.159.04" and fp.cuda is None


def test_nvidia_smi_hang_means_no_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)

    def hang(*args, **kwargs):
        raise subprocess.TimeoutExpired("nvidia-smi", 10)

    monkeypatch.setattr(subprocess, "run", hang)
    assert hardware.cuda_device_count() == 0


# --- fake GPUs -------------------------------------------------------------------


def test_gpu_fingerprint_from_fake_source(fake_gpus):
    fp = hardware.fingerprint("gpu")
    assert (fp.kind, fp.gpu_model, fp.gpu_count) == ("gpu", H100, 4)
    assert (fp.driver, fp.cuda) == ("580.159.04", "13.0")
    assert fp.id == "gpu-nvidia-h100-80gb-hbm3-x4"
    assert fp.cpu_cores >= 1


def test_discovery_is_cached_until_cleared(fake_gpus):
    hardware.cuda_devices()
    hardware.cuda_device_count()
    hardware.gpu_fingerprint()
    assert len(fake_gpus) == 1
    hardware.clear_cache()
    hardware.cuda_devices()
    assert len(fake_gpus) == 2


@pytest.mark.parametrize(
    "spec, physical",
    [
        ("", []),
        ("-1", []),
        ("0", [0]),
        ("2", [2]),
        ("3,1", [3, 1]),  # CUDA ordinals follow the listed order
        (" 1 , 2 ", [1, 2]),
        ("1,7,2", [1]),  # an unknown index ends the list, as in CUDA
        ("1,-1,2", [1]),
        ("0,0", [0]),  # a repeat ends the list
        ("GPU-c0ffee00", [2]),
        ("GPU-c0ffee00-1111-2222-3333-444444444444", [2]),
        ("c0ffee00", [2]),  # the GPU- prefix may be left out
        ("GPU-DEADBEEF,0", [3, 0]),
        ("GPU-8a3f", []),  # ambiguous prefix
        ("GPU-8a3f9,GPU-8a3f0", [1, 0]),
        ("GPU-ffff", []),
        ("2,GPU-ffff,3", [2]),
    ],
)
def test_cuda_visible_devices(fake_gpus, monkeypatch, spec, physical):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", spec)
    devices = hardware.cuda_devices()
    assert [d.uuid for d in devices] == [UUIDS[i] for i in physical]
    assert [d.index for d in devices] == list(range(len(physical)))
    assert hardware.cuda_device_count() == len(physical)
    fp = hardware.gpu_fingerprint()
    assert (fp.gpu_count if fp else 0) == len(physical)


def test_cuda_visible_devices_read_on_every_call(fake_gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert hardware.cuda_device_count() == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    assert hardware.cuda_device_count() == 3


def test_mixed_models(monkeypatch):
    a100 = "NVIDIA A100-SXM4-40GB"
    found = Discovery((GpuInfo(0, H100, 1, "GPU-a"), GpuInfo(1, a100, 1, "GPU-b")), "580", "13.0")
    monkeypatch.setattr(hardware, "_query_devices", lambda: found)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fp = hardware.fingerprint("gpu")
    assert fp.gpu_model == f"{H100} + {a100}" and fp.gpu_count == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert hardware.fingerprint("gpu").id == "gpu-nvidia-a100-sxm4-40gb-x1"


class _FakeNvml:
    """Just enough of pynvml for _query_nvml."""

    class NVMLError(Exception):
        pass

    def __init__(self, names, fail_init=False):
        self.names, self.fail_init, self.shutdowns = names, fail_init, 0

    def nvmlInit(self):
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self.names[h].encode()  # older pynvml returns bytes

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h:04d}"

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("Memory", (), {"total": 80 * 2**30})()

    def nvmlSystemGetDriverVersion(self):
        return "580.159.04"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12080


def test_nvml_source(monkeypatch):
    nvml = _FakeNvml([H100, H100])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [(d.index, d.name, d.uuid) for d in hardware.cuda_devices()] == [
        (0, H100, "GPU-0000"),
        (1, H100, "GPU-0001"),
    ]
    fp = hardware.fingerprint("gpu")
    assert (fp.driver, fp.cuda) == ("580.159.04", "12.8")
    assert nvml.shutdowns == 1


def test_nvml_init_failure_falls_back_to_nvidia_smi(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml([], fail_init=True))
    monkeypatch.setattr(
        subprocess,
        "run",
        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=f"0, {H100}, 81559, GPU-a, 580\n"),
    )
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert hardware.cuda_device_count() == 1
