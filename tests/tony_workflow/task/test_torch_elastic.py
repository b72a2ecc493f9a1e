"""Regrouping in place (:mod:`tony_workflow.torch_elastic`) with real trainer processes (torch,
gloo) and a real AM server (its routes on an AM's state, the group token only): a member killed,
the survivor trains on in the same process from where it was; a newcomer joins at a commit and is
handed the state, the replicas end identical; the script's own error is raised, not taken for a
lost member; outside a job the same script trains alone."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("torch.distributed", reason="torch is installed by `make test` (the pytorch extra)")

from tests.conftest import REPO, wait_for
from tests.tony_workflow.am.test_routes import elastic_state
from tony_workflow import protocol
from tony_workflow.am.routes import AMRoutes
from tony_workflow.am.server import AMHttpServer

pytestmark = pytest.mark.frameworks

RUN = "application_1_0001-0"

TRAINER = textwrap.dedent("""
    import hashlib, os, sys, time
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from tony_workflow.torch_elastic import State, run

    STEPS, FAIL = int(sys.argv[1]), sys.argv[2] == "fail"
    # A member left alone waits, before each step, for a newcomer's process to be up (its marker
    # file), so that the newcomer's join lands while there are steps left to train together.
    AWAIT, ARRIVED = os.environ.get("TRAINER_AWAIT"), os.environ.get("TRAINER_ARRIVED")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    state = State(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), step=0)
    data = torch.arange(64, dtype=torch.float32).reshape(16, 4) / 64

    def train(state, group):
        print(f"pid={os.getpid()} generation={group.generation} rank={group.rank} world={group.world_size} "
              f"from={state.step}", flush=True)
        ddp = DistributedDataParallel(state.model) if group.world_size > 1 else state.model
        while state.step < STEPS:
            deadline = time.time() + 120
            while group.world_size == 1 and AWAIT and not os.path.exists(AWAIT) and time.time() < deadline:
                time.sleep(0.1)
            if FAIL and state.step == 3:
                raise ValueError("the script's own mistake")
            x = data[group.rank::group.world_size]
            state.optimizer.zero_grad()
            ddp(x).pow(2).mean().backward()
            state.optimizer.step()
            state.step += 1
            print(f"step={state.step}", flush=True)
            time.sleep(0.1 if group.world_size > 1 or not AWAIT else 0.3)
            state.commit()
        return group

    if ARRIVED:
        open(ARRIVED, "w").close()
    group = run(train, state)
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:12]
    print(f"done pid={os.getpid()} steps={state.step} world={group.world_size} params={digest}", flush=True)
""")


@pytest.fixture
def am(tmp_path):
    state = elastic_state(tmp_path)  # worker:0 and worker:1, min-instances 1
    state.elastic.rendezvous.open(RUN, minimum=1, target=2)
    server = AMHttpServer("127.0.0.1", token="secret", view_token="view", handlers=AMRoutes(state).handlers(),
                          status=state.status_dict, task_logs=state.task_logs)
    address = server.start()
    yield state, address
    server.shutdown()


def trainer(tmp_path, address: str, task_id: str, steps: int = 40, mode: str = "ok",
            in_place: bool = True, **marks: str) -> subprocess.Popen:
    """A trainer process; ``marks`` (``await_``, ``arrived``) name the marker files of a member
    left alone and of a newcomer (see the script)."""
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    if in_place:
        env.update({"TONY_ELASTIC_REGROUP": "in-place", "TONY_ELASTIC_ENDPOINT": address,
                    "TONY_ELASTIC_TOKEN": protocol.group_token("secret"), "TONY_ELASTIC_RUN_ID": RUN,
                    "TONY_ELASTIC_HOST": "127.0.0.1", "TONY_TASK_ID": task_id, "SESSION_ID": "0"})
    env["PYTHONPATH"] = str(REPO)
    if marks.get("await_"):
        env["TRAINER_AWAIT"] = marks["await_"]
    if marks.get("arrived"):
        env["TRAINER_ARRIVED"] = marks["arrived"]
    out = open(tmp_path / f"{task_id.replace(':', '-')}-{time.monotonic_ns()}.log", "w+")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, str(script), str(steps), mode], env=env, stdout=out,
                            stderr=subprocess.STDOUT, text=True)
    proc.log = out  # type: ignore[attr-defined]
    return proc


def output(proc: subprocess.Popen) -> str:
    proc.log.flush()  # type: ignore[attr-defined]
    return open(proc.log.name).read()  # type: ignore[attr-defined]


def node_of(proc: subprocess.Popen, task_id: str) -> str:
    return f"{task_id}@127.0.0.1:{proc.pid}"


def test_a_member_lost_and_replaced_while_the_survivor_trains_on_in_the_same_process(am, tmp_path):
    state, address = am
    arrived = str(tmp_path / "newcomer-up")
    first = {t: trainer(tmp_path, address, t, await_=arrived) for t in ("worker:0", "worker:1")}
    try:
        wait_for(lambda: "step=8" in output(first["worker:0"]), timeout=90, interval=0.2)
        # worker:1's process dies (SIGKILL: no goodbye), and the AM names it gone, as on its task's end.
        first["worker:1"].send_signal(signal.SIGKILL)
        first["worker:1"].wait(10)
        state.elastic.rendezvous.departed(node_of(first["worker:1"], "worker:1"))
        wait_for(lambda: "generation=1 rank=0 world=1" in output(first["worker:0"]), timeout=60, interval=0.2)
        # The survivor went on from where it was, not from the start.
        again = output(first["worker:0"]).split("generation=1 rank=0 world=1")[1]
        resumed = int(again.split("from=")[1].split()[0])
        assert resumed >= 8, again[:200]
        # A replacement asks to join: the survivor regroups at a commit and hands it the state.
        newcomer = trainer(tmp_path, address, "worker:1", arrived=arrived)
        assert first["worker:0"].wait(120) == 0, output(first["worker:0"])[-3000:]
        assert newcomer.wait(60) == 0, output(newcomer)[-3000:]
    finally:
        for p in first.values():
            p.kill()
    survivor, joined = output(first["worker:0"]), output(newcomer)
    assert "generation=2 rank=0 world=2" in survivor, survivor[-2000:]
    assert "generation=2 rank=1 world=2" in joined, joined[-2000:]
    came_in_at = int(joined.split("generation=2 rank=1 world=2 from=")[1].split()[0])
    assert came_in_at > resumed  # handed the survivor's state, not its own start
    # One process all along: the survivor's pid in every line it printed.
    assert {line.split()[0] for line in survivor.splitlines() if line.startswith("pid=")} == {
        f"pid={first['worker:0'].pid}"}
    done = {line.split("params=")[1] for line in (survivor + joined).splitlines() if line.startswith("done ")}
    assert len(done) == 1, survivor[-500:] + joined[-500:]  # the replicas are identical
    assert "steps=40 world=2" in survivor
    # The AM recorded each generation as a formed round: 2 members, then 1, then 2.
    sizes = [(h.get("round"), h.get("size")) for h in state.status.elastic["history"] if "round" in h]
    assert sizes == [(0, 2), (1, 1), (2, 2)], state.status.elastic["history"]


def test_the_scripts_own_error_is_raised_not_taken_for_a_lost_member(am, tmp_path):
    _, address = am
    procs = [trainer(tmp_path, address, t, mode="fail") for t in ("worker:0", "worker:1")]
    try:
        codes = [p.wait(90) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert codes == [1, 1], [output(p)[-2000:] for p in procs]
    for p in procs:
        text = output(p)
        assert "ValueError: the script's own mistake" in text and "regrouping" not in text, text[-2000:]


def test_outside_a_job_the_same_script_trains_alone(tmp_path):
    proc = trainer(tmp_path, "", "worker:0", steps=5, in_place=False)
    assert proc.wait(60) == 0, output(proc)
    text = output(proc)
    assert "generation=-1 rank=0 world=1 from=0" in text and "done" in text and "steps=5 world=1" in text
