"""When the AM gives up on a task that is still running: silence and stalls.

Two rules, both taken once from the spec and applied by the AM's monitor on every pass:

- **Silence**: no heartbeat for ``tony.task.heartbeat-interval-ms × tony.task.max-missed-heartbeats``
  (TonY's rule), or for ``tony.task.heartbeat-timeout-ms`` when that comes first, but never fewer
  than three missed beats. The executor (or its host) is gone or frozen.
- **Stall**: the executor still heartbeats, but user code that has reported progress
  (:func:`tony_workflow.report`) has reported none for ``tony.task.progress-timeout-ms``. The
  trainer is hung: a deadlocked collective, a stuck input pipeline, a stopped process. A task that
  never reported is never judged by this rule.

Either way the task is LOST and the restart rules apply. Pure: the caller passes the clock.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..spec import JobSpec

__all__ = ["Liveness"]


@dataclass(frozen=True)
class Liveness:
    heartbeat_interval_ms: int
    max_missed_heartbeats: int
    heartbeat_timeout_ms: int = 0
    progress_timeout_ms: int = 0
    # Worked out once in __post_init__: the monitor asks for every task on every pass.
    #: seconds of silence after which a task is lost
    heartbeat_expiry: float = field(init=False)
    _by_count: float = field(init=False, repr=False)
    _progress_s: float = field(init=False, repr=False)

    @classmethod
    def from_spec(cls, spec: JobSpec) -> Liveness:
        return cls(spec.heartbeat_interval_ms, spec.max_missed_heartbeats, spec.heartbeat_timeout_ms,
                   spec.progress_timeout_ms)

    def __post_init__(self) -> None:
        by_count = max(1, self.heartbeat_interval_ms) * max(3, self.max_missed_heartbeats) / 1000.0
        expiry = by_count
        if self.heartbeat_timeout_ms > 0:
            floor = 3 * max(1, self.heartbeat_interval_ms) / 1000.0
            expiry = min(by_count, max(self.heartbeat_timeout_ms / 1000.0, floor))
        object.__setattr__(self, "_by_count", by_count)
        object.__setattr__(self, "heartbeat_expiry", expiry)
        object.__setattr__(self, "_progress_s", self.progress_timeout_ms / 1000.0)

    @property
    def tick(self) -> float:
        """How often the monitor should look: half a heartbeat, at most half a second."""
        return min(0.5, max(1, self.heartbeat_interval_ms) / 2000.0)

    def silent(self, task_id: str, last_heartbeat: float | None, now: float) -> str | None:
        """Why the task counts as lost for its silence, or None."""
        if last_heartbeat is None or now - last_heartbeat <= self.heartbeat_expiry:
            return None
        missed = int((now - last_heartbeat) * 1000 / max(1, self.heartbeat_interval_ms))
        if self.heartbeat_expiry == self._by_count:
            rule = f"tony.task.max-missed-heartbeats={self.max_missed_heartbeats}"
        else:
            rule = (f"no heartbeat for {self.heartbeat_expiry:g} s, "
                    f"tony.task.heartbeat-timeout-ms={self.heartbeat_timeout_ms}")
        return f"Task with id [{task_id}] has missed [{missed}] heartbeats ({rule})."

    def stalled(self, task_id: str, progress_at: float | None, now: float) -> str | None:
        """Why the task counts as hung for reporting no progress, or None."""
        if self.progress_timeout_ms <= 0 or progress_at is None:
            return None
        quiet = now - progress_at
        if quiet <= self._progress_s:
            return None
        return (f"Task with id [{task_id}] reported no progress for {quiet:.0f} s while its executor kept "
                f"heartbeating: the training process is hung (tony.task.progress-timeout-ms="
                f"{self.progress_timeout_ms}).")
