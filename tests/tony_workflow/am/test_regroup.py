"""The AM's elastic mechanics (:mod:`tony_workflow.am.regroup`) on an AM's declared state with the
embedded cluster's real cluster manager (which launches nothing here): which ends are settled by
a replacement, which go to the ordinary rules, what counts as remaining, and when the session
must be relaunched whole."""
from __future__ import annotations

import pytest

from tony_workflow.am.regroup import Regrouping
from tony_workflow.am.rendezvous import Formed
from tony_workflow.am.state import Task
from tony_workflow.backends import Container
from tony_workflow.backends.local import LocalClusterManager
from tony_workflow.backends.local_ledger import Inventory
from tony_workflow.spec import load_job
from tony_workflow.status import TaskState, TaskStatus


class AM(Regrouping):
    """The elastic mechanics with a launcher that records what it is asked to launch."""

    launched: list[tuple[str, int]]

    def _launch(self, task_id, container, session_id, fixed_port=None, restarts=0):
        self.launched.append((task_id, restarts))
        ttype, index = task_id.split(":")
        task = Task(status=TaskStatus(type=ttype, index=int(index), state=TaskState.LAUNCHED,
                                      container_id=container.id, restarts=restarts),
                    container=container, session_id=session_id)
        self.tasks[task_id] = task
        return task


@pytest.fixture
def am(tmp_path) -> AM:
    spec = load_job({"name": "regroup", "framework": "pytorch", "command": "true",
                     "tasks": {"worker": {"instances": 3, "min_instances": 2}},
                     "conf": {"tony.elastic.max-membership-changes": "1", "tony.elastic.fallback-timeout-ms": "5000",
                              "tony.am.reclaim-retry-count": "1"}})
    cluster = LocalClusterManager("application_1_0001", tmp_path, Inventory(8192, 8, []))
    state = AM(spec, "application_1_0001", tmp_path, cluster)
    state.launched, state.containers, state._pending_replacements = [], {}, []
    for index in range(3):
        container = Container(id=f"c{index}", task_id=f"worker:{index}", memory_mb=256, vcores=1)
        status = TaskStatus(type="worker", index=index, state=TaskState.RUNNING, container_id=container.id)
        state.tasks[f"worker:{index}"] = Task(status=status, container=container, session_id=0)
    state.elastic.begin(0, 0.0)
    state.rendezvous.open("application_1_0001-0")
    with state.lock:  # as the round route does
        for index in range(3):
            state.group_joined(state.tasks[f"worker:{index}"], None, f"h_{100 + index}_0")
        state.group_joined(state.tasks["worker:0"], Formed(0, {"worker:0": 0, "worker:1": 1, "worker:2": 2}))
    return state


def test_a_lost_task_is_replaced_alone_and_counted(am):
    with am.lock:
        assert am._elastic_exit(am.tasks["worker:1"], 137, None, "killed")
    assert am.tasks["worker:1"].status.state == TaskState.FAILED and am.elastic.changes == 1
    assert am.rendezvous.dead(am.rendezvous.run_id) == ["h_101_0"]   # its node leaves the round now
    assert am._pending_replacements == [am.tasks["worker:1"]]
    am._replace_member(am._pending_replacements.pop())
    assert am.launched == [("worker:1", 1)] and am.containers["worker:1"].task_id == "worker:1"
    assert am.tasks["worker:1"].status.state == TaskState.LAUNCHED   # the new one; the others untouched
    assert all(am.tasks[t].status.state == TaskState.RUNNING for t in ("worker:0", "worker:2"))
    # The limit (1) is spent: the next loss goes to the ordinary rules, unless the cluster took it back.
    with am.lock:
        assert not am._elastic_exit(am.tasks["worker:2"], 1, None, "")
        assert am._elastic_exit(am.tasks["worker:0"], 143, "preempted by the scheduler", "")
    assert am.tasks["worker:0"].status.state == TaskState.KILLED and am.status.reclaims == 1
    assert am.elastic.changes == 1 and am.elastic.departures["worker:0"] == "its container was preempted by the scheduler"


def test_what_remains_excludes_replacements_until_they_join_and_too_few_for_too_long_relaunches(am):
    with am.lock:
        am._elastic_exit(am.tasks["worker:1"], 137, None, "")
        am._elastic_exit(am.tasks["worker:2"], 137, "lost with its node", "")
        assert am.elastic.round == 0   # the group had formed: the clock may run
    for task in list(am._pending_replacements):
        am._replace_member(task)
    with am.lock:
        assert am._elastic_pass(100.0) is None and am.elastic.below_since == 100.0   # one remains of min 2
        assert "only 1 of tony.worker.min-instances=2" in am._elastic_pass(105.5)
        am.group_joined(am.tasks["worker:1"], None)  # a replacement joins: two remain
        assert am._elastic_pass(106.0) is None and am.elastic.below_since is None


def test_once_training_is_over_a_replacement_that_has_not_joined_is_stopped(am):
    with am.lock:
        am._elastic_exit(am.tasks["worker:2"], 1, None, "")
    am._replace_member(am._pending_replacements.pop())
    am.elastic.finished = True
    with am.lock:
        assert am._elastic_pass(1.0) is None
    replacement = am.tasks["worker:2"]
    assert replacement.status.state == TaskState.KILLED and replacement.stopping
    # A member that ends after that is no loss to replace.
    with am.lock:
        assert not am._elastic_exit(am.tasks["worker:0"], 1, None, "")
