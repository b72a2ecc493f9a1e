"""The job follower: what it reports between two statuses, and JobHandle.follow on a real job."""
from __future__ import annotations

import pytest

from tests.conftest import app_processes, wait_for
from tony_workflow.client import TonyClient, load_job
from tony_workflow.client.follow import Follower, diff
from tony_workflow.status import JobState, JobStatus, TaskStatus


def status(state="RUNNING", session=0, tasks=(), tracking=None, tensorboard=None, diagnostics=""):
    return JobStatus(application_id="application_1_0001", state=state, session_id=session,
                     tasks=[TaskStatus(type=t, index=i, state=s, restarts=r) for t, i, s, r in tasks],
                     tracking_url=tracking, tensorboard_url=tensorboard, diagnostics=diagnostics)


W0 = ("worker", 0)


def test_the_first_status_is_an_update_with_everything_new():
    update = diff(None, status(tasks=[(*W0, "RUNNING", 0)], tracking="http://am/ui/x", tensorboard="http://tb"))
    assert update.first and update.state_changed and not update.new_session
    assert update.tracking_url == "http://am/ui/x" and update.tensorboard_url == "http://tb"
    assert [(t.task_id, t.before, t.after) for t in update.tasks] == [("worker:0", None, "RUNNING")]


@pytest.mark.parametrize("before, after", [
    (status(tasks=[(*W0, "RUNNING", 0)]), status(tasks=[(*W0, "RUNNING", 0)])),
    # A heartbeat's metrics or the start time are not something a follower reports.
    (status(tracking="http://a"), status(tracking="http://a")),
    # Diagnostics of a running job change with every failed session; the session says it already.
    (status(diagnostics="x"), status(diagnostics="y")),
])
def test_nothing_visible_changed(before, after):
    assert diff(before, after) is None


def test_state_task_and_url_changes_are_named():
    before = status(state="ALLOCATING", tasks=[(*W0, "LAUNCHED", 0), ("ps", 0, "RUNNING", 0)], tracking="http://a")
    after = status(tasks=[(*W0, "RUNNING", 0), ("ps", 0, "RUNNING", 0)], tracking="http://a", tensorboard="http://tb")
    update = diff(before, after)
    assert update.state_changed and not update.first and not update.new_session
    assert [(t.task_id, t.before, t.after) for t in update.tasks] == [("worker:0", "LAUNCHED", "RUNNING")]
    assert update.tracking_url is None and update.tensorboard_url == "http://tb"
    assert update.relaunched == ()


def test_a_task_relaunched_alone_and_a_new_session():
    relaunch = diff(status(tasks=[(*W0, "RUNNING", 0)]), status(tasks=[(*W0, "LAUNCHED", 1)]))
    assert [(t.task_id, t.restarts) for t in relaunch.relaunched] == [("worker:0", 1)]
    session = diff(status(session=0, tasks=[(*W0, "FAILED", 0)]), status(session=1, tasks=[(*W0, "LAUNCHED", 0)]))
    assert session.new_session and not session.state_changed
    # A new session's tasks are new tasks: nothing of the old session's states carries over.
    assert [(t.before, t.after, t.relaunched) for t in session.tasks] == [(None, "LAUNCHED", False)]


def test_final_diagnostics_are_an_update():
    update = diff(status(state="FAILED", diagnostics=""), status(state="FAILED", diagnostics="worker:0 exited 3"))
    assert update is not None and update.final and not update.state_changed


def test_follower_keeps_the_last_status():
    reads = iter([status(state="ALLOCATING"), status(state="ALLOCATING"), status(state="RUNNING")])
    follower = Follower(lambda: next(reads))
    assert follower.poll().first
    assert follower.poll() is None
    assert follower.poll().state_changed and follower.last.state == "RUNNING"


SMALL = {"name": "follow", "am": {"memory": "128m"}, "tasks": {"worker": {"instances": 2, "memory": "256m"}},
         "conf": {"tony.task.tensorboard.enabled": "false"}}


@pytest.mark.job
@pytest.mark.timeout(180)
def test_follow_a_real_job_to_its_end(tony_home):
    handle = TonyClient("local").submit(load_job({**SMALL, "command": "sleep 1"}))
    updates = list(handle.follow(poll_interval=0.1))
    assert updates[0].first and updates[-1].final and updates[-1].status.state == "SUCCEEDED"
    # Every update says something changed, and the last one has the AM gone: the job is settled.
    assert all(u.state_changed or u.tasks or u.tracking_url or u.tensorboard_url or u.final for u in updates)
    assert handle.backend.endpoint(handle.app_id) is None
    assert app_processes(handle.app_id) == []
    seen = {(t.task_id, t.after) for u in updates for t in u.tasks}
    assert {("worker:0", "SUCCEEDED"), ("worker:1", "SUCCEEDED")} <= seen


@pytest.mark.job
@pytest.mark.timeout(180)
def test_follow_stops_when_asked_and_the_job_goes_on(tony_home):
    handle = TonyClient("local").submit(load_job({**SMALL, "command": "sleep 30"}))
    try:
        wait_for(lambda: handle.status().state == "RUNNING", timeout=60)
        asked = []

        def stop() -> bool:
            asked.append(1)
            return len(asked) > 3

        updates = list(handle.follow(poll_interval=5.0, stop=stop))
        assert updates and not updates[-1].final
        assert handle.status().state == "RUNNING"
    finally:
        assert handle.kill().state == "KILLED"
    assert app_processes(handle.app_id) == []


def test_a_wait_for_the_gang_is_news_when_its_reason_or_count_changes_and_when_it_ends():
    waiting = status(state="ALLOCATING")
    waiting.waiting_reason, waiting.containers_held, waiting.containers_wanted = "worker: 0 of 2 containers", 1, 3
    assert diff(None, waiting).waiting == "worker: 0 of 2 containers"
    same = JobStatus.from_dict(waiting.to_dict())
    same.waiting_since = 123.0                      # its age alone is no news
    assert diff(waiting, same) is None
    more = JobStatus.from_dict(waiting.to_dict())
    more.containers_held = 2
    assert diff(waiting, more).waiting == "worker: 0 of 2 containers"
    formed = status(state="RUNNING")
    update = diff(more, formed)
    assert update.gang_formed and update.waiting is None


def test_tasks_launched_long_ago_and_not_started_are_said_now_and_then():
    clock = [0.0]
    statuses = []

    def status(*states):
        return JobStatus("application_1_0001", JobState.RUNNING,
                         tasks=[TaskStatus("worker", i, s) for i, s in enumerate(states)])

    follower = Follower(lambda: statuses[-1], progress_every=15, clock=lambda: clock[0], starting_after=10)
    statuses.append(status("LAUNCHED", "LAUNCHED"))
    assert follower.poll().starting is None  # the first update: just launched
    clock[0] = 5
    assert follower.poll() is None
    clock[0] = 12
    said = follower.poll()
    assert said is not None and said.starting.startswith("worker:0, worker:1 launched 12 s ago and not started yet")
    assert "fetching and unpacking the job's files" in said.starting and not said.state_changed
    clock[0] = 20
    assert follower.poll() is None  # not again before progress_every has passed
    clock[0] = 28
    assert "launched 28 s ago" in follower.poll().starting
    statuses.append(status("RUNNING", "LAUNCHED"))
    clock[0] = 50
    update = follower.poll()
    assert update.tasks and update.starting.startswith("worker:1 launched 50 s ago")
    statuses.append(status("RUNNING", "RUNNING"))
    clock[0] = 70
    assert follower.poll().starting is None
