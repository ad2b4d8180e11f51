"""The option table: every setting of a perfsuite run and of the fleet rule, declared once, with
its default. Every default a run, the gate or a command uses is written here, and only here:
the plugin's options, ``[tool.perfsuite]`` and the commands' defaults all come from this table
(perfsuite.config.options resolves and checks the values; perfsuite.config.project reads
``[tool.perfsuite]`` for the commands).

Every option is spelled ``--perf-NAME`` on the command line (``--perf-gpus``,
``--perf-save-baseline``) and is also the key NAME of the ``[tool.perfsuite]`` table in
pyproject.toml (dashes become underscores; repeatable options take a list).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfsuite.analysis.changes import DRIFT_WINDOW
from perfsuite.analysis.stats import ALPHA, MIN_SAMPLES, TOLERANCE
from perfsuite.contract.spec import DATA_LOCATIONS, MEMORY_FORMATS, MODES, PRECISIONS, SWITCHES, VARIABLE_UPDATES
from perfsuite.models.registry import FRAMEWORKS

PREFIX = "--perf-"
MISSING_POLICIES = ("skip", "fail", "pass", "save")
MISSING_GPU_POLICIES = ("fail", "skip")
MIN_WINDOWS = MIN_SAMPLES
WHY_MIN_WINDOWS = f"with fewer, the one-sided rank test cannot reach p < {ALPHA:g}, so no drop could ever fail the gate"
INCONCLUSIVE_POLICIES = ("pass", "fail")
# How a burst's processes start on one node (perfsuite.plugin.warm).
START_MODES = ("warm", "fresh")
DRIFT_POLICIES = ("warn", "fail")
FLEET_POLICIES = NUMERICS_POLICIES = ("off", "warn", "fail")


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
        "activation-checkpointing",
        "torch: each block of the model's `blocks` recomputes its forward in the backward pass instead of "
        "keeping its activations (a model without `blocks` is refused); repeatable: off, on",
        "choice",
        repeat=True,
        choices=SWITCHES,
        default=("off",),
        metavar="{" + ",".join(SWITCHES) + "}",
    ),
    Option(
        "variable-update",
        "how gradients meet across devices; repeatable (sharded: torch's FSDP2, parameters, gradients and "
        "optimizer state split across the ranks, each block of the model's `blocks` apart, a model without "
        "them whole)",
        "choice",
        repeat=True,
        choices=VARIABLE_UPDATES,
        default=("replicated",),
        metavar="{" + ",".join(VARIABLE_UPDATES) + "}",
    ),
    Option(
        "tp",
        "torch: the TP degree, each model split over N devices of a node by its TP plan (a 2-D mesh, data parallel "
        "x TP, the variable update over the data-parallel axis); repeatable, swept like the batch size",
        "int",
        repeat=True,
        minimum=1,
        default=(1,),
        metavar="N",
    ),
    Option(
        "batch-size",
        "batch size per device (with --perf-tp, per TP group); repeatable (default: the model's)",
        "int",
        repeat=True,
        minimum=1,
        metavar="N",
    ),
    Option(
        "seq-len",
        "a token model's sequence length, the tokens of one sample; repeatable, swept like the batch "
        "size; image models ignore it (default: the model's)",
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
        "local-baseline-dir",
        "directory of this machine's local baselines, which --perf-missing-baseline save writes "
        "and a case without a committed entry gates against (committed entries take precedence; "
        "default: baselines/ in perfsuite's cache, $PERFSUITE_CACHE or ~/.cache/perfsuite)",
        "path",
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
        "what a test does without a baseline entry: skip, fail, pass, or save (measure it with a "
        "save's bursts into this machine's local baseline, which the next run gates against)",
        "choice",
        choices=MISSING_POLICIES,
        default="skip",
        metavar="{skip,fail,pass,save}",
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
        "perf-history-retry",
        "with --perf-history: how long the run's write waits while PostgreSQL refuses it for now (too many "
        "clients, a refused connection, a server starting or stopping), trying again with jittered exponential "
        "backoff, before the run is spooled; a permanent error (a wrong password, a missing database) is not "
        "retried; 0: spool at once. `history import --retry` and the history's commands read it too",
        "float",
        minimum=0,
        # A fleet's nodes end their sessions together: a burst of writers at 02:00 is normal, and a minute
        # of waiting is nothing to a session of hours, where a spooled night waits for the next run.
        default=60.0,
        metavar="SECONDS",
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
        "numerics",
        "what a throughput test does when its burst's first losses changed against the baseline's golden ones "
        "beyond --perf-numerics-tolerance: warn, or fail it; off: no numerics stretch runs (a drift within the "
        "tolerance is shown and never fails)",
        "choice",
        choices=NUMERICS_POLICIES,
        default="warn",
        metavar="{off,warn,fail}",
    ),
    Option(
        "numerics-steps",
        "the numerics stretch: a burst's first N steps (the warm-up's among them), seeded, under the framework's "
        "deterministic settings; their losses are a baseline's golden values (N beyond the warm-up adds untimed steps)",
        "int",
        minimum=1,
        default=10,  # measured: docs/figures.md, "Numerics"
        metavar="N",
        note=": a change of the backward's or the optimizer's arithmetic first showed by step 10 in 13 of 16 "
        "seeded small GPT-2s, and a GPU burst's 20 warm-up steps hold it",
    ),
    Option(
        "numerics-tolerance",
        "relative difference of a loss of the stretch beyond which the numerics changed; within it, drifted",
        "float",
        minimum=0.0,
        default=0.05,
        metavar="FRACTION",
        note=", Megatron-LM's rtol for its golden losses",
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
        "the fleet's tonight: each node's latest figures in this many hours before now (the fleet check) or "
        "before --at (history fleet --since, triage, the site's verdicts); the nights before it are the same "
        "window, 24 h earlier each",
        "float",
        # Under an hour too: a sweep's own fleet check reads the hours since it began
        # (examples/slurm-fleet.sh), minutes for a small fleet.
        minimum=0.01,
        # A day: the nights do not overlap, so a node that did not run tonight did not report, and a
        # sweep that starts before midnight is whole in it (calendar days would split it).
        default=24.0,
        metavar="HOURS",
    ),
    Option(
        "fleet-tolerance",
        "how far below its peers a node must be, over the nights that make its case, to be flagged slow",
        "float",
        minimum=0.0,
        maximum=0.99,
        # A peer comparison needs no room for drift between nights (the nodes ran the same night
        # on the same software), only for node-to-node spread: 5% flags a node 8% slower than its
        # peers where the gate's 10% against a baseline would not.
        default=0.05,
        metavar="FRACTION",
        note=": nodes measured the same night on the same software need no room for drift, as a baseline "
        "does; 0.05 flags a node 8%% slower than its peers",
    ),
    Option(
        "fleet-alpha",
        "false slow-node flags a night that one fleet (the nodes of one fingerprint) may get, at most: "
        "Holm's correction over its nodes holds them there, whatever their number",
        "float",
        minimum=1e-6,
        maximum=0.5,
        default=0.01,
        metavar="P",
        note=": a healthy node flagged one night in a hundred",
    ),
    Option(
        "fleet-nights",
        "the last nights, tonight included, whose evidence a slow node's verdict pools; a small fleet "
        "learns its noise from up to 4 times as many",
        "int",
        minimum=1,
        default=7,
        metavar="N",
    ),
    Option(
        "fleet-min-nodes",
        "the nodes, itself included, that must have run a key on a night for a node's figure to be "
        "judged against its peers there",
        "int",
        minimum=3,
        default=3,
        metavar="N",
        note=": with two there is no telling which one is off",
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
    "seq_len": "seq_lens",
    "precision": "precisions",
    "perf_label": "perf_labels",
    "memory_format": "memory_formats",
    "mode": "modes",
}
