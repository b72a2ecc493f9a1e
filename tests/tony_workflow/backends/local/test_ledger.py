"""The embedded cluster's books (:mod:`tony_workflow.backends.local.ledger`), with no job: gangs
taken whole, first come first served in submission order, the reason a gang waits, and holders
that die. Holders are real processes (a sleeping child), as the books check them by pid and start
time."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tony_workflow import process
from tony_workflow.backends.base import ContainerRequest
from tony_workflow.backends.local.ledger import (
    Inventory,
    Ledger,
    cluster_dir,
    forget_allocation,
    join_queue,
    next_application_id,
)


@pytest.fixture
def holders():
    """Starts processes that stand for jobs' supervisors; kills them at the end."""
    started: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()
        p.wait()


def gang(workers: int, memory_mb: int = 1024, gpus: int = 0) -> list[ContainerRequest]:
    return [ContainerRequest("am", 512, 1, 0), *(ContainerRequest(f"worker:{i}", memory_mb, 1, gpus)
                                                  for i in range(workers))]


def ledger(app_id: str, holder: subprocess.Popen, inventory: Inventory) -> Ledger:
    return Ledger(app_id, inventory, holder.pid, process.start_time(holder.pid))


def books() -> dict:
    return json.loads((cluster_dir() / "ledger.json").read_text())


def test_application_ids_have_yarns_shape_and_count_up(tony_home):
    first, second = next_application_id(), next_application_id()
    assert first.startswith("application_") and first.split("_")[1] == second.split("_")[1]
    assert (int(first.split("_")[2]), int(second.split("_")[2])) == (1, 2)


def test_a_gang_is_taken_whole_and_given_back_whole(tony_home, holders):
    inv = Inventory(4096, 8, [0, 1, 2, 3])
    a = ledger("application_1_0001", holders(), inv)
    gpus, wait = a.take(gang(2, gpus=1))
    assert (gpus, wait) == ([0, 1], None)
    assert books()["allocations"]["application_1_0001"]["memory_mb"] == 512 + 2 * 1024
    assert books()["queue"] == []
    # A later attempt of the same job takes over what the job holds, as it is.
    assert a.take(gang(2, gpus=1)) == ([0, 1], None)
    a.release()
    assert books()["allocations"] == {}


def test_jobs_are_served_in_submission_order_and_a_small_one_does_not_pass_a_big_one(tony_home, holders):
    inv = Inventory(4096, 16, [])
    running = ledger("application_1_0001", holders(), inv)
    assert running.take(gang(2))[0] == []                      # 2560 MB of 4096 held
    big, small = ledger("application_1_0002", holders(), inv), ledger("application_1_0003", holders(), inv)
    join_queue(big.app_id, big.owner_pid)
    join_queue(small.app_id, small.owner_pid)
    gpus, wait = small.take(gang(1))                           # 1536 MB would fit, but the big job is first
    assert gpus is None and wait.ahead == ("application_1_0002",)
    assert "1 job ahead on the embedded cluster (application_1_0002)" in wait.reason
    gpus, wait = big.take(gang(3))
    assert gpus is None and wait.ahead == ()
    assert "memory: the gang needs 3584 MB at once and 1536 MB of 4096 MB are free, held by application_1_0001" \
        in wait.reason
    running.release()
    assert big.take(gang(3)) == ([], None)
    assert small.take(gang(1))[0] is None                      # now behind nothing, but no room
    big.release()
    assert small.take(gang(1)) == ([], None)


def test_a_gang_waiting_for_a_gpu_names_the_jobs_that_hold_gpus_only(tony_home, holders):
    # Seen on a one-GPU machine: a CPU-only job running beside the GPU's holder was named as well.
    inv = Inventory(16384, 16, [0])
    gpu_job = ledger("application_1_0001", holders(), inv)
    cpu_job = ledger("application_1_0002", holders(), inv)
    assert gpu_job.take(gang(1, gpus=1))[0] == [0]
    assert cpu_job.take(gang(1))[0] == []
    waiter = ledger("application_1_0003", holders(), inv)
    join_queue(waiter.app_id, waiter.owner_pid)
    gpus, wait = waiter.take(gang(1, gpus=1))
    assert gpus is None and wait.reason.endswith(
        "GPUs: the gang needs 1 at once and 0 of 1 are free, held by application_1_0001")


def test_the_books_drop_holders_and_waiters_that_died(tony_home, holders):
    inv = Inventory(2048, 8, [0])
    dead_holder, dead_waiter = holders(), holders()
    gone = ledger("application_1_0001", dead_holder, inv)
    assert gone.take(gang(1, gpus=1))[0] == [0]
    join_queue("application_1_0002", dead_waiter.pid)
    alive = ledger("application_1_0003", holders(), inv)
    assert alive.take(gang(1, gpus=1))[0] is None
    for p in (dead_holder, dead_waiter):
        p.kill()
        p.wait()
    assert alive.take(gang(1, gpus=1)) == ([0], None)
    assert set(books()["allocations"]) == {"application_1_0003"} and books()["queue"] == []


def test_a_gang_that_waits_for_gpus_says_so(tony_home, holders):
    inv = Inventory(65536, 64, [0, 1])
    assert ledger("application_1_0001", holders(), inv).take(gang(1, gpus=2))[0] == [0, 1]
    gpus, wait = ledger("application_1_0002", holders(), inv).take(gang(2, gpus=1))
    assert gpus is None and "GPUs: the gang needs 2 at once and 0 of 2 are free" in wait.reason
    assert wait.reason.startswith("worker: 0 of 2 containers (1024 MB, 1 vcore, 1 GPU each)")


def test_leaving_the_queue_and_forgetting(tony_home, holders):
    inv = Inventory(1024, 4, [])
    holder = ledger("application_1_0001", holders(), inv)
    assert holder.take(gang(1, memory_mb=256))[0] == []
    waiting = ledger("application_1_0002", holders(), inv)
    assert waiting.take(gang(1, memory_mb=256))[0] is None
    assert [q["app"] for q in books()["queue"]] == ["application_1_0002"]
    waiting.leave_queue()
    assert books()["queue"] == []
    forget_allocation("application_1_0001")
    assert books()["allocations"] == {}


def test_a_gang_larger_than_the_machine_is_refused_naming_the_setting(tony_home):
    from tony_workflow.backends.base import NeverFits

    with pytest.raises(NeverFits) as e:
        Inventory(2048, 8, []).check_fits(gang(3))
    assert "tony.local.memory" in str(e.value)
