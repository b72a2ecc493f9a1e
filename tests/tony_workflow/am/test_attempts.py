"""Where a later ApplicationMaster attempt resumes, when all it has is what an earlier container
kept with the cluster (YARN's key-value store): the state an attempt saves, turned back into the
status file a new container's attempt resumes from."""
from __future__ import annotations

import json

from tony_workflow.am.attempts import COUNTED_ENV, Resume, attempt_state, resume_point, status_from_state
from tony_workflow.backends.yarn.attempts import am_restarts
from tony_workflow.status import JobState, JobStatus


def test_a_new_container_resumes_from_the_session_after_the_last_one_started(tmp_path, monkeypatch):
    status = JobStatus(application_id="application_1_0007", state=JobState.RUNNING, name="mnist", session_id=3,
                       attempts=4, retries=2, reclaims=1, started_at=1700000000.5, diagnostics="session 2 ended",
                       backend="yarn", tracking_url="http://rm:8088/proxy/application_1_0007/pages/tony")
    state = json.loads(json.dumps(attempt_state(status, Resume(attempt=2, counted=1, first_session=2))))
    restored = status_from_state("application_1_0007", state)
    (tmp_path / "status.json").write_text(json.dumps(restored.to_dict()))
    monkeypatch.setenv(COUNTED_ENV, "1")
    resume = resume_point(tmp_path, attempt=3)
    assert resume == Resume(attempt=3, counted=1, first_session=4, retries=2, reclaims=1, started_at=1700000000.5,
                            port=0, diagnostics="session 2 ended")
    assert restored.am_attempt == 2 and restored.tracking_url == status.tracking_url and restored.name == "mnist"


def test_an_attempt_lost_before_its_first_session_is_resumed_where_it_would_have_started(tmp_path):
    # Attempt 2 was to start session 3 (sessions 0-2 ran before it) and was lost while allocating.
    fresh = JobStatus(application_id="application_1_0007", state=JobState.ALLOCATING, started_at=1.0)
    state = attempt_state(fresh, Resume(attempt=2, counted=1, first_session=3, retries=1, started_at=1.0))
    assert (state["session_id"], state["attempts"]) == (2, 3)
    (tmp_path / "status.json").write_text(json.dumps(status_from_state("application_1_0007", state).to_dict()))
    assert resume_point(tmp_path, attempt=3).first_session == 3
    # On the job's very first attempt nothing ran yet: the next container starts at session 0.
    first = attempt_state(fresh, Resume())
    (tmp_path / "status.json").write_text(json.dumps(status_from_state("application_1_0007", first).to_dict()))
    assert resume_point(tmp_path, attempt=2).first_session == 0


def test_skein_may_start_the_am_again_once_per_counted_attempt_and_per_reclaim():
    assert am_restarts(max_attempts=2, reclaim_retries=10) == 11
    assert am_restarts(max_attempts=1, reclaim_retries=0) == 0
