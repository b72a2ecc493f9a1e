"""TonY's group dependency timeouts (:mod:`tony_workflow.am.group_timeouts`): which have run out,
as a table of sessions. What the AM then does (fails the job, or stops counting the type) is
tests/tony_workflow/jobs/test_runtime.py's."""
from __future__ import annotations

import pytest

from tony_workflow.am.group_timeouts import overdue
from tony_workflow.am.state import Task
from tony_workflow.backends import Container
from tony_workflow.spec.groups import GroupDependency
from tony_workflow.status import TaskState, TaskStatus

NOW = 1000.0
GROUPS = {"A": ["worker", "chief"]}
EVALUATOR_AFTER_A = GroupDependency("evaluator", "A", 60)


def task(task_id: str, state: str = TaskState.RUNNING, ended: float | None = None, started: bool = True) -> Task:
    ttype, index = task_id.split(":")
    t = Task(TaskStatus(type=ttype, index=int(index), state=state), Container(f"c-{task_id}", task_id, 512, 1),
             session_id=0, registered_at=1.0 if started else None)
    t.ended_at = ended
    return t


@pytest.mark.parametrize("tasks,expected", [
    # the group ended 61 s ago and the evaluator still runs: overdue
    ([task("chief:0", TaskState.SUCCEEDED, 939), task("worker:0", TaskState.SUCCEEDED, 900),
      task("evaluator:0")], [(EVALUATOR_AFTER_A, ["chief", "worker"])]),
    # the last of the group ended 59 s ago: not yet
    ([task("chief:0", TaskState.SUCCEEDED, 941), task("worker:0", TaskState.FAILED, 900), task("evaluator:0")], []),
    # a task of the group still runs
    ([task("chief:0", TaskState.SUCCEEDED, 100), task("worker:0"), task("evaluator:0")], []),
    # the waiting type ended too
    ([task("worker:0", TaskState.SUCCEEDED, 100), task("evaluator:0", TaskState.SUCCEEDED, 120)], []),
    # a task of the session has not started: nothing is decided yet
    ([task("worker:0", TaskState.SUCCEEDED, 100), task("evaluator:0", started=False)], []),
    # the session has none of the group's types
    ([task("ps:0", TaskState.SUCCEEDED, 100), task("evaluator:0")], []),
])
def test_a_dependency_is_overdue_once_its_whole_group_ended_longer_ago_than_its_timeout(tasks, expected):
    assert overdue([EVALUATOR_AFTER_A], GROUPS, tasks, NOW) == expected


def test_a_dependency_on_a_group_nobody_defined_is_never_overdue():
    tasks = [task("worker:0", TaskState.SUCCEEDED, 1), task("evaluator:0")]
    assert overdue([GroupDependency("evaluator", "B", 0)], GROUPS, tasks, NOW) == []
