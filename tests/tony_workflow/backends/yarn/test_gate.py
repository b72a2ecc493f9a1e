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


class _Told(Line):
    """A line whose looks say, in turn, what the test gives (the loop alone is under test here)."""

    def __init__(self, verdicts):
        super().__init__("application_1_0002", None)
        self.verdicts = list(verdicts)

    def look(self, pending, counts, may_lead=True):
        return self.verdicts.pop(0)

    def pause(self):
        return 0.0


def test_a_job_let_through_early_stops_waiting_at_the_first_look_that_says_so_and_has_said_why():
    from tony_workflow.backends.yarn.gang import Verdict
    published: list = []
    requests = [ContainerRequest("am", 512, 1, 0), ContainerRequest("worker:0", 1024, 1, 0)]
    line = _Told([Verdict(False, "behind one", ("application_1_0001",)), Verdict(False, "room on the nodes"),
                  Verdict(True)])
    last = wait_turn(line, requests, published.append, stop=threading.Event(), early=lambda v: not v.ahead)
    assert last is not None and last.reason == "room on the nodes" and last.ahead == ()
    assert [w.reason for w in published] == ["behind one", "room on the nodes"]
    assert len(line.verdicts) == 1  # the go was never looked at: it stopped at the early verdict
    # Without the early rule, the same looks wait for the turn itself.
    line = _Told([Verdict(False, "behind one", ("application_1_0001",)), Verdict(False, "room on the nodes"),
                  Verdict(True)])
    assert wait_turn(line, requests, [].append, stop=threading.Event()) is None and not line.verdicts


def test_only_a_judged_verdict_with_nobody_ahead_is_first_in_line():
    from tony_workflow.backends.yarn.gang import Shape, Verdict
    shape = Shape(1024, 1, 0, "")
    assert Verdict(False, "room on the nodes", (), shape=shape).first_in_line
    assert not Verdict(False, "behind one", ("application_1_0001",), shape=shape).first_in_line
    # a board still being read, or a looker gone quiet, judges nobody
    assert not Verdict(False, "waiting for the queue's looker", (), blocker="its place is being read").first_in_line
    assert not Verdict(True, shape=shape).first_in_line
    assert not Verdict(False, "an elder goes first", (), elders_blocked=True, shape=shape).first_in_line


def test_the_job_next_in_line_starts_early_only_as_the_board_or_its_own_look_says_and_never_once_its_turn_came():
    from tony_workflow.backends.yarn.gang import Shape, Verdict
    from tony_workflow.backends.yarn.line import Board
    shape = Shape(1024, 1, 0, "")
    behind = Verdict(False, "behind one", ("application_1_0001",), elders_blocked=True, shape=shape)
    assert not behind.starts_early
    nxt = Verdict(False, "behind one", ("application_1_0001",), elders_blocked=True, shape=shape, next_early=True)
    assert nxt.starts_early and not nxt.first_in_line
    assert not Verdict(True, next_early=True).starts_early
    # The looker's board carries it to the jobs that read it.
    board = Board("application_1_0003", ["application_1_0001", "application_1_0002"],
                  {"application_1_0002": nxt, "application_1_0003": behind})
    read = Board.from_json(board.to_json())
    assert read.verdicts["application_1_0002"].starts_early and not read.verdicts["application_1_0003"].starts_early
