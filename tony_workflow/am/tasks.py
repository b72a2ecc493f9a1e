"""The AM's record of one task in the current session (:class:`Task`), apart from the AM's state
(:mod:`.state`) so that the parts the state holds (an elastic group) can name it too."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..backends import Container
from ..progress import TaskProgress
from ..status import TaskState, TaskStatus

__all__ = ["Task"]

_FINAL = (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED, TaskState.LOST)


@dataclass
class Task:
    """The AM's record of one task in the current session."""

    status: TaskStatus
    container: Container
    session_id: int
    launched_at: float = field(default_factory=time.time)
    registered_at: float | None = None
    last_heartbeat: float | None = None
    fixed_port: int | None = None
    stopping: bool = False
    #: what the executor reported at the end: (exit code, diagnostics)
    reported: tuple[int, str] | None = None
    #: since when the AM waits for the cluster to say how the task's container ended
    held_since: float | None = None
    progress: TaskProgress = field(default_factory=TaskProgress)
    #: when it reached a final state (by the AM's clock)
    ended_at: float | None = None
    #: when its process ended, by its own host's clock (its executor's report; None if unsaid)
    exited_at: float | None = None

    @property
    def id(self) -> str:
        return self.status.task_id

    @property
    def final(self) -> bool:
        return self.status.state in _FINAL
