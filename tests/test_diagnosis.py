"""Bottleneck diagnosis from synthetic bursts, made as a case is judged, and the lines that show it."""

from hypothesis import given
from hypothesis import strategies as st
from records import judged, result, worker_record

from perfsuite.analysis import diagnosis
from perfsuite.analysis.diagnosis import COMMUNICATION_BOUND, COMPUTE_BOUND, INCONCLUSIVE, INPUT_BOUND
from perfsuite.analysis.findings import Context, Limits, Measured, judge_scaling, judge_throughput
from perfsuite.analysis.measurement import Measurement
from perfsuite.contract.record import RemoteNode
from perfsuite.contract.spec import BurstSpec
from perfsuite.reporting import terminal
from perfsuite.reporting.view import RunView
from perfsuite.store.run import RunInfo

RUN = RunInfo(date="2026-01-01T00:00:00+00:00", host="h", python="3")


def util(gpu=None, busy_cores=None, cores=16, cpu=None, n_gpus=1):
    u = {"interval_s": 0.1, "samples": 50, "gpus": []}
    if busy_cores is not None or cpu is not None:
        u["cpu"] = {
            "busy_cores_mean": busy_cores,
            "cores": cores,
            "percent_mean": cpu if cpu is not None else 100 * (busy_cores or 0) / cores,
        }
    if gpu is not None:
        u["gpus"] = [{"index": i, "util_percent": {"mean": gpu, "p95": gpu}} for i in range(n_gpus)]
    return u


def burst(ips, utilisation=None, per_rank_ips=None, **spec) -> Measurement:
    s = BurstSpec(framework="tf", model="resnet50", device_kind="cuda", batch_size=64).replace(**spec)
    record = worker_record(
        s,
        [ips] * 5,
        flops=8.18e9,
        per_rank_ips=per_rank_ips,
        loss_first=7.0,
        loss_last=6.0,
        device_name="NVIDIA H100 80GB HBM3",
        fp32_math="tf32",
        utilisation=utilisation,
    )
    return Measurement.of(s, record)


def throughput(m, twin=None):
    """The throughput case's diagnoses, ``twin`` the device data location's burst."""
    return judge_throughput("t::test", m.spec.key(), Measured(m, device_twin=twin), Context(LIMITS)).diagnosis


def scaled(m, single, floor=None, baseline=None, tolerance=0.0, independent=None):
    """The scaling case's diagnoses against a floor or a baseline efficiency."""
    limits = Limits(tolerance=0.1, memory_tolerance=0.1, scaling_tolerance=tolerance, min_scaling_efficiency=floor)
    entry = {"scaling_efficiency": baseline} if baseline is not None else None
    context = Context(limits, entry, "baselines/x.json", missing=None if entry else "no entry")
    found = judge_scaling("t::test", m.spec.key(), Measured(m, single=single, independent=independent), context)
    return found.diagnosis


LIMITS = Limits(tolerance=0.1, memory_tolerance=0.1, scaling_tolerance=0.1)


def kinds(found):
    return [(f.key, f.kind) for f in found]


# --- data location ----------------------------------------------------------------------


def test_host_data_that_starves_the_gpus_is_input_bound():
    device = burst(2900, util(gpu=97, busy_cores=3, n_gpus=8), devices=8)
    host = burst(1000, util(gpu=31, busy_cores=15.8, n_gpus=8), devices=8, data_location="host")
    [f] = throughput(host, device)
    assert f.kind == INPUT_BOUND and f.flagged and f.key == host.spec.key()
    assert f.text == (
        "tf-resnet50-gpu8-host: input-bound — GPUs 31% busy (mean) while 15.8 of 16 host cores "
        "were saturated; `device` data reaches 2.9x the throughput"
    )


def test_idle_gpus_with_an_idle_host_are_inconclusive():
    device = burst(2900, util(gpu=97, busy_cores=3), devices=1)
    real = burst(1000, util(gpu=30, busy_cores=2), data_location="real")
    [f] = throughput(real, device)
    assert f.kind == INCONCLUSIVE and "2.0 of 16 host cores" in f.text and "GPU 30% busy" in f.text


def test_busy_gpus_with_slower_data_are_inconclusive_not_input_bound():
    device = burst(2900, util(gpu=97, busy_cores=3))
    real = burst(2000, util(gpu=96, busy_cores=15), data_location="real", augment_on="device")
    [f] = throughput(real, device)
    assert f.kind == INCONCLUSIVE and "device work" in f.text


def test_a_data_location_within_noise_is_not_flagged():
    device = burst(1000, util(gpu=97, busy_cores=3))
    host = burst(950, util(gpu=95, busy_cores=3), data_location="host")
    [f] = throughput(host, device)  # nothing to explain: the healthy line the report lists, no more
    assert (f.kind, f.flagged) == (COMPUTE_BOUND, False)
    assert kinds(throughput(device)) == [(device.spec.key(), COMPUTE_BOUND)]


def test_without_the_device_burst_a_data_location_is_not_diagnosed():
    host = burst(100, util(gpu=31, busy_cores=15.8, n_gpus=8), devices=8, data_location="host")
    assert throughput(host) == ()  # nothing to compare with, and its GPUs were not kept busy


def test_cpu_workers_input_pipeline_shares_the_cores():
    cpu = dict(device_kind="cpu", threads=2, devices=1)
    device = burst(300, util(busy_cores=2, cores=2), **cpu)
    python = burst(150, util(busy_cores=1.9, cores=2), data_location="python", **cpu)
    [f] = throughput(python, device)
    assert f.kind == INPUT_BOUND
    assert "1.9 of 2 host cores were saturated, shared by the input pipeline and compute" in f.text
    assert "2.0x the throughput" in f.text


def test_no_utilisation_means_inconclusive():
    device = burst(2900, None)
    host = burst(1000, None, data_location="host")
    assert kinds(throughput(host, device)) == [(host.spec.key(), INCONCLUSIVE)]


# --- scaling ----------------------------------------------------------------------------


def test_flat_busy_time_with_a_longer_step_is_communication_bound():
    one = burst(100, util(gpu=98, busy_cores=2), per_rank_ips=100)
    eight = burst(400, util(gpu=49, busy_cores=3, n_gpus=8), per_rank_ips=50, devices=8)
    [f] = scaled(eight, one, floor=0.9)
    assert f.kind == COMMUNICATION_BOUND and f.key == eight.spec.key()
    assert "scaling efficiency 50% (below floor 90%)" in f.text
    assert "per-device step 2.00x the 1-device step" in f.text and "stayed 1.00x" in f.text


def test_gpu_busy_falling_while_steps_grow_is_communication_bound():
    one = burst(100, util(gpu=98, busy_cores=2), per_rank_ips=100)
    four = burst(200, util(gpu=70, busy_cores=2, n_gpus=4), per_rank_ips=50, devices=4)
    [f] = scaled(four, one, floor=0.9)
    assert f.kind == COMMUNICATION_BOUND and "fell from 98% to 70%" in f.text


def test_more_gpus_same_throughput_with_a_saturated_host_is_input_bound():
    # seed 000: 6,700 to 7,700 examples/s whatever the GPU count, the host feeding all of them
    one = burst(7000, util(gpu=90, busy_cores=12), per_rank_ips=7000, data_location="host", model="cifar10")
    four = burst(
        7400,
        util(gpu=25, busy_cores=15.5, n_gpus=4),
        per_rank_ips=1850,
        devices=4,
        data_location="host",
        model="cifar10",
    )
    [f] = scaled(four, one, floor=0.9)
    assert f.kind == INPUT_BOUND and "GPUs 25% busy (mean) (1 GPU: 90%)" in f.text and "15.5 of 16" in f.text


def test_scaling_is_examined_where_its_verdict_says_it_is_below_the_baseline():
    one = burst(100, util(gpu=98, busy_cores=2), per_rank_ips=100)
    two = burst(150, util(gpu=60, busy_cores=2, n_gpus=2), per_rank_ips=75, devices=2)  # 75%
    [f] = scaled(two, one, baseline=0.95, tolerance=0.1)  # the whole interval below 85%: a regression
    assert "scaling efficiency 75% (below baseline 95%)" in f.text and f.kind != COMPUTE_BOUND
    assert scaled(two, one, baseline=0.95, tolerance=0.3) == ()  # within the gate's tolerance: nothing


def test_a_case_that_passes_is_never_called_below_its_baseline():
    """The gate widens the tolerance by the entry's own spread; the diagnosis reads its verdict."""
    one = burst(100, util(gpu=98, busy_cores=2), per_rank_ips=100)
    two = burst(150, util(gpu=60, busy_cores=2, n_gpus=2), per_rank_ips=75, devices=2)
    limits = Limits(tolerance=0.1, memory_tolerance=0.1, scaling_tolerance=0.1)
    entry = {"scaling_efficiency": 0.95, "scaling_efficiency_runs": [0.65, 0.95]}  # 30 points of spread
    found = judge_scaling("t::test", two.spec.key(), Measured(two, single=one), Context(limits, entry))
    assert found.scaling.verdict.status == "pass"
    assert not [d for d in found.diagnosis if "below" in d.text]


def test_busy_gpus_scaling_below_the_baseline_are_inconclusive():
    one = burst(100, util(gpu=98, busy_cores=2), per_rank_ips=100)
    two = burst(150, util(gpu=97, busy_cores=2, n_gpus=2), per_rank_ips=75, devices=2)
    [f] = scaled(two, one, baseline=0.95, tolerance=0.1)
    assert f.kind == INCONCLUSIVE and "collective kernels count as busy" in f.text


def test_good_scaling_and_busy_gpus_are_compute_bound():
    one = burst(100, util(gpu=98, busy_cores=2), per_rank_ips=100)
    eight = burst(790, util(gpu=97, busy_cores=3, n_gpus=8), per_rank_ips=99, devices=8)
    [f] = scaled(eight, one, floor=0.9)
    assert (f.key, f.kind, f.flagged) == (eight.spec.key(), COMPUTE_BOUND, False)
    assert "GPUs 97% busy (mean); 19.4 TFLOP/s, MFU 0.5%" in f.text


def test_cpu_workers_beyond_the_cores_are_compute_bound():
    cpu = dict(device_kind="cpu", threads=1)
    one = burst(100, util(busy_cores=1, cores=2), per_rank_ips=100, **cpu)
    four = burst(200, util(busy_cores=2, cores=2), per_rank_ips=50, devices=4, **cpu)
    [f] = scaled(four, one, floor=0.9)
    assert f.kind == COMPUTE_BOUND and f.flagged and "4 workers x 1 thread want 4 cores" in f.text


def test_cpu_workers_waiting_with_idle_cores_are_communication_bound():
    cpu = dict(device_kind="cpu", threads=1)
    one = burst(100, util(busy_cores=1, cores=8), per_rank_ips=100, **cpu)
    two = burst(120, util(busy_cores=1.2, cores=8), per_rank_ips=60, devices=2, **cpu)
    [f] = scaled(two, one, floor=0.9)
    assert f.kind == COMMUNICATION_BOUND and "1.2 of 8 host cores" in f.text


def test_no_floor_and_no_baseline_raise_no_scaling_finding():
    one = burst(100, util(gpu=50, busy_cores=2), per_rank_ips=100)
    two = burst(100, util(gpu=50, busy_cores=2, n_gpus=2), per_rank_ips=50, devices=2)
    assert scaled(two, one) == ()


def test_the_communication_overhead_joins_the_scaling_diagnosis_or_stands_alone():
    cpu = dict(device_kind="cpu", threads=1)
    one = burst(100, util(busy_cores=1, cores=8), per_rank_ips=100, **cpu)
    two = burst(120, util(busy_cores=1.2, cores=8), per_rank_ips=60, devices=2, **cpu)
    alone = burst(200, util(busy_cores=2, cores=8), devices=2, variable_update="independent", **cpu)
    overhead = "communication overhead 40.0% (1 - replicated 120 / independent 200 img/s)"
    [f] = scaled(two, one, floor=0.9, independent=alone)
    assert f.kind == COMMUNICATION_BOUND and "below floor 90%" in f.text and f.text.endswith(f"; {overhead}")
    [f] = scaled(two, one, independent=alone)  # no line to fall below: the overhead alone
    assert f.text == f"tf-resnet50-cpu2-device: communication-bound — {overhead}"


def test_failed_and_remote_bursts_are_not_diagnosed():
    spec = BurstSpec(framework="tf", model="resnet50")
    failed = Measurement(spec, error="boom")
    remote = Measurement(spec.replace(nodes=2), remote=RemoteNode(node_rank=1, wall_seconds=1.0))
    for m in (failed, remote):
        assert judge_throughput("t::test", m.spec.key(), Measured(m), Context(LIMITS)).diagnosis == ()


# --- never raises ------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10**6) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["cpu", "gpus", "util_percent", "mean", "busy_cores_mean", "cores", "percent_mean", "series", "x"]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=20,
)
partial_util = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional={"cpu": json_values, "gpus": json_values}),
    st.builds(
        util,
        gpu=st.none() | st.floats(allow_nan=True),
        busy_cores=st.none() | st.floats(allow_nan=True),
        cores=st.integers(-2, 64),
        cpu=st.floats(allow_nan=True),
        n_gpus=st.integers(0, 3),
    ),
)


@given(
    st.lists(partial_util, min_size=4, max_size=4),
    st.sampled_from(["cuda", "cpu"]),
    st.none() | st.floats(0, 2),
    st.none() | st.floats(0, 2),
)
def test_the_diagnosis_never_raises_on_partial_utilisation(utils, kind, floor, base):
    extra = {} if kind == "cuda" else {"device_kind": "cpu"}
    device = burst(1000, utils[0], per_rank_ips=1000, **extra)
    host = burst(500, utils[1], per_rank_ips=500, data_location="host", **extra)
    four = burst(900, utils[2], per_rank_ips=300, devices=4, **extra)
    alone = burst(1000, utils[3], devices=4, variable_update="independent", **extra)
    found = [*throughput(host, device), *throughput(device), *scaled(four, device, floor, base, 0.1, alone)]
    for f in found:
        assert f.kind in diagnosis.KINDS and "\n" not in f.text and f.text.startswith("tf-resnet50-")


# --- the terminal summary -----------------------------------------------------------------


class Writer:
    def __init__(self):
        self.lines = []

    def write_sep(self, sep, title):
        self.lines.append(f"== {title} ==")

    def write_line(self, line, **kw):
        self.lines.append(line)


def test_summary_prints_evidence_columns_and_the_cases_diagnosis_lines():
    device = burst(2900, util(gpu=97, busy_cores=3, n_gpus=8), devices=8)
    host = burst(1000, util(gpu=31, busy_cores=15.8, n_gpus=8), devices=8, data_location="host")
    shown = (
        judged(result(device.spec, device.record), diagnosis=throughput(device)),
        judged(result(host.spec, host.record), diagnosis=throughput(host, device)),
    )
    tr = Writer()
    terminal.terminal_summary(tr, RunView(run=RUN, results=shown))
    header = tr.lines[1]
    for word in ("img/s", "scaling eff", "CPU%", "GPU%", "TFLOP/s", "MFU", "verdict"):
        assert word in header
    host_row = next(line for line in tr.lines if line.startswith(host.spec.key()))
    assert "  99  " in host_row and "  31  " in host_row and " 24.5 " in host_row and "0.6%" in host_row
    assert host_row.rstrip().endswith("measured")
    diag = [line for line in tr.lines if line.startswith("diagnosis: ")]
    assert diag == [f"diagnosis: {throughput(host, device)[0].text}"]  # the healthy device burst: the report's
