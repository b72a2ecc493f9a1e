"""What the ApplicationMaster does for an elastic group: replace a lost task while the others run on.

:class:`Regrouping` is the part of the AM's mechanics that only an elastic job uses (see
:mod:`tony_workflow.am.elastic` for the numbers it rests on). It is given a task of an elastic
type that ended badly and either settles it here (the task is replaced alone, the session goes on;
or it ended after the group had finished) or hands it back to the ordinary failure rules. On each
monitor pass it counts the tasks that remain (replacements count once they have joined the
group), stops replacements that came too late to join, and says when too few have remained for
too long, which relaunches the session whole.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..backends import Container
from ..status import TaskState
from .policy import LOST_EXIT_CODE, describe_exit
from .state import AMState, Task

__all__ = ["Regrouping"]


class Regrouping(AMState):
    """An AM's elastic mechanics; :class:`~tony_workflow.am.master.ApplicationMaster` extends it."""

    #: task id -> the container it runs in (the AM's own bookkeeping)
    containers: dict[str, Container]
    #: tasks to replace after the monitor's pass, outside the lock
    _pending_replacements: list[Task]

    if TYPE_CHECKING:  # the ApplicationMaster's
        def _launch(self, task_id: str, container: Container, session_id: int, fixed_port: int | None = None,
                    restarts: int = 0) -> Task: ...

    def _elastic_exit(self, task: Task, code: int, cause: str | None, diagnostics: str) -> bool:
        """A task of an elastic type ended with ``code`` (``cause``: why the cluster took its
        container back, if it did): True when that is settled here (it is replaced while the others
        train on, or it ended after the group finished), False when the ordinary rules apply.
        Called with the lock held."""
        group = self.elastic
        assert group is not None
        if group.finished and task.container.id not in self.elastic_joined:
            # A replacement too late to join: the others finished training without it.
            self.set_task_state(task, TaskState.KILLED, exit_code=code,
                                diagnostics="the elastic group finished before this task joined it")
            return True
        reclaimed = bool(cause) and self.status.reclaims < self.policy.reclaim_retry_count
        why = (f"its container was {cause}" if cause else
               "lost: the AM gave up on it" if code == LOST_EXIT_CODE else describe_exit(code))
        if not group.lost(task.id, why, reclaimed):
            return False
        if reclaimed:
            self.status.reclaims += 1
            self.events.emit("container_reclaimed", task=task.id, session=task.session_id, cause=cause)
        # Its agent's node leaves the round now, not when its keep-alives lapse.
        self.rendezvous.departed(self.elastic_joined.get(task.container.id, "")
                                 or self.group_nodes.get(task.container.id, ""))
        state = TaskState.KILLED if reclaimed else TaskState.LOST if code == LOST_EXIT_CODE else TaskState.FAILED
        self.set_task_state(task, state, exit_code=code, diagnostics=diagnostics[-2000:])
        self.events.emit("elastic_member_lost", task=task.id, session=task.session_id, exit_code=code, cause=why,
                         reclaimed=reclaimed, changes=group.changes, max_changes=group.max_changes)
        # Replaced by the monitor after this pass, outside the lock: the old container's kill waits.
        self._pending_replacements.append(task)
        return True

    def _replace_member(self, task: Task) -> None:
        """A lost elastic task gets a new container, on any port and (on YARN) any node; its agent
        joins the group at the next rendezvous. The others are left running."""
        self.cluster.kill(task.container, grace=1.0)
        restarts = task.status.restarts + 1
        with self.lock:
            if self.session_id != task.session_id or self.elastic is None or self.elastic.finished:
                return
            container = self.cluster.new_container(task.container)
            self.events.emit("task_replaced", task=task.id, session=self.session_id, restart=restarts)
            self.containers[task.id] = container
            self._launch(task.id, container, self.session_id, restarts=restarts)

    def _elastic_pass(self, now: float | None = None) -> str | None:
        """One look at the group on the monitor's pass: why the session must be relaunched whole
        (too few remained for too long), or None. Replacements that have not joined do not count
        as remaining; once training is over, those are stopped. Called with the lock held."""
        group = self.elastic
        assert group is not None
        now = time.time() if now is None else now
        alive: dict[str, int] = {}
        for t in list(self.tasks.values()):
            if t.final or t.stopping or t.status.state == TaskState.REQUESTED or not group.is_elastic(t.status.type):
                continue
            joined = t.container.id in self.elastic_joined
            if group.finished and not joined:
                t.stopping = True
                self.cluster.kill(t.container, grace=0.5)
                self.set_task_state(t, TaskState.KILLED, exit_code=t.status.exit_code,
                                    diagnostics="the elastic group finished before this task joined it")
                continue
            if joined or t.status.restarts == 0:  # a first launch counts from the start; a replacement once it joins
                alive[t.status.type] = alive.get(t.status.type, 0) + 1
        return group.overdue(alive, now)
