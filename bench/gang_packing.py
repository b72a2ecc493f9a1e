"""gang_packing: eight jobs submitted at once to a cluster with room for two gangs.

Each job is an ApplicationMaster and three workers that run ``sleep 30``. The cluster is sized so
that two gangs fit at a time and a third does not:

* embedded cluster: ``tony.local.memory`` of 7 GB, jobs of an AM of 256 MB and three 1 GB workers
  (3.25 GB a gang);
* mini cluster: two NodeManagers of 6 GB and 16 vcores, jobs of skein's master (512 MB), an AM of
  512 MB and three 1 GB workers (4 GB a job; the eight masters of the jobs that wait take 4 GB).

The ideal packing of eight is four rounds of two gangs side by side, each round starting the
instant the one before ends. The first round's two gangs start together from nothing, sharing
the machine's cores (on the mini cluster two skein masters, two AMs and six executors start at
once, with the cluster's own JVM placing and launching them): it is timed as two such jobs
submitted at once to the empty cluster (submission to the last final status). Each later round
is timed as one job alone, start included (a packing that starts the next jobs while the round
before runs may beat it by their start, a hand-off costs it the next gang's grant and launch).
Both are the median of three in the same run (of two in a quick run). The ideal of ``8 x alone /
2`` is reported beside it (``ratio_alone``): it takes the first round's two starts on the same
cores for the runtime's. Beside them, the ideal from outside the runtime, built the same way
from the same gang without it (on the embedded cluster, the processes started by hand; on YARN,
bare skein applications asking for the same containers, from their submission to their end in
the ResourceManager), so that a cost every job pays cannot hide in both sides of the ratio.

Each repetition submits the eight jobs at once, each from a thread of its own, and samples the
cluster twice a second (the embedded cluster's ledger; the ResourceManager's metrics and
applications). Reported per repetition:

* the makespan (first submission to last final status) against the ideal packing;
* the order of completion against the order of submission: how many places a job finished after
  its place in the queue;
* the memory the cluster left idle while some job waited for its gang, in GB x s and as a share
  of the cluster's memory over that time;
* deadlocks: a repetition whose jobs do not all succeed within three times the ideal packing
  (they are killed);
* a job's fixed cost: what it holds while it waits (containers and MB; on YARN, skein's master
  alone) and before any task starts.

Goals: makespan <= 1.25 x ideal in every repetition, 0 deadlocks in 10, no job finishing more than
two places after its submission place.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self, TypeVar

import common
from common import log, rnd

T = TypeVar("T")

GOAL_RATIO, GOAL_LATE = 1.25, 2
JOBS, ROOM = 8, 2
SLEEP_S = 30
LOCAL_MEMORY = "7g"
NM_MEMORY_MB, NM_VCORES = 6144, 16


def job(backend: str, name: str, seconds: int) -> dict:
    am = "256m" if backend == "local" else "512m"
    return {"name": name, "framework": "tensorflow",
            "tasks": {"worker": {"instances": 3, "memory": "1g", "vcores": 1, "command": f"sleep {seconds}"}},
            "conf": {"tony.am.memory": am, "tony.task.tensorboard.enabled": "false", "tony.am.retry-count": "0",
                     # the mini cluster shares two cores with eight waiting jobs: a minute of AM silence
                     "tony.am.liveness-timeout-ms": "60000"}}


# ------------------------------------------------------------------ what the cluster holds

class Sampler:
    """Twice a second: the cluster's memory in use and in all, and which of ``apps`` wait for their
    gang (and what each holds while it does)."""

    def __init__(self, backend: str, gang_containers: int):
        self.backend = backend
        self.gang = gang_containers
        self.apps: set[str] = set()
        self.rows: list[dict[str, Any]] = []
        self.formed: set[str] = set()
        self.held_waiting: dict[str, tuple[int, int]] = {}  # app -> (most containers, most MB) while waiting
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        if backend == "yarn":
            import requests

            from tony_workflow import hadoop
            self.session = requests.Session()
            self.rm = hadoop.rm_web_url(hadoop.read_conf(os.environ["HADOOP_CONF_DIR"]))

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _local(self) -> tuple[int, int, set[str]]:
        from tony_workflow.backends.local.ledger import cluster_dir, locked_json
        from tony_workflow.spec.site import local_settings
        with locked_json(cluster_dir() / "ledger.json", {}) as ledger:
            used = sum(a["memory_mb"] for a in (ledger.get("allocations") or {}).values())
            waiting = {q["app"] for q in ledger.get("queue") or []} & self.apps
            held = set(ledger.get("allocations") or {})
        self.formed |= held & self.apps
        for app in waiting:
            self.held_waiting.setdefault(app, (0, 0))
        return used, int(local_settings().capacity.memory_mb or 0), waiting

    def _yarn(self) -> tuple[int, int, set[str]]:
        metrics = self.session.get(f"{self.rm}/ws/v1/cluster/metrics", timeout=10).json()["clusterMetrics"]
        apps = (self.session.get(f"{self.rm}/ws/v1/cluster/apps", params={"applicationTags": "tony"},
                                 timeout=10).json().get("apps") or {}).get("app") or []
        waiting = set()
        for a in apps:
            if a["id"] not in self.apps or a["state"] not in ("ACCEPTED", "RUNNING", "NEW", "NEW_SAVING", "SUBMITTED"):
                continue
            running = int(a.get("runningContainers", -1))
            if running >= self.gang + 1:  # skein's master, the AM and every worker
                self.formed.add(a["id"])
            if a["id"] in self.formed:
                continue
            waiting.add(a["id"])
            if not running > 2:  # before the gang: skein's master, and the AM's container once admitted
                most = self.held_waiting.get(a["id"], (0, 0))
                self.held_waiting[a["id"]] = (max(most[0], max(running, 0)),
                                              max(most[1], max(int(a.get("allocatedMB", 0)), 0)))
        return int(metrics["allocatedMB"]), int(metrics["totalMB"]), waiting

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                used, total, waiting = self._local() if self.backend == "local" else self._yarn()
            except Exception as e:  # noqa: BLE001 - a missed sample is not a failed run
                log(f"  sample failed: {e}")
                continue
            self.rows.append({"t": time.time(), "used_mb": used, "total_mb": total, "waiting": sorted(waiting)})

    def idle_while_waiting(self) -> tuple[float, float]:
        """(GB x s of memory idle while some job waited, that as a share of the cluster's memory
        over the time some job waited)."""
        idle = span = 0.0
        for a, b in zip(self.rows, self.rows[1:]):
            if a["waiting"]:
                dt = b["t"] - a["t"]
                idle += max(0, a["total_mb"] - a["used_mb"]) * dt / 1024
                span += a["total_mb"] * dt / 1024
        return idle, (idle / span if span else 0.0)


# ------------------------------------------------------------------ runs

def at_once(k: int, submit: Callable[[int], T]) -> list[tuple[float, T]]:
    """``submit(i)`` for each i below ``k``, each from a thread of its own, all released at once:
    (when it was called, what it returned) for each, in order."""
    start = threading.Barrier(k)

    def one(i: int) -> tuple[float, T]:
        start.wait()
        return time.time(), submit(i)

    with ThreadPoolExecutor(k) as pool:
        return list(pool.map(one, range(k)))


def together(backend: str, seconds: int, k: int) -> float:
    """``k`` jobs submitted at once to the empty cluster, where all of them fit: seconds from the
    first submission to the last job's end. With ``k`` of ``ROOM`` it is one round of the ideal
    packing: the gangs that run side by side start side by side, on the same cores."""
    from tony_workflow.client import TonyClient, load_job
    client = TonyClient(backend)
    submitted = at_once(k, lambda i: client.submit(load_job(job(backend, f"gang-alone-{i}", seconds))))
    first = min(t for t, _ in submitted)
    ends = []
    for _, h in submitted:
        st = h.wait(poll_interval=0.5, timeout=900)
        if st.state != "SUCCEEDED":
            raise RuntimeError(f"a job of {k} alone ended {st.state}: {st.diagnostics}")
        ends.append(st.finished_at or time.time())
    with contextlib.suppress(Exception):  # an explanation beside the measurement
        for row in jobs_timeline([h.app_id for _, h in submitted],
                                 {h.app_id: _times(backend, h.app_id) for _, h in submitted}, first):
            log(f"  {k} alone: {row}")
    return max(ends) - first


def bare(backend: str, seconds: int, k: int) -> float:
    """``k`` of the same gang without the runtime, started at once: seconds from the first start to
    the last end."""
    import subprocess
    t0 = time.time()
    if backend == "local":
        procs = [subprocess.Popen(["sleep", str(seconds)]) for _ in range(4 * k)]
        for proc in procs:
            proc.wait()
        return time.time() - t0
    import skein

    from tony_workflow.client import TonyClient
    yarn = TonyClient("yarn")
    spec = skein.ApplicationSpec(
        name="gang-bare", queue="default", max_attempts=1,
        services={"am": skein.Service(resources=skein.Resources(memory=512, vcores=1), script=f"sleep {seconds}",
                                      instances=1),
                  "worker": skein.Service(resources=skein.Resources(memory=1024, vcores=1), script=f"sleep {seconds}",
                                          instances=3)})
    submitted = at_once(k, lambda _: yarn.backend.client.submit(spec))
    t0 = min(t for t, _ in submitted)
    ends = []
    for _, app_id in submitted:
        while True:
            report = yarn.backend.rm.app(app_id)
            if report is not None and report.state in ("FINISHED", "FAILED", "KILLED"):
                ends.append(report.finished_at or time.time())
                break
            time.sleep(0.5)
    return max(ends) - t0


def repetition(backend: str, seconds: int, ideal: float, n: int) -> dict[str, Any]:
    from tony_workflow.client import TonyClient, load_job
    client = TonyClient(backend)
    specs = [load_job(job(backend, f"gang-{i}", seconds)) for i in range(n)]
    with Sampler(backend, gang_containers=4) as sampler:
        t0 = time.time()
        submitted = at_once(n, lambda i: client.submit(specs[i]))
        handles = [h for _, h in submitted]
        sampler.apps = {h.app_id for h in handles}
        first = min(t for t, _ in submitted)
        deadline = first + max(3 * ideal, 300)
        finals = {}
        while len(finals) < n and time.time() < deadline:
            for h in handles:
                if h.app_id not in finals:
                    st = h.status()
                    if st.is_final:
                        finals[h.app_id] = st
            time.sleep(1)
        deadlocked = len(finals) < n
        if deadlocked:
            log(f"  deadlock or overrun: {n - len(finals)} jobs not final after {deadline - first:.0f} s; killing")
            for h in handles:
                if h.app_id not in finals:
                    try:
                        finals[h.app_id] = h.kill("benchmark: not done in 3 x the ideal packing", timeout=120)
                    except Exception as e:  # noqa: BLE001 - the others must still be killed
                        log(f"  kill {h.app_id}: {e}")
        for h in handles:  # the final status is written before the AM lets go: wait for all of it
            # whatever goes wrong, a job whose end cannot be read keeps the status seen last
            with contextlib.suppress(Exception):
                finals[h.app_id] = h.wait(poll_interval=0.5, timeout=120)
    ended = [finals[h.app_id].finished_at or time.time() for h in handles]
    submit_order = sorted((h.app_id for h in handles), key=lambda a: tuple(int(x) for x in a.split("_")[1:]))
    finish_order = [h.app_id for _, h in sorted(zip(ended, handles), key=lambda x: x[0])]
    late = {a: finish_order.index(a) - submit_order.index(a) for a in submit_order}
    makespan = max(ended) - first
    idle_gbs, idle_share = sampler.idle_while_waiting()
    try:
        times = {h.app_id: _times(backend, h.app_id) for h in handles}
        handed = handoffs(times)
    except Exception as e:  # noqa: BLE001 - the breakdown is an explanation, not the measurement
        log(f"  hand-offs not read: {e}")
        times, handed = {}, []
    held = list(sampler.held_waiting.values())
    return {"makespan_s": rnd(makespan, 1), "ratio": rnd(makespan / ideal, 3),
            "succeeded": sum(1 for s in finals.values() if s.state == "SUCCEEDED"), "deadlock": deadlocked,
            "max_places_late": max(late.values()), "places_late": [late[a] for a in submit_order],
            "idle_gb_s_while_waiting": rnd(idle_gbs, 1), "idle_share_while_waiting": rnd(idle_share, 3),
            "waiting_containers_max": max((c for c, _ in held), default=0),
            "waiting_mb_max": max((m for _, m in held), default=0),
            "submit_s": rnd(max(t for t, _ in submitted) - t0, 2), "samples": len(sampler.rows),
            "handoffs": handed, "jobs": jobs_timeline(submit_order, times, first)}


# ------------------------------------------------------------------ where a hand-off goes

#: The steps of a hand-off, from the end of the tasks of the job whose room the next one takes (their
#: containers' room is what the next gang needs) to the start of the next one's tasks, each from the
#: jobs' own records; and, beside them, how long that job took to end after its tasks (on YARN, to
#: the ResourceManager's end of it).
HANDOFF_STEPS = ("noticing", "am", "forming", "starting")
HANDOFF_SAID = {
    "noticing": "the next job seeing the room: the last task's end to its turn, at the gate or in its AM "
                "started first or next in line (YARN)",
    "am": "its ApplicationMaster starting: its turn to the AM started (the grant, the AM container's launch, "
          "the AM's process); none when its AM started first or next in line, before its turn",
    "forming": "its gang granted: the AM's start to the last of its containers",
    "starting": "its tasks starting: the gang granted to the last task's process running",
    "ending": "beside those, the job before ending: its last task's end to its end",
}


def _times(backend: str, app_id: str) -> dict[str, float | None]:
    """What one job's record (and the ResourceManager) say of when it did what."""
    from tony_workflow.client import TonyClient
    client = TonyClient(backend)
    rec = client.record(app_id) or {}
    timeline = rec.get("timeline") or []
    tasks = rec.get("tasks") or []
    am = next((t["ts"] for t in timeline if t["what"].startswith("ApplicationMaster attempt")), None)
    turn = next((t["ts"] for t in timeline if t["what"].startswith("its turn came")), None)
    formed = next((t["ts"] for t in timeline if t["what"].startswith("all ") and "containers granted" in t["what"]),
                  None)
    started = [t.get("started_at") for t in tasks]
    done = [t.get("finished_at") for t in tasks]
    ended = rec.get("finished_at")
    accepted = None
    if backend == "yarn":
        report = client.backend.rm.app(app_id)
        if report is not None and report.finished_at:
            ended = report.finished_at
        accepted = report.started_at if report is not None else None
    return {"accepted": accepted, "am": am, "turn": turn, "formed": formed, "running": max(started) if started and all(started) else None,
            "tasks_done": max(done) if done and all(done) else None, "ended": ended}


def jobs_timeline(order: list[str], times: dict[str, dict[str, float | None]], first: float) -> list[dict[str, Any]]:
    """Each job's marks (:func:`_times`), in submission order, as seconds after the first submission."""
    return [{"app": a, **{k: (None if v is None else rnd(v - first, 2)) for k, v in times[a].items()}}
            for a in order if a in times]


def handoffs(times: dict[str, dict[str, float | None]]) -> list[dict[str, float]]:
    """Each hand-off of a repetition: for every job that waited for its gang, the job whose tasks
    ended last before its gang formed (the room it took), and the steps between the two; ``times``
    are each job's marks (:func:`_times`)."""
    out = []
    for app, t in times.items():
        if t["formed"] is None or t["running"] is None or t["am"] is None:
            continue  # it did not wait: no hand-off
        before = [(p["tasks_done"], a) for a, p in times.items()
                  if a != app and p["tasks_done"] and p["ended"] and p["tasks_done"] < t["formed"]]
        if not before:
            continue
        prev = times[max(before)[1]]
        td = prev["tasks_done"]
        turn = max(t["turn"] or td, td)  # no gate (the embedded cluster): nothing to notice before the AM
        marks = [td, turn, max(t["am"], turn), t["formed"], t["running"]]
        row = {step: rnd(max(0.0, b - a), 2) for step, a, b in zip(HANDOFF_STEPS, marks, marks[1:])}
        row["total"] = rnd(marks[-1] - marks[0], 2)
        row["ending"] = rnd(prev["ended"] - prev["tasks_done"], 2)
        out.append(row)
    return out


def packing(first_round: float, alone: float, n: int) -> float:
    """The ideal packing of ``n`` jobs with room for ``ROOM``: a first round of ``ROOM`` started
    side by side on the empty cluster, then each later round as one job alone, from the instant
    the round before ends."""
    return first_round + (n / ROOM - 1) * alone


def run_backend(backend: str, reps: int, seconds: int, n: int, quick: bool = False) -> dict[str, Any]:
    # two of each in a quick run, three otherwise: one after the repetitions
    rounds = [together(backend, seconds, ROOM) for _ in range(1 if quick else 2)]
    alones = [together(backend, seconds, 1) for _ in range(1 if quick else 2)]
    ideal = packing(statistics.median(rounds), statistics.median(alones), n)
    log(f"{backend}: {ROOM} jobs at once on the empty cluster {[round(a, 1) for a in rounds]} s, one alone "
        f"{[round(a, 1) for a in alones]} s; ideal packing of {n}: {ideal:.1f} s")
    rows = []
    for r in range(reps):
        row = repetition(backend, seconds, ideal, n)
        log(f"{backend} repetition {r + 1}/{reps}: {row}")
        rows.append(row)
    rounds.append(together(backend, seconds, ROOM))
    alones.append(together(backend, seconds, 1))
    ideal = packing(statistics.median(rounds), statistics.median(alones), n)
    ideal_alone = n * statistics.median(alones) / ROOM
    bare_rounds = [bare(backend, seconds, ROOM) for _ in range(2 if quick else 3)]
    bares = [bare(backend, seconds, 1) for _ in range(2 if quick else 3)]
    outside = packing(statistics.median(bare_rounds), statistics.median(bares), n)
    log(f"{backend}: the same gang without the runtime, {ROOM} at once {[round(b, 1) for b in bare_rounds]} s, "
        f"one alone {[round(b, 1) for b in bares]} s; ideal packing {outside:.1f} s")
    for row in rows:
        row["ratio"] = rnd(row["makespan_s"] / ideal, 3)
        row["ratio_alone"] = rnd(row["makespan_s"] / ideal_alone, 3)
        row["ratio_outside"] = rnd(row["makespan_s"] / outside, 3)
    worst = max(r["ratio"] for r in rows)
    handed = [h for r in rows for h in r["handoffs"]]
    handoff = {step: rnd(statistics.median(h[step] for h in handed), 2) for step in (*HANDOFF_STEPS, "total", "ending")} \
        if handed else {}
    if handoff:
        log(f"{backend}: a hand-off's median steps (s): {handoff}")
    late = max(r["max_places_late"] for r in rows)
    deadlocks = sum(1 for r in rows if r["deadlock"] or r["succeeded"] < n)
    return {"round_s": [rnd(a, 1) for a in rounds], "alone_s": [rnd(a, 1) for a in alones], "ideal_s": rnd(ideal, 1),
            "ideal_alone_s": rnd(ideal_alone, 1), "rows": rows,
            "bare_round_s": [rnd(b, 1) for b in bare_rounds], "bare_s": [rnd(b, 1) for b in bares],
            "ideal_outside_s": rnd(outside, 1),
            "ratio_outside_median": rnd(statistics.median(r["ratio_outside"] for r in rows), 3),
            "ratio_alone_worst": max(r["ratio_alone"] for r in rows),
            "round_over_bare": rnd(statistics.median(rounds) / statistics.median(bare_rounds), 3),
            "alone_over_bare": rnd(statistics.median(alones) / statistics.median(bares), 3),
            "round_over_alone": rnd(statistics.median(rounds) / statistics.median(alones), 3),
            "makespan_s_median": rnd(statistics.median(r["makespan_s"] for r in rows), 1),
            "ratio_median": rnd(statistics.median(r["ratio"] for r in rows), 3), "ratio_worst": worst,
            "max_places_late": late, "deadlocks": deadlocks, "handoff_median_s": handoff, "handoffs": len(handed),
            "handoff_said": HANDOFF_SAID,
            "goal_met": worst <= GOAL_RATIO and deadlocks == 0 and late <= GOAL_LATE}


def result_of(backend: str, run: dict[str, Any], reps: int, n: int) -> dict[str, Any]:
    where = "embedded cluster" if backend == "local" else "mini cluster"
    return {"metric": f"makespan of {n} jobs submitted at once, room for {ROOM} ({where})", "unit": "s",
            "value": run["makespan_s_median"], "floor": run["ideal_s"], "ratio": run["ratio_median"],
            "goal": f"every run <= {GOAL_RATIO} x ideal, 0 deadlocks in {reps}, none > {GOAL_LATE} places late",
            **run, "params": {"jobs": n, "room": ROOM, "reps": reps, "sleep_s": SLEEP_S if reps > 1 else None,
                              "local_memory": LOCAL_MEMORY, "nm_memory_mb": NM_MEMORY_MB, "nm_vcores": NM_VCORES}}


def main() -> int:
    ap = common.parser("gang_packing", __doc__)
    ap.add_argument("--backend", choices=["local", "yarn", "both"], default="both")
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default 10; --quick 1)")
    ap.add_argument("--minicluster", default=None, help="reuse the mini cluster running in this directory")
    args = ap.parse_args()
    reps = args.reps or (1 if args.quick else 10)
    seconds = 5 if args.quick else SLEEP_S
    n = 4 if args.quick else JOBS
    host = common.host_info()
    if args.backend in ("local", "both"):
        with common.tony_home("tony-bench-gang-", cluster={"tony.local.memory": LOCAL_MEMORY}):
            run = run_backend("local", reps, seconds, n, args.quick)
        common.write_result(args, "gang_packing", result_of("local", run, reps, n), host)
    if args.backend in ("yarn", "both"):
        if common.skipped_without_minicluster(args, "gang_packing_yarn",
                                              "makespan of jobs submitted at once (mini cluster)", host):
            return 0
        with common.minicluster(args.minicluster, nodemanagers=2, nm_memory_mb=NM_MEMORY_MB, nm_vcores=NM_VCORES):
            run = run_backend("yarn", reps, seconds, n, args.quick)
        common.write_result(args, "gang_packing_yarn", result_of("yarn", run, reps, n), host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
