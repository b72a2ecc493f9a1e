"""The gate in skein's master container (:mod:`tony_workflow.backends.yarn.gate`): a job whose line
cannot be read asks at once, without waiting a turn. Waiting a turn behind other jobs on a real
queue is tests/tony_workflow/jobs/test_yarn_gangs.py."""
from __future__ import annotations

import threading

from tony_workflow.backends.base import ContainerRequest
from tony_workflow.backends.yarn.gate import wait_turn
from tony_workflow.backends.yarn.line import Line


def test_an_unreadable_line_lets_the_job_ask_at_once_and_publishes_no_wait():
    published: list = []
    requests = [ContainerRequest("am", 512, 1, 0), ContainerRequest("worker:0", 1024, 1, 0)]
    assert wait_turn(Line("application_1_0001", None), requests, published.append, stop=threading.Event()) is None
    assert published == []
