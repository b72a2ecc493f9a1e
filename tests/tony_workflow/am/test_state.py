"""The AM's declared state (:mod:`tony_workflow.am.state`): what a fresh one holds, and the only ways
to change a task's state (written to the event log too), publish the status, and ask for a kill."""
from __future__ import annotations

import json

from tony_workflow.am.attempts import Resume
from tony_workflow.am.state import AMState, Task
from tony_workflow.backends import Container
from tony_workflow.backends.local import LocalClusterManager
from tony_workflow.backends.local.ledger import Inventory
from tony_workflow.spec import load_job
from tony_workflow.status import JobState, TaskState, TaskStatus


def state(tmp_path, resume: Resume | None = None) -> AMState:
    spec = load_job({"name": "s", "command": "true", "tasks": {"ps": {"instances": 1}, "worker": {"instances": 2}},
                     "conf": {"tony.application.framework": "horovod"}})
    cluster = LocalClusterManager("application_1_0001", tmp_path, Inventory(4096, 4, []))
    return AMState(spec, "application_1_0001", tmp_path, cluster, resume)


def add(s: AMState, task_id: str, host: str, port: int) -> Task:
    ttype, index = task_id.split(":")
    task = Task(TaskStatus(type=ttype, index=int(index), state=TaskState.REGISTERED, host=host, port=port),
                Container(id=f"c-{task_id}", task_id=task_id, memory_mb=1, vcores=1), session_id=0)
    s.tasks[task_id] = task
    return task


def test_a_fresh_state_allocates_with_the_specs_warnings_and_what_a_later_attempt_carries(tmp_path):
    s = state(tmp_path, Resume(attempt=2, retries=1, started_at=1000.0, diagnostics="attempt 1 lost"))
    assert s.status.state == JobState.ALLOCATING and s.status.am_attempt == 2 and s.status.retries == 1
    assert s.status.started_at == 1000.0 and s.status.diagnostics == "attempt 1 lost"
    assert s.status.warnings and "horovod" in s.status.warnings[0].lower()  # the framework's caveat
    assert s.chief == ("worker", 0) and s.type_order == ["ps", "worker", "driver"]  # Horovod's driver, added
    assert s.cluster_spec is None and not s.gang_ready.is_set() and s.kill_requested is None


def test_a_task_state_change_is_an_event_and_a_final_one_keeps_its_figures(tmp_path):
    s = state(tmp_path)
    task = add(s, "worker:0", "h", 1)
    task.status.metrics = {"rss_mb": 5.0}
    with s.lock:
        s.set_task_state(task, TaskState.RUNNING, pid=7)
        s.set_task_state(task, TaskState.SUCCEEDED, exit_code=0)
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(e["task"], e["state"]) for e in events] == [("worker:0", "RUNNING"), ("worker:0", "SUCCEEDED")]
    assert events[0]["pid"] == 7 and "metrics" not in events[0] and events[1]["metrics"] == {"rss_mb": 5.0}
    assert task.final


def test_the_cluster_spec_lists_types_in_the_specs_order_and_tasks_by_index(tmp_path):
    s = state(tmp_path)
    add(s, "worker:1", "h1", 2)
    add(s, "worker:0", "h0", 1)
    add(s, "ps:0", "p", 9)
    assert list(s.cluster_dict().items()) == [("ps", ["p:9"]), ("worker", ["h0:1", "h1:2"])]


def test_a_kill_is_recorded_once_asked_and_wakes_whoever_waits(tmp_path):
    s = state(tmp_path)
    with s.lock:
        s.request_kill("killed by user")
    assert s.kill_requested == "killed by user" and s.cancel.is_set()
    assert json.loads((tmp_path / "events.jsonl").read_text().splitlines()[-1])["event"] == "kill_requested"


def test_the_status_is_published_to_its_file_when_forced(tmp_path):
    s = state(tmp_path)
    with s.lock:
        s.publish(force=True)
    assert json.loads((tmp_path / "status.json").read_text())["state"] == JobState.ALLOCATING
    assert s.status_dict()["application_id"] == "application_1_0001"
