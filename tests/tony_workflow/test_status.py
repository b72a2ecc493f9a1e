"""The one status type (:mod:`tony_workflow.status`): its round trip, its line, application ids."""
from __future__ import annotations

import time

import pytest

from tony_workflow.errors import NotAnApplicationId
from tony_workflow.status import (
    JobState,
    JobStatus,
    StatusFile,
    TaskState,
    TaskStatus,
    check_application_id,
    hanging,
    progress_text,
)


def status(**kw) -> JobStatus:
    tasks = [TaskStatus(type="worker", index=i, state=TaskState.RUNNING) for i in range(2)]
    return JobStatus(application_id="application_1763700000000_0001", state=JobState.RUNNING, name="j",
                     tasks=tasks, **kw)


def test_a_status_survives_its_round_trip_through_json_text():
    st = status(retries=1, warnings=["w"], progress={"step": 5}, tracking_url="http://am/ui/v")
    again = JobStatus.from_dict(st.to_dict())
    assert again == st and again.task("worker:1").state == TaskState.RUNNING and again.task("ps:0") is None


def test_the_status_line_names_tasks_the_wait_progress_and_links():
    st = status(tracking_url="http://rm/proxy/x", am_attempt=2, containers_held=1, containers_wanted=4,
                waiting_reason="worker: 0 of 3 containers; blocked by 1 job", waiting_since=time.time() - 65)
    line = st.summary()
    assert line.startswith("application_1763700000000_0001 RUNNING session=0 am_attempt=2 "
                           "worker:0=RUNNING worker:1=RUNNING")
    assert "waiting 1/4 containers for 1m05s: worker: 0 of 3 containers; blocked by 1 job" in line
    assert line.endswith("tracking=http://rm/proxy/x")
    # Once the job has ended, its pages have too: the line says where to look instead.
    st.state = "SUCCEEDED"
    assert "http://" not in st.summary()
    assert st.summary().endswith("(its pages ended with it: tony history application_1763700000000_0001)")


def test_an_elastic_task_the_group_has_not_taken_in_is_shown_joining_not_running():
    st = status(elastic={"size": 1, "target": 2, "waiting": ["worker:1"]})
    assert "worker:0=RUNNING worker:1=JOINING group=1/2 (1 joining: worker:1)" in st.summary()
    assert [t["state"] for t in st.to_dict()["tasks"]] == ["RUNNING", "JOINING"]
    assert st.task("worker:1").state == TaskState.RUNNING, "the AM's own record is left as it is"
    st.tasks[1].state = TaskState.LAUNCHED  # not started yet: said as it is
    assert st.shown_state(st.tasks[1]) == TaskState.LAUNCHED
    st.tasks[1].state, st.state = TaskState.SUCCEEDED, JobState.SUCCEEDED
    assert st.shown_state(st.tasks[1]) == TaskState.SUCCEEDED


def test_a_diagnostic_with_a_tasks_last_lines_stays_one_block():
    text = "task worker:2 FAILED (exit 137): Last lines of stderr:\nTraceback\n  boom"
    assert hanging(text).splitlines() == ["task worker:2 FAILED (exit 137): Last lines of stderr:",
                                          "    | Traceback", "    |   boom"]
    assert hanging("one line") == "one line" and hanging("") == ""


def test_progress_reads_as_steps_a_fraction_an_eta_and_the_first_metrics():
    text = progress_text({"step": 120, "total": 1000, "fraction": 0.12, "eta_seconds": 185,
                          "metrics": {"loss": 0.31214, "acc": 0.9, "lr": 0.001, "extra": 1}})
    assert text == "step=120/1000 (12.0%) eta=3m05s loss=0.3121 acc=0.9 lr=0.001"
    assert progress_text({"step": 10, "total": 10, "fraction": 1.0, "eta_seconds": 0}) == "step=10/10 (100.0%)"
    assert progress_text({}) == "step=?"


@pytest.mark.parametrize("given", ["application_1_0001", "application_1763700000000_0042"])
def test_an_application_id_of_yarns_shape_passes(given):
    assert check_application_id(given) == given


@pytest.mark.parametrize("given", ["../etc/passwd", "application_1", "job_1_1", "", None, 42,
                                   "application_1_0001/../../x"])
def test_anything_else_is_refused_saying_what_an_id_looks_like(given):
    with pytest.raises(NotAnApplicationId) as e:
        check_application_id(given)
    assert "expected application_<cluster timestamp>_<sequence>" in str(e.value)


def test_the_status_file_is_replaced_whole_and_only_when_it_changed(tmp_path):
    f = StatusFile(tmp_path / "status.json")
    f.write('{"state": "RUNNING"}')
    before = (tmp_path / "status.json").stat().st_mtime_ns
    time.sleep(0.01)
    f.write('{"state": "RUNNING"}')
    assert (tmp_path / "status.json").stat().st_mtime_ns == before
    f.write('{"state": "SUCCEEDED"}')
    assert (tmp_path / "status.json").read_text() == '{"state": "SUCCEEDED"}'
    assert not list(tmp_path.glob("*.tmp")) and f.age() < 5
