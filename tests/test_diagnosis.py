"""Bottleneck diagnosis from synthetic bursts, and the summary lines that show it."""

from hypothesis import given
from hypothesis import strategies as st
from records import judged, result, worker_record

from perfsuite.analysis import diagnosis, stats
from perfsuite.analysis.diagnosis import COMMUNICATION_BOUND, COMPUTE_BOUND, INCONCLUSIVE, INPUT_BOUND, diagnose
from perfsuite.analysis.result import BurstResult, Measurement
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


def burst(ips, utilisation=None, per_rank_ips=None, scaling=None, baseline=None, **spec):
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
    return judged(result(s, record), baseline=baseline, scaling=scaling)


def kinds(findings):
    return [(f.key, f.kind) for f in findings]


# --- data location ----------------------------------------------------------------------


def test_host_data_that_starves_the_gpus_is_input_bound():
    device = burst(2900, util(gpu=97, busy_cores=3, n_gpus=8), devices=8)
    host = burst(1000, util(gpu=31, busy_cores=15.8, n_gpus=8), devices=8, data_location="host")
    [f] = [f for f in diagnose([device, host]) if f.key == host.spec.key()]
    assert f.kind == INPUT_BOUND
    assert f.text == (
        "tf-resnet50-gpu8-host: input-bound — GPUs 31% busy (mean) while 15.8 of 16 host cores "
        "were saturated; `device` data reaches 2.9x the throughput"
    )


def test_idle_gpus_with_an_idle_host_are_inconclusive():
    device = burst(2900, util(gpu=97, busy_cores=3), devices=1)
    real = burst(1000, util(gpu=30, busy_cores=2), data_location="real")
    [f] = [f for f in diagnose([device, real]) if f.key == real.spec.key()]
    assert f.kind == INCONCLUSIVE and "2.0 of 16 host cores" in f.text and "GPU 30% busy" in f.text


def test_busy_gpus_with_slower_data_are_inconclusive_not_input_bound():
    device = burst(2900, util(gpu=97, busy_cores=3))
    real = burst(2000, util(gpu=96, busy_cores=15), data_location="real", augment_on="device")
    [f] = [f for f in diagnose([device, real]) if f.key == real.spec.key()]
    assert f.kind == INCONCLUSIVE and "device work" in f.text


def test_a_data_location_within_noise_is_not_flagged():
    device = burst(1000, util(gpu=97, busy_cores=3))
    host = burst(950, util(gpu=95, busy_cores=3), data_location="host")
    assert diagnose([device, host]) == []  # nothing to explain in the summary
    assert kinds(diagnose([device, host], healthy=True)) == [
        (device.spec.key(), COMPUTE_BOUND),
        (host.spec.key(), COMPUTE_BOUND),
    ]


def test_cpu_workers_input_pipeline_shares_the_cores():
    cpu = dict(device_kind="cpu", threads=2, devices=1)
    device = burst(300, util(busy_cores=2, cores=2), **cpu)
    python = burst(150, util(busy_cores=1.9, cores=2), data_location="python", **cpu)
    [f] = [f for f in diagnose([device, python]) if f.key == python.spec.key()]
    assert f.kind == INPUT_BOUND
    assert "1.9 of 2 host cores were saturated, shared by the input pipeline and compute" in f.text
    assert "2.0x the throughput" in f.text


def test_no_utilisation_means_inconclusive():
    device = burst(2900, None)
    host = burst(1000, None, data_location="host")
    assert kinds(diagnose([device, host])) == [(host.spec.key(), INCONCLUSIVE)]


# --- scaling ----------------------------------------------------------------------------


def test_flat_busy_time_with_a_longer_step_is_communication_bound():
    one = burst(100, util(gpu=98, busy_cores=2), per_rank_ips=100)
    eight = burst(400, util(gpu=49, busy_cores=3, n_gpus=8), per_rank_ips=50, scaling=0.5, devices=8)
    [f] = [f for f in diagnose([one, eight], min_scaling_efficiency=0.9) if f.key == eight.spec.key()]
    assert f.kind == COMMUNICATION_BOUND
    assert "scaling efficiency 50% (below floor 90%)" in f.text
    assert "per-device step 2.00x the 1-device step" in f.text and "stayed 1.00x" in f.text


def test_gpu_busy_falling_while_steps_grow_is_communication_bound():
    one = burst(100, util(gpu=98, busy_cores=2), per_rank_ips=100)
    four = burst(200, util(gpu=70, busy_cores=2, n_gpus=4), per_rank_ips=50, scaling=0.5, devices=4)
    [f] = [f for f in diagnose([one, four], min_scaling_efficiency=0.9) if f.key == four.spec.key()]
    assert f.kind == COMMUNICATION_BOUND and "fell from 98% to 70%" in f.text


def test_more_gpus_same_throughput_with_a_saturated_host_is_input_bound():
    # seed 000: 6,700 to 7,700 examples/s whatever the GPU count, the host feeding all of them
    one = burst(7000, util(gpu=90, busy_cores=12), per_rank_ips=7000, data_location="host", model="cifar10")
    four = burst(
        7400,
        util(gpu=25, busy_cores=15.5, n_gpus=4),
        per_rank_ips=1850,
        scaling=0.26,
        devices=4,
        data_location="host",
        model="cifar10",
    )
    found = diagnose([one, four], min_scaling_efficiency=0.9)
    [f] = [f for f in found if f.key == four.spec.key()]
    assert f.kind == INPUT_BOUND and "GPUs 25% busy (mean) (1 GPU: 90%)" in f.text and "15.5 of 16" in f.text


def test_scaling_below_the_baseline_beyond_tolerance_is_examined():
    one = burst(100, util(gpu=98, busy_cores=2), per_rank_ips=100)
    two = burst(
        150,
        util(gpu=60, busy_cores=2, n_gpus=2),
        per_rank_ips=75,
        scaling=0.75,
        devices=2,
        baseline={"scaling_efficiency": 0.95},
    )
    [f] = [f for f in diagnose([one, two], scaling_tolerance=0.1) if f.key == two.spec.key()]
    assert "below baseline 95%" in f.text
    assert not [
        f for f in diagnose([one, two], scaling_tolerance=0.3) if f.key == two.spec.key() and f.kind != COMPUTE_BOUND
    ]


def test_a_scaling_regression_verdict_is_examined_without_thresholds():
    one = burst(100, util(gpu=98, busy_cores=2), per_rank_ips=100)
    two = burst(150, util(gpu=97, busy_cores=2, n_gpus=2), per_rank_ips=75, scaling=0.75, devices=2)
    two = judged(
        two,
        scaling=0.75,
        scaling_verdict=stats.Verdict(stats.REGRESSION, ratio=0.79, p_value=0.001, tolerance=0.1, reason="x"),
    )
    [f] = [f for f in diagnose([one, two]) if f.key == two.spec.key()]
    assert f.kind == INCONCLUSIVE and "collective kernels count as busy" in f.text


def test_good_scaling_and_busy_gpus_are_compute_bound():
    one = burst(100, util(gpu=98, busy_cores=2), per_rank_ips=100)
    eight = burst(790, util(gpu=97, busy_cores=3, n_gpus=8), per_rank_ips=99, scaling=0.99, devices=8)
    found = diagnose([one, eight], min_scaling_efficiency=0.9, healthy=True)
    assert kinds(found) == [(one.spec.key(), COMPUTE_BOUND), (eight.spec.key(), COMPUTE_BOUND)]
    assert "GPUs 97% busy (mean); 19.4 TFLOP/s, MFU 0.5%" in found[1].text


def test_cpu_workers_beyond_the_cores_are_compute_bound():
    cpu = dict(device_kind="cpu", threads=1)
    one = burst(100, util(busy_cores=1, cores=2), per_rank_ips=100, **cpu)
    four = burst(200, util(busy_cores=2, cores=2), per_rank_ips=50, scaling=0.5, devices=4, **cpu)
    [f] = [f for f in diagnose([one, four], min_scaling_efficiency=0.9) if f.key == four.spec.key()]
    assert f.kind == COMPUTE_BOUND and "4 workers x 1 thread want 4 cores" in f.text


def test_cpu_workers_waiting_with_idle_cores_are_communication_bound():
    cpu = dict(device_kind="cpu", threads=1)
    one = burst(100, util(busy_cores=1, cores=8), per_rank_ips=100, **cpu)
    two = burst(120, util(busy_cores=1.2, cores=8), per_rank_ips=60, scaling=0.6, devices=2, **cpu)
    [f] = [f for f in diagnose([one, two], min_scaling_efficiency=0.9) if f.key == two.spec.key()]
    assert f.kind == COMMUNICATION_BOUND and "1.2 of 8 host cores" in f.text


def test_no_floor_and_no_baseline_raise_no_scaling_finding():
    one = burst(100, util(gpu=50, busy_cores=2), per_rank_ips=100)
    two = burst(100, util(gpu=50, busy_cores=2, n_gpus=2), per_rank_ips=50, scaling=0.5, devices=2)
    assert diagnose([one, two]) == []


def test_failed_and_remote_bursts_are_skipped():
    failed = result(BurstSpec(framework="tf", model="resnet50"), error="boom")
    remote = BurstResult(
        Measurement(
            BurstSpec(framework="tf", model="resnet50", nodes=2), remote=RemoteNode(node_rank=1, wall_seconds=1.0)
        )
    )
    assert diagnose([failed, remote]) == []


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
    st.none() | st.floats(allow_nan=True),
    st.sampled_from(["cuda", "cpu"]),
    st.none() | st.floats(0, 2),
)
def test_diagnose_never_raises_on_partial_utilisation(utils, scaling, kind, floor):
    extra = {} if kind == "cuda" else {"device_kind": "cpu"}
    bursts = [
        burst(1000, utils[0], per_rank_ips=1000, **extra),
        burst(500, utils[1], per_rank_ips=500, data_location="host", **extra),
        burst(900, utils[2], per_rank_ips=300, scaling=scaling, devices=4, **extra),
        burst(
            400,
            utils[3],
            scaling=scaling,
            devices=4,
            data_location="host",
            baseline={"scaling_efficiency": "x"},
            **extra,
        ),
    ]
    for f in diagnose(bursts, min_scaling_efficiency=floor, scaling_tolerance=0.1):
        assert f.kind in diagnosis.KINDS and "\n" not in f.text and f.text.startswith("tf-resnet50-")


# --- the terminal summary -----------------------------------------------------------------


class Writer:
    def __init__(self):
        self.lines = []

    def write_sep(self, sep, title):
        self.lines.append(f"== {title} ==")

    def write_line(self, line, **kw):
        self.lines.append(line)


def test_summary_prints_evidence_columns_and_diagnosis_lines():
    device = burst(2900, util(gpu=97, busy_cores=3, n_gpus=8), devices=8)
    host = burst(1000, util(gpu=31, busy_cores=15.8, n_gpus=8), devices=8, data_location="host")
    view = RunView(run=RUN, results=(device, host), scaling_tolerance=0.1)
    tr = Writer()
    terminal.terminal_summary(tr, view)
    header = tr.lines[1]
    for word in ("img/s", "scaling eff", "CPU%", "GPU%", "TFLOP/s", "MFU", "verdict"):
        assert word in header
    host_row = next(line for line in tr.lines if line.startswith(host.spec.key()))
    assert "  99  " in host_row and "  31  " in host_row and " 24.5 " in host_row and "0.6%" in host_row
    assert host_row.rstrip().endswith("measured")
    diag = [line for line in tr.lines if line.startswith("diagnosis: ")]
    assert any("tf-resnet50-gpu8-host: input-bound" in line for line in diag)


def test_a_broken_diagnosis_never_costs_the_summary(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("bad")

    monkeypatch.setattr(terminal, "diagnose", boom)
    assert terminal.diagnosis_lines(RunView(run=RUN, results=())) == ["diagnosis unavailable: RuntimeError: bad"]
