"""The AM's status board (:mod:`tony_workflow.am.board`): state changes persisted at once, figures
at their own slower pace, the job's progress worked out and told to the cluster now and then, and
the figures' course kept within a bound."""
from __future__ import annotations

import json
import time

from tony_workflow.am.board import FIGURES_DELAY, Series, StatusBoard
from tony_workflow.progress import TaskProgress
from tony_workflow.status import JobState, JobStatus, TaskState, TaskStatus


def board(tmp_path, told: list):
    st = JobStatus(application_id="application_1_0001", state=JobState.RUNNING, name="b",
                   tasks=[TaskStatus(type="worker", index=0, state=TaskState.RUNNING)])
    return st, StatusBoard(st, tmp_path / "status.json", told.append)


def on_disk(tmp_path) -> dict:
    return json.loads((tmp_path / "status.json").read_text())


def test_a_state_change_is_persisted_on_the_next_pass_and_figures_wait_their_turn(tmp_path):
    told: list = []
    st, b = board(tmp_path, told)
    b.changed(force=True)
    assert on_disk(tmp_path)["state"] == JobState.RUNNING
    st.tasks[0].metrics = {"rss_mb": 100.0}
    b.figures_changed()
    assert b.due([], "worker:0", time.time()) is None       # just written: figures wait
    st.state = JobState.SUCCEEDED
    b.changed()
    time.sleep(0.3)
    snapshot = b.due([], "worker:0", time.time())            # a state change waits a quarter second at most
    b.persist(snapshot)
    assert on_disk(tmp_path)["state"] == JobState.SUCCEEDED and on_disk(tmp_path)["tasks"][0]["metrics"]
    assert FIGURES_DELAY > 0.3


def test_progress_is_worked_out_from_the_chief_and_told_to_the_cluster(tmp_path):
    told: list = []
    st, b = board(tmp_path, told)
    progress = TaskProgress()
    now = time.time()
    assert progress.update({"reports": 1, "step": 25, "total": 100, "age": 0}, now)
    b.figures_changed(progressed=True)
    b.due([("worker:0", progress)], "worker:0", now)
    assert st.progress["step"] == 25 and st.progress["fraction"] == 0.25
    assert wait_told(told) == [0.25]


def wait_told(told: list, timeout: float = 5.0) -> list:
    deadline = time.time() + timeout
    while not told and time.time() < deadline:
        time.sleep(0.01)
    return told


def test_a_long_course_keeps_its_whole_length_within_the_limit():
    series = Series(every=1.0, limit=8)
    st = JobStatus(application_id="application_1_0001", state=JobState.RUNNING, name="s",
                   tasks=[TaskStatus(type="worker", index=0, state=TaskState.RUNNING, metrics={"rss_mb": 1.0})])
    for i in range(40):
        st.progress = {"step": i}
        series.add(1000.0 + i, st)
    d = series.to_dict()
    assert len(d["t"]) < 8 and d["t"][0] == 1000.0 and d["t"][-1] >= 1030.0
    assert len(d["tasks"]["worker:0"]["rss_mb"]) == len(d["t"]) == len(d["step"])


def test_the_metrics_a_job_reports_are_kept_as_series_beside_the_figures():
    series = Series(every=1.0, limit=8)
    st = JobStatus(application_id="application_1_0001", state=JobState.RUNNING, name="s")
    for i in range(1, 31):
        # loss from the start, accuracy from step 10 on; a text and a flag are not figures
        metrics = {"loss": 1.0 / i, "note": "warm", "flag": True, **({"accuracy": i / 30} if i >= 10 else {})}
        st.progress = {"step": i, "metrics": metrics}
        series.add(1000.0 + i, st)
    d = series.to_dict()
    assert set(d["metrics"]) == {"loss", "accuracy"}
    assert len(d["metrics"]["loss"]) == len(d["metrics"]["accuracy"]) == len(d["t"]) < 8  # thinned with the rest
    assert d["metrics"]["loss"][0] == 1.0 and d["metrics"]["loss"][-1] < 0.05
    assert d["metrics"]["accuracy"][0] is None and d["metrics"]["accuracy"][-1] > 0.9  # a gap before it was reported
    many = Series()
    st.progress = {"step": 1, "metrics": {f"m{k}": k for k in range(40)}}
    many.add(1.0, st)
    assert len(many.to_dict()["metrics"]) == Series.MAX_METRICS
