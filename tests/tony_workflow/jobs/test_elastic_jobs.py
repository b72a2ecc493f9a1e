"""Elastic PyTorch jobs for real (tony.worker.min-instances=2 of 3), on the embedded cluster (YARN's
part is test_yarn_reclaim's and test_elastic_checkpoints'): a worker's whole container is killed mid-run (its executor and the
trainer, as when its machine dies) and the others train on in the same session: regrouping in
place (the example's tony.elastic.regroup), their executors and trainers are the very processes
they were; under torch's agent (restart), their executors and agents are, and the trainers are
restarted. The replacement joins and the replicas end identical. Also too few left for too long (the session is relaunched whole), and a script that
does not train through tony_workflow.torch_elastic in a job that regroups in place. Processes are found and killed by scanning the machine; what is checked comes from the
trainers' own output and the process table, besides the job's status and record."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO, app_processes, sleeper_job, wait_for
from tony_workflow.client import TonyClient, load_job

pytestmark = pytest.mark.frameworks

ELASTIC = REPO / "examples" / "pytorch_elastic" / "pytorch_elastic.yaml"
SMALL = ["tony.am.memory=512m", "tony.worker.memory=3g", "tony.task.tensorboard.enabled=false"]
# Long enough that a loss and a rejoin both happen mid-run: 4 epochs of 14 steps by default. A replacement
# is started (torch imported) in about 10 s on the embedded cluster, and granted and started in
# about 15 s on YARN, while the survivors train on; on a machine the whole suite keeps busy, twice
# that. The steps are mostly sleep, which costs the machine nothing.
PARAMS = "--epochs {epochs} --save-every 5 --batch-size 96 --step-sleep {sleep}"
STEP_SLEEP = {"local": 0.7, "yarn": 0.9}


def container_tree(status, task_id: str) -> list[psutil.Process]:
    """The task's container: on the embedded cluster its executor (the process the cluster
    started, its pid in the container's directory) and everything under it; on YARN every process
    the NodeManager started for the container (their environment names it and its application:
    a container id is the job's own count, which other jobs on the machine have too)."""
    task = status.task(task_id)
    if status.backend == "local":
        root = psutil.Process(int((Path(task.log_url).parent / "pid").read_text()))
        return [root, *root.children(recursive=True)]
    found = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
            if (env.get("TONY_CONTAINER_ID") == task.container_id and env.get("TONY_APPLICATION_ID") ==
                    status.application_id and p.status() != psutil.STATUS_ZOMBIE):
                found.append(p)
        except psutil.Error:
            continue
    return found


def kill_container(status, task_id: str) -> None:
    """SIGKILL to the whole container at once, as when its machine dies."""
    procs = container_tree(status, task_id)
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def _is_trainer(p: psutil.Process) -> bool:
    line = " ".join(p.cmdline())
    return "train.py" in line and "tony_workflow.task.torch_agent" not in line


def _forked_copy(p: psutil.Process) -> bool:
    """Whether ``p`` is a child forked but not yet started as a program of its own (it still has
    its parent's command line): the agent's way to start a trainer, for a moment."""
    try:
        parent = p.parent()
        return parent is not None and parent.cmdline() == p.cmdline()
    except psutil.Error:
        return True


def keepers(status, task_id: str) -> set[tuple[int, float]]:
    """The container's executor and agent (every process but the trainers, and but a trainer
    being started this very moment), by pid and start time."""
    tree = container_tree(status, task_id)
    # On the embedded cluster the executor is forked itself, and keeps its fork server's command line.
    root = tree[0] if status.backend == "local" and tree else None
    return {(p.pid, p.create_time()) for p in tree if not _is_trainer(p) and (p is root or not _forked_copy(p))}


def trainers(status, task_id: str) -> set[int]:
    """The trainers the agent runs (and the shells it starts them with)."""
    return {p.pid for p in container_tree(status, task_id) if _is_trainer(p)}


def submit(conf: list[str] | None = None, backend: str = "local", regroup: str = "in-place", epochs: int = 4,
           pause: Path | None = None):
    params = PARAMS.format(sleep=STEP_SLEEP[backend], epochs=epochs) + (f" --pause-while {pause}" if pause else "")
    spec = load_job(str(ELASTIC), conf=[*SMALL, f"tony.elastic.regroup={regroup}", *(conf or [])],
                    task_params=params)
    return TonyClient(backend).submit(spec)


def torch_loaded(status, task_id: str) -> bool:
    """Whether a trainer of the task's container has imported torch (its library is mapped): from
    there it asks to join the group within moments, however slow the machine was to get it there."""
    for p in container_tree(status, task_id):
        try:
            if _is_trainer(p) and any("libtorch" in m.path for m in p.memory_maps()):
                return True
        except psutil.Error:
            continue
    return False


def asking_to_join(status, task_id: str) -> bool:
    """Whether a trainer of the task's container holds a connection open: its request to join the
    group, a long poll to the AM (nothing it does before joining opens one; the group's own
    connections come after)."""
    for p in container_tree(status, task_id):
        try:
            if _is_trainer(p) and any(c.status == psutil.CONN_ESTABLISHED for c in p.net_connections(kind="tcp")):
                return True
        except psutil.Error:
            continue
    return False


def replacement_ready(h, task_id: str, lost: int):
    """The status once the task's replacement (after ``lost`` restarts) has a trainer asking the AM
    to join: let go then, the others regroup with it at their next step, however slow the machine
    was to start it."""
    def ready():
        s = h.status()
        if s.is_final:
            return s
        task = s.task(task_id)
        return s if (task.restarts > lost and task.state in ("JOINING", "RUNNING") and torch_loaded(s, task_id)
                     and asking_to_join(s, task_id)) else None
    return wait_for(ready, timeout=420, interval=0.5)


def running_at(h, step: int):
    """The status once the group of three trains past ``step``."""
    return wait_for(lambda: (s := h.status()).state == "RUNNING" and (s.progress or {}).get("step", 0) >= step
                    and (s.elastic or {}).get("size") == 3 and not s.elastic.get("waiting") and s,
                    timeout=300, interval=0.3)


def regrown(h, after_round: int):
    """The status once a round later than ``after_round`` has the group whole again."""
    def whole():
        s = h.status()
        group = s.elastic or {}
        again = group.get("round", -1) > after_round and group.get("size") == 3 and not group.get("waiting")
        return s if s.is_final or again else None
    return wait_for(whole, timeout=300, interval=0.3)


def stdout(h) -> str:
    return "".join(p.read_text(errors="replace") for p in h.logs().values() if p.exists())


def finished(h):
    st = h.wait(poll_interval=0.5, timeout=600)
    wait_for(lambda: not app_processes(h.app_id), timeout=120)
    return st


def identical_replicas(out: str, session: int = 0, world: int | None = 3, epochs: int = 4) -> None:
    """Every rank of the last round (of ``world`` ranks; None: of however many finished, at least
    the group's minimum of two) trained every step and holds the same parameters."""
    done = {rank: (int(steps), params) for rank, steps, params
            in re.findall(rf"session={session} rank=(\d) done steps=(\d+) params=(\w+)", out)}
    if world is None:
        world = max(len(done), 2)
    assert set(done) == {str(r) for r in range(world)} and len(set(done.values())) == 1, done
    assert next(iter(done.values()))[0] == epochs * 14, done  # epochs of 14 steps (1,397 images, 96 a step)


@pytest.fixture(params=["local", pytest.param("yarn", marks=pytest.mark.yarn)])
def backend(request):
    """The test on both backends: a fresh TONY_HOME for the embedded cluster, the shared mini
    cluster for YARN."""
    request.getfixturevalue("tony_home" if request.param == "local" else "yarn_cluster")
    return request.param


def lasting(status, gate: Path) -> set[tuple[int, float]]:
    """A gated sleeper job's executor and its user process, the shell waiting for ``gate`` (not
    the helpers they start for a moment)."""
    tree = container_tree(status, "worker:0")
    # On the embedded cluster the executor is the container's first process (forked, it keeps its
    # parent's command line); on YARN it is the one started as the executor.
    return {(p.pid, p.create_time()) for i, p in enumerate(tree)
            if (i == 0 and status.backend == "local") or "tony_workflow.task.executor" in " ".join(p.cmdline())
            or str(gate) in " ".join(p.cmdline())}


# On YARN a worker's container taken while the others train on, and replaced, is
# test_yarn_reclaim's preempted elastic worker (the ResourceManager takes it), and rank 0's
# container lost with its checkpoint mirror is test_elastic_checkpoints' [yarn-rank0]: what the AM
# does next is the same on both clusters, and is proved here on the embedded one.
def test_a_killed_worker_container_is_replaced_while_the_others_train_on(tony_home, tmp_path):
    lose_a_worker("local", "in-place", tmp_path / "gate")


def test_under_torchs_agent_a_killed_worker_restarts_the_others_trainers_not_their_containers(tony_home, tmp_path):
    lose_a_worker("local", "restart", tmp_path / "gate")


def lose_a_worker(backend: str, regroup: str, gate: Path) -> None:
    # A job of another user's beside it, on the same cluster, all along: it runs till the end.
    neighbour = TonyClient(backend).submit(load_job(sleeper_job("neighbour", memory="512m", until=gate)))
    # The survivors hold still from the loss until the replacement can join (its torch loaded), so
    # that it joins mid-run however long a busy machine takes to start it.
    pause = gate.with_name("pause")
    h = submit(backend=backend, regroup=regroup, pause=pause if regroup == "in-place" else None)
    st = running_at(h, 15)
    beside = wait_for(lambda: (s := neighbour.status()).state == "RUNNING" and s.tasks[0].state == "RUNNING" and s,
                      timeout=120)
    neighbours_processes = lasting(beside, gate)
    survivors = {t: keepers(st, t) for t in ("worker:0", "worker:2")}
    first_trainers = {t: trainers(st, t) for t in survivors}
    assert all(survivors.values()) and all(first_trainers.values())
    if regroup == "in-place":
        pause.touch()
    kill_container(st, "worker:1")
    if regroup == "in-place":
        ready = replacement_ready(h, "worker:1", 0)
        assert not ready.is_final, ready.diagnostics
        pause.unlink()
    back = regrown(h, st.elastic["round"])
    assert not back.is_final, back.diagnostics
    # The neighbour noticed nothing: the same processes, no restart, the same session.
    now = neighbour.status()
    assert lasting(now, gate) == neighbours_processes and len(neighbours_processes) >= 2
    assert now.state == "RUNNING" and now.session_id == 0 and now.tasks[0].restarts == 0
    # The others' executors (and agents) are the very processes they were. Regrouping in place,
    # so are their trainers; under torch's agent the trainers are new (restarted in the new round).
    assert {t: keepers(back, t) for t in survivors} == survivors
    if regroup == "in-place":
        assert {t: trainers(back, t) for t in survivors} == first_trainers
    else:
        # The agents restart their trainers as the round forms: on a busy machine the new ones may
        # still be starting when the AM sees the group whole, so they are waited for.
        def restarted():
            s = h.status()
            return all((new := trainers(s, t)) and not new & first_trainers[t] for t in survivors)
        wait_for(restarted, timeout=120, describe=lambda: (h.status().state, {t: trainers(h.status(), t)
                                                                                for t in survivors}))
    final = finished(h)
    assert final.state == "SUCCEEDED", final.diagnostics
    assert final.session_id == 0 and final.attempts == 1 and final.retries == 0
    assert final.task("worker:1").restarts == 1
    assert final.elastic["changes"] == 1
    out = stdout(h)
    identical_replicas(out)
    # Only the first group started from scratch: every later one went on from where training was.
    starts = [int(s) for s in re.findall(r"session=0 rank=\d world=[23] start_step=(\d+)", out)]
    assert starts.count(0) == 3 and len(starts) > 3, out[-3000:]
    record = TonyClient(backend).record(h.app_id)
    what = [t["what"] for t in record["timeline"]]
    assert "task worker:1 left the elastic group; a replacement is asked for" in what, what
    assert any(w.startswith(("group grew: 3 of 3", "group re-formed: 3 of 3")) for w in what), what
    gate.touch()
    alone = finished(neighbour)
    assert alone.state == "SUCCEEDED" and alone.session_id == 0 and alone.tasks[0].restarts == 0, alone.diagnostics


# What the AM decides alone (a loss in the group, too few left) is proved on the embedded cluster;
# YARN's part, a container replaced while the others train on and rank 0's lost with its
# checkpoint mirror, by test_yarn_reclaim and test_elastic_checkpoints. Two losses in a row, each
# replaced while the group trains on, are test_elastic_checkpoints' two losses of rank 0's
# container (the harder case: the checkpoint mirror moves each time).
LOCAL_ONLY = pytest.mark.parametrize("backend", ["local"], indirect=True)


@LOCAL_ONLY
def test_too_few_left_for_too_long_relaunches_the_session_whole(backend):
    # Two of three lost at once leaves one, below min-instances=2: past the (tiny) fallback
    # timeout the session is relaunched, as for a fixed job, and the job still succeeds.
    h = submit(["tony.elastic.fallback-timeout-ms=1"], backend=backend)
    st = running_at(h, 15)
    for task_id in ("worker:1", "worker:2"):
        kill_container(st, task_id)
    final = finished(h)
    assert final.state == "SUCCEEDED", final.diagnostics
    assert final.session_id == 1 and final.retries == 1
    record = TonyClient(backend).record(h.app_id)
    ended = [t for t in record["timeline"] if t["what"] == "session 0 ended FAILED"]
    assert ended and "tony.elastic.fallback-timeout-ms" in ended[0]["detail"], record["timeline"]
    identical_replicas(stdout(h), session=1)


def env_names_job(tmp_path, **conf: str):
    """A job of two workers (one enough) whose command writes the names in its environment to a
    file per task, and its state when it ends with the lists of names it wrote."""
    dump = tmp_path / "env"
    job = {"name": "elastic-env", "framework": "pytorch",
           "command": f"python -c \"import os; open('{dump}-' + os.environ['TONY_TASK_ID'].replace(':', '-'), 'w')"
                      ".write(repr(sorted(os.environ)))\"",
           "tasks": {"worker": {"instances": 2, "min_instances": 1, "memory": "1536m"}},  # the agent holds torch
           "conf": {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false", **conf}}
    st = finished(TonyClient("local").submit(load_job(job)))
    return st, [ast.literal_eval(p.read_text()) for p in tmp_path.glob("env-worker-*")]


def test_the_trainers_never_see_the_ams_token(tony_home, tmp_path):
    st, seen = env_names_job(tmp_path)
    assert st.state == "SUCCEEDED", st.diagnostics
    # One worker is enough: it may form the group, train and end it before the other has joined.
    assert 1 <= len(seen) <= 2, seen
    for names in seen:
        assert "TONY_AM_TOKEN" not in names and "TORCHELASTIC_RUN_ID" in names and "RANK" in names


def test_regrouping_in_place_the_trainers_hold_only_the_group_token_and_must_use_it(tony_home, tmp_path):
    # A script that does not train through tony_workflow.torch_elastic.run gets no place (no RANK):
    # it would train alone. Its ending is not taken for success: the job fails, saying what to do.
    st, seen = env_names_job(tmp_path, **{"tony.elastic.regroup": "in-place", "tony.am.retry-count": "2"})
    assert st.state == "FAILED" and st.retries == 0, (st.state, st.retries)
    assert "tony_workflow.torch_elastic.run" in st.diagnostics and "tony.elastic.regroup=restart" in st.diagnostics
    assert seen
    for names in seen:
        assert "TONY_AM_TOKEN" not in names and "TONY_ELASTIC_TOKEN" in names
        assert "RANK" not in names and "MASTER_ADDR" not in names and "TORCHELASTIC_RUN_ID" not in names
