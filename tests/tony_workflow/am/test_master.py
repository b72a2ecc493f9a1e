"""The ApplicationMaster's monitor pass (:meth:`~tony_workflow.am.master.ApplicationMaster._check`) on
a session set up by hand: which report or silence ends the session, how, and with what words. The
AM holds the embedded cluster's real cluster manager, whose containers here were never launched
(it polls them as still running); no process is started."""
from __future__ import annotations

import time

import pytest

from tony_workflow.am.master import ApplicationMaster, SessionEnd
from tony_workflow.am.state import Task
from tony_workflow.backends import Container
from tony_workflow.backends.local import LocalClusterManager
from tony_workflow.backends.local.ledger import Inventory
from tony_workflow.spec import load_job
from tony_workflow.status import JobState, TaskState, TaskStatus


def make_am(tmp_path, conf: dict | None = None, tasks: dict | None = None) -> ApplicationMaster:
    spec = load_job({"name": "monitor", "command": "true",
                     "tasks": tasks or {"chief": {"instances": 1}, "worker": {"instances": 2}, "ps": {"instances": 1}},
                     "conf": {"tony.task.tensorboard.enabled": "false", **(conf or {})}})
    cluster = LocalClusterManager("application_1_0001", tmp_path, Inventory(8192, 8, []))
    am = ApplicationMaster(spec, "application_1_0001", tmp_path, cluster, token="t", view_token="v")
    now = time.time()
    for ttype, ts in spec.tasks.items():
        for i in range(ts.instances):
            task_id = f"{ttype}:{i}"
            container = Container(id=f"c-{task_id}", task_id=task_id, memory_mb=256, vcores=1)
            status = TaskStatus(type=ttype, index=i, state=TaskState.RUNNING, container_id=container.id)
            am.tasks[task_id] = Task(status=status, container=container, session_id=0, registered_at=now,
                                     last_heartbeat=now)
    return am


def check(am: ApplicationMaster) -> None:
    """One monitor pass, with the lock held as the monitor holds it."""
    with am.lock:
        am._check()


def end_of(am: ApplicationMaster) -> SessionEnd:
    with pytest.raises(SessionEnd) as e:
        check(am)
    return e.value


def test_a_session_whose_tasks_all_run_goes_on(tmp_path):
    am = make_am(tmp_path)
    check(am)  # raises nothing
    assert all(t.status.state == TaskState.RUNNING for t in am.tasks.values())


def test_a_kill_or_a_store_failure_ends_the_job_without_another_session(tmp_path):
    am = make_am(tmp_path)
    am.kill_requested = "killed by user"
    end = end_of(am)
    assert (end.state, end.diagnostics, end.retryable) == (JobState.KILLED, "killed by user", False)
    am = make_am(tmp_path / "b")
    am.store_failure = "chief: HDFS unreachable (tony.checkpoint.on-store-failure=fail)"
    end = end_of(am)
    assert end.state == JobState.FAILED and not end.retryable and "HDFS unreachable" in end.diagnostics


def test_the_application_timeout_fails_the_job_naming_the_key(tmp_path):
    am = make_am(tmp_path, {"tony.application.timeout": "1000"})
    am.status.started_at = time.time() - 5
    end = end_of(am)
    assert end.state == JobState.FAILED and "(tony.application.timeout)" in end.diagnostics and not end.retryable


def test_a_failed_worker_ends_the_session_for_another_while_retries_are_left(tmp_path):
    am = make_am(tmp_path, {"tony.am.retry-count": "2"})
    am.tasks["worker:1"].reported = (3, "Traceback: boom")
    end = end_of(am)
    assert am.tasks["worker:1"].status.state == TaskState.FAILED and am.tasks["worker:1"].status.exit_code == 3
    assert end.state == JobState.FAILED and end.retryable and "worker:1" in end.diagnostics


def test_a_chief_that_succeeds_ends_the_job_with_the_stopped_ps_killed_not_failed(tmp_path):
    am = make_am(tmp_path)
    for task_id in ("chief:0", "worker:0", "worker:1"):
        am.tasks[task_id].reported = (0, "")
    end = end_of(am)
    assert end.state == JobState.SUCCEEDED and not end.retryable
    assert am.tasks["ps:0"].status.state == TaskState.RUNNING  # untracked: the teardown stops it


def test_a_silent_task_is_lost_and_its_loss_is_a_failure_of_the_session(tmp_path):
    am = make_am(tmp_path, {"tony.task.heartbeat-timeout-ms": "2000", "tony.am.retry-count": "1"})
    am.tasks["worker:0"].last_heartbeat = time.time() - 10
    end = end_of(am)
    worker = am.tasks["worker:0"]
    assert worker.status.state == TaskState.LOST and end.retryable
    assert "heartbeat" in end.diagnostics and "worker:0" in end.diagnostics
    events = (tmp_path / "events.jsonl").read_text()
    assert '"event": "task_lost"' in events


def test_a_task_that_never_registers_fails_the_session_naming_the_key(tmp_path):
    am = make_am(tmp_path, {"tony.container.registration.timeout": "1000"})
    late = am.tasks["worker:1"]
    late.registered_at, late.last_heartbeat, late.launched_at = None, None, time.time() - 5
    late.status.state = TaskState.LAUNCHED
    end = end_of(am)
    assert "Task worker:1 did not register within 1000 ms (tony.container.registration.timeout)" in end.diagnostics


def test_a_task_still_waiting_for_its_container_is_not_judged(tmp_path):
    am = make_am(tmp_path, {"tony.container.registration.timeout": "1000", "tony.task.heartbeat-timeout-ms": "2000"})
    waiting = am.tasks["worker:0"]
    waiting.status.state = TaskState.REQUESTED
    waiting.registered_at, waiting.last_heartbeat, waiting.launched_at = None, None, time.time() - 60
    check(am)  # no container yet: neither silent nor late
    assert waiting.status.state == TaskState.REQUESTED


def test_a_task_restarted_alone_by_its_policy_does_not_end_the_session(tmp_path):
    am = make_am(tmp_path, {"tony.worker.restart-policy": "task", "tony.am.retry-count": "1"})
    am._pending_task_restarts = []
    am.tasks["worker:1"].reported = (1, "flaky input")
    check(am)
    assert am.tasks["worker:1"].status.state == TaskState.FAILED
    assert [t.id for t in am._pending_task_restarts] == ["worker:1"] and am.task_restarts == {"worker:1": 1}
