"""``python tests/floor_pins.py EXTRA...``: pip constraints that pin every package pyproject.toml
declares, in its dependencies and in the extras named, at the lowest version it allows.

``make test-floors`` installs perfsuite under these constraints in a venv of its own and runs the
fast tests there, so a floor is a version the tests passed on, not a guess. A requirement
``name>=X`` (whatever else its specifier says) becomes ``name==X``; one with no lower bound (an
exact pin, or ``<`` alone) is left to its own specifier. TensorFlow's floor pins
``tensorflow-cpu`` too, the build a machine without a GPU installs in its place.

``--index URL`` instead prints ``--extra-index-url URL`` where URL answers within a few seconds,
else nothing and a line on standard error: torch's CPU wheels live on an index of their own, and
where it cannot be reached PyPI's torch (a CUDA build with its nvidia-* wheels) is installed.
"""

from __future__ import annotations

import re
import sys
import tomllib
import urllib.request
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
# PEP 508's name, extras and version specifiers, as pyproject.toml writes them (no URLs, no markers).
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;]*)")
ALSO = {"tensorflow": ("tensorflow-cpu",)}
PROBE_S = 5.0


def floors(project: dict, extras: list[str]) -> dict[str, str]:
    """{package: its lowest allowed version} over the dependencies and ``extras``; the highest
    floor wins where two requirements name one package."""
    declared = project["project"].get("optional-dependencies", {})
    unknown = [e for e in extras if e not in declared]
    if unknown:
        raise SystemExit(f"floor_pins: no extra {', '.join(unknown)} in pyproject.toml ({', '.join(declared)})")
    found: dict[str, str] = {}
    for requirement in [*project["project"]["dependencies"], *(r for e in extras for r in declared[e])]:
        m = REQUIREMENT.match(requirement)
        if not m:
            continue
        name = m.group(1).lower().replace("_", "-")
        for spec in m.group(3).split(","):
            spec = spec.strip()
            if spec.startswith(">="):
                version = spec[2:].strip()
                if name not in found or _key(version) > _key(found[name]):
                    found[name] = version
    for name, others in ALSO.items():
        if name in found:
            found.update({other: found[name] for other in others})
    return found


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def reachable(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=PROBE_S):
            return True
    except (OSError, ValueError):
        return False


def main(argv: list[str]) -> int:
    if argv[:1] == ["--index"]:
        url = argv[1] if len(argv) > 1 else ""
        if url and reachable(url):
            print(f"--extra-index-url {url}")
        elif url:
            print(f"floor_pins: {url} did not answer: PyPI's torch is installed (a CUDA build)", file=sys.stderr)
        return 0
    project = tomllib.loads(PYPROJECT.read_text())
    for name, version in sorted(floors(project, argv).items()):
        print(f"{name}=={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
