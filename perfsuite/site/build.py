"""Writes the site's files: a whole site into a folder beside DIR, swapped in when complete, or
(``--since``) only the pages a recent run changed, each written atomically. A reader never
meets a half-written site, and a folder that is not a site is never replaced.

``manifest.json`` says what the site holds (each series' page, the history it shows), so that
``--since`` knows what is there already.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfsuite.common.files import atomic_write
from perfsuite.site import assets, pages
from perfsuite.site.data import SiteData, fp_name

MANIFEST = "manifest.json"
FORMAT = 1


class SiteError(Exception):
    """DIR cannot take the site; the message says why, in one line."""


def _manifest(site: SiteData) -> dict[str, Any]:
    return {
        "perfsuite_site": FORMAT,
        "history": site.history,
        "at": site.at.isoformat() + "Z",
        "nights": site.nights,
        "keys": {k.slug: {"fingerprint": k.fingerprint, "key": k.key} for k in site.keys},
        "fleets": {f.slug: {"fingerprint": f.fingerprint} for f in site.fleets},
        "incidents": [i["id"] for i in site.incidents],
    }


def read_manifest(folder: Path) -> dict[str, Any] | None:
    try:
        found = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and found.get("perfsuite_site") == FORMAT else None


def _pages(site: SiteData, only: set[str] | None = None) -> Iterator[tuple[str, str]]:
    """(path in the site, HTML) of each page; ``only``: the series' slugs whose pages to write
    (and their fingerprints' fleet pages), None for all."""
    yield "index.html", pages.front(site)
    fingerprints = {k.fingerprint for k in site.keys if only is None or k.slug in only}
    for k in site.keys:
        if only is None or k.slug in only:
            yield pages.key_href(k.slug), pages.key_page(site, k)
    for f in site.fleets:
        if f.fingerprint in fingerprints:
            yield pages.fleet_href(f.slug), pages.fleet_page(site, f)
    for i in site.incidents:  # numbered by rank: every build renumbers them
        yield pages.incident_href(i["id"]), pages.incident_page(site, i)


def check_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise SiteError(f"{folder} is a file, not a folder")
    if folder.is_dir() and any(folder.iterdir()) and read_manifest(folder) is None:
        raise SiteError(f"{folder} holds files and no perfsuite site ({MANIFEST}): not replacing it")


def write_all(site: SiteData, folder: Path) -> int:
    """The whole site, built beside ``folder`` and swapped in; the pages written."""
    check_folder(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{folder.name}.new-", dir=folder.parent))
    try:
        os.chmod(building, 0o755)  # a static host serves it; mkdtemp's folder is its owner's only
        count = 0
        for name, content in assets.files().items():
            _put(building / "assets" / name, content.decode())
        for path, html in _pages(site):
            _put(building / path, html)
            count += 1
        _put(building / MANIFEST, json.dumps(_manifest(site), indent=1))
        _swap(building, folder)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return count


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _swap(new: Path, folder: Path) -> None:
    if not folder.exists():
        new.rename(folder)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-", dir=folder.parent))
    old.rmdir()
    folder.rename(old)
    try:
        new.rename(folder)
    except OSError:
        old.rename(folder)  # the site that was there stays
        raise
    shutil.rmtree(old, ignore_errors=True)


def write_changed(site: SiteData, folder: Path) -> tuple[int, bool]:
    """The pages a recent run changed, each written atomically, where ``folder`` holds a site
    of the same history; the whole site otherwise. (pages written, whole)."""
    check_folder(folder)
    before = read_manifest(folder)
    if before is None or before.get("history") != site.history or before.get("nights") is None:
        return write_all(site, folder), True
    changed = site.changed or set()
    only = {k.slug for k in site.keys if (k.fingerprint, k.key) in changed or k.slug not in before.get("keys", {})}
    if assets.missing(folder):
        for name, content in assets.files().items():
            atomic_write(folder / "assets" / name, content)
    count = 0
    for path, html in _pages(site, only):
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, html.encode())
        count += 1
    gone = set(before.get("incidents", [])) - {i["id"] for i in site.incidents}
    for number in gone:
        (folder / pages.incident_href(number)).unlink(missing_ok=True)
    manifest = _manifest(site)
    manifest["keys"] = {**before.get("keys", {}), **manifest["keys"]}  # a series gone quiet keeps its page
    manifest["fleets"] = {**before.get("fleets", {}), **manifest["fleets"]}
    atomic_write(folder / MANIFEST, json.dumps(manifest, indent=1).encode())
    return count, False


def describe(site: SiteData) -> str:
    flagged = sum(len(f.flagged) for f in site.fleets)
    prints = sorted({fp_name(k.fingerprint) for k in site.keys})
    return (
        f"{len(site.keys)} series on {len(prints)} fingerprint{'s' if len(prints) != 1 else ''}, "
        f"{len(site.incidents)} incident{'s' if len(site.incidents) != 1 else ''} "
        f"({sum(1 for i in site.incidents if i['open'])} open), "
        f"{flagged} flagged node{'s' if flagged != 1 else ''}"
    )
