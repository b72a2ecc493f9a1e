"""The per-job event log: one JSON object per line, appended by the ApplicationMaster."""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["EventLog", "log_tail", "read_events"]


class EventLog:
    """Appends events to ``path`` (JSONL). Each line is flushed at once so a crash loses nothing.
    With ``echo``, each event is also logged there as one readable line (the AM's log)."""

    def __init__(self, path: str | os.PathLike[str], echo: logging.Logger | None = None):
        self.path = Path(path)
        self.echo = echo
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open for the log's life, till close()

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"ts": round(time.time(), 3), "event": event, **fields}
        line = json.dumps(record, sort_keys=False, default=str)
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()
        if self.echo is not None:
            self.echo.info("%s %s", event, " ".join(f"{k}={_short(v)}" for k, v in fields.items()))
        return record

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def _short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + "..."


def read_events(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yields the events of a log; a torn last line (writer killed mid-write) is skipped."""
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 - the `with` below closes it; only opening may raise this
    except FileNotFoundError:
        return
    with fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def log_tail(path: str | os.PathLike[str] | None, lines: int = 20, skip: str | None = None) -> str:
    """The last non-empty lines of a log file (without those containing ``skip``), headed for use in
    diagnostics; empty when there is nothing to show."""
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    keep = [ln for ln in text.splitlines() if ln.strip() and not (skip and skip in ln)][-lines:]
    return ("Last lines of stderr:\n" + "\n".join(keep)) if keep else ""
