"""Times ``python -m perfsuite history site`` on a fleet-sized history, and its pages in a browser.

    .venv/bin/python benchmarks/site_build.py --history /tmp/perfsuite-fleet-bench.db \\
        --at 2026-01-30T05:00Z [--repeats 3] [--out DIR]

The history is the one ``benchmarks/fleet_query.py`` builds (1,000 hosts x 80 keys x 30
nights on one fingerprint); this script only reads it. Each build is a fresh process as a
user runs it: wall time, the CPU time and peak resident memory of that process
(``resource.getrusage`` of the children), then the folder's size. A rebuild with ``--since 24``
follows the last whole build. Then Debian's chromium (driven by Playwright) opens the front
page, one key page and the fleet page from disk, each ``--repeats`` times in a fresh tab:
the time to the page's ``load`` event and to its figure drawn (Plotly's promise resolved).
For comparison, a page that only loads plotly-cartesian.min.js is timed the same way. The load
average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"


def build(url: str, at: str, out: Path, extra: list[str]) -> dict[str, float]:
    """One ``history site`` run in a process of its own: wall and CPU seconds, peak RSS in MiB.
    ``ru_maxrss`` of the children is the largest child's so far: this script starts no other."""
    cmd = [sys.executable, "-m", "perfsuite", "history", "site", str(out), "--history", url, "--at", at, *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    print(done.stdout.strip().splitlines()[0], file=sys.stderr, flush=True)
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 2),
        "peak_rss_mib": round(after.ru_maxrss / 1024, 1),
    }


def folder_size(folder: Path) -> tuple[int, int]:
    """(bytes, files) under ``folder``."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def page_loads(folder: Path, repeats: int) -> dict[str, Any]:
    """Seconds to ``load`` and to the figure drawn, of the front page, one key page and the fleet page."""
    from playwright.sync_api import sync_playwright

    bare = folder / "assets" / "bare.html"  # plotly-cartesian.min.js alone: what any page that draws pays first
    bare.write_text("<!doctype html><html><body><script src='plotly-cartesian.min.js'></script></body></html>")
    pages = {
        "front": folder / "index.html",
        "key": sorted((folder / "key").glob("*.html"))[0],
        "fleet": sorted((folder / "fleet").glob("*.html"))[0],
        "plotly-cartesian.min.js alone": bare,
    }
    out: dict[str, Any] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for name, path in pages.items():
            loads, drawn = [], []
            for _ in range(repeats):
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                start = time.perf_counter()
                page.goto(path.as_uri(), wait_until="load")
                loads.append(time.perf_counter() - start)
                if name in ("key", "fleet"):  # the front page draws no figure: its lines are inline SVG
                    page.wait_for_selector(".plot[data-drawn='true']", timeout=30_000)
                drawn.append(time.perf_counter() - start)
                page.close()
            out[name] = {
                "page": str(path.relative_to(folder)),
                "bytes": path.stat().st_size,
                "load_s": [round(x, 3) for x in loads],
                "drawn_s": [round(x, 3) for x in drawn],
                "median_drawn_s": round(statistics.median(drawn), 3),
            }
        browser.close()
    bare.unlink()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", required=True, metavar="URL")
    parser.add_argument("--at", required=True, metavar="DATE")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="the site's folder (default: a temporary one, removed after)")
    args = parser.parse_args(argv)
    temporary = args.out is None
    out = args.out or Path(tempfile.mkdtemp(prefix="perfsuite-site-bench-")) / "site"
    result: dict[str, Any] = {"history": args.history, "at": args.at, "load_before": os.getloadavg()}
    try:
        result["builds"] = [build(args.history, args.at, out, []) for _ in range(args.repeats)]
        size, files = folder_size(out)
        result["site_mib"], result["files"] = round(size / 2**20, 1), files
        result["since_24h"] = build(args.history, args.at, out, ["--since", "24"])
        if Path(CHROMIUM).exists():
            result["pages"] = page_loads(out, args.repeats)
        else:
            result["pages"] = f"skipped: no {CHROMIUM}"
    finally:
        result["load_after"] = os.getloadavg()
        if temporary:
            shutil.rmtree(out.parent, ignore_errors=True)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
