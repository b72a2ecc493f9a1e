"""rm_load: what N jobs waiting for their turn in a queue cost the ResourceManager, per second, in
requests and bytes answered: N = 1, 10, 50, on clusters of 10, 1,000 and 5,000 nodes.

* Simulated ResourceManager (every size): ``bench/tools/sim_rm.py``, a REST server of the
  benchmark's own that answers with the real API's shapes (each answer built from a real Hadoop
  3.5.0 ResourceManager's, captured from the mini cluster into ``bench/tools/rm_shapes.json``) for
  that many nodes, and counts what it is asked. The waiting jobs are the runtime's own
  :class:`~tony_workflow.backends.yarn.line.Line`, the code the gate and the AM run, one thread
  each at its own pace, sharing the queue's board in a local directory (the stand-in for HDFS).
* The real mini cluster (10 NodeManagers): N real jobs waiting behind an application that fills
  the queue, their containers reading the real ResourceManager through a counting proxy.

Two ways to wait: the queue full (its headroom keeps everyone waiting), and room in the queue but
on no node (each node keeps less than one container of the gang: the nodes must be read).
Floor: the same jobs reading as each job did for itself before the board (every TonY application,
the whole scheduler, every node, every two seconds), measured with one job per size in the same
run; for N jobs it is N times that.

Goal: at 50 jobs and 5,000 nodes, under 2 requests/s and 1 MB/s per queue, in either way of
waiting; the load grows with the queues, not with jobs x nodes.
"""
from __future__ import annotations

import random
import sys
import tempfile
import threading
import time
from typing import Any

import common
from common import log, rnd

GOAL_REQUESTS, GOAL_BYTES = 2.0, 1 << 20
SIZES, JOBS = (10, 1000, 5000), (1, 10, 50)
SCENARIOS = {
    "queue full": {"free_mb": 1024, "queue_max_mb": 1 << 20, "queue_used_mb": 1 << 20},
    "no node has room": {"free_mb": 1024, "queue_max_mb": 1 << 22, "queue_used_mb": 1 << 20},
}


def gang():
    from tony_workflow.backends.base import ContainerRequest
    return [ContainerRequest("am", 1024, 1, 0), *(ContainerRequest(f"worker:{i}", 4096, 2, 0) for i in range(4))]


def tag() -> str:
    from tony_workflow.backends.yarn.gang import Shape, gang_tag
    return gang_tag(Shape(512, 1), [Shape(1024, 1), *[Shape(4096, 2)] * 4])


def old_look(rm, app_id: str, queue: str) -> None:
    """What each waiting job read before the board, every look."""
    rm.apps(tags=("tony",), states=("ACCEPTED", "RUNNING"))
    rm.app(app_id)
    rm.queue(queue)
    rm.nodes()


def simulate(nodes: int, jobs: int, scenario: str, *, warmup: float, window: float, queues: int = 1,
             before: bool = False) -> dict[str, Any]:
    """The load on a simulated ResourceManager of ``jobs`` waiting jobs in each of ``queues``
    queues (``before``: reading as before the board)."""
    sys.path.insert(0, str(common.BENCH / "tools"))
    from sim_rm import SimRM

    from tony_workflow.backends.yarn.line import Line
    from tony_workflow.backends.yarn.rm import ResourceManager
    from tony_workflow.storage import LocalStorage

    names = [f"q{i}" for i in range(queues)]
    sim = SimRM(nodes, names, **SCENARIOS[scenario])
    url = sim.start()
    board = LocalStorage(tempfile.mkdtemp(prefix="tony-bench-board-"))
    stop = threading.Event()
    counts = {"am": (0, 1), "worker": (0, 4)}
    seen: dict[str, Any] = {}

    def run(app_id: str, queue: str) -> None:
        rm = ResourceManager(url)  # each job its own process, its own connections
        if before:
            while not stop.wait(2.0 * random.uniform(0.75, 1.25)):
                old_look(rm, app_id, f"root.{queue}")
            return
        line = Line(app_id, rm, board=board)
        while True:
            v = line.look(gang(), counts)
            seen[app_id] = v
            if stop.wait(line.pause()):
                return

    threads = []
    for q, queue in enumerate(names):
        for i in range(jobs):
            app_id = f"application_1700000000000_{q * 1000 + i + 1:04d}"
            sim.add_app(app_id, queue, ["tony", tag()])
            threads.append(threading.Thread(target=run, args=(app_id, queue), daemon=True))
    for t in threads:
        t.start()
        time.sleep(0.02)  # jobs arrive one after another, as submissions do
    time.sleep(warmup)
    t1 = time.monotonic()
    time.sleep(window)
    t2 = time.monotonic()
    stop.set()
    for t in threads:
        t.join(timeout=60)
    sim.stop()
    load = sim.load(t1, t2)
    reasons = sorted({(v.reason or "").split("; blocked by ")[-1][:60] for v in seen.values() if v is not None})
    return {"nodes": nodes, "jobs": jobs, "queues": queues, "scenario": scenario, "way": "before" if before else "board",
            "requests_per_s": load["requests_per_s"], "bytes_per_s": load["bytes_per_s"],
            "per_queue": {"requests_per_s": rnd(load["requests_per_s"] / queues),
                          "bytes_per_s": round(load["bytes_per_s"] / queues)},
            "by_endpoint": load["by_endpoint"], "verdicts_seen": len(seen), "waiting_for": reasons[:3]}


def on_minicluster(jobs_list: tuple[int, ...], *, warmup: float, window: float, reuse: str | None) -> list[dict]:
    """N real jobs waiting behind a job that fills the queue, on a mini cluster of 10 NodeManagers,
    their reads of the ResourceManager counted by a proxy in front of its web address."""
    sys.path.insert(0, str(common.BENCH / "tools"))
    from rm_proxy import CountingProxy

    from tony_workflow.client import TonyClient, load_job
    rows = []
    with common.minicluster(reuse, nodemanagers=10, nm_memory_mb=2048, nm_vcores=4) as info:
        proxy = CountingProxy(info["rm_web"])
        url = proxy.start()
        yarn = TonyClient("yarn", rm_web_address=url)
        client = yarn.backend.client
        import skein
        for n in jobs_list:
            # 10 x 2 GB: the blocker (its master and fillers, 512 MB each) takes all but what the
            # waiting jobs' masters (512 MB each) need and 512 MB more. A waiting job's gang (an AM
            # and six workers of 1 GB) fits the cluster, never what the blocker leaves, even for
            # the first job, which arrives before the others' masters take their share.
            spare = n * 512 + 512
            fill = max(1, (20480 - 512 - spare) // 512)
            blocker = client.submit(skein.ApplicationSpec(
                name="bench-blocker", queue="default", max_attempts=1,
                services={"fill": skein.Service(resources=skein.Resources(memory=512, vcores=1), script="sleep 3600",
                                                instances=fill)}))
            # Every filler running before the jobs come (a busy machine starts them slowly): else
            # a job's gang may fit meanwhile, run and end, and never wait.
            blocking = client.connect(blocker, wait=True)
            common.wait_for(lambda b=blocking, f=fill: len(b.get_containers(services=["fill"], states=["RUNNING"])) >= f,
                            timeout=300, interval=2, what="the blocker's containers running")
            handles = []
            for i in range(n):
                handles.append(yarn.submit(load_job(common.job_text(
                    f"bench-wait-{i}", "sleep 5", {"worker": {"instances": 6, "memory": "1g"}}, am_memory="512m"))))
            try:
                common.wait_for(lambda hs=handles: all(h.status().state == "ALLOCATING" and h.status().waiting_reason
                                                       for h in hs), timeout=300, interval=2, what="every job waiting")
                time.sleep(warmup)
                t1 = time.monotonic()
                time.sleep(window)
                t2 = time.monotonic()
                load = proxy.load(t1, t2)
                states = [h.status().waiting_reason for h in handles]
            finally:
                for h in handles:
                    h.kill(timeout=60)
                client.kill_application(blocker)
            rows.append({"nodes": 10, "jobs": n, "queues": 1, "scenario": "queue full", "way": "board (mini cluster)",
                         "requests_per_s": load["requests_per_s"], "bytes_per_s": load["bytes_per_s"],
                         "per_queue": {"requests_per_s": load["requests_per_s"], "bytes_per_s": load["bytes_per_s"]},
                         "by_endpoint": load["by_endpoint"], "waiting_for": sorted({(s or "")[:90] for s in states})[:2]})
            log(f"mini cluster, {n} jobs: {load['requests_per_s']} req/s, {load['bytes_per_s']} B/s")
        proxy.stop()
    return rows


def main() -> int:
    ap = common.parser("rm_load", __doc__)
    ap.add_argument("--minicluster", default=None, help="reuse the mini cluster running in this directory")
    ap.add_argument("--no-minicluster", action="store_true", help="only the simulated ResourceManager")
    args = ap.parse_args()
    host = common.host_info()
    warmup, window = (4.0, 8.0) if args.quick else (10.0, 30.0)
    sizes, jobs = ((10, 5000), (1, 50)) if args.quick else (SIZES, JOBS)
    rows, floors = [], {}
    for scenario in SCENARIOS:
        for nodes in sizes:
            floors[(scenario, nodes)] = simulate(nodes, 1, scenario, warmup=warmup / 2, window=window / 2, before=True)
            for n in jobs:
                rows.append(simulate(nodes, n, scenario, warmup=warmup, window=window))
                r = rows[-1]
                log(f"{scenario}, {nodes} nodes, {n} jobs: {r['requests_per_s']} req/s, {r['bytes_per_s']} B/s "
                    f"(before: {floors[(scenario, nodes)]['requests_per_s'] * n:.1f} req/s, "
                    f"{floors[(scenario, nodes)]['bytes_per_s'] * n:.0f} B/s)")
    # The load grows with the queues: two queues of 50 jobs each, the largest cluster.
    rows.append(simulate(sizes[-1], jobs[-1], "no node has room", warmup=warmup, window=window, queues=2))
    minicluster_error = None
    if not args.no_minicluster and not common.minicluster_missing():
        try:
            rows += on_minicluster((1, 10) if not args.quick else (1,), warmup=warmup, window=window,
                                   reuse=args.minicluster)
        except Exception as e:  # noqa: BLE001 - the simulated sizes are measured: keep them, say why this failed
            minicluster_error = f"{type(e).__name__}: {e}"
            log(f"the mini cluster part failed: {minicluster_error}")
    worst = [r for r in rows if r["nodes"] == sizes[-1] and r["jobs"] == jobs[-1] and r["way"] == "board"]
    req = max(r["per_queue"]["requests_per_s"] for r in worst)
    byt = max(r["per_queue"]["bytes_per_s"] for r in worst)
    floor_rows = [f for (s, n), f in floors.items() if n == sizes[-1]]
    floor_bytes = max(f["bytes_per_s"] for f in floor_rows) * jobs[-1]
    result = {
        "metric": f"ResourceManager load per queue, {jobs[-1]} waiting jobs, {sizes[-1]} nodes (simulated RM)",
        "unit": "bytes/s", "value": byt, "floor": floor_bytes, "ratio": rnd(byt / floor_bytes, 4),
        "goal": f"< {GOAL_REQUESTS:g} requests/s and < 1 MB/s per queue",
        "goal_met": bool(req < GOAL_REQUESTS and byt < GOAL_BYTES),
        "requests_per_s": req, "floor_requests_per_s": rnd(max(f["requests_per_s"] for f in floor_rows) * jobs[-1]),
        "rows": rows, "floors": [{**f, "per_job": True} for f in floors.values()],
        **({"minicluster_error": minicluster_error} if minicluster_error else {}),
        "params": {"warmup_s": warmup, "window_s": window, "scenarios": SCENARIOS,
                   "gang": "AM 1 GB + 4 workers of 4 GB, 2 vcores"},
    }
    common.write_result(args, "rm_load", result, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
