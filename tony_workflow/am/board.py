"""The ApplicationMaster's status board: the job's :class:`~tony_workflow.status.JobStatus` as the
AM keeps it, and its persisted copy for clients that outlive the AM.

Changes come at two speeds. A state change (a task registered, failed, a session started) is
persisted within a quarter second; figures that move with every heartbeat (resource metrics,
progress) only every two seconds, so a thousand tasks heartbeating do not have the AM rewrite
its status file many times a second. Live status always comes from the AM's API.

It also keeps the figures' history while the job runs (:class:`Series`): the job's step and each
task's memory, CPU and GPU use, sampled on the monitor's pass, for the charts of the job's page and
its history record.

Every method is called with the AM's lock held; the file is written by the monitor outside it.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..progress import TaskProgress, job_progress
from ..status import JobStatus, StatusFile

__all__ = ["SERIES_FILE", "Series", "StatusBoard"]

SERIES_FILE = "series.json"  # the figures' history, written beside the status as the job ends

STATE_DELAY = 0.25    # seconds a state change may wait to be persisted
FIGURES_DELAY = 2.0   # seconds changed figures may wait
PROGRESS_EVERY = 5.0  # seconds between progress reports to the cluster (YARN's progress bar)


class Series:
    """Figures over time, at most every ``every`` seconds and at most ``limit`` points: when full,
    every other point is dropped and the interval doubles, so a long job keeps its whole course.
    Beside each task's resource figures, the training's own: the step, and each metric the job
    reports (``report(loss=...)``, the Keras callback's logs), the first :attr:`MAX_METRICS` named."""

    FIGURES = ("rss_mb", "cpu_percent", "gpu_util_percent", "gpu_mem_mb")
    MAX_METRICS = 16

    def __init__(self, every: float = 1.0, limit: int = 720):
        self.every, self.limit = every, limit
        self.t: list[float] = []
        self.step: list[int | None] = []
        self.tasks: dict[str, dict[str, list[float | None]]] = {}
        self.metrics: dict[str, list[float | None]] = {}
        self._last = 0.0

    def add(self, now: float, status: JobStatus, force: bool = False) -> None:
        """A point for ``now``, if ``every`` seconds passed since the last (with ``force``, if any
        time did: the job's last figures are its end's, not what the last pass before it saw)."""
        if now - self._last < self.every and not (force and now > self._last):
            return
        self._last = now
        n = len(self.t)
        self.t.append(round(now, 1))
        self.step.append((status.progress or {}).get("step"))
        for task in status.tasks:
            figures = self.tasks.setdefault(task.task_id, {k: [None] * n for k in self.FIGURES})
            for k in self.FIGURES:
                figures[k].append(task.metrics.get(k))
        reported = (status.progress or {}).get("metrics") or {}
        for name, value in reported.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and (
                    name in self.metrics or len(self.metrics) < self.MAX_METRICS):
                self.metrics.setdefault(str(name), [None] * n).append(float(value))
        for line in [*(v for f in self.tasks.values() for v in f.values()), *self.metrics.values()]:
            line.extend([None] * (n + 1 - len(line)))  # a task or metric not seen now keeps its place with a gap
        if len(self.t) >= self.limit:
            self.t, self.step = self.t[::2], self.step[::2]
            for figures in self.tasks.values():
                for k in figures:
                    figures[k] = figures[k][::2]
            self.metrics = {k: v[::2] for k, v in self.metrics.items()}
            self.every *= 2

    def to_dict(self) -> dict[str, Any]:
        return {"t": list(self.t), "step": list(self.step),
                "tasks": {task: {k: list(v) for k, v in figures.items()} for task, figures in self.tasks.items()},
                "metrics": {k: list(v) for k, v in self.metrics.items()}}


class StatusBoard:
    def __init__(self, status: JobStatus, path: Path, report_progress: Callable[[float], None],
                 series_every: float = 1.0):
        self.series = Series(series_every)
        self.status = status
        self.file = StatusFile(path)
        self._report_progress = report_progress
        self._dirty = False       # a state changed
        self._stale = False       # only figures changed
        self._progressed = False  # a task reported progress: the job's is due to be worked out again
        self._told = (0.0, None)  # when the cluster was last told the fraction done, and what

    def changed(self, force: bool = False) -> None:
        """Marks the status changed; with ``force``, persists it now."""
        self._dirty = True
        if force:
            self.persist(self.snapshot())

    def series_dict(self) -> dict[str, Any]:
        return self.series.to_dict()

    def save_series(self, path: Path, now: float) -> None:
        """Writes the figures' history, ending on a point for ``now``."""
        self.series.add(now, self.status, force=True)
        try:
            path.write_text(json.dumps(self.series.to_dict()))
        except OSError:
            pass  # the charts of a finished job are a nicety; its outcome must not depend on them

    def figures_changed(self, progressed: bool = False) -> None:
        self._stale = True
        self._progressed = self._progressed or progressed

    def snapshot(self, figures: bool = True) -> dict[str, Any] | None:
        """A copy of the status if it changed since the last snapshot (with ``figures``, also if
        only metrics or progress did), else None. Only the copy is made here, under the AM's lock:
        turning a thousand tasks into JSON takes milliseconds that heartbeats should not wait for
        (:meth:`persist` does it, outside the lock)."""
        if not (self._dirty or (figures and self._stale)):
            return None
        self._dirty = self._stale = False
        return self.status.to_dict()

    def persist(self, snapshot: dict[str, Any] | None) -> None:
        """Writes a :meth:`snapshot` to the status file (nothing for None)."""
        if snapshot is not None:
            self.file.write(json.dumps(snapshot))

    def due(self, progress: Iterable[tuple[str, TaskProgress]], chief: str, now: float) -> dict[str, Any] | None:
        """The monitor's pass: works out the job's progress if a task reported some, tells the
        cluster now and then, and returns the snapshot due to be persisted (None if none is), for
        :meth:`persist` after the lock is released."""
        if self._progressed:
            self._progressed = False
            self.status.progress = job_progress(progress, chief, now)
            fraction = (self.status.progress or {}).get("fraction")
            told_at, told = self._told
            if fraction is not None and fraction != told and now - told_at >= PROGRESS_EVERY:
                self._told = (now, fraction)
                threading.Thread(target=self._report_progress, args=(fraction,), daemon=True).start()
        self.series.add(now, self.status)
        age = self.file.age()
        return self.snapshot(figures=age >= FIGURES_DELAY) if age >= STATE_DELAY else None
