"""The AM's view of training progress: per task, and for the job.

Executors forward what user code reported through :func:`tony_workflow.report` with every
heartbeat (:mod:`tony_workflow.task.reporting`). A :class:`TaskProgress` keeps one task's newest report,
when it arrived by the AM's clock (executors send the report's age, not a time stamp, so hosts need
not agree on the time), and enough recent points to estimate a rate. :func:`job_progress` makes the
job's progress from the chief's (TonY's chief: ``chief``, else ``worker:0``), or from the task that
reported last when the chief reports nothing: the fraction done, the latest metrics and an ETA.

Pure: no clock of its own, no I/O.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RATE_WINDOW", "TaskProgress", "job_progress"]

RATE_WINDOW = 120.0  # seconds of reports the rate (and so the ETA) is measured over
POINT_EVERY = 2.0    # seconds between the points kept for the rate
# Few points per task, spaced out: an AM of a thousand tasks heartbeating every second must not keep
# a quarter of a million objects alive for the collector to walk.
_MAX_POINTS = int(RATE_WINDOW / POINT_EVERY) + 2


@dataclass
class TaskProgress:
    step: int | None = None
    total: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    reports: int = 0
    #: when the newest report was made, by the AM's clock; None before the first
    updated_at: float | None = None
    _points: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=_MAX_POINTS))

    def update(self, snapshot: dict[str, Any] | None, now: float) -> bool:
        """Takes the progress a heartbeat carried; True when it holds a report not seen before."""
        if not isinstance(snapshot, dict):
            return False
        try:
            reports = int(snapshot.get("reports", 0))
            age = max(0.0, float(snapshot.get("age", 0.0)))
        except (TypeError, ValueError):
            return False
        if reports <= self.reports:
            return False
        self.reports = reports
        self.updated_at = now - age
        step, total = snapshot.get("step"), snapshot.get("total")
        if isinstance(step, int) and step >= 0:
            if self.step is not None and step < self.step:
                self._points.clear()  # the trainer went back (a restore): the old rate no longer applies
            self.step = step
            if not self._points or self.updated_at - self._points[-1][0] >= POINT_EVERY:
                self._points.append((self.updated_at, step))
        if isinstance(total, int) and total >= 0:
            self.total = total
        if isinstance(snapshot.get("metrics"), dict):
            self.metrics = dict(snapshot["metrics"])
        return True

    @property
    def fraction(self) -> float | None:
        if self.step is None or not self.total:
            return None
        return round(min(1.0, self.step / self.total), 4)

    def rate(self) -> float | None:
        """Steps per second over the last :data:`RATE_WINDOW` seconds of reports."""
        if len(self._points) < 2:
            return None
        t1, s1 = self._points[-1]
        older = [(t, s) for t, s in self._points if t1 - t <= RATE_WINDOW]
        t0, s0 = older[0]
        if t1 - t0 < 1.0 or s1 <= s0:
            return None
        rate: float = (s1 - s0) / (t1 - t0)
        return rate

    def eta(self, now: float) -> float | None:
        """Seconds until ``total``, at the recent rate, counted from ``now``."""
        rate = self.rate()
        if rate is None or self.total is None or self.step is None or self.updated_at is None:
            return None
        remaining = (self.total - self.step) / rate - (now - self.updated_at)
        return round(max(0.0, remaining), 1)

    def to_dict(self) -> dict[str, Any] | None:
        """The task's progress as shown in ``JobStatus.tasks[].progress``; None before a report."""
        if not self.reports:
            return None
        return {"step": self.step, "total": self.total, "fraction": self.fraction,
                "updated_at": round(self.updated_at, 3) if self.updated_at else None}


def job_progress(tasks: Iterable[tuple[str, TaskProgress]], chief: str, now: float) -> dict[str, Any] | None:
    """``JobStatus.progress``: ``step``, ``total``, ``fraction``, ``metrics``, ``updated_at``,
    ``eta_seconds`` and ``task`` (whose report it is); None while no task has reported."""
    reported = [(task_id, p) for task_id, p in tasks if p.reports]
    if not reported:
        return None
    by_id = dict(reported)
    task_id = chief if chief in by_id else max(reported, key=lambda item: item[1].updated_at or 0.0)[0]
    p = by_id[task_id]
    return {"step": p.step, "total": p.total, "fraction": p.fraction, "metrics": dict(p.metrics),
            "updated_at": round(p.updated_at, 3) if p.updated_at else None, "eta_seconds": p.eta(now),
            "task": task_id}
