"""How spec problems read (:mod:`tony_workflow.spec.errors`)."""
from __future__ import annotations

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
