"""MkDocs hooks: the parts of the site that come from the code, written at build time.

A page asks for generated Markdown with a comment on a line of its own:

    <!-- perfsuite:options NAME ... -->   rows of the option table (perfsuite.config.options.OPTIONS);
                                          ``*``: every option no earlier directive of the page placed
    <!-- perfsuite:options-rest TITLE --> a section TITLE with every option the page placed nowhere else
    <!-- perfsuite:fields MODULE CLASS -->  a dataclass's fields: name, type, default
    <!-- perfsuite:markers -->            the markers, as perfsuite.plugin.markers declares them
    <!-- perfsuite:cpu-peaks -->          the CPU peak table (perfsuite.analysis.cpu_peaks.KINDS), with sources
    <!-- perfsuite:policy -->             what each finding does to its test (perfsuite.plugin.policy.RULES)
    <!-- perfsuite:commands -->           the command-line reference, from perfsuite.commands.main.parser()
    <!-- perfsuite:run COMMAND -->        COMMAND run now in the repository root, shown with its output;
                                          an argument ``glob:PATTERN`` stands for the pattern's first match
    <!-- perfsuite:pytest-help -->        the perfsuite group of ``pytest --help``, as a foreign project sees it
    <!-- perfsuite:version MODULE NAME -->  (inline) the value of a format's version constant
    <!-- perfsuite:history COMMAND -->    ``python -m perfsuite history COMMAND`` on a demonstration history
                                          built now (nightly.db: see _build_demo_histories)
    <!-- perfsuite:fleet ARGS -->         ``python -m perfsuite history fleet ARGS`` on the demonstration
                                          fleet.db
    <!-- perfsuite:triage ARGS -->        ``python -m perfsuite triage ARGS`` on the demonstration triage.db;
                                          with ``--markdown FILE``, the source of the file it wrote

Nothing generated is committed, so nothing generated can go stale. A command that fails
stops the build.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = "100"  # argparse and pytest wrap their help to the terminal: the same width every build
DIRECTIVE = re.compile(r"^<!-- perfsuite:([a-z-]+)(?: (.*?))? -->$", re.MULTILINE)
VERSION = re.compile(r"<!-- perfsuite:version ([\w.]+) (\w+) -->")  # inline, e.g. in a table cell
DEMO_DB = "nightly.db"  # how the demonstration history is named on the page


def on_files(files, config):
    """Run every command the pages show, side by side, before any page is built (they are cached)."""
    jobs = {}
    for file in files.documentation_pages():
        for m in DIRECTIVE.finditer(file.content_string):
            name, arg = m.group(1), (m.group(2) or "").strip()
            if name == "run":
                jobs[(name, arg)] = lambda arg=arg: run(globbed(arg))
            elif name == "pytest-help":
                jobs[(name, arg)] = pytest_help
            elif name == "history":
                jobs[(name, arg)] = lambda arg=arg: history(arg)
            elif name == "fleet":
                jobs[(name, arg)] = lambda arg=arg: history(f"fleet {arg}", FLEET_DB)
            elif name == "triage":
                jobs[(name, arg)] = lambda arg=arg: triage(arg)
    with ThreadPoolExecutor(max_workers=4) as pool:
        for future in [pool.submit(job) for job in jobs.values()]:
            future.exception()  # a failure is raised again, naming its page, when that page is built
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    placed: set[str] = set()

    def expand(m: re.Match) -> str:
        name, arg = m.group(1), (m.group(2) or "").strip()
        where = f"{page.file.src_uri}: <!-- perfsuite:{name} -->"
        try:
            if name == "options":
                return options_table(arg.split(), placed)
            if name == "options-rest":
                table = options_table(["*"], placed)
                return f"## {arg}\n\n{table}" if table else ""
            if name == "fields":
                return fields_table(*arg.split())
            if name == "markers":
                return markers_list()
            if name == "cpu-peaks":
                return cpu_peaks_table()
            if name == "policy":
                return policy_table()
            if name == "commands":
                return commands_reference()
            if name == "run":
                command = globbed(arg)
                return shown(command, run(command))
            if name == "pytest-help":
                return shown("pytest --help", pytest_help(), note="the perfsuite group only")
            if name == "history":
                return shown(f"python -m perfsuite history {arg} --history {DEMO_DB}", history(arg))
            if name == "fleet":
                command = f"python -m perfsuite history fleet {arg} --history {FLEET_DB}"
                return shown(command, history(f"fleet {arg}", FLEET_DB))
            if name == "triage":
                if "--markdown" in arg:  # the file it wrote, as its source
                    return f"```markdown\n{triage(arg).rstrip()}\n```\n"
                return shown(triage_command(arg), triage(arg))
        except PluginError as exc:
            raise PluginError(f"{where}: {exc}") from None
        raise PluginError(f"{where}: unknown directive")

    return VERSION.sub(lambda m: str(version(m.group(1), m.group(2), page)), DIRECTIVE.sub(expand, markdown))


def version(module: str, name: str, page) -> int:
    import importlib

    try:
        value = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise PluginError(f"{page.file.src_uri}: no version {module}.{name}: {exc}") from None
    return value


# --- the option table -------------------------------------------------------------------


def options_table(names: list[str], placed: set[str]) -> str:
    from perfsuite.config.options import OPTIONS, PLURALS

    by_name = {o.name: o for o in OPTIONS}
    if names == ["*"]:
        chosen = [o for o in OPTIONS if o.name not in placed]
    else:
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise PluginError(f"no such option: {', '.join(unknown)}")
        chosen = [by_name[n] for n in names]
    if not chosen:
        return ""
    rows = ["| option | what it does | `[tool.perfsuite]` key |", "| --- | --- | --- |"]
    for o in chosen:
        placed.add(o.name)
        spelling = f"`{o.flag}`" if o.kind == "flag" else f"`{o.flag} {o.metavar or o.name.upper()}`"
        if o.repeat and "repeatable" not in o.help:
            spelling += " (repeatable)"
        keys = [f"`{o.dest}`"]
        if o.dest in PLURALS:
            keys.append(f"`{PLURALS[o.dest]}`")
        value = {"flag": "true / false", "label": "a table or a list of `KEY=VALUE`"}.get(
            o.kind, "a list" if o.repeat else ""
        )
        key = " or ".join(keys) + (f" ({value})" if value else "")
        anchor = f'<a id="{o.flag.lstrip("-")}"></a>'
        rows.append(f"| {anchor}{spelling} | {_cell(o.text)} | {key} |")
    return "\n".join(rows) + "\n"


def _cell(text: str) -> str:
    return text.replace("%%", "%").replace("|", "\\|").replace("<", "&lt;")  # %%: argparse's escape


def fields_table(module: str, name: str) -> str:
    import dataclasses
    import importlib

    try:
        cls = getattr(importlib.import_module(module), name)
        fields = dataclasses.fields(cls)
    except (ImportError, AttributeError, TypeError) as exc:
        raise PluginError(f"no dataclass {module}.{name}: {exc}") from None
    rows = ["| field | type | when absent |", "| --- | --- | --- |"]
    for f in fields:
        if f.default is not dataclasses.MISSING:
            default = f"`{f.default!r}`"
        elif f.default_factory is not dataclasses.MISSING:
            default = f"`{f.default_factory()!r}`"
        else:
            default = "required"
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        rows.append(f"| `{f.name}` | {_cell(kind.replace(' | ', ' or '))} | {default} |")
    return "\n".join(rows) + "\n"


OUTCOMES = {"pass": "passes", "warn": "passes with a warning", "fail": "fails", "skip": "is skipped"}


def policy_table() -> str:
    from perfsuite.config.options import BY_DEST
    from perfsuite.plugin.policy import RULES

    rows = [
        "| finding | when | the test | in a save run | its line begins | where it falls, also set by |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in RULES:
        if r.action is not None:
            outcome = OUTCOMES[r.action]
        else:
            o = BY_DEST[r.option]
            choices = "; ".join(f"`{value}`: {OUTCOMES[action]}" for value, action in r.by_value.items())
            outcome = f"`{o.flag}` decides ({choices}; default `{o.default}`)"
        saving = OUTCOMES[r.saving] if r.saving is not None else "the same"
        rows.append(
            f"| {r.finding} | {_cell(r.when)} | {outcome} | {saving} | `{r.says}` | {_cell(r.shaped_by) or '-'} |"
        )
    return "\n".join(rows) + "\n"


def cpu_peaks_table() -> str:
    """One row per kind of CPU core: what tells it apart, its FLOPs a cycle a core for each precision
    (with the flag each needs), what it assumes, its sources."""
    from perfsuite.analysis.cpu_peaks import KINDS

    def figures(kind, precision: str) -> str:
        found = [
            f"{p.flops_per_cycle:,} with `{p.needs}` ({p.arithmetic})" for p in kind.peaks if p.precision == precision
        ]
        return _cell("; ".join(found)) or "-"

    def models(kind) -> str:
        spans = [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in kind.models]
        return f"family {kind.family}, model {', '.join(spans)}" if spans else f"family {kind.family}"

    rows = [
        "| CPU | told by | fp32 FLOPs/cycle/core | bf16 FLOPs/cycle/core | assumed | sources |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for k in KINDS:
        assumed = "; ".join(a for a in (k.assumed, *(p.assumed for p in k.peaks)) if a) or "-"
        told = f"{_cell(k.told_by)} ({models(k)}{', flag ' + ', '.join(k.flags) if k.flags else ''})"
        rows.append(
            f"| {_cell(k.name)} | {told} | {figures(k, 'fp32')} | {figures(k, 'bf16')} | "
            f"{_cell(assumed)} | {_cell(k.source)} |"
        )
    return "\n".join(rows) + "\n"


def markers_list() -> str:
    from perfsuite.plugin.markers import CASE_MARKERS, GATE_LINE

    lines = []
    for line in (*CASE_MARKERS, GATE_LINE):
        name, text = line.split(": ", 1)
        lines.append(f"* `{name}`: {text}")
    return "\n".join(lines) + "\n"


# --- the command-line reference --------------------------------------------------------


def commands_reference() -> str:
    from perfsuite.commands.main import parser

    with _columns():
        top = parser()
        out = [_help_block(top)]
        for path, help_line, sub in _subcommands(top, ()):
            name = " ".join(path)
            out.append(f"{'#' * min(len(path) + 1, 4)} {name}\n\n{_sentence(help_line)}\n\n{_help_block(sub)}")
    return "\n".join(out)


def _subcommands(p: argparse.ArgumentParser, path: tuple[str, ...]):
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), helps.get(name) or "", sub
                yield from _subcommands(sub, (*path, name))


def _help_block(p: argparse.ArgumentParser) -> str:
    return f"```text\n$ {p.prog} --help\n{p.format_help().rstrip()}\n```\n"


def _sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


@contextmanager
def _columns():
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = COLUMNS
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


# --- commands run at build time ------------------------------------------------------


def shown(command: str, output: str, note: str = "") -> str:
    comment = f"  # {note}" if note else ""
    return f"```text\n$ {command}{comment}\n{output.rstrip()}\n```\n"


def globbed(command: str) -> str:
    """``command`` with each ``glob:PATTERN`` argument replaced by the pattern's first match (sorted)."""
    out = []
    for arg in shlex.split(command):
        if arg.startswith("glob:"):
            matches = sorted(ROOT.glob(arg[len("glob:") :]))
            if not matches:
                raise PluginError(f"nothing matches {arg!r}")
            arg = str(matches[0].relative_to(ROOT))
        out.append(shlex.quote(arg))
    return " ".join(out)


@cache
def run(command: str, cwd: str = str(ROOT)) -> str:
    argv = shlex.split(command)
    if argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0] == "pytest":
        argv[:1] = [sys.executable, "-m", "pytest"]
    else:
        raise PluginError(f"runs python or pytest only, not {argv[0]!r}")
    env = dict(os.environ, COLUMNS=COLUMNS, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PERFSUITE_CACHE", None)
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise PluginError(f"{command!r} exited {done.returncode}: {(done.stderr or done.stdout).strip()[-500:]}")
    return done.stdout


@cache
def pytest_help() -> str:
    """The plugin's group of ``pytest --help``, run outside this repository (no conftest adds spellings)."""
    with tempfile.TemporaryDirectory() as empty:
        text = run("pytest --help -p no:cacheprovider", cwd=empty)
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("perfsuite")), None)
    if start is None:
        raise PluginError("pytest --help shows no perfsuite group: is perfsuite installed?")
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
    return "\n".join(lines[start:end]).rstrip()


# --- demonstration histories ----------------------------------------------------------

DEMO_KEY = "torch/resnet50/gpu8/nodes1/device/bs256/img224/fp32/replicated"
DEMO_FINGERPRINT = "gpu-nvidia-h100-80gb-hbm3-x8"
DEMO_NIGHTS, DEMO_STEP = 24, 16  # nightly.db: the step is on the 17th night
FLEET_DB, FLEET_NODES, FLEET_NIGHTS, FLEET_SLOW = "fleet.db", 8, 7, "gpu-node-06"  # slow from the 4th night
DEMO_START = datetime(2026, 10, 1, 2, 0, tzinfo=UTC)
# triage.db: 21 nights of 12 nodes in two racks, three models on 8 GPUs; the driver goes to
# 580.105 on night 10 (resnet50 and inception3 slower), gpu-node-09 slows on night 14, commit
# 7c1d... slows vgg16 on night 17, and gpu-node-04 is a new machine from night 6.
TRIAGE_DB, TRIAGE_NIGHTS, TRIAGE_NODES = "triage.db", 21, 12
TRIAGE_KEYS = {
    "torch/resnet50/gpu8/nodes1/device/bs256/img224/fp32/replicated": 2800.0,
    "torch/inception3/gpu8/nodes1/device/bs256/img299/fp32/replicated": 1900.0,
    "torch/vgg16/gpu8/nodes1/device/bs128/img224/fp32/replicated": 1450.0,
}
_DEMO_LOCK = threading.Lock()


def _demo_history() -> str:
    with _DEMO_LOCK:  # the history commands run side by side: one of them builds it
        return _build_demo_histories()


@cache
def _build_demo_histories() -> str:
    """Three histories of made-up figures (the pages say so); the outputs shown are the commands', run now.

    nightly.db: 24 nights of one 8-GPU node, resnet50 8% slower from night 17, when torch and
    the container change. fleet.db: 7 nights of 8 such nodes, one of them 8% slower from night 4.
    triage.db: see TRIAGE_KEYS.
    """
    try:
        from perfsuite.history import db
    except ImportError as exc:
        raise PluginError(f"the history demonstration needs the history extra: {exc}") from None
    folder = Path(tempfile.mkdtemp(prefix="perfsuite-docs-"))
    rnd = random.Random(27)
    nightly = db.open_history(f"sqlite:///{folder / DEMO_DB}")
    try:
        for night in range(DEMO_NIGHTS):
            after = night >= DEMO_STEP
            ips = (2580.0 if after else 2800.0) * (1 + rnd.gauss(0, 0.01))
            software = {
                "git_commit": f"{night // 4 + 10:x}" * 10,
                "frameworks": {"torch": "2.13.0" if after else "2.12.1"},
                "container": "ngc 25.10" if after else "ngc 25.09",
            }
            db.write_run(nightly, _demo_run(f"night-{night}", night, "gpu-node-07", ips, software))
    finally:
        nightly.dispose()
    fleet = db.open_history(f"sqlite:///{folder / FLEET_DB}")
    try:
        for night in range(FLEET_NIGHTS):
            for n in range(1, FLEET_NODES + 1):
                node = f"gpu-node-{n:02d}"
                slow = 0.92 if node == FLEET_SLOW and night >= 3 else 1.0
                ips = 2800.0 * slow * (1 + rnd.gauss(0, 0.01))
                software = {"git_commit": "c0ffee" * 2, "frameworks": {"torch": "2.13.0"}, "container": "ngc 25.10"}
                run = _demo_run(f"{node}-{night}", night, node, ips, software, minutes=7 * n)
                db.write_run(fleet, run)
    finally:
        fleet.dispose()
    _build_triage_demo(db, folder / TRIAGE_DB, random.Random(41))
    return str(folder)


def _build_triage_demo(db, path: Path, rnd: random.Random) -> None:
    engine = db.open_history(f"sqlite:///{path}")
    try:
        for night in range(TRIAGE_NIGHTS):
            for n in range(1, TRIAGE_NODES + 1):
                node = f"gpu-node-{n:02d}"
                software = {
                    "git_commit": "7c1d0e5a9b" * 4 if night >= 17 else "3f2a9c4d1e" * 4,
                    "frameworks": {"torch": "2.13.0"},
                    "container": "ngc 25.10",
                    "driver": "580.105.08" if night >= 10 else "580.95.05",
                    "host": f"{node}-b" if node == "gpu-node-04" and night >= 6 else f"{node}-a",
                    "labels": {"rack": f"r{(n - 1) // 6 + 1}", "ci_run": str(9000 + night)},
                }
                rows = []
                for key, level in TRIAGE_KEYS.items():
                    model = key.split("/")[1]
                    slow = 0.93 if night >= 10 and model in ("resnet50", "inception3") else 1.0
                    slow *= 0.89 if node == "gpu-node-09" and night >= 14 else 1.0
                    slow *= 0.91 if night >= 17 and model == "vgg16" else 1.0
                    slow *= 1.06 if node == "gpu-node-04" and night >= 6 else 1.0
                    rows.append((key, level * slow * (1 + rnd.gauss(0, 0.012))))
                run = _demo_run(f"{node}-t{night}", night, node, 0.0, software, minutes=5 * n, rows=rows)
                db.write_run(engine, run)
    finally:
        engine.dispose()


def triage_command(arguments: str) -> str:
    """``triage ARGS`` on triage.db, at the end of its last night."""
    at = (DEMO_START + timedelta(days=TRIAGE_NIGHTS - 1, hours=4)).strftime("%Y-%m-%dT%H:%MZ")
    return " ".join(["python -m perfsuite triage --history", TRIAGE_DB, "--at", at, arguments]).rstrip()


@cache
def triage(arguments: str) -> str:
    """What ``triage_command(ARGS)`` prints; with ``--markdown FILE``, the file it wrote."""
    folder = _demo_history()
    command = triage_command(arguments)
    argv = shlex.split(command)
    argv[0] = sys.executable
    env = dict(os.environ, COLUMNS=COLUMNS, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode not in (0, 3):  # 3: an open incident, as the demonstration has
        raise PluginError(f"{command!r} exited {done.returncode}: {(done.stderr or done.stdout).strip()[-500:]}")
    if "--markdown" in arguments:
        written = shlex.split(arguments)[shlex.split(arguments).index("--markdown") + 1]
        return (Path(folder) / written).read_text().replace(f"{folder}/", ".../")
    return done.stdout.replace(f"{folder}/", ".../")


def _demo_run(
    uuid: str, night: int, node: str, ips: float, software: dict, minutes: int = 0, rows: list | None = None
) -> dict:
    run_object = {
        "date": (DEMO_START + timedelta(days=night, minutes=minutes)).isoformat(),
        "host": node,
        "node": node,
        "python": "3.12.3",
        "fingerprints": {"gpu": {"id": DEMO_FINGERPRINT}},
        "driver": "580.95.05",
        "cuda": "13.0",
        "labels": {"pool": "h100-east"},
        **software,
    }
    results = [
        {
            "key": key,
            "framework": "torch",
            "model": key.split("/")[1],
            "device_kind": "cuda",
            "devices": 8,
            "nodes": 1,
            "images_per_sec": round(figure, 1),
            "ci_low": round(figure * 0.995, 1),
            "ci_high": round(figure * 1.005, 1),
            "runs": 1,
            "verdict": "pass",
        }
        for key, figure in (rows if rows is not None else [(DEMO_KEY, ips)])
    ]
    return {"uuid": uuid, "mode": "gate", "outcome": "passed", "source": "run", "run": run_object, "results": results}


def history(arguments: str, database: str = DEMO_DB) -> str:
    folder = _demo_history()
    out = run(f"python -m perfsuite history {arguments} --history {database}", cwd=folder)
    return out.replace(f"{folder}/", ".../")  # the build's temporary folder


def on_post_build(config) -> None:
    if _build_demo_histories.cache_info().currsize:
        import shutil

        shutil.rmtree(_build_demo_histories(), ignore_errors=True)
        _build_demo_histories.cache_clear()
    run.cache_clear()
    triage.cache_clear()
    pytest_help.cache_clear()
