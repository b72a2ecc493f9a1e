"""Shared plumbing of the benchmark scripts: arguments, result files, isolated local clusters.

Every script is run as ``python bench/<name>.py [--quick] [--json] [--out DIR]``. It writes
``DIR/<name>.json`` (``bench/results`` by default) and, with ``--json``, prints a one-line summary
as the last line of stdout. ``report.py`` turns the result files into ``docs/benchmarks.md``.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
EXAMPLES = REPO / "examples"

if str(REPO) not in sys.path:  # the scripts run from anywhere, without an install of the package
    sys.path.insert(0, str(REPO))

SUMMARY_KEYS = ("metric", "value", "floor", "ratio", "goal", "goal_met")

# What every benchmark job sets.
LOCAL_CONF = {"tony.task.tensorboard.enabled": "false"}

# The benchmarks' local cluster (its tony-site.xml): small enough that 64 tasks and their AM fit
# any machine; the trivial commands never come close.
CLUSTER_CONF = {
    "tony.local.gpus": "0",
    "tony.local.memory": "16g",
    # 2 cores x 64 = 128 vcores: room for the AM and 64 one-vcore tasks on a 2-core machine.
    "tony.local.vcore-oversubscription": "64",
}


def log(msg: str) -> None:
    """Progress goes to stderr so that stdout's last line stays the JSON summary."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parser(name: str, doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=f"bench/{name}.py", description=doc.strip().splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a reduced run, as a smoke check")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON on stdout's last line")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("TONY_BENCH_RESULTS") or RESULTS),
                    help="directory of the result file (default bench/results)")
    return ap


def host_info() -> dict[str, Any]:
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "loadavg_start": [round(x, 2) for x in os.getloadavg()], **runtime_revision()}


def runtime_revision() -> dict[str, Any]:
    """The last commit that changed the runtime, and whether its files differ from it: results
    from different revisions of the runtime are not comparable (commits elsewhere do not matter)."""
    import subprocess
    try:
        head = subprocess.run(["git", "log", "-1", "--format=%h", "--", "tony_workflow"], cwd=REPO,
                              capture_output=True, text=True, timeout=10, check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "tony_workflow"], cwd=REPO,
                               capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"runtime_commit": head or None, "runtime_modified": bool(dirty)}


def median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def rnd(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def write_result(args: argparse.Namespace, name: str, result: dict[str, Any], host: dict[str, Any]) -> Path:
    """Writes ``<out>/<name>.json`` atomically and prints the summary (JSON last, with --json)."""
    missing = [k for k in SUMMARY_KEYS if k not in result]
    if missing:
        raise KeyError(f"result of {name} lacks {missing}")
    host = {**host, "loadavg_end": [round(x, 2) for x in os.getloadavg()]}
    doc = {"name": name, "quick": bool(args.quick),
           "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "command": " ".join([f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]]), "host": host, **result}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    os.replace(tmp, path)
    log(f"{name}: {result['metric']} = {result['value']} (floor {result['floor']}, ratio {result['ratio']}); "
        f"goal {result['goal']}: {'met' if result['goal_met'] else 'MISSED'}  -> {path}")
    if args.json:
        summary = {k: result[k] for k in SUMMARY_KEYS}
        summary.update(name=name, unit=result.get("unit"), quick=bool(args.quick), results_file=str(path))
        print(json.dumps(summary, default=str), flush=True)
    return path


# ------------------------------------------------------------------ local cluster

def kill_all(handles, why: str = "benchmark over") -> None:
    """Kills every job of ``handles`` (a job that cannot be killed is said, and the rest still are)."""
    for h in handles:
        try:
            h.kill(why, timeout=60)
        except Exception as e:  # noqa: BLE001 - the rest must still be killed
            log(f"  kill {h.app_id}: {e}")


def kill_leftovers(home: Path, grace: float = 5.0) -> None:
    """Kills supervisors, AMs and containers still running under ``home``: only what this benchmark started.
    An AM that is finishing on its own gets ``grace`` seconds first (it writes its final files)."""
    pids: list[int] = []
    for am_json in [*home.glob("local/apps/*/supervisor.json"), *home.glob("local/apps/*/am.json")]:
        with contextlib.suppress(ValueError, KeyError, OSError):
            pids.append(int(json.loads(am_json.read_text())["pid"]))
    for pid_file in home.glob("local/apps/*/containers/*/pid"):
        with contextlib.suppress(ValueError, OSError):
            pids.append(int(pid_file.read_text()))
    ours = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            if home.as_posix() in " ".join(p.cmdline()) or _env_mentions(p, home):
                ours.append(p)
    psutil.wait_procs(ours, timeout=grace)
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            if home.as_posix() not in " ".join(root.cmdline()) and not _env_mentions(root, home):
                continue  # the pid was reused by something that is not ours
            procs += [root, *root.children(recursive=True)]
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGCONT)
            p.kill()
    psutil.wait_procs(procs, timeout=5)


def processes_of(home: Path) -> list[psutil.Process]:
    """Live processes started for jobs under ``home`` (their environment names it), found by
    scanning the machine: what a finished job must not leave behind."""
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.pid != os.getpid() and p.status() != psutil.STATUS_ZOMBIE and _env_mentions(p, home):
                found.append(p)
    return found


def _env_mentions(proc: psutil.Process, home: Path) -> bool:
    with contextlib.suppress(psutil.Error):
        return proc.environ().get("TONY_HOME") == str(home)
    return False


@contextlib.contextmanager
def tony_home(prefix: str = "tony-bench-", cluster: dict[str, str] | None = None) -> Iterator[Path]:
    """A fresh ``TONY_HOME`` (its own ledger, so nothing else on the machine queues with us), whose
    local cluster is configured with :data:`CLUSTER_CONF` and ``cluster``."""
    from tony_workflow.hadoop import site_xml

    saved = {k: os.environ.get(k) for k in ("TONY_HOME", "TONY_CONF_DIR")}
    home = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["TONY_HOME"] = str(home)
    (home / "conf").mkdir()
    (home / "conf" / "tony-site.xml").write_text(site_xml({**CLUSTER_CONF, **(cluster or {})}))
    os.environ["TONY_CONF_DIR"] = str(home / "conf")
    try:
        yield home
    finally:
        kill_leftovers(home)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(home, ignore_errors=True)


def job_text(name: str, command: str | None, tasks: dict[str, dict], conf: dict[str, str] | None = None,
             am_memory: str = "128m", **fields: Any) -> str:
    """A JSON job spec (load_job takes it as text)."""
    spec: dict[str, Any] = {"name": name, "am": {"memory": am_memory, "vcores": 1}, "tasks": tasks,
                            "conf": {**LOCAL_CONF, **(conf or {})}, **fields}
    if command is not None:
        spec["command"] = command
    return json.dumps(spec)


def events(handle) -> list[dict]:
    from tony_workflow.events import read_events
    return list(read_events(handle.backend.app_dir(handle.app_id) / "events.jsonl"))


def wait_for(pred: Callable[[], Any], timeout: float, interval: float = 0.05, what: str = "condition") -> Any:
    deadline = time.time() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.time() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(interval)


def task_stdout(handle, task_id: str) -> str:
    """Every attempt's stdout of one task, oldest first."""
    out = []
    for key, path in handle.logs(task_id).items():
        if key.split("#")[0].endswith("stdout") and path.exists():
            out.append(path.read_text(errors="replace"))
    return "".join(out)


def user_process(pid: int, marker: str) -> psutil.Process:
    """The process under ``pid`` whose command line mentions ``marker`` (the user's script)."""
    root = psutil.Process(pid)
    for p in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            if any(marker in part for part in p.cmdline()):
                return p
    raise LookupError(f"no process running {marker} under pid {pid}")


# ------------------------------------------------------------------ mini cluster

def minicluster_missing() -> str | None:
    """Why the Hadoop mini cluster cannot run here, or None."""
    from tony_workflow import minicluster
    try:
        minicluster.find_java()
    except minicluster.MiniClusterError as e:
        return str(e)
    if not (minicluster.hadoop_lib_dir() / ".tony-pom-sha256").exists() and not shutil.which("mvn"):
        return "no Maven to fetch the Hadoop jars, and no jars cached"
    return None


def skipped_without_minicluster(args: argparse.Namespace, name: str, metric: str, host: dict[str, Any]) -> bool:
    """When the mini cluster cannot run here, writes ``name``'s result as skipped, saying why, and
    returns True."""
    missing = minicluster_missing()
    if missing:
        write_result(args, name, {"metric": metric, "unit": "s", "value": None, "floor": None, "ratio": None,
                                  "goal": "", "goal_met": False, "skipped": missing}, host)
    return bool(missing)


def isolation_missing() -> str | None:
    """Why an isolated mini cluster (a mount namespace of its own) cannot run here, or None."""
    import subprocess
    try:
        done = subprocess.run(["unshare", "--mount", "--", "true"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return f"unshare cannot run: {e}"
    return None if done.returncode == 0 else "unshare --mount is refused here"


@contextlib.contextmanager
def minicluster(reuse: str | None = None, **start: Any) -> Iterator[dict]:
    """A running mini cluster with the client environment set: the one in ``reuse`` (a directory
    given by --minicluster or TONY_BENCH_MINICLUSTER) if it runs, else a fresh one (``start``: the
    arguments of :func:`tony_workflow.minicluster.start`), stopped after."""
    from tony_workflow import minicluster as mc
    reuse = reuse or os.environ.get("TONY_BENCH_MINICLUSTER")
    info = mc.status(reuse) if reuse else None
    started = None
    if info is None:
        started = Path(tempfile.mkdtemp(prefix="tony-bench-mc-"))
        log(f"starting a mini cluster in {started}")
        t0 = time.time()
        info = mc.start(started, **start)
        log(f"mini cluster up in {time.time() - t0:.1f} s")
    saved = dict(os.environ)
    os.environ.update(mc.client_env(info))
    try:
        yield info
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if started is not None:
            mc.stop(started)
            shutil.rmtree(started, ignore_errors=True)
