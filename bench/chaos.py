"""chaos: kill (or stop) one part of a running job at a random moment of training, in the PS and MWMS examples.

Each trial submits one example on the local backend (MWMS: session relaunch; PS: ``restart_policy:
task`` for workers, a session relaunch for the chief or ps), waits until the chief has logged a
randomly chosen step (plus up to 1 s), and strikes one target:

* ``user``: kill -9 the user process of a random task;
* ``executor``: kill -9 the TaskExecutor of a random task (its user process must go with it);
* ``am``: kill -9 the ApplicationMaster (a second attempt must take over);
* ``forkserver``: kill -9 the fork server the AM starts containers from;
* ``stop-am``: SIGSTOP the ApplicationMaster (the supervisor must notice it no longer answers,
  ``tony.am.liveness-timeout-ms``, here 10 s, and replace it);
* ``stop-user``: SIGSTOP the user process of a random task, whose executor goes on heartbeating
  (the AM must notice that progress reports stopped, ``tony.task.progress-timeout-ms``, here 20 s,
  on that task or on one its training waits for, and apply the restart rules).

Then it waits for the job's final state and reports, per target: SUCCEEDED; steps lost beyond the
last durable checkpoint (the new chief's ``start_step`` against the last checkpoint the trainer had
written at the strike: for MWMS the last logged step, which BackupAndRestore saved just before
logging it; for PS the newest ``ckpt-N`` in the chief's directory; a worker relaunched alone under
PS loses nothing by construction); processes left after the end (found by scanning the machine for
processes whose environment names the trial's TONY_HOME, once the job is final and its supervisor
gone); and the time to resume training (from the strike to the chief's first step logged in a later
session when the strike relaunched one, else to its first step past the one it had reached).

Runs with ``--step-sleep`` so that a strike lands in training rather than in TensorFlow's start-up,
and without TensorBoard (it takes CPU and is not what is tested).

With ``--backend yarn`` the trials run the MWMS example on the Hadoop mini cluster (started for the
run, or the one ``--minicluster`` names) and strike ``container`` (kill -9 the process group of a
random worker's YARN container: its launch script, executor and trainer) or ``am`` (kill -9 the
ApplicationMaster in its container; the supervisor beside it starts the next attempt). The chief's
step is followed through the job's progress (its Keras callback reports every step), the last
durable checkpoint is the last BackupAndRestore save before the strike, the restarted chief's
``start_step`` comes from the aggregated logs once the job has ended, and processes left are those
whose command line or environment names the application.

Goal: every trial SUCCEEDED, 0 steps lost beyond the last checkpoint, 0 processes left.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import sys
import time
from pathlib import Path

import common
import psutil
from common import log

EXAMPLES = {
    "mwms": {"spec": common.EXAMPLES / "mnist_mwms" / "mnist_mwms.yaml",
             "params": "--epochs 3 --steps-per-epoch 40 --save-freq 10 --step-sleep 0.1",
             "total": 120, "interval": 10, "chief": "worker:0", "victims": ["worker:0", "worker:1"],
             "step": re.compile(r"\[mnist\] session=(\d+) step=(\d+) "),
             "start": re.compile(r"\[mnist\] session=(\d+) task=worker:0 start_step=(\d+)")},
    "ps": {"spec": common.EXAMPLES / "ps_strategy" / "ps_strategy.yaml",
           "params": "--steps 200 --checkpoint-every 20 --step-sleep 0.05",
           "total": 200, "interval": 20, "chief": "chief:0", "victims": ["chief:0", "ps:0", "worker:0", "worker:1"],
           "step": re.compile(r"\[ps\] session=(\d+) step=(\d+) "),
           "start": re.compile(r"\[ps\] session=(\d+) start_step=(\d+)")},
}
TARGETS = ("user", "executor", "am", "forkserver", "stop-am", "stop-user")
YARN_TARGETS = ("container", "am")
CONF = {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false", "tony.am.liveness-timeout-ms": "10000",
        "tony.task.progress-timeout-ms": "20000"}
YARN_CONF = {**CONF, "tony.worker.memory": "1g"}


def chief_dir(h, chief: str) -> Path | None:
    st = h.status()
    t = st.task(chief)
    if t is None or not t.container_id:
        return None
    return h.backend.app_dir(h.app_id) / "containers" / t.container_id


def steps_in(text: str, rx) -> list[tuple[int, int]]:
    return [(int(m.group(1)), int(m.group(2))) for m in rx.finditer(text)]


def last_step(text: str, rx, session: int = 0) -> int | None:
    steps = [n for s, n in steps_in(text, rx) if s == session]
    return steps[-1] if steps else None


def local_ps_checkpoint(cdir: Path) -> int | None:
    steps = [int(m.group(1)) for p in (cdir / "checkpoint" / "ps_ckpt").glob("ckpt-*.index")
             if (m := re.match(r"ckpt-(\d+)\.index$", p.name))]
    return max(steps) if steps else None


def am_pid(h) -> int:
    return int(json.loads((h.backend.app_dir(h.app_id) / "am.json").read_text())["pid"])


def fork_server_pid(h) -> int:
    """The fork server: the parent of the containers, a child of the AM."""
    am = am_pid(h)
    for c in psutil.Process(am).children():
        if c.children():
            return c.pid
    raise LookupError("no fork server under the AM")


def strike(h, target: str, victim: str | None) -> str:
    """Hits ``target``; returns what was hit, for the record."""
    if target == "user":
        proc = common.user_process(h.status().task(victim).pid, "train.py")
        proc.send_signal(signal.SIGKILL)
        return f"user process of {victim} (pid {proc.pid})"
    if target == "stop-user":
        proc = common.user_process(h.status().task(victim).pid, "train.py")
        proc.send_signal(signal.SIGSTOP)
        return f"user process of {victim} stopped (pid {proc.pid})"
    if target == "executor":
        task = h.status().task(victim)
        pid = int((Path(task.log_url).parent / "pid").read_text())
        os.kill(pid, signal.SIGKILL)
        return f"executor of {victim} (pid {pid})"
    if target == "am":
        pid = am_pid(h)
        os.kill(pid, signal.SIGKILL)
        return f"ApplicationMaster (pid {pid})"
    if target == "forkserver":
        pid = fork_server_pid(h)
        os.kill(pid, signal.SIGKILL)
        return f"fork server (pid {pid})"
    if target == "stop-am":
        pid = am_pid(h)
        os.kill(pid, signal.SIGSTOP)
        return f"ApplicationMaster stopped (pid {pid})"
    raise ValueError(target)


def follow_progress(h, ex: dict, logged: int, since: float, timeout: float = 900) -> dict[str, float | None]:
    """Watches the chief's log until the job is final: seconds from ``since`` to its first step in a
    later session (``later_session``) and to its first step past ``logged`` in session 0
    (``in_place``)."""
    out: dict[str, float | None] = {"later_session": None, "in_place": None}
    deadline = time.time() + timeout
    while time.time() < deadline:
        steps = steps_in(common.task_stdout(h, ex["chief"]), ex["step"])
        now = round(time.time() - since, 2)
        if out["later_session"] is None and any(s > 0 for s, _ in steps):
            out["later_session"] = now
        if out["in_place"] is None and any(s == 0 and n > logged for s, n in steps):
            out["in_place"] = now
        if h.status().is_final:
            break
        time.sleep(0.1)
    return out


def trial(i: int, example: str, target: str, victim: str | None, step_target: int, jitter: float) -> dict:
    from tony_workflow.client import TonyClient, load_job
    ex = EXAMPLES[example]
    out = {"trial": i, "example": example, "target": target, "victim": victim, "target_step": step_target}
    with common.tony_home("tony-bench-chaos-") as home:
        h = TonyClient("local").submit(load_job(str(ex["spec"]), conf=CONF, task_params=ex["params"]))
        out["app_id"] = h.app_id

        def reached():
            st = h.status()
            if st.is_final:
                return "final"
            cdir = chief_dir(h, ex["chief"])
            if cdir is None or not (cdir / "stdout").exists():
                return None
            step = last_step((cdir / "stdout").read_text(errors="replace"), ex["step"])
            return step is not None and step >= step_target and cdir
        cdir = common.wait_for(reached, 600, 0.05, f"chief at step {step_target}")
        if cdir == "final":
            out.update(state=h.status().state, note="ended before the strike")
            return out
        time.sleep(jitter)
        try:
            logged = last_step((cdir / "stdout").read_text(errors="replace"), ex["step"])
            ckpt = local_ps_checkpoint(cdir) if example == "ps" else (logged // ex["interval"]) * ex["interval"]
            out["hit"] = strike(h, target, victim)
            out.update(struck_at=round(time.time(), 3), logged_step=logged, checkpoint_step=ckpt)
        except (LookupError, OSError, AttributeError, ValueError, psutil.Error) as e:
            out["note"] = f"target gone before the strike: {e!r}"[:200]
        progress = follow_progress(h, ex, out["logged_step"], out["struck_at"]) if "struck_at" in out else None
        final = h.wait(poll_interval=0.5, timeout=900)
        if progress is not None:
            # Training resumed: in a later session when the strike relaunched one, else where it was.
            out["resume_s"] = progress["later_session"] if final.session_id > 0 else progress["in_place"]
        out["state"] = final.state
        out["am_attempts"] = final.am_attempt
        out["sessions"] = final.session_id + 1
        out["task_restarts"] = sum(t.restarts for t in final.tasks)
        if final.state != "SUCCEEDED":
            out["diagnostics"] = final.diagnostics[-1500:]
        # Left behind: anything of the job still running once it is final and its supervisor gone.
        common.wait_for(lambda: h.backend.am_gone(h.app_id), 60, 0.2, "supervisor gone")
        time.sleep(0.5)
        left = common.processes_of(home)
        out["processes_left"] = len(left)
        if left:
            out["left"] = [" ".join(p.cmdline())[:160] for p in left if p.is_running()]
        text = common.task_stdout(h, ex["chief"])
        restarts = [(int(s), int(n)) for s, n in ex["start"].findall(text)]
        resumed = [n for s, n in restarts if s >= 1]
        out["restart_start_step"] = resumed[0] if resumed else None
        if "checkpoint_step" in out and resumed:
            out["steps_redone"] = out["logged_step"] - resumed[0]
            out["lost_beyond_checkpoint"] = max(0, out["checkpoint_step"] - resumed[0])
        elif "checkpoint_step" in out:
            out["lost_beyond_checkpoint"] = 0  # no session relaunch: training went on in place
        done = re.findall(r"done steps=(\d+)", text)
        out["final_steps"] = int(done[-1]) if done else None
    return out


def yarn_am_process(app_id: str) -> psutil.Process:
    """The AM of a YARN application: the process its supervisor (in the AM's container, whose
    directory names the application) recorded in am.json."""
    for p in psutil.process_iter(["cmdline"]):
        try:
            if "tony_workflow.am.supervisor" in " ".join(p.info["cmdline"] or []) and app_id in p.cwd():
                am = psutil.Process(json.loads((Path(p.cwd()) / "am.json").read_text())["pid"])
                if am.ppid() == p.pid:
                    return am
        except (psutil.Error, OSError, ValueError, KeyError):
            continue
    raise LookupError(f"no ApplicationMaster of {app_id} on this machine")


def processes_of_app(app_id: str) -> list[psutil.Process]:
    """Live processes whose command line or environment names the application."""
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if p.pid != os.getpid() and p.status() != psutil.STATUS_ZOMBIE and (
                    app_id in " ".join(p.cmdline()) or any(app_id in v for v in p.environ().values())):
                found.append(p)
    return found


def yarn_trial(i: int, target: str, victim: str, step_target: int, jitter: float) -> dict:
    from tony_workflow.client import TonyClient, load_job
    ex = EXAMPLES["mwms"]
    out = {"trial": i, "example": "mwms", "backend": "yarn", "target": target,
           "victim": victim if target == "container" else None, "target_step": step_target}
    h = TonyClient("yarn").submit(load_job(str(ex["spec"]), conf=YARN_CONF, task_params=ex["params"]))
    out["app_id"] = h.app_id

    def reached():
        st = h.status()
        if st.is_final:
            return "final"
        step = (st.progress or {}).get("step")
        return st if step is not None and step >= step_target else None
    st = common.wait_for(reached, 900, 0.1, f"chief at step {step_target}")
    if st == "final":
        out.update(state=h.status().state, note="ended before the strike")
        return out
    time.sleep(jitter)
    try:
        st = h.status()
        logged = st.progress["step"]
        if target == "container":
            group = os.getpgid(common.user_process(st.task(victim).pid, "train.py").pid)
            os.killpg(group, signal.SIGKILL)
            out["hit"] = f"YARN container of {victim} (process group {group})"
        else:
            am = yarn_am_process(h.app_id)
            am.kill()
            out["hit"] = f"ApplicationMaster (pid {am.pid})"
        out.update(struck_at=round(time.time(), 3), logged_step=logged,
                   checkpoint_step=(logged // ex["interval"]) * ex["interval"])
    except (LookupError, OSError, AttributeError, KeyError, TypeError, psutil.Error) as e:
        out["note"] = f"target gone before the strike: {e!r}"[:200]
    resumed_at = None
    if "struck_at" in out:
        while not (now := h.status()).is_final:  # training resumed: a later session's first report
            reported = (now.progress or {}).get("updated_at") or 0.0
            if resumed_at is None and now.session_id > 0 and reported > out["struck_at"]:
                resumed_at = round(time.time() - out["struck_at"], 2)
            time.sleep(0.2)
    final = h.wait(poll_interval=1.0, timeout=900)
    out.update(state=final.state, am_attempts=final.am_attempt, sessions=final.session_id + 1, resume_s=resumed_at,
               task_restarts=sum(t.restarts for t in final.tasks))
    if final.state != "SUCCEEDED":
        out["diagnostics"] = final.diagnostics[-1500:]
    time.sleep(5.0)  # the NodeManager's own cleanup of the finished containers
    left = processes_of_app(h.app_id)
    out["processes_left"] = len(left)
    if left:
        out["left"] = [" ".join(p.cmdline())[:160] for p in left if p.is_running()]
    text = "".join(p.read_text(errors="replace") for p in h.logs().values())  # every container's, aggregated
    resumed = [int(n) for s, n in ex["start"].findall(text) if int(s) >= 1]
    out["restart_start_step"] = resumed[0] if resumed else None
    if "checkpoint_step" in out and resumed:
        out["steps_redone"] = out["logged_step"] - resumed[0]
        out["lost_beyond_checkpoint"] = max(0, out["checkpoint_step"] - resumed[0])
    done = re.findall(r"done steps=(\d+)", text)
    out["final_steps"] = int(done[-1]) if done else None
    return out


def per_target(rows: list[dict]) -> dict:
    out = {}
    for target in dict.fromkeys(r["target"] for r in rows):
        mine = [r for r in rows if r["target"] == target]
        if not mine:
            continue
        resumes = [r["resume_s"] for r in mine if r.get("resume_s") is not None]
        out[target] = {
            "trials": len(mine),
            "succeeded": sum(1 for r in mine if r.get("state") == "SUCCEEDED"),
            "struck": sum(1 for r in mine if "struck_at" in r),
            "max_steps_lost": max((r.get("lost_beyond_checkpoint") or 0 for r in mine), default=0),
            "processes_left": sum(r.get("processes_left") or 0 for r in mine),
            "resume_s_median": round(sorted(resumes)[len(resumes) // 2], 2) if resumes else None,
            "resume_s_max": max(resumes) if resumes else None,
        }
    return out


def main() -> int:
    ap = common.parser("chaos", __doc__)
    ap.add_argument("--trials", type=int, default=None, help="trials (default 40; --quick 5)")
    ap.add_argument("--seed", type=int, default=20251121)
    ap.add_argument("--targets", default=None,
                    help=f"comma-separated subset of {', '.join(TARGETS)} (local) or {', '.join(YARN_TARGETS)} (yarn)")
    ap.add_argument("--backend", choices=["local", "yarn"], default="local")
    ap.add_argument("--minicluster", default=None, help="yarn: reuse the mini cluster running in this directory")
    args = ap.parse_args()
    allowed = YARN_TARGETS if args.backend == "yarn" else TARGETS
    trials = args.trials or (5 if args.quick else 40 if args.backend == "local" else 8)
    targets = [t for t in (args.targets or ",".join(allowed)).split(",") if t]
    unknown = sorted(set(targets) - set(allowed))
    if unknown:
        ap.error(f"unknown target(s) {', '.join(unknown)}; allowed with --backend {args.backend}: {', '.join(allowed)}")
    rng = random.Random(args.seed)
    host = common.host_info()
    rows = []
    if args.backend == "yarn":
        missing = common.minicluster_missing()
        if missing:
            ap.error(f"the mini cluster cannot run here: {missing}")
        with common.minicluster(args.minicluster):
            for i in range(trials):
                target = targets[i % len(targets)]
                ex = EXAMPLES["mwms"]
                row = yarn_trial(i, target, rng.choice(ex["victims"]),
                                 rng.randrange(ex["interval"], ex["total"] - ex["interval"], 10),
                                 round(rng.uniform(0.0, 1.0), 2))
                rows.append(row)
                log(f"trial {i + 1}/{trials}: yarn {row.get('hit') or target} at step~{row.get('logged_step')} "
                    f"-> {row.get('state')} (attempts {row.get('am_attempts')}, sessions {row.get('sessions')}), "
                    f"resumed in {row.get('resume_s')} s from step {row.get('restart_start_step')}, "
                    f"lost {row.get('lost_beyond_checkpoint')}, left {row.get('processes_left')}")
    for i in range(trials if args.backend == "local" else 0):
        # Every target on both examples, in turn.
        target = targets[i % len(targets)]
        example = "mwms" if (i // len(targets)) % 2 == 0 else "ps"
        ex = EXAMPLES[example]
        victim = rng.choice(ex["victims"]) if target in ("user", "executor", "stop-user") else None
        step_target = rng.randrange(ex["interval"], ex["total"] - ex["interval"], 10)
        row = trial(i, example, target, victim, step_target, round(rng.uniform(0.0, 1.0), 2))
        rows.append(row)
        log(f"trial {i + 1}/{trials}: {example} {row.get('hit') or target} at step~{row.get('logged_step')} "
            f"(checkpoint {row.get('checkpoint_step')}) -> {row.get('state')} (attempts {row.get('am_attempts')}, "
            f"sessions {row.get('sessions')}), resumed in {row.get('resume_s')} s from step "
            f"{row.get('restart_start_step')}, lost {row.get('lost_beyond_checkpoint')}, "
            f"left {row.get('processes_left')}")
    succeeded = sum(1 for r in rows if r.get("state") == "SUCCEEDED")
    lost = [r.get("lost_beyond_checkpoint") or 0 for r in rows]
    left = sum(r.get("processes_left") or 0 for r in rows)
    result = {
        "metric": "trials SUCCEEDED after killing or stopping one part of a running job "
                  + ("(MWMS example on the Hadoop mini cluster)" if args.backend == "yarn" else "(PS and MWMS examples)"),
        "unit": "trials", "value": succeeded, "floor": trials, "ratio": round(succeeded / trials, 3),
        "goal": f"{trials}/{trials} SUCCEEDED, 0 steps lost beyond the last checkpoint, 0 processes left",
        "goal_met": bool(succeeded == trials and not any(lost) and left == 0),
        "trials": trials, "struck": sum(1 for r in rows if "struck_at" in r),
        "trials_with_loss": sum(1 for x in lost if x), "max_steps_lost": max(lost) if lost else 0,
        "processes_left": left, "by_target": per_target(rows),
        "params": {"seed": args.seed, "backend": args.backend, "conf": YARN_CONF if args.backend == "yarn" else CONF,
                   "targets": targets,
                   **{k: {"params": v["params"], "checkpoint_every": v["interval"]} for k, v in EXAMPLES.items()}},
        "rows": rows,
    }
    common.write_result(args, "chaos_yarn" if args.backend == "yarn" else "chaos", result, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
