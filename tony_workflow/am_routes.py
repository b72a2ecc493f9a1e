"""What executors and clients tell the ApplicationMaster: its route handlers, and its record of a task.

Each handler runs on a server thread, takes the AM's lock, checks that the request comes from the
task's current session and container, records what it was told and wakes the monitor thread; no
handler decides anything (:class:`~tony_workflow.am.ApplicationMaster` does, on its monitor pass).
Kept apart from the AM's mechanics (sessions, launching, the monitor) so each reads alone.
:class:`AMRoutes` is a base of the ApplicationMaster: the state it uses (the lock, the tasks, the
status board, the store's watch) is the AM's own.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from . import protocol
from .am_http import Handler
from .backends import Container
from .progress import TaskProgress
from .status import TaskState, TaskStatus

__all__ = ["AMRoutes", "Task"]


@dataclass
class Task:
    """AM-side record of one task in the current session."""

    status: TaskStatus
    container: Container
    session_id: int
    launched_at: float = field(default_factory=time.time)
    registered_at: float | None = None
    last_heartbeat: float | None = None
    fixed_port: int | None = None
    stopping: bool = False
    reported: tuple[int, str] | None = None
    #: since when the AM waits for the cluster to say how the task's container ended
    held_since: float | None = None
    progress: TaskProgress = field(default_factory=TaskProgress)

    @property
    def id(self) -> str:
        return self.status.task_id

    @property
    def final(self) -> bool:
        return self.status.state in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED, TaskState.LOST)



class AMRoutes:
    """The route handlers of :class:`~tony_workflow.am.ApplicationMaster` (see the module docstring)."""

    def handlers(self) -> dict[str, Handler]:
        """This AM's handler for every route of the protocol."""
        return {
            protocol.REGISTER.name: self.register,
            protocol.CLUSTER_SPEC.name: lambda q: self.cluster_spec(q["task_id"], q["session_id"], q["wait"]),
            protocol.HEARTBEAT.name: self.heartbeat,
            protocol.STARTED.name: self.task_started,
            protocol.RESULT.name: self.task_result,
            protocol.TENSORBOARD.name: self.register_tensorboard,
            protocol.STATUS.name: lambda _: (200, self.status_dict()),
            protocol.RECORD.name: lambda _: (200, self.record()),
            protocol.KILL.name: self.kill,
        }

    def status_dict(self) -> dict:
        with self.lock:
            return self.status.to_dict()

    def record(self) -> dict:
        """The job's record as the history will keep it, as it stands now (:mod:`tony_workflow.history`)."""
        from .history import live_record

        with self.lock:
            status = self.status.to_dict()
        return live_record(status, self.app_dir, self.spec, self.board.series_dict())

    def task_logs(self) -> dict[str, tuple[Path | None, Path | None]]:
        with self.lock:
            return {t.id: (t.container.stdout, t.container.stderr) for t in self.tasks.values()}

    # Route handlers return (http status, body). They run on server threads.
    def _task_for(self, body: dict) -> tuple[Task | None, tuple[int, dict] | None]:
        task = self.tasks.get(str(body.get("task_id", "")))
        if task is None:
            return None, (404, {"error": f"unknown task {body.get('task_id')!r}", "action": "stop"})
        if int(body.get("session_id", -1)) != task.session_id or task.stopping or task.final:
            return None, (409, {"error": "stale session or stopped task", "action": "stop"})
        cid = body.get("container_id")
        if cid and cid != task.container.id:
            return None, (409, {"error": "stale container", "action": "stop"})
        return task, None

    def register(self, body: dict) -> tuple[int, dict]:
        with self.lock:
            task, err = self._task_for(body)
            if err:
                return err
            port = int(body["port"])
            if task.fixed_port and port != task.fixed_port:
                return 409, {"error": f"relaunched task must keep port {task.fixed_port}", "action": "stop"}
            task.status.host, task.status.port = str(body["host"]), port
            task.status.pid = body.get("pid")
            task.registered_at = task.last_heartbeat = time.time()
            self._set_task_state(task, TaskState.REGISTERED, host=task.status.host, port=port)
            self._cluster = None
            if all(t.registered_at for t in self.tasks.values()):
                self._cluster = self.cluster_dict()
                self._gang_ready.set()
                self.events.emit("cluster_spec_ready", session=self.session_id, cluster=self._cluster)
            return 200, {"ok": True}

    def cluster_dict(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for t in sorted(self.tasks.values(), key=lambda t: (self.type_order.index(t.status.type), t.status.index)):
            out.setdefault(t.status.type, []).append(f"{t.status.host}:{t.status.port}")
        return out

    def cluster_spec(self, task_id: str, session_id: int, wait: float) -> tuple[int, dict | None]:
        deadline = time.time() + min(max(wait, 0.0), 60.0)
        while True:
            with self.lock:
                task = self.tasks.get(task_id)
                if task is None or task.session_id != session_id or task.stopping:
                    return 409, {"error": "stale session", "action": "stop"}
                if self._cluster is not None:
                    return 200, {"cluster": self._cluster, "session_id": session_id, "chief": list(self.chief)}
                remaining = deadline - time.time()
                if remaining <= 0:
                    return 204, None
                gang = self._gang_ready
                if gang.is_set():  # a task relaunched alone is registering again
                    self.cond.wait(min(remaining, self.tick))
                    continue
            # Waiters sleep on the gang's own event, not the AM's condition: registrations would
            # otherwise wake every waiting request once per task (N² wake-ups for a gang of N).
            gang.wait(remaining)

    def heartbeat(self, body: dict) -> tuple[int, dict]:
        now = time.time()
        with self.lock:
            task, err = self._task_for(body)
            if err:
                return err
            task.last_heartbeat = now
            # Figures change with every beat: they are persisted with the next slow snapshot, and
            # the job's progress is worked out by the monitor, not once per beat.
            if isinstance(body.get("metrics"), dict) and body["metrics"]:
                task.status.metrics = body["metrics"]
                self.board.figures_changed()
            if task.progress.update(body.get("progress"), now):
                task.status.progress = task.progress.to_dict()
                self.board.figures_changed(progressed=True)
            store = body.get("store") if isinstance(body.get("store"), dict) else {}
            changed, failure = self.store.report(task.id, task.session_id, store.get("error"), bool(store.get("ok")))
            if changed:
                self.status.warnings = [*self.spec.warnings, *self.store.warnings]
                self._publish()
            if failure and not self.store_failure:
                self.store_failure = failure
                self.cond.notify_all()
            return 200, {"action": "continue"}

    def task_started(self, body: dict) -> tuple[int, dict]:
        with self.lock:
            task, err = self._task_for(body)
            if err:
                return err
            task.status.pid = body.get("pid", task.status.pid)
            task.last_heartbeat = time.time()
            if body.get("restored") and self.store.restored(task.id, task.session_id, body["restored"]):
                self.status.warnings = [*self.spec.warnings, *self.store.warnings]
            self._set_task_state(task, TaskState.RUNNING, pid=task.status.pid)
            if all(t.status.state == TaskState.RUNNING for t in self.tasks.values()):
                # Every task has restored its checkpoint: earlier copies are no longer needed.
                keep = {t.container.id for t in self.tasks.values()}
                threading.Thread(target=self.cluster.prune_checkpoints, args=(keep,), daemon=True).start()
            return 200, {"ok": True}

    def task_result(self, body: dict) -> tuple[int, dict]:
        with self.lock:
            task, err = self._task_for(body)
            if err:
                return err
            # Decisions belong to the monitor thread; a handler only records and wakes it.
            task.reported = (int(body["exit_code"]), str(body.get("diagnostics") or ""))
            self.cond.notify_all()
            return 200, {"ok": True}

    def register_tensorboard(self, body: dict) -> tuple[int, dict]:
        given = str(body.get("url") or "")
        # The URL becomes a link in the tracking page and the workflow UIs: a web address, nothing else.
        parts = urlsplit(given)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return 400, {"error": f"a TensorBoard URL must be an http(s) address, got {given[:200]!r}"}
        url = self.cluster.expose_tensorboard(given) or given
        with self.lock:
            self.status.tensorboard_url = url
            self.events.emit("tensorboard", url=self.status.tensorboard_url)
            self._publish()
        return 200, {"ok": True}

    def kill(self, body: dict) -> tuple[int, dict]:
        with self.lock:
            self.kill_requested = str(body.get("reason") or "killed by user")
            self.cancel.set()
            self.events.emit("kill_requested", reason=self.kill_requested)
            self.cond.notify_all()
        return 200, {"ok": True}
