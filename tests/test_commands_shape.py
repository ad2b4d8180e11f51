"""The commands' shape: no import circle among them, short modules and functions, and the exit
codes their ``--help`` says are the ones the command-line reference and the pytest page say."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "perfsuite"
DOCS = ROOT / "docs" / "reference"
# What the history's commands are made of; commands/bisect.py, and what it splits out, stand apart.
SHAPED = [
    *sorted((PACKAGE / "commands").glob("*.py")),
    *sorted((PACKAGE / "site").glob("*.py")),
    *sorted((PACKAGE / "config").glob("*.py")),
    *(
        PACKAGE / "analysis" / name
        for name in ("key_hint.py", "node_verdict.py", "peer_check.py", "steps.py", "incidents.py")
    ),
    PACKAGE / "history" / "fleet_read.py",
    PACKAGE / "history" / "fleet_groups.py",
]
SHAPED = [p for p in SHAPED if "bisect" not in p.name]
MAX_MODULE, MAX_FUNCTION = 600, 80
PARSERS = re.compile(r"^(add_parser|add_[a-z_]+|parser)$")  # argument parsers may list every argument


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path) -> set[str]:
    """The perfsuite modules ``path`` imports, at module level or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("perfsuite")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("perfsuite"):
            for a in node.names:  # ``from perfsuite.commands import history_fleet`` imports the module history_fleet
                name = f"{node.module}.{a.name}"
                is_module = (ROOT / Path(*name.split("."))).with_suffix(".py").exists()
                out.add(name if is_module else node.module)
    return out


def test_no_import_circle_among_the_commands():
    """Not even inside the package, and not through an import inside a function."""
    modules = {_module(p): p for p in (PACKAGE / "commands").glob("*.py")}
    edges = {m: {i for i in _imported(p) if i in modules and i != m} for m, p in modules.items()}
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        if m in path:
            raise AssertionError("import circle: " + " -> ".join([*path[path.index(m) :], m]))
        if m in done:
            return
        for n in sorted(edges[m]):
            visit(n, [*path, m])
        done.add(m)

    for m in sorted(modules):
        visit(m, [])


@pytest.mark.parametrize("path", SHAPED, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_and_functions_are_short(path: Path):
    lines = path.read_text().splitlines()
    assert len(lines) <= MAX_MODULE, f"{path.name}: {len(lines)} lines"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse("\n".join(lines)))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION
        and not PARSERS.match(node.name)
    ]
    assert not long, f"{path.name}: {', '.join(long)}"


# --- exit codes -----------------------------------------------------------------------------------

COMMANDS = (
    "history fleet",
    "history site",
    "triage",
    "history runs",
    "history trend",
    "history changes",
    "history import",
)


def _epilog_codes(command: str) -> dict[int, str]:
    from perfsuite.commands.main import parser

    p = parser()
    for word in command.split():
        sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
        p = sub.choices[word]
    text = " ".join((p.epilog or "").split())
    assert text.startswith("exit codes: "), f"{command}: its --help has no exit codes"
    return {int(code): meaning for code, meaning in re.findall(r"(\d+) ([^;]+)", text.removeprefix("exit codes: "))}


def _table() -> list[tuple[int, str, str]]:
    """(code, meaning, given by) of each row of the reference's exit-code table."""
    section = (DOCS / "commands.md").read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].isdigit():
            rows.append((int(cells[0]), cells[1], cells[2]))
    return rows


def _gives(given_by: str, command: str) -> bool:
    if given_by.startswith("every command"):
        return f"but `{command}`" not in given_by and f"but {command}" not in given_by
    return f"`{command}`" in given_by


@pytest.mark.parametrize("command", COMMANDS)
def test_each_commands_exit_codes_are_the_references(command):
    """Each code the command's epilog gives is a row of the reference that names the command (or
    every command), and each such row's code is in the epilog; a code of the command's own says
    what its epilog says."""
    codes = _epilog_codes(command)
    rows = [(code, meaning, by) for code, meaning, by in _table() if _gives(by, command)]
    assert {code for code, _, _ in rows} == set(codes), command
    for code, meaning, by in rows:
        if f"`{command}`" in by:  # the command's own row: the same words as its epilog
            assert codes[code].lower() in meaning.lower(), (command, code)


def test_the_pytest_page_names_every_command_with_a_code_of_its_own():
    own = {by for code, _, by in _table() if code not in (0, 1, 2)}
    named = re.findall(r"`([a-z -]+?)(?: --[a-z-]+)?`", " ".join(own))
    text = " ".join((DOCS / "pytest.md").read_text().split())
    missing = [c for c in dict.fromkeys(named) if f"`{c}" not in text]
    assert not missing, f"docs/reference/pytest.md does not name {', '.join(missing)} among the commands' own codes"
