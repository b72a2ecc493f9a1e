"""yarn_submit: submit to RUNNING on the Hadoop mini cluster, against a bare skein hello-world app.

Both ways go through one warm skein driver (the one ``TonyClient("yarn")`` holds), on the same
cluster, alternately, after one unmeasured warm-up of each:

* floor: a skein application with one ``hello`` service (``echo hello world; sleep``): from
  ``submit`` to the hello container RUNNING, the user's code running in its first container;
* runtime: ``TonyClient("yarn").submit`` of a job with two workers running ``sleep``: from the
  call to the job's own AM answering with state RUNNING (its session started: the AM's code
  running in its container, and the task containers requested).

Also recorded: when YARN itself reports each application RUNNING (skein's AM registered), and
when the job's tasks all run their user process.

Pairs run back to back; the ratio is the median of the pairs' ratios.

Goal: runtime <= 1.3 x floor.
"""
from __future__ import annotations

import sys
import time

import common
from common import log, median, rnd

GOAL = 1.3
POLL = 0.1


def bare_skein(client) -> dict:
    import skein
    spec = skein.ApplicationSpec(
        name="bench-hello", queue="default", max_attempts=1,
        services={"hello": skein.Service(resources=skein.Resources(memory=128, vcores=1),
                                         script="echo hello world; sleep 600")})
    t0 = time.time()
    app_id = client.submit(spec)
    submitted = time.time()
    marks: dict[str, float] = {}
    app = None
    try:
        while True:
            if "app_running" not in marks and str(client.application_report(app_id).state) == "RUNNING":
                marks["app_running"] = time.time()
                app = client.connect(app_id, wait=False)
            if app is not None and app.get_containers(services=["hello"], states=["RUNNING"]):
                marks["running"] = time.time()
                break
            if time.time() - t0 > 300:
                raise TimeoutError(f"{app_id} not running after 300 s")
            time.sleep(POLL)
    finally:
        client.kill_application(app_id)
    return {"app_id": app_id, "seconds": rnd(marks["running"] - t0), "submit_call_s": rnd(submitted - t0),
            "yarn_running_s": rnd(marks["app_running"] - t0)}


def tony_job(yarn) -> dict:
    from tony_workflow.client import load_job
    text = common.job_text("bench-yarn-submit", "sleep 600", {"worker": {"instances": 2, "memory": "512m"}},
                           am_memory="512m")
    spec = load_job(text)
    t0 = time.time()
    h = yarn.submit(spec)
    submitted = time.time()
    marks: dict[str, float] = {}
    try:
        while True:
            if "yarn_running" not in marks and str(yarn.backend.client.application_report(h.app_id).state) == "RUNNING":
                marks["yarn_running"] = time.time()
            if "running" not in marks and yarn.backend.endpoint(h.app_id) is not None:
                st = h.status()
                if st.state == "RUNNING" and st.tasks:  # the AM's own status: a session started
                    marks["running"] = time.time()
            if "running" in marks:
                st = h.status()
                if st.tasks and all(t.state == "RUNNING" for t in st.tasks):
                    marks["tasks_running"] = time.time()
                    break
            if time.time() - t0 > 300:
                raise TimeoutError(f"{h.app_id} not running after 300 s: {marks}")
            time.sleep(POLL)
    finally:
        h.kill(timeout=60)
    out = {"app_id": h.app_id, "seconds": rnd(marks["running"] - t0), "submit_call_s": rnd(submitted - t0),
           "yarn_running_s": rnd(marks.get("yarn_running", marks["running"]) - t0),
           "tasks_running_s": rnd(marks["tasks_running"] - t0)}
    out.update(am_phases(h.app_id, t0))
    return out


def am_phases(app_id: str, t0: float) -> dict:
    """The AM's own clock, from its event log in the mini cluster's container directory (same
    machine, same clock): when the AM process got going, relative to the submit call."""
    import json
    import os
    from pathlib import Path
    root = Path(os.environ.get("HADOOP_CONF_DIR", "/nonexistent")).parent / "data"
    for path in root.glob(f"**/appcache/{app_id}/*/events.jsonl"):
        try:
            ev = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except (OSError, ValueError):
            continue
        first = {}
        for e in ev:
            first.setdefault(e["event"], e["ts"])
        if "am_started" in first:
            return {"am_started_s": rnd(first["am_started"] - t0),
                    "session_started_s": rnd(first.get("session_started", first["am_started"]) - t0)}
    return {}


def main() -> int:
    ap = common.parser("yarn_submit", __doc__)
    ap.add_argument("--reps", type=int, default=None, help="alternating pairs (default 7; --quick 1)")
    ap.add_argument("--minicluster", default=None, help="reuse the mini cluster running in this directory")
    args = ap.parse_args()
    reps = args.reps or (1 if args.quick else 7)
    host = common.host_info()
    missing = common.minicluster_missing()
    if missing:
        result = {"metric": "submit -> RUNNING on the mini cluster", "unit": "s", "value": None, "floor": None,
                  "ratio": None, "goal": f"<= {GOAL} x floor", "goal_met": False, "skipped": missing}
        common.write_result(args, "yarn_submit", result, host)
        return 0
    from tony_workflow.client import TonyClient
    with common.minicluster(args.minicluster):
        yarn = TonyClient("yarn")
        client = yarn.backend.client
        log("warm-up (not measured)")
        bare_skein(client)
        tony_job(yarn)
        bare, tony = [], []
        for r in range(reps):
            for way in (["bare", "tony"] if r % 2 == 0 else ["tony", "bare"]):
                (bare if way == "bare" else tony).append(bare_skein(client) if way == "bare" else tony_job(yarn))
            log(f"rep {r + 1}/{reps}: skein hello {bare[-1]['seconds']} s, tony {tony[-1]['seconds']} s "
                f"(tasks running {tony[-1]['tasks_running_s']} s)")
    floor = median([b["seconds"] for b in bare])
    value = median([t["seconds"] for t in tony])
    # Pairs ran back to back: the median of their ratios cancels load that drifts between pairs.
    pairs = [t["seconds"] / b["seconds"] for b, t in zip(bare, tony)]
    ratio = median(pairs)
    result = {
        "metric": "submit -> RUNNING on the mini cluster (job's AM running its session)",
        "unit": "s", "value": rnd(value), "floor": rnd(floor), "ratio": rnd(ratio, 3),
        "goal": f"<= {GOAL} x floor (bare skein hello world)", "goal_met": bool(ratio <= GOAL),
        "ratio_of_medians": rnd(value / floor, 3), "pair_ratios": [rnd(x, 3) for x in pairs],
        "am_started_s": rnd(median([t.get("am_started_s") for t in tony])),
        "params": {"reps": reps, "poll_s": POLL},
        "tasks_running_s": rnd(median([t["tasks_running_s"] for t in tony])),
        "yarn_running_s": {"skein": rnd(median([b["yarn_running_s"] for b in bare])),
                           "tony": rnd(median([t["yarn_running_s"] for t in tony]))},
        "skein_runs": bare, "tony_runs": tony,
    }
    common.write_result(args, "yarn_submit", result, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
