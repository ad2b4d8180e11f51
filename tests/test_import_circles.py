"""No import circle in the plugin's side of the package: perfsuite.analysis, perfsuite.reporting
and perfsuite.plugin. Every import counts, at module level, inside a function or under
``TYPE_CHECKING``: a circle that only a function's import closes still ties the modules
together, and only the order they happen to load in keeps it from failing."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("analysis", "reporting", "plugin")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / "perfsuite" / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules among ``modules`` it imports."""
    out: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # "from perfsuite.analysis import stats" imports the module perfsuite.analysis.stats
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            out[name] |= {t for t in targets if t in modules and t != name}
    return out


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle() -> None:
    found = circles(graph(_modules()))
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_a_circle_is_found_however_long() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
