"""yarn_submit: submit -> the user's command running in every task container, on the Hadoop mini
cluster, against a bare skein application starting the same containers.

What a user waits for is the time from ``submit`` until the command they gave runs in every
container of the gang. Both ways are timed to exactly that, by the processes themselves: each
container's command is ``date +%s.%N; exec sleep 600``, and the time it prints (into its
container's log, read from the mini cluster's log directory on this machine) is when it ran.

* floor: a bare skein application with one service of N instances, each container the size of
  the job's workers, running that command; nothing of this project in it. It pays what any YARN
  application pays: skein's uploads, YARN starting skein's master, the containers granted and
  launched.
* runtime: ``TonyClient("yarn").submit`` of a job with N workers running that command, its AM of
  TonY's default size (2 GB, larger than the workers: the shape whose request skein used to lose).

Both go through one warm skein driver (the one ``TonyClient("yarn")`` holds), on the same cluster,
alternately, after one unmeasured warm-up of each; the ratio is the median of the back-to-back
pairs' ratios. Also recorded: the submit call, when YARN reports each application RUNNING, and
the job's phases from its AM's event log.

The cluster is an isolated mini cluster where it can be (``--isolated``, the default where Linux
allows a mount namespace): its containers see nothing of this project, so every job brings its
runtime, as on a real cluster. What that costs is measured first: the first submission with no
runtime built on this machine nor cached in HDFS, against the next one, with both (the
runtime's size is recorded too).

Then the job's environment (``--environment``, the default on an isolated cluster): a job whose
source imports TensorFlow brings it (44 distributions, about 2.3 GB), timed the same way:

* in parts (what the runtime does): the first submission, nothing packed on this machine nor
  cached in HDFS nor on the node; the same job again, three times (everything cached; the median);
  the job after one small distribution changed (its part alone is new);
* as one archive of the whole environment (cluster-pack's way), cached in HDFS the same way: the
  first submission, and the job after the same one distribution changed (the whole archive is new).

And a cold command line: ``tony --backend yarn submit`` in a new process, with no tony process of
the user running, without a kept driver (``TONY_DRIVER_IDLE_S=0``: the process starts skein's JVM)
and with the driver a first command kept.

Goals: runtime <= 1.3 x floor; after one changed distribution <= 1.2 x a cached submission; a
cached submission of the environment <= 1.1 x the job without one; a cold CLI <= 1.3 x the floor.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import common
from common import log, median, rnd

GOAL = 1.3
COMMAND = "date +%s.%N; exec sleep 600"


def _data_root() -> Path:
    return Path(os.environ.get("HADOOP_CONF_DIR", "/nonexistent")).parent / "data"


def started_at(app_id: str, log_name: str, n: int, timeout: float = 300) -> list[float]:
    """When the command of each of the application's ``n`` containers started, from the first line
    each printed into ``log_name`` in its container's log directory."""
    deadline = time.time() + timeout
    while True:
        stamps = []
        # The NodeManagers' log directories only: their local directories hold every job's unpacked
        # files, which a walk would read through ten times a second (and which vanish under it).
        for path in _data_root().glob(f"tony/yarn-*/tony-logDir-nm-*/{app_id}/container_*/{log_name}"):
            for line in path.read_text(errors="replace").splitlines():
                try:
                    stamps.append(float(line.strip()))
                    break
                except ValueError:
                    continue
        if len(stamps) >= n:
            return sorted(stamps)
        if time.time() > deadline:
            raise TimeoutError(f"{app_id}: {len(stamps)} of {n} commands started after {timeout} s")
        time.sleep(0.1)


def yarn_running(rm, app_id: str, t0: float) -> float:
    while True:
        report = rm.app(app_id)
        if report is not None and report.state == "RUNNING":
            return time.time() - t0
        time.sleep(0.05)


def bare_skein(client, rm, n: int, memory_mb: int) -> dict:
    import skein
    spec = skein.ApplicationSpec(
        name="bench-floor", queue="default", max_attempts=1,
        services={"w": skein.Service(resources=skein.Resources(memory=memory_mb, vcores=1), script=COMMAND,
                                     instances=n)})
    t0 = time.time()
    app_id = client.submit(spec)
    submitted = time.time() - t0
    try:
        running = yarn_running(rm, app_id, t0)
        stamps = started_at(app_id, "w.log", n)
    finally:
        client.kill_application(app_id)
    return {"app_id": app_id, "seconds": rnd(stamps[-1] - t0), "first_s": rnd(stamps[0] - t0),
            "submit_call_s": rnd(submitted), "yarn_running_s": rnd(running)}


def tony_job(yarn, n: int, memory: str) -> dict:
    from tony_workflow.client import load_job
    text = common.job_text("bench-yarn-submit", COMMAND, {"worker": {"instances": n, "memory": memory}},
                           am_memory="2g")
    spec = load_job(text)
    t0 = time.time()
    h = yarn.submit(spec)
    submitted = time.time() - t0
    try:
        running = yarn_running(yarn.backend.rm, h.app_id, t0)
        stamps = started_at(h.app_id, "stdout", n)
        phases = am_phases(h.app_id, t0)
    finally:
        h.kill(timeout=60)
    return {"app_id": h.app_id, "seconds": rnd(stamps[-1] - t0), "first_s": rnd(stamps[0] - t0),
            "submit_call_s": rnd(submitted), "yarn_running_s": rnd(running), **phases}


def am_phases(app_id: str, t0: float) -> dict:
    """The AM's own clock, from its event log in the mini cluster's container directory (same
    machine, same clock): when it started, had its gang, and saw every task running."""
    for path in _data_root().glob(f"tony/yarn-*/tony-localDir-nm-*/usercache/*/appcache/{app_id}/*/events.jsonl"):
        try:
            events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except (OSError, ValueError):
            continue
        first: dict[str, float] = {}
        for e in events:
            first.setdefault(e["event"], e["ts"])
        if "am_started" in first:
            return {f"{k}_s": rnd(first[k] - t0) for k in ("am_started", "session_started", "gang_formed",
                                                          "cluster_spec_ready") if k in first} | {
                "adopted": "adopted" in first, "gang_released": "gang_released" in first,
                "requests_lost": "requests_lost" in first}
    return {}


def shipping(yarn, n: int, memory: str) -> dict:
    """The first submission with nothing built or cached (this machine's runtime archives moved
    aside, the user's HDFS cache emptied) against the next: the submit call and the command
    running in every container."""
    import os
    import shutil
    import tempfile

    from tony_workflow.backends.yarn.runtime import local_archives, runtime
    from tony_workflow.storage import open_storage
    aside = Path(tempfile.mkdtemp(prefix="tony-bench-runtime-"))
    for path in local_archives():
        shutil.move(str(path), aside / path.name)
    store = open_storage("hdfs:///", **yarn.backend.store_options())
    user = os.environ.get("HADOOP_USER_NAME") or __import__("getpass").getuser()
    for key in store.list(f"user/{user}/.tony/cache"):
        store.delete(f"user/{user}/.tony/cache/{key}")
    cold = tony_job(yarn, n, memory)
    warm = tony_job(yarn, n, memory)
    pack = runtime()
    return {"cold": cold, "warm": warm, "runtime_mb": rnd(pack.size / 1e6, 1), "distributions": pack.distributions,
            "shipped": yarn.backend.python is None}


TF_SOURCE = "import tensorflow as tf  # the job's environment: what its source imports\n"
#: The small distribution changed between two submissions (another build of the same version).
CHANGED = "termcolor"


def env_job(yarn, n: int, memory: str, src: Path) -> dict:
    """A job like :func:`tony_job`'s whose source imports TensorFlow: it brings its environment."""
    from tony_workflow.client import load_job
    spec = load_job({"name": "bench-yarn-env", "framework": "tensorflow", "command": COMMAND, "src_dir": str(src),
                     "am": {"memory": "2g", "vcores": 1}, "tasks": {"worker": {"instances": n, "memory": memory}},
                     "conf": {**common.LOCAL_CONF, "tony.task.tensorboard.enabled": "false"}})
    t0 = time.time()
    h = yarn.submit(spec)
    submitted = time.time() - t0
    try:
        stamps = started_at(h.app_id, "stdout", n, timeout=900)
    finally:
        h.kill(timeout=60)
    return {"app_id": h.app_id, "seconds": rnd(stamps[-1] - t0), "submit_call_s": rnd(submitted)}


def _changed(name: str):
    """A patch of the environment's parts under which distribution ``name`` is another build."""
    from tony_workflow.backends.yarn import environment
    real = environment._record_digest
    return lambda d, *described: real(d, *described) + (
        "-changed" if environment._canonical(d.metadata["Name"]) == name else "")


def _one_archive(real_plan):
    """``environment_plan`` as cluster-pack ships an environment: every distribution in one archive."""
    import hashlib

    from tony_workflow.backends.yarn import environment

    def plan(spec, say=None):
        parts = real_plan(spec, say)
        key = "env-whole-" + hashlib.sha256("".join(p.key for p in parts.parts).encode()).hexdigest()[:16]
        files = []
        for part in parts.parts:
            dist = environment.metadata.distribution(part.name)
            files.extend(environment._dist_files({part.name: dist}, ""))
        seen, unique = set(), []
        for path, name in files:
            if name not in seen:
                seen.add(name)
                unique.append((path, name))
        path = environment._pack(key, unique)
        parts.parts = [environment.Part("whole-environment", "1", key, path, path.stat().st_size)]
        return parts
    return plan


def environment_costs(yarn, n: int, memory: str) -> dict:
    """The environment's cases (see the module's docstring), each from a cold cache where it says."""
    import tempfile

    from tony_workflow.backends.yarn import environment
    src = Path(tempfile.mkdtemp(prefix="tony-bench-env-src-"))
    (src / "train.py").write_text(TF_SOURCE)
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="tony-bench-env-cache-")  # nothing packed here yet
    real_digest, real_plan = environment._record_digest, environment.environment_plan
    out: dict = {}
    try:
        out["parts_first"] = env_job(yarn, n, memory, src)
        log(f"  in parts, first: {out['parts_first']['seconds']} s")
        # One submission's time swings by a second with the driver's call alone: the median of three.
        cached = [env_job(yarn, n, memory, src) for _ in range(3)]
        out["parts_cached"] = {**sorted(cached, key=lambda r: r["seconds"])[1],
                               "runs": [r["seconds"] for r in cached], "submit_calls": [r["submit_call_s"] for r in cached]}
        environment._record_digest = _changed(CHANGED)
        out["parts_one_changed"] = env_job(yarn, n, memory, src)
        environment._record_digest = real_digest
        log(f"  in parts, cached: {out['parts_cached']['seconds']} s, {CHANGED} changed: "
            f"{out['parts_one_changed']['seconds']} s")
        plan = real_plan(environment_plan_spec(src, n, memory))  # packed already: what went
        out["distributions"], out["mb"] = len(plan.parts), rnd(plan.size / 1e6, 0)
        environment.environment_plan = _one_archive(real_plan)
        out["whole_first"] = env_job(yarn, n, memory, src)
        environment._record_digest = _changed(CHANGED)
        out["whole_one_changed"] = env_job(yarn, n, memory, src)
        log(f"  one archive, first: {out['whole_first']['seconds']} s, {CHANGED} changed: "
            f"{out['whole_one_changed']['seconds']} s")
    finally:
        environment._record_digest, environment.environment_plan = real_digest, real_plan
        if saved is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = saved
    return out


def environment_plan_spec(src: Path, n: int, memory: str):
    from tony_workflow.client import load_job
    return load_job({"name": "bench-yarn-env", "framework": "tensorflow", "command": COMMAND, "src_dir": str(src),
                     "tasks": {"worker": {"instances": n, "memory": memory}},
                     "conf": {"tony.task.tensorboard.enabled": "false"}})


def cold_cli(n: int, memory: str, kept: bool) -> dict:
    """``tony --backend yarn submit`` in a new process, timed to the command running in every
    container: without a kept driver, or with the one a first (unmeasured) command kept."""
    import subprocess
    import tempfile
    spec = Path(tempfile.mkdtemp(prefix="tony-bench-cli-")) / "job.json"
    spec.write_text(common.job_text("bench-yarn-cli", COMMAND, {"worker": {"instances": n, "memory": memory}},
                                    am_memory="2g"))
    # A skein directory of its own: no driver of another process (this one's) is found there.
    env = {**os.environ, "TONY_DRIVER_IDLE_S": "120" if kept else "0", "SKEIN_CONFIG": str(spec.parent / "skein")}
    tony = [sys.executable, "-m", "tony_workflow.client.cli", "--backend", "yarn"]

    def submit() -> tuple[str, float]:
        t0 = time.time()
        done = subprocess.run([*tony, "submit", str(spec)], capture_output=True, text=True, env=env, check=True)
        return done.stdout.strip().splitlines()[-1], t0

    if kept:
        first, _ = submit()
        subprocess.run([*tony, "kill", first], capture_output=True, env=env, check=False)
    app_id, t0 = submit()
    try:
        stamps = started_at(app_id, "stdout", n)
    finally:
        subprocess.run([*tony, "kill", app_id], capture_output=True, env=env, check=False)
    return {"app_id": app_id, "seconds": rnd(stamps[-1] - t0)}


def main() -> int:
    ap = common.parser("yarn_submit", __doc__)
    ap.add_argument("--reps", type=int, default=None, help="alternating pairs (default 7; --quick 1)")
    ap.add_argument("--workers", type=int, default=3, help="task containers of the job (default 3)")
    ap.add_argument("--minicluster", default=None, help="reuse the mini cluster running in this directory")
    ap.add_argument("--isolated", choices=["auto", "no"], default="auto",
                    help="an isolated mini cluster, whose jobs bring their runtime (default: where it can run)")
    ap.add_argument("--environment", action=argparse.BooleanOptionalAction, default=None,
                    help="time a job bringing TensorFlow's environment too (default: on an isolated cluster, "
                         "not with --quick)")
    args = ap.parse_args()
    reps = args.reps or (1 if args.quick else 7)
    n, memory_mb = args.workers, 256
    host = common.host_info()
    missing = common.minicluster_missing()
    metric = f"submit -> the command running in all {n} task containers (mini cluster)"
    if missing:
        result = {"metric": metric, "unit": "s", "value": None, "floor": None, "ratio": None,
                  "goal": f"<= {GOAL} x floor", "goal_met": False, "skipped": missing}
        common.write_result(args, "yarn_submit", result, host)
        return 0
    from tony_workflow.client import TonyClient
    isolated = args.isolated == "auto" and not args.minicluster and common.isolation_missing() is None
    with common.minicluster(args.minicluster, isolated=isolated):
        yarn = TonyClient("yarn")
        client, rm = yarn.backend.client, yarn.backend.rm
        log(f"what shipping costs ({'runtime shipped' if yarn.backend.python is None else 'nodes have the project'})")
        ship = shipping(yarn, n, f"{memory_mb}m")
        log(f"first submission {ship['cold']['submit_call_s']} s (all running {ship['cold']['seconds']} s), next "
            f"{ship['warm']['submit_call_s']} s ({ship['warm']['seconds']} s); runtime {ship['runtime_mb']} MB")
        log("warm-up (not measured)")
        bare_skein(client, rm, n, memory_mb)
        tony_job(yarn, n, f"{memory_mb}m")
        bare, tony = [], []
        for r in range(reps):
            for way in (["bare", "tony"] if r % 2 == 0 else ["tony", "bare"]):
                if way == "bare":
                    bare.append(bare_skein(client, rm, n, memory_mb))
                else:
                    tony.append(tony_job(yarn, n, f"{memory_mb}m"))
            log(f"rep {r + 1}/{reps}: skein {bare[-1]['seconds']} s, tony {tony[-1]['seconds']} s")
        log("a cold command line: without a kept driver, then with one")
        runs: dict[str, list[dict]] = {"no_kept_driver": [], "kept_driver": []}
        for r in range(3 if not args.quick else 1):  # alternately, each from a skein directory of its own
            for kept in ([False, True] if r % 2 == 0 else [True, False]):
                runs["kept_driver" if kept else "no_kept_driver"].append(cold_cli(n, f"{memory_mb}m", kept=kept))
        cli = {k: {"seconds": median([v["seconds"] for v in vs]), "runs": [v["seconds"] for v in vs]}
               for k, vs in runs.items()}
        log(f"  {cli}")
        env_costs = None
        if args.environment or (args.environment is None and isolated and not args.quick):
            log("the job's environment: TensorFlow's, in parts and as one archive")
            env_costs = environment_costs(yarn, n, f"{memory_mb}m")
    floor = median([b["seconds"] for b in bare])
    value = median([t["seconds"] for t in tony])
    # Pairs ran back to back: the median of their ratios cancels load that drifts between pairs.
    pairs = [t["seconds"] / b["seconds"] for b, t in zip(bare, tony)]
    ratio = median(pairs)
    goals = {"runtime <= 1.3 x floor": ratio <= GOAL,
             "cold CLI <= 1.3 x floor": cli["kept_driver"]["seconds"] <= GOAL * floor}
    if env_costs:
        cached, changed = env_costs["parts_cached"]["seconds"], env_costs["parts_one_changed"]["seconds"]
        env_costs["one_changed_over_cached"] = rnd(changed / cached, 3)
        env_costs["cached_over_no_environment"] = rnd(cached / value, 3)
        goals["one changed <= 1.2 x cached"] = changed <= 1.2 * cached
        goals["cached environment <= 1.1 x none"] = cached <= 1.1 * value
    result = {
        "metric": metric, "unit": "s", "value": rnd(value), "floor": rnd(floor), "ratio": rnd(ratio, 3),
        "goal": f"<= {GOAL} x floor (a bare skein application starting the same containers); "
                + "; ".join(list(goals)[1:]),
        "goal_met": all(goals.values()), "goals": goals, "ratio_of_medians": rnd(value / floor, 3),
        "cold_cli": cli, "cold_cli_over_floor": {k: rnd(v["seconds"] / floor, 3) for k, v in cli.items()},
        "environment": env_costs,
        "pair_ratios": [rnd(x, 3) for x in pairs],
        "params": {"reps": reps, "workers": n, "worker_memory_mb": memory_mb, "am_memory_mb": 2048,
                   "command": COMMAND, "isolated": isolated},
        "shipping": ship,
        "medians": {way: {k: rnd(median([x.get(k) for x in runs])) for k in
                          ("submit_call_s", "yarn_running_s", "first_s", "am_started_s", "gang_formed_s")
                          if any(x.get(k) is not None for x in runs)}
                    for way, runs in (("skein", bare), ("tony", tony))},
        "give_backs": sum(bool(t.get("gang_released")) for t in tony),
        "lost_requests": sum(bool(t.get("requests_lost")) for t in tony),
        "skein_runs": bare, "tony_runs": tony,
    }
    common.write_result(args, "yarn_submit", result, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
