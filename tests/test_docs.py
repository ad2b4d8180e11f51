"""The documentation site and the README: what `make docs` (mkdocs build --strict) cannot check.

The build itself fails on a broken link or anchor, and writes the option table, the
command-line reference and the command outputs from the code (docs/hooks.py). These tests
check that the generated parts are complete, that each format page documents its format's
current version, that the README stays short and links into the docs, and that the
failure messages the pages quote from real runs still have the shape the gate prints.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
from pathlib import Path

import pytest
from suite_files import FAKE_ARGS, faked_project

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")

pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def hooks():
    pytest.importorskip("mkdocs")  # the docs extra
    spec = importlib.util.spec_from_file_location("perfsuite_docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Page:
    def __init__(self, src_uri: str):
        self.file = type("File", (), {"src_uri": src_uri})()


def _expand(hooks, page: str) -> str:
    return hooks.on_page_markdown((DOCS / page).read_text(), _Page(page), None, None)


# --- generated parts ------------------------------------------------------------------


def test_the_option_reference_lists_every_option_once(hooks):
    from perfsuite.config.options import OPTIONS

    page = _expand(hooks, "reference/options.md")
    for o in OPTIONS:
        assert page.count(f'<a id="{o.flag.lstrip("-")}"></a>') == 1, o.flag
        assert o.text.replace("%%", "%").replace("|", "\\|").replace("<", "&lt;") in page, o.flag


def test_the_policy_table_is_the_codes(hooks):
    """Gating in CI shows perfsuite.plugin.policy.RULES, row by row, as the code has them."""
    from perfsuite.plugin.policy import RULES

    page = _expand(hooks, "guide/ci.md")
    rows = [line for line in page.splitlines() if line.startswith("| ") and "`" in line]
    for rule in RULES:
        (row,) = [r for r in rows if r.startswith(f"| {rule.finding} | {rule.when.replace('|', chr(92) + '|')} |")]
        outcome = row.split(" | ")[2]
        if rule.action is not None:
            assert outcome == hooks.OUTCOMES[rule.action], row
        else:
            assert all(f"`{value}`: {hooks.OUTCOMES[a]}" in outcome for value, a in rule.by_value.items()), row


def test_the_command_reference_shows_every_command(hooks):
    from perfsuite.commands.main import parser

    page = _expand(hooks, "reference/commands.md")
    commands = list(_commands(parser(), ()))
    assert len(commands) >= 9  # fingerprint, models, baseline and 3, history and 4
    for path, sub in commands:
        assert re.search(rf"^#+ {re.escape(' '.join(path))}$", page, re.MULTILINE), path
        assert f"$ {sub.prog} --help" in page, path


def _commands(p: argparse.ArgumentParser, path: tuple[str, ...]):
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _commands(sub, (*path, name))


def test_an_unknown_directive_or_option_stops_the_build(hooks):
    from mkdocs.exceptions import PluginError

    for text in ("<!-- perfsuite:nonsense -->", "<!-- perfsuite:options no-such-option -->"):
        with pytest.raises(PluginError, match="x.md"):
            hooks.on_page_markdown(f"# x\n\n{text}\n", _Page("x.md"), None, None)


def test_a_command_that_fails_stops_the_build(hooks):
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match="exited 1"):
        hooks.on_page_markdown(
            "<!-- perfsuite:run python -m perfsuite baseline show no-such.json -->\n", _Page("x.md"), None, None
        )


# --- file formats -------------------------------------------------------------------

FORMATS = [
    ("job.md", "perfsuite.contract.job", "JOB_VERSION", "Version"),
    ("worker-record.md", "perfsuite.contract.record", "RECORD_VERSION", "Version"),
    ("baseline.md", "perfsuite.store.baseline", "SCHEMA_VERSION", "Schema"),
    ("perf-json.md", "perfsuite.reporting.perf_json", "SCHEMA_VERSION", "Version"),
    ("history.md", "perfsuite.history.schema", "SCHEMA_VERSION", "Version"),
]


@pytest.mark.parametrize("page, module, constant, word", FORMATS, ids=[f[0] for f in FORMATS])
def test_each_format_page_documents_the_current_version(page, module, constant, word):
    if module.startswith("perfsuite.history"):
        pytest.importorskip("sqlalchemy")
    version = getattr(importlib.import_module(module), constant)
    text = (DOCS / "reference" / "formats" / page).read_text()
    headings = re.findall(rf"^## {word} (\d+)$", text, re.MULTILINE)
    assert str(version) in headings, f"{page}: no '## {word} {version}' section (found {headings})"
    assert headings[0] == str(version), f"{page}: the newest version comes first"


# --- the README -----------------------------------------------------------------------


def test_the_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= 150, len(lines)


def test_the_readme_keeps_the_quick_start_and_the_gpu_lines():
    text = README.read_text()
    for line in ("make perf", "make test", 'pip install -e ".[torch]"', "pytest tests_perf -m gpu --perf-gpus 4"):
        assert line in text, line
    assert "--perf-save-baseline" in text


def test_the_readme_links_resolve():
    """The README's links into docs/, anchors included (mkdocs checks the pages' own links)."""
    from markdown.extensions.toc import slugify

    source = README
    for target in LINK.findall(source.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        file = (source.parent / path).resolve()
        assert file.exists(), f"{source.name}: {target}"
        if anchor and file.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", file.read_text(), re.MULTILINE)
            slugs = {slugify(re.sub(r"`", "", h), "-") for h in headings}
            assert anchor in slugs, f"{source.name}: {target} (anchors there: {sorted(slugs)})"


def test_the_readme_picture_is_a_committed_png():
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README.read_text())
    assert images, "the README shows no picture"
    for image in images:
        assert (ROOT / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image


# --- messages the pages quote from real runs ------------------------------------------

NUMBER = r"[-+]?[\d.]+(?:e[-+]?\d+)?"
SIZE = rf"{NUMBER} (?:MiB|GiB|KiB|B)"
# The shapes of the gate's failure lines; the optional parts are what the situation adds
# (several devices: the variable update; a wide baseline spread: the noise floor).
SHAPES = {
    "regression: ": re.compile(
        rf"^regression: (torch|tf) \w+ on \d+ (CPU workers?|GPUs?), batch \d+/device, data location \w+"
        rf"(?: \(\w+\))?: {NUMBER} img/s vs baseline {NUMBER} img/s \({NUMBER}%, tolerance {NUMBER}%"
        rf"(?:, the baseline's noise floor)?, p={NUMBER}, \d+ bursts\) \[baseline \S+\.json\]$"
    ),
    "memory regression: ": re.compile(
        rf"^memory regression: (torch|tf) \w+ on \d+ (CPU workers?|GPUs?), batch \d+/device, data location \w+"
        rf"(?: \(\w+\))?: peak {SIZE} vs baseline {SIZE} \({NUMBER}%, tolerance {NUMBER}%, bursts {SIZE}"
        rf"(?:, {SIZE})*\) \[baseline \S+\.json\]$"
    ),
}


def _quoted(prefix: str) -> list[str]:
    """Every quoted message line starting with ``prefix``, in the docs and the README (wrapped lines joined)."""
    found = []
    for source in [README, *DOCS.rglob("*.md")]:
        lines = source.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.startswith(prefix):
                while i + 1 < len(lines) and re.match(r"^(vs baseline|\[baseline)", lines[i + 1]):
                    i += 1
                    line += " " + lines[i]
                found.append(line)
    return found


def _line(output: str, prefix: str) -> str:
    lines = [x.strip() for x in output.splitlines() if x.startswith(prefix)]
    assert lines, f"the gate printed no {prefix!r} line:\n{output}"
    return lines[0]


def test_quoted_failure_lines_have_the_shape_the_gate_prints(pytester, monkeypatch):
    project = faked_project(pytester)
    monkeypatch.setenv("PERFSUITE_FAKE_PEAK_MB", "1000")
    project.runpytest_inprocess(*FAKE_ARGS, "--perf-save-baseline").assert_outcomes(passed=1)
    monkeypatch.setenv("PERFSUITE_FAKE_RATE", "50")
    monkeypatch.setenv("PERFSUITE_FAKE_PEAK_MB", "1380")
    out = project.runpytest_inprocess(*FAKE_ARGS).stdout.str()
    for prefix, shape in SHAPES.items():
        live = _line(out, prefix)
        assert shape.match(live), f"the gate prints a {prefix!r} line of another shape now:\n{live}"
        quoted = _quoted(prefix)
        assert quoted, f"no quoted {prefix!r} line found"
        for line in quoted:
            assert shape.match(line), f"a quoted line no longer has the shape the gate prints:\n{line}\nnow:\n{live}"
