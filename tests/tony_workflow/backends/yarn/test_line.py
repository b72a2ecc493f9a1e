"""A YARN job's view of its queue's line (:mod:`tony_workflow.backends.yarn.line`).

One waiting job of a queue reads the ResourceManager for all and leaves every job's verdict on
the queue's board; the others read the board and ask the ResourceManager nothing; the next in
line takes over from a looker that left or went quiet; two lookers settle; the nodes are read
only when the queue's headroom lets some job fit; alone, a job looks less often while nothing
changes. Here the ResourceManager is a stand-in that counts what it is asked (the answers'
shapes are the real API's, as :mod:`.rm` reads them), the board a local directory, the clock a
hand-moved one. The real ResourceManager's line is read in tests/tony_workflow/jobs/test_yarn_gangs.py,
and its load measured in bench/rm_load.py."""
from __future__ import annotations

import os
from collections import Counter

import pytest

from tony_workflow.backends.base import ContainerRequest
from tony_workflow.backends.yarn.gang import Shape, gang_tag
from tony_workflow.backends.yarn.line import BACKOFF_MAX_S, STALE_S, Line, queue_dir
from tony_workflow.backends.yarn.rm import AppReport, RMError, container_rm
from tony_workflow.storage import LocalStorage

QUEUE = "root.default"
GANG = [ContainerRequest("am", 512, 1, 0), *(ContainerRequest(f"worker:{i}", 1536, 1, 0) for i in range(3))]
COUNTS = {"am": (0, 1), "worker": (0, 3)}


def queue_entry(max_mb: int, used_mb: int) -> dict:
    res = lambda mb, vcores: {"memory": mb, "vCores": vcores, "resourceInformations": {"resourceInformation": []}}
    return {"queueName": "default", "queuePath": QUEUE,
            "capacities": {"queueCapacitiesByPartition": [{"partitionName": "",
                                                           "effectiveMaxResource": res(max_mb, 256)}]},
            "resources": {"resourceUsagesByPartition": [{"partitionName": "", "used": res(used_mb, used_mb // 1024)}]}}


class FakeRM:
    """The ResourceManager's REST API as :class:`~tony_workflow.backends.yarn.rm.ResourceManager`
    answers: waiting TonY jobs (each holds only skein's master), a queue and its nodes."""

    def __init__(self, jobs: int, max_mb: int = 8192, used_mb: int = 8192, node_free_mb: int = 65536):
        tag = gang_tag(Shape(512, 1), [Shape(512, 1), *[Shape(1536, 1)] * 3])
        self.reports = [AppReport(id=f"application_1_{i:04d}", name="j", user="u", queue=QUEUE, state="RUNNING",
                                  final_status="UNDEFINED", diagnostics="", started_at=1.0, finished_at=None,
                                  am_rpc_address="h:1", priority=0, tags=frozenset({"tony", tag}), running_containers=1)
                        for i in range(1, jobs + 1)]
        self.max_mb, self.used_mb, self.node_free_mb = max_mb, used_mb, node_free_mb
        self.calls: Counter = Counter()
        self.last_bytes = 0

    def app(self, app_id):
        self.calls["app"] += 1
        return next((r for r in self.reports if r.id == app_id), None)

    def apps(self, *, tags=(), states=(), queue=None, brief=False):
        self.calls["apps"] += 1
        assert queue == QUEUE and brief  # only its queue's, and brief
        return list(self.reports)

    def queue(self, name):
        self.calls["scheduler"] += 1
        return queue_entry(self.max_mb, self.used_mb)

    def nodes(self, states=()):
        self.calls["nodes"] += 1
        self.last_bytes = 2 * 1024 * 1024  # a big cluster's list
        res = lambda mb: {"memory": mb, "vCores": 64}
        return [{"id": "nm-1:1", "state": "RUNNING", "nodeHostName": "nm-1", "availableResource": res(self.node_free_mb),
                 "totalResource": res(65536)}]


class Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now

    def time(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    from tony_workflow.backends.yarn import line as yarn_line
    c = Clock()
    monkeypatch.setattr(yarn_line, "time", c)
    return c


def lines(rm, board, n: int) -> list[Line]:
    return [Line(f"application_1_{i:04d}", rm, board=board) for i in range(1, n + 1)]


def look_all(ls, clock, rounds: int = 1, step: float = 2.0) -> dict:
    """Every line looks once a round, the clock moving ``step`` seconds a round (each board write
    moves a file's time too)."""
    out = {}
    for _ in range(rounds):
        for line in ls:
            out[line.app_id] = line.look(GANG, COUNTS)
            bump_board_times(line)
        clock.now += step
    return out


def bump_board_times(line) -> None:
    """The local directory's files take the real clock's time: a rewrite within the same tick
    would not change it. Make each write visible, as HDFS's millisecond times are."""
    if line.board is None:
        return
    for path in (line.board.root / queue_dir(QUEUE)).glob("board-*"):
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))


def test_one_job_reads_the_resource_manager_for_the_whole_queue_and_the_others_read_its_board(tmp_path, clock):
    rm = FakeRM(jobs=10, max_mb=65536, used_mb=65536)  # the queue is full: nobody's turn
    ls = lines(rm, LocalStorage(tmp_path), 10)
    look_all(ls, clock)  # each learns its queue once
    rm.calls.clear()
    verdicts = look_all(ls, clock, rounds=20)
    # One looker: three reads of the ResourceManager a look at most; the nodes never, the queue's
    # headroom already keeping everyone waiting.
    assert [line.looking for line in ls] == [True] + [False] * 9
    assert rm.calls["apps"] == rm.calls["scheduler"] == 20 and rm.calls["nodes"] == 0 and rm.calls["app"] == 0
    # Every job got its own verdict, in its own words.
    v = verdicts["application_1_0007"]
    assert not v.go and v.reason == ("worker: 0 of 3 containers (1536 MB, 1 vcore each); blocked by 6 jobs "
                                     "(application_1_0001, application_1_0002, application_1_0003 and 3 more) ahead in "
                                     "queue root.default; application_1_0001 cannot be placed yet and goes first")
    assert v.ahead == tuple(f"application_1_{i:04d}" for i in range(1, 7))
    first = verdicts["application_1_0001"]
    assert first.reason.startswith("worker: 0 of 3 containers (1536 MB, 1 vcore each); blocked by queue headroom")


def test_without_a_board_every_job_reads_for_itself_less_often_while_nothing_changes(clock):
    rm = FakeRM(jobs=3)
    line = Line("application_1_0002", rm)
    pauses = []
    for _ in range(12):
        assert not line.look(GANG, COUNTS).go
        pauses.append(line._interval)
    assert pauses[0] == 2.0 and pauses[-1] == BACKOFF_MAX_S and pauses == sorted(pauses)
    rm.max_mb, rm.used_mb = 65536, 0  # room for all: the verdict changes, the pace comes back
    assert line.look(GANG, COUNTS).go and line._interval == 2.0


def test_the_next_in_line_takes_over_from_a_looker_that_went_quiet_and_only_it(tmp_path, clock):
    rm = FakeRM(jobs=4)
    ls = lines(rm, LocalStorage(tmp_path), 4)
    look_all(ls, clock, rounds=2)
    assert ls[0].looking
    # The looker stops (its container lost): the others go on looking at its board.
    rest = ls[1:]
    look_all(rest, clock, rounds=2)
    assert not any(line.looking for line in rest)  # its board has not gone stale yet
    look_all(rest, clock, rounds=int(STALE_S / 2) + 2)
    assert [line.looking for line in rest] == [True, False, False]
    rm.calls.clear()
    look_all(rest, clock, rounds=5)
    assert rm.calls["apps"] == 5  # one looker again


def test_the_board_of_a_looker_that_ended_without_removing_it_goes_once_stale_and_a_live_ones_stays(tmp_path, clock):
    rm = FakeRM(jobs=4)
    ls = lines(rm, LocalStorage(tmp_path), 4)
    look_all(ls, clock, rounds=2)
    boards = lambda: sorted(p.name for p in (tmp_path / queue_dir(QUEUE)).glob("board-*"))
    assert boards() == ["board-application_1_0001"]
    # The looker's container is lost, its application alive: the next one takes over, and the old
    # board stays (its job may look again).
    look_all(ls[1:], clock, rounds=int(STALE_S / 2) + 4)
    assert ls[1].looking
    assert boards() == ["board-application_1_0001", "board-application_1_0002"]
    # The application ends (killed with its node): the looker deletes its board, once.
    rm.reports = [r for r in rm.reports if r.id != "application_1_0001"]
    look_all(ls[1:], clock, rounds=2)
    assert boards() == ["board-application_1_0002"]


def test_a_looker_whose_turn_came_hands_over_at_once(tmp_path, clock):
    rm = FakeRM(jobs=3, max_mb=16384, used_mb=14000)  # 2.3 GB free: nobody's 5 GB gang fits
    ls = lines(rm, LocalStorage(tmp_path), 3)
    look_all(ls, clock, rounds=2)
    assert ls[0].looking and not ls[1].looking
    rm.used_mb = 16384 - 5632 - 100  # room for exactly one gang: the first's
    assert ls[0].look(GANG, COUNTS).go
    ls[0].leave()
    bump_board_times(ls[0])
    rm.reports, rm.used_mb = rm.reports[1:], rm.used_mb + 5120  # it holds its gang: no longer waiting
    clock.now += 2
    assert not ls[1].look(GANG, COUNTS).go and ls[1].looking  # took over at its next look
    bump_board_times(ls[1])
    assert not ls[2].look(GANG, COUNTS).go and not ls[2].looking


def test_two_lookers_settle_on_the_one_served_first(tmp_path, clock):
    rm = FakeRM(jobs=3)
    ls = lines(rm, LocalStorage(tmp_path), 3)
    ls[1].looking = True  # as if both had taken over at once
    look_all(ls, clock, rounds=3)
    assert [line.looking for line in ls] == [True, False, False]


def test_a_job_that_asked_goes_before_the_older_ones_that_wait_until_it_waits_again_or_ends(tmp_path, clock):
    rm = FakeRM(jobs=3, max_mb=16384, used_mb=16384 - 6000)  # room for one 5 GB gang
    board = LocalStorage(tmp_path)
    older, _ = lines(rm, board, 2)
    younger = Line("application_1_0003", rm, board=board)
    marks = lambda: sorted(p.name for p in (tmp_path / queue_dir(QUEUE)).glob("asked-*"))
    younger.asking()  # its turn came first: it asks, and YARN has granted nothing yet
    assert marks() == ["asked-application_1_0003"]
    v = older.look(GANG, COUNTS)
    assert not v.go and v.ahead == ("application_1_0003",), v
    # It gives its gang back and waits again: the older one's turn.
    younger.asking(False)
    clock.now += 2
    assert older.look(GANG, COUNTS).go
    # A mark left by a job that ended is swept by the looker, once it has been seen a while.
    younger.asking()
    rm.reports = [r for r in rm.reports if r.id != "application_1_0003"]
    look_all([older], clock)
    assert marks() == ["asked-application_1_0003"]  # not at first sight: it may be a job just submitted
    start = clock.now
    for _ in range(3 * int(STALE_S)):  # rounds of 2 s; the looker backs off while nothing changes
        look_all([older], clock)
        if not marks():
            break
    assert marks() == [] and clock.now - start > STALE_S
    # A job that ends removes its own.
    older.asking()
    older.close()
    assert marks() == []


def test_a_job_whose_am_waits_first_in_line_reads_its_own_turn_not_a_board_a_look_old(tmp_path, clock):
    rm = FakeRM(jobs=3, max_mb=16384, used_mb=16384)  # the queue is full
    board = LocalStorage(tmp_path)
    first, second, third = lines(rm, board, 3)
    look_all([second, third], clock)  # the second took the looking; the third reads its board
    assert second.looking and not third.looking
    first.keen = True
    rm.calls.clear()
    assert not first.look(GANG, COUNTS).go
    assert rm.calls["apps"] == 1 and not first.looking  # for itself; the looker stays the looker
    # The room frees between two looks of the looker: the board still says "wait", the first in
    # line sees its turn at its own next look, and its pause is the keen one.
    rm.used_mb = 0
    assert not third.look(GANG, COUNTS).go
    assert first.look(GANG, COUNTS).go
    assert first.pause() <= 0.5 * 1.25 < second.pause()
    assert second.looking and not first.looking


def test_a_forming_job_reads_the_board_but_never_looks_for_the_others(tmp_path, clock):
    rm = FakeRM(jobs=2)
    board = LocalStorage(tmp_path)
    forming = Line("application_1_0002", rm, board=board)
    for _ in range(3):
        forming.look(GANG, COUNTS, may_lead=False)
        clock.now += 2
    assert not forming.looking and not (tmp_path / queue_dir(QUEUE)).exists()


def test_the_nodes_are_read_when_the_headroom_lets_a_job_fit_within_the_budget_for_their_size(tmp_path, clock):
    rm = FakeRM(jobs=2, used_mb=0, node_free_mb=2048)  # headroom for all; the node is the limit
    line = Line("application_1_0001", rm, board=LocalStorage(tmp_path))
    assert not line.look(GANG, COUNTS).go
    assert rm.calls["nodes"] == 1
    clock.now += 3
    line.look(GANG, COUNTS)
    assert rm.calls["nodes"] == 1 and rm.calls["apps"] == 2  # 2 MB at 512 KB/s: not again within 4 s
    clock.now += 1
    line.look(GANG, COUNTS)
    assert rm.calls["nodes"] == 2
    rm.used_mb = 8192  # the queue is full: the headroom alone blocks, the nodes are not read
    clock.now += 10
    line.look(GANG, COUNTS)
    assert rm.calls["nodes"] == 2


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


def test_a_resource_manager_that_fails_makes_the_line_unreadable_and_the_job_asks():
    class Down(FakeRM):
        def app(self, app_id):
            raise RMError("the ResourceManager at http://rm:8088 did not answer")
    line = Line("application_1_0001", Down(jobs=1))
    assert line.look(GANG, COUNTS) is None and "did not answer" in line.unreadable


@pytest.mark.yarn
def test_an_application_the_resource_manager_does_not_know_makes_the_line_unreadable(yarn_cluster):
    line = Line("application_1_9999", container_rm())
    assert line.look([ContainerRequest("worker:0", 256, 1, 0)], {"worker": (0, 1)}) is None
    assert "does not know application_1_9999" in line.unreadable


def test_a_resource_manager_that_refuses_the_login_makes_the_mark_unwritable_not_the_job(tmp_path, clock):
    # A container whose configuration does not say the cluster is secure meets SPNEGO: a LoginError,
    # which a look takes for an unreadable line. Saying whether the job asks must not fail it either.
    from tony_workflow.errors import LoginError

    class Refusing(FakeRM):
        def app(self, app_id):
            raise LoginError("the ResourceManager asks for a Kerberos login")

    line = Line("application_1_0001", Refusing(jobs=1), board=LocalStorage(tmp_path))
    line.asking()
    line.asking(False)
    assert not (tmp_path / queue_dir(QUEUE)).exists()
