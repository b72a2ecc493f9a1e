"""am_scale: 1,000 simulated executors against the real ApplicationMaster.

The AM is ``tony_workflow.am.master.ApplicationMaster`` itself, run in a process of its own with a
cluster manager whose ``launch`` starts nothing: each of the N tasks it "launches" is played by a
simulated executor in other processes. A simulated executor does what the real one does over the
wire, with the real client (``tony_workflow.rpc.AMClient``), one session shared by two threads:
register, then a heartbeat thread at ``tony.task.heartbeat-interval-ms`` (1 s) while the main
thread long-polls for the cluster spec.

Measured: the time from the moment every client starts registering until all N hold the
cluster spec, and the AM process's CPU time over wall time (share of one core), during the
registration burst and in the steady state of N heartbeats per second.

Two floors, the same clients against a null gang server (a counter and an event instead of the
AM's logic, the same token check): once on the standard library's ``http.server``, once on the AM's
own transport (:class:`tony_workflow.am.server.AMHttpServer`). The AM against the second is what its
logic adds; the second against the first is what its wire saves.

Goal: all N hold the spec in < 2 s; the AM uses < 25 % of one core at N heartbeats per second.
"""
from __future__ import annotations

import argparse
import hmac
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import ClassVar

import common
import psutil
from common import log, rnd

GOAL_SPEC_S = 2.0
GOAL_CPU = 0.25
SCRIPT = Path(__file__).resolve()


def container_id(task_id: str) -> str:
    return "container_sim_" + task_id.replace(":", "_")


# ------------------------------------------------------------------ the AM under test

def serve_am(d: Path, n: int, profile_out: Path | None) -> int:
    from tony_workflow.am.master import ApplicationMaster
    from tony_workflow.backends.base import ClusterManager, Container
    from tony_workflow.client import load_job

    class SimulatedCluster(ClusterManager):
        """Every container exists only as a simulated executor in another process."""

        executor_argv: ClassVar[list[str]] = ["true"]

        def allocate(self, requests, cancel):
            return [self._make(r.task_id, r.memory_mb, r.vcores) for r in requests]

        def _make(self, task_id, memory_mb, vcores):
            return Container(id=container_id(task_id), task_id=task_id, memory_mb=memory_mb, vcores=vcores)

        def new_container(self, like):
            return self._make(like.task_id, like.memory_mb, like.vcores)

        def launch(self, container, argv, env):
            pass

        def poll(self, container):
            return None

        def kill(self, container, grace=5.0):
            pass

        def release(self):
            pass

        def log_url(self, container):
            return None

    secret = json.loads((d / "secret.json").read_text())
    spec = load_job(common.job_text("bench-am-scale", "true", {"worker": {"instances": n, "memory": "64m"}}))
    am = ApplicationMaster(spec, "application_0_0001", d, SimulatedCluster(),
                           token=secret["token"], view_token=secret["view_token"])
    if profile_out is None:
        return am.run()
    with ThreadProfiles(profile_out):
        return am.run()


class ThreadProfiles:
    """cProfile in every thread of this process (the AM answers each connection on a thread of
    its own; samplers that follow only the main thread would miss all of them). Timed with each
    thread's CPU clock, so threads blocked on a lock or a socket count for nothing: the profile
    says where the AM's CPU goes."""

    def __init__(self, out: Path):
        self.out = out
        self.profiles = []
        self.lock = threading.Lock()

    def _hook(self, *_):
        import cProfile
        sys.setprofile(None)
        p = cProfile.Profile(time.thread_time)
        with self.lock:
            self.profiles.append(p)
        p.enable()

    def __enter__(self):
        import cProfile
        threading.setprofile(self._hook)
        self.main = cProfile.Profile(time.thread_time)
        self.main.enable()
        return self

    def __exit__(self, *exc):
        import io
        import pstats
        self.main.disable()
        threading.setprofile(None)
        with self.lock:
            profiles = [self.main, *self.profiles]
        stats = None
        for p in profiles:
            try:
                p.create_stats()
            except Exception:  # noqa: BLE001, S112 - a profile that cannot be read is left out of the report
                continue
            stats = pstats.Stats(p) if stats is None else stats.add(p) or stats
        if stats is None:
            return False
        self.out.parent.mkdir(parents=True, exist_ok=True)
        stats.dump_stats(str(self.out.with_suffix(".pstats")))
        buf = io.StringIO()
        ps = pstats.Stats(str(self.out.with_suffix(".pstats")), stream=buf)
        ps.sort_stats("tottime").print_stats(30)
        ps.sort_stats("cumulative").print_stats(40)
        self.out.write_text(buf.getvalue())
        self.out.with_suffix(".pstats").unlink()  # the text is what anyone reads; the binary is big
        return False


# ------------------------------------------------------------------ the floor: a null gang server

def serve_null(d: Path, n: int) -> int:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlparse

    from tony_workflow.rpc import TOKEN_HEADER

    secret = json.loads((d / "secret.json").read_text())
    token = secret["token"].encode()
    lock = threading.Lock()
    registered: dict[str, str] = {}
    ready = threading.Event()
    done = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _send(self, code, body=None):
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _ok(self):
            if hmac.compare_digest(self.headers.get(TOKEN_HEADER, "").encode(), token):
                return True
            self._send(401, {"error": "token"})
            return False

        def do_GET(self):
            if not self._ok():
                return
            url = urlparse(self.path)
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            if ready.wait(min(float(q.get("wait", 0)), 60.0)):
                with lock:
                    cluster = {"worker": [registered[f"worker:{i}"] for i in range(n)]}
                return self._send(200, {"cluster": cluster, "session_id": 0, "chief": ["worker", 0]})
            self._send(204)

        def do_POST(self):
            if not self._ok():
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            if self.path == "/v1/register":
                with lock:
                    registered[body["task_id"]] = f"{body['host']}:{body['port']}"
                    if len(registered) == n:
                        ready.set()
            elif self.path == "/v1/kill":
                done.set()
            self._send(200, {"action": "continue"})

    class Server(ThreadingHTTPServer):
        request_queue_size = 1024  # before listen(), which the constructor calls (as the AM's)
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (d / "status.json").write_text(json.dumps({"state": "RUNNING"}))
    (d / "am.json").write_text(json.dumps({"address": f"127.0.0.1:{server.server_address[1]}", "pid": os.getpid()}))
    done.wait()
    server.shutdown()
    return 0


def serve_null_transport(d: Path, n: int) -> int:
    """The same null gang server's logic on the AM's own transport (``AMHttpServer``): what the
    AM's wire costs without the AM, so that the AM's ratio to it is what its logic adds."""
    from tony_workflow import protocol
    from tony_workflow.am.server import AMHttpServer

    secret = json.loads((d / "secret.json").read_text())
    lock = threading.Lock()
    registered: dict[str, str] = {}
    ready = threading.Event()
    done = threading.Event()

    def register(req):
        with lock:
            registered[req.task_id] = f"{req.host}:{req.port}"
            if len(registered) == n:
                ready.set()
        return 200, {"ok": True}

    def cluster_spec(q):
        if ready.wait(min(q.wait, 60.0)):
            with lock:
                cluster = {"worker": [registered[f"worker:{i}"] for i in range(n)]}
            return 200, {"cluster": cluster, "session_id": 0, "chief": ["worker", 0]}
        return 204, None

    def kill(_):
        done.set()
        return 200, {"ok": True}

    handlers = {r.name: (lambda _: (200, {"action": "continue"})) for r in protocol.ROUTES}
    handlers.update({protocol.REGISTER.name: register, protocol.CLUSTER_SPEC.name: cluster_spec,
                     protocol.KILL.name: kill})
    server = AMHttpServer("127.0.0.1", token=secret["token"], view_token=secret["view_token"], handlers=handlers,
                          status=lambda: {"state": "RUNNING"}, task_logs=dict)
    address = server.start()
    (d / "status.json").write_text(json.dumps({"state": "RUNNING"}))
    (d / "am.json").write_text(json.dumps({"address": address, "pid": os.getpid()}))
    done.wait()
    server.shutdown()
    return 0


# ------------------------------------------------------------------ simulated executors

def note_error(r: dict, e: Exception) -> None:
    r["errors"] += 1
    r.setdefault("error_samples", [])
    if len(r["error_samples"]) < 2:
        r["error_samples"].append(f"{time.time():.3f} {str(e)[:300]}")


def run_clients(d: Path, address: str, first: int, count: int, proc: int) -> int:
    from tony_workflow.rpc import AMClient, AMError, AMUnreachable

    threading.stack_size(256 * 1024)
    token = json.loads((d / "secret.json").read_text())["token"]
    go = threading.Event()
    stop = threading.Event()
    results: list[dict] = []
    settled: set[int] = set()  # holds the spec, or gave up
    lock = threading.Lock()

    def executor(i: int) -> None:
        r = {"i": i, "errors": 0, "heartbeats": [], "hb_latency": []}
        with lock:
            results.append(r)
        try:
            run_executor(i, r)
        except Exception as e:  # noqa: BLE001 - recorded: a client that dies must not hang the measurement
            r["failure"] = repr(e)
        finally:
            with lock:
                settled.add(i)

    def run_executor(i: int, r: dict) -> None:
        task_id = f"worker:{i}"
        am = AMClient(address, token, timeout=60)
        go.wait()
        start = json.loads((d / "go.json").read_text())["t0"]
        time.sleep(max(0.0, start - time.time()))
        r["t_register"] = time.time()
        # As an executor does, it registers until it is told to stop: on a loaded machine a burst
        # of connections may be refused for longer than any fixed number of tries would cover.
        while not stop.is_set():
            try:
                am.register(task_id, 0, "127.0.0.1", 20000 + i, pid=os.getpid(), container_id=container_id(task_id))
                break
            except AMUnreachable as e:
                note_error(r, e)
                stop.wait(0.2)
        r["t_registered"] = time.time()
        hb = threading.Thread(target=heartbeat, args=(am, task_id, r), daemon=True)
        hb.start()
        while not stop.is_set():
            try:
                reply = am.cluster_spec(task_id, 0, wait=20.0)
            except (AMUnreachable, AMError) as e:
                note_error(r, e)
                continue
            if reply:
                r["t_spec"] = time.time()
                r["spec_size"] = sum(len(v) for v in reply["cluster"].values())
                break
        with lock:
            settled.add(i)
        hb.join()

    def heartbeat(am, task_id: str, r: dict) -> None:
        # The executor's loop: Event.wait(interval), then one POST with what a real executor sends
        # every beat: freshly sampled figures (metrics every second) and the newest progress report.
        beats = 0
        while not stop.wait(1.0):
            t = time.time()
            beats += 1
            metrics = {"rss_mb": 100.0 + beats % 7, "max_rss_mb": 107.0, "avg_rss_mb": 103.5,
                       "cpu_percent": 95.0 + beats % 5, "processes": 2, "sampled_at": round(t, 3)}
            progress = {"step": beats * 10, "total": 100000, "metrics": {"loss": 1.0 / beats},
                        "reports": beats, "age": 0.1}
            try:
                am.heartbeat(task_id, 0, metrics=metrics, progress=progress)
            except (AMError, AMUnreachable) as e:
                note_error(r, e)
                continue
            r["heartbeats"].append(t)
            r["hb_latency"].append(time.time() - t)

    threads = [threading.Thread(target=executor, args=(i,), daemon=True) for i in range(first, first + count)]
    for t in threads:
        t.start()
    (d / f"ready-{proc}").write_text("1")
    while not (d / "go.json").exists():
        time.sleep(0.01)
    go.set()
    reported = False
    while not (d / "stop").exists():
        if not reported and len(settled) == count:
            (d / f"spec-{proc}").write_text(str(max((r.get("t_spec", 0) for r in results), default=0)))
            reported = True
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    (d / f"clients-{proc}.json").write_text(json.dumps(results))
    return 0


# ------------------------------------------------------------------ one measurement

def cpu_seconds(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def measure(kind: str, n: int, procs: int, window: float, profile_out: Path | None = None) -> dict:
    d = Path(tempfile.mkdtemp(prefix=f"am-scale-{kind}-"))
    (d / "secret.json").write_text(json.dumps({"token": secrets.token_urlsafe(24),
                                               "view_token": secrets.token_urlsafe(12)}))
    role = ["--role", kind, "--dir", str(d), "--n", str(n)]
    if profile_out is not None:
        role += ["--profile-out", str(profile_out)]
    server = subprocess.Popen([sys.executable, str(SCRIPT), *role], stdin=subprocess.DEVNULL,
                              stdout=open(d / "server.out", "wb"),  # noqa: SIM115 - the server process keeps it open
                              stderr=subprocess.STDOUT)
    clients: list[subprocess.Popen] = []
    try:
        def running():
            try:
                state = json.loads((d / "status.json").read_text()).get("state")
                return state == "RUNNING" and (d / "am.json").exists()
            except (OSError, ValueError):
                return False
        t_start = time.time()
        common.wait_for(running, timeout=300, interval=0.05, what=f"{kind} server RUNNING")
        session_setup = time.time() - t_start
        address = json.loads((d / "am.json").read_text())["address"]
        ps = psutil.Process(server.pid)
        per = -(-n // procs)
        for k in range(procs):
            first, count = k * per, min(per, n - k * per)
            if count <= 0:
                break
            clients.append(subprocess.Popen(
                [sys.executable, str(SCRIPT), "--role", "clients", "--dir", str(d), "--address", address,
                 "--first", str(first), "--count", str(count), "--proc", str(k)], stdin=subprocess.DEVNULL))
        common.wait_for(lambda: all((d / f"ready-{k}").exists() for k in range(len(clients))), timeout=120,
                        what="clients ready")
        t0 = time.time() + 0.5
        cpu0 = cpu_seconds(ps)
        (d / "go.json").write_text(json.dumps({"t0": t0}))
        try:
            common.wait_for(lambda: all((d / f"spec-{k}").exists() for k in range(len(clients))), timeout=120,
                            interval=0.05, what="every client holding the cluster spec")
        except TimeoutError as e:
            log(f"  {e}; measuring the steady state anyway")
        t_seen = time.time()
        cpu1 = cpu_seconds(ps)
        time.sleep(2.0)  # heartbeats spread out over the second after the burst
        wa, ca = time.time(), cpu_seconds(ps)
        time.sleep(window)
        wb, cb = time.time(), cpu_seconds(ps)
        threads_am = ps.num_threads()
        rss_mb = ps.memory_info().rss / 2**20
        (d / "stop").write_text("1")
        for c in clients:
            c.wait(timeout=120)
        results = []
        for k in range(len(clients)):
            results += json.loads((d / f"clients-{k}.json").read_text())
    finally:
        (d / "stop").write_text("1")
        for c in clients:
            if c.poll() is None:
                c.kill()
        stop_server(d, server)
    specs = [r["t_spec"] for r in results if "t_spec" in r]
    regs = [r["t_registered"] for r in results if "t_registered" in r]
    beats = [t for r in results for t in r["heartbeats"] if wa <= t <= wb]
    lat = sorted(x for r in results for t, x in zip(r["heartbeats"], r["hb_latency"]) if wa <= t <= wb)
    failures = sorted({r["failure"] for r in results if "failure" in r})
    samples = [x for r in results for x in r.get("error_samples", [])]
    out = {
        "kind": kind, "n": n, "clients_ok": len(specs),
        "clients_failed": sum(1 for r in results if "failure" in r), "failures": failures[:5],
        "errors": sum(r["errors"] for r in results), "error_samples": samples[:2],
        "spec_all_s": rnd(max(specs) - t0) if len(specs) == n else None,
        "spec_median_s": rnd(sorted(specs)[len(specs) // 2] - t0) if specs else None,
        "registered_all_s": rnd(max(regs) - t0) if len(regs) == n else None,
        "burst_cpu_share": rnd((cpu1 - cpu0) / max(1e-6, t_seen - t0)),
        "steady_cpu_share": rnd((cb - ca) / (wb - wa)),
        "steady_window_s": rnd(wb - wa, 1),
        "heartbeats_per_s": rnd(len(beats) / (wb - wa), 1),
        "hb_latency_ms_p50": rnd(1000 * lat[len(lat) // 2], 2) if lat else None,
        "hb_latency_ms_p99": rnd(1000 * lat[int(len(lat) * 0.99)], 2) if lat else None,
        "server_threads": threads_am, "server_rss_mb": rnd(rss_mb, 1),
        "session_setup_s": rnd(session_setup),
    }
    import shutil
    shutil.rmtree(d, ignore_errors=True)
    return out


def stop_server(d: Path, server: subprocess.Popen) -> None:
    from tony_workflow.rpc import AMClient, AMError, AMUnreachable
    try:
        address = json.loads((d / "am.json").read_text())["address"]
        token = json.loads((d / "secret.json").read_text())["token"]
        AMClient(address, token, timeout=10).kill("benchmark over")
    except (OSError, ValueError, KeyError, AMError, AMUnreachable):
        pass
    try:
        server.wait(timeout=120)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


# ------------------------------------------------------------------ main

def profile_am(args, n: int, window: float) -> dict:
    prof = args.out / "profiles" / "am_scale-am.txt"
    # cProfile slows every call several times over: a smaller N shows the same shape sooner.
    pn = min(n, 300)
    log(f"profiling the AM at N={pn} (cProfile with each thread's CPU clock)")
    run = measure("am", pn, args.procs, min(window, 5.0), profile_out=prof)
    name = str(prof.relative_to(common.REPO)) if prof.is_relative_to(common.REPO) else str(prof)
    return {"profile_run": run,
            "profile": {"n": pn, "file": name, "clock": "per-thread CPU time",
                        "excerpt": "\n".join(prof.read_text().splitlines()[:45]) if prof.exists() else None}}


def main() -> int:
    if "--role" in sys.argv:
        ap = argparse.ArgumentParser()
        ap.add_argument("--role", choices=["am", "null", "transport", "clients"])
        ap.add_argument("--dir", type=Path)
        ap.add_argument("--n", type=int)
        ap.add_argument("--address")
        ap.add_argument("--first", type=int)
        ap.add_argument("--count", type=int)
        ap.add_argument("--proc", type=int)
        ap.add_argument("--profile-out", type=Path)
        a = ap.parse_args()
        if a.role == "am":
            return serve_am(a.dir, a.n, a.profile_out)
        if a.role == "null":
            return serve_null(a.dir, a.n)
        if a.role == "transport":
            return serve_null_transport(a.dir, a.n)
        return run_clients(a.dir, a.address, a.first, a.count, a.proc)

    ap = common.parser("am_scale", __doc__)
    ap.add_argument("--n", type=int, default=None, help="simulated executors (default 1000; --quick 100)")
    ap.add_argument("--window", type=float, default=None, help="steady-state seconds (default 20; --quick 3)")
    ap.add_argument("--procs", type=int, default=None,
                    help="client processes, default 16 (--quick 4); fewer means more threads fighting over "
                         "one GIL: a slower harness")
    ap.add_argument("--profile", action="store_true", help="also run the AM once under cProfile (all threads)")
    ap.add_argument("--profile-only", action="store_true",
                    help="only the profile run, added to the existing result file")
    args = ap.parse_args()
    n = args.n or (100 if args.quick else 1000)
    window = args.window or (3.0 if args.quick else 20.0)
    args.procs = args.procs or (4 if args.quick else 16)
    host = common.host_info()
    if args.profile_only:
        path = args.out / "am_scale.json"
        doc = json.loads(path.read_text())
        doc.update(profile_am(args, n, window))
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        os.replace(tmp, path)
        log(f"profile added to {path}")
        return 0
    log(f"floor: null gang server on the standard library's http.server, {n} clients")
    floor = measure("null", n, args.procs, window)
    log(f"  {floor}")
    log(f"floor: null gang server on the AM's transport, {n} clients")
    transport = measure("transport", n, args.procs, window)
    log(f"  {transport}")
    log(f"AM: {n} simulated executors")
    am = measure("am", n, args.procs, window)
    log(f"  {am}")
    value = am["spec_all_s"]
    ok = (value is not None and value < GOAL_SPEC_S and am["steady_cpu_share"] < GOAL_CPU)
    result = {
        "metric": f"{n} executors registered -> all hold the cluster spec",
        "unit": "s", "value": value, "floor": floor["spec_all_s"],
        "ratio": rnd(value / floor["spec_all_s"], 2) if value and floor["spec_all_s"] else None,
        "goal": f"< {GOAL_SPEC_S} s to the spec and AM < {int(GOAL_CPU * 100)} % of one core at {n} heartbeats/s",
        "goal_met": bool(ok),
        "am_cpu_share": am["steady_cpu_share"], "floor_cpu_share": floor["steady_cpu_share"],
        # What the AM's logic adds over its own wire, and what its wire costs against http.server.
        "transport_cpu_share": transport["steady_cpu_share"],
        "logic_cpu_ratio": rnd(am["steady_cpu_share"] / max(1e-6, transport["steady_cpu_share"]), 2),
        "transport_cpu_ratio": rnd(transport["steady_cpu_share"] / max(1e-6, floor["steady_cpu_share"]), 2),
        "params": {"n": n, "client_processes": args.procs, "window_s": window, "heartbeat_interval_s": 1.0},
        "am": am, "null_server": floor, "null_transport": transport,
    }
    if args.profile:
        result.update(profile_am(args, n, window))
    common.write_result(args, "am_scale", result, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
