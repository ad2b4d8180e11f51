"""A run's options, resolved from the option table (perfsuite.config.table) and checked once.

The command line wins over ``[tool.perfsuite]``, the table over the built-in default.
``resolve`` checks every value, and any mistake is one ``OptionError`` line that names the
option and what it accepts: the plugin raises it as ``pytest.UsageError``, the commands as
their ``error:``. ``fleet_rule`` makes the fleet rule's settings (perfsuite.analysis.node_verdict)
of resolved values, for the gate and the commands alike.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.config.table import BY_DEST, MIN_WINDOWS, OPTIONS, PLURALS, WHY_MIN_WINDOWS, Option
from perfsuite.contract.frameworks import TF_TP_NEEDS
from perfsuite.history.url import HistoryError, normalise
from perfsuite.models.registry import FRAMEWORKS

if TYPE_CHECKING:  # numpy: imported where the rule is made, not when pytest loads the plugin
    from perfsuite.analysis.node_verdict import FleetRule

__all__ = ["BY_DEST", "OPTIONS", "PLURALS", "Option", "OptionError", "PerfOptions", "default", "fleet_rule", "resolve"]

_LABEL = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$")


class OptionError(ValueError):
    """One line naming the offending option and what it accepts."""


@dataclass(frozen=True)
class PerfOptions:
    gpus: int | None
    cpu_workers: int
    threads_per_worker: int | None
    framework: tuple[str, ...]
    model: tuple[str, ...]
    data_location: tuple[str, ...]
    variable_update: tuple[str, ...]
    batch_size: tuple[int, ...]
    seq_len: tuple[int, ...]
    augment_on: tuple[str, ...]
    min_input_efficiency: float | None
    compile: bool
    memory_format: tuple[str, ...]
    mode: tuple[str, ...]
    activation_checkpointing: tuple[str, ...]  # "off", "on"
    tp: tuple[int, ...]  # tensor-parallel degrees; (1,): no TP
    data_dir: Path | None
    xla: bool
    precision: tuple[str, ...]
    steps: int | None
    windows: int | None
    max_windows: int | None
    warmup_steps: int | None
    burst_timeout: float
    hang_floor: float
    start: str
    baseline_dir: Path
    local_baseline_dir: Path | None  # None: perfsuite's cache (local_baselines)
    save_baseline: bool
    baseline_runs: int
    perf_tolerance: float
    scaling_tolerance: float
    memory_tolerance: float
    profile: bool
    profile_steps: int
    missing_baseline: str
    missing_gpus: str
    inconclusive: str
    min_scaling_efficiency: float | None
    keep_burst_dirs: bool
    perf_json: Path | None
    perf_report: Path | None
    perf_openmetrics: Path | None
    perf_history: str | None  # a full URL: a bare path has become sqlite:///ABSOLUTE
    perf_history_retry: float  # seconds the history's write waits out refusals for now
    perf_label: tuple[tuple[str, str], ...]
    drift_window: int
    drift: str
    numerics: str  # what a changed numerics does: off (no stretch), warn, fail
    numerics_steps: int
    numerics_tolerance: float
    node: str | None
    fleet_check: str
    fleet_window: float
    fleet_tolerance: float
    fleet_alpha: float
    fleet_nights: int
    fleet_min_nodes: int
    nnodes: int
    node_rank: int
    rdzv_timeout: float
    rdzv_endpoint: str | None
    worker_hosts: tuple[str, ...]
    sources: dict[str, str] = field(default_factory=dict, compare=False)  # dest -> where the value came from

    @property
    def local_baselines(self) -> Path:
        """Where this machine's local baselines live: outside the repository, as
        pytest-benchmark's autosave keeps a machine's own runs."""
        from perfsuite.common.files import cache_root

        return self.local_baseline_dir or cache_root() / "baselines"

    @property
    def fleet_rule(self) -> FleetRule:
        """The fleet rule's settings (the gate's peer check judges with them)."""
        return fleet_rule({dest: getattr(self, dest) for dest in FLEET_RULE})


# The options that set the fleet rule, whoever applies it: the gate, history fleet, triage, the site.
FLEET_RULE = ("fleet_tolerance", "fleet_alpha", "fleet_nights", "fleet_min_nodes")


def fleet_rule(values: Mapping[str, Any] | None = None) -> FleetRule:
    """The fleet rule of these values (a PerfOptions field -> its value; one missing is its default)."""
    from perfsuite.analysis.node_verdict import FleetRule

    found = {dest: (values or {}).get(dest, default(dest)) for dest in FLEET_RULE}
    return FleetRule(
        tolerance=float(found["fleet_tolerance"]),
        alpha=float(found["fleet_alpha"]),
        nights=int(found["fleet_nights"]),
        min_nodes=int(found["fleet_min_nodes"]),
    )


def default(dest: str) -> Any:
    """The built-in default of the option whose PerfOptions field is ``dest``."""
    o = BY_DEST[dest]
    return tuple(o.default or ()) if o.repeat else _default(o)


def checked(dest: str, raw: Any) -> Any:
    """``raw`` as the option ``dest`` takes it, checked as ``resolve`` checks it: for a command's
    argument that sets the same thing. OptionError says what is wrong, without naming the option."""
    o = BY_DEST[dest]
    try:
        return _convert(o, [raw] if o.repeat else raw, o.flag, Path.cwd())
    except OptionError as exc:
        raise OptionError(str(exc).removeprefix(f"{o.flag}: ")) from None


def resolve(cli: Callable[[str], Any], table: dict[str, Any], table_source: str, base_dir: Path) -> PerfOptions:
    """Merge command line, [tool.perfsuite] and defaults; validate; return PerfOptions.

    ``cli(dest)`` returns the raw command-line value (None when not given).
    Relative paths from the table are taken relative to the pyproject's directory.
    """
    table = dict(table)
    for singular, plural in PLURALS.items():
        if plural in table:
            if singular in table:
                raise OptionError(f"{table_source}: [tool.perfsuite] sets both {singular!r} and {plural!r}")
            table[singular] = table.pop(plural)
    unknown = sorted(set(table) - set(BY_DEST))
    if unknown:
        known = ", ".join(sorted(set(BY_DEST) | set(PLURALS.values())))
        raise OptionError(f"{table_source}: unknown key {unknown[0]!r} in [tool.perfsuite] (known: {known})")

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for o in OPTIONS:
        raw = cli(o.dest)
        where = o.flag
        base = Path.cwd()
        if raw is None and o.dest in table:
            raw = table[o.dest]
            where = f"{o.dest} in [tool.perfsuite] of {table_source}"
            base = base_dir
            if o.repeat and not isinstance(raw, (list, dict)):  # a dict: perf_labels as a table
                raw = [raw]
        if raw is None:
            values[o.dest] = default(o.dest)
            sources[o.dest] = "default"
            continue
        values[o.dest] = _convert(o, raw, where, base)
        sources[o.dest] = where
    _cross_checks(values, sources)
    return PerfOptions(**values, sources=sources)


def partial(
    cli: Callable[[str], Any],
    table: dict[str, Any],
    table_source: str,
    base_dir: Path,
    dests: tuple[str, ...],
    strict: bool = False,
) -> dict[str, Any]:
    """``resolve`` of the options ``dests`` alone, without the checks across options: a value
    that is refused is its default, or with ``strict`` an OptionError."""
    values: dict[str, Any] = {}
    for dest in dests:
        o = BY_DEST[dest]
        raw = cli(dest)
        where, base = o.flag, Path.cwd()
        if raw is None and dest in table:
            raw, where, base = table[dest], f"{dest} in [tool.perfsuite] of {table_source}", base_dir
            if o.repeat and not isinstance(raw, (list, dict)):
                raw = [raw]
        try:
            values[dest] = default(dest) if raw is None else _convert(o, raw, where, base)
        except OptionError:
            if strict:
                raise
            values[dest] = default(dest)
    return values


def _default(o: Option) -> Any:
    if o.kind == "path" and o.default is not None:
        return Path(o.default)
    return o.default


def _convert(o: Option, raw: Any, where: str, base: Path) -> Any:
    if o.kind == "label":
        # Commas may sit in a label's value: one KEY=VALUE per item; the table may give a table.
        items = [f"{k}={v}" for k, v in raw.items()] if isinstance(raw, dict) else raw
        labels = dict(_label(item, where) for item in items)
        return tuple(sorted(labels.items()))
    if isinstance(raw, dict):
        raise OptionError(f"{where}: expected a value or a list, got a table")
    if o.repeat:
        items = []
        for item in raw:
            # "--perf-model a,b" is accepted as well as "--perf-model a --perf-model b".
            parts = item.split(",") if isinstance(item, str) else [item]
            items.extend(p.strip() if isinstance(p, str) else p for p in parts)
        out = tuple(dict.fromkeys(_scalar(o, item, where, base) for item in items if item != ""))
        if not out:
            raise OptionError(f"{where}: needs at least one value")
        return out
    return _scalar(o, raw, where, base)


def _scalar(o: Option, raw: Any, where: str, base: Path) -> Any:
    if o.kind == "flag":
        if isinstance(raw, bool):
            return raw
        raise OptionError(f"{where}: expected true or false, got {raw!r}")
    if o.kind in ("int", "float"):
        return _number(o, raw, where)
    text = str(raw).strip()
    if o.kind == "choice":
        if text not in o.choices:
            raise OptionError(f"{where}: {text!r} is not one of {', '.join(o.choices)}")
        return text
    if o.kind == "path":
        if not text:
            raise OptionError(f"{where}: needs a path")
        path = Path(os.path.expanduser(text))
        return path if path.is_absolute() else base / path
    if o.kind == "endpoint":
        _endpoint(text, where)
        return text
    if o.kind == "history":
        try:
            return normalise(text, base)
        except HistoryError as exc:
            raise OptionError(f"{where}: {exc}") from None
    if o.kind == "hosts":
        hosts = tuple(h.strip() for h in text.split(",") if h.strip())
        if not hosts:
            raise OptionError(f"{where}: needs HOST:PORT[,HOST:PORT...]")
        for h in hosts:
            _endpoint(h, where)
        return hosts
    if not text:
        raise OptionError(f"{where}: needs a value")
    return text


def _number(o: Option, raw: Any, where: str) -> float | int:
    what = "an integer" if o.kind == "int" else "a number"
    try:
        if isinstance(raw, bool):
            raise ValueError
        value = int(str(raw).strip()) if o.kind == "int" else float(str(raw).strip())
    except ValueError:
        raise OptionError(f"{where}: expected {what}, got {raw!r}") from None
    if o.kind == "float" and value != value:  # NaN
        raise OptionError(f"{where}: expected {what}, got {raw!r}")
    hint = " (a fraction: 0.10 means 10%)" if o.metavar == "FRACTION" else ""
    if o.minimum is not None and value < o.minimum:
        raise OptionError(f"{where}: must be >= {o.minimum:g}, got {raw!r}{hint}")
    if o.maximum is not None and value > o.maximum:
        raise OptionError(f"{where}: must be <= {o.maximum:g}, got {raw!r}{hint}")
    return value


def _label(item: Any, where: str) -> tuple[str, str]:
    m = _LABEL.match(str(item).strip())
    if m is None:
        raise OptionError(f"{where}: expected KEY=VALUE (KEY: letters, digits, _ . -), got {item!r}")
    return m.group(1), m.group(2).strip()


_ENDPOINT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.\-]+):(\d{1,5})$")


def _endpoint(text: str, where: str) -> None:
    m = _ENDPOINT.match(text)
    if not m or not 0 < int(m.group(2)) < 65536:
        raise OptionError(f"{where}: expected HOST:PORT with a port in 1-65535, got {text!r}")


def _cross_checks(v: dict[str, Any], src: dict[str, str]) -> None:
    if v["node_rank"] >= v["nnodes"]:
        raise OptionError(f"{src['node_rank']}: node rank {v['node_rank']} must be below --perf-nnodes {v['nnodes']}")
    if v["worker_hosts"] and len(v["worker_hosts"]) != v["nnodes"]:
        raise OptionError(
            f"{src['worker_hosts']}: lists {len(v['worker_hosts'])} hosts but --perf-nnodes is {v['nnodes']}"
        )
    if v["windows"] is not None and v["windows"] < MIN_WINDOWS:
        raise OptionError(
            f"{src['windows']}: a verdict needs at least {MIN_WINDOWS} windows, got {v['windows']} ({WHY_MIN_WINDOWS})"
        )
    windows = v["windows"] or MIN_WINDOWS
    if v["steps"] is not None and v["steps"] < windows:
        raise OptionError(
            f"{src['steps']}: {windows} windows need at least {windows} steps, got {v['steps']} ({WHY_MIN_WINDOWS})"
        )
    report = v["perf_report"]
    if report is not None and report.exists() and not report.is_dir():  # found now, not after an hour of bursts
        raise OptionError(f"{src['perf_report']}: {report} exists and is not a directory")
    metrics = v["perf_openmetrics"]
    if metrics is not None and metrics.is_dir():
        raise OptionError(f"{src['perf_openmetrics']}: {metrics} is a directory, not a file")
    # Under Slurm's srun, TensorFlow finds the nodes itself (SlurmClusterResolver).
    slurm = bool(os.environ.get("SLURM_STEP_NODELIST"))
    frameworks = set(v["framework"] or FRAMEWORKS)
    checkpointing = "on" in v["activation_checkpointing"]
    for flag, owner, asked in (
        ("compile", "torch", v["compile"]),
        ("xla", "tf", v["xla"]),
        ("activation_checkpointing", "torch", checkpointing),
    ):
        if asked and owner not in frameworks:
            raise OptionError(
                f"{src[flag]}: applies to "
                f"--perf-framework {owner} only, and this run measures {', '.join(sorted(frameworks))}"
            )
    if any(t > 1 for t in v["tp"]) and "torch" not in frameworks:
        raise OptionError(
            f"{src['tp']}: tensor parallelism runs in torch only, and this run measures "
            f"{', '.join(sorted(frameworks))}: TensorFlow has no TP here ({TF_TP_NEEDS})"
        )
    if v["perf_label"] and v["perf_history"] is None:
        raise OptionError(f"{src['perf_label']}: labels are kept by the results history: add --perf-history URL")
    if v["fleet_check"] != "off" and v["perf_history"] is None:
        raise OptionError(
            f"{src['fleet_check']}: the fleet check reads the other nodes' figures from a shared "
            "results history: add --perf-history URL"
        )
    if v["nnodes"] > 1 and v["rdzv_endpoint"] is None and not v["worker_hosts"] and not slurm:
        raise OptionError("--perf-nnodes > 1 needs --perf-rdzv-endpoint (torch) or --perf-worker-hosts (tf)")
