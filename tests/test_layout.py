"""The package layout keeps its promise: imports go one way across the process boundary."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "perfsuite"

# Which of perfsuite's packages each one may import. The worker never imports the plugin
# side, the plugin side never imports the worker, and the lower layers import upwards never.
ALLOWED = {
    "common": set(),
    # A workload answers for a spec and a model (perfsuite.contract), which name their workload:
    # the two sit on one level, workloads naming contract's types only for annotations.
    "workloads": {"common", "contract"},
    "contract": {"common", "workloads"},
    "models": {"common", "contract", "workloads"},
    "data": {"common", "contract", "workloads"},
    "analysis": {"common", "contract", "workloads", "models"},
    "store": {"common", "contract", "workloads", "analysis"},
    "worker": {"common", "contract", "workloads", "models", "data", "analysis"},
    "reporting": {"common", "contract", "workloads", "models", "analysis", "store"},
    "history": {"common", "contract", "workloads", "analysis", "store", "reporting"},
    "config": {"common", "contract", "workloads", "models", "analysis", "history"},
    "plugin": {
        "common",
        "contract",
        "workloads",
        "models",
        "data",
        "analysis",
        "store",
        "reporting",
        "history",
        "config",
        "suite",
    },
    "suite": {"common", "contract", "workloads", "plugin"},
    "bisect": {"common", "contract", "workloads", "analysis"},
    "site": {"common", "contract", "workloads", "analysis", "store", "history", "reporting"},
    "commands": {
        "common",
        "contract",
        "workloads",
        "models",
        "store",
        "analysis",
        "history",
        "reporting",
        "bisect",
        "config",
        "site",
    },
    "top": {"commands", "contract", "models", "workloads"},  # __init__ (the public names), __main__
}


def _package(path: Path) -> str:
    parts = path.relative_to(ROOT).parts
    return parts[0] if len(parts) > 1 else "top"


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the module at ``path``, parsed and walked once for all the checks that read it."""
    return tuple(ast.walk(ast.parse(path.read_text(), str(path))))


def _imports(path: Path):
    for node in _nodes(path):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module != "perfsuite" else [f"perfsuite.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "perfsuite" and len(parts) > 1:
                yield node.lineno, "top" if (ROOT / f"{parts[1]}.py").exists() else parts[1]


MODULES = sorted(p for p in ROOT.rglob("*.py"))
# One test per package, each checking every module of it: a test per module would cost pytest
# more than the checks.
PACKAGES = sorted({_package(p) for p in MODULES})


def _in(package: str, modules: list[Path]) -> list[Path]:
    return [p for p in modules if _package(p) == package]


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_go_one_way(package: str) -> None:
    allowed = ALLOWED[package] | {package}
    failures = []
    for path in _in(package, MODULES):
        wrong = [f"line {line}: perfsuite.{target}" for line, target in _imports(path) if target not in allowed]
        if wrong:
            failures.append(f"{path.relative_to(ROOT)} ({package}) imports {', '.join(wrong)}")
    assert not failures, "; ".join(failures)


def test_only_entry_modules_sit_at_the_top() -> None:
    flat = sorted(p.name for p in ROOT.glob("*.py"))
    assert flat == ["__init__.py", "__main__.py"]


def test_every_package_is_in_the_rules() -> None:
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(ALLOWED) - {"top"}


def test_no_function_of_the_plugin_is_over_60_lines() -> None:
    """A reader follows a case through short steps (perfsuite/plugin/pipeline.py), not long functions."""
    long = []
    for path in sorted((ROOT / "plugin").glob("*.py")):
        for node in _nodes(path):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long.append(f"{path.name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, ", ".join(long)


def test_the_layout_page_names_every_module() -> None:
    page = ROOT.parent / "docs" / "reference" / "layout.md"
    layout = page.read_text()
    missing = [str(p.relative_to(ROOT)) for p in MODULES if p.name != "__init__.py" and p.name not in layout]
    assert not missing, f"{page.relative_to(ROOT.parent)} does not name {', '.join(missing)}"


# What tells the workload kinds apart: their names, units and figure names. Only perfsuite.workloads
# may compare against them; every other module asks a Workload.
@functools.cache
def _kind_words() -> frozenset[str]:
    from perfsuite import workloads

    words = set()
    for w in workloads.all_kinds():
        words |= {w.name, w.unit, w.figure, w.per_window, w.key_prefix}
    return frozenset(words)


def _branches_on_kind(path: Path) -> list[str]:
    words = _kind_words()
    found = []
    for node in _nodes(path):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            named = [o.value for o in operands if isinstance(o, ast.Constant) and o.value in words]
            if named:
                found.append(f"line {node.lineno}: compares with {named[0]!r}")
        elif isinstance(node, ast.Attribute) and node.attr == "tokens" and isinstance(node.value, ast.Name):
            if node.value.id in ("spec", "s", "self"):
                found.append(f"line {node.lineno}: asks {node.value.id}.tokens")
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "startswith":
            args = [a.value for a in node.args if isinstance(a, ast.Constant)]
            if any(a in words for a in args):
                found.append(f"line {node.lineno}: tells a key's kind by its prefix {args[0]!r}")
    return found


OUTSIDE_WORKLOADS = [p for p in MODULES if _package(p) != "workloads"]


@pytest.mark.parametrize("package", [p for p in PACKAGES if p != "workloads"])
def test_no_module_but_the_workloads_branches_on_the_kind(package: str) -> None:
    failures = [
        f"{path.relative_to(ROOT)} tells workload kinds apart itself: {'; '.join(found)}"
        for path in _in(package, OUTSIDE_WORKLOADS)
        if (found := _branches_on_kind(path))
    ]
    assert not failures, "; ".join(failures)


def test_the_kind_check_finds_a_branch(tmp_path: Path) -> None:
    branchy = tmp_path / "branchy.py"
    branchy.write_text(
        "def f(info, spec, key, unit):\n"
        '    a = info.workload == "token"\n'
        '    b = unit != "img/s"\n'
        "    c = spec.tokens\n"
        '    d = key.startswith("seq")\n'
    )
    assert len(_branches_on_kind(branchy)) == 4
