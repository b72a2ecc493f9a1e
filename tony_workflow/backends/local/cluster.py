"""The embedded local cluster: containers are process groups on this machine.

:class:`LocalClusterManager` is the AM's side: it takes the job's gang from the cluster's books
(:mod:`.ledger`: what the machine offers, who holds what, who waits, first come first served)
and launches, watches and kills containers as process groups, through the fork server where it
runs (:mod:`tony_workflow.backends.local.forkserver`) and :mod:`tony_workflow.process`, which the executor uses
too. :class:`LocalBackend` is the client's side: it stages and submits a job (its supervisor runs
the AM's attempts), finds the AM, reads a job's status and logs.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ... import process
from ...errors import UnknownApplication
from ...protocol import ATTEMPT_ENV, OWNER_ENV, RESULT_FILE
from ...retention import clean_now_and_then
from ...spec import JobSpec, LocalSettings, SpecError, local_settings
from ...spec.site import is_tony_home, tony_home
from ...status import JobState, JobStatus, check_application_id
from ..base import (
    AMEndpoint,
    AMIdentity,
    Backend,
    ClusterManager,
    Container,
    ContainerRequest,
    NeverFits,
    gang_requests,
    label_key,
    raised_to_minimum,
)
from .forkserver import ForkServer, ForkServerGone
from .ledger import Inventory, Ledger, cluster_dir, join_queue, next_application_id
from .localize import link_into, link_or_copy, read_only
from .localize import stage as stage_resources
from .memory import EXCEEDED_MEMORY_EXIT, MemoryWatch, Watched

__all__ = ["LocalBackend", "LocalClusterManager"]


def _write_private(path: Path, text: str) -> None:
    """Writes ``text`` to a new file only its owner can read or write."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


#: The local cluster's settings as the client read them at submission, beside the job's spec.
SETTINGS_FILE = "local-cluster.json"


class LocalClusterManager(ClusterManager):
    """AM-side: the ledger, and containers as local process groups."""

    name = "local"
    am_waits_with_gang = True  # the AM's request is one of the gang's (gang_requests)

    def __init__(self, app_id: str, app_dir: Path, inventory: Inventory, owner_pid: int | None = None,
                 fork_server: bool = False, attempt: int = 1, owner_started: float | None = None,
                 memory_check_s: float | None = None):
        self.app_id = app_id
        self.app_dir = app_dir
        self.inventory = inventory
        # The job's resources are held by its supervisor, which outlives any one AM attempt.
        self.owner_pid = owner_pid or os.getpid()
        self.owner_started = owner_started if owner_pid else process.start_time(self.owner_pid)
        self.attempt = attempt
        self.books = Ledger(app_id, inventory, self.owner_pid, self.owner_started)
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._forked: dict[str, int] = {}  # container id -> pid, for containers the fork server started
        self._started_at: dict[str, float | None] = {}  # container id -> its first process's start time
        self._seq = 0
        self._lock = threading.Lock()
        self._forks: ForkServer | None = None
        # Containers over their memory are killed (memory.py), unless the site turned the check off.
        self.memory = MemoryWatch(memory_check_s, on_kill=lambda _: self.container_changed()) \
            if memory_check_s else None
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
                      attempt=int(os.environ.get(ATTEMPT_ENV) or 1),
                      memory_check_s=settings.monitor_interval_ms / 1000.0 if settings.pmem_check else None)
        secret = json.loads((app_dir / "am.secret").read_text())
        return cluster, AMIdentity(app_id, secret["token"], secret["view_token"], "127.0.0.1")

    def allocate(self, requests: list[ContainerRequest], cancel: threading.Event) -> list[Container]:
        """Waits for the gang's turn in the books (:class:`~.local_ledger.Ledger`), saying why while it waits."""
        self.inventory.check_fits(requests)
        try:
            while (taken := self.books.take(requests))[0] is None:
                self.waiting(taken[1])
                if cancel.wait(0.25):
                    raise InterruptedError("allocation cancelled")
        except BaseException:
            self.books.leave_queue()
            raise
        self.waiting(None)
        return self._containers(requests, taken[0])

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
            shutil.copytree(staged, wd, dirs_exist_ok=True, symlinks=True, copy_function=link_or_copy)
        # TonY's resources, staged once at submission, beside the source (localize.py).
        link_into(self.app_dir, container.task_id.split(":")[0], wd)
        container.workdir = wd
        container.stdout, container.stderr = wd / "stdout", wd / "stderr"
        env = {**os.environ, **env}
        # Exactly the GPUs this container holds; an empty value hides every GPU.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in container.gpu_indices)
        env["CONTAINER_ID"] = container.id
        return env

    def am_workdir(self, app_dir: Path) -> Path:
        """A single-node job's directory: the source and every container's resources, linked as
        into a task's container, beside the job's own files."""
        wd = app_dir / "single-node"
        if not wd.exists():
            wd.mkdir()
            if (app_dir / "src").is_dir():
                shutil.copytree(app_dir / "src", wd, dirs_exist_ok=True, symlinks=True, copy_function=link_or_copy)
            link_into(app_dir, None, wd)
        return wd

    def _started(self, container: Container, pid: int) -> None:
        assert container.workdir is not None  # every container of this cluster has its directory
        container.pid = pid
        started = process.start_time(pid)
        with self._lock:
            self._started_at[container.id] = started
        (container.workdir / "task_id").write_text(container.task_id)
        (container.workdir / "pid").write_text(str(pid))
        # The pid alone could name another process once this one is gone; its start time cannot.
        (container.workdir / "started").write_text(repr(started))
        if self.memory is not None:
            self.memory.watch(Watched(container.id, pid, started, container.memory_mb,
                                      f"tony.{container.task_id.split(':')[0]}.memory"))

    def _popen(self, container: Container, argv: list[str], env: dict[str, str]) -> None:
        assert container.stdout is not None and container.stderr is not None  # given as the container is made
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
        if self.memory is not None and self.memory.exceeded(container.id):
            return EXCEEDED_MEMORY_EXIT  # YARN's status for it: the AM keeps it as the cluster's word
        p = self._procs.get(container.id)
        if p is not None:
            return p.poll()
        pid = self._forked.get(container.id)
        return None if pid is None or self._forks is None else self._forks.poll(pid)

    def kill(self, container: Container, grace: float = 5.0) -> None:
        """Stops the container: its first process, its process group and every descendant, also
        when the first process has already exited (what it started may live on in its group, as a
        user process does when its executor is killed)."""
        pid = container.pid
        if pid is None:
            return
        if self.memory is not None:
            self.memory.forget(container.id)
        process.kill_tree(pid, grace, started=self._started_at.get(container.id))
        p = self._procs.get(container.id)
        if p is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=grace + 5)
        elif container.id in self._forked and self._forks is not None:
            self._forks.wait(pid, grace + 5)

    def exit_diagnostics(self, container: Container) -> str | None:
        return self.memory.exceeded(container.id) if self.memory is not None else None

    def release(self) -> None:
        if self.memory is not None:
            self.memory.close()
        with self._lock:
            launched = [(cid, p.pid) for cid, p in self._procs.items()] + list(self._forked.items())
        for cid, pid in launched:
            # Every container, whether or not its first process still runs: see kill().
            process.kill_tree(pid, 2.0, started=self._started_at.get(cid))
        if self._forks is not None:
            self._forks.close()
        self.books.release()


class LocalBackend(Backend):
    """Client side of the embedded cluster."""

    name = "local"

    def __init__(self, python: str | None = None):
        self.python = python or sys.executable

    def app_dir(self, app_id: str) -> Path:
        return cluster_dir() / "apps" / check_application_id(app_id)

    def check_fits(self, spec: JobSpec, settings: LocalSettings | None = None) -> LocalSettings:
        # The machine's settings come from the site configuration, never from the job.
        settings = settings or local_settings()
        requests = gang_requests(spec)
        labelled = next((r for r in requests if r.node_label), None)
        if labelled is not None:
            raise NeverFits(label_key(spec, labelled.task_id),
                            f"{labelled.task_id} asks for node label {labelled.node_label!r}, and the embedded "
                            "cluster's one machine carries no node label; leave node labels to YARN jobs")
        Inventory.of(settings.capacity).check_fits(requests)
        return settings

    def submit(self, spec: JobSpec) -> str:
        settings = local_settings()
        spec = raised_to_minimum(spec, settings.minimum_mb, "tony.local.minimum-allocation-mb")
        settings = self.check_fits(spec, settings)
        clean_now_and_then(cluster_dir(), settings.retention_s)
        app_id = next_application_id()
        d = self.app_dir(app_id)
        # The job's directory holds its spec (with the job's environment), its tokens and its logs:
        # only its owner may enter it, and the AM and every process it starts create files that
        # only the owner can read (umask 077), as YARN keeps a container's directory private.
        d.mkdir(parents=True, mode=0o700)
        os.chmod(d, 0o700)
        if spec.src_dir:
            shutil.copytree(spec.src_dir, d / "src", symlinks=True, ignore=_left_out)
            read_only(d / "src")
        try:
            stage_resources(spec.conf, d)
        except SpecError:
            shutil.rmtree(d, ignore_errors=True)
            raise
        _write_private(d / "spec.json", json.dumps(spec.to_dict(), indent=1))
        _write_private(d / SETTINGS_FILE, json.dumps(settings.to_dict(), indent=1))
        status = JobStatus(application_id=app_id, state=JobState.SUBMITTED, name=spec.name,
                           started_at=time.time(), backend=self.name, context=dict(spec.context) or None)
        _write_private(d / "status.json", json.dumps(status.to_dict()))
        token, view = secrets.token_urlsafe(24), secrets.token_urlsafe(12)
        _write_private(d / "am.secret", json.dumps({"token": token, "view_token": view}))
        # The job's supervisor runs its AM attempts (see tony_workflow.am.supervisor) and writes to the
        # AM's log files as well.
        err_fd = os.open(d / "am.stderr", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            sup = subprocess.Popen([self.python, "-m", "tony_workflow.am.supervisor", "--backend", "local",
                                    "--app-dir", str(d)],
                                   cwd=d, stdout=subprocess.DEVNULL, stderr=err_fd, stdin=subprocess.DEVNULL,
                                   start_new_session=True, close_fds=True, umask=0o077,
                                   env={**settings.inherited_env(os.environ), **_cluster_env(),
                                        "TONY_APPLICATION_ID": app_id})
        finally:
            os.close(err_fd)
        # Take the job's place in the queue now, so jobs are served in the order they were submitted.
        join_queue(app_id, sup.pid)
        return app_id

    def _secret(self, app_id: str) -> dict[str, Any]:
        secret: dict[str, Any] = json.loads((self.app_dir(app_id) / "am.secret").read_text())
        return secret

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

    def _supervisor(self, app_id: str) -> dict[str, Any] | None:
        return _json_or_none(self.app_dir(app_id) / "supervisor.json")

    def check_exists(self, app_id: str) -> None:
        if not (self.app_dir(app_id) / "status.json").is_file():
            raise UnknownApplication(app_id, "not on the embedded cluster")

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

    def _am_info(self, app_id: str) -> dict[str, Any] | None:
        return _json_or_none(self.app_dir(app_id) / "am.json")

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

    def logs(self, app_id: str, task: str | None = None, *, status: JobStatus | None = None,
             into: Path | None = None) -> dict[str, Path]:
        # The containers' own files, read where they are: neither the status nor a copy is needed.
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

    def read_output(self, app_id: str, container: str, stream: str, where: str | None, offset: int,
                    limit: int) -> tuple[bytes, int | None] | None:
        path = self.app_dir(app_id) / "containers" / container / stream
        try:
            with path.open("rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                fh.seek(offset)
                return fh.read(limit), size
        except (FileNotFoundError, NotADirectoryError):
            pass
        # Not written yet, or (the job over, or the container's folder made) never to be: then empty.
        if path.parent.is_dir():
            return b"", 0
        try:
            return (b"", 0) if self.stored_status(app_id).is_final else None
        except Exception:  # noqa: BLE001 - an application gone: nothing to read
            return None

    def submitted_as_me(self, app_id: str, spec: JobSpec | None = None) -> bool:
        # The embedded cluster's jobs are its users' processes: the one who submitted owns its folder.
        try:
            return self.app_dir(app_id).stat().st_uid == os.getuid()
        except (OSError, ValueError):
            return False

    def tags(self, app_id: str) -> list[str]:
        # Those the job would carry on YARN: the embedded cluster keeps the spec, not tags.
        from ...context import application_tags
        try:
            spec = JobSpec.from_dict(json.loads((self.app_dir(app_id) / "spec.json").read_text()))
        except (OSError, ValueError):
            return []
        return application_tags(["tony"], spec.tags, spec.context, spec.identity)[0]

    def list_applications(self) -> list[str]:
        apps = []
        # An application is known once its status is written: before that its directory is still
        # being staged (its source and resources copied) and nothing in it can be looked at.
        for p in (cluster_dir() / "apps").glob("application_*"):
            with contextlib.suppress(ValueError):
                if (p / "status.json").is_file():
                    apps.append(check_application_id(p.name))
        return sorted(apps, key=lambda a: (int(a.split("_")[1]), int(a.split("_")[2])))


def _left_out(directory: str, names: list[str]) -> set[str]:
    """What staging a job's source leaves out: caches, version control, virtualenvs, and this
    machine's tony-workflow state where the source holds it (the job's own directory is in it)."""
    return {n for n in names if n in ("__pycache__", ".git", ".venv") or is_tony_home(Path(directory) / n)}


def _json_or_none(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None while it is not there or not whole."""
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return doc


def _cluster_env() -> dict[str, str]:
    """Where this embedded cluster lives (its ``TONY_HOME``) and its site configuration
    (``TONY_CONF_DIR``): its own jobs' supervisors and AMs keep their books, records and settings
    there whatever ``tony.local.env-whitelist`` lets through of the submitter's environment."""
    env = {"TONY_HOME": str(tony_home())}
    if os.environ.get("TONY_CONF_DIR"):
        env["TONY_CONF_DIR"] = os.environ["TONY_CONF_DIR"]
    return env
