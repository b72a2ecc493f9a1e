"""TonY's task groups and dependency timeouts as a job states them (:mod:`tony_workflow.spec.groups`)."""
from __future__ import annotations

import pytest

from tony_workflow.spec import SpecError, load_job
from tony_workflow.spec.groups import GroupDependency, dependencies, groups


def job(**conf: str) -> dict:
    return {"name": "groups", "command": "true", "tasks": {"worker": {"instances": 2}, "evaluator": {"instances": 1}},
            "conf": conf}


def test_groups_and_timeouts_are_read_as_tony_writes_them():
    spec = load_job(job(**{"tony.application.group.A": "worker, chief",
                           "tony.application.dependency.evaluator.timeout.after.A": "3600",
                           "tony.application.dependency.evaluator.timeout.after.A.ignored": "true"}))
    spec.validate()
    assert groups(spec.conf) == {"A": ["worker", "chief"]}
    assert dependencies(spec.conf) == [GroupDependency("evaluator", "A", 3600, ignored=True)]


@pytest.mark.parametrize("conf,message", [
    ({"tony.application.dependency.evaluator.timeout.after.B": "60"},
     "names group 'B', which no tony.application.group.B defines"),
    ({"tony.application.group.A": "worker", "tony.application.dependency.evalutor.timeout.after.A": "60"},
     "names task type 'evalutor', which the job does not declare"),
    ({"tony.application.group.A": "worker", "tony.application.dependency.evaluator.timeout.after.A": "soon"},
     "must be an integer >= 0"),
    ({"tony.application.group.A": "worker", "tony.application.dependency.evaluator.timeout.after.A.ignored": "true"},
     "marks a timeout that is not set"),
])
def test_a_dependency_that_cannot_work_is_refused_naming_its_key(conf, message):
    with pytest.raises(SpecError) as e:
        load_job(job(**conf)).validate()
    assert message in str(e.value), str(e.value)
