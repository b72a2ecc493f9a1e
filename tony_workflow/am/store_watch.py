"""The ApplicationMaster's view of the checkpoint store: trouble made visible, and acted on.

Executors mirror checkpoints to the store and report each failure with their heartbeats until a
write succeeds again; they report, when they start, which checkpoint they resumed from and how many
steps newer the newest one seen was. This module turns those reports into events
(``checkpoint_store_failed``, ``checkpoint_store_recovered``, ``checkpoint_restored``), into the
job's ``warnings`` (shown by ``tony status``, the CLI's progress lines, the Airflow task log and the
Azkaban job log) and, with ``tony.checkpoint.on-store-failure: fail``, into the job's failure.
It keeps no lock of its own: the AM calls it under its lock.
"""
from __future__ import annotations

from typing import Any

from ..events import EventLog

__all__ = ["ON_STORE_FAILURE", "StoreWatch"]

#: What tony.checkpoint.on-store-failure allows.
ON_STORE_FAILURE = ("warn", "fail")


class StoreWatch:
    def __init__(self, events: EventLog, mode: str = "warn"):
        self.events = events
        self.mode = mode
        self._errors: dict[str, str] = {}     # task id -> the store error it reports
        self._resumed: str | None = None      # the warning about the last resume, if steps were lost

    @property
    def warnings(self) -> list[str]:
        out = [f"{task}: {error}" for task, error in sorted(self._errors.items())]
        if self._resumed:
            out.append(self._resumed)
        return out

    def report(self, task_id: str, session: int, error: str | None, ok: bool = False) -> tuple[bool, str | None]:
        """A heartbeat's word on the store: ``error`` when its last write failed, ``ok`` when it
        succeeded, neither when the task has not written yet. Returns whether the warnings
        changed, and the diagnostics to fail the job with when the mode says so. A failure stays
        until a write succeeds, across sessions (a new task of the same id reports on it)."""
        before = self._errors.get(task_id)
        if error == before or (error is None and not (ok and before)):
            return False, None
        if error:
            self._errors[task_id] = error
            self.events.emit("checkpoint_store_failed", task=task_id, session=session, error=error)
        else:
            del self._errors[task_id]
            self.events.emit("checkpoint_store_recovered", task=task_id, session=session)
        if error and self.mode == "fail":
            return True, (f"{task_id} {error}; the job fails instead of training on without durable "
                          f"checkpoints (tony.checkpoint.on-store-failure=fail)")
        return True, None

    def restored(self, task_id: str, session: int, info: dict[str, Any]) -> bool:
        """A task's report of what it resumed from; returns whether the warnings changed."""
        self.events.emit("checkpoint_restored", task=task_id, session=session, **info)
        lost = int(info.get("lost_steps") or 0)
        if not lost:
            return False
        if info.get("source"):
            text = (f"session {session} resumed from step {info.get('step')} of {info['source']}; "
                    f"the newest checkpoint seen was {lost} step(s) newer but incomplete: {lost} step(s) lost")
        else:
            text = (f"session {session} found no complete checkpoint and started over; the newest seen was "
                    f"at step {lost}: {lost} step(s) lost")
        changed = text != self._resumed
        self._resumed = text
        return changed
