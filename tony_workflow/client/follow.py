"""Following a job: read its status now and then and say what changed.

Every front end follows jobs (the CLI's progress lines, the Airflow operator's task log and its
trigger, the Azkaban runner's job log); none of them compares statuses itself. A
:class:`Follower` reads the status through a callable, compares it with the last one and returns
a :class:`JobUpdate` naming each change, or None when nothing a user would see has changed.
:meth:`tony_workflow.client.JobHandle.follow` loops over it; the Airflow trigger calls
:meth:`Follower.poll` from its event loop's worker thread between its own sleeps.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..status import JobStatus, TaskState

__all__ = ["Follower", "JobUpdate", "TaskChange", "diff"]


@dataclass(frozen=True)
class TaskChange:
    """One task whose state or restart count changed. ``before`` is None for a task seen first."""

    task_id: str
    before: str | None
    after: str
    restarts: int
    relaunched: bool  # its restart count went up: the task alone was started again


@dataclass(frozen=True)
class JobUpdate:
    """What changed between two statuses of one application.

    ``status`` is the new status and ``previous`` the one before it (None on the first update).
    ``state_changed`` says the job's state moved; ``new_session`` that a new session started
    (the previous one failed and was torn down); ``tasks`` lists the tasks that changed;
    ``tracking_url`` and ``tensorboard_url`` are set when that URL is new (first known, or moved);
    ``new_warnings`` lists warnings not in the previous status (the checkpoint store failing, steps
    lost on a resume); ``new_am_attempt`` says that the ApplicationMaster was replaced;
    ``progressed`` that training progress is due to be shown again (see :class:`Follower`), the
    progress itself being in ``status.progress`` and in ``status.summary()``; ``waiting`` is the
    job's new reason for waiting for its gang (``status.waiting_reason``) when it changed, and
    ``gang_formed`` says the gang it waited for is whole now.
    """

    status: JobStatus
    previous: JobStatus | None
    state_changed: bool
    new_session: bool
    tasks: tuple[TaskChange, ...] = field(default_factory=tuple)
    tracking_url: str | None = None
    tensorboard_url: str | None = None
    new_warnings: tuple[str, ...] = ()
    new_am_attempt: bool = False
    progressed: bool = False
    waiting: str | None = None
    gang_formed: bool = False
    #: tasks whose containers were launched a while ago and have not started yet, said now and
    #: then while that lasts (their nodes are fetching and unpacking the job's files)
    starting: str | None = None

    @property
    def first(self) -> bool:
        return self.previous is None

    @property
    def final(self) -> bool:
        return self.status.is_final

    @property
    def relaunched(self) -> tuple[TaskChange, ...]:
        """Tasks relaunched alone (restart policy ``task``) since the previous update."""
        return tuple(t for t in self.tasks if t.relaunched)


def _wait_key(status: JobStatus) -> tuple[object, ...]:
    # What a user sees of a wait: its reason and how much of the gang is granted, not its duration.
    return (status.waiting_reason, status.containers_held, status.containers_wanted)


def _task_key(status: JobStatus) -> tuple[object, ...]:
    return tuple((t.task_id, t.state, t.restarts) for t in status.tasks)


def diff(previous: JobStatus | None, current: JobStatus, progressed: bool = False) -> JobUpdate | None:
    """The update from ``previous`` to ``current``, or None when nothing shown to users changed
    (state, session, AM attempt, task states and restarts, the URLs, the warnings, the wait for
    the gang, and the diagnostics of a final status) and ``progressed`` is false (progress moves with every
    report: the caller decides when it is worth a line)."""
    if not progressed and previous is not None and (
            previous.state, previous.session_id, previous.am_attempt, previous.tracking_url,
            previous.tensorboard_url, previous.warnings, _task_key(previous), _wait_key(previous)) == (
            current.state, current.session_id, current.am_attempt, current.tracking_url,
            current.tensorboard_url, current.warnings, _task_key(current), _wait_key(current)) and (
            not current.is_final or previous.diagnostics == current.diagnostics):
        return None
    before = {t.task_id: t for t in previous.tasks} if previous is not None else {}
    new_session = previous is not None and current.session_id != previous.session_id
    changes = []
    for task in current.tasks:
        old = None if new_session else before.get(task.task_id)
        if old is not None and (old.state, old.restarts) == (task.state, task.restarts):
            continue
        changes.append(TaskChange(task.task_id, old.state if old else None, task.state, task.restarts,
                                  relaunched=old is not None and task.restarts > old.restarts))
    tracking = current.tracking_url if current.tracking_url and (
        previous is None or current.tracking_url != previous.tracking_url) else None
    tensorboard = current.tensorboard_url if current.tensorboard_url and (
        previous is None or current.tensorboard_url != previous.tensorboard_url) else None
    seen = set(previous.warnings) if previous is not None else set()
    return JobUpdate(status=current, previous=previous,
                     state_changed=previous is None or previous.state != current.state,
                     new_session=new_session, tasks=tuple(changes), tracking_url=tracking,
                     tensorboard_url=tensorboard, new_warnings=tuple(w for w in current.warnings if w not in seen),
                     new_am_attempt=previous is not None and current.am_attempt > previous.am_attempt,
                     progressed=progressed,
                     waiting=current.waiting_reason if current.waiting_reason and (
                         previous is None or _wait_key(previous) != _wait_key(current)) else None,
                     gang_formed=previous is not None and bool(previous.waiting_reason)
                     and not current.waiting_reason and not current.is_final)


class Follower:
    """Reads one application's status through ``read`` and reports what changed since the last read.

    Training progress is news when it is first reported and then at most every ``progress_every``
    seconds while the step moves, so a log gets a progress line now and then, not one per poll.
    So is a container launched more than ``starting_after`` seconds ago whose task has not started:
    on YARN its NodeManager is fetching and unpacking the job's files, which for an environment of
    gigabytes takes minutes the first time on a node, and the job would otherwise say nothing all
    that while. ``last`` is the last status read (None before the first).
    """

    def __init__(self, read: Callable[[], JobStatus], progress_every: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, starting_after: float = 10.0):
        self._read = read
        self.last: JobStatus | None = None
        self.progress_every = progress_every
        self.starting_after = starting_after
        self._clock = clock
        self._shown: tuple[float, object] | None = None  # when progress was last shown, and its step
        self._launched: dict[tuple[int, str, int], float] = {}  # when each task was first seen LAUNCHED
        self._starting_said = float("-inf")

    def poll(self) -> JobUpdate | None:
        """Reads the status once; the update since the previous read, or None if nothing changed."""
        return self.see(self._read())

    def see(self, status: JobStatus) -> JobUpdate | None:
        """Takes a status read elsewhere (e.g. the settled final one) as the latest."""
        now = self._clock()
        step = (status.progress or {}).get("step")
        due = bool(status.progress) and not status.is_final and (
            self._shown is None or (step != self._shown[1] and now - self._shown[0] >= self.progress_every))
        update = diff(self.last, status, progressed=due)
        if update is not None and status.progress:
            self._shown = (now, step)  # any line shows the progress (status.summary())
        starting = self._starting(status, now)
        if starting is not None:
            update = dataclasses.replace(update or JobUpdate(status, self.last, False, False), starting=starting)
        self.last = status
        return update

    def _starting(self, status: JobStatus, now: float) -> str | None:
        """The line about tasks launched long ago and not started, when one is due."""
        launched = {(status.session_id, t.task_id, t.restarts) for t in status.tasks
                    if t.state == TaskState.LAUNCHED and not status.is_final}
        self._launched = {k: self._launched.get(k, now) for k in launched}
        slow = sorted(k[1] for k, since in self._launched.items() if now - since >= self.starting_after)
        if not slow or now - self._starting_said < self.progress_every:
            return None
        self._starting_said = now
        longest = max(now - since for since in self._launched.values())
        return (f"{', '.join(slow)} launched {longest:.0f} s ago and not started yet: "
                f"{'their nodes are' if len(slow) > 1 else 'its node is'} fetching and unpacking the job's files "
                "(its environment comes once per node and user, then is kept)")
