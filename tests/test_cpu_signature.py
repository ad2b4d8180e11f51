"""CPU fingerprints that tell generations apart behind a masked model name, and baseline
files saved before they did: never used for hardware that has a signature, said in one line."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from suite_files import FAKE_ARGS, faked_project

from perfsuite.common import hardware
from perfsuite.common.hardware import Fingerprint, parse_cpu_signature
from perfsuite.store import baseline

SLUG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")

# /proc/cpuinfo as 2-vCPU cloud VMs show it: the model name masked, the rest not.
ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse4_2 avx avx2 avx512f avx512_bf16 avx512_vnni

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse4_2 avx avx2 avx512f avx512_bf16 avx512_vnni
"""
ZEN2 = (
    ZEN4.replace("cpu family\t: 25", "cpu family\t: 23")
    .replace("model\t\t: 17", "model\t\t: 49")
    .replace(" avx512f avx512_bf16 avx512_vnni", "")
)
SAPPHIRE_RAPIDS = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Processor
stepping\t: 8
flags\t\t: fpu sse4_2 avx avx2 avx512f amx_bf16 amx_tile
"""
NEOVERSE_V1 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes sve svei8mm
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
CPU revision\t: 1
"""


def _fp(cpuinfo: str, model: str = "AMD EPYC", cores: int = 2, kind: str = "cpu") -> Fingerprint:
    sig = parse_cpu_signature(cpuinfo)
    assert sig is not None
    fields = dict(
        cpu_vendor=sig.vendor,
        cpu_family=sig.family,
        cpu_model_number=sig.model,
        cpu_stepping=sig.stepping,
        cpu_isa=sig.isa,
    )
    extra = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8} if kind == "gpu" else {}
    return Fingerprint(kind=kind, cpu_model=model, cpu_cores=cores, **fields, **extra)


def test_signatures_parsed():
    assert parse_cpu_signature(ZEN4) == hardware.CpuSignature("amd", "25", "17", "1", "avx512")
    assert parse_cpu_signature(ZEN2) == hardware.CpuSignature("amd", "23", "49", "1", "avx2")
    assert parse_cpu_signature(SAPPHIRE_RAPIDS) == hardware.CpuSignature("intel", "6", "143", "8", "amx")
    assert parse_cpu_signature(NEOVERSE_V1) == hardware.CpuSignature("arm-0x41", "8", "0xd40", "r1p1", "sve")
    assert parse_cpu_signature("") is None
    assert parse_cpu_signature("model name\t: Apple M2\n") is None


def test_a_masked_name_no_longer_hides_the_generation():
    zen4, zen2 = _fp(ZEN4), _fp(ZEN2)
    assert zen4.id == "cpu-amd-epyc-f25m17s1-avx512-2c"
    assert zen2.id == "cpu-amd-epyc-f23m49s1-avx2-2c"
    assert zen4.legacy_cpu_id == zen2.legacy_cpu_id == "cpu-amd-epyc-2c"  # what both were called before
    assert _fp(SAPPHIRE_RAPIDS, "Intel(R) Xeon(R) Processor").id == "cpu-intel-xeon-processor-f6m143s8-amx-2c"
    # A name that does not say the vendor gets it from the signature.
    assert _fp(ZEN4, "Common KVM processor").id == "cpu-common-kvm-processor-amd-f25m17s1-avx512-2c"
    assert _fp(NEOVERSE_V1, "", 4).id == "cpu-unknown-arm-0x41-f8m0xd40r1p1-sve-4c"
    assert hardware.describe(zen4) == "2 x AMD EPYC (amd family 25 model 17 stepping 1, avx512)"


def test_the_gpu_id_stays_and_carries_its_host_cpu():
    gpu = _fp(ZEN4, kind="gpu")
    assert gpu.id == "gpu-nvidia-h100-80gb-hbm3-x8"
    assert gpu.cpu_id == "cpu-amd-epyc-f25m17s1-avx512-2c"
    assert Fingerprint.from_dict(gpu.as_dict()) == gpu


@given(
    st.text(min_size=0, max_size=40),
    st.text(alphabet="0123456789abcdefx", min_size=1, max_size=6),
    st.integers(1, 512),
)
def test_any_signature_gives_a_safe_id(vendor, number, cores):
    fp = Fingerprint("cpu", "AMD EPYC", cores, None, 0, None, None, vendor, number, number, number, "avx2")
    assert SLUG.match(fp.id), fp.id


def test_this_machine_records_its_signature():
    fp = hardware.cpu_fingerprint()
    if not Path("/proc/cpuinfo").is_file():
        pytest.skip("no /proc/cpuinfo here: the fingerprint keeps the model name and cores only")
    assert fp.signature is not None and fp.id != fp.legacy_cpu_id
    assert fp.id.endswith(f"-{fp.cpu_cores}c")


# --- baseline files saved before the signature --------------------------------------------


def _write(path: Path, fingerprint: dict) -> None:
    path.write_text(json.dumps({"schema": baseline.SCHEMA_VERSION, "fingerprint": fingerprint, "entries": {"k": {}}}))


def test_a_file_under_the_old_name_is_reported_never_used(tmp_path):
    fp = _fp(ZEN4)
    old = Fingerprint("cpu", "AMD EPYC", 2)
    _write(tmp_path / f"{fp.legacy_cpu_id}.json", old.as_dict())
    found, why = baseline.find(tmp_path, fp)
    assert found is None
    assert why is not None and "\n" not in why
    assert f"{tmp_path / 'cpu-amd-epyc-2c.json'} names the CPU by model name and core count only" in why
    assert "2 x AMD EPYC (amd family 25 model 17 stepping 1, avx512)" in why
    assert "--perf-save-baseline" in why and "cpu-amd-epyc-f25m17s1-avx512-2c.json" in why


def test_a_file_without_the_fields_is_not_used_under_the_new_name_either(tmp_path):
    fp = _fp(ZEN4)
    _write(tmp_path / f"{fp.id}.json", Fingerprint("cpu", "AMD EPYC", 2).as_dict())
    found, why = baseline.find(tmp_path, fp)
    assert found is None and why is not None
    with pytest.raises(baseline.BaselineError, match="move it aside first, nothing was written"):
        baseline.save_entries(tmp_path / f"{fp.id}.json", fp, {"k2": {"images_per_sec": 1.0}}, {})
    assert json.loads((tmp_path / f"{fp.id}.json").read_text())["entries"] == {"k": {}}  # untouched


def test_a_signed_file_is_used_and_one_of_another_generation_is_not_found(tmp_path):
    zen4, zen2 = _fp(ZEN4), _fp(ZEN2)
    _write(tmp_path / f"{zen4.id}.json", zen4.as_dict())
    found, why = baseline.find(tmp_path, zen4)
    assert found is not None and why is None
    assert baseline.find(tmp_path, zen2) == (None, None)


def test_without_a_signature_the_old_file_is_still_the_one(tmp_path):
    # Where /proc/cpuinfo says nothing (macOS, some containers), the id is what it was.
    fp = Fingerprint("cpu", "AMD EPYC", 2)
    _write(tmp_path / "cpu-amd-epyc-2c.json", fp.as_dict())
    found, why = baseline.find(tmp_path, fp)
    assert found is not None and why is None


def test_the_gate_skips_with_the_reason_and_the_run_is_not_a_failure(pytester):
    here = hardware.cpu_fingerprint()
    if here.signature is None:
        pytest.skip("this machine's CPU has no signature in /proc/cpuinfo")
    project = faked_project(pytester)
    _write(project.path / "baselines" / f"{here.legacy_cpu_id}.json", Fingerprint("cpu", here.cpu_model, 2).as_dict())
    result = project.runpytest_inprocess(*FAKE_ARGS, "-rs", "--perf-json", "r.json")
    result.assert_outcomes(skipped=1)
    assert result.ret == 0  # measured and reported: a machine kind without a baseline is no failure
    out = result.stdout.str()
    assert "names the CPU by model name and core count only" in out
    assert f"--perf-save-baseline (it goes to baselines/{here.id}.json)" in out.replace(str(project.path) + "/", "")
    assert json.loads((project.path / "r.json").read_text())["results"]  # the burst ran and was recorded
    strict = project.runpytest_inprocess(*FAKE_ARGS, "--perf-missing-baseline", "fail")
    strict.assert_outcomes(failed=1)  # the nightly's setting: never green without a baseline
    shutil.rmtree(project.path / "baselines")


def test_a_machine_kind_without_baselines_measures_reports_and_says_how_to_keep_them(pytester):
    project = faked_project(pytester)
    result = project.runpytest_inprocess(*FAKE_ARGS, "--perf-json", "r.json")
    result.assert_outcomes(skipped=1)
    assert result.ret == 0
    here = hardware.cpu_fingerprint()
    result.stdout.fnmatch_lines(
        [
            f"no baseline file for this hardware (baselines/{here.id}.json): 1 burst was measured and reported, "
            "not gated; run the same command with --perf-save-baseline to keep them as its baseline, or with "
            "--perf-missing-baseline save to keep them as this machine's local one"
        ]
    )
    assert "names the CPU by model name" not in result.stdout.str()
