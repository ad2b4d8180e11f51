"""Profiled steps for TensorFlow: its own profiler, read with its own converters.

Each recorded step is one ``tf.profiler.experimental`` session; the session before the
first is thrown away (the profiler's start-up lands there). TensorFlow's profiler plugin
turns the XSpace a session leaves into tool data: ``framework_op_stats`` (the op table
TensorBoard's profile tab shows) for the op times, ``trace_viewer@`` for the Chrome trace
JSON. Ops are grouped by op type (``Conv2DBackpropFilter``), as torch groups by aten op.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable

import tensorflow as tf

from perfsuite.contract.op_profile import OpProfile
from perfsuite.worker.profiling import StepTable, compact

# Rows of the op table that are not work: the device's idle time.
_IDLE = ("IDLE",)


def run_profiled_steps(
    step: Callable[[], object], sync: Callable[[], None], steps: int, trace_path: str | None, enabled: bool, gpu: bool
) -> Callable[[], OpProfile] | None:
    """Run ``steps + 1`` training steps (every worker of a multi-node run the same), each in a
    profiler session of its own when ``enabled``; the first session is the profiler's warm-up.

    Returns a callable that reads the sessions into an OpProfile, or None when this worker
    does not profile.
    """
    folder = tempfile.mkdtemp(prefix="perfsuite-tfprof-") if enabled else ""
    walls: list[float] = []
    errors: list[BaseException] = []
    options = tf.profiler.experimental.ProfilerOptions(
        host_tracer_level=2, python_tracer_level=0, device_tracer_level=1 if gpu else 0
    )
    for i in range(steps + 1):
        on = enabled and not errors
        if on:
            try:
                tf.profiler.experimental.start(os.path.join(folder, f"step{i}"), options=options)
            except Exception as exc:  # noqa: BLE001 - the steps still run, so every worker keeps step
                errors.append(exc)
                on = False
        t0 = time.perf_counter()
        step()
        sync()
        walls.append((time.perf_counter() - t0) * 1000)
        if on:
            try:
                tf.profiler.experimental.stop()
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
    if not enabled:
        return None

    def build() -> OpProfile:
        try:
            if errors:
                raise errors[0]
            tables = [step_table(_tool(_xspaces(folder, i), "framework_op_stats")) for i in range(1, steps + 1)]
            if gpu:
                check_device_rows(tables)
            if trace_path:
                with gzip.open(trace_path, "wb") as f:
                    f.write(_tool(_xspaces(folder, steps), "trace_viewer@"))
            return compact("tensorflow.profiler", tables, walls[1:])
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    return build


def _xspaces(folder: str, step: int) -> list[str]:
    found = sorted(glob.glob(os.path.join(folder, f"step{step}", "**", "*.xplane.pb"), recursive=True))
    if not found:
        raise RuntimeError(f"the profiler left no XSpace for step {step}")
    return found


def _tool(paths: list[str], tool: str) -> bytes:
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin

    data, ok = _pywrap_profiler_plugin.xspace_to_tools_data(paths, tool, {})
    if not ok or not data:
        raise RuntimeError(f"TensorFlow's profiler could not convert its XSpace to {tool}")
    return data


def step_table(op_stats: bytes) -> StepTable:
    """framework_op_stats (a Google Charts table, as TensorBoard reads it) as {(type, kind): (self ms, calls)}."""
    tables = json.loads(op_stats)
    table = tables[0] if isinstance(tables, list) else tables
    cols = [c["id"] for c in table["cols"]]
    at = {name: cols.index(name) for name in ("host_or_device", "type", "occurrences", "total_self_time")}
    out: StepTable = {}
    for row in table.get("rows", []):
        cells = [c.get("v") if isinstance(c, dict) else c for c in row["c"]]
        op_type = str(cells[at["type"]])
        if op_type in _IDLE:
            continue
        on_device = str(cells[at["host_or_device"]]).lower() == "device"
        kind = kind_of(op_type, on_device)
        ms, calls = out.get((op_type, kind), (0.0, 0.0))
        out[(op_type, kind)] = (
            ms + float(cells[at["total_self_time"]] or 0) / 1000,
            calls + float(cells[at["occurrences"]] or 0),
        )
    return out


def check_device_rows(tables: list[StepTable]) -> None:
    """A GPU burst's profile with no kernel in it is the host's half alone: TensorFlow only logs
    it when its device tracer (CUPTI) cannot run. Said as the profile's error, not attributed."""
    if not any(kind == "kernel" for table in tables for _, kind in table):
        raise RuntimeError("the profiler recorded no GPU kernel: its device tracer (CUPTI, libcupti) did not run")


def kind_of(op_type: str, on_device: bool) -> str:
    low = op_type.lower()
    if "nccl" in low or low.startswith("collective") or "allreduce" in low:
        return "collective"
    if low.startswith(("memcpy", "memset")):
        return "memcpy"
    return "kernel" if on_device else "op"
