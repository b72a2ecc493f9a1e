"""The ApplicationMaster: one process per job.

It allocates the job's containers as one gang, launches a TaskExecutor in each, collects their
addresses, hands out the cluster spec, watches heartbeats and exits, and relaunches sessions (or
single tasks, per ``tony.<type>.restart-policy``) after failures.

It is the mechanics around three parts that each live in a module of their own, so that each can
be read and tested alone: what a failure means and how the job ends (:mod:`tony_workflow.am.policy`,
pure: TonY's rules, with no process or clock), the wire (:mod:`tony_workflow.am.server`, serving the
routes of :mod:`tony_workflow.protocol` with this class's route handlers), and the cluster
(a :class:`~tony_workflow.backends.base.ClusterManager`, chosen by
:func:`~tony_workflow.backends.get_cluster_manager`). None of them imports this module.

Its state is declared in :class:`~tony_workflow.am.state.AMState`, which this class extends, and is
changed under one lock. The HTTP handlers (:mod:`tony_workflow.am.routes`) are given that state only:
they record what executors report and wake the monitor thread
(:meth:`ApplicationMaster._run_session`), which alone decides, so decisions are taken in one place
and in order.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from ..backends import ClusterManager, Container, NeverFits, Wait, gang_requests, get_cluster_manager
from ..events import log_tail
from ..spec import JobSpec
from ..status import JobState, TaskState, TaskStatus
from ..storage import qualified
from .attempts import Resume, attempt_state, finished_verdict, mark_am_stopped, resume_point, write_am_info
from .board import SERIES_FILE
from .gang import AllocationTimeout, GangWatch
from .group_timeouts import overdue
from .policy import LOST_EXIT_CODE, Action, Failure, Policy
from .routes import AMRoutes
from .server import AMHttpServer, calm_collector
from .single_node import MODEL_PARAMS_ENV, preprocess, run_single_node
from .state import AMState, SessionEnd, Task

__all__ = ["ApplicationMaster", "SessionEnd", "main"]


class ApplicationMaster(AMState):
    """An AM's state (:class:`~tony_workflow.am.state.AMState`) and the mechanics that change it:
    sessions, launching, the monitor. An elastic job's part is held, not inherited
    (:attr:`~tony_workflow.am.state.AMState.elastic`, :class:`~tony_workflow.am.elastic_group.ElasticPart`)."""

    def __init__(self, spec: JobSpec, app_id: str, app_dir: Path, cluster: ClusterManager, *,
                 token: str, view_token: str, host: str = "127.0.0.1",
                 executor_argv: list[str] | None = None, resume: Resume | None = None):
        # A later attempt carries on the job: its start time, the relaunches spent, the next session.
        self.resume = resume or Resume()
        super().__init__(spec, app_id, app_dir, cluster, self.resume, launch=self._launch_member)
        self.token = token
        self.view_token = view_token
        self.host = host
        self.executor_argv = executor_argv or cluster.executor_argv
        cluster.bind(self.events, self._wake_monitor, self._on_wait)
        self.gang = GangWatch(spec.allocation_timeout_ms, spec.gang_hold_timeout_ms, spec.gang_backoff_ms)
        if spec.am_startup_timeout_ms > 0 and cluster.am_waits_with_gang and self.resume.attempt == 1:
            self.gang.startup = (self.status.started_at or time.time(), spec.am_startup_timeout_ms / 1000.0)
        self._fallbacks = ""  # earlier local checkpoint directories this session's tasks may resume from
        self.containers: dict[str, Container] = {}  # task id -> the reservation it runs on
        self._ended: list[Container] = []  # containers that ended on the monitor's pass, stopped after it
        self.task_restarts: dict[str, int] = {}
        self.server: AMHttpServer | None = None
        self.checkpoint_location = spec.checkpoint_location or cluster.checkpoint_location(self.app_dir)
        self.status.checkpoint_location = qualified(self.checkpoint_location)
        self.log_dir = cluster.log_dir(self.app_dir)
        self.retry_count = spec.retry_count
        self.model_params: str | None = None  # what a preprocessing job handed the tasks (single_node.py)

    def _on_wait(self, wait: Wait | None) -> None:
        """The cluster's word on the gang while it allocates (see :class:`~tony_workflow.am.gang.GangWatch`)."""
        with self.lock:
            self.gang.overdue()  # raises through the cluster's allocate(): the job fails
            if self.gang.waiting(wait):
                self.gang.show(self.status)
                if wait is not None:
                    self.events.emit("gang_waiting", reason=wait.reason, ahead=list(wait.ahead))
                self.publish()

    def _wake_monitor(self) -> None:
        """The cluster says a container changed: the monitor looks now, not on its next tick."""
        with self.cond:
            self.cond.notify_all()

    def start_server(self) -> str:
        self.server = AMHttpServer(self.host, token=self.token, view_token=self.view_token,
                                   handlers=AMRoutes(self).handlers(), status=self.status_dict, task_logs=self.task_logs)
        address = self.server.start(self.resume.port)
        self.status.tracking_url = f"http://{address}/ui/{self.view_token}"
        self.status.tracking_url = self.cluster.publish_endpoint(address, self.token, self.view_token,
                                                                 self.status.tracking_url)
        return address

    def _task_env(self, task_id: str, session_id: int, fixed_port: int | None, container: Container) -> dict[str, str]:
        # Only what this job adds: the backend merges it into the container's own environment.
        env = dict(self.spec.container_env)
        env.update({
            "TONY_AM_ADDRESS": self.address, "TONY_AM_TOKEN": self.token, "TONY_TASK_ID": task_id,
            "SESSION_ID": str(session_id), "TONY_APPLICATION_ID": self.app_id, "JOB_ID": self.app_id,
            "TONY_SPEC_FILE": str(self.app_dir / "spec.json"),
            "TONY_CHECKPOINT_LOCATION": self.checkpoint_location, "TONY_CONTAINER_ID": container.id,
        })
        if self._fallbacks:
            env["TONY_CHECKPOINT_FALLBACKS"] = self._fallbacks
        if self.model_params:
            env[MODEL_PARAMS_ENV] = self.model_params
        if self.log_dir:
            env["TONY_LOG_DIR"] = self.log_dir
        if fixed_port:
            env["TONY_TASK_PORT"] = str(fixed_port)
        return env

    def _new_task(self, task_id: str, container: Container, session_id: int, fixed_port: int | None = None,
                  restarts: int = 0) -> Task:
        ttype, idx = task_id.split(":")
        status = TaskStatus(type=ttype, index=int(idx), state=TaskState.NEW, container_id=container.id,
                            host=container.host, restarts=restarts)
        task = Task(status=status, container=container, session_id=session_id, fixed_port=fixed_port)
        # The status lists the session's tasks in launch order, kept here as tasks come and go
        # rather than rebuilt on every change (a gang of a thousand registering is a thousand changes).
        old, roster = self.tasks.get(task_id), self.status.tasks
        where = next((i for i, t in enumerate(roster) if t is old.status), None) if old else None
        if where is None:
            roster.append(status)
        else:
            roster[where] = status
        self.tasks[task_id] = task
        return task

    def _mark_launched(self, task: Task) -> None:
        """The task's container is granted and runs its executor. Called with the lock held."""
        task.launched_at = time.time()
        self.set_task_state(task, TaskState.LAUNCHED, container=task.container.id, gpus=task.container.gpu_indices)

    def _mark_granted(self) -> None:
        """Tasks whose containers the cluster granted since the last look are LAUNCHED; those it
        has not granted stay REQUESTED. Called with the lock held."""
        for task in self.tasks.values():
            if task.status.state == TaskState.REQUESTED and self.cluster.granted(task.container):
                task.status.log_url = self.cluster.log_url(task.container)
                self._mark_launched(task)

    def _launch_member(self, task_id: str, container: Container, restarts: int) -> Task:
        """An elastic group's replacement for a lost task, in this session. Called with the lock held."""
        self.containers[task_id] = container
        return self._launch(task_id, container, self.session_id, restarts=restarts)

    def _launch(self, task_id: str, container: Container, session_id: int, fixed_port: int | None = None,
                restarts: int = 0) -> Task:
        """Creates and launches one task. Called with the lock held."""
        task = self._new_task(task_id, container, session_id, fixed_port, restarts)
        self.set_task_state(task, TaskState.REQUESTED, container=container.id)
        self.cluster.launch(container, self.executor_argv, self._task_env(task_id, session_id, fixed_port, container))
        self._mark_granted()
        return task

    def _start_session(self, session_id: int) -> None:
        with self.lock:
            self.session_id = session_id
            self.status.session_id = session_id
            self.status.attempts = session_id + 1
            self.tasks = {}
            self.status.tasks = []
            self.policy = Policy.from_spec(self.spec)  # a type a dependency timeout stopped counting counts again
            self.cluster_spec = None
            self.gang_ready = threading.Event()
            if self.elastic is not None:
                self.elastic.begin(session_id, time.time())
            chief = f"{self.chief[0]}:{self.chief[1]}"
            self._fallbacks = os.pathsep.join(self.cluster.checkpoint_fallbacks(chief))
            self.events.emit("session_started", session=session_id)
            tasks = []
            for task_id, container in self.containers.items():
                task = self._new_task(task_id, container, session_id)
                self.set_task_state(task, TaskState.REQUESTED, container=container.id)
                tasks.append(task)
            self.publish()
        # Launched without the lock, so status requests and early registrations are answered while
        # the rest of the gang is still being started.
        self.cluster.launch_all([(t.container, self.executor_argv, self._task_env(t.id, session_id, None, t.container))
                                 for t in tasks])
        with self.lock:
            self.gang.asked()
            self._mark_granted()
            self._gang_pass(None)
            state = attempt_state(self.status, self.resume)
        self.cluster.save_attempt_state(state, self.app_dir)

    def _gang_pass(self, wait: Wait | None) -> None:
        """Counts the gang's granted containers; once all are, the job RUNS. Called with the lock
        held; ``wait`` is the cluster's latest word on what is missing."""
        pending = [t for t in self.tasks.values() if t.status.state == TaskState.REQUESTED]
        changed = self.gang.granted(1 + len(self.tasks) - len(pending), 1 + len(self.tasks))
        if not pending:
            if self.status.state == JobState.ALLOCATING or self.status.waiting_reason:
                waited = self.gang.whole()
                self.events.emit("gang_formed", session=self.session_id, containers=self.gang.wanted,
                                 **({"waited_s": round(waited, 3)} if waited is not None else {}))
                self.gang.show(self.status)
                self.status.state = JobState.RUNNING
                self.publish()
            return
        if self.gang.waiting(wait) or changed:
            self.gang.show(self.status)
            self.publish()

    def _forming(self) -> None:
        """One look at a gang that is not whole (outside the lock: the cluster may ask its
        scheduler). Raises SessionEnd to give the gang back, or when it is overdue."""
        with self.lock:
            self._mark_granted()
            pending = [t.container for t in self.tasks.values() if t.status.state == TaskState.REQUESTED]
            granted = [t.container for t in self.tasks.values() if t.status.state != TaskState.REQUESTED]
            if not pending:
                if not self.gang.formed:
                    self._gang_pass(None)  # a task that registered is granted, whatever the cluster said yet
                return
        wait = self.cluster.forming(pending, granted)
        with self.lock:
            self._mark_granted()
            self._gang_pass(wait)
            try:
                self.gang.overdue()
            except AllocationTimeout as e:
                raise SessionEnd(JobState.FAILED, str(e), retryable=False) from None
            why = self.gang.give_back(wait)
        if why:
            raise SessionEnd(JobState.ALLOCATING, why, unformed=True)

    def _on_exit(self, task: Task, code: int, diagnostics: str = "") -> None:
        """Records a task's end and applies the failure rules. Called with the lock held."""
        if task.final:
            return
        task.status.exit_code = code
        if task.stopping:
            return self.set_task_state(task, TaskState.KILLED, exit_code=code)
        elastic = self.elastic if self.elastic is not None and self.elastic.covers(task) else None
        if code == 0 and elastic is not None:
            wrong = elastic.succeeded(task)
            if wrong:
                self.set_task_state(task, TaskState.FAILED, exit_code=1, diagnostics=wrong)
                raise SessionEnd(JobState.FAILED, f"{task.id}: {wrong}", retryable=False)
            return self.set_task_state(task, TaskState.SUCCEEDED, exit_code=0)
        if code == 0:
            return self.set_task_state(task, TaskState.SUCCEEDED, exit_code=0)
        cause = self.cluster.reclaimed(task.container)
        if elastic is not None and elastic.lost(task, code, cause, diagnostics):
            return
        decision = cause and self.policy.decide_reclaimed(Failure.of(task.status, diagnostics, self.progressed_types), cause,
                                                          self.status.reclaims)
        if decision:
            return self._on_reclaimed(task, code, cause, decision)
        state = TaskState.LOST if code == LOST_EXIT_CODE else TaskState.FAILED
        self.set_task_state(task, state, exit_code=code, diagnostics=diagnostics[-2000:])
        self._on_failure(task, code, diagnostics)

    def _on_reclaimed(self, task: Task, code: int, cause: str, decision) -> None:
        """The cluster took the task's container back: no failure of the job's. Called with the lock held."""
        self.status.reclaims += 1
        self.set_task_state(task, TaskState.KILLED, exit_code=code, diagnostics=decision.diagnostics)
        self.events.emit("container_reclaimed", task=task.id, session=task.session_id, cause=cause)
        if decision.action is Action.RESTART_TASK:
            self._pending_task_restarts.append(task)
        else:
            raise SessionEnd(JobState.FAILED, decision.diagnostics, reclaimed=True)

    def _awaiting_cluster(self, task: Task, code: int, now: float) -> bool:
        """Whether to hold the verdict on a task killed by a signal or fallen silent while its container
        runs as far as the cluster knows: it may yet say it took it back (ClusterManager.reclaim_wait_s)."""
        wait = self.cluster.reclaim_wait_s
        if not wait or not (code == LOST_EXIT_CODE or code > 128 or code < 0):
            return False
        if self.cluster.poll(task.container) is not None:
            return False
        task.held_since = task.held_since or now
        return now - task.held_since < wait

    def _cluster_word(self, task: Task, code: int, diagnostics: str) -> tuple[int, str]:
        """A reported end, unless the cluster ended the container with its own status (<= -100: YARN's -104)."""
        own = self.cluster.poll(task.container) if code else None
        if own is None or own > -100:
            return code, diagnostics
        said = self.cluster.exit_diagnostics(task.container)
        return own, (f"The cluster said: {said} " if said else "") + diagnostics

    def _on_failure(self, task: Task, code: int, diagnostics: str) -> None:
        """Applies the policy's decision on a failed task. Called with the lock held."""
        decision = self.policy.decide(Failure.of(task.status, diagnostics, self.progressed_types), self.status.retries,
                                      self.task_restarts.get(task.id, 0))
        action = decision.action
        if action is Action.IGNORE:
            self.events.emit("sidecar_failed", task=task.id, exit_code=code)
        elif action is Action.RESTART_TASK:
            self.task_restarts[task.id] = self.task_restarts.get(task.id, 0) + 1
            # Relaunched by the monitor after this pass, outside the lock: the old container's kill waits.
            self._pending_task_restarts.append(task)
        elif action is Action.TOLERATE:
            self.events.emit("worker_failure_tolerated", task=task.id, exit_code=code)
        elif action is Action.END_SESSION:
            raise SessionEnd(*self._verdict(stopped_early=decision.diagnostics), retryable=False)
        else:
            raise SessionEnd(JobState.FAILED, decision.diagnostics, retryable=action is Action.RESTART_SESSION)

    def _verdict(self, stopped_early: str | None = None) -> tuple[str, str]:
        return self.policy.verdict([t.status for t in self.tasks.values()], stopped_early)

    def _relaunch_task(self, task: Task) -> None:
        """Restart policy ``task``: same index, same address, same reservation, same session."""
        self.cluster.kill(task.container, grace=1.0)
        container = self.cluster.new_container(task.container)
        restarts = self.task_restarts.get(task.id, 0)
        self.events.emit("task_restarted", task=task.id, session=self.session_id, restart=restarts,
                         port=task.status.port)
        with self.lock:
            new = self._launch(task.id, container, self.session_id, fixed_port=task.status.port, restarts=restarts)
            new.status.host = task.status.host

    def _check(self) -> None:
        """One pass of the monitor. Raises SessionEnd when the session is over."""
        now = time.time()
        if self.kill_requested:
            raise SessionEnd(JobState.KILLED, self.kill_requested, retryable=False)
        if self.store_failure:
            raise SessionEnd(JobState.FAILED, self.store_failure, retryable=False)
        timeout = self.spec.application_timeout_ms
        if timeout > 0 and now - (self.status.started_at or now) > timeout / 1000.0:
            raise SessionEnd(JobState.FAILED, f"Application timed out after {timeout} ms "
                             f"(tony.application.timeout)", retryable=False)
        reg_timeout = self.spec.registration_timeout_ms
        # A member's collective failed: each elastic container is looked at where it runs (on YARN,
        # its node) rather than waiting for the cluster's report.
        suspect = self.elastic is not None and self.elastic.suspect(now)
        for task in list(self.tasks.values()):
            if task.final or task.status.state == TaskState.REQUESTED:
                continue
            if task.status.log_url is None and task.registered_at:
                # A cluster that places a container as it grants it (YARN) knows its log's node later.
                task.status.log_url = self.cluster.log_url(task.container)
            if task.reported is not None:
                if not self._awaiting_cluster(task, task.reported[0], now):
                    self._on_exit(task, *self._cluster_word(task, *task.reported))
                continue
            code = self.cluster.poll(task.container)
            if code is None and suspect and self.elastic is not None and self.elastic.covers(task):
                code = self.cluster.ended_now(task.container)
                if code is not None:  # its verdict waits, as a report's, for the cluster to say if it took it back
                    self.events.emit("member_seen_ended", task=task.id, session=task.session_id, exit_code=code)
                    task.reported = (128 - code if -64 <= code < 0 else code, log_tail(task.container.stderr))
                    continue
            if code is not None:
                # Its executor is gone: what it started (the user process, a server holding the task's
                # port) goes with it, before the task is relaunched: after this pass, outside the lock
                # (:meth:`_stop_ended`), so that a storm of ends does not keep the AM from answering.
                self._ended.append(task.container)
                # Killed by signal N -> 128+N, as shells report it; a cluster's own status (YARN's
                # -104 for a container over its memory) stays as the cluster gave it.
                code = 128 - code if -64 <= code < 0 else code
                diag = "" if task.registered_at else "task failed before registering with the AM. "
                said = self.cluster.exit_diagnostics(task.container)
                self._on_exit(task, code, diag + (f"The cluster said: {said} " if said else "")
                              + log_tail(task.container.stderr))
                continue
            lost = self.liveness.silent(task.id, task.last_heartbeat, now) or (
                task.status.state == TaskState.RUNNING and self.liveness.stalled(task.id, task.progress.updated_at, now))
            if lost and not self._awaiting_cluster(task, LOST_EXIT_CODE, now):
                self._ended.append(task.container)
                self.events.emit("task_lost", task=task.id, session=task.session_id, reason=lost)
                self._on_exit(task, LOST_EXIT_CODE, lost)
                continue
            if reg_timeout > 0 and not task.registered_at and now - task.launched_at > reg_timeout / 1000.0:
                raise SessionEnd(JobState.FAILED, f"Task {task.id} did not register within {reg_timeout} ms "
                                 f"(tony.container.registration.timeout)")
        too_few = self.elastic.monitor_pass(now) if self.elastic is not None else None
        if too_few:
            raise SessionEnd(JobState.FAILED, too_few)
        self._group_timeouts(now)
        if self.policy.tracked_done(t.status for t in self.tasks.values()):
            raise SessionEnd(*self._verdict(), retryable=False)

    def _group_timeouts(self, now: float) -> None:
        """TonY's group dependency timeouts (:mod:`tony_workflow.spec.groups`): a type still running
        that long after its group ended fails the job, or with ``.ignored`` stops counting for its end."""
        for dep, members in overdue(self.group_dependencies, self.groups, self.tasks.values(), now):
            if not dep.ignored:
                raise SessionEnd(JobState.FAILED, f"Task type: {dep.waiting} runs exceeded timeout because it's "
                                 f"dependent group: {dep.group} (task set: [{','.join(members)}]) has been finished "
                                 f"({dep.key}={dep.timeout_s})", retryable=False)
            if dep.waiting in self.policy.tracked:
                self.policy = dataclasses.replace(self.policy, tracked=self.policy.tracked - {dep.waiting})
                self.events.emit("type_untracked", session=self.session_id, type=dep.waiting, group=dep.group,
                                 key=f"{dep.key}.ignored")

    def _run_session(self) -> SessionEnd:
        while True:
            self._pending_task_restarts: list[Task] = []
            self._ended = []
            try:
                with self.cond:
                    self.cond.wait(self.tick)
                    # Progress first: the last report arrives just before the result that ends the session.
                    # An elastic group's rank 0 moves between containers: its progress is the latest report.
                    chief = "" if self.elastic is not None else f"{self.chief[0]}:{self.chief[1]}"
                    data = self.board.due(((t.id, t.progress) for t in self.tasks.values()), chief, time.time())
                    self._check()
                self.board.persist(data)
                self._forming()
            except SessionEnd as end:
                self._stop_ended()
                return end
            self._stop_ended()
            for task in self._pending_task_restarts:
                self._relaunch_task(task)
            if self.elastic is not None:
                for task in self.elastic.take_replacements():
                    self.elastic.replace(task)

    def _stop_ended(self) -> None:
        """Stops what the containers that ended on the pass left running, without the lock: one slow
        to die (freeing gigabytes after a memory kill) must not keep the AM from answering."""
        ended, self._ended = self._ended, []
        self.cluster.kill_all(ended, 0.5)

    def _teardown(self) -> None:
        with self.lock:
            for t in self.tasks.values():
                if t.status.state == TaskState.REQUESTED:
                    t.stopping = True  # asked, never granted: the request is withdrawn below
                    continue
                # Tasks that ended on their own keep their real outcome, not "killed".
                code = None if t.final else (t.reported[0] if t.reported else self.cluster.poll(t.container))
                if code is not None:
                    code = 128 - code if -64 <= code < 0 else code
                    self.set_task_state(t, TaskState.SUCCEEDED if code == 0 else TaskState.FAILED, exit_code=code)
                    t.status.exit_code = code
            live = [t for t in self.tasks.values() if not t.final]
            for t in live:
                t.stopping = True
            self.gang_ready.set()  # wakes waiters for the cluster spec; they find their session gone
            if self.elastic is not None:
                self.elastic.rendezvous.close()
            self.cond.notify_all()
        self.cluster.kill_all([t.container for t in live], 3.0)
        with self.lock:
            for t in live:
                if t.status.state == TaskState.REQUESTED:
                    self.set_task_state(t, TaskState.NEW)  # withdrawn: it never had a container
                elif not t.final:
                    code = self.cluster.poll(t.container)
                    t.status.exit_code = code
                    self.set_task_state(t, TaskState.KILLED, exit_code=code)

    def run(self) -> int:
        self._pending_task_restarts = []
        calm_collector()
        self.address = self.start_server()
        write_am_info(self.app_dir, self.address, self.status.tracking_url)
        # When the job's turn came at the cluster's gate (its first attempt's: a later one's gang
        # is asked for again by the AM), for its timeline.
        admitted = self.cluster.admitted_at() if self.resume.attempt <= 1 else None
        self.events.emit("am_started", address=self.address, pid=os.getpid(), spec=self.spec.name,
                         attempt=self.resume.attempt, **({"admitted": admitted} if admitted else {}))
        with self.lock:
            self.publish(force=True)
            state = attempt_state(self.status, self.resume)
        self.cluster.save_attempt_state(state, self.app_dir)  # this attempt is the one a lost container ran
        try:
            end = self._allocate_and_run()
        except Exception as e:  # noqa: BLE001 - the AM must always leave a final status behind
            traceback.print_exc()  # where it failed, in the AM's own log
            self.events.emit("am_error", error=repr(e))
            end = SessionEnd(JobState.FAILED, f"ApplicationMaster error: {str(e) or repr(e)}", retryable=False)
            # nor may a teardown that fails keep it from doing so
            with contextlib.suppress(Exception):
                self._teardown()
        return self._finish(end)

    def _allocate(self, requests) -> SessionEnd | None:
        """Waits for the session's gang (the cluster says why through :meth:`_on_wait`) and keeps
        the containers to launch; a SessionEnd when the job ends instead."""
        try:
            allocated = self.cluster.allocate(requests, self.cancel)
        except InterruptedError:
            return SessionEnd(JobState.KILLED, self.kill_requested or "killed while waiting for resources")
        except (NeverFits, AllocationTimeout) as e:
            return SessionEnd(JobState.FAILED, str(e))
        self.containers = {c.task_id: c for c in allocated if c.task_id != "am"}
        self.events.emit("allocated", containers={c.task_id: {"id": c.id, "gpus": c.gpu_indices} for c in allocated})
        return None

    def _allocate_and_run(self) -> SessionEnd:
        if self.resume.attempt > 1:
            self.cluster.recover()  # what an earlier attempt left where the supervisor cannot reach
            done = finished_verdict(self.policy, self.spec, self.cluster.finished_tasks(self.resume.first_session - 1))
            if done:
                return SessionEnd(*done, retryable=False)
        if self.spec.enable_preprocess and not self.spec.single_node:  # TonY's, before any task is asked for
            ended, self.model_params = preprocess(self)
            if ended is not None:
                return SessionEnd(*ended, retryable=False)
        requests = gang_requests(self.spec)
        self.events.emit("allocating", containers=len(requests))
        session, fresh = self.resume.first_session, True
        since = self.cluster.waited_since()
        while True:
            if fresh:
                with self.lock:
                    self.gang.begin(len(requests), since=since)
                    since = None
                    self.status.state = JobState.ALLOCATING
                    self.gang.show(self.status)
                    self.publish()
            failed = self._allocate(requests)
            if failed is not None:
                return failed
            if self.spec.single_node:  # TonY's: the command runs here, in the AM's own container
                return SessionEnd(*run_single_node(self), retryable=False)
            self._start_session(session)
            end = self._run_session()
            if not end.unformed:
                self.events.emit("session_finished", session=session, state=end.state, diagnostics=end.diagnostics)
            self._teardown()
            if end.unformed:  # given back before it was whole: the same session asks again, later
                pause = self.gang.backoff()
                self.events.emit("gang_released", session=session, reason=end.diagnostics, backoff_s=round(pause, 3))
                with self.lock:
                    self.status.state = JobState.ALLOCATING
                    self.gang.granted(1, len(requests))
                    self.gang.show(self.status)
                    self.publish()
                if self.cancel.wait(pause):
                    return SessionEnd(JobState.KILLED, self.kill_requested or "killed while waiting for resources")
                fresh = False
                continue
            if end.state == JobState.FAILED and end.retryable and (end.reclaimed or
                                                                   self.status.retries < self.retry_count):
                session += 1
                fresh = True
                with self.lock:
                    self.status.retries += 0 if end.reclaimed else 1
                    self.status.diagnostics = f"session {session - 1} ended: {end.diagnostics}"
                continue
            return end

    def _finish(self, end: SessionEnd) -> int:
        with self.lock:
            self.status.state = end.state
            self.status.diagnostics = end.diagnostics
            self.status.finished_at = time.time()
            self.publish(force=True)
        self.events.emit("application_finished", state=end.state, diagnostics=end.diagnostics)
        from ..history import record_history  # the store's client: imported only as the job ends

        # The record first: once the cluster hears the end (YARN), the AM's container may be stopped.
        self.board.save_series(self.app_dir / SERIES_FILE, time.time())
        record_history(self.app_dir, self.status.backend, self.cluster.board_store())
        try:
            self.cluster.release()
            with self.lock:
                final = self.status.to_dict()
            self.cluster.finish(end.state, end.diagnostics, final)
        finally:
            mark_am_stopped(self.app_dir)
            if self.server:
                self.server.shutdown()
            self.events.close()
        return 0 if end.state == JobState.SUCCEEDED else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tony-am", description="tony-workflow ApplicationMaster")
    ap.add_argument("--backend", default="local", choices=["local", "yarn"])
    ap.add_argument("--app-dir", required=True, type=Path)
    args = ap.parse_args(argv)
    app_dir: Path = args.app_dir.resolve()
    spec = JobSpec.from_dict(json.loads((app_dir / "spec.json").read_text()))
    cluster, me = get_cluster_manager(args.backend, app_dir, spec)
    am = ApplicationMaster(spec, me.app_id, app_dir, cluster, token=me.token, view_token=me.view_token, host=me.host,
                           resume=resume_point(app_dir))

    def on_term(signum: int, frame: Any) -> None:
        # The job is being killed (its supervisor forwards its own SIGTERM): the monitor stops the
        # tasks and writes KILLED.
        with am.lock:
            am.request_kill(f"ApplicationMaster received {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, on_term)
    return am.run()
