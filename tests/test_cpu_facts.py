"""A CPU worker's facts: its clock, and the ISA oneDNN's matrix kernels ran on."""

from __future__ import annotations

import sys

import pytest

from perfsuite.worker import cpu_facts

AMX_LINE = (
    "onednn_verbose,v1,primitive,create:cache_miss,cpu,matmul,brg_matmul:avx10_1_512_amx,undef,"
    "src:bf16::blocked:ab::f0,,256x10:10x3072,0.29"
)
GEMM_LINE = (
    "onednn_verbose,v1,primitive,create:cache_miss,cpu,inner_product,x64:gemm:jit,forward_training,"
    "src:bf16::blocked:ab::f0,,mb256ic768oc3072,0.08"
)
REORDER_LINE = "onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f32::blocked:ab::f0,,8x64,0.01"
INFO_LINE = "onednn_verbose,v1,info,cpu,isa:Intel AVX10.1 and Intel AMX with bfloat16 and 8-bit integer support"


@pytest.mark.parametrize(
    "lines, isa",
    [
        ([INFO_LINE, AMX_LINE, REORDER_LINE], "amx"),
        ([AMX_LINE, GEMM_LINE, AMX_LINE], "amx, gemm:jit"),
        ([GEMM_LINE], "gemm:jit"),
        ([INFO_LINE, REORDER_LINE, "some other output"], None),
        ([], None),
    ],
)
def test_the_matrix_kernels_isa_is_read_from_onednns_verbose_lines(lines, isa):
    assert cpu_facts.matmul_isa("\n".join(lines)) == isa


def test_the_clock_comes_from_cpufreq_else_the_model_name_else_cpuinfo_else_none(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    block = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\ncpu MHz\t\t: 2100.000\n"
    cpuinfo.write_text(block + "flags\t\t: fpu avx2 hypervisor\n")
    monkeypatch.setattr(cpu_facts, "CPUINFO", cpuinfo)
    monkeypatch.setattr(cpu_facts, "CPUFREQ_MAX", tmp_path / "absent")
    assert cpu_facts.clock() == (2100.0, "/proc/cpuinfo", "nominal")  # a virtual machine's TSC clock
    cpuinfo.write_text(block + "flags\t\t: fpu avx2\n")
    assert cpu_facts.clock() == (2100.0, "/proc/cpuinfo", "current")  # bare metal without cpufreq
    cpuinfo.write_text(block + "model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n")
    assert cpu_facts.clock() == (2200.0, "model name", "base")
    (tmp_path / "max").write_text("3800000\n")
    monkeypatch.setattr(cpu_facts, "CPUFREQ_MAX", tmp_path / "max")
    assert cpu_facts.clock() == (3800.0, "cpufreq max", "max")
    monkeypatch.setattr(cpu_facts, "CPUFREQ_MAX", tmp_path / "absent")
    cpuinfo.write_text("processor\t: 0\n")
    assert cpu_facts.clock() == (None, None, None)
    assert cpu_facts.facts(4).clock_mhz is None and cpu_facts.facts(4).clock_basis is None


def test_standard_output_is_captured_at_the_descriptor_and_given_back(capfd):
    import os

    with cpu_facts.capture_stdout() as captured:
        os.write(1, b"from C\n")
    assert captured() == "from C\n"
    print("after")
    sys.stdout.flush()
    assert "after" in capfd.readouterr().out


def test_amx_is_checked_for_bf16_on_a_cpu_with_amx_only():
    assert cpu_facts.checks_amx("cpu", "bf16", "amx") and cpu_facts.checks_amx("cpu", "amp", "amx")
    assert not cpu_facts.checks_amx("cpu", "fp32", "amx")
    assert not cpu_facts.checks_amx("cpu", "bf16", "avx512")
    assert not cpu_facts.checks_amx("cuda", "bf16", "amx")
