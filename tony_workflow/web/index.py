"""What the history server lists: an index of the job history kept in memory, so that a page of
10,000 jobs filtered by DAG, flow, user, state and time costs a scan of summaries, not a read of
every record.

A record never changes once written (a job's history is written once, when it ends), so each is
read once: the index lists the history's keys again when it is older than ``ttl`` seconds (one
listing of the store), reads the records it has not seen (on a few threads: HDFS answers each
read in milliseconds, not microseconds), and forgets those purged since. A summary holds what a
row of the list shows and what the filters and the access check need: the job's user and
submitter, its context and tags, and who its ``tony.application.view-acls`` let see it.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..context import matches
from ..history import JobHistory, SubmitterHistory
from ..spec.values import parse_acl

__all__ = ["Filters", "HistoryIndex", "Page", "summary_of"]

_READERS = 8


@dataclass(frozen=True)
class Filters:
    """What a list page asks for: context fields by name (``dag_id``, ``flow_id``, ...; compared
    without case), the job's user, its state, when it started (``since`` to ``until``, epoch
    seconds) and a piece of its name."""

    context: Mapping[str, str] = field(default_factory=dict)
    user: str | None = None
    state: str | None = None
    since: float | None = None
    until: float | None = None
    name: str | None = None

    def admits(self, s: Mapping[str, Any]) -> bool:
        started = s.get("started_at") or 0
        return ((not self.user or s.get("user") == self.user)
                and (not self.state or s.get("state") == self.state.upper())
                and (self.since is None or started >= self.since)
                and (self.until is None or started < self.until)
                and (not self.name or self.name.lower() in str(s.get("name") or "").lower())
                and (not self.context or matches(s.get("context"), self.context)))


@dataclass(frozen=True)
class Page:
    """One page of a listing: its rows, how many matched in all, and where it starts."""

    rows: list[dict[str, Any]]
    total: int
    offset: int
    limit: int

    @property
    def next_offset(self) -> int | None:
        return self.offset + self.limit if self.offset + self.limit < self.total else None

    @property
    def previous_offset(self) -> int | None:
        return max(0, self.offset - self.limit) if self.offset > 0 else None


def summary_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the index keeps of a record (``view_acls``: (users, groups), or None when the record
    predates keeping them in it and its configuration must be read to tell)."""
    acls = record.get("view_acls")
    return {"application_id": record.get("application_id"), "name": record.get("name"),
            "user": record.get("user"), "submitter": record.get("submitter") or record.get("user"),
            "state": record.get("state"), "started_at": record.get("started_at"),
            "finished_at": record.get("finished_at"), "context": record.get("context") or {},
            "tags": record.get("tags") or [], "tasks": len(record.get("tasks") or []),
            "backend": record.get("backend"), "tensorboard": bool(record.get("tensorboard_logs")),
            "view_acls": parse_acl(acls) if isinstance(acls, str) else None}


class _Shelf:
    """One history the index reads, and which of its records belong (None: all)."""

    def __init__(self, history: JobHistory, belongs: Callable[[Mapping[str, Any]], bool] | None = None):
        self.history, self.belongs = history, belongs


class HistoryIndex:
    """Summaries of every record of ``history`` (a :class:`JobHistory`, or a submitter's, whose
    proxied users' histories are read for the jobs it submitted), newest first."""

    def __init__(self, history: JobHistory | SubmitterHistory, ttl: float = 5.0):
        if isinstance(history, SubmitterHistory):
            submitter = history.submitter

            def submitted(s: Mapping[str, Any]) -> bool:
                return s.get("submitter") == submitter
            self._shelves = [_Shelf(history.own)] + [_Shelf(h, submitted) for _, h in history.proxied]
        else:
            self._shelves = [_Shelf(history)]
        self.ttl = ttl
        self._lock = threading.Lock()
        self._refreshed = 0.0
        self._summaries: dict[str, dict[str, Any] | None] = {}  # record key (per shelf) -> summary
        self._where: dict[str, tuple[_Shelf, str]] = {}  # application id -> its latest record
        self._ordered: list[dict[str, Any]] = []

    def refresh(self, force: bool = False) -> None:
        """Lists the histories again (when older than ``ttl``, or ``force``), and reads what is new."""
        with self._lock:
            if not force and time.monotonic() - self._refreshed < self.ttl:
                return
            seen: dict[str, tuple[_Shelf, str, dict[str, Any]]] = {}
            for n, shelf in enumerate(self._shelves):
                for key, meta in shelf.history.entries():
                    seen[f"{n}:{key}"] = (shelf, key, meta)
            new = [k for k in seen if k not in self._summaries]
            with ThreadPoolExecutor(_READERS) as pool:
                read = list(pool.map(lambda k: self._summary(*seen[k]), new))
            for k, s in zip(new, read):
                self._summaries[k] = s
            for k in [k for k in self._summaries if k not in seen]:
                del self._summaries[k]
            latest: dict[str, tuple[float, str]] = {}
            for k, s in self._summaries.items():
                belongs = seen[k][0].belongs
                if s is None or (belongs is not None and not belongs(s)):
                    continue
                app = s["application_id"]
                if app not in latest or (s.get("finished_at") or 0) > latest[app][0]:
                    latest[app] = (s.get("finished_at") or 0, k)
            self._where = {app: (seen[k][0], seen[k][1]) for app, (_, k) in latest.items()}
            self._ordered = sorted((s for _, k in latest.values() if (s := self._summaries[k]) is not None),
                                   key=lambda s: s.get("finished_at") or 0, reverse=True)
            self._refreshed = time.monotonic()

    @staticmethod
    def _summary(shelf: _Shelf, key: str, meta: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return summary_of(shelf.history.read(key))
        except (OSError, ValueError):  # purged meanwhile, or half written by a writer that died
            return {**meta, "name": None, "context": {}, "tags": [], "tasks": 0, "view_acls": None,
                    "submitter": meta.get("user"), "tensorboard": False}

    def __len__(self) -> int:
        self.refresh()
        return len(self._ordered)

    def page(self, filters: Filters, offset: int = 0, limit: int = 50,
             visible: Callable[[Mapping[str, Any]], bool] | None = None) -> Page:
        """The summaries ``filters`` admit (and ``visible``, the viewer's access, allows), newest
        first, from ``offset``, at most ``limit``."""
        self.refresh()
        matched = [s for s in self._ordered if filters.admits(s) and (visible is None or visible(s))]
        offset = max(0, offset)
        return Page(matched[offset:offset + limit], len(matched), offset, limit)

    def summary(self, app_id: str) -> dict[str, Any] | None:
        self.refresh()
        where = self._where.get(app_id)
        if where is None:
            return None
        shelf, key = where
        n = self._shelves.index(shelf)
        return self._summaries.get(f"{n}:{key}")

    def record(self, app_id: str) -> dict[str, Any] | None:
        """The whole record of ``app_id`` (with its configuration), read from the history."""
        self.refresh()
        where = self._where.get(app_id)
        if where is None:
            return None
        shelf, key = where
        try:
            record = shelf.history.read(key)
        except (OSError, ValueError):
            return None
        record["conf"] = shelf.history.read_conf(key)
        return record

    def history_of(self, app_id: str) -> JobHistory | None:
        """The history holding ``app_id``'s record (where its kept files are too)."""
        found = self.where(app_id)
        return found[0] if found else None

    def where(self, app_id: str) -> tuple[JobHistory, str] | None:
        """The history holding ``app_id``'s latest record, and the record's key there."""
        found = self._where.get(app_id)
        return (found[0].history, found[1]) if found else None

    def list(self, context: Mapping[str, str] | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Whole records, newest first, of the jobs whose context has the fields of ``context``
        (as :meth:`JobHistory.list` gives them, for :func:`~tony_workflow.advice.runs_of`),
        ``limit`` at most; only those records are read."""
        self.refresh()
        found = [s["application_id"] for s in self._ordered if matches(s.get("context"), context or {})]
        return [r for a in found[:limit] if (r := self.record(a)) is not None]
