"""The gang line of a shared YARN queue (:mod:`tony_workflow.backends.yarn.gang`), as tables: a
cluster, the TonY jobs of the queue, and what a job may do and why."""
from __future__ import annotations

import pytest

from tony_workflow.backends.base import Capacity
from tony_workflow.backends.yarn.gang import (
    START_GRACE_S,
    Member,
    Node,
    Shape,
    asked_at_start,
    gang_tag,
    members_from,
    parse_gang_tag,
    queue_order,
    reason_for,
    verdict,
    verdicts,
)
from tony_workflow.backends.yarn.rm import AppReport

MASTER = Shape(512, 1)
AM = Shape(512, 1)
W = Shape(1536, 1)
GPU_W = Shape(2048, 2, 1, "gpu")


def nodes(*free_mb: int, total: int = 4096, label: str = "", gpus: int = 0) -> list[Node]:
    return [Node(f"{label or 'nm'}{i}:1", label, (mb, 8, gpus), (total, 8, gpus)) for i, mb in enumerate(free_mb)]


def job(seq: int, held: int | None = 0, *, state: str = "RUNNING", gang=(AM, W, W, W), priority: int = 0,
        asked: bool = False) -> Member:
    return Member(f"application_1_{seq:04d}", priority, state, MASTER, tuple(gang), held, asked=asked)


def want(n: int = 3, shape: Shape = W, ttype: str = "worker") -> list[tuple[str, Shape]]:
    return [(ttype, shape)] * n


def test_the_gang_tag_names_the_master_and_every_container_and_reads_back():
    tag = gang_tag(MASTER, [AM, W, W, W, GPU_W])
    assert tag == "tony-gang:512.1.0/2048.2.1@gpu*1/1536.1.0*3/512.1.0*1"
    master, gang = parse_gang_tag(["tony", tag])
    assert master == MASTER and sorted(gang, key=lambda s: s.size) == sorted([AM, W, W, W, GPU_W], key=lambda s: s.size)
    assert parse_gang_tag(["tony"]) is None and parse_gang_tag(["tony-gang:oops"]) is None


def test_a_gang_of_many_shapes_is_tagged_as_that_many_of_the_largest_within_yarns_limit():
    gang = [Shape(1000 + i, 1 + i % 3, i % 2) for i in range(12)]
    tag = gang_tag(MASTER, gang)
    assert len(tag) <= 100
    _, read = parse_gang_tag([tag])
    assert len(read) == 12 and all(s == Shape(1011, 3, 1) for s in read)


def test_a_job_that_asks_at_start_says_so_in_its_tag_and_counts_from_its_submission():
    tag = gang_tag(MASTER, [AM, W, W, W], at_start=True)
    assert tag == "tony-gang:512.1.0!/1536.1.0*3/512.1.0*1"
    assert asked_at_start(["tony", tag]) and not asked_at_start(["tony", gang_tag(MASTER, [AM, W])])
    assert parse_gang_tag([tag]) == parse_gang_tag([gang_tag(MASTER, [AM, W, W, W])])

    def report(tags, started_at):
        return AppReport(id="application_1_0001", name="j", user="u", queue="root.default", state="ACCEPTED",
                         final_status="UNDEFINED", diagnostics="", started_at=started_at, finished_at=None,
                         am_rpc_address=None, priority=0, tags=frozenset({"tony", *tags}))
    now = 1000.0
    [starting] = members_from([report([tag], now - 5)], "root.default", now=now)
    # its whole gang and its master, before YARN places the master; once placed, the gang
    assert starting.starting and starting.remaining() == [W, W, W, AM, MASTER]
    [placed] = members_from([AppReport(**{**report([tag], now - 5).__dict__, "running_containers": 1})],
                            "root.default", now=now)
    assert placed.master_placed and placed.remaining() == [W, W, W, AM]
    [late] = members_from([report([tag], now - START_GRACE_S - 1)], "root.default", now=now)
    assert not late.starting and late.remaining() == []  # YARN holds it back: it must not hold others
    # A job that will wait at the gate lacks its master's container until YARN places it, within
    # the same grace.
    [gated] = members_from([report([gang_tag(MASTER, [AM, W])], now - 5)], "root.default", now=now)
    assert not gated.starting and gated.arriving and gated.remaining() == [MASTER]
    [gated] = members_from([AppReport(**{**report([gang_tag(MASTER, [AM, W])], now - 5).__dict__,
                                         "running_containers": 1})], "root.default", now=now)
    assert gated.remaining() == []
    [gated] = members_from([report([gang_tag(MASTER, [AM, W])], now - START_GRACE_S - 1)], "root.default", now=now)
    assert not gated.arriving and gated.remaining() == []


def test_member_lacks_its_largest_containers_until_it_holds_them():
    assert job(1, held=0).remaining() == [W, W, W, AM]
    assert job(1, held=1).remaining() == [W, W, W]
    assert job(1, held=4).remaining() == []
    assert job(1, held=None).remaining() == [W, W, W, AM]       # its allocation is not shown: all of it
    assert job(1, state="ACCEPTED").remaining() == []            # YARN has not started it


def test_the_queue_is_served_by_priority_then_submission():
    order = queue_order([job(3), job(1), job(2, priority=5)])
    assert [m.app_id for m in order] == ["application_1_0002", "application_1_0001", "application_1_0003"]


def test_jobs_that_have_asked_are_served_before_those_that_wait_for_their_turn():
    order = queue_order([job(3), job(1), job(4, asked=True), job(2, priority=5), job(5, asked=True, priority=5)])
    assert [m.app_id[-1] for m in order] == ["5", "4", "2", "1", "3"]


def test_an_older_job_waits_behind_a_younger_one_whose_requests_are_out():
    # The younger job's turn came first (the older was not yet started): it asked for its gang
    # and YARN has granted none of it yet. The room looks free, but the ResourceManager serves the
    # requests it holds first: the older one, asking now, would get part of its gang beside the
    # younger one's whole, and hold it idle.
    younger = job(2, held=0, asked=True)
    v = verdict("application_1_0001", 0, [job(1), younger], nodes(4096, 4096), None, want(), {"worker": (0, 3)},
                queue="default")
    assert not v.go and v.ahead == ("application_1_0002",), v
    # The younger one, forming, is not told to give its gang back for the older one that waits.
    v = verdict("application_1_0002", 0, [job(1), job(2, held=2, asked=True)], nodes(1536, 1536), None, want(2),
                {"worker": (1, 3)}, queue="default")
    assert v.go and not v.elders_blocked and v.ahead == (), v
    # Of two that asked, the older is served first, as YARN does: the younger gives way.
    v = verdict("application_1_0002", 0, [job(1, held=1, asked=True), job(2, held=2, asked=True)], nodes(1536, 1536),
                None, want(2), {"worker": (1, 3)}, queue="default")
    assert not v.go and v.elders_blocked, v


@pytest.mark.parametrize("case", [
    # (what it is, free MB per node, jobs of the queue, may go?, words in the reason)
    ("alone, room for all", (4096, 4096), [], True, []),
    ("an older job's gang is set aside first", (4096, 4096), [job(1)], False,
     ["worker: 0 of 3", "1 job (application_1_0001) ahead in queue default, whose containers are placed first"]),
    ("both fit: the younger backfills", (4096, 4096, 4096, 4096), [job(1)], True, []),
    ("an older job that holds its gang lacks nothing", (2048, 4096), [job(1, held=4)], True, []),
    ("the room is used by others: headroom on the nodes", (1024, 1024), [], False,
     ["room on the nodes: the largest container a node can give now is 1024 MB"]),
    ("enough in all but not on one node", (1024, 1024, 1024, 1024, 1024), [], False, ["room on the nodes"]),
])
def test_verdicts(case):
    _, free, others, go, words = case
    v = verdict("application_1_0002", 0, [*others, job(2)], nodes(*free), None, want(), {"worker": (0, 3)},
                queue="default")
    assert v.go is go, v
    for w in words:
        assert w in (v.reason or ""), v.reason


def test_an_older_job_that_cannot_form_holds_back_a_younger_one_that_could_no_starvation():
    # The older job needs 4 × 3 GB on nodes with 2 GB free: it cannot form now. The younger one's
    # 1.5 GB workers would fit, but taking that room would starve the big one.
    big = job(1, gang=(Shape(3072, 1),) * 4)
    v = verdict("application_1_0002", 0, [big, job(2)], nodes(2048, 2048, 2048, 2048), None, want(), {})
    assert not v.go and v.elders_blocked and v.ahead == ("application_1_0001",)
    assert "application_1_0001 cannot be placed yet and goes first" in v.reason


def test_an_older_job_in_another_partition_does_not_hold_back_this_one():
    gpu_job = job(1, gang=(AM, GPU_W, GPU_W))
    cluster = nodes(4096, 4096) + nodes(1024, label="gpu", gpus=4)   # the GPU node is nearly full
    v = verdict("application_1_0002", 0, [gpu_job, job(2)], cluster, None, want(), {})
    assert v.go, v


def test_an_older_job_that_can_never_be_placed_holds_nobody_back():
    # Its GPU label is carried by no node any more: it never forms, and must not stop the queue.
    lost = job(1, gang=(AM, GPU_W))
    v = verdict("application_1_0002", 0, [lost, job(2)], nodes(4096, 4096), None, want(), {})
    assert v.go, v


def test_a_younger_job_of_higher_priority_goes_first():
    v = verdict("application_1_0002", 10, [job(1), job(2, priority=10)], nodes(4096, 4096), None, want(), {})
    assert v.go and v.ahead == ()


def test_the_queue_headroom_blocks_what_the_nodes_would_hold():
    head = {"": Capacity(2048, 8, 0)}
    v = verdict("application_1_0002", 0, [job(2)], nodes(4096, 4096), head, want(), {"worker": (0, 3)},
                queue="root.default")
    assert not v.go and "queue headroom: queue root.default has 2048 MB" in v.reason


def test_a_label_no_node_carries_is_named():
    v = verdict("application_1_0002", 0, [job(2)], nodes(4096), None, want(1, GPU_W, "trainer"), {"trainer": (0, 1)})
    assert not v.go and "node label 'gpu', which no running node carries" in v.reason
    assert v.reason.startswith("trainer: 0 of 1 containers (2048 MB, 2 vcores, 1 GPU labelled gpu each)")


def test_a_container_larger_than_any_node_is_named():
    v = verdict("application_1_0002", 0, [job(2)], nodes(4096, 4096), None, want(1, Shape(8192, 1)), {})
    assert not v.go and "the largest container a node can give (4096 MB" in v.reason


def test_an_older_gang_that_cannot_fit_beside_the_masters_of_the_waiting_jobs_holds_none_of_them_back():
    # The big job's gang and master (7624 MB) fit the 8 GB cluster beside one master of a job that
    # waits its turn, not beside two: the younger jobs hold nothing else. Were the big job to hold
    # them back, each would wait for the other forever: they go first, when they fit.
    big = job(1, held=0, gang=(AM, Shape(2200, 1), Shape(2200, 1), Shape(2200, 1)))
    small = (AM, Shape(512, 1))
    waiting = [job(2, held=0, gang=small), job(3, held=0, gang=small)]
    free = nodes(3328, 3328)                        # three masters out of 8 GB
    v = verdict("application_1_0003", 0, [big, *waiting], free, None, want(2, Shape(512, 1)), {},
                maximum={"": Capacity(8192, 16, 0)})
    assert v.go, v
    # With one job fewer waiting beside it, the big one fits and holds the line again.
    v = verdict("application_1_0002", 0, [big, waiting[0]], nodes(3584, 3584), None, want(2, Shape(512, 1)), {},
                maximum={"": Capacity(8192, 16, 0)})
    assert not v.go and v.elders_blocked, v


@pytest.mark.parametrize("seed", range(40))
def test_one_pass_over_the_queue_judges_every_job_as_its_own_verdict_would(seed):
    import random
    rng = random.Random(seed)
    shapes = [W, AM, Shape(3072, 2), Shape(512, 1), GPU_W, Shape(1024, 1, 0, "gpu")]
    cluster = nodes(*(rng.choice([0, 1024, 2048, 4096]) for _ in range(rng.randint(1, 4))))
    cluster += nodes(rng.choice([0, 2048, 4096]), label="gpu", gpus=rng.choice([0, 2]))
    members = [job(i + 1, held=rng.choice([0, 0, 1, 2, None]), state=rng.choice(["RUNNING", "RUNNING", "ACCEPTED"]),
                   gang=tuple(rng.choice(shapes) for _ in range(rng.randint(1, 4))), priority=rng.choice([0, 0, 1]),
                   asked=rng.random() < 0.3)
               for i in range(rng.randint(1, 7))]
    headroom = rng.choice([None, {"": Capacity(rng.choice([2048, 8192, 65536]), 16, 8)}])
    every = verdicts(members, cluster, headroom, "root.q")
    for m in members:
        if not m.remaining():
            assert m.app_id not in every
            continue
        alone = verdict(m.app_id, m.priority, members, cluster, headroom, [("task", s) for s in m.remaining()], {},
                        "root.q")
        assert every[m.app_id] == alone, (m, every[m.app_id], alone)
        assert reason_for(every[m.app_id], [("worker", s) for s in m.remaining()], {"worker": (0, 9)}) == (
            None if alone.go else alone.reason.replace("task: 0 of 0", "worker: 0 of 9"))


# Two running gangs of four (AM and three 1 GB workers) on two nodes of 6 GB; the job ahead waits
# first in line with its AM up (it holds one container), the next waits in skein's master alone.
G1 = Shape(1024, 1)
SMALL = (AM, G1, G1, G1)
NEXT = [("am", AM), *want(3, G1)]


def _line_of_two(total: int) -> tuple[list[Member], list[Node]]:
    members = [job(1, held=4, gang=SMALL), job(2, held=4, gang=SMALL), job(3, held=1, gang=SMALL),
               job(4, held=0, gang=SMALL)]
    used = [4096 + 512 + 1024, 4096 + 512]  # a whole gang and its master on each; the waiting jobs' beside them
    return members, [Node(f"nm{i}:1", "", (max(0, total - u), 16, 0), (total, 16, 0)) for i, u in enumerate(used)]


def test_the_job_next_in_line_starts_its_am_early_when_it_cannot_keep_the_one_ahead_from_forming():
    members, cluster = _line_of_two(6144)
    v = verdict("application_1_0004", 0, members, cluster, None, NEXT, {}, maximum={"": Capacity(12288, 32, 0)})
    assert not v.go and v.ahead == ("application_1_0003",) and v.next_early and v.starts_early, v
    assert verdicts(members, cluster, None, maximum={"": Capacity(12288, 32, 0)})["application_1_0004"].next_early
    # The job ahead is first in line and starts early by that rule; the one ahead's own verdict is
    # not "next".
    ahead = verdict("application_1_0003", 0, members, cluster, None, want(3, G1), {})
    assert ahead.first_in_line and ahead.starts_early and not ahead.next_early


def test_the_job_next_in_line_is_judged_by_one_rule_in_its_own_look_and_on_the_board():
    # The board does not know which of a job's containers is its AM's, and judges it by its
    # largest; a job's own look judges it the same, so that whether it starts early does not
    # depend on which job of the queue looks for the others.
    seen = set()
    for total in range(4096, 9216, 256):
        members, cluster = _line_of_two(total)
        own = verdict("application_1_0004", 0, members, cluster, None, NEXT, {}).next_early
        assert own == verdicts(members, cluster, None)["application_1_0004"].next_early, total
        seen.add(own)
    assert seen == {True, False}


def test_the_job_next_in_line_waits_in_its_master_where_its_am_could_keep_the_one_ahead_from_forming():
    # Nodes of 4.5 GB, each a whole gang and its master while they run. The job ahead lacks two
    # 2 GB workers: were the two waiting jobs' masters and AMs on one node, and its held container
    # the largest it could be, one node alone would have room for its workers once the running
    # gangs end. Where YARN put them is not reported: the next job's AM waits in its master.
    big = (AM, Shape(2048, 1), Shape(2048, 1))
    members = [job(1, held=4, gang=SMALL), job(2, held=4, gang=SMALL), job(3, held=1, gang=big),
               job(4, held=0, gang=SMALL)]
    cluster = [Node("nm0:1", "", (0, 16, 0), (4608, 16, 0)), Node("nm1:1", "", (0, 16, 0), (4608, 16, 0))]
    v = verdict("application_1_0004", 0, members, cluster, None, NEXT, {})
    assert not v.go and v.ahead == ("application_1_0003",) and not v.next_early and not v.starts_early, v
    # With a node of 8 GB, the two workers fit there whatever the placement: the AM starts early.
    cluster[1] = Node("nm1:1", "", (3584, 16, 0), (8192, 16, 0))
    assert verdict("application_1_0004", 0, members, cluster, None, NEXT, {}).next_early
    # Not within a queue whose maximum leaves no room for the job ahead beside what the waiting
    # jobs hold.
    members, cluster = _line_of_two(6144)
    v = verdict("application_1_0004", 0, members, cluster, None, NEXT, {}, maximum={"": Capacity(5120, 32, 0)})
    assert not v.next_early, v


def test_behind_a_job_whose_master_yarn_has_not_started_the_next_counts_that_jobs_whole_gang():
    # The job ahead was submitted first, but YARN starts the next one's master first: the one
    # ahead lacks only its master now, and will lack its three 2 GB workers once it runs. With
    # nodes of 4.5 GB, the next one's AM could keep them out: it waits in its master.
    big = (AM, Shape(2048, 1), Shape(2048, 1), Shape(2048, 1))
    arriving = Member("application_1_0003", 0, "ACCEPTED", MASTER, big, None, arriving=True)
    members = [job(1, held=4, gang=SMALL), job(2, held=4, gang=SMALL), arriving, job(4, held=0, gang=SMALL)]
    cluster = [Node(f"nm{i}:1", "", (0, 16, 0), (4608, 16, 0)) for i in range(2)]
    v = verdict("application_1_0004", 0, members, cluster, None, NEXT, {})
    assert v.ahead == ("application_1_0003",) and not v.next_early, v
    cluster = [Node(f"nm{i}:1", "", (0, 16, 0), (8704, 16, 0)) for i in range(2)]  # 8.5 GB: room to spare
    assert verdict("application_1_0004", 0, members, cluster, None, NEXT, {}).next_early


def test_only_the_job_next_in_line_starts_early_not_the_one_after_it():
    members, cluster = _line_of_two(8192)
    members.append(job(5, held=0, gang=SMALL))
    every = verdicts(members, cluster, None)
    assert every["application_1_0004"].next_early and not every["application_1_0005"].next_early
    v = verdict("application_1_0005", 0, members, cluster, None, NEXT, {})
    assert v.ahead == ("application_1_0003", "application_1_0004") and not v.starts_early, v
    # Its turn come (the running gangs ended), a job starts nothing early: it asks.
    members, _ = _line_of_two(6144)
    free = [Node(f"nm{i}:1", "", (6144 - 1024 * (1 - i), 16, 0), (6144, 16, 0)) for i in range(2)]
    v = verdict("application_1_0004", 0, members[2:], free, None, NEXT, {})
    assert v.go and not v.starts_early, v
