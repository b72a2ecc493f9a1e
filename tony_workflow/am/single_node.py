"""TonY's single-node job: a job with no task instances (or ``tony.application.single-node=true``)
runs its command in the ApplicationMaster's own container, once, with no task and no second
container; the job ends as the command does. TonY's preprocessing job
(``tony.application.enable-preprocess``) is the same command run there first, before the tasks
are asked for: it failing fails the job, and what it prints after ``Model parameters: `` every
task gets as ``MODEL_PARAMS``.

The command is ``tony.am.command``, else ``tony.containers.command``, else ``executes`` (with
``task_params``), run where a task's would (the job's source beside its resources and ``venv``:
:meth:`~tony_workflow.backends.base.ClusterManager.am_workdir`), in the environment TonY gives it:
the job's container, execution and shell variables, ``TB_PORT`` (a free port, for a TensorBoard of
the command's own), ``PREPROCESSING_JOB=true``, and ``HOME`` set to that directory. Its output
goes to the ApplicationMaster's log (``tony logs APP --task am``). A kill of the job, or
``tony.application.timeout``, stops it with its process tree.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..context import task_env
from ..frameworks import thread_env
from ..process import kill_tree
from ..status import JobState
from ..task.workdir import job_python, python_path, task_pythonpath, user_directory

if TYPE_CHECKING:
    from ..backends import ClusterManager
    from ..events import EventLog
    from ..spec import JobSpec
    from ..status import JobStatus


class ApplicationMaster(Protocol):
    """What a command run in the AM's container reads and calls of the AM (:class:`.master.ApplicationMaster`,
    which runs it: named here by what it offers, so that neither module imports the other)."""

    @property
    def spec(self) -> JobSpec: ...
    @property
    def app_id(self) -> str: ...
    @property
    def app_dir(self) -> Path: ...
    @property
    def host(self) -> str: ...
    @property
    def cluster(self) -> ClusterManager: ...
    @property
    def events(self) -> EventLog: ...
    @property
    def status(self) -> JobStatus: ...
    @property
    def lock(self) -> threading.RLock: ...
    @property
    def cancel(self) -> threading.Event: ...
    @property
    def kill_requested(self) -> str | None: ...
    def publish(self, force: bool = False) -> None: ...

__all__ = ["MODEL_PARAMS_ENV", "preprocess", "run_single_node"]

_POLL_S = 0.2
#: What a preprocessing job prints before the parameters it hands the tasks, and their variable.
_PARAMS, MODEL_PARAMS_ENV = "Model parameters: ", "MODEL_PARAMS"


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _environment(am: ApplicationMaster, workdir: Path, workdir_env: dict[str, str], user_dir: str,
                 python: str) -> dict[str, str]:
    spec = am.spec
    # The AM's own secrets stay its own.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TONY_AM_", "TONY_SPEC"))}
    env.update(spec.container_env)
    env.update({"TONY_APPLICATION_ID": am.app_id, "PYTHONUNBUFFERED": "1", "PREPROCESSING_JOB": "true",
                "HOME": user_dir, "TB_PORT": str(_free_port(am.host))})
    env["PATH"] = os.pathsep.join([*python_path(workdir, python), env.get("PATH", os.defpath)])
    env.update(task_env(spec.context))
    env.update(spec.execution_env)
    env.update(spec.shell_env)
    env.update(thread_env(spec.am.vcores, 1, env))
    env.update(task_pythonpath(workdir_env, env.get("PYTHONPATH")))
    return env


def _run(am: ApplicationMaster, what: str) -> tuple[tuple[str, str] | None, int | None, str | None]:
    """Runs the job's command here: (how a kill or the timeout ended it, else None; its exit code;
    the last 'Model parameters: ' it printed, TonY's word from a preprocessing job to the tasks)."""
    spec = am.spec
    workdir = am.cluster.am_workdir(am.app_dir)
    environ = dict(os.environ)
    user_dir = user_directory(workdir, environ)
    python = job_python(workdir, spec)
    command = spec.command_for("am", python=python)
    if command is None:  # validation refuses such a job; an AM given one anyway says why
        return (JobState.FAILED, (f"a {what} needs a command: tony.am.command, tony.containers.command or "
                                 "executes")), None, None
    env = _environment(am, workdir, environ, str(user_dir), python)
    # Its output goes to the AM's own, read on the way for the parameters it hands the tasks.
    proc = subprocess.Popen(["bash", "-c", command], cwd=user_dir, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, start_new_session=True)
    params: list[str] = []
    reader = threading.Thread(target=_relay, args=(proc, params), name="single-node-output", daemon=True)
    reader.start()
    am.events.emit(f"{what.replace(' ', '_')}_started", pid=proc.pid, command=command, directory=str(user_dir))
    timeout = spec.application_timeout_ms / 1000.0
    started = am.status.started_at or time.time()
    ended: tuple[str, str] | None = None
    while proc.poll() is None:
        if am.cancel.wait(_POLL_S):
            ended = (JobState.KILLED, am.kill_requested or "killed")
        elif timeout > 0 and time.time() - started > timeout:
            ended = (JobState.FAILED,
                     f"Application timed out after {spec.application_timeout_ms} ms (tony.application.timeout)")
        if ended is not None:
            kill_tree(proc.pid, 5.0)
            proc.wait()
            break
    reader.join(timeout=5)
    am.events.emit(f"{what.replace(' ', '_')}_ended", exit_code=proc.returncode)
    code = proc.returncode
    return ended, 128 - code if code < 0 else code, params[-1] if params else None


def _relay(proc: subprocess.Popen, params: list[str]) -> None:
    assert proc.stdout is not None
    out = sys.stdout.buffer
    for line in proc.stdout:
        out.write(line)
        out.flush()
        text = line.decode(errors="replace")
        if _PARAMS in text:
            params.append(text.split(_PARAMS, 1)[1].strip())


def run_single_node(am: ApplicationMaster) -> tuple[str, str]:
    """Runs the job's command in this container and says how the job ended: (state, diagnostics)."""
    with am.lock:
        am.status.state = JobState.RUNNING
        am.publish(force=True)
    ended, code, _ = _run(am, "single node job")
    if ended is not None:
        return ended
    if code == 0:
        return JobState.SUCCEEDED, "Single node job exited with 0"
    return JobState.FAILED, (f"Single node job exited with {code}: its output is in the ApplicationMaster's log "
                             f"(tony logs {am.app_id} --task am)")


def preprocess(am: ApplicationMaster) -> tuple[tuple[str, str] | None, str | None]:
    """TonY's preprocessing job (``tony.application.enable-preprocess``): the command run here before
    any task is asked for. (How the job ended, when it failed or was stopped, else None; the
    parameters it printed after 'Model parameters: ', which every task gets as ``MODEL_PARAMS``.)"""
    ended, code, params = _run(am, "preprocessing job")
    if ended is not None:
        return ended, None
    if code != 0:
        return (JobState.FAILED, (f"Preprocessing job exited with {code}: its output is in the ApplicationMaster's "
                                 f"log (tony logs {am.app_id} --task am)")), None
    return None, params
