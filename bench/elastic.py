"""elastic: a worker's container killed mid-run, elastic (survivors train on) against a whole-session relaunch.

The job is the PyTorch DDP example (``examples/pytorch_ddp/train.py``, unchanged) on three
workers, gloo on CPU, saving every 5 steps, with a pause per step so that a run lasts about a
minute of training. Two forms of the same job run side by side in each repetition:

* **elastic**: ``tony.worker.min-instances=2``, ``tony.elastic.regroup=in-place``: the killed
  worker is replaced while the other two keep their processes, re-form their group and train on;
  the replacement joins at a later step and is handed the state (``TONY_BENCH_REGROUP=restart``
  measures torch's agent instead, which restarts every trainer at each change);
* **relaunch**: the fixed job (today's path, ``tony.am.retry-count=1``): the session is torn down
  and relaunched whole, every task restoring the last checkpoint.

Each form runs once undisturbed (its floor) and once with worker:1's whole container SIGKILLed
(executor and trainer, as when its machine dies) once training passes step
``KILL_AT``; the elastic form once more with the container that holds rank 0 killed instead
(which one that is, the rendezvous decides: the first member of the group's last round). Progress is read from the job's status ten times a second; rank 0 reports every step
and the executors beat every 100 ms, so a step's time is known to about a tenth of a second.
Reported per form: the training time lost (wall time with the kill minus the undisturbed run's),
the seconds with no training at all (the longest gap between two steps after the kill), and for
the elastic form the seconds below full size (from the kill to the round that has all three
again), and for every killed run the steps lost (the step at the kill against the step training
went on from). On the Hadoop mini cluster (full runs only, when it can run) the same pairs, as many times.

Goals (on either cluster): no training for under 5 s; the elastic form loses at most half the
time the relaunch loses.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any

import common
import psutil
from common import log, median, rnd

GOAL_GAP_S = 5.0
GOAL_RATIO = 0.5
KILL_AT = 25
EPOCHS, STEP_SLEEP = 6, 0.25
DDP = common.EXAMPLES / "pytorch_ddp"
#: How the elastic form's group changes (tony.elastic.regroup): its trainers keep their processes.
REGROUP = os.environ.get("TONY_BENCH_REGROUP", "in-place")


def job(elastic: bool, epochs: int, memory: str) -> dict:
    worker: dict[str, Any] = {"instances": 3, "memory": memory, "vcores": 1}
    conf = {**common.LOCAL_CONF, "tony.am.retry-count": "1", "tony.task.heartbeat-interval-ms": "100"}
    if elastic:
        worker["min_instances"] = 2
        conf["tony.elastic.regroup"] = REGROUP
    return {"name": f"bench-elastic-{'elastic' if elastic else 'relaunch'}", "framework": "pytorch",
            "executes": "train.py", "src_dir": str(DDP),
            "task_params": f"--epochs {epochs} --save-every 5 --batch-size 96 --step-sleep {STEP_SLEEP}",
            "am": {"memory": "512m"}, "tasks": {"worker": worker},
            "conf": conf}


def kill_container(backend: str, h, task_id: str) -> None:
    """SIGKILL to the task's whole container: the executor and everything under it."""
    st = h.status()
    if backend == "local":
        cid = st.task(task_id).container_id
        root = psutil.Process(int((h.backend.app_dir(h.app_id) / "containers" / cid / "pid").read_text()))
    else:  # the YARN container's executor: its process has the container's id in its environment
        cid = st.task(task_id).container_id
        root = next(p for p in psutil.process_iter() if _executor_of(p, cid))
    procs = [root, *root.children(recursive=True)]
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def _executor_of(p: psutil.Process, container_id: str) -> bool:
    try:
        return (p.environ().get("TONY_CONTAINER_ID") == container_id
                and "tony_workflow.task.executor" in " ".join(p.cmdline()))
    except psutil.Error:
        return False


def rank0_task(st) -> str:
    """The task whose container holds rank 0: the first member of the group's last round."""
    return next(iter((st.elastic or {}).get("history", [{}])[-1].get("members") or ["worker:0"]))


def run_once(backend: str, elastic: bool, kill: bool, epochs: int, memory: str,
             aim: str = "worker:1") -> dict[str, Any]:
    from tony_workflow.client import TonyClient, load_job
    t0 = time.time()
    h = TonyClient(backend).submit(load_job(job(elastic, epochs, memory)))
    steps: list[tuple[float, int]] = []  # (when the step was reported, the step)
    t_kill = None
    while True:
        st = h.status()
        p = st.progress or {}
        if p.get("updated_at") and (not steps or p["updated_at"] > steps[-1][0]):
            steps.append((p["updated_at"], p.get("step") or 0))
        if kill and t_kill is None and st.state == "RUNNING" and (p.get("step") or 0) >= KILL_AT:
            t_kill = time.time()
            target = rank0_task(st) if aim == "rank 0" else aim
            kill_container(backend, h, target)
        if st.is_final:
            break
        time.sleep(0.1)
    wall = (st.finished_at or time.time()) - t0
    out: dict[str, Any] = {"state": st.state, "wall_s": rnd(wall), "session": st.session_id}
    if st.state != "SUCCEEDED":
        out["diagnostics"] = st.diagnostics[-1000:]
    if t_kill is not None:
        before = [t for t, _ in steps if t <= t_kill]
        after = [t for t, _ in steps if t > t_kill]
        gaps = [b - a for a, b in zip([*before[-1:], *after], after, strict=False)]
        out["no_training_s"] = rnd(max(gaps)) if gaps else None
        out["step_at_kill"] = next((s for t, s in reversed(steps) if t <= t_kill), None)
        out["killed"] = target
        # The first step reported after the kill follows the one training went on from.
        went_on = next((s - 1 for t, s in steps if t > t_kill + 0.5), None)
        if out["step_at_kill"] is not None and went_on is not None:
            out["steps_lost"] = max(0, out["step_at_kill"] - went_on)
        group = st.elastic or {}
        whole = next((g["at"] for g in group.get("history", []) if g.get("at", 0) > t_kill
                      and g.get("size") == group.get("target") and "round" in g), None)
        if elastic:
            out["below_full_s"] = rnd(whole - t_kill) if whole else None
            out["changes"] = group.get("changes")
    return out


def pair(backend: str, reps: int, epochs: int, memory: str) -> dict[str, Any]:
    runs: dict[str, list[dict]] = {"elastic": [], "relaunch": [], "elastic_floor": [], "relaunch_floor": [],
                                   "elastic_rank0": []}
    for r in range(reps):
        for elastic in (True, False):
            name = "elastic" if elastic else "relaunch"
            runs[f"{name}_floor"].append(run_once(backend, elastic, False, epochs, memory))
            runs[name].append(run_once(backend, elastic, True, epochs, memory))
            log(f"{backend} rep {r + 1}/{reps} {name}: floor {runs[f'{name}_floor'][-1]}, killed {runs[name][-1]}")
        runs["elastic_rank0"].append(run_once(backend, True, True, epochs, memory, aim="rank 0"))
        log(f"{backend} rep {r + 1}/{reps} elastic, rank 0's container killed: {runs['elastic_rank0'][-1]}")
    out: dict[str, Any] = {"runs": runs}
    for name in ("elastic", "relaunch"):
        lost = [k["wall_s"] - f["wall_s"] for k, f in zip(runs[name], runs[f"{name}_floor"], strict=True)]
        out[f"{name}_lost_s_median"] = rnd(median(lost))
        out[f"{name}_no_training_s_median"] = rnd(median([k.get("no_training_s") for k in runs[name]]))
        out[f"{name}_all_succeeded"] = all(k["state"] == "SUCCEEDED" for k in runs[name] + runs[f"{name}_floor"])
    lost0 = [k["wall_s"] - f["wall_s"] for k, f in zip(runs["elastic_rank0"], runs["elastic_floor"], strict=True)]
    out["elastic_rank0_lost_s_median"] = rnd(median(lost0))
    out["elastic_rank0_all_succeeded"] = all(k["state"] == "SUCCEEDED" for k in runs["elastic_rank0"])
    for name in ("elastic", "elastic_rank0", "relaunch"):
        out[f"{name}_steps_lost_max"] = max((k.get("steps_lost") or 0 for k in runs[name]), default=None)
    out["elastic_below_full_s_median"] = rnd(median([k.get("below_full_s") for k in runs["elastic"]]))
    out["elastic_kept_session"] = all(k["session"] == 0 for k in runs["elastic"])
    e, r = out["elastic_lost_s_median"], out["relaunch_lost_s_median"]
    out["ratio"] = rnd(e / r) if e is not None and r else None
    return out


def result_of(backend: str, run: dict[str, Any], reps: int) -> dict[str, Any]:
    where = "embedded cluster" if backend == "local" else "mini cluster"
    gap = run["elastic_no_training_s_median"]
    met = (run["ratio"] is not None and run["ratio"] <= GOAL_RATIO and gap is not None and gap < GOAL_GAP_S
           and run["elastic_all_succeeded"] and run["relaunch_all_succeeded"] and run["elastic_kept_session"]
           and run["elastic_rank0_all_succeeded"])
    return {"metric": f"training time lost to a killed worker, elastic ({where})", "unit": "s",
            "value": run["elastic_lost_s_median"], "floor": run["relaunch_lost_s_median"], "ratio": run["ratio"],
            "goal": f"no training < {GOAL_GAP_S:g} s; elastic loses <= {GOAL_RATIO} x the relaunch's",
            "goal_met": bool(met), **run,
            "params": {"workers": 3, "min_instances": 2, "regroup": REGROUP, "kill_at_step": KILL_AT,
                       "step_sleep_s": STEP_SLEEP,
                       "reps": reps}}


def main() -> int:
    ap = common.parser("elastic", __doc__)
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default 3; --quick 1)")
    ap.add_argument("--yarn", choices=["auto", "no"], default=None, help="the mini cluster pair (default auto; --quick no)")
    ap.add_argument("--minicluster", default=None, help="reuse the mini cluster running in this directory")
    ap.add_argument("--backend", choices=["local", "yarn", "both"], default="both",
                    help="which pairs to run (default both; yarn: only the mini cluster's)")
    args = ap.parse_args()
    reps = args.reps or (1 if args.quick else 3)
    epochs = 4 if args.quick else EPOCHS
    host = common.host_info()
    if args.backend != "yarn":
        with common.tony_home("tony-bench-elastic-"):
            run = pair("local", reps, epochs, "1g")
        common.write_result(args, "elastic", result_of("local", run, reps), host)
    if args.backend == "local" or (args.yarn or ("no" if args.quick else "auto")) == "no":
        return 0
    if common.skipped_without_minicluster(args, "elastic_yarn",
                                          "training time lost to a killed worker, elastic (mini cluster)", host):
        return 0
    with common.minicluster(args.minicluster, nm_memory_mb=8192, nm_vcores=16):
        run = pair("yarn", reps, epochs, "1g")
    common.write_result(args, "elastic_yarn", result_of("yarn", run, reps), host)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
