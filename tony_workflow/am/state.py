"""What the ApplicationMaster knows about its job, declared in one place.

:class:`AMState` is every field the AM's two kinds of threads share: the monitor thread
(:class:`~tony_workflow.am.master.ApplicationMaster`, which alone decides) and the server threads
(:mod:`tony_workflow.am.routes`, which only record what they are told and wake the monitor). Both
read and change it under :attr:`AMState.lock`, and both change a task's state or the published
status only through :meth:`AMState.set_task_state` and :meth:`AMState.publish`, so that every
change is written to the event log and persisted the same way.

The ApplicationMaster is an AMState with the mechanics around it (sessions, launching, the
monitor); a route object is given the AMState and sees nothing else of the AM, which the type
checker holds it to.
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from ..backends import ClusterManager, Container
from ..context import application_tags, dropped_warning
from ..events import EventLog
from ..spec import JobSpec
from ..spec.groups import dependencies, groups
from ..status import JobState, JobStatus, TaskState
from .attempts import Resume
from .board import StatusBoard
from .elastic_group import ElasticGroup, ElasticPart, Launch
from .liveness import Liveness
from .policy import Policy
from .store_watch import StoreWatch
from .tasks import Task

__all__ = ["AMState", "SessionEnd", "Task"]

class SessionEnd(Exception):
    """The current session is over: how it ended, and whether another session may follow."""

    def __init__(self, state: str, diagnostics: str, retryable: bool = True, reclaimed: bool = False,
                 unformed: bool = False):
        super().__init__(diagnostics)
        self.state, self.diagnostics, self.retryable = state, diagnostics, retryable
        #: the cluster took a container back: the next session does not spend tony.am.retry-count
        self.reclaimed = reclaimed
        #: the gang was given back before it was whole: the same session asks for it again
        self.unformed = unformed


class AMState:
    """The job's state in the AM (see the module docstring)."""

    # what the job is, fixed for the AM's life
    spec: JobSpec
    app_id: str
    app_dir: Path
    cluster: ClusterManager
    policy: Policy
    liveness: Liveness
    #: the task types in the spec's order (the cluster spec lists them so)
    type_order: list[str]
    #: TonY's chief: (type, index)
    chief: tuple[str, int]
    #: the monitor's longest sleep, in seconds
    tick: float

    # shared by the monitor and the server threads, under ``lock``
    lock: threading.RLock
    #: notified on every change a decision may follow from (the monitor waits on it)
    cond: threading.Condition
    events: EventLog
    status: JobStatus
    board: StatusBoard
    store: StoreWatch
    #: the current session's tasks, by task id
    tasks: dict[str, Task]
    session_id: int
    #: the cluster spec, once every task of the session registered
    cluster_spec: dict[str, list[str]] | None
    #: set when the current session's gang has registered (a new event per session)
    gang_ready: threading.Event
    #: why the checkpoint store's trouble must fail the job, once it must
    store_failure: str | None
    #: why the job is being killed, once it is
    kill_requested: str | None
    #: set with ``kill_requested``: an allocation in progress stops waiting
    cancel: threading.Event
    #: an elastic job's part: its group, its rendezvous, who joined (None for a fixed job)
    elastic: ElasticPart | None
    #: the task types some task of which reported progress in this job (any session): their
    #: failures are never taken as ones every relaunch would repeat
    progressed_types: set[str]

    def __init__(self, spec: JobSpec, app_id: str, app_dir: Path, cluster: ClusterManager,
                 resume: Resume | None = None, launch: Launch | None = None):
        self.spec, self.app_id, self.app_dir, self.cluster = spec, app_id, Path(app_dir), cluster
        # The spec derives these from its flat conf on every access; the monitor and the handlers
        # need them on every pass, so take them once.
        self.policy = Policy.from_spec(spec)
        self.groups, self.group_dependencies = groups(spec.conf), dependencies(spec.conf)
        self.liveness = Liveness.from_spec(spec)
        self.type_order = list(spec.tasks)
        self.chief = self.policy.chief
        self.tick = self.liveness.tick
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.events = EventLog(self.app_dir / "events.jsonl", echo=logging.getLogger("tony-am"))
        resume = resume or Resume()
        self._backend_warnings = _tag_warnings(spec, cluster.name) + acl_warnings(spec, cluster.name)
        self.status = JobStatus(application_id=app_id, state=JobState.ALLOCATING, name=spec.name,
                                started_at=resume.started_at or time.time(), backend=cluster.name,
                                retries=resume.retries, reclaims=resume.reclaims, am_attempt=resume.attempt,
                                warnings=[*spec.warnings, *self._backend_warnings],
                                diagnostics=resume.diagnostics,
                                context=dict(spec.context) or None, am_log_url=cluster.am_log_url())
        self.board = StatusBoard(self.status, self.app_dir / "status.json", cluster.report_progress,
                                 series_every=max(1.0, spec.metrics_interval_ms / 1000.0))
        self.store = StoreWatch(self.events, spec.checkpoint_on_store_failure)
        self.tasks = {}
        self.session_id = 0
        self.cluster_spec = None
        #: a Horovod job's rendezvous server, as its driver reported it: (session, host, port)
        self.rendezvous: tuple[int, str, int] | None = None
        self.gang_ready = threading.Event()
        self.store_failure = None
        self.kill_requested = None
        self.cancel = threading.Event()
        self.progressed_types = set()
        group = ElasticGroup.from_spec(spec)
        self.elastic = ElasticPart(self, group, launch or _cannot_launch) if group is not None else None

    # ---------------------------------------------------------------- changes (lock held)
    def publish(self, force: bool = False) -> None:
        """Marks the status changed and wakes the monitor, which persists it outside the lock (see
        :class:`~tony_workflow.am.board.StatusBoard`). Called with the lock held."""
        if self.elastic is not None:
            self.elastic.show()
        self.board.changed(force)
        self.cond.notify_all()

    def set_task_state(self, task: Task, state: str, **extra: Any) -> None:
        """A task's new state, in its status and the event log. Called with the lock held."""
        task.status.state = state
        if task.final and task.ended_at is None:
            task.ended_at = time.time()
        if task.final and task.status.metrics:
            extra.setdefault("metrics", task.status.metrics)  # the final figures stay in the task's last event
        if task.final and task.exited_at is not None:
            extra.setdefault("at", task.exited_at)  # when its process ended, as its host saw it
        self.events.emit("task_state", task=task.id, session=task.session_id, state=state, **extra)
        self.publish()

    def warnings_changed(self) -> None:
        """The store's warnings changed: the status shows the spec's and the store's. Lock held."""
        self.status.warnings = [*self.spec.warnings, *self._backend_warnings, *self.store.warnings]

    def fail_for_store(self, why: str) -> None:
        """The checkpoint store's trouble fails the job (``tony.checkpoint.on-store-failure``); the
        monitor ends the session on its next pass. Called with the lock held."""
        if not self.store_failure:
            self.store_failure = why
            self.cond.notify_all()

    def request_kill(self, reason: str) -> None:
        """Called with the lock held; the monitor ends the job on its next pass."""
        self.kill_requested = reason
        self.cancel.set()
        self.events.emit("kill_requested", reason=reason)
        self.cond.notify_all()

    # ---------------------------------------------------------------- views
    def held_for_stage(self, task: Task) -> bool:
        """Whether ``task``'s command waits (its cluster spec is held): it is of TonY's training stage
        and a task of the prepare stage has not yet succeeded, or it is a Horovod job's worker and
        the driver has not said where its rendezvous server listens. Called with the lock held."""
        spec = self.spec
        unannounced = self.rendezvous is None or self.rendezvous[0] != task.session_id
        if spec.framework == "horovod" and task.status.type != "driver" and "driver" in spec.tasks and unannounced:
            return True
        return task.status.type in spec.training_stage and any(
            t.status.type in spec.prepare_stage and t.status.state != TaskState.SUCCEEDED for t in self.tasks.values())

    def cluster_dict(self) -> dict[str, list[str]]:
        """The registered tasks' addresses by type, in the spec's order and by index."""
        out: dict[str, list[str]] = {}
        for t in sorted(self.tasks.values(), key=lambda t: (self.type_order.index(t.status.type), t.status.index)):
            out.setdefault(t.status.type, []).append(f"{t.status.host}:{t.status.port}")
        if self.rendezvous is not None and out.get("driver"):  # Horovod's: the driver is its rendezvous server
            out["driver"][0] = f"{self.rendezvous[1]}:{self.rendezvous[2]}"
        return out

    def status_dict(self) -> dict[str, Any]:
        with self.lock:
            return self.status.to_dict()

    def record(self) -> dict[str, Any]:
        """The job's record as the history will keep it, as it stands now (:mod:`tony_workflow.history`)."""
        from ..history import live_record

        with self.lock:
            status = self.status.to_dict()
        record: dict[str, Any] = live_record(status, self.app_dir, self.spec, self.board.series_dict())
        return record

    def task_logs(self) -> dict[str, tuple[Path | None, Path | None]]:
        with self.lock:
            return {t.id: (t.container.stdout, t.container.stderr) for t in self.tasks.values()}


def _cannot_launch(task_id: str, container: Container, restarts: int) -> Task:
    raise RuntimeError(f"{task_id}: this state has no way to launch a task (only the ApplicationMaster's has)")


def acl_warnings(spec: JobSpec, backend: str) -> list[str]:
    """What of tony.application.view-acls, modify-acls and proxy-user cannot be done where the job
    runs: the embedded cluster has no ACLs (every user of its machine may see and stop its jobs)
    and runs jobs as their submitter, and the pages skein's web UI serves take users, not groups."""
    out = []
    if spec.proxy_user and backend != "yarn":
        out.append(f"tony.application.proxy-user={spec.proxy_user}: the embedded cluster runs every job as the user "
                   "who submits it (YARN runs it as the proxy user)")
    keys = [k for k, (users, groups) in (("tony.application.view-acls", spec.view_acls),
                                         ("tony.application.modify-acls", spec.modify_acls)) if users or groups]
    if keys and backend != "yarn":
        out.append(f"{' and '.join(keys)}: the embedded cluster has no access control lists; any user of its "
                   "machine may see and stop its jobs (YARN applies them)")
    elif keys and spec.view_acls[1]:
        out.append(f"tony.application.view-acls: the groups {', '.join(spec.view_acls[1])} may see the job through "
                   "YARN, not its pages (skein's web UI names users only)")
    return out


def _tag_warnings(spec: JobSpec, backend: str) -> list[str]:
    """On YARN, the context's fields that found no room among the application's tags."""
    if backend != "yarn" or not spec.context:
        return []
    _, dropped = application_tags(["tony", "gang"], spec.tags, spec.context, spec.identity)
    warning = dropped_warning(dropped)
    return [warning] if warning else []
