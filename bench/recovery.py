"""recovery: from a task killed to all tasks running again; and how long a hung task goes unnoticed.

Local backend (4 workers running ``sleep``, default settings unless named):

* session relaunch (``tony.am.retry-count=1``): kill -9 worker:1's user process; time until every
  task of the next session runs its user process again. Split from the AM's event log into
  detection (kill -> task FAILED), teardown (-> next session started) and spawn (-> all RUNNING).
* task relaunch (``tony.worker.restart-policy=task``, a chief and 3 workers): the same kill; time
  until worker:1 runs again.
* hang, default settings (heartbeats 1000 ms x 25, ``tony.task.heartbeat-timeout-ms`` 8000): SIGSTOP
  worker:1's whole container (executor and user process); time until the AM declares it LOST. Then
  the same under TonY's rule alone (``tony.task.heartbeat-timeout-ms=0``: 25 missed heartbeats).
* hang of the user process alone (full runs only): SIGSTOP only the user process, and watch.

On the Hadoop mini cluster (when it can run, full runs only): the session relaunch again, timed by
polling the job's status.

The floor is the spawn time, the part of a relaunch that is starting processes.
Goal (local): session relaunch < 2 s plus spawn time; a hang detected in < 10 s with the defaults.
"""
from __future__ import annotations

import os
import signal
import sys
import time

import common
from common import log, median, rnd

GOAL_EXTRA_S = 2.0
GOAL_HANG_S = 10.0
WORKERS = 4


def job(conf: dict[str, str], workers: int = WORKERS, **kw) -> str:
    return common.job_text("bench-recovery", "sleep 600", {"worker": {"instances": workers, "memory": "64m"}},
                           conf=conf, **kw)


def all_running(h, session: int | None = None, n: int = WORKERS):
    st = h.status()
    if st.is_final:
        raise RuntimeError(f"job ended {st.state}: {st.diagnostics[-1500:]}")
    if (session is None or st.session_id == session) and len(st.tasks) == n \
            and all(t.state == "RUNNING" for t in st.tasks):
        return st
    return None


def first(ev: list[dict], pred) -> dict | None:
    return next((e for e in ev if pred(e)), None)


def session_relaunch() -> dict:
    from tony_workflow.client import TonyClient, load_job
    with common.tony_home("tony-bench-recovery-"):
        h = TonyClient("local").submit(load_job(job({"tony.am.retry-count": "1"})))
        st = common.wait_for(lambda: all_running(h, 0), 120, 0.05, "session 0 running")
        victim = st.task("worker:1").pid
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        common.wait_for(lambda: all_running(h, 1), 120, 0.05, "session 1 running")
        ev = common.events(h)
        h.kill()
    failed = first(ev, lambda e: e["event"] == "task_state" and e.get("task") == "worker:1"
                   and e.get("state") in ("FAILED", "LOST"))
    started = first(ev, lambda e: e["event"] == "session_started" and e.get("session") == 1)
    running = [e["ts"] for e in ev if e["event"] == "task_state" and e.get("session") == 1 and e["state"] == "RUNNING"]
    total = max(running) - t_kill
    spawn = max(running) - started["ts"]
    return {"total_s": rnd(total), "detect_s": rnd(failed["ts"] - t_kill),
            "teardown_s": rnd(started["ts"] - failed["ts"]),
            "spawn_s": rnd(spawn), "overhead_s": rnd(total - spawn)}


def task_relaunch() -> dict:
    from tony_workflow.client import TonyClient, load_job
    conf = {"tony.am.retry-count": "1", "tony.worker.restart-policy": "task"}
    # The chief may not restart alone, so it gets a type of its own (the PS example's layout).
    text = common.job_text("bench-recovery", "sleep 600", {"chief": {"instances": 1, "memory": "64m"},
                                                           "worker": {"instances": WORKERS - 1, "memory": "64m"}},
                           conf=conf)
    with common.tony_home("tony-bench-recovery-"):
        h = TonyClient("local").submit(load_job(text))
        st = common.wait_for(lambda: all_running(h, 0), 120, 0.05, "tasks running")
        victim = st.task("worker:1").pid
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)

        def back():
            s = all_running(h, 0)
            return s if s and s.task("worker:1").restarts == 1 else None
        common.wait_for(back, 120, 0.05, "worker:1 running again")
        ev = common.events(h)
        h.kill()
    failed = first(ev, lambda e: e["event"] == "task_state" and e.get("task") == "worker:1"
                   and e.get("state") == "FAILED")
    restarted = first(ev, lambda e: e["event"] == "task_restarted" and e.get("task") == "worker:1")
    running = [e["ts"] for e in ev if e["event"] == "task_state" and e.get("task") == "worker:1"
               and e["state"] == "RUNNING" and e["ts"] > t_kill]
    total = running[0] - t_kill
    spawn = running[0] - restarted["ts"]
    return {"total_s": rnd(total), "detect_s": rnd(failed["ts"] - t_kill), "spawn_s": rnd(spawn),
            "overhead_s": rnd(total - spawn)}


def container_pid(h, task_id: str) -> int:
    st = h.status()
    cid = st.task(task_id).container_id
    return int((h.backend.app_dir(h.app_id) / "containers" / cid / "pid").read_text())


def hang(conf: dict[str, str], whole_container: bool = True, watch: float = 60.0) -> dict:
    """SIGSTOP worker:1 (its container's process group, or only its user process); time to LOST."""
    from tony_workflow.client import TonyClient, load_job
    with common.tony_home("tony-bench-recovery-"):
        h = TonyClient("local").submit(load_job(job({"tony.am.retry-count": "0", **conf}, workers=2)))
        st = common.wait_for(lambda: all_running(h, 0, n=2), 120, 0.05, "tasks running")
        time.sleep(1.5)  # past the first heartbeats, as in a task that has been running a while
        t_stop = time.time()
        if whole_container:
            os.killpg(container_pid(h, "worker:1"), signal.SIGSTOP)
        else:
            os.kill(st.task("worker:1").pid, signal.SIGSTOP)

        def lost():
            s = h.status()
            t = s.task("worker:1")
            return t is not None and t.state in ("LOST", "FAILED") and t
        try:
            common.wait_for(lost, watch, 0.1, "worker:1 declared lost")
            detected = True
        except TimeoutError:
            detected = False
        ev = common.events(h)
        if not whole_container:
            os.kill(st.task("worker:1").pid, signal.SIGCONT)
        h.kill()
    e = first(ev, lambda e: e["event"] == "task_state" and e.get("task") == "worker:1"
              and e.get("state") in ("LOST", "FAILED"))
    if not detected or e is None:
        return {"detected": False, "watched_s": watch}
    return {"detected": True, "state": e["state"], "detect_s": rnd(e["ts"] - t_stop),
            "diagnostics": (e.get("diagnostics") or "")[:200]}


def yarn_session_relaunch(reuse: str | None) -> dict:
    from tony_workflow.client import TonyClient, load_job
    missing = common.minicluster_missing()
    if missing:
        return {"skipped": missing}
    with common.minicluster(reuse):
        yarn = TonyClient("yarn")
        text = common.job_text("bench-recovery-yarn", "sleep 600", {"worker": {"instances": 2, "memory": "512m"}},
                               conf={"tony.am.retry-count": "1"}, am_memory="512m")
        h = yarn.submit(load_job(text))
        try:
            st = common.wait_for(lambda: all_running(h, 0, n=2), 300, 0.1, "yarn session 0 running")
            t_kill = time.time()
            os.kill(st.task("worker:1").pid, signal.SIGKILL)
            seen: dict[str, float] = {}

            def relaunched():
                s = h.status()
                if s.is_final:
                    raise RuntimeError(f"yarn job ended {s.state}: {s.diagnostics[-1500:]}")
                t = s.task("worker:1")
                if "failed" not in seen and (s.session_id == 1 or (t and t.state in ("FAILED", "KILLED"))):
                    seen["failed"] = time.time()
                if s.session_id == 1 and "session" not in seen:
                    seen["session"] = time.time()
                return s.session_id == 1 and all(t.state == "RUNNING" for t in s.tasks) and len(s.tasks) == 2
            common.wait_for(relaunched, 300, 0.1, "yarn session 1 running")
            t_all = time.time()
        finally:
            h.kill()
    return {"total_s": rnd(t_all - t_kill), "detect_s": rnd(seen["failed"] - t_kill),
            "spawn_s": rnd(t_all - seen["session"]), "overhead_s": rnd(seen["session"] - t_kill),
            "timing": "polled every 0.1 s"}


def main() -> int:
    ap = common.parser("recovery", __doc__)
    ap.add_argument("--reps", type=int, default=None, help="repetitions of the relaunch cases (default 3; --quick 1)")
    ap.add_argument("--yarn", choices=["auto", "no"], default=None,
                    help="the mini cluster case (default auto; --quick no)")
    ap.add_argument("--minicluster", default=None, help="reuse the mini cluster running in this directory")
    args = ap.parse_args()
    reps = args.reps or (1 if args.quick else 3)
    host = common.host_info()
    out: dict = {}
    sess = []
    for r in range(reps):
        sess.append(session_relaunch())
        log(f"session relaunch {r + 1}/{reps}: {sess[-1]}")
    task = []
    for r in range(reps):
        task.append(task_relaunch())
        log(f"task relaunch {r + 1}/{reps}: {task[-1]}")
    out["session_relaunch"] = sess
    out["task_relaunch"] = task
    log("hang, default heartbeat settings")
    out["hang_default"] = hang({}, watch=60.0)
    log(f"  {out['hang_default']}")
    log("hang, TonY's rule alone (tony.task.heartbeat-timeout-ms=0)")
    out["hang_tony_rule"] = hang({"tony.task.heartbeat-timeout-ms": "0"}, watch=60.0)
    log(f"  {out['hang_tony_rule']}")
    if not args.quick:
        log("hang of the user process alone (executor still heartbeating), watched 40 s")
        out["hang_user_process_only"] = hang({}, whole_container=False, watch=40.0)
        log(f"  {out['hang_user_process_only']}")
    yarn_mode = args.yarn or ("no" if args.quick else "auto")
    if yarn_mode == "auto":
        log("session relaunch on the mini cluster")
        try:
            out["yarn_session_relaunch"] = yarn_session_relaunch(args.minicluster)
        except Exception as e:  # noqa: BLE001 - the local numbers stand on their own
            out["yarn_session_relaunch"] = {"error": repr(e)[:500]}
        log(f"  {out['yarn_session_relaunch']}")
    value = median([s["total_s"] for s in sess])
    floor = median([s["spawn_s"] for s in sess])
    hang_s = out["hang_default"].get("detect_s")
    relaunch_ok = value < floor + GOAL_EXTRA_S
    hang_ok = bool(out["hang_default"].get("detected")) and hang_s is not None and hang_s < GOAL_HANG_S
    out["summary"] = {
        "session_relaunch_total_s": rnd(value), "session_relaunch_spawn_s": rnd(floor),
        "session_relaunch_overhead_s": rnd(median([s["overhead_s"] for s in sess])),
        "task_relaunch_total_s": rnd(median([t["total_s"] for t in task])),
        "task_relaunch_spawn_s": rnd(median([t["spawn_s"] for t in task])),
        "hang_detect_default_s": hang_s, "hang_detect_tony_rule_s": out["hang_tony_rule"].get("detect_s"),
        "relaunch_goal_met": bool(relaunch_ok), "hang_goal_met": hang_ok,
    }
    result = {
        "metric": f"kill -9 of a task -> all {WORKERS} tasks running again (session relaunch, local)",
        "unit": "s", "value": rnd(value), "floor": rnd(floor), "ratio": rnd(value / floor, 2),
        "goal": f"< floor + {GOAL_EXTRA_S:g} s; hang detected < {GOAL_HANG_S:g} s with default settings",
        "goal_met": bool(relaunch_ok and hang_ok),
        "params": {"workers": WORKERS, "reps": reps, "command": "sleep 600", "heartbeat_timeout_ms_default": 8000},
        **out,
    }
    common.write_result(args, "recovery", result, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
