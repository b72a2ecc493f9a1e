"""Whether a job asks for its whole gang as its application starts (:mod:`tony_workflow.backends.yarn.start`):
alone on a queue with room it does; two submitted at the same moment see each other's intent and
only both ask at start when both fit; a job already submitted to ask at start counts before YARN
starts its master; anything unusable means the gate's way. The line directory is a local one here;
on HDFS, tests/tony_workflow/jobs/test_yarn_gangs.py submits real jobs together."""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tony_workflow.backends.yarn.gang import Node, Shape, gang_tag
from tony_workflow.backends.yarn.line import queue_dir
from tony_workflow.backends.yarn.rm import AppReport
from tony_workflow.backends.yarn.start import INTENT_GONE_S, INTENT_TTL_S, intent_name, parse_intent, plan_start
from tony_workflow.storage import LocalStorage

QUEUE = "root.default"
MASTER = Shape(512, 1)
NODES = [Node("nm-0", "", (8192, 8, 0), (8192, 8, 0))]  # one node, 8 GB free
QUEUE_INFO = None  # the scheduler says nothing of the queue: the nodes decide


def gang(workers: int, memory: int = 1536) -> list[tuple[str, Shape]]:
    return [("am", Shape(512, 1)), *(("worker", Shape(memory, 1)) for _ in range(workers))]


def tasks(workers: int) -> list[str]:
    return [f"worker:{i}" for i in range(workers)]


def plan(store, workers: int = 3, reports=(), nodes=NODES):
    return plan_start(tasks(workers), gang(workers), MASTER, 0, QUEUE, QUEUE_INFO, nodes, lambda: list(reports), store, elders_wait_s=0)


def intents(store) -> list[str]:
    return sorted(store.list(queue_dir(QUEUE)))


def test_alone_on_a_queue_with_room_the_gang_is_asked_for_at_start_and_the_intent_goes_once_submitted(tmp_path):
    store = LocalStorage(tmp_path)
    p = plan(store)
    assert p.tasks == tasks(3) and "room" in p.why
    assert [n.startswith("intent-") for n in intents(store)] == [True]  # there until the job is submitted
    p.done()
    assert intents(store) == []


def test_two_submissions_at_once_see_each_other_and_only_both_start_asking_when_both_fit(tmp_path):
    store = LocalStorage(tmp_path)
    # 512 + 3 x 1536 = 5 GB each, 8 GB free: the first announced sees nobody; the second sees it.
    first = plan(store)
    second = plan(store)
    assert first.tasks and not second.tasks and "turn has not come" in second.why
    assert len(intents(store)) == 1  # the second holds nothing while it waits for its turn
    first.done()
    # Two that fit together (2 x 2 GB) both ask at start.
    a, b = plan(store, workers=1), plan(store, workers=1)
    assert a.tasks == b.tasks == ["worker:0"] and b.looked["intents"] == 1
    a.done(), b.done()


def test_masters_not_yet_placed_count_so_no_more_start_at_once_than_fit(tmp_path):
    # Two 4 GB nodes; each job is skein's master, an AM of 512 MB and two 1 GB workers: 3 GB. Four
    # submitted at once: two start asking; the other two see them (and each other) and wait.
    store = LocalStorage(tmp_path)
    nodes = [Node(f"nm-{i}", "", (4096, 8, 0), (4096, 8, 0)) for i in range(2)]
    small = [("am", Shape(512, 1)), ("worker", Shape(1024, 1)), ("worker", Shape(1024, 1))]

    def one():
        return plan_start(tasks(2), small, MASTER, 0, QUEUE, QUEUE_INFO, nodes, list, store, elders_wait_s=0)
    plans = [one() for _ in range(4)]
    assert [bool(p.tasks) for p in plans] == [True, True, False, False], [p.why for p in plans]
    assert "2 jobs" in plans[2].why
    # A job submitted to ask at start whose master YARN has placed (still ACCEPTED) counts it once.
    for p in plans:
        p.done()
    tag = gang_tag(MASTER, [s for _, s in small], at_start=True)
    placed = [AppReport(id=f"application_1_000{i}", name="other", user="u", queue=QUEUE, state="ACCEPTED",
                        final_status="UNDEFINED", diagnostics="", started_at=time.time() - 1, finished_at=None,
                        am_rpc_address=None, priority=0, tags=frozenset({"tony", tag}), running_containers=1)
              for i in (1, 2)]
    on_nodes = [Node(f"nm-{i}", "", (3584, 7, 0), (4096, 8, 0)) for i in range(2)]  # each holds one master
    assert not plan_start(tasks(2), small, MASTER, 0, QUEUE, QUEUE_INFO, on_nodes, lambda: placed, store, elders_wait_s=0).tasks
    three_nodes = [*on_nodes, Node("nm-2", "", (4096, 8, 0), (4096, 8, 0))]
    assert plan_start(tasks(2), small, MASTER, 0, QUEUE, QUEUE_INFO, three_nodes, lambda: placed, store, elders_wait_s=0).tasks == tasks(2)


def test_an_older_job_that_will_wait_at_the_gate_keeps_room_for_its_master_until_yarn_places_it(tmp_path):
    # Two 6 GB nodes, two gangs of 4 GB (their masters included) running; an older job submitted
    # to wait for its turn, its master not yet placed, and a newcomer whose gang (4 GB with its
    # master) fills the rest exactly: were the older one's master not counted, YARN would place it
    # first and the newcomer would hold part of its gang until a running job ended.
    store = LocalStorage(tmp_path)
    nodes = [Node(f"nm-{i}", "", (2048, 16, 0), (6144, 16, 0)) for i in range(2)]
    small = [("am", Shape(512, 1)), *(("worker", Shape(1024, 1)) for _ in range(3))]
    older = AppReport(id="application_1_0001", name="older", user="u", queue=QUEUE, state="ACCEPTED",
                      final_status="UNDEFINED", diagnostics="", started_at=time.time() - 1, finished_at=None,
                      am_rpc_address=None, priority=0, tags=frozenset({"tony", gang_tag(MASTER, [s for _, s in small])}),
                      running_containers=0)
    p = plan_start(tasks(3), small, MASTER, 0, QUEUE, QUEUE_INFO, nodes, lambda: [older], store, elders_wait_s=0)
    assert not p.tasks and "turn has not come" in p.why, p.why
    # Once YARN has placed it (the nodes' room shows it), or without it, the newcomer asks at start.
    assert plan_start(tasks(3), small, MASTER, 0, QUEUE, QUEUE_INFO, nodes, list, store, elders_wait_s=0).tasks == tasks(3)


class _AllAtOnce(LocalStorage):
    """A line directory that four submissions reach at the same moment: every intent is written
    before any of them lists the directory, and listed by all before any goes; the store's clock
    stamps each intent as written, at the times ``stamps`` gives in the order of writing (as HDFS's
    NameNode would, in ms)."""

    def __init__(self, root, stamps: list[float]):
        super().__init__(root)
        self.stamps, self.lock = list(stamps), threading.Lock()
        self.order: list[int] = []  # the writing threads, in the order they wrote
        self.everyone_wrote = threading.Barrier(len(stamps))
        self.everyone_listed = threading.Barrier(len(stamps))

    def touch(self, key: str) -> None:
        with self.lock:
            super().touch(key)
            t = self.stamps[len(self.order)]
            os.utime(self.root / key, (t, t))
            self.order.append(threading.get_ident())

    def list(self, prefix: str = ""):
        self.everyone_wrote.wait(timeout=30)
        listed = super().list(prefix)
        self.everyone_listed.wait(timeout=30)  # nobody removes its intent (going the gate's way) before
        return listed


def four_at_once(tmp_path, stamps: list[float]) -> list[bool]:
    """Four jobs of 3 GB (skein's master, an AM of 512 MB, two 1 GB workers) submitted at once to
    two 4 GB nodes: whether each asks at start, in the order their intents were written."""
    store = _AllAtOnce(tmp_path, stamps)
    nodes = [Node(f"nm-{i}", "", (4096, 8, 0), (4096, 8, 0)) for i in range(2)]
    small = [("am", Shape(512, 1)), ("worker", Shape(1024, 1)), ("worker", Shape(1024, 1))]

    def submit(_):
        p = plan_start(tasks(2), small, MASTER, 0, QUEUE, QUEUE_INFO, nodes, list, store, elders_wait_s=0)
        return threading.get_ident(), bool(p.tasks)
    with ThreadPoolExecutor(4) as pool:
        asks = dict(pool.map(submit, range(4)))
    return [asks[writer] for writer in store.order]


def test_submitted_at_the_same_moment_as_many_start_asking_as_fit_the_first_written_first(tmp_path):
    # Each sees all four intents, and counts those written before its own: the first two ask at
    # start (two gangs fit), the third and fourth wait for their turn; none counts a later one.
    now = time.time()
    assert four_at_once(tmp_path / "a", [now + i / 1000 for i in range(4)]) == [True, True, False, False]
    # Two written in the same instant each count the other: the gate's way for both where only
    # one more fits (safe over quick), and both where both fit.
    assert four_at_once(tmp_path / "b", [now, now + 0.001, now + 0.001, now + 0.002]) == [True, False, False, False]
    assert four_at_once(tmp_path / "c", [now, now, now + 0.001, now + 0.002]) == [True, True, False, False]


def test_a_job_submitted_while_another_announces_itself_is_counted_from_the_resource_managers_list(tmp_path):
    # A asks at start; as B writes its intent, A's submission completes: its intent goes and the
    # ResourceManager lists it. B reads the list after its look at the intents, so it sees A there.
    rm: list[AppReport] = []
    first = plan(LocalStorage(tmp_path))
    assert first.tasks == tasks(3)

    class Racing(LocalStorage):
        def touch(self, key: str) -> None:
            super().touch(key)
            rm.append(AppReport(id="application_1_0001", name="a", user="u", queue=QUEUE, state="ACCEPTED",
                                final_status="UNDEFINED", diagnostics="", started_at=time.time(), finished_at=None,
                                am_rpc_address=None, priority=0,
                                tags=frozenset({"tony", gang_tag(MASTER, [s for _, s in gang(3)], at_start=True)})))
            first.done()

    second = plan_start(tasks(3), gang(3), MASTER, 0, QUEUE, QUEUE_INFO, NODES, lambda: list(rm), Racing(tmp_path), elders_wait_s=0)
    assert not second.tasks and "application_1_0001" in second.why, second.why


def test_an_intent_left_by_a_client_that_died_is_ignored_once_stale(tmp_path):
    store = LocalStorage(tmp_path)
    dead = plan(store)
    path = tmp_path / dead.intent
    old = time.time() - INTENT_TTL_S - 5
    os.utime(path, (old, old))
    assert plan(store).tasks == tasks(3)
    assert path.exists()  # ignored, not yet deleted: its client may be slow rather than dead


def test_an_intent_left_long_ago_is_deleted_by_the_next_submission(tmp_path):
    store = LocalStorage(tmp_path)
    dead, slow = plan(store), plan(store, workers=1)
    old, older = time.time() - INTENT_TTL_S - 5, time.time() - INTENT_GONE_S - 5
    os.utime(tmp_path / slow.intent, (old, old))
    os.utime(tmp_path / dead.intent, (older, older))
    p = plan(store)
    assert p.tasks == tasks(3)
    assert not (tmp_path / dead.intent).exists() and (tmp_path / slow.intent).exists()
    p.done(), slow.done()
    assert intents(store) == []


def test_a_job_submitted_to_ask_at_start_counts_before_its_master_runs(tmp_path):
    store = LocalStorage(tmp_path)
    tag = gang_tag(MASTER, [s for _, s in gang(3)], at_start=True)
    accepted = AppReport(id="application_1_0001", name="other", user="u", queue=QUEUE, state="ACCEPTED",
                         final_status="UNDEFINED", diagnostics="", started_at=time.time() - 2, finished_at=None,
                         am_rpc_address=None, priority=0, tags=frozenset({"tony", tag}))
    p = plan(store, reports=[accepted])
    assert not p.tasks and "application_1_0001" in p.why
    # So it does for the moment before the scheduler accepts it.
    submitted = AppReport(**{**accepted.__dict__, "state": "SUBMITTED"})
    p = plan(store, reports=[submitted])
    assert not p.tasks and "application_1_0001" in p.why
    # Long past its submission, YARN holds it back (the share for ApplicationMasters): it no longer counts.
    stale = AppReport(**{**accepted.__dict__, "started_at": time.time() - 600})
    p = plan(store, reports=[stale])
    assert p.tasks == tasks(3)
    p.done()
    # A job of the gate's way that YARN has not started asks for nothing yet.
    gated = AppReport(**{**accepted.__dict__, "tags": frozenset({"tony", gang_tag(MASTER, [s for _, s in gang(3)])})})
    assert plan(store, reports=[gated]).tasks == tasks(3)


def test_a_submission_that_asks_at_start_says_so_and_the_next_sees_its_gang_counted(tmp_path):
    store = LocalStorage(tmp_path)
    first = plan(store)
    assert first.tasks == tasks(3)
    first.asked("application_1_0001")  # submitted asking for its gang
    first.done()
    assert intents(store) == ["asked-application_1_0001"]
    # Running, its master placed and nothing of its gang granted yet: its requests are out.
    running = AppReport(id="application_1_0001", name="other", user="u", queue=QUEUE, state="RUNNING",
                        final_status="UNDEFINED", diagnostics="", started_at=time.time() - 2, finished_at=None,
                        am_rpc_address="h:1", priority=0, running_containers=1,
                        tags=frozenset({"tony", gang_tag(MASTER, [s for _, s in gang(3)], at_start=True)}))
    # A job of higher priority would go before one that waits for its turn, not before it.
    later = plan_start(tasks(3), gang(3), MASTER, 5, QUEUE, QUEUE_INFO, NODES, lambda: [running], store, elders_wait_s=0)
    assert not later.tasks and "application_1_0001" in later.why, later.why
    later.done()


def test_without_a_usable_line_directory_or_with_spread_types_the_gate_decides(tmp_path):
    assert plan_start([], gang(2), MASTER, 0, QUEUE, None, NODES, list, LocalStorage(tmp_path), elders_wait_s=0).tasks == []
    assert "line directory" in plan(None).why and plan(None).tasks == []
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the directory should be")
    p = plan(LocalStorage(blocked))
    assert p.tasks == [] and "cannot be used" in p.why


@pytest.mark.parametrize("label", ["", "gpu-a"])
def test_an_intent_is_all_in_its_name(label):
    name = intent_name(MASTER, [Shape(2048, 2, 1, label), Shape(256, 1)], 4)
    member = parse_intent(name)
    assert member is not None and member.priority == 4 and member.starting and not member.master_placed
    assert member.master == MASTER and sorted(member.gang, key=lambda s: s.memory_mb) == [
        Shape(256, 1), Shape(2048, 2, 1, label)]
    # Nothing of it is placed yet: its master's container is part of what it lacks.
    assert sorted(member.remaining(), key=lambda s: s.memory_mb) == [Shape(256, 1), MASTER, Shape(2048, 2, 1, label)]
    assert parse_intent("intent-1-2-x-512.1.0+1.1.0*1") is None and parse_intent("board-1") is None


def test_a_queue_whose_board_says_jobs_wait_for_their_turn_is_joined_the_gates_way(tmp_path):
    from tony_workflow.backends.yarn.gang import Verdict
    from tony_workflow.backends.yarn.line import Board
    store = LocalStorage(tmp_path)
    store.shared_dir(queue_dir(QUEUE))
    board = tmp_path / queue_dir(QUEUE) / "board-application_1_0001"
    board.write_text(Board("application_1_0001", ["application_1_0001"], {"application_1_0001": Verdict(False)}).to_json())
    p = plan(store)
    assert p.tasks == [] and "wait for their turn" in p.why and intents(store) == ["board-application_1_0001"]
    # A board gone quiet (its looker left long ago) says nothing of the queue now.
    old = time.time() - 600
    os.utime(board, (old, old))
    p = plan(store)
    assert p.tasks == tasks(3)
    p.done()
    # Nor does one whose looker's turn came.
    board.write_text(Board("application_1_0001", ["application_1_0001"], {}, leaving=True).to_json())
    p = plan(store)
    assert p.tasks == tasks(3)
    p.done()


def at_start(state: str, running: int | None = None) -> AppReport:
    """The job of ``plan``'s gang of three, submitted to ask for it at start, as YARN lists it."""
    return AppReport(id="application_1_0001", name="first", user="u", queue=QUEUE, state=state,
                     final_status="UNDEFINED", diagnostics="", started_at=time.time(), finished_at=None,
                     am_rpc_address=None, priority=0, running_containers=running,
                     tags=frozenset({"tony", gang_tag(MASTER, [s for _, s in gang(3)], at_start=True)}))


def test_a_waiting_job_is_submitted_once_the_gang_asked_at_start_before_it_has_asked(tmp_path):
    # YARN places a queue's containers in the order their requests come, and a gang asked at start
    # is requested only once its master runs. Here the first job's gang and master fill the node
    # exactly: submitted before that, the waiting job's master would take 512 MB of the gang's
    # room. It waits while the first is an intent, then while YARN has it ACCEPTED, and is
    # submitted once its master runs (its requests are in).
    store = LocalStorage(tmp_path)
    full = [Node("nm-0", "", (5632, 8, 0), (5632, 8, 0))]  # skein's master, the AM and 3 x 1536 MB
    rm: list[AppReport] = []
    room = [full]
    first = plan(store, nodes=full)
    steps = []

    def submitted():  # its client submits it, and YARN accepts it
        rm.append(at_start("ACCEPTED"))
        first.done()
        steps.append("accepted")

    def master_runs():  # its master registered and asked for the gang; YARN placed the master
        rm[0] = at_start("RUNNING", running=1)
        room[0] = [Node("nm-0", "", (5120, 7, 0), (5632, 8, 0))]
        steps.append("running")
    timers = [threading.Timer(0.5, submitted), threading.Timer(1.0, master_runs)]
    for t in timers:
        t.start()
    second = plan_start(tasks(3), gang(3), MASTER, 0, QUEUE, QUEUE_INFO, full, lambda: list(rm), store,
                        elders_wait_s=30, room_now=lambda: (room[0], QUEUE_INFO))
    for t in timers:
        t.join()
    assert first.tasks and not second.tasks and intents(store) == []
    assert steps == ["accepted", "running"] and second.looked["held_s"] >= 1.0, second.looked
    # A job ahead whose submission never ends (its client died) holds the next one back only so long.
    stuck = plan(store, nodes=full)
    second = plan_start(tasks(3), gang(3), MASTER, 0, QUEUE, QUEUE_INFO, full, list, store, elders_wait_s=0.5)
    assert not second.tasks and second.looked["held_s"] >= 0.5 and len(intents(store)) == 1
    stuck.done()


def test_a_waiting_job_whose_master_fits_beside_the_gangs_asked_at_start_is_submitted_at_once(tmp_path):
    # 8 GB free, the first job's gang and master take 5.5 GB: the waiting job's master fits beside
    # them wherever YARN puts it, so it does not wait for the first to be submitted.
    store = LocalStorage(tmp_path)
    first = plan(store)
    second = plan_start(tasks(3), gang(3), MASTER, 0, QUEUE, QUEUE_INFO, NODES, list, store, elders_wait_s=30)
    assert first.tasks and not second.tasks and "turn has not come" in second.why
    assert second.looked["held_s"] == 0 and intents(store) == [first.intent.rsplit("/", 1)[1]]
    first.done()
