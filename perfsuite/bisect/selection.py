"""Which burst a bisect measures: one burst key, or a pytest selection that gives exactly one.

A burst key (``torch/resnet50/cpu1/nodes1/device/bs2/img224/fp32/threads1``) becomes the
pytest options that run that case of the suite's throughput test; a pytest selection (paths,
``-k``, ``-m``, ``--perf-`` options) is passed on as it is, and the first run checks that
it gives one key. Anything else is refused with one line.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

from perfsuite import workloads
from perfsuite.contract.frameworks import SUPPORTED
from perfsuite.contract.spec import DATA_LOCATIONS, PRECISIONS, SHORT_KINDS, key_fields

# Where a key alone is looked for in the commit's worktree: the suite folder this
# repository's layout names, else the suite perfsuite ships (conftest of the worktree's root).
SUITE_FOLDER = "tests_perf"
SHIPPED_SUITE = ("--pyargs", "perfsuite.suite")


class SelectionError(Exception):
    """A selection that names no single burst; one line."""


@dataclass(frozen=True)
class Selection:
    given: tuple[str, ...]  # as typed, for messages, the state file and the command line shown
    key: str | None  # the burst asked for; None: the one key the pytest selection gives
    pytest_args: tuple[str, ...]  # what pytest is given in the commit's worktree (a suite path may be added)

    def args_for(self, worktree: os.PathLike[str] | str) -> list[str]:
        """pytest's arguments in ``worktree``: a key alone runs the suite found there."""
        args = list(self.pytest_args)
        rest = [a for a in self.given if a != self.key]
        if self.key is not None and "--pyargs" not in rest and not any(_names_path(worktree, a) for a in rest):
            suite = os.path.join(worktree, SUITE_FOLDER)
            args = ([SUITE_FOLDER] if os.path.isdir(suite) else list(SHIPPED_SUITE)) + args
        return args

    def digest(self) -> str:
        """Names this selection in the cache, where the key a pytest selection gives is kept."""
        return hashlib.sha256(json.dumps(list(self.given)).encode()).hexdigest()[:16]


def _names_path(worktree: os.PathLike[str] | str, arg: str) -> bool:
    """Whether ``arg`` is a test path: a file or folder of the worktree, or an absolute one."""
    if arg.startswith("-"):
        return False
    path = arg.split("::")[0]
    return os.path.exists(path if os.path.isabs(path) else os.path.join(worktree, path))


def looks_like_key(arg: str) -> bool:
    parts = arg.split("/")
    return not arg.startswith("-") and len(parts) >= 8 and parts[0] in SUPPORTED and parts[3].startswith("nodes")


def check_key(key: str) -> dict[str, str]:
    """The key's fields; SelectionError for a key this version cannot run alone."""
    fields = key_fields(key)
    devices = fields["devices"]
    kind = next((k for k, short in SHORT_KINDS.items() if devices.startswith(short)), None)
    count = devices[len(SHORT_KINDS[kind]) :] if kind else ""
    if kind is None or not count.isdigit() or int(count) < 1:
        raise SelectionError(f"burst key {key}: {devices!r} is no device count (cpu2, gpu8)")
    if fields.get("nodes", "1") != "1":
        raise SelectionError(f"burst key {key}: bisect measures one node, this key needs {fields['nodes']}")
    if fields.get("data_location") not in DATA_LOCATIONS or fields.get("precision") not in PRECISIONS:
        raise SelectionError(f"burst key {key}: no data location or precision in it")
    return {**fields, "kind": kind, "count": count}


def key_args(key: str, given: list[str]) -> list[str]:
    """The pytest options that run ``key``'s case of the throughput test (what ``given`` sets itself wins)."""
    f = check_key(key)
    short = SHORT_KINDS[f["kind"]]
    args = ["--perf-framework", f["framework"], "--perf-model", f["model"]]
    args += ["--perf-cpu-workers", f["count"]] if f["kind"] == "cpu" else ["--perf-gpus", f["count"]]
    args += ["--perf-data-location", f["data_location"], "--perf-precision", f["precision"]]
    args += ["--perf-batch-size", f["batch_size"]]
    # The input's size where an option asks for it (a token key's sequence length); an image
    # model's size is its own. Without it, the run measures the model's default length.
    workload = workloads.of_key(key)
    if workload.key_option and f.get(workload.key_field):
        args += [workload.key_option, f[workload.key_field]]
    if f["kind"] == "cpu" and f["threads"] != "-":
        args += ["--perf-threads-per-worker", f["threads"]]
    if int(f["count"]) > 1:
        args += ["--perf-variable-update", f["variable_update"]]
    if f["data_location"] == "real":
        args += ["--perf-augment-on", f["augment_on"]]
    if f["memory_format"] != "default":
        args += ["--perf-memory-format", f["memory_format"]]
    if f["mode"] != "train":
        args += ["--perf-mode", f["mode"]]
    if f["xla"] == "yes":
        args.append("--perf-xla")
    if f["compile"] == "yes":
        args.append("--perf-compile")
    if f["activation_checkpointing"] == "on":
        args += ["--perf-activation-checkpointing", "on"]
    if f["tp"] != "1":
        args += ["--perf-tp", f["tp"]]
    if "-m" not in given:
        args += ["-m", short]
    if "-k" not in given:
        # The throughput test of this device count (the sweep runs 1, 2, 4, ... up to it).
        args += ["-k", f"test_throughput and {short}{f['count']}"]
    return args


def parse(given: list[str]) -> Selection:
    """A burst key (at most one), with or without pytest arguments, or a pytest selection."""
    given = list(given)
    if not given:
        raise SelectionError("needs what to measure: a burst key, or a pytest selection after --")
    keys = [a for a in given if looks_like_key(a)]
    if len(keys) > 1:
        raise SelectionError(f"names {len(keys)} burst keys ({', '.join(keys)}): bisect follows one")
    if keys:
        key = keys[0]
        rest = [a for a in given if a != key]
        return Selection(tuple(given), key, tuple(rest + key_args(key, rest)))
    return Selection(tuple(given), None, tuple(given))


def one_key(selection: Selection, found: list[str]) -> str:
    """The key a run of ``selection`` measured; SelectionError unless that is exactly one."""
    if selection.key is not None:
        if selection.key not in found:
            ran = ", ".join(found) if found else "no burst"
            raise SelectionError(f"the selection ran no burst {selection.key} (it ran {ran})")
        return selection.key
    distinct = sorted(set(found))
    if len(distinct) != 1:
        what = "no burst" if not distinct else f"{len(distinct)} burst keys ({', '.join(distinct)})"
        raise SelectionError(
            f"the selection {' '.join(selection.given)} gives {what}: give one burst key, "
            "or narrow it (-k test_throughput and one device count)"
        )
    return distinct[0]
