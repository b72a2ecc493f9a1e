"""launch: from submit to all N user processes started, on the local backend.

For N = 4, 16, 64 the same trivial user command runs N times two ways, interleaved in one run:

* floor: the N commands spawned directly by this process (``bash -c CMD``, as the executor runs it);
* runtime: ``TonyClient("local").submit(...)`` of a job with N workers running CMD.

CMD is a Python one-liner that records the moment it starts (a file named after ``TASK_INDEX``),
so both ways are timed to the same event: the user process running. Under the runtime that is
after the cluster spec was delivered. The AM's event log gives the phases in between.

Also measured: how long a Python process takes to start and listen on a port, bare, with the
standard library's HTTP server, and with the AM's imports: the part of the runtime's launch that
is a process for the AM, whatever the AM does.

Goal: runtime <= 1.5 x floor at N = 16.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common
from common import log, median, rnd

GOAL_N = 16
GOAL_RATIO = 1.5

# Writes its start time under a temporary name and renames it: a reader never sees half a number.
CMD = ("python -c \"import os,time; t=repr(time.time()); p='{marks}/'+os.environ['TASK_INDEX']; "
       "open(p+'.t','w').write(t); os.rename(p+'.t',p)\"")


def read_marks(d: Path, n: int) -> list[float] | None:
    files = [d / str(i) for i in range(n)]
    if not all(f.exists() for f in files):
        return None
    return [float(f.read_text()) for f in files]


def wait_marks(h, marks: Path, n: int, timeout: float = 300) -> list[float] | str:
    """Polls the marks often (a cheap stat) and the AM rarely: asking it for status is load too."""
    deadline = time.time() + timeout
    next_status = time.time() + 1.0
    while time.time() < deadline:
        got = read_marks(marks, n)
        if got:
            return got
        if time.time() > next_status:
            if h.status().is_final:
                return read_marks(marks, n) or "final"
            next_status = time.time() + 1.0
        time.sleep(0.01)
    raise TimeoutError(f"{n} user processes not started within {timeout} s")


def run_direct(n: int) -> dict:
    marks = Path(tempfile.mkdtemp(prefix="launch-direct-"))
    cmd = CMD.format(marks=marks)
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    t0 = time.time()
    procs = [subprocess.Popen(["bash", "-c", cmd], env={**os.environ, "TASK_INDEX": str(i), "PATH": path},
                              stdin=subprocess.DEVNULL) for i in range(n)]
    spawned = time.time()
    for p in procs:
        p.wait()
    got = read_marks(marks, n)
    shutil.rmtree(marks, ignore_errors=True)
    if got is None or any(p.returncode for p in procs):
        raise RuntimeError(f"direct spawn of {n} failed: {[p.returncode for p in procs]}")
    return {"seconds": max(got) - t0, "spawn_calls": spawned - t0}


# What any AM costs before it can answer: a Python process started and listening on a port. Three
# ways, each timed from Popen until a TCP connect succeeds: a bare socket, the standard library's
# HTTP server (the AM's), and that server after the AM's own imports.
_LISTEN = ("import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1',int(sys.argv[1]))); "
           "s.listen(); time.sleep(60)")
_HTTPD = ("import sys,http.server as h; "
          "h.ThreadingHTTPServer(('127.0.0.1',int(sys.argv[1])),h.BaseHTTPRequestHandler).serve_forever()")
_AM_IMPORTS = "import tony_workflow.am.master, tony_workflow.backends.local; " + _HTTPD


def until_listening(code: str) -> float:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.time()
    p = subprocess.Popen([sys.executable, "-c", code, str(port)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return time.time() - t0
            except OSError:
                if p.poll() is not None:
                    raise RuntimeError(f"listener exited with {p.returncode}")
                time.sleep(0.002)
    finally:
        p.kill()
        p.wait()


def am_process_floor(reps: int) -> dict:
    """Medians over ``reps`` interleaved runs, in seconds."""
    runs: dict[str, list[float]] = {"bare_listener": [], "http_server": [], "http_server_with_am_imports": []}
    for _ in range(reps):
        runs["bare_listener"].append(until_listening(_LISTEN))
        runs["http_server"].append(until_listening(_HTTPD))
        runs["http_server_with_am_imports"].append(until_listening(_AM_IMPORTS))
    return {k: rnd(median(v)) for k, v in runs.items()}


def run_runtime(n: int) -> dict:
    from tony_workflow.client import TonyClient, load_job
    marks = Path(tempfile.mkdtemp(prefix="launch-tony-"))
    text = common.job_text(f"bench-launch-{n}", CMD.format(marks=marks),
                           {"worker": {"instances": n, "memory": "64m", "vcores": 1}})
    with common.tony_home("tony-bench-launch-"):
        spec = load_job(text)
        client = TonyClient("local")
        t0 = time.time()
        h = client.submit(spec)
        submitted = time.time()
        got = wait_marks(h, marks, n)
        st = h.wait(poll_interval=0.2, timeout=120)
        if got == "final" or st.state != "SUCCEEDED":
            raise RuntimeError(f"launch job ended {st.state} before every task started: {st.diagnostics[-2000:]}")
        ev = common.events(h)
    shutil.rmtree(marks, ignore_errors=True)
    phases = {"submit_returned": submitted - t0}
    firsts = {"am_started": "am_started", "allocated": "allocated", "session_started": "session_started",
              "cluster_spec_ready": "cluster_spec_ready"}
    for key, name in firsts.items():
        ts = [e["ts"] for e in ev if e["event"] == name]
        phases[key] = (ts[0] - t0) if ts else None
    for state in ("LAUNCHED", "REGISTERED", "RUNNING"):
        ts = [e["ts"] for e in ev if e["event"] == "task_state" and e.get("state") == state]
        phases[f"all_{state.lower()}"] = (max(ts) - t0) if len(ts) >= n else None
    phases["user_started"] = max(got) - t0
    return {"seconds": max(got) - t0, "phases": {k: rnd(v) for k, v in phases.items()}}


def profile_once(n: int, out_dir: Path) -> dict:
    """One runtime launch with every AM/executor process under pyinstrument."""
    prof = out_dir / "profiles" / "launch"
    shutil.rmtree(prof, ignore_errors=True)
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "TONY_BENCH_PYINSTRUMENT")}
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(common.BENCH / "profiling"), str(common.REPO), *filter(None, [saved["PYTHONPATH"]])])
    os.environ["TONY_BENCH_PYINSTRUMENT"] = str(prof)
    try:
        run = run_runtime(n)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    files = sorted(prof.glob("*.txt"))
    ams = [f for f in files if f.name.startswith("am-")]
    executors = [f for f in files if f.name.startswith("executor-")]
    # Keep the AM and one executor: the executors' profiles are alike.
    for f in executors[1:]:
        f.unlink()
    keep = ams + executors[:1]
    return {"n": n, "seconds_under_profiler": rnd(run["seconds"]),
            "files": [str(f.relative_to(common.REPO)) if f.is_relative_to(common.REPO) else str(f) for f in keep],
            "excerpts": {f.name.split("-")[0]: excerpt(f) for f in keep}}


def excerpt(path: Path, lines: int = 40) -> str:
    text = path.read_text().splitlines()
    return "\n".join(text[:lines])


def main() -> int:
    ap = common.parser("launch", __doc__)
    ap.add_argument("--sizes", default=None, help="comma-separated N (default 4,16,64; --quick 4,16)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per N (default 3; --quick 1)")
    ap.add_argument("--profile", action="store_true", help="also profile one N=16 launch with pyinstrument")
    args = ap.parse_args()
    sizes = [int(x) for x in (args.sizes or ("4,16" if args.quick else "4,16,64")).split(",")]
    reps = args.reps or (1 if args.quick else 3)
    host = common.host_info()
    rows = []
    for n in sizes:
        direct, runtime = [], []
        for r in range(reps):
            # Interleaved, so that both ways see the same load on a shared machine.
            d = run_direct(n)
            t = run_runtime(n)
            direct.append(d)
            runtime.append(t)
            log(f"N={n} rep {r + 1}/{reps}: direct {d['seconds']:.3f} s, runtime {t['seconds']:.3f} s "
                f"(ratio {t['seconds'] / d['seconds']:.1f})")
        floor = median([d["seconds"] for d in direct])
        value = median([t["seconds"] for t in runtime])
        mid = sorted(runtime, key=lambda t: t["seconds"])[len(runtime) // 2]
        rows.append({"n": n, "floor": rnd(floor), "value": rnd(value), "ratio": rnd(value / floor, 2),
                     "direct_runs": [rnd(d["seconds"]) for d in direct],
                     "runtime_runs": [rnd(t["seconds"]) for t in runtime],
                     "phases_median_run": mid["phases"]})
    at = next((r for r in rows if r["n"] == GOAL_N), rows[-1])
    result = {
        "metric": f"submit -> {at['n']} user processes started (local backend)",
        "unit": "s", "value": at["value"], "floor": at["floor"], "ratio": at["ratio"],
        "goal": f"<= {GOAL_RATIO} x floor at N = {GOAL_N}", "goal_met": bool(at["ratio"] <= GOAL_RATIO),
        "params": {"sizes": sizes, "reps": reps, "command": CMD, "conf": common.LOCAL_CONF, "cluster": common.CLUSTER_CONF},
        "rows": rows,
    }
    log("a Python process started and listening (what any AM costs first)")
    result["am_process_floor"] = am_process_floor(5 if args.quick else 15)
    log(f"  {result['am_process_floor']}")
    if args.profile:
        log("profiling one N=16 launch")
        result["profile"] = profile_once(GOAL_N, args.out)
    common.write_result(args, "launch", result, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
