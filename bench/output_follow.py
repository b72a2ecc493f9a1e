"""output_follow: what following running jobs' output costs, and how soon a line reaches the follower.

N jobs are submitted (one worker each, whose command prints a line stamped with the wall clock
every ``--every`` seconds) and left running. Then, in a fresh process each, two followers follow
all N jobs for ``--window`` seconds, as the Airflow operator, its trigger, the Azkaban runner and
``tony logs --follow`` do (one status read per job every ``--poll`` seconds):

* floor: the same status reads, and the chief's stdout read by the least a reader can do: every
  second, the bytes after the last read (the file itself on the embedded cluster; on YARN one
  request to the NodeManager's log page), whole lines kept;
* runtime: the same, with the chief's output (``JobHandle.follow(output=...)``: its files looked
  at every second, through the embedded cluster's files or the NodeManagers' REST API and log
  pages on YARN).

Measured in each follower: CPU over the window as a share of one core (with its children), HTTP
requests a second (on YARN, those to the NodeManagers apart), the lines received against those
printed, and for each line the delay from its stamp to the follower's hands (median, 95th
percentile). The line then reaches the Airflow or Azkaban log by one more write.

Goals: the chief's every line once; median delay < 3 s; the runtime's follower <= 2 % of a core
per followed job above the floor's.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import common
import psutil
from common import log, median, rnd

SCRIPT = Path(__file__).resolve()
GOAL_DELAY_S, GOAL_CPU_PER_JOB = 3.0, 0.02
PRINTER = ("import sys, time\n"
           "i = 0\n"
           "while True:\n"
           "    print(f't={time.time():.3f} i={i}', flush=True)\n"
           "    i += 1\n"
           "    time.sleep(float(sys.argv[1]))\n")


def job(name: str, script: Path, every: float) -> dict:
    return {"name": name, "framework": "standalone",
            "tasks": {"worker": {"instances": 1, "memory": "384m", "vcores": 1,
                                 "command": f"python3 {script} {every}"}},
            "conf": {"tony.am.memory": "256m", "tony.task.tensorboard.enabled": "false",
                     "tony.am.liveness-timeout-ms": "60000"}}


# ------------------------------------------------------------------ the followers (own process)

def _cpu_seconds(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system + t.children_user + t.children_system + sum(
        c.cpu_times().user + c.cpu_times().system for c in p.children(recursive=True))


def _count_requests() -> dict[str, int]:
    """Counts every HTTP request this process makes, by whom it goes to (a NodeManager or not)."""
    import requests
    counts = {"all": 0, "nodemanager": 0}
    send = requests.Session.send

    def counting(self, request, **kwargs):
        counts["all"] += 1
        if "/ws/v1/node/" in request.url or "/node/containerlogs/" in request.url:
            counts["nodemanager"] += 1
        return send(self, request, **kwargs)
    requests.Session.send = counting  # type: ignore[method-assign]
    return counts


def follow(way: str, backend: str, app_ids: list[str], poll: float, window: float) -> dict:
    import threading

    from tony_workflow.client import TonyClient
    counts = _count_requests()
    me = psutil.Process()
    client = TonyClient(backend)
    handles = [client.attach(a) for a in app_ids]
    got: dict[str, list[tuple[float, float, int]]] = {a: [] for a in app_ids}  # (stamp, arrival, i)
    stop = threading.Event()

    def lines(app_id: str, batch) -> None:
        now = time.time()
        for line in batch:
            if line.task and line.stream == "stdout" and line.text.startswith("t="):
                stamp, i = line.text.split()
                got[app_id].append((float(stamp[2:]), now, int(i[2:])))

    began: dict[str, float] = {}

    def one(h) -> None:
        began[h.app_id] = time.time()  # lines printed before are a backlog, read at once: not a delay
        output = h.output() if way == "runtime" else None
        for _ in h.follow(poll_interval=poll, stop=stop.is_set, output=output,
                          on_output=lambda batch: lines(h.app_id, batch)):
            pass

    def bare(h, chief) -> None:
        """The floor: the job's status as the runtime reads it, and its chief's stdout by the least
        a reader can do: every second, the bytes after the last read (the file itself on the
        embedded cluster; on YARN one request to its NodeManager's log page), whole lines kept."""
        import html
        import re

        import requests
        began[h.app_id] = time.time()
        session, offset, held, next_status = requests.Session(), 0, b"", 0.0
        while not stop.is_set():
            if time.monotonic() >= next_status:
                h.status()
                next_status = time.monotonic() + poll
            if backend == "local":
                with open(chief, "rb") as fh:
                    fh.seek(offset)
                    data = fh.read()
            else:
                r = session.get(f"{chief.rstrip('/')}/stdout/", params={"start": offset}, timeout=10)
                found = re.search(r"<pre>(.*?)</pre>", r.text, re.DOTALL)
                data = html.unescape(found.group(1)).encode() if found else b""
            offset += len(data)
            held += data
            done, _, held = held.rpartition(b"\n")
            if done:
                lines(h.app_id, [SimpleNamespace(task="worker:0", stream="stdout", text=t)
                                 for t in done.decode().split("\n")])
            stop.wait(1.0)

    if way == "runtime":
        threads = [threading.Thread(target=one, args=(h,), daemon=True) for h in handles]
    else:
        chiefs = []
        for h in handles:
            [task] = [t for t in h.status().tasks if t.task_id == "worker:0"]
            chiefs.append(task.log_url if backend == "yarn" else
                          str(client.backend.app_dir(h.app_id) / "containers" / str(task.container_id) / "stdout"))
        threads = [threading.Thread(target=bare, args=(h, c), daemon=True) for h, c in zip(handles, chiefs)]
    cpu0, t0 = _cpu_seconds(me), time.monotonic()
    for t in threads:
        t.start()
        time.sleep(poll / len(threads))  # spread over the interval, as N tasks' polls are
    time.sleep(max(0.0, window - (time.monotonic() - t0)))
    stop.set()
    for t in threads:
        t.join(timeout=60)
    wall = time.monotonic() - t0
    delays = sorted(arrival - stamp for app_id, seen in got.items() for stamp, arrival, _ in seen
                    if stamp >= began.get(app_id, float("inf")))
    # Every line once: each job's numbers run from its first seen without a gap or a repeat.
    whole = all([i for _, _, i in seen] == list(range(seen[0][2], seen[0][2] + len(seen))) for seen in got.values()
                if seen)
    return {"way": way, "n": len(app_ids), "cpu_share": rnd((_cpu_seconds(me) - cpu0) / wall, 4),
            "requests_per_s": rnd(counts["all"] / wall, 2), "nodemanager_requests_per_s": rnd(counts["nodemanager"] / wall, 2),
            "lines": sum(len(s) for s in got.values()), "every_line_once": whole,
            "delay_median_s": rnd(median(delays), 3) if delays else None,
            "delay_p95_s": rnd(delays[int(0.95 * (len(delays) - 1))], 3) if delays else None,
            "window_s": rnd(wall, 1)}


# ------------------------------------------------------------------ the run

def run_follower(way: str, backend: str, app_ids: list[str], poll: float, window: float) -> dict:
    argv = [sys.executable, str(SCRIPT), "--role", way, "--backend", backend, "--poll", str(poll),
            "--window", str(window), "--ids", ",".join(app_ids)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=window + 600, check=False, env=os.environ)
    if done.returncode != 0:
        raise RuntimeError(f"the {way} follower failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(backend: str, n: int, args: argparse.Namespace, script: Path, window: float) -> dict:
    from tony_workflow.client import TonyClient, load_job
    client = TonyClient(backend)
    log(f"{backend}: submitting {n} printing jobs")
    handles = [client.submit(load_job(job(f"output-follow-{i}", script, args.every))) for i in range(n)]
    try:
        common.wait_for(lambda: all((s := h.status()).state == "RUNNING" and s.tasks and s.tasks[0].state == "RUNNING"
                                    for h in handles), timeout=900, interval=2, what=f"{n} jobs running")
        ids = [h.app_id for h in handles]
        log(f"{n} jobs running; following them for {window:g} s each way")
        floor = run_follower("floor", backend, ids, args.poll, window)
        log(f"  floor: {floor}")
        runtime = run_follower("runtime", backend, ids, args.poll, window)
        log(f"  runtime: {runtime}")
    finally:
        common.kill_all(handles)
    expected = n * window / args.every
    per_job = (runtime["cpu_share"] - floor["cpu_share"]) / n
    return {"n": n, "floor": floor, "runtime": runtime, "cpu_per_job": rnd(per_job, 4),
            "lines_share": rnd(runtime["lines"] / expected, 3),
            "met": bool(runtime["every_line_once"] and runtime["delay_median_s"] is not None
                        and runtime["delay_median_s"] < GOAL_DELAY_S and per_job <= GOAL_CPU_PER_JOB)}


def main() -> int:
    ap = common.parser("output_follow", __doc__)
    ap.add_argument("--backend", choices=["local", "yarn"], default="local")
    ap.add_argument("--sizes", default=None, help="numbers of jobs followed at once (default 1,20; --quick 1,3)")
    ap.add_argument("--poll", type=float, default=5.0, help="seconds between two status reads of a job (default 5)")
    ap.add_argument("--every", type=float, default=0.5, help="seconds between two lines of a job (default 0.5)")
    ap.add_argument("--window", type=float, default=None, help="seconds measured (default 60; --quick 15)")
    ap.add_argument("--minicluster", default=None, help="with --backend yarn, reuse the mini cluster running there")
    ap.add_argument("--role", choices=["runtime", "floor"], help=argparse.SUPPRESS)
    ap.add_argument("--ids", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role:
        print(json.dumps(follow(args.role, args.backend, args.ids.split(","), args.poll, args.window)))
        return 0
    sizes = [int(x) for x in (args.sizes or ("1,3" if args.quick else "1,20")).split(",")]
    window = args.window or (15.0 if args.quick else 60.0)
    host = common.host_info()
    goal = (f"every line once, median delay < {GOAL_DELAY_S:g} s, <= {GOAL_CPU_PER_JOB:.0%} of a core per "
            f"followed job above the floor")
    metric = f"CPU of one process following N jobs with their chief's output ({args.backend}; share of a core)"
    name = "output_follow" + ("_yarn" if args.backend == "yarn" else "")
    if args.backend == "yarn" and (missing := common.minicluster_missing()):
        common.write_result(args, name, {"metric": metric, "unit": "share", "value": None, "floor": None,
                                                    "ratio": None, "goal": goal, "goal_met": False,
                                                    "skipped": missing}, host)
        return 0
    runs = []
    with common.tony_home("tony-bench-output-", common.CLUSTER_CONF) as home:
        script = home / "printer.py"
        script.write_text(PRINTER)
        if args.backend == "yarn":
            with common.minicluster(args.minicluster, nm_memory_mb=max(16384, 1536 * max(sizes)),
                                    nm_vcores=max(16, 4 * max(sizes))):
                runs = [measure("yarn", n, args, script, window) for n in sizes]
        else:
            runs = [measure("local", n, args, script, window) for n in sizes]
    last = runs[-1]
    result = {
        "metric": metric, "unit": "share", "value": last["runtime"]["cpu_share"], "floor": last["floor"]["cpu_share"],
        "ratio": rnd(last["runtime"]["cpu_share"] / last["floor"]["cpu_share"], 2) if last["floor"]["cpu_share"] else None,
        "goal": goal, "goal_met": all(r["met"] for r in runs),
        "delay_median_s": last["runtime"]["delay_median_s"], "delay_p95_s": last["runtime"]["delay_p95_s"],
        "nodemanager_requests_per_s": last["runtime"]["nodemanager_requests_per_s"],
        "params": {"backend": args.backend, "sizes": sizes, "poll_s": args.poll, "every_s": args.every,
                   "window_s": window},
        "runs": runs,
    }
    common.write_result(args, name, result, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
