"""MFU: the peak table by CUDA device name, the precision that applies, the arithmetic."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from records import worker_record

from perfsuite.analysis import mfu
from perfsuite.contract.spec import BurstSpec


@pytest.mark.parametrize(
    "device, entry",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA A100-PCIE-40GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA A30", "A30"),
        ("NVIDIA A40", "A40"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("Tesla V100-PCIE-16GB", "V100 PCIe"),
        ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
        ("Tesla P100-SXM2-16GB", "P100 SXM2"),
        ("Tesla P100-PCIE-12GB", "P100 PCIe"),
        ("Tesla M40 24GB", "M40"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ],
)
def test_lookup_by_cuda_device_name(device, entry):
    assert mfu.lookup(device).name == entry


@pytest.mark.parametrize(
    "device",
    [
        None,
        "",
        "cpu",
        "NVIDIA H100",  # which H100? no guess
        "NVIDIA GB200",
        "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA GeForce RTX 4090 Laptop GPU",
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
        "Tesla K80",
        "AMD Instinct MI300X",
    ],
)
def test_unknown_devices_have_no_peak(device):
    assert mfu.lookup(device) is None


def test_every_entry_finds_itself_and_is_dense_and_ordered():
    for entry in mfu.PEAKS:
        assert mfu.lookup(entry.name) is entry, entry.name  # a general pattern never shadows a specific one
        assert entry.tflops and set(entry.tflops) <= set(mfu.PRECISIONS) and entry.source
        assert all(v > 0 for v in entry.tflops.values())
        if "fp32" in entry.tflops:
            assert entry.tflops.get("fp16", math.inf) >= entry.tflops["fp32"]


def test_published_dense_figures():
    assert mfu.lookup("NVIDIA H100 80GB HBM3").tflops["bf16"] == 989.4
    assert mfu.lookup("NVIDIA A100-SXM4-80GB").tflops == {"fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312}
    assert mfu.lookup("Tesla V100-SXM2-16GB").tflops == {"fp32": 15.7, "fp16": 125}


@pytest.mark.parametrize(
    "precision, dtype, fp32_math, expected",
    [
        ("amp", "bfloat16", None, "bf16"),
        ("amp", "float16", "tf32", "fp16"),
        ("fp32", "float32", "tf32", "tf32"),
        ("fp32", "float32", "ieee", "fp32"),
        ("fp32", "float32", None, "tf32"),  # both frameworks' default for convolutions
    ],
)
def test_compute_precision(precision, dtype, fp32_math, expected):
    assert mfu.compute_precision(precision, dtype, fp32_math) == expected


def record(device_name, dtype="float32", fp32_math="tf32", flops=4e9, image_size=224):
    return worker_record(
        gpu_spec(),
        [1.0] * 5,
        flops=flops,
        model_image_size=image_size,
        device_name=device_name,
        precision_dtype=dtype,
        fp32_math=fp32_math,
    )


def gpu_spec(**changes):
    return BurstSpec(framework="torch", model="resnet50", device_kind="cuda", image_size=224).replace(**changes)


def test_fields_fp32_on_an_h100_use_the_tf32_peak_times_the_world():
    f = mfu.fields(record("NVIDIA H100 80GB HBM3"), gpu_spec(devices=4, nodes=2), images_per_sec=10_000)
    assert f["achieved_tflops"] == pytest.approx(3 * 4e9 * 10_000 / 1e12)
    assert f["mfu_precision"] == "tf32" and f["peak_device"] == "H100 SXM"
    assert f["peak_tflops"] == pytest.approx(494.7 * 8)
    assert f["mfu"] == pytest.approx(f["achieved_tflops"] / f["peak_tflops"])


def test_fields_amp_uses_the_autocast_dtype():
    f = mfu.fields(record("NVIDIA A100-SXM4-80GB", dtype="bfloat16"), gpu_spec(precision="amp"), 1000)
    assert f["mfu_precision"] == "bf16" and f["peak_tflops"] == 312


def test_fields_tf32_falls_back_to_fp32_on_volta():
    f = mfu.fields(record("Tesla V100-SXM2-16GB"), gpu_spec(), 1000)
    assert f["mfu_precision"] == "fp32" and f["peak_tflops"] == 15.7


def test_fields_ieee_fp32_uses_the_fp32_peak():
    f = mfu.fields(record("NVIDIA A100-SXM4-80GB", fp32_math="ieee"), gpu_spec(), 1000)
    assert f["mfu_precision"] == "fp32" and f["peak_tflops"] == 19.5


def test_fields_on_cpu_report_achieved_but_no_mfu():
    spec = BurstSpec(framework="torch", model="cifar10", image_size=24)
    f = mfu.fields(record("cpu", fp32_math=None, flops=3.69e7, image_size=24), spec, 500)
    assert f["achieved_tflops"] == pytest.approx(3 * 3.69e7 * 500 / 1e12)
    assert f["peak_tflops"] is None and f["mfu"] is None and f["mfu_precision"] is None


def test_fields_without_evidence():
    assert mfu.fields(None, gpu_spec(), 1000)["achieved_tflops"] is None
    assert mfu.fields(record("NVIDIA L4"), gpu_spec(), None)["mfu"] is None
    unknown = mfu.fields(record("NVIDIA Mystery"), gpu_spec(), 1000)
    assert unknown["achieved_tflops"] > 0 and unknown["peak_tflops"] is None and unknown["mfu"] is None
    # the registry's FLOPs hold at the model's own image size only
    assert mfu.fields(record("NVIDIA L4", image_size=299), gpu_spec(), 1000)["achieved_tflops"] is None


@given(st.floats(1e6, 1e12), st.floats(1e-3, 1e6), st.floats(0.5, 8))
def test_achieved_tflops_is_three_forward_passes(flops, ips, k):
    a = mfu.achieved_tflops(flops, ips)
    assert a == pytest.approx(3 * flops * ips / 1e12)
    assert mfu.achieved_tflops(flops, ips * k) == pytest.approx(k * a)  # linear in throughput


@given(
    st.sampled_from([p.name for p in mfu.PEAKS]),
    st.integers(1, 16),
    st.floats(1, 1e5),
    st.sampled_from(["fp32", "amp"]),
)
def test_mfu_is_achieved_over_world_peak(device, world, ips, precision):
    f = mfu.fields(record(device, dtype="bfloat16"), gpu_spec(devices=world, precision=precision), ips)
    if f["peak_tflops"] is None:  # e.g. B200 publishes no fp32 figure we table, M40 has no bf16
        assert f["mfu"] is None
        return
    assert f["mfu"] == pytest.approx(f["achieved_tflops"] / f["peak_tflops"])
    assert f["peak_tflops"] == pytest.approx(world * mfu.lookup(device).tflops[f["mfu_precision"]])
