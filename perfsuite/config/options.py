"""The option table: every setting of a perfsuite run, declared once, with its default and its checks.

Every option is spelled ``--perf-NAME`` on the command line (``--perf-gpus``,
``--perf-save-baseline``) and is also the key NAME of the ``[tool.perfsuite]`` table in
pyproject.toml (dashes become underscores; repeatable options take a list). The command
line wins over the table, the table over the built-in default. ``resolve`` checks every
value, and any mistake is one ``OptionError`` line that names the option and what it
accepts: the plugin raises it as ``pytest.UsageError``, the commands as their ``error:``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfsuite.analysis import fleet
from perfsuite.analysis.changes import DRIFT_WINDOW
from perfsuite.analysis.stats import ALPHA, MIN_SAMPLES, TOLERANCE
from perfsuite.contract.spec import DATA_LOCATIONS, MEMORY_FORMATS, MODES, PRECISIONS, VARIABLE_UPDATES
from perfsuite.history.url import HistoryError, normalise
from perfsuite.models.registry import FRAMEWORKS

PREFIX = "--perf-"
MISSING_POLICIES = ("skip", "fail", "pass")
MISSING_GPU_POLICIES = ("fail", "skip")
MIN_WINDOWS = MIN_SAMPLES
WHY_MIN_WINDOWS = f"with fewer, the one-sided rank test cannot reach p < {ALPHA:g}, so no drop could ever fail the gate"
INCONCLUSIVE_POLICIES = ("pass", "fail")
# How a burst's processes start on one node (perfsuite.plugin.warm).
START_MODES = ("warm", "fresh")
DRIFT_POLICIES = ("warn", "fail")
FLEET_POLICIES = ("off", "warn", "fail")
_LABEL = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$")


class OptionError(ValueError):
    """One line naming the offending option and what it accepts."""


@dataclass(frozen=True)
class Option:
    name: str  # the [tool.perfsuite] key, dashed: "gpus", "perf-tolerance"
    help: str  # what it does; a default that is a value is added by ``text``
    kind: str = "str"  # str | int | float | flag | choice | path | endpoint | hosts | history | label
    repeat: bool = False
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    default: Any = None
    metavar: str | None = None
    note: str = ""  # follows the default in ``text``: "(default: pass, with a warning)"

    @property
    def flag(self) -> str:
        """The plugin's spelling: every option under --perf-, so none can clash with another project's."""
        return f"--{self.name}" if self.name.startswith("perf-") else f"{PREFIX}{self.name}"

    @property
    def short(self) -> str | None:
        """The unprefixed spelling a suite's conftest may offer (add_short_spellings), if any."""
        return None if self.name.startswith("perf-") else f"--{self.name}"

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def shown_default(self) -> str | None:
        """The default as the help and the docs write it; None where there is no value to show."""
        value = self.default
        if value is None or self.kind == "flag":
            return None
        if self.repeat:
            return ", ".join(str(v) for v in value)
        if self.metavar == "FRACTION":
            return f"{value:.2f}"
        if isinstance(value, float):
            return f"{value:g}"
        return f"{value}/" if self.kind == "path" else str(value)

    @property
    def text(self) -> str:
        """The help with its default: what ``pytest --help`` and the option reference show."""
        shown = self.shown_default
        return self.help if shown is None else f"{self.help} (default: {shown}{self.note})"


OPTIONS: tuple[Option, ...] = (
    Option(
        "gpus",
        "GPU device counts: sweep 1, 2, 4, ... up to N and N itself (default: all visible)",
        "int",
        minimum=1,
        metavar="N",
    ),
    Option(
        "cpu-workers",
        "CPU worker counts standing in for devices: the same sweep",
        "int",
        minimum=1,
        default=2,
        metavar="N",
    ),
    Option(
        "threads-per-worker",
        "intra-op threads per CPU worker (default: cores // largest worker count)",
        "int",
        minimum=1,
        metavar="N",
    ),
    Option(
        "framework",
        "framework to measure; repeatable (default: torch and tf)",
        "choice",
        repeat=True,
        choices=FRAMEWORKS,
        metavar="{torch,tf}",
    ),
    Option("model", "model to measure; repeatable (default: all registered)", "str", repeat=True, metavar="NAME"),
    Option(
        "data-location",
        "where input batches come from; repeatable",
        "choice",
        repeat=True,
        choices=DATA_LOCATIONS,
        default=("device",),
        metavar="{" + ",".join(DATA_LOCATIONS) + "}",
    ),
    Option(
        "augment-on",
        "where the `real` data location decodes and augments images; repeatable",
        "choice",
        repeat=True,
        choices=("cpu", "device"),
        default=("cpu",),
        metavar="{cpu,device}",
    ),
    Option(
        "min-input-efficiency",
        "fail a host, python or real case whose throughput is below this fraction of "
        "the device case of the same spec, in the same run (e.g. 0.9)",
        "float",
        minimum=0.0,
        maximum=1.0,
        metavar="FRACTION",
    ),
    Option(
        "data-dir",
        "dataset for the `real` data location (JPEG tree, TFRecords or CIFAR-10 binary); "
        "default: a small generated one in the cache",
        "path",
        metavar="DIR",
    ),
    Option("xla", "TensorFlow: jit-compile the training step with XLA", "flag", default=False),
    Option(
        "compile", "torch: torch.compile the model (inductor); compile time is reported apart", "flag", default=False
    ),
    Option(
        "memory-format",
        "activation layout; repeatable: channels_last (NHWC) or channels_first (NCHW) "
        "(default: the framework's, NHWC for TensorFlow, NCHW for torch but NHWC on GPUs above 32x32 images)",
        "choice",
        repeat=True,
        choices=MEMORY_FORMATS,
        metavar="{" + ",".join(MEMORY_FORMATS) + "}",
    ),
    Option(
        "mode",
        "train, or infer (forward passes only); repeatable",
        "choice",
        repeat=True,
        choices=MODES,
        default=("train",),
        metavar="{" + ",".join(MODES) + "}",
    ),
    Option(
        "variable-update",
        "how gradients meet across devices; repeatable",
        "choice",
        repeat=True,
        choices=VARIABLE_UPDATES,
        default=("replicated",),
        metavar="{" + ",".join(VARIABLE_UPDATES) + "}",
    ),
    Option(
        "batch-size",
        "batch size per device; repeatable (default: the model's)",
        "int",
        repeat=True,
        minimum=1,
        metavar="N",
    ),
    Option(
        "precision",
        "numeric precision; repeatable: fp32 (IEEE), tf32, fp16 (with loss scaling), bf16, amp "
        "(bf16 where the device has it, else fp16)",
        "choice",
        repeat=True,
        choices=PRECISIONS,
        default=("fp32",),
        metavar="{" + ",".join(PRECISIONS) + "}",
    ),
    Option(
        "steps",
        "timed steps per burst, at least one per window (default: sized by the model's work: on GPUs "
        "10 windows of ~20 TFLOP of training, 10-1000 steps each; on CPU workers 5 windows of ~25 GFLOP, "
        "1-20 steps each)",
        "int",
        minimum=1,
        metavar="N",
    ),
    Option(
        "windows",
        "timed windows the steps are split into, one throughput sample each; at least 5, or "
        "no drop could be significant (default: 10 on GPUs, 5 on CPU workers)",
        "int",
        minimum=1,
        metavar="N",
    ),
    Option(
        "max-windows",
        "cap on timed windows: a burst whose windows spread wider than the tolerance "
        "gets more, one at a time, up to N (default: twice --perf-windows; equal to it: fixed length)",
        "int",
        minimum=1,
        metavar="N",
    ),
    Option(
        "warmup-steps",
        "untimed steps before the windows (default: 20 on GPUs, 2 on CPU workers)",
        "int",
        minimum=0,
        metavar="N",
    ),
    Option(
        "burst-timeout",
        "seconds a burst may run before it is killed",
        "float",
        minimum=1,
        default=600.0,
        metavar="SECONDS",
    ),
    Option(
        "hang-floor",
        "seconds without a step, on every rank, that end a burst as hung at the least: the limit is "
        "10 times the burst's median step, never under this",
        "float",
        minimum=1,
        default=60.0,
        metavar="SECONDS",
    ),
    Option(
        "start",
        "how a burst on one node starts: forked from a warm start that imported its framework once per "
        "pytest process (several torch ranks by torch's elastic agent), or in a fresh interpreter; a "
        "multi-node burst always starts fresh",
        "choice",
        choices=START_MODES,
        default="warm",
        metavar="{warm,fresh}",
    ),
    Option(
        "baseline-dir",
        "directory of baseline files, one per hardware fingerprint",
        "path",
        default="baselines",
        metavar="DIR",
    ),
    Option(
        "save-baseline",
        "merge this run's measurements into the baseline file instead of gating",
        "flag",
        default=False,
    ),
    Option(
        "baseline-runs",
        "with --perf-save-baseline, bursts pooled into each entry; their spread is the entry's noise floor",
        "int",
        minimum=1,
        maximum=20,
        default=3,
        metavar="N",
    ),
    Option(
        "perf-tolerance",
        "relative throughput drop tolerated before a regression",
        "float",
        minimum=0.0,
        maximum=0.99,
        default=TOLERANCE,
        metavar="FRACTION",
    ),
    Option(
        "memory-tolerance",
        "relative peak-memory growth tolerated before a memory regression",
        "float",
        minimum=0.0,
        maximum=10.0,
        default=0.10,
        metavar="FRACTION",
    ),
    Option(
        "profile",
        "profile every burst after its timed windows and show which ops moved against the "
        "baseline's profile (a confirmed regression is profiled anyway)",
        "flag",
        default=False,
    ),
    Option(
        "profile-steps",
        "steps each profile records, after the timed windows",
        "int",
        minimum=1,
        maximum=50,
        default=3,
        metavar="N",
    ),
    Option(
        "scaling-tolerance",
        "scaling efficiency drop tolerated, in points",
        "float",
        minimum=0.0,
        maximum=1.0,
        default=0.10,
        note=" = 10 pp",
        metavar="FRACTION",
    ),
    Option(
        "missing-baseline",
        "what a test does without a baseline entry",
        "choice",
        choices=MISSING_POLICIES,
        default="skip",
        metavar="{skip,fail,pass}",
    ),
    Option(
        "missing-gpus",
        "when GPU cases are asked for (-m gpu, --perf-gpus N) and fewer GPUs are visible: fail "
        "the run up front, or skip those cases (a mixed fleet)",
        "choice",
        choices=MISSING_GPU_POLICIES,
        default="fail",
        metavar="{fail,skip}",
    ),
    Option(
        "inconclusive",
        "what a test does when noise leaves the verdict undecided",
        "choice",
        choices=INCONCLUSIVE_POLICIES,
        default="pass",
        note=", with a warning",
        metavar="{pass,fail}",
    ),
    Option(
        "min-scaling-efficiency",
        "absolute floor for scaling efficiency, e.g. 0.9",
        "float",
        minimum=0.0,
        maximum=2.0,
        metavar="FRACTION",
    ),
    Option(
        "keep-burst-dirs",
        "keep each burst's folder (job, worker log, result record) for debugging; "
        "removed at the end of the run otherwise",
        "flag",
        default=False,
    ),
    Option("perf-json", "write every burst's record to this JSON file", "path", metavar="PATH"),
    Option(
        "perf-report",
        "write a report folder here: results.json, report.md, a self-contained "
        "report.html, plots and utilisation series",
        "path",
        metavar="DIR",
    ),
    Option(
        "perf-openmetrics",
        "write this run's figures as Prometheus metrics to this file, replaced atomically: OpenMetrics "
        "text for node_exporter's textfile collector, which reads the *.prom files of its directory",
        "path",
        metavar="FILE",
    ),
    Option(
        "perf-history",
        "append every burst of this run to a results history: a SQLite file (a path or "
        "sqlite:///PATH) or postgresql://USER@HOST[:PORT]/DB; read back for the drift check",
        "history",
        metavar="URL",
    ),
    Option(
        "perf-label",
        "a KEY=VALUE the history keeps with this run (e.g. image=ngc-24.05); repeatable",
        "label",
        repeat=True,
        metavar="KEY=VALUE",
    ),
    Option(
        "drift-window",
        "with --perf-history: the last N runs in which a change point whose drop is beyond the "
        "tolerance counts as drift",
        "int",
        minimum=3,
        default=DRIFT_WINDOW,
        metavar="N",
    ),
    Option(
        "drift",
        "what drift does to a throughput test: warn, or fail it",
        "choice",
        choices=DRIFT_POLICIES,
        default="warn",
        metavar="{warn,fail}",
    ),
    Option(
        "node",
        "this machine's name in a fleet, kept with the run in the history and the results "
        "(default: Slurm's SLURMD_NODENAME, else the host name; pods and containers often share or "
        "randomise host names, so name them here)",
        metavar="NAME",
    ),
    Option(
        "fleet-check",
        "with --perf-history: judge this node against the other nodes of its hardware fingerprint in "
        "the history, as `history fleet` does (its evidence pooled over its keys and nights, this run's "
        "figures as tonight's), and warn about, or fail, each throughput test of a node found slow",
        "choice",
        choices=FLEET_POLICIES,
        default="off",
        metavar="{off,warn,fail}",
    ),
    Option(
        "fleet-window",
        "the fleet check's tonight: each node's latest figures in this many hours before now; the "
        "nights before it are the same window, 24 h earlier each",
        "float",
        minimum=1,
        default=fleet.WINDOW_HOURS,
        metavar="HOURS",
    ),
    Option(
        "fleet-tolerance",
        "how far below its peers a node must be, over the nights that make its case, to be flagged",
        "float",
        minimum=0.0,
        maximum=0.99,
        default=fleet.TOLERANCE,
        metavar="FRACTION",
        note=": nodes measured the same night on the same software need no room for drift, as a baseline "
        "does; 0.05 flags a node 8%% slower than its peers",
    ),
    Option("nnodes", "nodes taking part in a multi-node run", "int", minimum=1, default=1, metavar="N"),
    Option("node-rank", "this node's rank in a multi-node run", "int", minimum=0, default=0, metavar="R"),
    Option(
        "rdzv-timeout",
        "seconds to wait for every node (rendezvous) and for process-group set-up",
        "float",
        minimum=1,
        default=120.0,
        metavar="SECONDS",
    ),
    Option("rdzv-endpoint", "rendezvous HOST:PORT for multi-node torch runs", "endpoint", metavar="HOST:PORT"),
    Option(
        "worker-hosts",
        "comma-separated HOST:PORT of every node, in rank order, for multi-node TF runs",
        "hosts",
        metavar="H:P,H:P",
    ),
)

BY_DEST = {o.dest: o for o in OPTIONS}
# Keys accepted in [tool.perfsuite]; repeatable options also take their plural.
PLURALS = {
    "framework": "frameworks",
    "model": "models",
    "data_location": "data_locations",
    "variable_update": "variable_updates",
    "batch_size": "batch_sizes",
    "precision": "precisions",
    "perf_label": "perf_labels",
    "memory_format": "memory_formats",
    "mode": "modes",
}


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
    augment_on: tuple[str, ...]
    min_input_efficiency: float | None
    compile: bool
    memory_format: tuple[str, ...]
    mode: tuple[str, ...]
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
    perf_label: tuple[tuple[str, str], ...]
    drift_window: int
    drift: str
    node: str | None
    fleet_check: str
    fleet_window: float
    fleet_tolerance: float
    nnodes: int
    node_rank: int
    rdzv_timeout: float
    rdzv_endpoint: str | None
    worker_hosts: tuple[str, ...]
    sources: dict[str, str] = field(default_factory=dict, compare=False)  # dest -> where the value came from


def default(dest: str) -> Any:
    """The built-in default of the option whose PerfOptions field is ``dest``."""
    o = BY_DEST[dest]
    return tuple(o.default or ()) if o.repeat else _default(o)


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
    cli: Callable[[str], Any], table: dict[str, Any], table_source: str, base_dir: Path, dests: tuple[str, ...]
) -> dict[str, Any]:
    """``resolve`` of the options ``dests`` alone, without the checks across options: a value
    that is refused is its default."""
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
    for flag, owner in (("compile", "torch"), ("xla", "tf")):
        if v[flag] and owner not in frameworks:
            raise OptionError(
                f"{src[flag]}: applies to "
                f"--perf-framework {owner} only, and this run measures {', '.join(sorted(frameworks))}"
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
