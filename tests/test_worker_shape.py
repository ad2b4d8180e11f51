"""The burst worker and the bisect command keep a shape a reader can follow: no import circle
among the worker's modules (every import counts: at module level, inside a function, under
TYPE_CHECKING), no function over 80 lines, no module over 600."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600
# What the function and module limits hold for: the worker, the bisect command and what it drives.
HELD = sorted(
    [
        *(ROOT / "perfsuite" / "worker").rglob("*.py"),
        *(ROOT / "perfsuite" / "bisect").rglob("*.py"),
        *(ROOT / "perfsuite" / "commands").glob("bisect*.py"),
    ]
)


def imports(paths: list[Path], root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules among ``paths`` (under ``root``) it imports, wherever the import is."""
    modules = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p for p in paths}
    out: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package up
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                found |= {base, *(f"{base}.{a.name}" for a in node.names)}
        out[name] = {m for m in found if m in modules and m != name and not name.startswith(m + ".")}
    return out


def circle(edges: dict[str, set[str]]) -> list[str] | None:
    try:
        TopologicalSorter(edges).prepare()
    except CycleError as exc:
        return list(exc.args[1])
    return None


def test_the_worker_has_no_import_circle() -> None:
    found = circle(imports(sorted((ROOT / "perfsuite" / "worker").rglob("*.py"))))
    assert found is None, "import circle: " + " <- ".join(found or [])


def test_a_circle_closed_inside_a_function_is_found(tmp_path: Path) -> None:
    package = tmp_path / "perfsuite" / "worker"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from perfsuite.worker import b\n")
    (package / "b.py").write_text("def f():\n    from . import c\n")
    (package / "c.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    import perfsuite.worker.a\n")
    edges = imports(sorted(package.glob("*.py")), tmp_path)
    assert sorted(set(circle(edges) or [])) == ["perfsuite.worker.a", "perfsuite.worker.b", "perfsuite.worker.c"]


@pytest.mark.parametrize("path", HELD, ids=lambda p: str(p.relative_to(ROOT / "perfsuite")))
def test_no_function_over_80_lines_and_no_module_over_600(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_MODULE_LINES, f"{path.name}: {len(text.splitlines())} lines"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{path.name}: " + ", ".join(long)
