"""airflow_log: how soon a line a job prints is in the Airflow task's log.

A real Airflow (metadata DB in SQLite, ``airflow api-server``, tasks run by the LocalExecutor through
``dag.test(use_executor=True)``, a real ``airflow triggerer`` for the deferred task) runs one DAG
run at a time on the embedded cluster. Each run's job has one worker printing ``--lines`` lines
stamped with the wall clock, one every ``--every`` seconds, then ending. Three ways of getting those
lines into the task's log:

* floor: a plain Airflow task (``@task``) that submits the same job and reads its stdout by the
  least a reader can do: every second, the bytes after the last read of the file itself, each
  whole line logged; the job's status every 5 s, to know when it ended;
* runtime: ``TonyOperator`` (status every 5 s, output every second, :mod:`tony_workflow.client.output`);
* runtime, deferred: ``TonyOperator(deferrable=True)``, the lines written by its trigger in the
  triggerer (a log file of its own that Airflow shows with the task's).

A thread of this script reads the task's log files as Airflow writes them (every 50 ms) and, for
each stamped line, takes the delay from its stamp to its first sight there. Reported: median and
95th percentile per way, every line once (each stamp's number seen once, none missing), and the
runtime's median over the floor's.

Goal: every line once, median delay under 3 s, for both of the runtime's ways.
"""
from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import common
from common import log, median, rnd

GOAL_DELAY_S = 3.0
STAMPED = re.compile(rb"t=(\d+\.\d+) i=(\d+)")

PRINTER = ("import sys, time\n"
           "for i in range(int(sys.argv[1])):\n"
           "    print(f't={time.time():.3f} i={i}', flush=True)\n"
           "    time.sleep(float(sys.argv[2]))\n")

RUN_DAG = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("dag_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
dr = module.dag.test(use_executor=True)
print("DAGRUN", dr.state, dr.run_id, flush=True)
"""

OPERATOR_DAG = """
from datetime import datetime
from airflow.sdk import DAG
from airflow_provider.operators import TonyOperator
with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    TonyOperator(task_id="train", job_spec={job!r}, poll_interval=5, tensorboard_wait=0, deferrable={deferrable!r})
"""

FLOOR_DAG = """
from datetime import datetime
from airflow.sdk import DAG, task


@task(task_id="train")
def tail():
    # The least a reader can do in an Airflow task: the job's stdout file, every second.
    import logging, time
    from tony_workflow.client import TonyClient, load_job
    say = logging.getLogger("floor")
    client = TonyClient("local")
    handle = client.submit(load_job({job!r}))
    offset, held, status, next_status = 0, b"", None, 0.0
    while True:
        if time.monotonic() >= next_status:
            status, next_status = handle.status(), time.monotonic() + 5
        task = next((t for t in status.tasks if t.task_id == "worker:0" and t.container_id), None)
        data = b""
        if task is not None:
            path = client.backend.app_dir(handle.app_id) / "containers" / str(task.container_id) / "stdout"
            if path.exists():
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    data = fh.read()
        offset += len(data)
        held += data
        done, _, held = held.rpartition(b"\\n")
        for line in done.decode().split("\\n") if done else []:
            say.info("[worker:0] %s", line)
        if status.is_final and not data:
            return status.state
        time.sleep(1.0)


with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    tail()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Airflow:
    """An Airflow home of its own: the metadata DB migrated, an api-server, and a triggerer."""

    def __init__(self, root: Path, tony_home: Path):
        self.home, self.dags = root / "airflow", root / "airflow" / "dags"
        self.dags.mkdir(parents=True)
        port = _free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.env = {**os.environ, "AIRFLOW_HOME": str(self.home), "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
                    "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home}/airflow.db",
                    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
                    "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32), "AIRFLOW__API__BASE_URL": self.base,
                    "TONY_HOME": str(tony_home), "PYTHONPATH": str(common.REPO)}
        self.procs: list[subprocess.Popen] = []
        log("airflow: migrating its metadata DB")
        subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=self.env, check=True,
                       capture_output=True, timeout=600)
        self.start("api-server", "--port", str(port))
        import requests

        def up() -> bool:
            try:
                return requests.get(f"{self.base}/api/v2/version", timeout=5).status_code == 200
            except requests.RequestException:
                return False
        common.wait_for(up, timeout=240, interval=1, what="the api-server answering")
        self.start("triggerer")

    def start(self, *argv: str) -> subprocess.Popen:
        out = open(self.home / f"{argv[0]}.log", "ab")  # noqa: SIM115 - the process keeps it
        p = subprocess.Popen([sys.executable, "-m", "airflow", *argv], env=self.env, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        return p

    def run(self, dag_id: str, text: str, timeout: float) -> str:
        """Runs the DAG once; its run's state."""
        path = self.dags / f"{dag_id}.py"
        path.write_text(text)
        done = subprocess.run([sys.executable, "-c", RUN_DAG, str(path)], env=self.env, capture_output=True,
                              text=True, timeout=timeout, start_new_session=True, check=False)
        said = [ln for ln in done.stdout.splitlines() if ln.startswith("DAGRUN ")]
        if not said:
            raise RuntimeError(f"the DAG {dag_id} did not run:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        return said[-1].split()[1]

    def stop(self) -> None:
        from tony_workflow.process import group_members
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
            for member in group_members(p.pid):
                member.kill()


class LogReader(threading.Thread):
    """Reads every log file of a DAG's task as Airflow writes it, and notes when each stamped
    line is first there."""

    def __init__(self, folder: Path):
        super().__init__(daemon=True)
        self.folder, self.stop = folder, threading.Event()
        self.seen: list[tuple[int, float, float]] = []  # (number, stamp, first sight)
        self.offsets: dict[Path, int] = {}
        self.held: dict[Path, bytes] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            self.look()
            self.stop.wait(0.05)
        self.look()

    def look(self) -> None:
        now = time.time()
        for path in sorted(self.folder.rglob("attempt=*.log*")) if self.folder.exists() else []:
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.offsets.get(path, 0))
                    data = fh.read()
            except OSError:
                continue
            self.offsets[path] = self.offsets.get(path, 0) + len(data)
            done, _, self.held[path] = (self.held.get(path, b"") + data).rpartition(b"\n")
            for line in done.split(b"\n") if done else []:
                found = STAMPED.search(line)
                if found:
                    self.seen.append((int(found.group(2)), float(found.group(1)), now))


def measure(af: Airflow, way: str, script: Path, lines: int, every: float) -> dict:
    job = {"name": f"airflow-log-{way}", "framework": "standalone",
           "tasks": {"worker": {"instances": 1, "memory": "256m", "vcores": 1,
                                "command": f"python3 {script} {lines} {every}"}},
           "conf": {"tony.am.memory": "128m", "tony.task.tensorboard.enabled": "false"}}
    dag_id = f"airflow_log_{way}"
    text = (FLOOR_DAG.format(dag_id=dag_id, job=job) if way == "floor" else
            OPERATOR_DAG.format(dag_id=dag_id, job=job, deferrable=way == "deferred"))
    reader = LogReader(af.home / "logs" / f"dag_id={dag_id}")
    reader.start()
    log(f"{way}: a DAG run whose job prints {lines} lines, one each {every:g} s")
    try:
        state = af.run(dag_id, text, timeout=600 + lines * every)
    finally:
        reader.stop.set()
        reader.join(timeout=30)
    numbers = sorted(n for n, _, _ in reader.seen)
    delays = sorted(arrival - stamp for _, stamp, arrival in reader.seen)
    out = {"way": way, "dag_run": state, "lines": len(numbers), "every_line_once": numbers == list(range(lines)),
           "delay_median_s": rnd(median(delays), 3) if delays else None,
           "delay_p95_s": rnd(delays[int(0.95 * (len(delays) - 1))], 3) if delays else None,
           "delay_max_s": rnd(delays[-1], 3) if delays else None}
    log(f"  {way}: {out}")
    return out


def main() -> int:
    ap = common.parser("airflow_log", __doc__)
    ap.add_argument("--lines", type=int, default=None, help="lines each job prints (default 120; --quick 30)")
    ap.add_argument("--every", type=float, default=0.5, help="seconds between two lines (default 0.5)")
    args = ap.parse_args()
    lines = args.lines or (30 if args.quick else 120)
    host = common.host_info()
    goal = f"every line once, median delay < {GOAL_DELAY_S:g} s (TonyOperator, sync and deferred)"
    metric = "median delay from a line's print to the Airflow task log (TonyOperator, sync; s)"
    runs = {}
    with common.tony_home("tony-bench-airflow-log-", common.CLUSTER_CONF) as home:
        script = home / "printer.py"
        script.write_text(PRINTER)
        af = Airflow(Path(tempfile.mkdtemp(prefix="tony-bench-airflow-")), home)
        try:
            for way in ("floor", "runtime", "deferred"):
                runs[way] = measure(af, way, script, lines, args.every)
        finally:
            af.stop()
    floor, sync, deferred = runs["floor"], runs["runtime"], runs["deferred"]
    ratio = (rnd(sync["delay_median_s"] / floor["delay_median_s"], 2)
             if sync["delay_median_s"] and floor["delay_median_s"] else None)
    met = all(r["every_line_once"] and r["dag_run"] == "success" and r["delay_median_s"] is not None
              and r["delay_median_s"] < GOAL_DELAY_S for r in (sync, deferred))
    common.write_result(args, "airflow_log", {
        "metric": metric, "unit": "s", "value": sync["delay_median_s"], "floor": floor["delay_median_s"],
        "ratio": ratio, "goal": goal, "goal_met": met,
        "deferred_delay_median_s": deferred["delay_median_s"],
        "deferred_ratio": (rnd(deferred["delay_median_s"] / floor["delay_median_s"], 2)
                           if deferred["delay_median_s"] and floor["delay_median_s"] else None),
        "params": {"lines": lines, "every_s": args.every}, "runs": runs}, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
