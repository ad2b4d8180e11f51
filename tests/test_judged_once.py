"""Nothing is judged after the findings: the modules that record a run show what the findings hold
and import nothing that computes a statistic, a verdict, a change point or a diagnosis.

The rule, over every import of a recording module (at module level or inside a function,
``import x`` or ``from x import y``) and every name read from an imported perfsuite.analysis
module (``stats.median``):

* never scipy, numpy, pandas, statistics or otava, nor perfsuite.analysis.diagnosis, .changes,
  .memory, .node_verdict, .fleet, .peer_check, .incidents or .bisect_hint;
* of any other perfsuite.analysis module (stats, findings, attribution, ...), only names that
  are not functions: constants (the status names, in capitals) and types (``Verdict``,
  ``Findings``); and ``stats.worst``, which ranks status names and computes nothing;
* except perfsuite.analysis.result, .measurement, .mfu and .utilisation, whose functions read
  one burst's record into its figures (the median of its windows, TFLOP/s, a utilisation
  summary) with no baseline, tolerance or verdict: any of their names.

The recording modules: perfsuite/reporting/*.py, perfsuite/plugin/record.py (the records),
perfsuite/plugin/policy.py (the failing lines) and perfsuite/plugin/benchmark.py
(pytest-benchmark). perfsuite/site/ is not one of them: it draws the history across runs and
judges that with the rules the history commands use, not one run's findings.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECORDING = sorted(
    [
        *(ROOT / "perfsuite" / "reporting").glob("*.py"),
        *(ROOT / "perfsuite" / "plugin" / name for name in ("record.py", "policy.py", "benchmark.py")),
    ]
)
THIRD_PARTY = {"scipy", "numpy", "pandas", "statistics", "otava"}
ANALYSIS = "perfsuite.analysis"
JUDGING = {"diagnosis", "changes", "memory", "node_verdict", "fleet", "peer_check", "incidents", "bisect_hint"}
READERS = {"result", "measurement", "mfu", "utilisation"}
ALLOWED = {("stats", "worst")}


def _analysis_module(name: str) -> str | None:
    """'stats' for 'perfsuite.analysis.stats' (or anything below it); None outside perfsuite.analysis."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and ".".join(parts[:2]) == ANALYSIS else None


def uses(source: str) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of every import, and of every name read from an imported analysis
    module; ``name`` None where a whole module is imported."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}  # local name -> the analysis module it is
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out.append((node.lineno, a.name, None))
                if _analysis_module(a.name) and a.asname:
                    aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                if node.module == ANALYSIS:  # from perfsuite.analysis import stats
                    out.append((node.lineno, f"{ANALYSIS}.{a.name}", None))
                    aliases[a.asname or a.name] = f"{ANALYSIS}.{a.name}"
                else:
                    out.append((node.lineno, node.module, a.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            out.append((node.lineno, aliases[node.value.id], node.attr))
    return out


def violations(source: str) -> list[str]:
    """What ``source`` imports or reads against the module's rule, one line each."""
    wrong = []
    for line, module, name in uses(source):
        what = f"line {line}: {module}" + (f".{name}" if name else "")
        if module.split(".")[0] in THIRD_PARTY:
            wrong.append(what)
            continue
        part = _analysis_module(module)
        if part is None or part in READERS:
            continue
        if part in JUDGING:
            wrong.append(what)
        elif name is not None and (part, name) not in ALLOWED:
            found = getattr(importlib.import_module(f"{ANALYSIS}.{part}"), name, None)
            if callable(found) and not isinstance(found, type):
                wrong.append(what)
    return wrong


@pytest.mark.parametrize("path", RECORDING, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_recording_module_computes_no_judgement(path: Path) -> None:
    wrong = violations(path.read_text())
    assert not wrong, f"{path.relative_to(ROOT)} judges after the findings: {', '.join(wrong)}"


def test_the_rule_finds_what_it_forbids() -> None:
    source = """
from perfsuite.analysis import stats, mfu
from perfsuite.analysis.stats import REGRESSION, Verdict, worst, median
from perfsuite.analysis.findings import SCALING, scaling_figures

def later(values):
    import scipy.stats
    from perfsuite.analysis import changes
    from perfsuite.analysis.diagnosis import diagnose
    return stats.median(values), stats.PASS, stats.worst(values), mfu.fields(None, None, None)
"""
    found = {w.split(": ", 1)[1] for w in violations(source)}
    assert found == {
        "perfsuite.analysis.stats.median",  # imported by name, and read as stats.median
        "perfsuite.analysis.findings.scaling_figures",
        "scipy.stats",
        "perfsuite.analysis.changes",
        "perfsuite.analysis.diagnosis.diagnose",
    }
    assert len([w for w in violations(source) if w.endswith("stats.median")]) == 2
