"""Utilisation sampling: a real run on this machine, a stand-in NVML, the CUDA-to-NVML mapping."""

import json
import time
import types

import numpy as np
import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.analysis import utilisation
from perfsuite.analysis.utilisation import merge_ranks, rank_share, summary
from perfsuite.worker import measure, sampler
from perfsuite.worker.sampler import Sampler, nvml_indices


def busy(seconds):
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1


class FakeNVML(types.SimpleNamespace):
    """Just the pynvml calls the sampler makes, with pynvml's own error classes."""

    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_NoPermission = pynvml.NVMLError_NoPermission

    def __init__(
        self, uuids=("GPU-aaaa", "GPU-bbbb"), names=None, init_error=None, fail_util_after=None, no_power=False
    ):
        super().__init__()
        self.uuids, self.init_error = list(uuids), init_error
        self.names = list(names or ["NVIDIA H100 80GB HBM3"] * len(self.uuids))
        self.fail_util_after, self.no_power = fail_util_after, no_power
        self.util_calls, self.shutdowns = 0, 0

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.uuids)

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("handle", i)

    def nvmlDeviceGetUUID(self, h):
        return self.uuids[h[1]].encode()  # older pynvml returns bytes

    def nvmlDeviceGetName(self, h):
        return self.names[h[1]]

    def nvmlDeviceGetUtilizationRates(self, h):
        self.util_calls += 1
        if self.fail_util_after is not None and self.util_calls > self.fail_util_after:
            raise RuntimeError("GPU fell off the bus")
        return types.SimpleNamespace(gpu=40 + 10 * h[1], memory=5)

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(used=(h[1] + 1) * 2**30, total=80 * 2**30, free=0)

    def nvmlDeviceGetPowerUsage(self, h):
        if self.no_power:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 250_000 + 1000 * h[1]  # milliwatts

    def nvmlDeviceGetClockInfo(self, h, kind):
        assert kind == pynvml.NVML_CLOCK_SM
        return 1980


def run_for(sampler, seconds=0.5):
    sampler.start()
    busy(seconds)
    return sampler.stop()


def test_a_real_run_samples_cpu_and_memory():
    u = run_for(Sampler(), 0.5)
    assert u["interval_s"] == 0.1 and u["samples"] >= 2
    cpu = u["cpu"]
    assert set(cpu) == {"percent_mean", "percent_p95", "per_core_mean", "busy_cores_mean", "cores"}
    assert cpu["cores"] >= 1 and len(cpu["per_core_mean"]) == cpu["cores"]
    assert 0 <= cpu["percent_mean"] <= 100 and cpu["busy_cores_mean"] >= 0
    assert u["rss_bytes"]["max"] >= u["rss_bytes"]["mean"] > 1e6
    assert u["gpus"] == [] and "gpu_error" not in u and "error" not in u
    series = u["series"]
    n = u["samples"]
    assert [len(series[k]) for k in ("t", "cpu_percent", "per_core", "rss_bytes")] == [n] * 4
    assert series["t"] == sorted(series["t"]) and series["t"][-1] <= 1.0
    json.dumps(u, allow_nan=False)


def test_gpus_without_a_driver_leave_a_one_line_gpu_error():
    u = run_for(Sampler([0]), 0.25)  # the real pynvml: no driver on a CPU machine, one where there is
    if u["gpus"]:
        assert u["gpus"][0]["index"] == 0
        return
    assert u["gpu_error"] and "\n" not in u["gpu_error"]
    assert u["samples"] >= 1 and "error" not in u  # CPU sampling went on


def test_nvml_init_failure_is_recorded_not_raised():
    nvml = FakeNVML(init_error=pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    u = run_for(Sampler([0], nvml=nvml, visible=""), 0.15)
    assert u["gpus"] == [] and "Driver Not Loaded" in u["gpu_error"]


def test_gpu_metrics_through_nvml():
    nvml = FakeNVML()
    u = run_for(Sampler([0, 1], nvml=nvml, visible="1,0"), 0.35)
    assert [g["index"] for g in u["gpus"]] == [0, 1]
    assert [g["nvml_index"] for g in u["gpus"]] == [1, 0]  # CUDA_VISIBLE_DEVICES reorders
    g0 = u["gpus"][0]
    assert g0["name"] == "NVIDIA H100 80GB HBM3"
    assert g0["util_percent"] == {"mean": 50.0, "p95": 50.0}
    assert g0["memory_used_bytes"] == {"mean": 2.0 * 2**30, "p95": 2.0 * 2**30, "max": 2.0 * 2**30}
    assert g0["power_watts"]["mean"] == pytest.approx(251.0)  # mW -> W
    assert g0["sm_clock_mhz"]["p95"] == 1980
    s = u["series"]["gpus"][1]
    assert s["index"] == 1 and s["util_percent"] == [40.0] * u["samples"] and len(s["t"]) == u["samples"]
    assert nvml.shutdowns == 1


def test_a_metric_the_device_lacks_stays_none():
    u = run_for(Sampler([0], nvml=FakeNVML(no_power=True), visible=None), 0.25)
    g = u["gpus"][0]
    assert g["power_watts"] == {"mean": None, "p95": None} and g["util_percent"]["mean"] == 40.0
    assert "error" not in u
    json.dumps(u, allow_nan=False)


def test_an_unknown_cuda_device_is_named_in_gpu_error():
    u = run_for(Sampler([0, 1], nvml=FakeNVML(), visible="GPU-bbbb"), 0.15)
    assert [g["nvml_index"] for g in u["gpus"]] == [1]
    assert "CUDA device 1" in u["gpu_error"]


def test_an_exception_in_the_thread_is_recorded_and_sampling_stops():
    nvml = FakeNVML(fail_util_after=2)
    sampler = Sampler([0], nvml=nvml, visible=None).start()
    deadline = time.monotonic() + 10
    while nvml.util_calls < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    u = sampler.stop()
    assert u["error"] == "RuntimeError: GPU fell off the bus"
    assert u["samples"] == 2 and nvml.util_calls == 3  # stopped at the first failure


def test_an_exception_in_setup_is_recorded(monkeypatch):
    def boom(*a, **k):
        raise OSError("no /proc")

    monkeypatch.setattr(sampler.psutil, "cpu_percent", boom)
    u = run_for(Sampler(), 0.15)
    assert u["error"] == "OSError: no /proc" and u["samples"] == 0
    json.dumps(u, allow_nan=False)


def test_run_windows_samples_the_timed_windows_only(monkeypatch):
    events = []

    class Recorder(Sampler):
        def start(self):
            events.append("sampler started")
            return super().start()

        def stop(self):
            events.append("sampler stopped")
            return super().stop()

    def step():
        events.append("step")
        time.sleep(0.01)

    monkeypatch.setattr(measure, "Sampler", Recorder)
    t = measure.run_windows(
        step, lambda: events.append("sync"), lambda _: 0.0, warmup_steps=2, windows=2, steps_per_window=3
    )
    # Warm-up (two steps and their sync) before the sampler; every timed step inside it.
    assert events == ["step", "step", "sync", "sampler started", *(["step"] * 3 + ["sync"]) * 2, "sampler stopped"]
    assert t.utilisation["samples"] >= 1 and t.utilisation["gpus"] == []


# --- CUDA ordinals to NVML indices -------------------------------------------------------

UUIDS = ["GPU-8a3f0000-1111", "GPU-8a3f9999-2222", "GPU-c0ffee00-3333", "GPU-d00d0000-4444"]


@pytest.mark.parametrize(
    "visible, cuda, expected",
    [
        (None, [0, 1, 2, 3], [0, 1, 2, 3]),
        ("2", [0], [2]),
        ("3,1", [0, 1], [3, 1]),
        (" 3 , 1 ", [1], [1]),
        ("GPU-c0ffee00-3333,0", [0, 1], [2, 0]),
        ("GPU-c0f,GPU-d00d", [0, 1], [2, 3]),  # unique prefixes
        ("c0ffee00", [0], [2]),  # the GPU- prefix may be left out
        ("GPU-8a3f,1", [0, 1], [None, None]),  # ambiguous prefix: ends the list at once
        ("2,9,1", [0, 1, 2], [2, None, None]),  # an unknown index ends the list
        ("1,1,2", [0, 1], [1, None]),  # so does a repeated one
        ("", [0], [None]),
        ("-1", [0], [None]),
        ("MIG-1234abcd", [0], [None]),
        ("0,1", [5], [None]),
    ],
)
def test_nvml_indices(visible, cuda, expected):
    assert nvml_indices(cuda, visible, UUIDS) == expected


@given(st.permutations(range(4)), st.integers(1, 4))
def test_an_index_list_is_a_permutation(order, k):
    visible = ",".join(str(i) for i in order[:k])
    assert nvml_indices(range(k), visible, UUIDS) == list(order[:k])
    by_uuid = ",".join(UUIDS[i] for i in order[:k])
    assert nvml_indices(range(k), by_uuid, UUIDS) == list(order[:k])


# --- statistics and records ---------------------------------------------------------------


@given(st.lists(st.floats(0, 1e12, allow_nan=False), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_matches_numpy(xs, q):
    assert utilisation.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)), rel=1e-9, abs=1e-6)


def test_statistics_skip_missing_values():
    assert utilisation.mean([None, 1.0, 3.0, float("nan")]) == 2.0
    assert utilisation.percentile([None], 95) is None and utilisation.mean([]) is None


def full(gpus_index, util):
    return {
        "interval_s": 0.1,
        "samples": 2,
        "cpu": {"percent_mean": 50.0},
        "rss_bytes": {"mean": 1.0},
        "gpus": [{"index": gpus_index, "util_percent": {"mean": util}}],
        "series": {
            "t": [0.1, 0.2],
            "cpu_percent": [50.0, 50.0],
            "per_core": [[50.0], [50.0]],
            "rss_bytes": [1, 1],
            "gpus": [{"index": gpus_index, "t": [0.1, 0.2], "util_percent": [util, util]}],
        },
    }


def test_merge_ranks_keeps_the_leaders_host_view_and_every_gpu():
    leader = full(0, 90.0)
    ranks = [
        {"rank": 1, "host": "b", "utilisation": rank_share(full(1, 70.0))},
        {"rank": 0, "host": "a", "utilisation": rank_share(leader)},
    ]
    merged = merge_ranks(leader, sorted(ranks, key=lambda r: r["rank"]))
    gpus = [(g["rank"], g["host"], g["util_percent"]["mean"]) for g in merged["gpus"]]
    assert gpus == [(0, "a", 90.0), (1, "b", 70.0)]
    assert [g["rank"] for g in merged["series"]["gpus"]] == [0, 1]
    assert merged["series"]["per_core"] == [[50.0], [50.0]]  # the leader's, kept
    assert "per_core" not in rank_share(leader)["series"]
    assert "series" not in summary(merged) and summary(merged)["gpus"] == merged["gpus"]
    assert summary(None) is None and merge_ranks(None, ranks) is None


def test_merge_ranks_says_a_shared_gpu_error_once():
    u = {**full(0, 1.0), "gpus": [], "gpu_error": "NVMLError_LibraryNotFound: x"}
    ranks = [{"rank": r, "utilisation": u} for r in range(4)]
    assert merge_ranks(u, ranks)["gpu_error"] == "rank 0,1,2,3: NVMLError_LibraryNotFound: x"
