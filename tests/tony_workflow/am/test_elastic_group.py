"""An elastic job's part of the AM (:mod:`tony_workflow.am.elastic_group`). The group's account:
which losses are replaced and counted, how each formed round changes the group and why, and when too
few remain too long. The part the AM holds (``ElasticPart``), on an AM's declared state with the
embedded cluster's real cluster manager (which launches nothing here): which ends are settled by a
replacement, which go to the ordinary rules, what counts as remaining, and when the session must be
relaunched whole."""
from __future__ import annotations

import pytest

from tony_workflow.am.elastic_group import ElasticGroup
from tony_workflow.am.rendezvous import Formed
from tony_workflow.am.state import AMState, Task
from tony_workflow.backends import Container
from tony_workflow.backends.local import LocalClusterManager
from tony_workflow.backends.local.ledger import Inventory
from tony_workflow.spec import load_job
from tony_workflow.status import JobStatus, TaskState, TaskStatus


def group(conf: dict | None = None, tasks: dict | None = None, framework: str = "pytorch") -> ElasticGroup | None:
    spec = load_job({"name": "el", "framework": framework, "command": "true",
                     "tasks": tasks or {"worker": {"instances": 3, "min_instances": 2}}, "conf": conf or {}})
    return ElasticGroup.from_spec(spec)


def test_only_a_pytorch_job_with_a_type_below_its_instances_has_a_group():
    assert group(tasks={"worker": {"instances": 3}}) is None
    assert group(tasks={"worker": {"instances": 3, "min_instances": 3}}) is None
    g = group(tasks={"chief": {"instances": 1}, "worker": {"instances": 4, "min_instances": 1},
                     "evaluator": {"instances": 1}})
    # The chief ranks too (a fixed node of the group); the evaluator does not.
    assert g is not None and g.bounds == {"worker": (1, 4)} and (g.minimum, g.target) == (2, 5)
    assert g.max_changes == 10 and g.fallback_timeout_s == 120.0
    g = group({"tony.elastic.max-membership-changes": "1", "tony.elastic.fallback-timeout-ms": "2500"})
    assert g.max_changes == 1 and g.fallback_timeout_s == 2.5


def test_losses_are_counted_up_to_the_limit_and_the_clusters_reclaims_are_free():
    g = group({"tony.elastic.max-membership-changes": "2"})
    g.begin(0, 100.0)
    assert g.lost("worker:1", "exit code 137 (SIGKILL)", reclaimed=False) and g.changes == 1
    assert g.lost("worker:2", "its container was preempted by the scheduler", reclaimed=True) and g.changes == 1
    assert g.lost("worker:0", "exit code 1", reclaimed=False) and g.changes == 2
    assert not g.lost("worker:1", "exit code 1", reclaimed=False)  # spent: the failure rules decide
    g.begin(1, 200.0)  # a new session starts with its own count
    assert g.changes == 0 and g.lost("worker:1", "exit code 1", reclaimed=False)


def test_once_training_is_over_nothing_is_replaced():
    g = group()
    g.begin(0, 0.0)
    g.finished = True
    assert not g.lost("worker:2", "exit code 1", reclaimed=False) and g.changes == 0


def test_each_formed_round_records_the_size_who_left_who_joined_and_why():
    g = group()
    g.begin(0, 0.0)
    first = g.formed(Formed(0, {"worker:1": 0, "worker:0": 1, "worker:2": 2}), 1.0)
    assert first["event"] == "group formed" and first["size"] == 3
    assert first["joined"] == ["worker:0", "worker:1", "worker:2"]
    g.lost("worker:1", "exit code 137 (SIGKILL)", reclaimed=False)
    shrunk = g.formed(Formed(1, {"worker:0": 0, "worker:2": 1}), 5.0)
    assert shrunk["event"] == "group shrank" and shrunk["size"] == 2 and shrunk["left"] == ["worker:1"]
    assert shrunk["causes"] == {"worker:1": "exit code 137 (SIGKILL)"} and "joined" not in shrunk
    grown = g.formed(Formed(2, {"worker:0": 0, "worker:1": 1, "worker:2": 2}), 9.0)
    assert grown["event"] == "group grew" and grown["joined"] == ["worker:1"] and "causes" not in grown
    assert g.formed(Formed(1, {"worker:0": 0}), 10.0) is None  # an older round changes nothing
    # A replacement that joins before the group re-forms without the task it replaces:
    g.lost("worker:2", "lost: the AM gave up on it", reclaimed=False)
    same = g.formed(Formed(3, {"worker:0": 0, "worker:1": 1, "worker:2": 2}), 12.0)
    assert same["event"] == "group re-formed" and same["replaced"] == ["worker:2"]
    assert same["causes"] == {"worker:2": "lost: the AM gave up on it"}
    status = JobStatus("application_1_0001")
    g.show(status, waiting=["worker:1"])
    assert status.elastic["size"] == 3 and status.elastic["target"] == 3 and status.elastic["min"] == 2
    assert status.elastic["waiting"] == ["worker:1"] and status.elastic["changes"] == 2
    assert [h["size"] for h in status.elastic["history"]] == [0, 3, 2, 3, 3]
    assert "group=3/3 (1 joining: worker:1)" in status.summary()


def test_a_cause_told_after_the_group_re_formed_goes_with_that_change():
    g = group()
    g.begin(0, 0.0)
    g.formed(Formed(0, {"worker:0": 0, "worker:1": 1, "worker:2": 2}), 1.0)
    shrunk = g.formed(Formed(1, {"worker:0": 0, "worker:1": 1}), 2.0)   # before the AM heard of worker:2
    assert "causes" not in shrunk
    assert g.lost("worker:2", "its container was lost with its node", reclaimed=True)
    assert shrunk["causes"] == {"worker:2": "its container was lost with its node"} and not g.departures
    grown = g.formed(Formed(2, {"worker:0": 0, "worker:1": 1, "worker:2": 2}), 9.0)
    assert grown["joined"] == ["worker:2"] and "causes" not in grown


def test_too_few_for_longer_than_the_fallback_timeout_relaunches_the_session():
    g = group({"tony.elastic.fallback-timeout-ms": "5000"})
    g.begin(0, 0.0)
    # Before the group first forms, its tasks are still being granted: no clock runs.
    assert g.overdue({"worker": 0}, 1.0) is None and g.overdue({"worker": 0}, 100.0) is None
    assert g.below_since is None
    g.formed(Formed(0, {"worker:0": 0, "worker:1": 1, "worker:2": 2}), 5.0)
    assert g.overdue({"worker": 3}, 10.0) is None
    assert g.overdue({"worker": 1}, 20.0) is None and g.below_since == 20.0
    assert g.overdue({"worker": 1}, 24.0) is None
    assert g.overdue({"worker": 2}, 24.5) is None and g.below_since is None  # back to the minimum: the clock stops
    assert g.overdue({"worker": 1}, 30.0) is None
    why = g.overdue({"worker": 1}, 35.5)
    assert why == ("the elastic group has had only 1 of tony.worker.min-instances=2 'worker' tasks for more than "
                   "5 s (tony.elastic.fallback-timeout-ms): relaunching the session whole")
    g.finished = True
    assert g.overdue({"worker": 0}, 100.0) is None  # training is over: the others ending is no shortage


# ---------------------------------------------------------------- the AM's part: ElasticPart
class AM(AMState):
    """An AM's declared state with a launcher that records what it is asked to launch."""

    def __init__(self, *args):
        super().__init__(*args, launch=self.launch)
        self.launched: list[tuple[str, int]] = []

    def launch(self, task_id, container, restarts):
        self.launched.append((task_id, restarts))
        ttype, index = task_id.split(":")
        task = Task(status=TaskStatus(type=ttype, index=int(index), state=TaskState.LAUNCHED,
                                      container_id=container.id, restarts=restarts),
                    container=container, session_id=self.session_id)
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
    for index in range(3):
        container = Container(id=f"c{index}", task_id=f"worker:{index}", memory_mb=256, vcores=1)
        status = TaskStatus(type="worker", index=index, state=TaskState.RUNNING, container_id=container.id)
        state.tasks[f"worker:{index}"] = Task(status=status, container=container, session_id=0)
    state.elastic.begin(0, 0.0)
    with state.lock:  # as the round route does
        for index in range(3):
            state.elastic.joined_round(state.tasks[f"worker:{index}"], None, f"h_{100 + index}_0")
        state.elastic.joined_round(state.tasks["worker:0"], Formed(0, {"worker:0": 0, "worker:1": 1, "worker:2": 2}))
    return state


def test_a_lost_task_is_replaced_alone_and_counted(am):
    with am.lock:
        assert am.elastic.lost(am.tasks["worker:1"], 137, None, "killed")
    assert am.tasks["worker:1"].status.state == TaskState.FAILED and am.elastic.group.changes == 1
    assert am.elastic.rendezvous.dead(am.elastic.rendezvous.run_id) == ["h_101_0"]   # its node leaves the round now
    [lost] = am.elastic.take_replacements()
    assert lost is am.tasks["worker:1"] and am.elastic.take_replacements() == []
    am.elastic.replace(lost)
    assert am.launched == [("worker:1", 1)] and am.tasks["worker:1"].container.task_id == "worker:1"
    assert am.tasks["worker:1"].status.state == TaskState.LAUNCHED   # the new one; the others untouched
    assert all(am.tasks[t].status.state == TaskState.RUNNING for t in ("worker:0", "worker:2"))
    # The limit (1) is spent: the next loss goes to the ordinary rules, unless the cluster took it back.
    with am.lock:
        assert not am.elastic.lost(am.tasks["worker:2"], 1, None, "")
        assert am.elastic.lost(am.tasks["worker:0"], 143, "preempted by the scheduler", "")
    assert am.tasks["worker:0"].status.state == TaskState.KILLED and am.status.reclaims == 1
    assert am.elastic.group.changes == 1 and am.elastic.group.departures["worker:0"] == "its container was preempted by the scheduler"


def test_what_remains_excludes_replacements_until_they_join_and_too_few_for_too_long_relaunches(am):
    with am.lock:
        am.elastic.lost(am.tasks["worker:1"], 137, None, "")
        am.elastic.lost(am.tasks["worker:2"], 137, "lost with its node", "")
        assert am.elastic.group.round == 0   # the group had formed: the clock may run
    for task in am.elastic.take_replacements():
        am.elastic.replace(task)
    with am.lock:
        assert am.elastic.monitor_pass(100.0) is None and am.elastic.group.below_since == 100.0   # one remains of min 2
        assert "only 1 of tony.worker.min-instances=2" in am.elastic.monitor_pass(105.5)
        am.elastic.joined_round(am.tasks["worker:1"], None)  # a replacement joins: two remain
        assert am.elastic.monitor_pass(106.0) is None and am.elastic.group.below_since is None


def test_once_training_is_over_a_replacement_that_has_not_joined_is_stopped(am):
    with am.lock:
        am.elastic.lost(am.tasks["worker:2"], 1, None, "")
    [lost] = am.elastic.take_replacements()
    am.elastic.replace(lost)
    am.elastic.group.finished = True
    with am.lock:
        assert am.elastic.monitor_pass(1.0) is None
    replacement = am.tasks["worker:2"]
    assert replacement.status.state == TaskState.KILLED and replacement.stopping
    # A member that ends after that is no loss to replace.
    with am.lock:
        assert not am.elastic.lost(am.tasks["worker:0"], 1, None, "")


def test_a_fixed_job_has_no_elastic_part_and_its_state_cannot_launch_a_replacement(tmp_path):
    spec = load_job({"name": "fixed", "command": "true", "tasks": {"worker": {"instances": 2}}})
    cluster = LocalClusterManager("application_1_0001", tmp_path, Inventory(8192, 8, []))
    assert AMState(spec, "application_1_0001", tmp_path, cluster).elastic is None
    spec = load_job({"name": "el", "framework": "pytorch", "command": "true",
                     "tasks": {"worker": {"instances": 2, "min_instances": 1}}})
    state = AMState(spec, "application_1_0001", tmp_path, cluster)  # no launcher given: a state, not an AM
    with pytest.raises(RuntimeError, match="no way to launch"):
        state.elastic.launch("worker:0", Container(id="c", task_id="worker:0", memory_mb=1, vcores=1), 1)


def test_a_trainer_killed_for_memory_before_any_progress_is_not_replaced_but_fails_the_job(tmp_path):
    """Its replacement would be killed the same way: the group leaves it to the ordinary rules (which
    fail the job at once, naming tony.worker.memory) instead of spending its changes. The same
    kill after progress is a loss like any other: the trainer is replaced."""
    from tests.tony_workflow.am.test_routes import elastic_state
    from tony_workflow.am.policy import Failure, deterministic_cause

    state = elastic_state(tmp_path)
    killed = state.tasks["worker:1"]
    killed.status.exit_code = -104
    with state.lock:
        assert not state.elastic.lost(killed, -104, None, "Container killed for memory")
    assert state.elastic.group.changes == 0 and state.elastic.replacements == []
    assert "raise tony.worker.memory" in deterministic_cause(Failure.of(killed.status, ""))

    trained = state.tasks["worker:0"]
    trained.status.exit_code, trained.status.progress = -104, {"step": 10}
    with state.lock:  # as the AM calls it
        assert state.elastic.lost(trained, -104, None, "Container killed for memory")
    assert state.elastic.group.changes == 1 and state.elastic.replacements == [trained]


def test_a_replacement_killed_for_memory_where_its_type_trained_is_replaced_again(tmp_path):
    """A replacement killed for memory before its own first step (restoring rank 0's checkpoint,
    say) when others of its type, of the same size, trained in this job: not a failure every
    relaunch repeats. It is a loss like any other, and the job goes on."""
    from tests.tony_workflow.am.test_routes import elastic_state
    from tony_workflow.am.policy import Failure, deterministic_cause

    state = elastic_state(tmp_path)
    state.progressed_types.add("worker")  # as the first progress report of any worker leaves it
    replacement = state.tasks["worker:1"]
    replacement.status.exit_code = -104
    assert replacement.status.progress is None
    assert deterministic_cause(Failure.of(replacement.status, "", state.progressed_types)) is None
    with state.lock:
        assert state.elastic.lost(replacement, -104, None, "Container killed for memory")
    assert state.elastic.group.changes == 1 and state.elastic.replacements == [replacement]
