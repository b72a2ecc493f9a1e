"""follow_many: one process following N running YARN applications, as an Airflow triggerer does.

N small jobs (an AM and one worker running ``sleep``) are submitted to the Hadoop mini cluster and
left running. Then, in a fresh process each, two followers poll every job every ``--poll`` seconds
(spread over the interval) for ``--window`` seconds:

* runtime: a ``TonyClient("yarn")`` per job (what N deferred tasks' triggers hold: a hook each),
  reading ``JobHandle.status()``: the ResourceManager's report, the skein AM's key-value store and
  the job's own AM, the full live JobStatus;
* floor: one ``requests`` session asking the ResourceManager's REST API for each application's
  report: the least any follower must do to see a YARN application's state.

Measured in each follower, with the processes it started: JVMs (skein drivers), memory growth per
followed job (RSS after following all N minus RSS after following one, over N - 1), and CPU over
the window as a share of one core. ``--tree DIR`` follows with the code of another checkout, to
measure an earlier commit the same way.

Goals: <= 1 JVM, <= 5 MB per followed job, <= 5 % of a core at a 5 s poll (runtime).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import common
import psutil
from common import log, rnd

SCRIPT = Path(__file__).resolve()
GOAL_JVMS, GOAL_MB_PER_JOB, GOAL_CPU = 1, 5.0, 0.05
JOB = {
    "name": "follow-many", "framework": "standalone",
    "tasks": {"worker": {"instances": 1, "memory": "384m", "vcores": 1, "command": "sleep 3600"}},
    "conf": {"tony.am.memory": "256m", "tony.task.tensorboard.enabled": "false",
             # A minute of AM silence, not the default 30 s: the mini cluster shares two cores with N jobs.
             "tony.am.liveness-timeout-ms": "60000"},
}


# ------------------------------------------------------------------ the followers (own process)

def _jvms() -> int:
    return sum(1 for p in psutil.Process().children(recursive=True) if "java" in p.name())


def _rss(p: psutil.Process) -> int:
    """The follower's memory, with the processes it started (a skein driver's JVM)."""
    return p.memory_info().rss + sum(c.memory_info().rss for c in p.children(recursive=True))


def _cpu_seconds(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system + t.children_user + t.children_system + sum(
        c.cpu_times().user + c.cpu_times().system for c in p.children(recursive=True))


def follow(way: str, app_ids: list[str], poll: float, window: float) -> dict:
    me = psutil.Process()
    if way == "runtime":
        from tony_workflow.client import TonyClient

        def follower(app_id: str):
            handle = TonyClient("yarn").attach(app_id)
            return lambda: handle.status().state
    else:
        import requests

        from tony_workflow import hadoop
        session = requests.Session()
        rm_web = hadoop.rm_web_url(hadoop.read_conf(os.environ["HADOOP_CONF_DIR"]))

        def follower(app_id: str):
            url = f"{rm_web}/ws/v1/cluster/apps/{app_id}"
            return lambda: session.get(url, timeout=30).json()["app"]["state"]

    readers = [follower(app_ids[0])]
    readers[0]()
    rss_one = _rss(me)
    readers += [follower(a) for a in app_ids[1:]]
    states = [r() for r in readers]
    rss_all = _rss(me)
    cpu0, t0 = _cpu_seconds(me), time.monotonic()
    polls, step = 0, poll / len(readers)
    while time.monotonic() - t0 < window:
        for r in readers:
            r()
            polls += 1
            time.sleep(step)
    wall = time.monotonic() - t0
    return {"way": way, "n": len(app_ids), "states": sorted(set(states)), "jvms": _jvms(),
            "rss_one_mb": rnd(rss_one / 2**20, 1), "rss_all_mb": rnd(rss_all / 2**20, 1),
            "mb_per_job": rnd((rss_all - rss_one) / 2**20 / max(1, len(app_ids) - 1), 2),
            "rss_end_mb": rnd(_rss(me) / 2**20, 1),
            "cpu_share": rnd((_cpu_seconds(me) - cpu0) / wall, 4), "polls": polls, "window_s": rnd(wall, 1)}


# ------------------------------------------------------------------ the run

def run_follower(way: str, app_ids: list[str], poll: float, window: float, tree: Path | None = None) -> dict:
    argv = [sys.executable, str(SCRIPT), "--role", way, "--poll", str(poll), "--window", str(window),
            "--ids", ",".join(app_ids)]
    done = subprocess.run(argv + (["--tree", str(tree)] if tree else []), capture_output=True, text=True,
                          timeout=window + 600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {way} follower failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = common.parser("follow_many", __doc__)
    ap.add_argument("--n", type=int, default=None, help="running applications followed (default 20; --quick 3)")
    ap.add_argument("--poll", type=float, default=5.0, help="seconds between two reads of one job (default 5)")
    ap.add_argument("--window", type=float, default=None, help="seconds measured (default 120; --quick 20)")
    ap.add_argument("--minicluster", default=None, help="reuse the mini cluster running in this directory")
    ap.add_argument("--tree", type=Path, default=None,
                    help="follow with the tony_workflow of another checkout (an earlier commit, to compare)")
    ap.add_argument("--role", choices=["runtime", "floor"], help=argparse.SUPPRESS)
    ap.add_argument("--ids", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role:
        if args.tree:
            sys.path.insert(0, str(args.tree.resolve()))
        print(json.dumps(follow(args.role, args.ids.split(","), args.poll, args.window)))
        return 0
    n = args.n or (3 if args.quick else 20)
    window = args.window or (20.0 if args.quick else 120.0)
    host = common.host_info()
    missing = common.minicluster_missing()
    goal = (f"<= {GOAL_JVMS} JVM, <= {GOAL_MB_PER_JOB} MB per followed job, <= {GOAL_CPU:.0%} of a core "
            f"at a {args.poll:g} s poll")
    if missing:
        common.write_result(args, "follow_many", {"metric": "CPU of one process following N YARN jobs", "unit": "share",
                                                  "value": None, "floor": None, "ratio": None, "goal": goal,
                                                  "goal_met": False, "skipped": missing}, host)
        return 0
    from tony_workflow.client import TonyClient, load_job
    # Each job holds three containers (skein's AM, TonY's AM, the worker): about 1.2 GB and 3 vcores.
    with common.minicluster(args.minicluster, nm_memory_mb=max(16384, 1536 * n), nm_vcores=max(16, 4 * n)):
        client = TonyClient("yarn")
        log(f"submitting {n} jobs")
        handles = [client.submit(load_job({**JOB, "name": f"follow-many-{i}"})) for i in range(n)]
        try:
            common.wait_for(lambda: all(h.status().state == "RUNNING" for h in handles), timeout=900, interval=2,
                            what=f"{n} jobs running")
            ids = [h.app_id for h in handles]
            log(f"{n} jobs running; following them for {window:g} s each way")
            floor = run_follower("floor", ids, args.poll, window)
            log(f"  floor: {floor}")
            runtime = run_follower("runtime", ids, args.poll, window, args.tree)
            log(f"  runtime: {runtime}")
        finally:
            common.kill_all(handles)
    met = (runtime["jvms"] <= GOAL_JVMS and runtime["mb_per_job"] <= GOAL_MB_PER_JOB
           and runtime["cpu_share"] <= GOAL_CPU and runtime["states"] == ["RUNNING"])
    result = {
        "metric": f"CPU of one process following {n} running YARN jobs (share of a core)", "unit": "share",
        "value": runtime["cpu_share"], "floor": floor["cpu_share"],
        "ratio": rnd(runtime["cpu_share"] / floor["cpu_share"], 2) if floor["cpu_share"] else None,
        "goal": goal, "goal_met": bool(met), "jvms": runtime["jvms"], "mb_per_job": runtime["mb_per_job"],
        "params": {"n": n, "poll_s": args.poll, "window_s": window, "tree": str(args.tree) if args.tree else None},
        "runtime": runtime, "floor_run": floor,
    }
    common.write_result(args, "follow_many", result, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
