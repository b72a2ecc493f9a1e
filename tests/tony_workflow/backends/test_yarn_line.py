"""A YARN job's view of its queue's line (:mod:`tony_workflow.backends.yarn_line`): a line that
cannot be read says why and lets the job ask without waiting, and container shapes are rounded to
the scheduler's minimum. The verdicts themselves are :mod:`.yarn_gang`'s, tested there; a real
ResourceManager's line is read in tests/tony_workflow/jobs/test_yarn_gangs.py."""
from __future__ import annotations

import pytest

from tony_workflow.backends.base import ContainerRequest
from tony_workflow.backends.rm import container_rm
from tony_workflow.backends.yarn_line import Line


def test_without_a_resource_manager_the_job_asks_without_waiting_and_says_why():
    line = Line("application_1_0001", None)
    assert line.look([ContainerRequest("worker:0", 1024, 1, 0)], {"worker": (0, 1)}) is None
    assert "cannot be reached" in line.unreadable
    assert 0.75 * line.look_every_s <= line.pause() <= 1.25 * line.look_every_s


def test_a_request_is_shaped_as_yarn_grants_it():
    line = Line("application_1_0001", None)
    line.minimum = (512, 1)
    shape = line.shape(ContainerRequest("worker:0", 700, 1, 0, "gpu"))
    assert shape.memory_mb == 1024 and shape.label == "gpu"  # rounded up to the minimum's multiple


@pytest.mark.yarn
def test_an_application_the_resource_manager_does_not_know_makes_the_line_unreadable(yarn_cluster):
    line = Line("application_1_9999", container_rm())
    assert line.look([ContainerRequest("worker:0", 256, 1, 0)], {"worker": (0, 1)}) is None
    assert "does not know application_1_9999" in line.unreadable
