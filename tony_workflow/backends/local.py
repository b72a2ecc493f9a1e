"""The embedded local cluster: containers are process groups on this machine.

There is no daemon. Cluster state lives under ``$TONY_HOME/local`` (default ``~/.tony/local``):
``cluster.json`` (the cluster's start time and the application counter) and ``ledger.json`` (who
holds which resources, and who waits), both changed only under an exclusive ``flock``. Every AM
allocates its whole gang (its own container plus all tasks) in one step, and waiting AMs are
served strictly first-come-first-served, so two jobs can never deadlock holding half of what they
need, and a big job is not starved by a stream of small ones. Entries of dead AMs are reclaimed.

How vcores are counted: memory and GPUs are never oversubscribed, but a vcore here is a share of a
core, not a core: the capacity is ``cores × tony.local.vcore-oversubscription`` (default 4; like
every ``tony.local.*`` setting it comes from ``$TONY_CONF_DIR/tony-site.xml``, never from a job), because
training tasks on one machine spend much of their time waiting on each other, and an AM plus a
3–4 task job must fit on a 2-core machine.

Processes (containers, AMs) are watched and killed through :mod:`tony_workflow.process`, which the
fork server and the executor use too.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from .. import process
from ..attempts import ATTEMPT_ENV, OWNER_ENV, RESULT_FILE
from ..errors import UnknownApplication
from ..forkserver import ForkServer, ForkServerGone
from ..retention import clean_now_and_then
from ..spec import JobSpec, LocalCapacity, LocalSettings, local_settings
from ..status import JobState, JobStatus, check_application_id
from .base import (
    AMEndpoint,
    AMIdentity,
    Backend,
    Capacity,
    ClusterManager,
    Container,
    ContainerRequest,
    NeverFits,
    Wait,
    check_fits,
    gang_requests,
    label_key,
)

__all__ = ["Inventory", "LocalBackend", "LocalClusterManager", "detect_gpus", "tony_home"]


def tony_home() -> Path:
    return Path(os.environ.get("TONY_HOME") or Path.home() / ".tony").expanduser()


def _write_private(path: Path, text: str) -> None:
    """Writes ``text`` to a new file only its owner can read or write."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def _link_or_copy(src: str, dst: str) -> None:
    """A hard link to ``src`` (the staged, read-only source), or a copy where links cannot be made."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _read_only(root: Path) -> None:
    """Takes the write bits off every file below ``root`` (directories stay writable)."""
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode & ~0o222)


def cluster_dir() -> Path:
    d = tony_home() / "local"
    (d / "apps").mkdir(parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def _locked_json(path: Path, default: dict) -> Iterator[dict]:
    """Read-modify-write of a JSON file under an exclusive lock on ``path.lock``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            try:
                data = json.loads(path.read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                data = json.loads(json.dumps(default))
            before = json.dumps(data, sort_keys=True)
            yield data
            if json.dumps(data, sort_keys=True) != before:
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
                os.replace(tmp, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def next_application_id() -> str:
    """``application_<cluster start ms>_<seq>``: YARN's shape, so YARN-id parsers work unchanged."""
    with _locked_json(cluster_dir() / "cluster.json", {}) as c:
        c.setdefault("cluster_timestamp", int(time.time() * 1000))
        c["next_seq"] = c.get("next_seq", 0) + 1
        return f"application_{c['cluster_timestamp']}_{c['next_seq']:04d}"


def detect_gpus() -> list[int]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [int(x) for x in out.split() if x.strip().isdigit()]


@dataclass
class Inventory:
    """What this machine offers to containers."""

    memory_mb: int
    vcores: int
    gpus: list[int]

    @classmethod
    def of(cls, capacity: LocalCapacity) -> Inventory:
        """The inventory ``capacity`` describes, asking the machine for what it leaves unset."""
        memory_mb = capacity.memory_mb or psutil.virtual_memory().total // (1024 * 1024)
        vcores = int((capacity.vcores or os.cpu_count() or 1) * capacity.oversubscription)
        gpus = list(capacity.gpus) if capacity.gpus is not None else detect_gpus()
        return cls(memory_mb, vcores, gpus)

    def check_fits(self, requests: list[ContainerRequest]) -> None:
        """Raises :class:`NeverFits` naming the key to change when the gang can never be placed.
        One machine: its largest node and its whole are the same."""
        offer = Capacity(self.memory_mb, self.vcores, len(self.gpus))
        check_fits(requests, offer, offer, node="this machine", cluster="this machine", hints=_HINTS)


# Where each amount of the embedded cluster comes from, so that an error says what to change.
_HINTS = {"memory_mb": "tony.local.memory in $TONY_CONF_DIR/tony-site.xml",
          "gpus": "tony.local.gpus in $TONY_CONF_DIR/tony-site.xml",
          "vcores": "cores × tony.local.vcore-oversubscription in $TONY_CONF_DIR/tony-site.xml"}

#: The local cluster's settings as the client read them at submission, beside the job's spec.
SETTINGS_FILE = "local-cluster.json"


def _wait_reason(requests: list[ContainerRequest], ahead: list[str], inv: Inventory, used_mem: int, used_vc: int,
                 free_gpus: int, holders: list[str]) -> str:
    """Why a gang waits on the embedded cluster: jobs ahead (first come, first served), or the
    resource that the jobs holding their gangs leave short."""
    tasks = [r for r in requests if r.task_id != "am"] or requests
    ttype = max(tasks, key=lambda r: (r.gpus, r.memory_mb, r.vcores)).task_id.split(":")[0]
    of_type = [r for r in tasks if r.task_id.split(":")[0] == ttype]
    r = of_type[0]
    shape = f"{r.memory_mb} MB, {r.vcores} vcore{'' if r.vcores == 1 else 's'}" + (f", {r.gpus} GPUs" if r.gpus else "")
    head = f"{ttype}: 0 of {len(of_type)} containers ({shape} each); blocked by "
    if ahead:
        shown = ", ".join(ahead[:3]) + (f" and {len(ahead) - 3} more" if len(ahead) > 3 else "")
        return head + f"{len(ahead)} job{'' if len(ahead) == 1 else 's'} ahead on the embedded cluster ({shown}), " \
                      "served first come, first served"
    held = f", held by {', '.join(holders[:3])}" + (f" and {len(holders) - 3} more" if len(holders) > 3 else "") \
        if holders else ""
    need_mem, need_vc = sum(q.memory_mb for q in requests), sum(q.vcores for q in requests)
    need_gpu = sum(q.gpus for q in requests)
    if need_gpu > free_gpus:
        return head + f"GPUs: the gang needs {need_gpu} at once and {free_gpus} of {len(inv.gpus)} are free{held}"
    if used_mem + need_mem > inv.memory_mb:
        return head + (f"memory: the gang needs {need_mem} MB at once and {inv.memory_mb - used_mem} MB of "
                       f"{inv.memory_mb} MB are free{held}")
    return head + (f"vcores: the gang needs {need_vc} at once and {inv.vcores - used_vc} of {inv.vcores} are free"
                   f"{held}")


def _app_seq(app_id: str) -> tuple[int, int]:
    _, ts, seq = app_id.split("_")
    return int(ts), int(seq)


def enqueue(ledger: dict, app_id: str, pid: int) -> None:
    """Queues in submission order (the application sequence), whichever AM reaches the ledger first."""
    ledger.setdefault("queue", []).append({"app": app_id, "pid": pid, "started": process.start_time(pid),
                                           "since": time.time()})
    ledger["queue"].sort(key=lambda q: _app_seq(q["app"]))


class LocalClusterManager(ClusterManager):
    """AM-side: the ledger, and containers as local process groups."""

    name = "local"

    def __init__(self, app_id: str, app_dir: Path, inventory: Inventory, owner_pid: int | None = None,
                 fork_server: bool = False, attempt: int = 1, owner_started: float | None = None):
        self.app_id = app_id
        self.app_dir = app_dir
        self.inventory = inventory
        # The job's resources are held by its supervisor, which outlives any one AM attempt.
        self.owner_pid = owner_pid or os.getpid()
        self.owner_started = owner_started if owner_pid else process.start_time(self.owner_pid)
        self.attempt = attempt
        self.ledger = cluster_dir() / "ledger.json"
        self._procs: dict[str, subprocess.Popen] = {}
        self._forked: dict[str, int] = {}  # container id -> pid, for containers the fork server started
        self._started_at: dict[str, float | None] = {}  # container id -> its first process's start time
        self._seq = 0
        self._lock = threading.Lock()
        self._forks: ForkServer | None = None
        if fork_server:
            # Forked from the AM itself while it has one thread; a process that already runs threads
            # starts it as a fresh interpreter, whose start then overlaps allocation.
            try:
                self._forks = ForkServer(inline=threading.active_count() == 1)
                self._forks.on_exit = lambda pid: self.container_changed()
            except OSError:
                self._forks = None

    @classmethod
    def for_app(cls, app_dir: Path, spec: JobSpec) -> tuple[LocalClusterManager, AMIdentity]:
        """The AM's cluster manager for the application in ``app_dir``, and the tokens the client
        wrote for it when it submitted."""
        app_id = app_dir.name
        settings = LocalSettings.from_dict(json.loads((app_dir / SETTINGS_FILE).read_text()))
        owner, _, started = (os.environ.get(OWNER_ENV) or "").partition(":")
        cluster = cls(app_id, app_dir, Inventory.of(settings.capacity), fork_server=settings.fork_server,
                      owner_pid=int(owner) if owner else None,
                      owner_started=float(started) if started not in ("", "None") else None,
                      attempt=int(os.environ.get(ATTEMPT_ENV) or 1))
        secret = json.loads((app_dir / "am.secret").read_text())
        return cluster, AMIdentity(app_id, secret["token"], secret["view_token"], "127.0.0.1")

    def _purge(self, L: dict) -> None:
        L.setdefault("allocations", {})
        L.setdefault("queue", [])
        for app, a in list(L["allocations"].items()):
            if not process.alive(a["pid"], a.get("started")):
                del L["allocations"][app]
        L["queue"] = [q for q in L["queue"] if process.alive(q["pid"], q.get("started"))]

    def allocate(self, requests: list[ContainerRequest], cancel: threading.Event) -> list[Container]:
        self.inventory.check_fits(requests)
        inv = self.inventory
        try:
            while True:
                with _locked_json(self.ledger, {}) as L:
                    self._purge(L)
                    held = L["allocations"].get(self.app_id)
                    if held is not None:
                        # An earlier attempt's gang, kept by the job's supervisor while it cleared
                        # what that attempt left: this attempt takes it over as it is.
                        L["queue"] = [q for q in L["queue"] if q["app"] != self.app_id]
                        return self._containers(requests, list(held["gpus"]))
                    if not any(q["app"] == self.app_id for q in L["queue"]):
                        enqueue(L, self.app_id, self.owner_pid)
                    used_mem = sum(a["memory_mb"] for a in L["allocations"].values())
                    used_vc = sum(a["vcores"] for a in L["allocations"].values())
                    used_gpu = {g for a in L["allocations"].values() for g in a["gpus"]}
                    free_gpu = [g for g in inv.gpus if g not in used_gpu]
                    head = L["queue"][0]["app"] == self.app_id
                    need_gpu = sum(r.gpus for r in requests)
                    fits = (used_mem + sum(r.memory_mb for r in requests) <= inv.memory_mb
                            and used_vc + sum(r.vcores for r in requests) <= inv.vcores
                            and need_gpu <= len(free_gpu))
                    if not (head and fits):
                        ahead = [q["app"] for q in L["queue"][:[q["app"] for q in L["queue"]].index(self.app_id)]]
                        wait = Wait(_wait_reason(requests, ahead, inv, used_mem, used_vc, len(free_gpu),
                                                 sorted(L["allocations"])), tuple(ahead))
                    if head and fits:
                        containers = self._containers(requests, free_gpu)
                        L["allocations"][self.app_id] = {
                            "pid": self.owner_pid, "started": self.owner_started,
                            "since": time.time(),
                            "memory_mb": sum(r.memory_mb for r in requests),
                            "vcores": sum(r.vcores for r in requests),
                            "gpus": [g for c in containers for g in c.gpu_indices],
                        }
                        L["queue"] = [q for q in L["queue"] if q["app"] != self.app_id]
                        break
                self.waiting(wait)
                if cancel.wait(0.25):
                    raise InterruptedError("allocation cancelled")
        except BaseException:
            with _locked_json(self.ledger, {}) as L:
                L["queue"] = [q for q in L.get("queue", []) if q["app"] != self.app_id]
            raise
        self.waiting(None)
        return containers

    def _containers(self, requests: list[ContainerRequest], gpus: list[int]) -> list[Container]:
        """One container per request, handing out ``gpus`` in request order."""
        containers = []
        for r in requests:
            mine, gpus = gpus[:r.gpus], gpus[r.gpus:]
            containers.append(self._make(r.task_id, r.memory_mb, r.vcores, mine))
        return containers

    def _make(self, task_id: str, memory_mb: int, vcores: int, gpus: list[int]) -> Container:
        with self._lock:
            self._seq += 1
            seq = self._seq
        _, ts, app_seq = self.app_id.split("_")
        # YARN's shape: the application, the AM attempt, then the container's number.
        cid = f"container_{ts}_{app_seq}_{self.attempt:02d}_{seq:06d}"
        return Container(id=cid, task_id=task_id, memory_mb=memory_mb, vcores=vcores, gpu_indices=gpus)

    def new_container(self, like: Container) -> Container:
        return self._make(like.task_id, like.memory_mb, like.vcores, list(like.gpu_indices))

    def _prepare(self, container: Container, env: dict[str, str]) -> dict[str, str]:
        wd = self.app_dir / "containers" / container.id
        wd.mkdir(parents=True, exist_ok=True)
        staged = self.app_dir / "src"
        if staged.is_dir():
            # Localisation: the job's source, staged once at submission with its files read-only,
            # is hard-linked into every container (one copy on disk, whatever the number of tasks
            # and relaunches); a task that replaces a file gets its own, and none can change another's.
            shutil.copytree(staged, wd, dirs_exist_ok=True, symlinks=True, copy_function=_link_or_copy)
        container.workdir = wd
        container.stdout, container.stderr = wd / "stdout", wd / "stderr"
        env = {**os.environ, **env}
        # Exactly the GPUs this container holds; an empty value hides every GPU.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in container.gpu_indices)
        env["CONTAINER_ID"] = container.id
        return env

    def _started(self, container: Container, pid: int) -> None:
        container.pid = pid
        started = process.start_time(pid)
        with self._lock:
            self._started_at[container.id] = started
        (container.workdir / "task_id").write_text(container.task_id)
        (container.workdir / "pid").write_text(str(pid))
        # The pid alone could name another process once this one is gone; its start time cannot.
        (container.workdir / "started").write_text(repr(started))

    def _popen(self, container: Container, argv: list[str], env: dict[str, str]) -> None:
        with open(container.stdout, "ab") as out, open(container.stderr, "ab") as err:
            p = subprocess.Popen(argv, cwd=container.workdir, env=env, stdout=out, stderr=err,
                                 stdin=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        with self._lock:
            self._procs[container.id] = p
        self._started(container, p.pid)

    def launch(self, container: Container, argv: list[str], env: dict[str, str]) -> None:
        self.launch_all([(container, argv, env)])

    def launch_all(self, launches: list[tuple[Container, list[str], dict[str, str]]]) -> None:
        prepared = [(c, argv, self._prepare(c, env)) for c, argv, env in launches]
        pids: list[int | None] = [None] * len(prepared)
        if self._forks is not None and self._forks.alive:
            # One batch: the server forks them back to back, with no round trip per container.
            with contextlib.suppress(ForkServerGone):
                pids = self._forks.spawn_all([(argv, env, str(c.workdir), str(c.stdout), str(c.stderr))
                                              for c, argv, env in prepared])
        for (c, argv, env), pid in zip(prepared, pids):
            if pid is None:  # no fork server, or it could not start this one
                self._popen(c, argv, env)
                continue
            with self._lock:
                self._forked[c.id] = pid
            self._started(c, pid)

    def finished_tasks(self, session_id: int) -> dict[str, int]:
        out = {}
        for path in (self.app_dir / "containers").glob(f"*/{RESULT_FILE}"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                result = json.loads(path.read_text())
                if int(result["session_id"]) == session_id:
                    out[str(result["task_id"])] = int(result["exit_code"])
        return out

    def checkpoint_fallbacks(self, task_id: str) -> list[str]:
        found = []
        for d in (self.app_dir / "containers").glob("*/checkpoint"):
            with contextlib.suppress(OSError):
                if (d.parent / "task_id").read_text().strip() == task_id and d.is_dir():
                    found.append((d.stat().st_mtime, str(d)))
        return [path for _, path in sorted(found, reverse=True)]

    def prune_checkpoints(self, keep: set[str]) -> None:
        # Every session restores its own copy: without this, each relaunch would add one per task.
        for d in (self.app_dir / "containers").glob("*/checkpoint"):
            if d.parent.name not in keep:
                shutil.rmtree(d, ignore_errors=True)

    def poll(self, container: Container) -> int | None:
        p = self._procs.get(container.id)
        if p is not None:
            return p.poll()
        pid = self._forked.get(container.id)
        return None if pid is None else self._forks.poll(pid)

    def kill(self, container: Container, grace: float = 5.0) -> None:
        """Stops the container: its first process, its process group and every descendant, also
        when the first process has already exited (what it started may live on in its group, as a
        user process does when its executor is killed)."""
        pid = container.pid
        if pid is None:
            return
        process.kill_tree(pid, grace, started=self._started_at.get(container.id))
        p = self._procs.get(container.id)
        if p is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=grace + 5)
        elif container.id in self._forked and self._forks is not None:
            self._forks.wait(pid, grace + 5)

    def release(self) -> None:
        with self._lock:
            launched = [(cid, p.pid) for cid, p in self._procs.items()] + list(self._forked.items())
        for cid, pid in launched:
            # Every container, whether or not its first process still runs: see kill().
            process.kill_tree(pid, 2.0, started=self._started_at.get(cid))
        if self._forks is not None:
            self._forks.close()
        forget_allocation(self.app_id)


def forget_allocation(app_id: str) -> None:
    """Gives the application's resources back to the local cluster and takes it out of the queue."""
    with _locked_json(cluster_dir() / "ledger.json", {}) as L:
        L.get("allocations", {}).pop(app_id, None)
        L["queue"] = [q for q in L.get("queue", []) if q["app"] != app_id]


class LocalBackend(Backend):
    """Client side of the embedded cluster."""

    name = "local"

    def __init__(self, python: str | None = None):
        self.python = python or sys.executable

    def app_dir(self, app_id: str) -> Path:
        return cluster_dir() / "apps" / check_application_id(app_id)

    def submit(self, spec: JobSpec) -> str:
        # The machine's settings come from the site configuration, never from the job.
        settings = local_settings()
        requests = gang_requests(spec)
        labelled = next((r for r in requests if r.node_label), None)
        if labelled is not None:
            raise NeverFits(label_key(spec, labelled.task_id),
                            f"{labelled.task_id} asks for node label {labelled.node_label!r}, and the embedded "
                            "cluster's one machine carries no node label; leave node labels to YARN jobs")
        Inventory.of(settings.capacity).check_fits(requests)
        clean_now_and_then(cluster_dir(), settings.retention_s)
        app_id = next_application_id()
        d = self.app_dir(app_id)
        # The job's directory holds its spec (with the job's environment), its tokens and its logs:
        # only its owner may enter it, and the AM and every process it starts create files that
        # only the owner can read (umask 077), as YARN keeps a container's directory private.
        d.mkdir(parents=True, mode=0o700)
        os.chmod(d, 0o700)
        if spec.src_dir:
            shutil.copytree(spec.src_dir, d / "src", symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", ".git", ".venv"))
            _read_only(d / "src")
        _write_private(d / "spec.json", json.dumps(spec.to_dict(), indent=1))
        _write_private(d / SETTINGS_FILE, json.dumps(settings.to_dict(), indent=1))
        status = JobStatus(application_id=app_id, state=JobState.SUBMITTED, name=spec.name,
                           started_at=time.time(), backend=self.name)
        _write_private(d / "status.json", json.dumps(status.to_dict()))
        token, view = secrets.token_urlsafe(24), secrets.token_urlsafe(12)
        _write_private(d / "am.secret", json.dumps({"token": token, "view_token": view}))
        # The job's supervisor runs its AM attempts (see tony_workflow.supervisor) and writes to the
        # AM's log files as well.
        err_fd = os.open(d / "am.stderr", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            sup = subprocess.Popen([self.python, "-m", "tony_workflow.supervisor", "--backend", "local",
                                    "--app-dir", str(d)],
                                   cwd=d, stdout=subprocess.DEVNULL, stderr=err_fd, stdin=subprocess.DEVNULL,
                                   start_new_session=True, close_fds=True, umask=0o077,
                                   env={**settings.inherited_env(os.environ), "TONY_APPLICATION_ID": app_id})
        finally:
            os.close(err_fd)
        # Take the job's place in the queue now, so jobs are served in the order they were submitted.
        with _locked_json(cluster_dir() / "ledger.json", {}) as L:
            enqueue(L, app_id, sup.pid)
        return app_id

    def _secret(self, app_id: str) -> dict:
        return json.loads((self.app_dir(app_id) / "am.secret").read_text())

    def endpoint(self, app_id: str) -> AMEndpoint | None:
        d = self.app_dir(app_id)
        try:
            am = json.loads((d / "am.json").read_text())
            secret = self._secret(app_id)
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        if am.get("stopped") or not process.alive(am["pid"], am.get("started")):
            return None
        return AMEndpoint(am["address"], secret["token"], secret.get("view_token"))

    def am_gone(self, app_id: str) -> bool:
        # The AM unregisters (am.json "stopped") a moment before its process exits, and the job's
        # supervisor clears what is left after that.
        sup = self._supervisor(app_id)
        if sup is not None:
            return not process.alive(sup["pid"], sup.get("started"))
        am = self._am_info(app_id)
        return am is None or not process.alive(am["pid"], am.get("started"))

    def _supervisor(self, app_id: str) -> dict | None:
        try:
            return json.loads((self.app_dir(app_id) / "supervisor.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def stored_status(self, app_id: str) -> JobStatus:
        d = self.app_dir(app_id)
        try:
            status = JobStatus.from_dict(json.loads((d / "status.json").read_text()))
        except FileNotFoundError:
            raise UnknownApplication(app_id, "not on the embedded cluster") from None
        if not status.is_final:
            # The job runs while its supervisor does (between AM attempts there is no AM).
            sup = self._supervisor(app_id)
            am = sup or self._am_info(app_id)
            gone = am is not None and not process.alive(am["pid"], am.get("started"))
            never = am is None and status.started_at and time.time() - status.started_at > 60
            if gone or never:
                status.state = JobState.FAILED
                status.diagnostics = (status.diagnostics + "\n" if status.diagnostics else "") + \
                    f"ApplicationMaster exited unexpectedly; see {d / 'am.stderr'}"
                status.finished_at = status.finished_at or time.time()
        return status

    def _am_info(self, app_id: str) -> dict | None:
        try:
            return json.loads((self.app_dir(app_id) / "am.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def force_kill(self, app_id: str) -> None:
        for info in (self._supervisor(app_id), self._am_info(app_id)):
            if info and process.alive(info["pid"], info.get("started")):
                process.kill_tree(info["pid"], 5.0, started=info.get("started"))
        d = self.app_dir(app_id)
        for c in (d / "containers").glob("*/pid"):
            with contextlib.suppress(ValueError, OSError):
                pid = int(c.read_text())
                started_file = c.with_name("started")
                started = float(started_file.read_text()) if started_file.is_file() else None
                # Also when the container's first process is gone: what it started may live on in its group.
                process.kill_tree(pid, 2.0, started=started)
        status = self.stored_status(app_id)
        if not status.is_final:
            status.state, status.finished_at = JobState.KILLED, time.time()
            status.diagnostics = "killed by user (ApplicationMaster unresponsive)"
            (d / "status.json").write_text(json.dumps(status.to_dict()))

    def logs(self, app_id: str, task: str | None = None) -> dict[str, Path]:
        d = self.app_dir(app_id)
        if not d.is_dir():
            raise UnknownApplication(app_id, "not on the embedded cluster")
        out: dict[str, Path] = {}
        if task in (None, "am"):
            out["am/stdout"], out["am/stderr"] = d / "am.stdout", d / "am.stderr"
        for cdir in sorted((d / "containers").glob("*")):
            try:
                tid = (cdir / "task_id").read_text().strip()
            except FileNotFoundError:
                continue
            if task is None or task == tid:
                # A relaunch gets a new container; keep every attempt, oldest first.
                n = sum(1 for k in out if k.startswith(tid + "/stdout"))
                suffix = f"#{n}" if n else ""
                out[f"{tid}/stdout{suffix}"], out[f"{tid}/stderr{suffix}"] = cdir / "stdout", cdir / "stderr"
        return out

    def list_applications(self) -> list[str]:
        apps = []
        for p in (cluster_dir() / "apps").glob("application_*"):
            with contextlib.suppress(ValueError):
                if p.is_dir():
                    apps.append(check_application_id(p.name))
        return sorted(apps, key=lambda a: (int(a.split("_")[1]), int(a.split("_")[2])))
