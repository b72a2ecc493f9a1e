"""The ApplicationMaster's status board: the job's :class:`~tony_workflow.status.JobStatus` as the
AM keeps it, and its persisted copy for clients that outlive the AM.

Changes come at two speeds. A state change (a task registered, failed, a session started) is
persisted within a quarter second; figures that move with every heartbeat (resource metrics,
progress) only every two seconds, so a thousand tasks heartbeating do not have the AM rewrite
its status file many times a second. Live status always comes from the AM's API.

Every method is called with the AM's lock held; the file is written by the monitor outside it.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

from .progress import TaskProgress, job_progress
from .status import JobStatus, StatusFile, TaskStatus

__all__ = ["StatusBoard"]

STATE_DELAY = 0.25    # seconds a state change may wait to be persisted
FIGURES_DELAY = 2.0   # seconds changed figures may wait
PROGRESS_EVERY = 5.0  # seconds between progress reports to the cluster (YARN's progress bar)


class StatusBoard:
    def __init__(self, status: JobStatus, path: Path, report_progress: Callable[[float], None]):
        self.status = status
        self.file = StatusFile(path)
        self._report_progress = report_progress
        self._dirty = False       # a state changed
        self._stale = False       # only figures changed
        self._progressed = False  # a task reported progress: the job's is due to be worked out again
        self._told = (0.0, None)  # when the cluster was last told the fraction done, and what

    def changed(self, tasks: Iterable[TaskStatus], force: bool = False) -> None:
        """Marks the status changed with the session's ``tasks``; with ``force``, persists it now."""
        self.status.tasks = list(tasks)
        self._dirty = True
        if force:
            self.file.write(self.snapshot())

    def figures_changed(self, progressed: bool = False) -> None:
        self._stale = True
        self._progressed = self._progressed or progressed

    def snapshot(self, figures: bool = True) -> str | None:
        """The status as JSON if it changed since the last snapshot (with ``figures``, also if only
        metrics or progress did), else None."""
        if not (self._dirty or (figures and self._stale)):
            return None
        self._dirty = self._stale = False
        return json.dumps(self.status.to_dict())

    def due(self, progress: Iterable[tuple[str, TaskProgress]], chief: str, now: float) -> str | None:
        """The monitor's pass: works out the job's progress if a task reported some, tells the
        cluster now and then, and returns the snapshot due to be persisted (None if none is)."""
        if self._progressed:
            self._progressed = False
            self.status.progress = job_progress(progress, chief, now)
            fraction = (self.status.progress or {}).get("fraction")
            told_at, told = self._told
            if fraction is not None and fraction != told and now - told_at >= PROGRESS_EVERY:
                self._told = (now, fraction)
                threading.Thread(target=self._report_progress, args=(fraction,), daemon=True).start()
        age = self.file.age()
        return self.snapshot(figures=age >= FIGURES_DELAY) if age >= STATE_DELAY else None
