"""The CPU peak table on simulated /proc/cpuinfo texts: the kind each CPU is told apart as, its
peak for each precision, what the row says it assumed, the clock it is taken at and the cores it
counts (never more than the process may run on)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.analysis import cpu_peaks, mfu
from perfsuite.contract.record import PEAK_FLAGS, CpuFacts
from perfsuite.worker import cpu_facts

# This machine's first processor, as /proc/cpuinfo gave it (a 2-vCPU cloud VM on an AMD EPYC of
# family 25 model 1, Zen 3, without cpufreq), 2026-12-03.
THIS_MACHINE = (
    "processor\t: 0\n"
    "vendor_id\t: AuthenticAMD\n"
    "cpu family\t: 25\n"
    "model\t\t: 1\n"
    "model name\t: AMD EPYC\n"
    "stepping\t: 1\n"
    "microcode\t: 0x1000065\n"
    "cpu MHz\t\t: 2445.404\n"
    "cache size\t: 512 KB\n"
    "physical id\t: 0\n"
    "siblings\t: 2\n"
    "core id\t\t: 0\n"
    "cpu cores\t: 2\n"
    "apicid\t\t: 0\n"
    "initial apicid\t: 0\n"
    "fpu\t\t: yes\n"
    "fpu_exception\t: yes\n"
    "cpuid level\t: 16\n"
    "wp\t\t: yes\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
    "sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology "
    "nonstop_tsc cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic "
    "movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy "
    "abm sse4a misalignsse 3dnowprefetch osvw topoext ssbd ibrs ibpb stibp vmmcall fsgsbase tsc_adjust "
    "bmi1 avx2 smep bmi2 erms invpcid rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 "
    "xsaves clzero xsaveerptr wbnoinvd arat umip pku ospke vaes vpclmulqdq rdpid fsrm\n"
    "bugs\t\t: sysret_ss_attrs spectre_v1 spectre_v2 spec_store_bypass srso ibpb_no_ret spectre_v2_user\n"
    "bogomips\t: 4890.80\n"
    "TLB size\t: 2560 4K pages\n"
    "clflush size\t: 64\n"
    "cache_alignment\t: 64\n"
    "address sizes\t: 48 bits physical, 48 bits virtual\n"
    "power management:\n"
)


def cpuinfo(vendor: str, family: int, model: int, name: str, flags: str, mhz: str = "2100.000") -> str:
    vendor_id = {"amd": "AuthenticAMD", "intel": "GenuineIntel"}[vendor]
    return (
        f"processor\t: 0\nvendor_id\t: {vendor_id}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
        f"model name\t: {name}\nstepping\t: 1\ncpu MHz\t\t: {mhz}\nflags\t\t: fpu sse4_2 {flags}\n\n"
    )


AVX2 = "avx fma avx2 hypervisor"
AVX512 = f"{AVX2} avx512f avx512dq avx512_vnni"
BF16 = f"{AVX512} avx512_bf16"
AMX = f"{BF16} amx_bf16 amx_tile amx_int8"


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """Installs a simulated /proc/cpuinfo, cpufreq, CPU topology and affinity for cpu_facts."""

    def install(text: str, siblings=("0", "1"), affinity=None, max_khz=None):
        (tmp_path / "cpuinfo").write_text(text)
        monkeypatch.setattr(cpu_facts, "CPUINFO", tmp_path / "cpuinfo")
        monkeypatch.setattr(cpu_facts, "CPUFREQ_MAX", tmp_path / "cpuinfo_max_freq")
        if max_khz is not None:
            (tmp_path / "cpuinfo_max_freq").write_text(f"{max_khz}\n")
        for cpu, listed in enumerate(siblings):
            topology = tmp_path / "sys" / f"cpu{cpu}" / "topology"
            topology.mkdir(parents=True, exist_ok=True)
            (topology / "thread_siblings_list").write_text(f"{listed}\n")
        monkeypatch.setattr(cpu_facts, "CPU_SYSFS", tmp_path / "sys")
        chosen = set(range(len(siblings))) if affinity is None else set(affinity)
        monkeypatch.setattr(cpu_facts.os, "sched_getaffinity", lambda pid: chosen)

    return install


def peak(cpu: CpuFacts, precision: str = "fp32") -> tuple[str | None, int | None, str | None]:
    kind, found, note = mfu.cpu_peak(cpu, precision)
    return (kind.name if kind else None), (found.flops_per_cycle if found else None), note


def test_this_machine_is_zen_3_at_its_nominal_clock_on_the_cores_it_may_run_on(machine):
    machine(THIS_MACHINE)
    cpu = cpu_facts.facts(2)
    assert (cpu.vendor, cpu.family, cpu.model, cpu.model_name) == ("amd", "25", "1", "AMD EPYC")
    assert cpu.flags == ("avx2", "fma", "hypervisor")
    assert (cpu.clock_mhz, cpu.clock_source, cpu.clock_basis) == (2445.404, "/proc/cpuinfo", "nominal")
    assert peak(cpu) == ("AMD Zen 3", 32, None)
    assert peak(cpu, "bf16") == ("AMD Zen 3", None, "no bf16 peak for AMD Zen 3")
    kind, found, _ = mfu.cpu_peak(cpu, "fp32")
    assert mfu.cpu_assumption(cpu, kind, found) == mfu._TURBO


@pytest.mark.parametrize(
    "text, fp32, bf16, kind",
    [
        (cpuinfo("amd", 23, 1, "AMD EPYC 7601 32-Core Processor", AVX2), 16, None, "AMD Zen, Zen+"),
        (cpuinfo("amd", 23, 49, "AMD EPYC", AVX2), 32, None, "AMD Zen 2"),
        (cpuinfo("amd", 25, 17, "AMD EPYC", BF16), 32, 64, "AMD Zen 4"),  # Genoa
        (cpuinfo("amd", 25, 17, "AMD EPYC", AVX2), 32, None, "AMD Zen 4"),  # AVX-512 hidden from the guest
        (cpuinfo("amd", 25, 97, "AMD Ryzen 9 7950X 16-Core Processor", BF16), 32, 64, "AMD Zen 4"),
        (cpuinfo("amd", 26, 2, "AMD EPYC", BF16), 64, 128, "AMD Zen 5, 512-bit datapaths"),  # Turin
        (cpuinfo("amd", 26, 17, "AMD EPYC", BF16), 64, 128, "AMD Zen 5, 512-bit datapaths"),  # Turin dense
        (cpuinfo("amd", 26, 68, "AMD Ryzen 9 9950X", BF16), 64, 128, "AMD Zen 5, 512-bit datapaths"),
        (cpuinfo("amd", 26, 2, "AMD EPYC", AVX2), 32, None, "AMD Zen 5, 512-bit datapaths"),  # 256-bit FMAs
        (cpuinfo("amd", 26, 36, "AMD Ryzen AI 9 HX 370", BF16), 32, 64, "AMD Zen 5, 256-bit datapaths"),
        (cpuinfo("intel", 6, 143, "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", AMX), 64, 1024,
         "Intel Xeon with AMX, 2 FMA units"),
        (cpuinfo("intel", 6, 167, "Intel(R) Xeon(R) Processor", AMX), 64, 1024,
         "Intel Xeon with AMX, 2 FMA units"),  # a guest's model number, but AMX: a Xeon, not Rocket Lake
        (cpuinfo("intel", 6, 207, "Intel(R) Xeon(R) Processor", BF16), 64, 128,
         "Intel Xeon Sapphire Rapids and later, 2 FMA units"),
        (cpuinfo("intel", 6, 106, "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", AVX512), 64, None,
         "Intel Xeon Ice Lake-SP, 2 FMA units"),
        (cpuinfo("intel", 6, 167, "Intel(R) Xeon(R) E-2388G CPU @ 3.20GHz", AVX512), 32, None,
         "Intel client cores with AVX-512, 1 FMA unit"),
        (cpuinfo("intel", 6, 85, "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", AVX512), 64, None,
         "Intel Xeon Scalable (Skylake-SP to Cooper Lake), 2 FMA units"),
        (cpuinfo("intel", 6, 85, "Intel(R) Xeon(R) Gold 5122 CPU @ 3.60GHz", AVX512), 64, None,
         "Intel Xeon Scalable (Skylake-SP to Cooper Lake), 2 FMA units"),
        (cpuinfo("intel", 6, 85, "Intel(R) Xeon(R) Gold 5318H CPU @ 2.50GHz", BF16), 64, 128,
         "Intel Xeon Scalable (Skylake-SP to Cooper Lake), 2 FMA units"),
        (cpuinfo("intel", 6, 85, "Intel(R) Xeon(R) Gold 5118 CPU @ 2.30GHz", AVX512), 32, None,
         "Intel Xeon Scalable (Skylake-SP, Cascade Lake), 1 FMA unit"),
        (cpuinfo("intel", 6, 85, "Intel(R) Xeon(R) Silver 4214R CPU @ 2.40GHz", AVX512), 32, None,
         "Intel Xeon Scalable (Skylake-SP, Cascade Lake), 1 FMA unit"),
        (cpuinfo("intel", 6, 85, "Intel Xeon Processor (Cascadelake)", AVX512), 64, None,
         "Intel with AVX-512, 2 FMA units"),  # a masked SKU: assumed, and said
        (cpuinfo("intel", 6, 85, "Intel Xeon Processor (Cascadelake)", AVX2), 32, None,
         "Intel, 2 FMA units of 256 bits"),  # AVX-512 hidden: the AVX2 units
        (cpuinfo("intel", 6, 63, "Intel(R) Xeon(R) CPU E5-2699 v3 @ 2.30GHz", AVX2), 32, None,
         "Intel, 2 FMA units of 256 bits"),  # Haswell
        (cpuinfo("intel", 6, 151, "12th Gen Intel(R) Core(TM) i9-12900K", AVX2), 32, None,
         "Intel hybrid, P-cores' 2 FMA units of 256 bits"),
    ],
)  # fmt: skip
def test_each_kind_is_told_apart_and_has_its_peaks(machine, text, fp32, bf16, kind):
    machine(text)
    cpu = cpu_facts.facts(2)
    assert peak(cpu)[:2] == (kind, fp32)
    assert peak(cpu, "bf16")[:2] == (kind, bf16)


@pytest.mark.parametrize(
    "text, assumed",
    [
        (cpuinfo("amd", 26, 112, "AMD RYZEN AI MAX+ 395", BF16), "512-bit datapaths: Strix Halo"),
        (cpuinfo("amd", 26, 96, "AMD Ryzen AI 7 350", BF16), "256-bit datapaths, as Strix Point"),
        (cpuinfo("intel", 6, 85, "Intel Xeon Processor (Skylake, IBRS)", AVX512), "two 512-bit FMA units"),
        (cpuinfo("intel", 6, 154, "12th Gen Intel(R) Core(TM) i7-1260P", AVX2), "every core a P-core"),
    ],
)
def test_a_kind_the_facts_cannot_settle_says_what_it_assumes(machine, text, assumed):
    machine(text, max_khz=3000000)  # cpufreq's maximum: no assumption of its own
    cpu = cpu_facts.facts(2)
    kind, found, note = mfu.cpu_peak(cpu, "fp32")
    assert kind is not None and found is not None and note is None
    assert mfu.cpu_assumption(cpu, kind, found).startswith(assumed)


@pytest.mark.parametrize(
    "text, note",
    [
        (cpuinfo("amd", 26, 80, "AMD EPYC", BF16), "no fp32 peak for amd family 26 model 80 (AMD EPYC), avx512"),
        (cpuinfo("amd", 24, 1, "Hygon C86 7185 32-core Processor", AVX2).replace("AuthenticAMD", "HygonGenuine"),
         "no fp32 peak for hygon family 24 model 1 (Hygon C86 7185 32-core Processor), avx2"),
        ("processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\n"
         "CPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd40\nCPU revision\t: 1\n",
         "no fp32 peak for arm-0x41 family 8 model 0xd40, sve"),  # Neoverse V1: no table entry for Arm yet
    ],
)  # fmt: skip
def test_a_cpu_the_table_does_not_know_has_no_peak_and_says_what_it_was(machine, text, note):
    machine(text, max_khz=3000000)
    assert peak(cpu_facts.facts(2)) == (None, None, note)


def test_the_cores_are_those_asked_never_more_than_the_physical_cores_it_may_run_on(machine):
    # 4 CPUs, two cores of two hyperthreads each
    machine(THIS_MACHINE, siblings=("0-1", "0-1", "2-3", "2-3"))
    cpu = cpu_facts.facts(4)
    assert (cpu.cores, cpu.cores_asked, cpu.cpus_allowed, cpu.cores_allowed) == (2, 4, 4, 2)
    assert cpu_facts.facts(1).cores == 1
    machine(THIS_MACHINE, siblings=("0-1", "0-1", "2-3", "2-3"), affinity={2, 3})  # taskset -c 2,3
    assert (cpu_facts.facts(2).cores, cpu_facts.facts(2).cpus_allowed) == (1, 2)
    machine(THIS_MACHINE, siblings=("0", "1"), affinity={1})
    assert cpu_facts.facts(2).cores == 1


@given(st.lists(st.integers(0, 3), min_size=1, max_size=16), st.integers(0, 64), st.data())
def test_the_counted_cores_never_exceed_the_asked_nor_the_allowed(cores_of, asked, data):
    """CPU i belongs to core cores_of[i]; whatever the affinity, the count is min(asked, its cores)."""
    affinity = data.draw(st.sets(st.integers(0, len(cores_of) - 1), min_size=1))
    siblings = [",".join(str(j) for j, c in enumerate(cores_of) if c == core) for core in cores_of]
    with pytest.MonkeyPatch.context() as mp:
        topology = {f"cpu{i}": s for i, s in enumerate(siblings)}
        mp.setattr(cpu_facts.os, "sched_getaffinity", lambda pid: affinity)
        mp.setattr(cpu_facts, "CPU_SYSFS", _FakeSysfs(topology))
        cpus, physical = cpu_facts.allowed()
    assert cpus == len(affinity) and physical == len({cores_of[i] for i in affinity})
    assert min(asked, physical) <= min(asked, cpus)


class _FakeSysfs:
    """Stands in for /sys/devices/system/cpu: cpuN/topology/thread_siblings_list from a dict."""

    def __init__(self, siblings: dict[str, str], parts: tuple[str, ...] = ()):
        self.siblings, self.parts = siblings, parts

    def __truediv__(self, part: str) -> _FakeSysfs:
        return _FakeSysfs(self.siblings, (*self.parts, part))

    def read_text(self) -> str:
        return self.siblings[self.parts[0]]


def test_every_kind_has_sources_dense_figures_and_reads_only_recorded_flags():
    for kind in cpu_peaks.KINDS:
        assert kind.source and kind.told_by and set(kind.flags) <= set(PEAK_FLAGS)
        for p in kind.peaks:
            assert p.flops_per_cycle > 0 and p.precision in mfu.PRECISIONS and p.needs in PEAK_FLAGS
        widest = max((p.flops_per_cycle for p in kind.peaks if p.precision == "fp32"), default=0)
        for p in kind.peaks:  # vdpbf16ps: twice the FMA units' fp32 figure, an assumption it carries
            if p.needs == "avx512_bf16":
                assert p.flops_per_cycle == 2 * widest and p.assumed


@given(st.sampled_from([23, 25, 26]), st.integers(0, 255), st.sets(st.sampled_from(PEAK_FLAGS)))
def test_an_amd_model_number_names_at_most_one_kind_and_fewer_flags_never_raise_its_peak(family, model, flags):
    cpu = CpuFacts("amd", str(family), None, 2000.0, "cpufreq max", 2, model=str(model), flags=tuple(flags))
    assert sum(k.matches(cpu) for k in cpu_peaks.KINDS) <= 1
    kind = cpu_peaks.kind_of(cpu)
    if kind is not None:
        for precision in ("fp32", "bf16"):
            more = kind.peak(CpuFacts.from_dict({**cpu.__dict__, "flags": PEAK_FLAGS}), precision)
            fewer = kind.peak(cpu, precision)
            assert fewer is None or (more is not None and fewer.flops_per_cycle <= more.flops_per_cycle)
