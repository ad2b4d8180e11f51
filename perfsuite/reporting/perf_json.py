"""The --perf-json file: the run, then one row per burst, written atomically.

Schema version 2 adds ``schema_version`` and the ``run`` object to version 1's
``{"results": [...]}`` (and ``"interrupted": true`` on a stopped run); rows are unchanged.
Version 3 adds the run's ``node`` (--perf-node) and each row's ``fleet`` (--perf-fleet-check).
Version 4 judges the node as ``history fleet`` does: the ``fleet`` object's ``verdict`` is the
node's, pooled over its keys and nights, and its ``median`` and ``mad`` are this key's group's,
this node included (version 3's ``peer_median`` and ``peer_mad`` left it out).
Version 5 shows only what the cases found: ``scaling_efficiency`` and ``scaling_ci`` are the
scaling case's (null for a burst no scaling case judged), ``baseline_images_per_sec`` and
``baseline_scaling_efficiency`` the figures the verdicts compared with; new, ``diagnosis``; and
``error`` is also a confirming burst's that measured nothing.
Version 6 adds token models: a token model's row names its throughput ``tokens_per_sec`` (with
``sequences_per_sec`` beside it), its baseline figure ``baseline_tokens_per_sec``, each rank's
``tokens_per_sec``, and its ``seq_len`` in place of ``image_size``; its interval, samples,
run medians and baseline trend are in tokens/s. An image model's row is version 5's. Every row
has ``mfu_note``: why it has no MFU (no peak for its device, precision or clock), else null.
Version 7 adds ``activation_checkpointing`` (true where each block recomputed its forward in the
backward pass) and ``hfu`` beside ``mfu``: the FLOPs the devices executed, that recomputation
included, over the same peak (null without checkpointing or a peak); ``variable_update`` may be
``sharded`` (torch's FSDP2).
Version 8 names every figure neutrally beside its unit's name: each row has ``throughput`` and
``unit`` ("img/s" or "tokens/s") before ``images_per_sec`` or ``tokens_per_sec``, and
``baseline_throughput`` before ``baseline_images_per_sec`` or ``baseline_tokens_per_sec``; each
rank's entry has ``throughput`` and its unit-named figure too; and ``workload`` ("image" or
"token") names the model's kind; ``router_balance`` and ``expert_kernel`` a mixture of experts'
routing over the timed windows (null for a dense model). Version 7's fields are all still there.
"""

from __future__ import annotations

import json
from pathlib import Path

from perfsuite.analysis import mfu
from perfsuite.analysis.result import BurstResult
from perfsuite.analysis.utilisation import summary as utilisation_summary
from perfsuite.common.files import atomic_write, json_safe
from perfsuite.contract import phases
from perfsuite.store.run import RunInfo
from perfsuite.workloads import figure_of, named

SCHEMA_VERSION = 8


def document(run: RunInfo, rows: list[dict]) -> dict:
    out = {"schema_version": SCHEMA_VERSION, "run": run.as_dict()}
    if run.interrupted:
        out["interrupted"] = True  # the rows are the bursts that finished
    out["results"] = rows
    return out


def write_json(path: Path, run: RunInfo, rows: list[dict]) -> None:
    """Write the document atomically: a reader never sees half a file."""
    text = json.dumps(json_safe(document(run, rows)), indent=1, allow_nan=False, default=str)
    atomic_write(path, text.encode())


def row(result: BurstResult) -> dict:
    """One burst's row: its spec, its figures and what the run's cases found of it, each figure also
    under its unit's name (perfsuite.workloads.named)."""
    neutral = {
        **_spec(result),
        **_figures(result),
        **_memory(result),
        **_profile(result),
        **mfu.fields(result.record, result.spec, result.throughput),
        **_router(result),
        **_tensor_parallel(result),
        **_verdicts(result),
        **_numerics(result),
        **_history(result),
        "saved": result.saved,
        "error": result.error or result.rerun_error,
        "tests": result.tests,
    }
    return named(neutral, result.unit)


def _spec(result: BurstResult) -> dict:
    """What ran: the spec, and what the worker recorded of how it ran."""
    s, rec = result.spec, result.record
    return {
        "key": s.key(),
        "id": result.id,
        "label": s.label,
        "framework": s.framework,
        "framework_version": rec.framework_version if rec else None,
        "model": s.model,
        "workload": s.workload,
        # As registered, or counted by the worker where the registration left them out.
        "model_params": rec.model.params if rec else None,
        "model_flops": rec.model.flops if rec else None,
        "device_kind": s.device_kind,
        "device_name": rec.device_name if rec else None,
        "devices": s.devices,
        "nodes": s.nodes,
        "world_size": s.world_size,
        "threads_per_worker": s.threads if s.device_kind == "cpu" else None,
        "data_location": s.data_location,
        "batch_size": s.batch_size,
        **s.workload_kind.json_fields(s),
        "precision": s.precision,
        "precision_dtype": rec.precision_dtype if rec else None,
        "input_workers": rec.input_workers if rec else None,
        "fp32_math": rec.fp32_math if rec else None,
        "fp32_matmul": rec.fp32_matmul if rec else None,
        "compute_capability": rec.compute_capability if rec else None,
        "variable_update": s.variable_update,
        "augment_on": s.augment_on if s.data_location == "real" else None,
        "memory_format": s.layout,
        "mode": s.mode,
        "compile": s.compile,
        "activation_checkpointing": s.activation_checkpointing,
        "tp": s.tp,  # the TP degree; 1: no tensor parallelism
        "xla": s.xla,
        "compile_seconds": rec.compile_seconds if rec else None,  # the first step, apart from the windows
        "warmup_steps": s.warmup_steps,
        "steps": s.steps,
        "windows": s.windows,
        "max_windows": s.max_windows,
        "stable_within": s.stable_within,  # the interval width (of the median) the burst was lengthened for
    }


def _figures(result: BurstResult) -> dict:
    """What it measured, as its cases judged it, in its unit; the scaling figures only where a
    scaling case did."""
    rec = result.record
    lo, hi = result.interval or (None, None)
    return {
        "input_efficiency": result.input_efficiency,
        "communication_overhead": result.communication_overhead,
        "windows_run": [len(r) for r in result.run_samples],  # per pooled burst; above windows when lengthened
        "runs": result.runs,
        "run_medians": result.run_medians,
        "throughput": result.throughput,
        # torchtitan's figure: the throughput over every device of the burst (with TP, a TP group's
        # devices share each of its items).
        "per_device_throughput": None if result.throughput is None else result.throughput / result.spec.world_size,
        **result.measurement.extra_figures,
        "ci_low": lo,
        "ci_high": hi,
        "samples": result.samples,
        "window_seconds": list(rec.window_seconds) if rec else [],
        "per_rank": [
            {
                "rank": r.rank,
                "host": r.host,
                "device": r.device,
                **named({"throughput": r.throughput}, result.unit),
                "peak_memory_bytes": r.peak_memory_bytes,
                "tensor_peak_bytes": r.tensor_peak_bytes,
                "utilisation": r.utilisation,
            }
            for r in (rec.per_rank if rec else ())
        ],
        "scaling_efficiency": result.scaling_efficiency,
        "scaling_ci": list(result.scaling_interval) if result.scaling_interval else None,
        "loss_first": rec.loss_first if rec else None,
        "loss_last": rec.loss_last if rec else None,
        "wall_seconds": rec.wall_seconds if rec else (result.remote.wall_seconds if result.remote else None),
        # Where the latest burst's wall time went, and its timed windows' share of it.
        "phases": rec.phases if rec and rec.phases else None,
        "duty_cycle": phases.duty_cycle(rec.phases) if rec and rec.phases else None,
        "start": rec.start if rec else None,  # "warm" or "fresh" (perfsuite.plugin.warm)
        # Summary only: the time series stay in the record's utilisation.
        "utilisation": utilisation_summary(rec.utilisation) if rec else None,
    }


def _router(result: BurstResult) -> dict:
    """A mixture of experts' routing over the timed windows (the worker record's ``router``): how
    unevenly its tokens went to the experts, and how the experts' matmuls ran; null for a dense model."""
    router = (result.record.router if result.record else None) or {}
    return {"router_balance": router.get("balance"), "expert_kernel": router.get("kernel")}


def _tensor_parallel(result: BurstResult) -> dict:
    """With TP: the share of a step its collectives took, from torch.profiler over a few steps after
    the windows (the worker record's ``tp_collectives``: its figures, or why there are none); null
    without TP. Each rank's peak memory is in ``per_rank``."""
    found = (result.record.tp_collectives if result.record else None) or {}
    return {"tp_collective_share": found.get("share"), "tp_collectives": found or None}


def _memory(result: BurstResult) -> dict:
    """The fullest device's peak: the median over the pooled bursts, each burst's, and its verdict;
    beside it the latest burst's tensor peak (ungated: on a CPU worker the peak is the resident set),
    or why there is none."""
    memory, base, rec = result.memory_verdict, result.baseline or {}, result.record
    return {
        "tensor_peak_bytes": rec.tensor_peak_bytes if rec else None,
        "tensor_peak_note": rec.tensor_peak_note if rec else None,
        # glibc's settings where the environment set them (MALLOC_MMAP_THRESHOLD_, ...): the
        # resident set they leave is not the default's
        "allocator_env": (rec.allocator_env or None) if rec else None,
        "peak_memory_bytes": result.peak_memory_bytes,
        "peak_memory_runs": list(result.run_peaks),
        "baseline_peak_memory_bytes": memory.baseline_bytes if memory else base.get("peak_memory_bytes"),
        "memory_verdict": memory.status if memory else None,
        "memory_change": memory.change if memory else None,
        "memory_tolerance": memory.tolerance if memory else None,
    }


def _profile(result: BurstResult) -> dict:
    """The op profile taken after the windows (--perf-profile, --perf-save-baseline, a confirming
    rerun), what it cost, and what moved against the baseline entry's profile."""
    rec = result.record
    return {
        "op_profile": rec.op_profile if rec else None,
        "profile_seconds": rec.profile_seconds if rec else None,
        "profile_error": rec.profile_error if rec else None,
        "attribution": result.attribution.as_dict() if result.attribution else None,
        "attribution_lines": result.attribution.lines() if result.attribution else [],
        "attribution_note": result.attribution_note,
    }


def _verdicts(result: BurstResult) -> dict:
    """The cases' verdicts, the baseline figures they compared with, and their diagnoses."""
    verdict, base = result.verdict, result.baseline or {}
    return {
        "verdict": verdict.status if verdict else ("error" if result.error else None),
        "verdict_reason": verdict.reason if verdict else result.error,
        "change": verdict.change if verdict else None,
        "p_value": verdict.p_value if verdict else None,
        "scaling_verdict": result.scaling_verdict.status if result.scaling_verdict else None,
        "baseline_throughput": result.baseline_throughput,
        "baseline_scaling_efficiency": result.baseline_scaling_efficiency,
        # The entry's saved throughput, oldest first, ending with the one saved last.
        "baseline_trend": [figure_of(h) for h in base.get("history") or [] if isinstance(h, dict)] + [figure_of(base)]
        if base
        else [],
        "baseline_file": result.baseline_file,
        "baseline_source": result.baseline_source,  # committed or local (this machine's own); null: none
        "diagnosis": [{"kind": d.kind, "text": d.text, "flagged": d.flagged} for d in result.diagnosis],
    }


def _numerics(result: BurstResult) -> dict:
    """Its first losses against the baseline entry's golden ones (perfsuite.analysis.numerics): same,
    drifted or changed, or null with ``numerics_note`` saying why; the first step that differs
    (counting from 1), the largest relative difference, and what the losses depend on that changed."""
    found, stretch = result.numerics, (result.record.numerics if result.record else None) or {}
    losses = list(found.losses) if found is not None else list(stretch.get("losses") or [])
    return {
        "numerics": found.outcome if found is not None else None,
        "numerics_note": found.note if found is not None else _no_numerics(result),
        "numerics_first_step": found.first_step if found is not None else None,
        "numerics_max_rel_diff": found.max_rel_diff if found is not None else None,
        "numerics_changes": list(found.changes) if found is not None else [],
        "numerics_losses": losses,
    }


def _no_numerics(result: BurstResult) -> str | None:
    """Why a burst has no numerics finding: no throughput case judged it here."""
    if result.error or result.remote:
        return None
    return "no throughput case judged it" if result.throughput_case is None else None


def _history(result: BurstResult) -> dict:
    """With --perf-history: the runs the drift check read and the drift it found; with
    --perf-fleet-check, this node against the latest figures of its peers in the history."""
    drift, runs = result.drift, result.drift_runs
    return {
        "drift_runs": runs,
        "drift": None
        if drift is None or runs is None
        else {
            "change": drift.change,
            "before": drift.before,
            "now": drift.now,
            "message": result.drift_message,
            "change_points": [
                {"runs_ago": runs - 1 - p.index, "change": p.change, "p_value": p.p_value} for p in drift.points
            ],
        },
        "fleet": result.fleet.as_dict() if result.fleet else None,
    }
