"""MFU: the peak table by CUDA device name, the precision that applies, the arithmetic."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from records import worker_record

from perfsuite.analysis import mfu
from perfsuite.contract.record import CpuFacts
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
    f = mfu.fields(record("NVIDIA H100 80GB HBM3"), gpu_spec(devices=4, nodes=2), throughput=10_000)
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


def test_fields_on_cpu_without_its_facts_report_achieved_but_no_mfu():
    spec = BurstSpec(framework="torch", model="cifar10", image_size=24)
    f = mfu.fields(record("cpu", fp32_math=None, flops=3.69e7, image_size=24), spec, 500)
    assert f["achieved_tflops"] == pytest.approx(3 * 3.69e7 * 500 / 1e12)
    assert f["peak_tflops"] is None and f["mfu"] is None and f["mfu_precision"] == "fp32"
    assert f["mfu_note"] is None  # a record without the CPU's facts claims nothing


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


# -- token models: FLOPs per token ----------------------------------------------------------

# A small decoder: 6N + 12LHQT per token, N the parameters less the embeddings only looked up.
DECODER = dict(params=1_000_000, embedding_params=200_000, layers=2, heads=4, head_dim=16)


def token_spec(**changes):
    return BurstSpec(framework="torch", model="gpt2", device_kind="cuda", seq_len=128).replace(**changes)


def token_record(spec, **fields):
    return worker_record(spec, [1.0] * 5, model_fields=DECODER, device_name="NVIDIA H100 80GB HBM3", **fields)


def test_a_token_models_achieved_flops_are_its_tokens_times_6n_plus_attention():
    spec = token_spec()
    f = mfu.fields(token_record(spec, fp32_math="ieee"), spec, 50_000)
    per_token = 6 * 800_000 + 12 * 2 * 4 * 16 * 128
    assert f["achieved_tflops"] == pytest.approx(per_token * 50_000 / 1e12)
    assert f["peak_tflops"] == 66.9 and f["mfu"] == pytest.approx(f["achieved_tflops"] / 66.9)


def test_a_token_models_flops_follow_its_sequence_length_and_inference_counts_one_forward():
    short, long = token_spec(seq_len=64), token_spec(seq_len=1024)
    per_token = {s.seq_len: mfu.flops_per_item(token_record(s).model, s) for s in (short, long)}
    assert per_token[1024] - per_token[64] == 12 * 2 * 4 * 16 * (1024 - 64)
    infer = short.replace(mode="infer")
    assert mfu.flops_per_item(token_record(infer).model, infer) == pytest.approx(2 * 800_000 + 4 * 2 * 4 * 16 * 64)


def test_an_image_models_flops_are_unchanged_and_a_mismatched_kind_has_none():
    image = gpu_spec()
    assert mfu.flops_per_item(record("NVIDIA L4").model, image) == 3 * 4e9
    assert mfu.flops_per_item(record("NVIDIA L4").model, image.replace(mode="infer")) == 4e9
    # an image model's record read against a token spec (or the reverse) counts nothing
    assert mfu.flops_per_item(record("NVIDIA L4").model, token_spec()) is None
    assert mfu.flops_per_item(token_record(token_spec()).model, image) is None
    # a token model registered without its structure: its FLOPs are not known
    bare = worker_record(token_spec(), [1.0])
    assert mfu.fields(bare, token_spec(), 1000)["achieved_tflops"] is None


# -- CPU workers: the peak per core and cycle ------------------------------------------------


def cpu_record(spec, cpu, dtype="float32", flops=1e9):
    return worker_record(spec, [1.0] * 5, flops=flops, precision_dtype=dtype, cpu=cpu)


def cpu_spec(**changes):
    return BurstSpec(framework="torch", model="resnet50", devices=2, threads=2).replace(**changes)


AMX_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")
ZEN4_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16")


def facts(vendor="intel", family="6", model="143", flags=AMX_FLAGS, isa="amx", mhz=2000.0, cores=4, matmul=None,
          source="cpufreq max", basis="max", name=None, asked=None):  # fmt: skip
    return CpuFacts(
        vendor, family, isa, mhz, source if mhz else None, cores, matmul_isa=matmul, model=model, model_name=name,
        flags=tuple(flags), clock_basis=basis if mhz else None, cores_asked=asked,
        cpus_allowed=cores if asked else None, cores_allowed=cores if asked else None,
    )  # fmt: skip


ZEN3 = dict(vendor="amd", family="25", model="1", flags=("avx2", "fma", "hypervisor"), isa="avx2")
ZEN4 = dict(vendor="amd", family="25", model="17", flags=ZEN4_FLAGS, isa="avx512")


@pytest.mark.parametrize(
    "cpu, per_cycle, entry",
    [
        (facts(), 64, "Intel Xeon with AMX, 2 FMA units"),  # an AMX Xeon's fp32 runs on AVX-512
        (facts(model="207", flags=("avx2", "fma", "avx512f"), isa="avx512"), 64,
         "Intel Xeon Sapphire Rapids and later, 2 FMA units"),  # AMX hidden from the guest
        (facts(model="167", flags=("avx2", "fma", "avx512f"), isa="avx512"), 32,
         "Intel client cores with AVX-512, 1 FMA unit"),  # Rocket Lake
        (facts(**ZEN3), 32, "AMD Zen 3"),
        (facts(**ZEN4), 32, "AMD Zen 4"),
        (facts(vendor="amd", family="26", model="2", flags=ZEN4_FLAGS, isa="avx512"), 64,
         "AMD Zen 5, 512-bit datapaths"),
        (facts(vendor="amd", family="26", model="36", flags=ZEN4_FLAGS, isa="avx512"), 32,
         "AMD Zen 5, 256-bit datapaths"),
    ],
)  # fmt: skip
def test_fp32_on_cpu_workers_is_flops_per_cycle_times_clock_and_cores(cpu, per_cycle, entry):
    spec = cpu_spec()
    f = mfu.fields(cpu_record(spec, cpu), spec, 100)
    assert f["mfu_precision"] == "fp32" and f["mfu_note"] is None
    assert f["peak_tflops"] == pytest.approx(per_cycle * 2000e6 * 4 / 1e12)
    assert f["achieved_tflops"] == pytest.approx(3 * 1e9 * 100 / 1e12)
    assert f["mfu"] == pytest.approx(f["achieved_tflops"] / f["peak_tflops"])
    assert f["peak_device"] == f"{entry} at 2000 MHz (cpufreq max) x 4 cores"
    assert f["peak_basis"].startswith(f"{cpu.vendor} family {cpu.family} model {cpu.model}: {entry}, told by")
    assert f"{per_cycle} fp32 FLOPs a cycle a core" in f["peak_basis"]
    assert f["peak_assumption"] is None  # cpufreq's maximum, a kind told by its model number or flag


@pytest.mark.parametrize(
    "precision, dtype, expected",
    [("fp32", "float32", "fp32"), ("tf32", "float32", "fp32"), ("amp", "bfloat16", "bf16"), ("amp", None, "bf16"),
     ("bf16", "bfloat16", "bf16"), ("fp16", "float16", "fp16")],
)  # fmt: skip
def test_the_precision_a_cpu_ran_in(precision, dtype, expected):
    assert mfu.cpu_precision(precision, dtype) == expected


def test_bf16_where_amx_ran_has_amxs_peak():
    spec = cpu_spec(precision="bf16")
    f = mfu.fields(cpu_record(spec, facts(matmul="amx"), dtype="bfloat16"), spec, 100)
    assert f["mfu_precision"] == "bf16" and f["peak_device"].startswith("Intel Xeon with AMX")
    assert f["peak_tflops"] == pytest.approx(1024 * 2000e6 * 4 / 1e12) and f["mfu"] is not None
    assert f["peak_assumption"] is None
    amp = cpu_spec(precision="amp")  # amp on a CPU autocasts to bf16
    assert mfu.fields(cpu_record(amp, facts(matmul="amx"), dtype="bfloat16"), amp, 100)["mfu"] is not None


@pytest.mark.parametrize(
    "cpu, per_cycle",
    [
        (facts(**ZEN4), 64),  # AVX512_BF16 on Zen 4's two 256-bit FMA pipes
        (facts(vendor="amd", family="26", model="68", flags=ZEN4_FLAGS, isa="avx512"), 128),  # Ryzen 9000
        (facts(vendor="amd", family="26", model="36", flags=ZEN4_FLAGS, isa="avx512"), 64),  # Strix Point
        (facts(model="207", flags=ZEN4_FLAGS, isa="avx512"), 128),  # AMX hidden: vdpbf16ps on AVX-512
    ],
)
def test_bf16_with_avx512_bf16_has_twice_fp32s_peak_and_says_what_it_assumes(cpu, per_cycle):
    spec = cpu_spec(precision="bf16")
    f = mfu.fields(cpu_record(spec, cpu, dtype="bfloat16"), spec, 100)
    assert f["mfu_precision"] == "bf16" and f["mfu_note"] is None and f["mfu"] is not None
    assert f["peak_tflops"] == pytest.approx(per_cycle * 2000e6 * 4 / 1e12)
    assert f["peak_assumption"] == "vdpbf16ps at the FMA units' rate"


@pytest.mark.parametrize(
    "matmul, note",
    [
        ("avx512_core_bf16", "bf16 matrix kernels ran on avx512_core_bf16, not all on AMX"),
        ("amx, gemm:jit", "bf16 matrix kernels ran on amx, gemm:jit, not all on AMX"),  # some on AMX, some not
        (None, "AMX use not checked"),
    ],
)
def test_bf16_on_a_cpu_with_amx_is_held_to_amxs_peak_and_says_where_its_kernels_ran_elsewhere(matmul, note):
    """AMX's peak is the CPU's own for bf16: kernels that ran elsewhere make a low MFU, which the
    note explains, rather than no MFU at all."""
    spec = cpu_spec(precision="bf16")
    f = mfu.fields(cpu_record(spec, facts(matmul=matmul), dtype="bfloat16"), spec, 100)
    assert f["peak_tflops"] == pytest.approx(1024 * 2000e6 * 4 / 1e12) and f["mfu"] is not None
    assert f["mfu_note"] == note


@pytest.mark.parametrize(
    "cpu, precision, note",
    [
        (facts(vendor="amd", family="26", model="80", flags=ZEN4_FLAGS, isa="avx512", name="AMD EPYC"), "fp32",
         "no fp32 peak for amd family 26 model 80 (AMD EPYC), avx512"),  # a family 26 model no source names
        (facts(vendor=None, family=None, model=None, flags=(), isa=None), "fp32",
         "no fp32 peak for unknown vendor family ? model ?, ISA unknown"),
        (facts(model=None, flags=("avx2", "fma")), "fp32", "no fp32 peak for intel family 6 model ?, amx"),
        (facts(**ZEN3), "bf16", "no bf16 peak for AMD Zen 3"),  # no AVX512_BF16
        (facts(model="207", flags=("avx2", "fma", "avx512f")), "bf16",
         "no bf16 peak for Intel Xeon Sapphire Rapids and later, 2 FMA units"),  # neither AMX nor AVX512_BF16 shown
        (facts(), "fp16", "no fp16 peak for Intel Xeon with AMX, 2 FMA units"),
        (facts(mhz=None), "fp32", "clock unknown"),
        (facts(matmul="amx", mhz=None), "bf16", "clock unknown"),
    ],
)  # fmt: skip
def test_an_unknown_kind_precision_or_clock_has_no_mfu_and_says_why(cpu, precision, note):
    spec = cpu_spec(precision=precision)
    dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(precision, "float32")
    f = mfu.fields(cpu_record(spec, cpu, dtype=dtype), spec, 100)
    assert f["peak_tflops"] is None and f["mfu"] is None and f["peak_device"] is None
    assert f["mfu_note"] == note and f["achieved_tflops"] is not None
    assert f["peak_basis"] is None and f["peak_assumption"] is None


def test_a_nominal_clock_and_an_assumed_kind_are_said_in_the_row():
    spec = cpu_spec()
    vm = facts(**{**ZEN3, "basis": "nominal", "source": "/proc/cpuinfo"}, asked=4)
    f = mfu.fields(cpu_record(spec, vm), spec, 100)
    assert "2000 MHz, a virtual machine's nominal clock (/proc/cpuinfo)" in f["peak_basis"]
    assert f["peak_basis"].endswith("4 cores: 4 threads asked, 4 cores among the 4 CPUs this process may run on")
    assert f["peak_assumption"] == mfu._TURBO
    masked = facts(model="85", flags=("avx2", "fma", "avx512f"), isa="avx512", name="Intel Xeon Processor (Skylake)")
    g = mfu.fields(cpu_record(spec, masked), spec, 100)
    assert g["peak_device"].startswith("Intel with AVX-512, 2 FMA units")
    assert g["peak_assumption"].startswith("two 512-bit FMA units: the model number and name do not tell")


@given(
    st.floats(500, 6000),
    st.integers(1, 256),
    st.integers(1, 8),
    st.sampled_from([(facts(), 64), (facts(**ZEN3), 32), (facts(**ZEN4), 32)]),
)
def test_a_cpu_peak_is_linear_in_clock_cores_and_nodes(mhz, cores, nodes, cpu_and_figure):
    cpu, per_cycle = cpu_and_figure
    spec = cpu_spec(nodes=nodes)
    cpu = CpuFacts.from_dict({**cpu.__dict__, "clock_mhz": mhz, "cores": cores})
    f = mfu.fields(cpu_record(spec, cpu), spec, 100)
    assert f["peak_tflops"] == pytest.approx(per_cycle * mhz * 1e6 * cores * nodes / 1e12)


def test_a_gpu_without_a_peak_says_why():
    assert mfu.fields(record("NVIDIA Mystery"), gpu_spec(), 1000)["mfu_note"] == "GPU not in the peak table"
    assert mfu.fields(record("NVIDIA A100-SXM4-40GB MIG 1g.5gb"), gpu_spec(), 1000)["mfu_note"] == "a MIG slice"
    bf16 = mfu.fields(record("Tesla M40 24GB", dtype="bfloat16"), gpu_spec(precision="bf16"), 1000)
    assert bf16["mfu_note"] == "no bf16 peak for M40"
    assert mfu.fields(record("NVIDIA L4"), gpu_spec(), 1000)["mfu_note"] is None
