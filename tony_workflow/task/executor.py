"""The TaskExecutor: runs in every task container.

It reserves the task's port, registers with the AM, waits for the cluster spec, restores the
checkpoint directory, sets the task's environment, runs the user's command (and, on the chief,
TensorBoard), heartbeats with the task's resource figures (:mod:`tony_workflow.task.metrics`) and the
progress its code reports (:mod:`tony_workflow.task.reporting`), mirrors the chief's checkpoints, and
reports the exit code. When told to stop it kills the whole process tree it started.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..context import task_env
from ..events import log_tail
from ..frameworks import RANKED_TYPES, TaskContext, build_env, in_place_env, launch_command, thread_env
from ..process import kill_tree  # imports psutil on first use: a container start is mostly imports
from ..protocol import BOARD_STORE_ENV, NOTEBOOK_STORE_ENV, RESULT_FILE, group_token
from ..rpc import AMClient, AMError, AMUnreachable
from ..spec import JobSpec
from ..spec.data import MANIFEST_ENV, MANIFEST_NAME
from .handoff import HANDOFF_ENV, serve
from .horovod import announced, driver_env
from .metrics import GpuSampler, TaskSampler, visible_gpus
from .reporting import ReportInbox
from .serving import NOTEBOOK_TYPE, TOKEN_ENV, announce_when_ready, keep_executed, notebook_env, notebook_path
from .workdir import job_python, python_path, task_pythonpath, user_directory

__all__ = ["PortReservation", "TaskExecutor", "main"]

log = logging.getLogger("tony.executor")

MIRROR_INTERVAL = 0.5  # seconds between passes of the chief's checkpoint mirror
#: TensorBoard told to use its stand-in for TensorFlow (the module it looks for to be told so).
TENSORBOARD_WITHOUT_TF = ("import sys, types; sys.modules['tensorboard.compat.notf'] = types.ModuleType('notf'); "
                          "from tensorboard.main import run_main; run_main()")
#: A task's TensorBoard runs at the lowest CPU priority (nice 19, set in its own process before any
#: of its threads starts): it takes only the CPU that training leaves. Its reloads woke in the
#: middle of synchronous training steps, and a trainer held back there holds back every other one.
TENSORBOARD_NICE = 19


def ephemeral_ports() -> tuple[int, int]:
    """The range the kernel takes the local ports of outgoing connections (and of ``bind(0)``) from."""
    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def quiet_ports() -> range:
    """Ports below the ephemeral range (at most 20,000 of them, none under 1024): no outgoing
    connection on the host is ever given one, so a port chosen there and released for the task's
    server to bind stays free meanwhile, where one from ``bind(0)`` may be taken by any connection
    the host opens in that moment (on a busy machine, a matter of seconds while a framework loads)."""
    low = ephemeral_ports()[0]
    return range(max(1024, low - 20000), max(1024, low))


class PortReservation:
    """Holds a TCP port so no other job on this host can take it before the task binds it.

    With ``shared=True`` the socket sets SO_REUSEPORT and stays bound while the user process runs:
    gRPC (TensorFlow's servers) binds with SO_REUSEPORT too, so it can share the port, while any
    other process asking the kernel for a free port never gets this one. Servers that do not set
    SO_REUSEPORT need the port released just before they start (a window TonY has as well), which is
    why a port is chosen among :func:`quiet_ports` when the job does not fix it.
    """

    def __init__(self, host: str, port: int = 0, shared: bool = False):
        self.shared = shared
        bind_host = "127.0.0.1" if host in ("127.0.0.1", "localhost") else ""
        # Held all along (shared), the kernel's choice is safe. Released, one of the quiet ports, bound
        # without SO_REUSEADDR so that a port another job holds the same way is never taken too.
        probing = not port and not shared
        candidates = [*secrets.SystemRandom().sample(quiet_ports(), 64), 0] if probing else [port]
        for candidate in candidates:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if shared:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if not probing:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                self.sock.bind((bind_host, candidate))
                break
            except OSError:
                self.sock.close()
                if candidate == candidates[-1]:
                    raise
        self.port = self.sock.getsockname()[1]

    def release_for_launch(self) -> None:
        if not self.shared:
            self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def kill_process_tree(proc: subprocess.Popen | None, grace: float = 5.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    # The user process shares the executor's process group: signalling the group would stop the
    # executor before it reports.
    kill_tree(proc.pid, grace, group=False)


class TaskExecutor:
    def __init__(self, env: dict[str, str] | None = None):
        self.env = dict(os.environ if env is None else env)
        e = self.env
        self.task_id = e["TONY_TASK_ID"]
        self.task_type, idx = self.task_id.split(":")
        self.index = int(idx)
        self.session_id = int(e.get("SESSION_ID", "0"))
        self.app_id = e.get("TONY_APPLICATION_ID", "")
        self.container_id = e.get("TONY_CONTAINER_ID")
        # On YARN the NodeManager tells the container its host; the embedded cluster is loopback.
        self.host = e.get("TONY_TASK_HOST") or e.get("NM_HOST") or "127.0.0.1"
        self.spec = JobSpec.from_dict(json.loads(Path(e["TONY_SPEC_FILE"]).read_text()))
        self.am = AMClient(e["TONY_AM_ADDRESS"], e["TONY_AM_TOKEN"], timeout=10)
        self.workdir = Path.cwd()
        self.stop_event = threading.Event()
        self.stop_reason = ""
        self.user: subprocess.Popen | None = None
        self.tensorboard: subprocess.Popen | None = None
        self.interval = max(0.05, self.spec.heartbeat_interval_ms / 1000.0)
        self.is_chief = (self.task_type, self.index) == tuple(self.spec.chief)
        # An elastic job's rank 0 may be in any ranked container, and moves as the group changes:
        # the container that holds it mirrors its checkpoints (task.handoff), from the first round on.
        self.follows_rank0 = bool(self.spec.elastic) and self.task_type in RANKED_TYPES
        self.holds_rank0 = False
        self._wake = threading.Event()  # set when the user process ends or a stop is asked for
        self.mirror = None  # a checkpoint_mirror.CheckpointMirror when checkpoints are mirrored
        self.store_error: str | None = None  # why the checkpoint store last failed, until it works again
        self.store_ok = False  # a sync succeeded since the last failure
        self.restored: dict | None = None  # which checkpoint this task resumed from
        self.inbox: ReportInbox | None = None  # progress reports from the user process
        self.sampler = TaskSampler(self._gpu_sampler())
        self.metrics_interval = max(0.1, self.spec.metrics_interval_ms / 1000.0)

    def _gpu_sampler(self) -> GpuSampler | None:
        if not self.spec.gpu_metrics_enabled:
            return None
        devices = visible_gpus(self.env.get("CUDA_VISIBLE_DEVICES"))
        if devices is None:
            # No list in the environment: GPUs isolated by the cluster are all the task sees, if it asked for any.
            task = self.spec.tasks.get(self.task_type)
            devices = None if task is not None and task.resources.gpus > 0 else []
        return GpuSampler(devices)

    # ------------------------------------------------------------------ steps
    def _register(self, port: int) -> None:
        deadline = time.time() + max(60.0, self.interval * self.spec.max_missed_heartbeats)
        while True:
            try:
                self.am.register(self.task_id, self.session_id, self.host, port, pid=os.getpid(),
                                 container_id=self.container_id)
                return
            except AMUnreachable:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)

    def _wait_cluster_spec(self) -> dict:
        while not self.stop_event.is_set():
            reply = self.am.cluster_spec(self.task_id, self.session_id, wait=20.0)
            if reply:
                return reply
        raise InterruptedError(self.stop_reason or "stopped while waiting for the cluster spec")

    def _heartbeat_loop(self) -> None:
        failures = 0
        last_ok = time.monotonic()
        # An AM that cannot be reached for tony.am.liveness-timeout-ms is dead or replaced: a task
        # of it must not train on outside its job (a new attempt starts its own tasks).
        patience = self.spec.am_liveness_timeout_ms / 1000.0
        am = AMClient(self.env["TONY_AM_ADDRESS"], self.env["TONY_AM_TOKEN"], timeout=min(10.0, max(1.0, patience / 3)))
        now = time.monotonic()
        beat_at, sample_at = now + self.interval, now
        # Sampling and beating keep their own intervals: figures every tony.task.metrics-interval-ms,
        # each heartbeat carrying the latest.
        while not self.stop_event.wait(max(0.0, min(beat_at, sample_at) - time.monotonic())):
            now = time.monotonic()
            if now >= sample_at:  # until the user process runs, tried again at every beat
                sample_at = now + (self.metrics_interval if self._sample() else self.interval)
            if now < beat_at:
                continue
            beat_at = now + self.interval
            try:
                reply = am.heartbeat(self.task_id, self.session_id, container_id=self.container_id, **self._report())
                failures, last_ok = 0, time.monotonic()
                if reply.get("action") == "stop":
                    self._stop("the ApplicationMaster asked this task to stop")
            except AMError as e:
                if e.status in (404, 409):
                    self._stop(f"the ApplicationMaster no longer runs this task ({e})")
            except (AMUnreachable, OSError):
                failures += 1
                if failures > self.spec.max_missed_heartbeats or time.monotonic() - last_ok > patience:
                    self._stop("lost the ApplicationMaster (no heartbeat answered for "
                               f"{time.monotonic() - last_ok:.0f} s)")

    def _sample(self) -> bool:
        proc = self.user or self.tensorboard
        if proc is None or proc.poll() is not None:
            return False
        self.sampler.sample(proc.pid)
        return True

    def _report(self) -> dict:
        """What a heartbeat carries: the latest resource figures, the progress the user code
        reported, and the store's trouble, which rides on every heartbeat until it is over (the AM
        shows it and applies tony.checkpoint.on-store-failure)."""
        store = {"error": self.store_error} if self.store_error else {"ok": True} if self.store_ok else None
        return {"metrics": self.sampler.latest, "progress": self.inbox.snapshot() if self.inbox else None,
                "store": store}

    def _stop(self, reason: str) -> None:
        if not self.stop_event.is_set():
            self.stop_reason = reason
            log.info("stopping: %s", reason)
            self.stop_event.set()
        self._wake.set()

    def _python(self) -> str:
        return job_python(self.workdir, self.spec)

    def command(self) -> str:
        if self._serves_log_dir and not self.spec.get("tony.tensorboard.command"):
            return ""  # TonY's TensorBoard task serves its log directory, and runs nothing of the job's
        cmd = self.spec.command_for(self.task_type, python=self._python())
        if cmd is None and self.task_type in self.spec.sidecar_types and self.task_type == "tensorboard":
            return ""  # a tensorboard sidecar with no command of its own just serves TensorBoard
        if cmd is None:
            raise ValueError(f"no command for task type {self.task_type!r}: set tony.{self.task_type}.command, "
                             "tony.containers.command or executes")
        return cmd

    def _context(self, cluster: dict[str, list[str]]) -> TaskContext:
        spec = self.spec
        monitored = sum(len(a) for t, a in cluster.items() if t in spec.tracked_types)
        ctx = TaskContext(framework=spec.framework, cluster=cluster, task_type=self.task_type, index=self.index,
                          is_chief=self.is_chief, sidecar_types=list(spec.sidecar_types), monitored=monitored,
                          processes={t: s.processes for t, s in spec.tasks.items()}, agent=spec.torch_agent)
        if spec.elastic:
            ctx.elastic = spec.elastic_nodes
            ctx.rendezvous = self.env["TONY_AM_ADDRESS"]
            ctx.run_id = f"{self.app_id}-{self.session_id}"
            # Each loss makes every other agent restart its workers once; a join does not count.
            ctx.max_restarts = spec.elastic_max_membership_changes + spec.reclaim_retry_count
            # The AM decides when too few remain (tony.elastic.fallback-timeout-ms): the agents wait longer.
            ctx.join_timeout_s = max(600, spec.elastic_fallback_timeout_ms // 1000 + 60)
            ctx.host = self.host
        return ctx

    def _user_env(self, ctx: TaskContext, tb_port: int | None) -> dict[str, str]:
        spec = self.spec
        env = {k: v for k, v in self.env.items() if k not in ("TONY_AM_TOKEN",)}
        ranked_elastic = bool(ctx.elastic) and ctx.task_type in RANKED_TYPES
        if ranked_elastic and not spec.regroup_in_place:
            # The elastic agent's rendezvous is the AM's: the agent takes the token out of its
            # environment before it starts the user's processes.
            env["TONY_AM_TOKEN"] = self.env["TONY_AM_TOKEN"]
        env.update(build_env(ctx))
        if ranked_elastic and spec.regroup_in_place:  # the trainers hold the group token only
            in_place_env(env, ctx, group_token(self.env["TONY_AM_TOKEN"]))
        env.update({
            "SESSION_ID": str(self.session_id),
            "TONY_APPLICATION_ID": self.app_id,
            "TONY_TASK_ID": self.task_id,
            "TONY_CHECKPOINT_DIR": str(self.checkpoint_dir),
            **({HANDOFF_ENV: str(self.workdir / "handoff")} if self.follows_rank0 else {}),
            "TONY_LOG_DIR": self.env.get("TONY_LOG_DIR", str(self.workdir / "tensorboard")),
            "PYTHONUNBUFFERED": "1",
        })
        manifest = self.workdir / MANIFEST_NAME
        if manifest.exists():  # the plan of the job's inputs, for tony_workflow.data
            env[MANIFEST_ENV] = str(manifest)
        if tb_port:
            env["TB_PORT"] = str(tb_port)
        if spec.tensorboard_log_dir:
            env["TB_LOG_DIR"] = spec.tensorboard_log_dir
        # A bare `python` in a command means the job's interpreter (venv, python_binary_path, or
        # the one running this executor), not whatever else happens to be first on PATH.
        env["PATH"] = os.pathsep.join([*python_path(self.workdir, self._python()), env.get("PATH", os.defpath)])
        env.update(task_env(spec.context))
        env.update(spec.execution_env)
        env.update(spec.shell_env)
        task = spec.tasks[self.task_type]
        env.update(thread_env(task.resources.vcores, task.processes, env))
        env.update(self._task_path(env.get("PYTHONPATH")))
        return env

    def _task_path(self, current: str | None) -> dict[str, str]:
        return task_pythonpath(self.env, current)

    @property
    def _serves_log_dir(self) -> bool:
        """Whether this is TonY's TensorBoard task for tony.application.tensorboard-log-dir."""
        return self.task_type == "tensorboard" and bool(self.spec.tensorboard_log_dir)

    def _wants_tensorboard(self) -> bool:
        if self._serves_log_dir:
            return True  # TonY's TensorBoard task, whatever tony.task.tensorboard.enabled says
        if not self.spec.tensorboard_enabled:
            return False
        if "tensorboard" in self.spec.tasks:
            return self.task_type == "tensorboard"
        return self.is_chief

    def _start_tensorboard(self, port: int) -> None:
        logdir = self.env.get("TONY_LOG_DIR", str(self.workdir / "tensorboard"))
        if self._serves_log_dir:
            logdir = self.spec.tensorboard_log_dir  # the directory TonY's TensorBoard task serves
        if "://" not in logdir:
            Path(logdir).mkdir(parents=True, exist_ok=True)
        python = sys.executable if importlib.util.find_spec("tensorboard") else self._python()
        bind = ["--host", self.host] if self.host in ("127.0.0.1", "localhost") else ["--bind_all"]
        # A local directory is read with TensorBoard's own stand-in for TensorFlow's file API: it then
        # holds about 80 MB instead of 800, which the container's memory limit would count. Other
        # filesystems (hdfs://, gs://) need TensorFlow's.
        code = ("from tensorboard.main import run_main; run_main()" if "://" in logdir else TENSORBOARD_WITHOUT_TF)
        argv = [python, "-c", f"import os; os.nice({TENSORBOARD_NICE}); {code}", "--logdir", logdir, "--port", str(port), *bind, "--reload_interval", "5"]
        out = open(self.workdir / "tensorboard.log", "ab")  # noqa: SIM115 - the TensorBoard process keeps it open
        env = {**os.environ, **self._task_path(os.environ.get("PYTHONPATH"))}  # TensorBoard is the job's
        self.tensorboard = subprocess.Popen(argv, cwd=self.workdir, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=env)
        url = f"http://{self.host}:{port}"
        threading.Thread(target=announce_when_ready, daemon=True, args=(
            url + "/data/logdir", lambda: self.tensorboard, lambda: self.am.register_tensorboard(url), self.stop_event,
            f"TensorBoard at {url} (see tensorboard.log)")).start()

    def _mirrors(self) -> bool:
        """Whether this container's saves are the job's: the chief's, or rank 0's in an elastic job."""
        return self.mirror is not None and (self.holds_rank0 if self.follows_rank0 else self.is_chief)

    def _sync_checkpoints(self) -> None:
        if self._mirrors():
            self._mirror_once()

    def _hand_over(self, request: dict) -> dict:
        """One request of the container's elastic side (:mod:`.handoff`), in the order asked."""
        done: dict = {"ok": True}
        if self.mirror is None:
            return {**done, "skipped": self.store_error or "no checkpoint store"}
        if request.get("flush"):
            done["flushed"] = self.mirror.sync()
        if request.get("pull"):
            done["pulled"] = self.mirror.pull()
            log.info("took the group's checkpoint from the store (%d file(s))", done["pulled"])
        if "rank0" in request:
            self.holds_rank0 = bool(request["rank0"])
        return done

    def _mirror_once(self) -> None:
        """One sync of the checkpoint mirror; a failure is remembered (and reported with every
        heartbeat) until a sync succeeds, never raised: training goes on unless the job says
        otherwise (tony.checkpoint.on-store-failure)."""
        try:
            self.mirror.sync()
        except Exception as e:  # noqa: BLE001 - any store's error: OSError, WebHDFS's own, ...
            message = f"cannot write to the checkpoint store {self.mirror.store.uri}: {e}"
            if message != self.store_error:
                log.warning("%s", message)
            self.store_error, self.store_ok = message, False
            return
        if self.store_error:
            log.info("the checkpoint store takes writes again")
        self.store_error, self.store_ok = None, True

    def _mirror_loop(self) -> None:
        # A pass is a walk of the local directory that uploads only what changed, so it can run
        # often: a checkpoint younger than this interval is lost with its container (on YARN the
        # relaunched task cannot read the old container's directory).
        while not self.stop_event.wait(MIRROR_INTERVAL):
            if self.user is not None and self.user.poll() is not None:
                return
            if self._mirrors():
                self._mirror_once()

    def _restore(self, location: str) -> None:
        """Restores the checkpoint directory: from the store, or from a newer complete checkpoint an
        earlier container of the chief left on this machine (``TONY_CHECKPOINT_FALLBACKS``) when the
        store is behind or cannot be read. Remembers what it resumed from, and the steps lost."""
        from ..storage import open_storage
        from .checkpoint_mirror import CheckpointMirror
        from .checkpoints import choose, inspect, replace_with

        try:
            self.mirror = CheckpointMirror(open_storage(location), "", self.checkpoint_dir)
            self.mirror.restore()
        except Exception as e:  # noqa: BLE001 - any store's error: the checkpoints on this machine are still there
            self.store_error = f"cannot read the checkpoint store {location}: {e}"
            log.warning("%s", self.store_error)
        stored = inspect(self.checkpoint_dir)
        fallbacks = [inspect(p) for p in self.env.get("TONY_CHECKPOINT_FALLBACKS", "").split(os.pathsep) if p]
        best, lost = choose([stored, *fallbacks])
        if best is None:
            if lost:
                self.restored = {"source": None, "step": None, "lost_steps": lost}
            return
        source = "the checkpoint store"
        if best is not stored:
            replace_with(self.checkpoint_dir, best.path)
            source = f"the local checkpoint of {best.path.parent.name}"
        self.restored = {"source": source, "step": best.step, "lost_steps": lost or 0}
        log.info("resuming from %s of %s%s", best.describe(), source,
                 f"; {lost} newer step(s) lost" if lost else "")

    # ------------------------------------------------------------------ main
    def run(self) -> int:
        framework_shares_port = self.spec.framework == "tensorflow"
        fixed = int(self.env.get("TONY_TASK_PORT", "0") or 0)
        port = PortReservation(self.host, fixed, shared=framework_shares_port)
        tb_port = PortReservation(self.host) if self._wants_tensorboard() else None
        self.checkpoint_dir = self.workdir / "checkpoint"
        self.checkpoint_dir.mkdir(exist_ok=True)
        try:
            self._register(port.port)
        except AMError as e:
            log.error("registration refused: %s", e)
            return 1
        hb = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        hb.start()
        try:
            reply = self._wait_cluster_spec()
        except (InterruptedError, AMError) as e:
            log.info("not starting: %s", e)
            return 0 if self.stop_event.is_set() else 1
        cluster = reply["cluster"]
        location = self.env.get("TONY_CHECKPOINT_LOCATION")
        if location:
            self._restore(location)
        if self.follows_rank0:
            serve(self.workdir / "handoff", self._hand_over, self.stop_event)
        ctx = self._context(cluster)
        command = self.command()
        if command:
            command = launch_command(ctx, command, self._python())
        env = self._user_env(ctx, tb_port.port if tb_port else None)
        lab = self.task_type == NOTEBOOK_TYPE and bool(command)  # a notebook job's JupyterLab, on the task's port
        if lab:
            env.update(notebook_env(self.env["TONY_AM_TOKEN"], self.app_id, self.host, port.port,
                                    self.spec.notebook_idle_timeout_ms))
        driver = self.spec.framework == "horovod" and self.task_type == "driver"  # Horovod's rendezvous server
        if driver:
            env.update(driver_env(cluster, self.workdir / "horovod-driver"))
        user_dir = user_directory(self.workdir, self.env)  # the source, resources and venv side by side
        if command:
            self.inbox = ReportInbox(secrets.token_hex(16))
            env.update(self.inbox.environment())
        if tb_port:
            tb_port.release_for_launch()
            self._start_tensorboard(tb_port.port)
        port.release_for_launch()
        # Stamped before the spawn, and `exited` once its end is seen: the whole run lies between.
        spawned = time.time() if command else None
        if command:
            self.user = subprocess.Popen(["bash", "-c", command], cwd=user_dir, env=env,
                                         stdin=subprocess.DEVNULL)
            log.info("started %s (pid %d): %s", self.task_id, self.user.pid, command)
        with contextlib.suppress(AMError, AMUnreachable):
            running = self.user or self.tensorboard  # without a command, TensorBoard alone
            self.am.task_started(self.task_id, self.session_id, running.pid if running else 0, restored=self.restored,
                                 container_id=self.container_id, at=spawned)
        if self.mirror and (self.is_chief or self.follows_rank0):
            threading.Thread(target=self._mirror_loop, name="mirror", daemon=True).start()
        if lab and self.user is not None:
            url, headers = f"http://{self.host}:{port.port}{notebook_path(self.app_id)}", {
                "Authorization": "token " + env[TOKEN_ENV]}
            threading.Thread(target=announce_when_ready, daemon=True, args=(
                url + "api/status", lambda: self.user, lambda: self.am.register_notebook(url), self.stop_event,
                f"JupyterLab at {url}", headers, None)).start()
        unannounced = self._announce() if driver and self.user is not None else None
        code = self._wait()
        exited = time.time()
        code = 1 if unannounced and code == 0 else code
        port.close()
        if self.stop_event.is_set() and code != 0 and self.user is not None:
            log.info("user process ended after stop (%s)", self.stop_reason)
        kill_process_tree(self.tensorboard, grace=2.0)
        # Also after a stop: the user process is dead by now, and checkpoints it wrote since the
        # last periodic sync would otherwise never reach the store.
        self._sync_checkpoints()
        if self.is_chief and self.env.get(BOARD_STORE_ENV):
            self._keep_events(self.env[BOARD_STORE_ENV])
        if self.env.get(NOTEBOOK_STORE_ENV) and self.user is not None:
            keep_executed(self.spec.executes, user_dir, self.env, self.task_id, self.env[NOTEBOOK_STORE_ENV])
        if not self.stop_event.is_set():
            # On disk first: an AM attempt that dies before hearing it still finds the outcome.
            with contextlib.suppress(OSError):
                (self.workdir / RESULT_FILE).write_text(json.dumps(
                    {"task_id": self.task_id, "session_id": self.session_id, "exit_code": code}))
            if self.inbox:
                self.inbox.drain()  # the last reports, sent as the process exited
            with contextlib.suppress(AMError, AMUnreachable):
                # The final figures, progress and store outcome, before the result ends the task.
                self.am.heartbeat(self.task_id, self.session_id, container_id=self.container_id, **self._report())
                self.am.result(self.task_id, self.session_id, code, stderr_tail() if code else "",
                               container_id=self.container_id, at=exited if self.user is not None else None)
        if self.inbox:
            self.inbox.close()
        return code

    def _keep_events(self, location: str) -> None:
        """Copies the TensorBoard event files of a chief with a directory of its own to ``location``."""
        from .kept_events import keep_events
        try:
            logdir = Path(self.env.get("TONY_LOG_DIR", str(self.workdir / "tensorboard")))
            log.info("kept %d TensorBoard file(s) in %s", keep_events(logdir, location), location)
        except Exception as e:  # noqa: BLE001 - the store's errors: the job's outcome does not depend on them
            log.warning("the TensorBoard event files were not kept in %s: %s", location, e)

    def _announce(self) -> str | None:
        """Waits for the Horovod driver's port file and tells the AM where its server listens (the
        workers' cluster spec waits for it); else says why not and stops the driver."""
        assert self.user is not None
        found = announced(self.workdir / "horovod-driver", self.user, stopped=self.stop_event.is_set)
        if isinstance(found, str):
            print(f"tony-executor: {found}", file=sys.stderr, flush=True)
            kill_process_tree(self.user, grace=2.0)
            return found
        port, slots = found
        self.am.horovod_driver(self.task_id, self.session_id, self.host, port, slots)
        return None

    def _wait(self) -> int:
        proc = self.user or self.tensorboard
        limit_ms = self.spec.execution_timeout_ms
        deadline = time.monotonic() + limit_ms / 1000.0 if limit_ms > 0 and self.user else None
        if proc is not None:
            # Woken the moment the process ends (or a stop is asked for), not at the next poll.
            def reap() -> None:
                with contextlib.suppress(Exception):
                    proc.wait()
                self._wake.set()
            threading.Thread(target=reap, name="reaper", daemon=True).start()
        while True:
            if proc is not None and proc.poll() is not None:
                rc = proc.returncode
                return 128 - rc if rc < 0 else rc
            if deadline is not None and time.monotonic() > deadline:
                # TonY's execution timeout: the task fails (exit 1) rather than hanging the job.
                print(f"tony-executor: user process exceeded tony.task.executor.execution-timeout-ms="
                      f"{limit_ms}; killed", file=sys.stderr, flush=True)
                kill_process_tree(self.user, grace=5.0)
                return 1
            self._wake.wait(1.0)
            self._wake.clear()
            if self.stop_event.is_set():
                # Checkpoints first: the AM SIGKILLs the container a few seconds after asking it to
                # stop, and a trainer can take longer than that to die. The mirror is safe to run
                # while the trainer still writes; the sync after it is gone catches the rest.
                self._sync_checkpoints()
                kill_process_tree(self.user, grace=5.0)
                return 143


def stderr_tail(lines: int = 20) -> str:
    """The user process's last stderr lines (it shares this executor's stderr file), without the
    executor's own log lines: the first thing anyone needs to see when a task fails."""
    try:
        path = os.readlink("/proc/self/fd/2")
    except OSError:
        return ""
    return log_tail(path, lines, skip=" tony-executor ")


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s tony-executor %(levelname)s %(message)s")
    logging.getLogger("pyhdfs").setLevel(logging.WARNING)  # a line per WebHDFS call says nothing
    executor = TaskExecutor()
    signal.signal(signal.SIGTERM, lambda s, f: executor._stop("received SIGTERM"))
    try:
        return executor.run()
    except (ValueError, OSError) as e:
        log.error("%s", e)
        with contextlib.suppress(Exception):
            executor.am.result(executor.task_id, executor.session_id, 1, str(e), container_id=executor.container_id)
        return 1


if __name__ == "__main__":
    sys.exit(main())
