"""A history password given on the command line or in the environment is written nowhere:
CI uploads --perf-json, the report folder, JUnit XML and the spool as artifacts."""

import os
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy", reason="the history needs its extra: pip install -e '.[history]'")
pytest.importorskip("psycopg", reason="the PostgreSQL history needs its extra: pip install -e '.[history]'")

from suite_files import FAKE_ARGS, faked_project, free_port  # noqa: E402

from perfsuite.common.text import redact  # noqa: E402

pytest_plugins = ["pytester"]

URL_PASSWORD = "Url-S3cret_pw"
ENV_PASSWORD = "Env-S3cret_pw"


@pytest.mark.parametrize(
    "given, shown",
    [
        ("postgresql://perf:pw@db:5432/perf", "postgresql://perf:***@db:5432/perf"),
        ("--perf-history=postgres://u:p@ss@h/db", "--perf-history=postgres://u:***@h/db"),
        (
            "postgresql://perf@db/perf?sslmode=require&password=pw",
            "postgresql://perf@db/perf?sslmode=require&password=***",
        ),
        ("host=db password=pw dbname=perf", "host=db password=*** dbname=perf"),
        ("sqlite:////tmp/perf.db", "sqlite:////tmp/perf.db"),
        ("postgresql://perf@db/perf", "postgresql://perf@db/perf"),
    ],
)
def test_redact(given, shown):
    assert redact(given) == shown


def _files_below(*roots: Path):
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                yield path


def test_no_file_a_run_writes_holds_the_password(pytester, monkeypatch, tmp_path):
    cache = tmp_path / "cache"
    monkeypatch.setenv("PERFSUITE_CACHE", str(cache))
    monkeypatch.setenv("PGPASSWORD", ENV_PASSWORD)  # libpq reads it; perfsuite never writes it
    project = faked_project(pytester)
    url = f"postgresql://perf:{URL_PASSWORD}@127.0.0.1:{free_port()}/perf"  # nothing listens: the run is spooled
    result = project.runpytest_inprocess(
        *FAKE_ARGS,
        "--perf-missing-baseline",
        "pass",
        "--perf-history",
        url,
        "--perf-history-retry",  # spooled at once
        "0",
        "--perf-label",
        "pool=a",
        "--perf-json",
        "results.json",
        "--perf-report",
        "report",
        "--junitxml",
        "junit.xml",
        "--perf-keep-burst-dirs",
    )
    result.assert_outcomes(passed=1)
    out = result.stdout.str() + result.stderr.str()
    assert "spooled" in out and "postgresql://perf:***@127.0.0.1" in out
    written = list(_files_below(project.path, cache))
    names = {p.name for p in written}
    assert {"results.json", "report.md", "report.html", "junit.xml"} <= names
    assert any(p.parent.parent.name == "history-spool" for p in written)
    for text in (out, *(p.read_bytes().decode(errors="replace") for p in written)):
        assert URL_PASSWORD not in text and ENV_PASSWORD not in text
    # The run's command is still recorded, with the password masked.
    assert "postgresql://perf:***@127.0.0.1" in (project.path / "results.json").read_text()
    assert os.environ["PGPASSWORD"] == ENV_PASSWORD
