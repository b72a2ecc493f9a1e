"""How spec problems read (:mod:`tony_workflow.spec.errors`)."""
from __future__ import annotations

import pytest

from tony_workflow.spec import (
    SpecError,
    SpecIssue,
)


def test_issue_and_error_text():
    issue = SpecIssue("tasks.worker.memory (tony.worker.memory)", "2x", "must be a positive size", "job.yaml")
    assert str(issue) == "job.yaml: tasks.worker.memory (tony.worker.memory): must be a positive size (got '2x')"
    assert str(SpecIssue("tasks", None, "no tracked task type")) == "tasks: no tracked task type"
    error = SpecError([issue, SpecIssue("a", 1, "b")])
    assert str(error).splitlines() == [str(issue), "a: b (got 1)"]
    assert isinstance(error, ValueError)


@pytest.mark.parametrize("field,value,meant", [
    ({"framework": "tensorfow"}, "tensorfow", "tensorflow"),
    ({"tasks": {"worker": {"instances": 1, "restart_policy": "sesion"}}}, "sesion", "session"),
    ({"conf": {"tony.elastic.regroup": "inplace"}}, "inplace", "in-place"),
    ({"conf": {"tony.checkpoint.on-store-failure": "warnn"}}, "warnn", "warn"),
    ({"conf": {"tony.yarn.environment": "clinet"}}, "clinet", "client"),
])
def test_a_near_miss_of_an_allowed_value_gets_a_did_you_mean(field, value, meant):
    from tony_workflow.client import TonyClient, load_job
    job = {"name": "x", "framework": "tensorflow", "command": "true", "tasks": {"worker": {"instances": 1}}, **field}
    with pytest.raises(SpecError) as e:
        TonyClient("local").preflight(load_job(job))
    [said] = [str(i) for i in e.value.issues if f"got '{value}'" in str(i)]
    assert said.endswith(f"did you mean '{meant}'?"), said


def test_a_value_far_from_every_allowed_one_gets_no_guess():
    assert str(SpecIssue("framework", "caffe", "unknown framework; allowed: tensorflow, pytorch")).endswith("'caffe')")
