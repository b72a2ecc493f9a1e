"""The AM's account of its gang (:mod:`tony_workflow.am.gang`): what it shows, when it gives back,
when the job is overdue. A fake clock; no cluster."""
from __future__ import annotations

import random

import pytest

from tony_workflow.am.gang import AllocationTimeout, GangWatch
from tony_workflow.backends import Wait
from tony_workflow.status import JobStatus


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watch(allocation_ms=-1, hold_ms=60000, backoff_ms=5000):
    clock = Clock()
    return GangWatch(allocation_ms, hold_ms, backoff_ms, clock=clock, rng=random.Random(7)), clock


def test_the_wait_is_shown_with_its_reason_count_since_and_jobs_ahead_then_cleared_once_whole():
    g, clock = watch()
    g.begin(4)
    assert g.waiting(Wait("worker: 0 of 3 containers; blocked by 1 job", ("application_1_0001",)))
    clock.now += 5
    assert not g.waiting(Wait("worker: 0 of 3 containers; blocked by 1 job", ("application_1_0001",)))
    status = JobStatus(application_id="application_1_0002")
    g.show(status)
    assert (status.containers_held, status.containers_wanted) == (1, 4)
    assert status.waiting_reason.startswith("worker: 0 of 3") and status.waiting_since == 1000.0
    assert status.jobs_ahead == ["application_1_0001"]
    assert g.granted(3, 4)
    assert g.whole() == 5.0
    g.show(status)
    assert status.waiting_reason is None and status.waiting_since is None and status.containers_held == 4


def test_a_wait_that_began_at_the_gate_counts_from_there():
    g, _clock = watch()
    g.begin(4, since=990.0)
    g.waiting(Wait("worker: 0 of 3"))
    assert g.whole() == 10.0


@pytest.mark.parametrize("held, release, elapsed, expect", [
    (1, False, 600, None),              # nothing held but the AM's own: nothing to give back
    (3, False, 30, None),               # held for less than the hold timeout
    (3, False, 61, "held for 60 s (tony.gang.hold-timeout-ms)"),
    (3, True, 1, "an older job of the queue needs the room first"),
])
def test_part_of_a_gang_is_given_back_when_held_too_long_or_an_older_job_needs_it(held, release, elapsed, expect):
    g, clock = watch()
    g.begin(4)
    g.asked()
    g.granted(held, 4)
    clock.now += elapsed
    why = g.give_back(Wait("worker: 1 of 3", release=release))
    assert (why is None) if expect is None else (expect in why), why


def test_a_gang_that_was_whole_once_keeps_what_it_has():
    g, clock = watch()
    g.begin(4)
    g.asked()
    g.granted(4, 4)
    g.whole()
    g.granted(3, 4)           # a task relaunched alone waits for its container
    clock.now += 600
    assert g.give_back(Wait("worker: 2 of 3", release=True)) is None


def test_the_hold_timeout_of_zero_holds_on():
    g, clock = watch(hold_ms=0)
    g.begin(4)
    g.asked()
    g.granted(3, 4)
    clock.now += 10_000
    assert g.give_back(Wait("worker: 2 of 3")) is None


def overdue_between(g: GangWatch, clock: Clock, reason: str, still_in_time_s: float, late_s: float, said: str) -> None:
    """The gang waits for ``reason``: not overdue after ``still_in_time_s``, overdue saying ``said``
    ``late_s`` later."""
    g.waiting(Wait(reason))
    clock.now += still_in_time_s
    g.overdue()
    clock.now += late_s
    with pytest.raises(AllocationTimeout, match=said):
        g.overdue()


def test_tonys_allocation_timeout_fails_a_gang_that_is_not_whole_in_time():
    g, clock = watch(allocation_ms=30_000)
    g.begin(4)
    overdue_between(g, clock, "worker: 0 of 3; blocked by queue headroom", 29, 2,
                    r"not all granted within 30000 ms \(tony.container.allocation.timeout\): "
                    r"1 were; worker: 0 of 3; blocked by queue headroom")
    g.whole()
    g.overdue()                # a whole gang is never overdue


def test_backoffs_are_random_and_double_up_to_eight_times():
    g, _ = watch(backoff_ms=1000)
    pauses = [g.backoff() for _ in range(6)]
    for k, pause in enumerate(pauses):
        base = min(8, 2 ** k)
        assert 0.5 * base <= pause <= 1.5 * base
    other, _ = watch(backoff_ms=1000)
    other.rng = random.Random(8)
    assert [other.backoff() for _ in range(6)] != pauses     # two jobs do not ask again in step


def test_a_wait_at_the_gate_counts_against_tonys_allocation_timeout():
    g, clock = watch(allocation_ms=30_000)
    g.begin(4, since=clock.now - 31)
    with pytest.raises(AllocationTimeout):
        g.overdue()


def test_tonys_startup_timeout_counts_from_the_submission_until_the_first_gang_brings_the_ams_container():
    g, clock = watch()
    g.startup = (clock.now - 5, 10.0)  # submitted 5 s before the AM's first look
    g.begin(3)
    overdue_between(g, clock, "blocked by 1 job ahead on the embedded cluster", 4, 2,
                    r"ApplicationMaster did not start within 10000 ms \(tony.am.startup-timeout\).*blocked by 1 job ahead")
    g.whole()
    clock.now += 100
    g.begin(3)                 # a later session's wait is no start-up: only the allocation timeout applies
    g.overdue()
