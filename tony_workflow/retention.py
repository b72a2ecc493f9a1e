"""Removing the directories of finished jobs on the embedded cluster.

A job's directory holds its spec, status, events, logs, the copy of its source each container
ran, and (by default) its checkpoint store. Nothing else ever deletes it, so finished jobs are
removed once they have been final for ``tony.local.retention-sec`` (default 7 days; 0 keeps them
forever): by the client at submission, at most once an hour, and on demand by ``tony clean``.
A directory is removed only when its status is final and nothing of the job runs: its supervisor
and AM are gone (checked by pid and start time).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import process
from .status import JobStatus, check_application_id

__all__ = ["Removal", "clean", "clean_now_and_then", "dir_size", "human_size", "parse_duration", "removable"]

#: How often the client looks for expired jobs when it submits one.
CLEAN_EVERY_S = 3600


@dataclass(frozen=True)
class Removal:
    """One application directory that was (or, dry, would be) removed."""

    application_id: str
    path: Path
    bytes: int
    finished_at: float | None


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    except (OSError, ValueError):
        return None


def running(app_dir: Path) -> bool:
    """Whether a process of the job in ``app_dir`` (its supervisor or its AM) still runs."""
    for name in ("supervisor.json", "am.json"):
        info = _json(app_dir / name)
        if info and info.get("pid") and process.alive(int(info["pid"]), info.get("started")):
            return True
    return False


def removable(app_dir: Path) -> tuple[bool, str, float | None]:
    """Whether ``app_dir`` may be removed, why not, and when its job finished."""
    data = _json(app_dir / "status.json")
    if data is None:
        return False, "it has no readable status", None
    status = JobStatus.from_dict(data)
    if not status.is_final:
        return False, f"it is {status.state}, not final", None
    if running(app_dir):
        return False, "a process of it still runs", status.finished_at
    return True, "", status.finished_at


def dir_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, name))
                # A hard-linked file is counted once, by the link that holds it last.
                if st.st_nlink <= 1:
                    total += st.st_blocks * 512
    return total


def clean(apps_dir: Path, *, older_than_s: float | None, app_ids: list[str] | None = None,
          dry_run: bool = False, now: float | None = None) -> tuple[list[Removal], list[tuple[str, str]]]:
    """Removes the directories of final jobs under ``apps_dir``: the ones named (``app_ids``), or
    every one final for longer than ``older_than_s``. Returns what was removed and, for named
    jobs that were not, (id, why)."""
    now = time.time() if now is None else now
    removed: list[Removal] = []
    refused: list[tuple[str, str]] = []
    if app_ids:
        candidates = [apps_dir / check_application_id(a) for a in app_ids]
    else:
        candidates = sorted(p for p in apps_dir.glob("application_*") if p.is_dir())
    for d in candidates:
        if not d.is_dir():
            refused.append((d.name, "no such application"))
            continue
        ok, why, finished = removable(d)
        if not ok:
            if app_ids:
                refused.append((d.name, why))
            continue
        if not app_ids and (older_than_s is None or finished is None or now - finished < older_than_s):
            continue
        size = dir_size(d)
        if not dry_run:
            shutil.rmtree(d, ignore_errors=True)
        removed.append(Removal(d.name, d, size, finished))
    return removed, refused


def clean_now_and_then(cluster_dir: Path, retention_s: float) -> list[Removal]:
    """What the client runs at submission: expired jobs removed, at most every CLEAN_EVERY_S."""
    if retention_s <= 0:
        return []
    marker = cluster_dir / "last-clean"
    with contextlib.suppress(OSError):
        if time.time() - marker.stat().st_mtime < CLEAN_EVERY_S:
            return []
    with contextlib.suppress(OSError):
        marker.touch()
    removed, _ = clean(cluster_dir / "apps", older_than_s=retention_s)
    return removed


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``12h``, ``7d`` or ``2w`` in seconds; ValueError naming the forms."""
    value = str(text).strip().lower()
    unit = value[-1:] if value[-1:] in _UNITS else "s"
    number = value[:-1] if value[-1:] in _UNITS else value
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"--older-than: {text!r} is not a duration; use a number of seconds or one with "
                         "a unit, such as 90s, 30m, 12h, 7d or 2w")
    return seconds


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
