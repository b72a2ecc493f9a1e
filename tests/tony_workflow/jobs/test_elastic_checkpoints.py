"""An elastic job's progress survives the loss of any container, rank 0's included: a torchrun
script in the usual idiom (rank 0 alone saves into $TONY_CHECKPOINT_DIR, every rank loads from
there as it starts) under torch's agent (tony.elastic.regroup=restart), 3 workers of which 2 are
enough. Whichever container dies, every rank of the next group starts from the last checkpoint
rank 0 wrote, on both backends, with one process a container and with two. What is checked comes
from the trainers' own output: where each rank started, what rank 0 saved, their final state."""
from __future__ import annotations

import re
import time

import pytest

from tests.conftest import REPO, wait_for
from tests.tony_workflow.jobs.test_elastic_jobs import finished, kill_container, stdout
from tony_workflow.client import TonyClient, load_job

pytestmark = pytest.mark.frameworks

SCRIPT = REPO / "tests" / "tony_workflow" / "jobs" / "rank0_saves"
TOTAL = 60
# Between two saves (5 steps) more time than the mirror needs to copy one (it looks every 0.5 s).
STEP_SLEEP = {"local": 0.3, "yarn": 0.6}


def submit(backend: str, processes: int):
    job = {"name": "rank0-saves", "framework": "pytorch", "executes": "train.py", "src_dir": str(SCRIPT),
           "task_params": f"{TOTAL} 5 {STEP_SLEEP[backend]}", "am": {"memory": "512m"},
           "tasks": {"worker": {"instances": 3, "min_instances": 2, "memory": "1g", "processes": processes}},
           "conf": {"tony.elastic.regroup": "restart", "tony.task.tensorboard.enabled": "false"}}
    return TonyClient(backend).submit(load_job(job))


def saves(out: str) -> list[int]:
    return [int(n) for n in re.findall(r"saved step=(\d+)", out)]


@pytest.fixture(params=["local", pytest.param("yarn", marks=pytest.mark.yarn)])
def backend(request):
    request.getfixturevalue("tony_home" if request.param == "local" else "yarn_cluster")
    return request.param


@pytest.mark.parametrize("aim,processes", [("rank 0", 1), ("another rank", 1), ("rank 0", 2)],
                         ids=["rank0", "another", "rank0-two-processes"])
def test_whichever_container_dies_the_group_resumes_from_rank_0s_last_checkpoint(backend, aim, processes):
    h = submit(backend, processes)
    ranks = 3 * processes
    st = wait_for(lambda: (s := h.status()).is_final and s or (
        s.state == "RUNNING" and (s.elastic or {}).get("size") == 3 and not s.elastic.get("waiting")
        and len(saves(stdout(h))) >= 2 and s), timeout=300, interval=0.3)
    assert not st.is_final, st.diagnostics
    # The container whose agent is the round's node 0 holds rank 0 (torch's agent gives a node's
    # processes consecutive ranks); the round's members are listed in node rank order.
    members = list(st.elastic["history"][-1]["members"])
    target = members[0] if aim == "rank 0" else members[-1]
    # Right after a save, once the mirror has had time to copy it: the loss takes no saved step.
    seen = len(saves(stdout(h)))
    wait_for(lambda: len(saves(stdout(h))) > seen, timeout=60, interval=0.05)
    time.sleep(1.0)
    last = saves(stdout(h))[-1]
    kill_container(st, target)
    final = finished(h)
    assert final.state == "SUCCEEDED" and final.session_id == 0, final.diagnostics
    out = stdout(h)
    rounds: dict[int, list[int]] = {}
    for r, s in re.findall(r"round=(\d+) rank=\d+ world=\d+ start_step=(\d+)", out):
        rounds.setdefault(int(r), []).append(int(s))
    assert rounds.pop(min(rounds)) == [0] * ranks, rounds  # the first group, from scratch
    # Every later group: all its ranks start from the same step, one rank 0 saved. The first one
    # after the loss starts from the last save before it (rank 0 may have saved once more before
    # its agent stopped it, losing a member): no saved step is lost, rank 0's container or not.
    assert rounds and all(len(set(steps)) == 1 for steps in rounds.values()), rounds
    resumed = [steps[0] for _, steps in sorted(rounds.items())]
    assert resumed[0] >= last > 0 and set(resumed) <= set(saves(out)), (resumed, last, saves(out))
    assert resumed == sorted(resumed), resumed
    # The replicas are identical at the end: parameters and momentum alike, every step trained.
    done = re.findall(r"rank=(\d+) done steps=(\d+) state=(\w+)", out)
    last_round = done[-ranks:]
    assert sorted(int(r) for r, _, _ in last_round) == list(range(ranks)), done
    assert {(int(n), d) for _, n, d in last_round} == {(TOTAL, last_round[0][2])}, done
