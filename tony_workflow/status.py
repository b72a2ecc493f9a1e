"""The one status type that flows back from the ApplicationMaster to every front end."""
from __future__ import annotations

import dataclasses
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import NotAnApplicationId

__all__ = [
    "FINAL_STATES",
    "JobState",
    "JobStatus",
    "StatusFile",
    "TaskState",
    "TaskStatus",
    "check_application_id",
    "counted",
    "group_text",
    "hanging",
    "progress_text",
    "status_from_state",
    "waiting_text",
]

# YARN's shape, which local ids share: application_<cluster start ms>_<sequence>.
_APPLICATION_ID = re.compile(r"application_[0-9]{1,19}_[0-9]{1,10}")


def check_application_id(app_id: object) -> str:
    """``app_id`` if it has the shape of an application id; :class:`NotAnApplicationId` (a
    ValueError) saying what one looks like otherwise. Every id from a user passes here before it
    names a file, a URL or a request."""
    if not isinstance(app_id, str) or not _APPLICATION_ID.fullmatch(app_id):
        shown = repr(app_id) if len(repr(app_id)) <= 80 else repr(app_id)[:77] + "..."
        raise NotAnApplicationId(str(app_id), f"{shown}; expected application_<cluster timestamp>_<sequence>, "
                                 "e.g. application_1763700000000_0001")
    return app_id


class JobState:
    NEW = "NEW"
    SUBMITTED = "SUBMITTED"
    ALLOCATING = "ALLOCATING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"


FINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED})


class TaskState:
    NEW = "NEW"
    REQUESTED = "REQUESTED"      # asked of the cluster, which has not granted its container yet
    LAUNCHED = "LAUNCHED"        # container granted and its process started, not yet registered
    REGISTERED = "REGISTERED"    # executor registered its address with the AM
    RUNNING = "RUNNING"          # user process started (cluster spec delivered)
    JOINING = "JOINING"          # as shown: an elastic task started that its group has not taken in yet
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"            # stopped by the AM (session teardown, job end)
    LOST = "LOST"                # missed heartbeats or vanished without reporting


@dataclass
class TaskStatus:
    """One task of the current session."""

    type: str
    index: int
    state: str = TaskState.NEW
    exit_code: int | None = None
    host: str | None = None
    port: int | None = None
    log_url: str | None = None
    pid: int | None = None
    container_id: str | None = None
    restarts: int = 0
    #: resources its processes use (:class:`tony_workflow.task.metrics.TaskSampler`): ``rss_mb``,
    #: ``max_rss_mb``, ``avg_rss_mb``, ``cpu_percent``, and with GPUs ``gpu_util_percent``, ``gpu_mem_mb``
    metrics: dict[str, Any] = field(default_factory=dict)
    #: what its code last reported through ``tony_workflow.report``: ``step``, ``total``,
    #: ``fraction``, ``updated_at``; None before a first report
    progress: dict[str, Any] | None = None

    @property
    def task_id(self) -> str:
        return f"{self.type}:{self.index}"

    def to_dict(self) -> dict[str, Any]:
        # A plain copy, not dataclasses.asdict's recursive deep copy, which costs the AM
        # milliseconds per status at a thousand tasks. The dict fields are shared, not copied: the
        # AM replaces them whole, never changes one in place.
        return {name: getattr(self, name) for name in _TASK_FIELDS}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskStatus:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class JobStatus:
    """Status of one application, as JSON-safe data.

    ``state`` is one of :class:`JobState`; ``session_id`` is the current session (0 first);
    ``attempts`` counts sessions started; ``retries`` the session relaunches spent against
    ``tony.am.retry-count``; ``reclaims`` the relaunches after the cluster took a container back
    (preempted, lost with its node), which spend ``tony.am.reclaim-retry-count`` instead;
    ``am_attempt`` is the ApplicationMaster's attempt (1 first, see ``tony.am.max-attempts``); ``warnings`` lists what is wrong but does not stop the job; ``tasks`` lists the current session's tasks.

    While the job's gang is not whole (state ALLOCATING; or RUNNING with a task relaunched alone
    that waits for its container), ``containers_held`` and ``containers_wanted`` count the gang's
    containers the cluster has granted and all it asks for (the ApplicationMaster's own included),
    ``waiting_reason`` says in one line what it waits for and what blocks it (queue headroom, the
    largest container a node can give, a node label no node carries, other jobs ahead),
    ``waiting_since`` is when the wait began and ``jobs_ahead`` lists the applications served
    before it. Once the gang is whole the reason is None.
    """

    application_id: str
    state: str = JobState.NEW
    session_id: int = 0
    attempts: int = 0
    tasks: list[TaskStatus] = field(default_factory=list)
    tensorboard_url: str | None = None
    tracking_url: str | None = None
    #: a notebook job's JupyterLab, as its container serves it (it asks for the job's notebook token:
    #: reached through the history server's /jobs/<id>/notebook/); None for other jobs
    notebook_url: str | None = None
    diagnostics: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    name: str | None = None
    backend: str = "local"
    retries: int = 0
    reclaims: int = 0
    am_attempt: int = 1
    #: problems that do not stop the job (the checkpoint store failing, steps lost on a resume)
    warnings: list[str] = field(default_factory=list)
    #: training progress as user code reports it (:func:`tony_workflow.report`): ``step``, ``total``,
    #: ``fraction``, ``metrics``, ``updated_at``, ``eta_seconds`` and the reporting ``task``; None
    #: before a first report
    progress: dict[str, Any] | None = None
    containers_held: int = 0
    containers_wanted: int = 0
    waiting_reason: str | None = None
    waiting_since: float | None = None
    jobs_ahead: list[str] = field(default_factory=list)
    #: an elastic job's group (tony.<type>.min-instances): ``size`` (nodes in the last formed round),
    #: ``target`` and ``min`` (nodes), ``round``, ``changes`` counted against ``max_changes``,
    #: ``waiting`` (tasks alive that have not joined yet), ``below_min_since``, and ``history``: each
    #: change of the group's size, with who left, who joined and why; None for a fixed job
    elastic: dict[str, Any] | None = None
    #: where the job came from (:mod:`tony_workflow.context`): the workflow run's fields by name
    #: (``source``, ``dag_id``, ``dag_run_id`` ... or ``project``, ``flow_id``, ``execution_id`` ...);
    #: None for a job submitted by hand
    context: dict[str, str] | None = None
    #: where the job's checkpoints (its model) are kept, as a full URI: ``hdfs://namenode:port/…``
    #: on YARN, ``file:///…`` on the embedded cluster (or tony.checkpoint.location's own)
    checkpoint_location: str | None = None
    #: where the ApplicationMaster's own log is read: its container's log page on YARN; None on
    #: the embedded cluster, whose AM writes am.stdout and am.stderr in the job's directory
    am_log_url: str | None = None

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def succeeded(self) -> bool:
        return self.state == JobState.SUCCEEDED

    def task(self, task_id: str) -> TaskStatus | None:
        for t in self.tasks:
            if t.task_id == task_id:
                return t
        return None

    def to_dict(self) -> dict[str, Any]:
        d = {name: getattr(self, name) for name in _JOB_FIELDS}
        d["warnings"] = list(self.warnings)
        d["jobs_ahead"] = list(self.jobs_ahead)
        d["progress"] = dict(self.progress) if self.progress else None
        d["context"] = dict(self.context) if self.context else None
        d["tasks"] = [t.to_dict() for t in self.tasks]
        waiting = self._waiting_to_join()
        for t, shown in zip(self.tasks, d["tasks"], strict=True):
            shown["state"] = self.shown_state(t, waiting)
        return d

    def _waiting_to_join(self) -> set[str]:
        return set((self.elastic or {}).get("waiting") or ()) if not self.is_final else set()

    def shown_state(self, task: TaskStatus, waiting: set[str] | None = None) -> str:
        """``task``'s state as shown: a member of an elastic group trains once the group takes it in
        (a replacement waits for the next round), and is JOINING, not RUNNING, until then."""
        waiting = self._waiting_to_join() if waiting is None else waiting
        if task.state in (TaskState.REGISTERED, TaskState.RUNNING) and task.task_id in waiting:
            return TaskState.JOINING
        return task.state

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobStatus:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        kwargs["tasks"] = [TaskStatus.from_dict(t) for t in d.get("tasks", [])]
        return cls(**kwargs)

    def summary(self) -> str:
        """One progress line: state, session, task states and URLs."""
        parts = [f"{self.application_id} {self.state}", f"session={self.session_id}"]
        if self.am_attempt > 1:
            parts.append(f"am_attempt={self.am_attempt}")
        if self.tasks:
            waiting = self._waiting_to_join()
            parts.append(" ".join(f"{t.task_id}={self.shown_state(t, waiting)}" for t in self.tasks))
        if self.waiting_reason and not self.is_final:
            parts.append(waiting_text(self))
        if self.elastic and not self.is_final:
            parts.append(group_text(self.elastic))
        if self.progress and not self.is_final:
            parts.append(progress_text(self.progress))
        if self.is_final:
            # Both were served by the job's own processes, which are gone: the history keeps what they showed.
            if self.tensorboard_url or self.tracking_url:
                parts.append(f"(its pages ended with it: tony history {self.application_id})")
            return " ".join(parts)
        if self.tensorboard_url:
            parts.append(f"tensorboard={self.tensorboard_url}")
        if self.tracking_url:
            parts.append(f"tracking={self.tracking_url}")
        return " ".join(parts)

    def elapsed(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.finished_at or time.time()) - self.started_at


def status_from_state(app_id: str, state: dict[str, Any]) -> JobStatus:
    """The status an attempt's saved state stands for (:func:`tony_workflow.am.attempts.attempt_state`),
    as a later attempt resumes from it."""
    return JobStatus(application_id=app_id, state=JobState.ALLOCATING, name=state.get("name"),
                     session_id=int(state.get("session_id", 0)), attempts=int(state.get("attempts", 0)),
                     retries=int(state.get("retries", 0)), reclaims=int(state.get("reclaims", 0)),
                     started_at=state.get("started_at"), diagnostics=state.get("diagnostics") or "",
                     backend=state.get("backend") or "yarn", tracking_url=state.get("tracking_url"),
                     am_attempt=int(state.get("attempt", 1)))


def waiting_text(status: JobStatus) -> str:
    """``waiting 2/4 containers for 1m05s: worker: 1 of 3 ...``: a job's wait for its gang, in a
    status line."""
    text = f"waiting {status.containers_held}/{status.containers_wanted} containers"
    if status.waiting_since is not None:
        text += f" for {_duration(max(0.0, time.time() - status.waiting_since))}"
    return f"{text}: {status.waiting_reason}"


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def progress_text(progress: dict[str, Any], metrics: int = 3) -> str:
    """``step=120/1000 (12.0%) eta=3m05s loss=0.3121``: a job's progress in a status line, with its
    first few metrics."""
    step, total = progress.get("step"), progress.get("total")
    text = "step=" + ("?" if step is None else str(step)) + (f"/{total}" if total else "")
    if progress.get("fraction") is not None:
        text += f" ({100 * progress['fraction']:.1f}%)"
    if progress.get("eta_seconds") is not None and (progress.get("fraction") or 0) < 1:  # none left at 100 %
        text += f" eta={_duration(progress['eta_seconds'])}"
    for name, value in list((progress.get("metrics") or {}).items())[:metrics]:
        text += f" {name}={value:.4g}"
    return text


_TASK_FIELDS = tuple(f.name for f in dataclasses.fields(TaskStatus))
def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural but for one: ``1 vcore``, ``2 vcores``, ``0 GPUs``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def hanging(text: str, indent: str = "    | ") -> str:
    """``text`` with every line after its first indented: a diagnostic that carries the last lines
    of a task's stderr stays one block, apart from the lines printed after it."""
    first, *rest = (text or "").splitlines() or [""]
    return "\n".join([first, *(indent + line for line in rest)])


def group_text(elastic: dict[str, Any]) -> str:
    """An elastic group in a few words: ``group=2/3 (1 joining)``."""
    text = f"group={elastic.get('size', 0)}/{elastic.get('target', 0)}"
    waiting = elastic.get("waiting") or []
    return text + (f" ({len(waiting)} joining: {','.join(waiting)})" if waiting else "")


_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(JobStatus) if f.name != "tasks")


class StatusFile:
    """The AM's persisted status, for clients that outlive it: replaced atomically, and only when
    its text changed. Safe to call from several threads."""

    def __init__(self, path: Path):
        self.path = path
        self._sent = ""
        self._last = 0.0
        self._lock = threading.Lock()

    def write(self, data: str | None) -> None:
        if data is None:
            return
        with self._lock:
            if data != self._sent:
                tmp = self.path.with_name(self.path.name + ".tmp")
                tmp.write_text(data)
                os.replace(tmp, self.path)
                self._sent = data
            self._last = time.monotonic()

    def age(self) -> float:
        """Seconds since the last write was asked for."""
        return time.monotonic() - self._last
