"""history_server: the history server's pages with 10,000 jobs in the job history.

A local job history is filled with N records (``--jobs``, 10,000; 500 with ``--quick``) written
as the AM writes them (:meth:`JobHistory.write`): jobs of 20 users, from 47 Airflow DAGs and 20
Azkaban flows, a tenth of them failed, each with its configuration, two tasks and a timeline.
Then ``tony history serve`` runs over it, as a user would start it, and each page is asked for
over HTTP with its owner's token:

* the first list page after the start (the index is built: every record read once);
* warm, ``--reps`` times each: the list's first page (50 jobs), a filtered one (one DAG's failed
  jobs), a deep one (offset 9,000 of the whole list) and one job's page (its record, its
  configuration, its advice over the earlier runs of its task).

Floor: the same bytes from outside the runtime: each page's HTML saved once and served by the
standard library's ``http.server`` from a directory, asked for the same way: what answering that
page costs any server that does no work for it. Goals: every warm page within 250 ms at 10,000
jobs, and the list's first page within 10x its floor.
"""
from __future__ import annotations

import http.server
import os
import re
import shutil
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import common
import requests
from common import log, rnd

GOAL_MS, GOAL_RATIO = 250.0, 10.0
T0 = 1_790_000_000.0


def fill(history_dir: Path, jobs: int) -> float:
    """Writes ``jobs`` records; returns the seconds it took."""
    from tony_workflow.history import JobHistory, build_record
    from tony_workflow.storage import LocalStorage

    history = JobHistory(LocalStorage(history_dir), retention_s=0)
    started = time.monotonic()
    for n in range(1, jobs + 1):
        state = "FAILED" if n % 10 == 0 else "SUCCEEDED"
        if n % 3:
            context = {"source": "airflow", "dag_id": f"dag{n % 47}", "dag_run_id": f"run{n // 50}",
                       "task_id": "train", "map_index": "-1"}
        else:
            context = {"source": "azkaban", "project": "ml", "flow_id": f"flow{n % 20}", "execution_id": str(n),
                       "job_id": "train"}
        begin = T0 + n * 30
        status = {"application_id": f"application_1790000000000_{n:04d}", "name": f"job-{n % 97}", "state": state,
                  "started_at": begin, "finished_at": begin + 600, "backend": "local", "context": context,
                  "tasks": [{"type": "worker", "index": i, "state": state, "exit_code": 0 if state == "SUCCEEDED" else 1,
                             "metrics": {"max_rss_mb": 900.0 + i, "cpu_percent": 80.0}} for i in range(2)]}
        events = [{"event": "session_started", "ts": begin, "session": 0},
                  {"event": "session_finished", "ts": begin + 600, "session": 0, "state": state}]
        record = build_record(status, events, user=f"user{n % 20}",
                              conf={"tony.worker.instances": "2", "tony.worker.memory": "2g",
                                    "tony.application.view-acls": "*" if n % 7 == 0 else ""},
                              requested={"worker": {"memory_mb": 2048, "vcores": 1, "gpus": 0}})
        history.write(record)
        if n % 1000 == 0:
            log(f"{n} records written")
    return time.monotonic() - started


def timed_get(session: requests.Session, url: str, **kw) -> tuple[float, requests.Response]:
    t = time.perf_counter()
    r = session.get(url, timeout=120, **kw)
    return (time.perf_counter() - t) * 1000, r


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        return


def main() -> int:
    ap = common.parser("history_server", __doc__)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    jobs = 500 if args.quick else args.jobs
    reps = 5 if args.quick else args.reps
    host = common.host_info()
    with common.tony_home("tony-bench-history-") as home:
        log(f"writing {jobs} records")
        fill_s = fill(home / "history", jobs)
        serve = subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", "history", "serve", "--port", "0"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=common.REPO,
                                 env={**os.environ, "PYTHONPATH": str(common.REPO)})
        static = Path(tempfile.mkdtemp(prefix="tony-bench-pages-"))
        floor_server = None
        try:
            link = serve.stdout.readline().strip()
            if not link.startswith("http://"):
                raise RuntimeError("tony history serve did not start: " + serve.stderr.read()[-2000:])
            base, token = link.split("/?token=")
            session = requests.Session()
            session.headers["Authorization"] = f"Bearer {token}"
            app = f"application_1790000000000_{jobs - 3:04d}"
            pages = {"list": "/", "filtered": "/?dag=dag7&state=FAILED", "deep": f"/?offset={jobs * 9 // 10}",
                     "job": f"/jobs/{app}"}
            cold_ms, first = timed_get(session, base + "/")
            total = re.search(r"of (\d+)</p>", first.text)
            if first.status_code != 200 or not total or int(total.group(1)) != jobs:
                raise RuntimeError(f"the list does not show {jobs} jobs: {first.status_code} {first.text[:300]}")
            runtime: dict[str, dict] = {}
            for name, path in pages.items():
                times, body = [], b""
                for _ in range(reps):
                    ms, r = timed_get(session, base + path)
                    if r.status_code != 200:
                        raise RuntimeError(f"{path}: {r.status_code} {r.text[:300]}")
                    times.append(ms)
                    body = r.content
                (static / f"{name}.html").write_bytes(body)
                runtime[name] = {"median_ms": rnd(statistics.median(times), 1), "max_ms": rnd(max(times), 1),
                                 "bytes": len(body)}
                log(f"{name}: median {runtime[name]['median_ms']} ms over {reps}, {len(body)} bytes")
            handler = lambda *a, **k: _Quiet(*a, directory=str(static), **k)
            floor_server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
            threading.Thread(target=floor_server.serve_forever, daemon=True).start()
            floor_base = f"http://127.0.0.1:{floor_server.server_address[1]}"
            floor: dict[str, dict] = {}
            plain = requests.Session()
            for name in pages:
                times = [timed_get(plain, f"{floor_base}/{name}.html")[0] for _ in range(reps)]
                floor[name] = {"median_ms": rnd(statistics.median(times), 1)}
        finally:
            if floor_server is not None:
                floor_server.shutdown()
            serve.terminate()
            try:
                serve.wait(30)
            except subprocess.TimeoutExpired:
                serve.kill()
            shutil.rmtree(static, ignore_errors=True)
    worst = max(r["median_ms"] for r in runtime.values())
    ratio = runtime["list"]["median_ms"] / max(floor["list"]["median_ms"], 0.1)
    result = {"metric": "list page, warm, median ms", "unit": "ms", "value": runtime["list"]["median_ms"],
              "floor": floor["list"]["median_ms"], "ratio": rnd(ratio, 2),
              "goal": f"every warm page <= {GOAL_MS:.0f} ms at {jobs} jobs; list <= {GOAL_RATIO:.0f}x floor",
              "goal_met": worst <= GOAL_MS and ratio <= GOAL_RATIO, "jobs": jobs, "reps": reps,
              "fill_s": rnd(fill_s, 1), "first_list_after_start_ms": rnd(cold_ms, 1), "runtime": runtime,
              "floor_pages": floor, "worst_warm_ms": worst}
    common.write_result(args, "history_server", result, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
