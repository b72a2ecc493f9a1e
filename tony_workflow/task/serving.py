"""The servers a task runs beside (or as) its program, told to the ApplicationMaster once they answer:
the chief's TensorBoard, and a notebook job's JupyterLab (:mod:`tony_workflow.task.lab`).

A notebook job's only task is of the type ``notebook``. Its executor gives the lab the port it
registered for the task, the path it serves under (the history server's ``/jobs/<id>/notebook/``,
so that pages and links need no rewriting through the proxy) and the token every request must
carry: :func:`tony_workflow.protocol.notebook_token` of the job's secret, which user code never
holds and the view token cannot give.
"""
from __future__ import annotations

import logging
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..protocol import notebook_token
from ..rpc import AMError, AMUnreachable

__all__ = ["NOTEBOOK_TYPE", "announce_when_ready", "keep_executed", "notebook_env", "notebook_path", "notebook_probe"]

log = logging.getLogger("tony.executor")

#: The task type of a notebook job's JupyterLab.
NOTEBOOK_TYPE = "notebook"
#: What the lab reads from its environment (the executor sets them; the token is taken out before
#: anything else starts).
TOKEN_ENV, PORT_ENV, BASE_ENV, IP_ENV, IDLE_ENV = ("TONY_NOTEBOOK_TOKEN", "TONY_NOTEBOOK_PORT", "TONY_NOTEBOOK_BASE_URL",
                                                  "TONY_NOTEBOOK_IP", "TONY_NOTEBOOK_IDLE_S")


def notebook_path(app_id: str) -> str:
    """The path a job's JupyterLab serves under: its page's on the history server."""
    return f"/jobs/{app_id}/notebook/"


def notebook_env(am_token: str, app_id: str, host: str, port: int, idle_ms: int) -> dict[str, str]:
    """The environment the notebook task's lab starts with."""
    # On a node's own address every interface is bound: the history server reaches it from elsewhere.
    ip = host if host in ("127.0.0.1", "localhost") else "0.0.0.0"  # the lab asks every request for its token
    return {TOKEN_ENV: notebook_token(am_token), PORT_ENV: str(port), BASE_ENV: notebook_path(app_id), IP_ENV: ip,
            IDLE_ENV: str(idle_ms // 1000)}


def notebook_probe(host: str, port: int, app_id: str) -> str:
    """The URL of the lab's status (it answers once the lab is up)."""
    return f"http://{host}:{port}{notebook_path(app_id)}api/status"


def announce_when_ready(probe: str, proc_of: Callable[[], subprocess.Popen | None], register: Callable[[], Any],
                        stopped: threading.Event, what: str, headers: dict[str, str] | None = None,
                        timeout: float | None = 180.0) -> None:
    """Asks ``probe`` every half second until it answers 200, then calls ``register`` (which tells
    the AM); gives up when the process ``proc_of()`` ends, the task stops, or ``timeout`` passes
    (None: as long as the process runs)."""
    deadline = None if timeout is None else time.time() + timeout
    while (deadline is None or time.time() < deadline) and not stopped.is_set():
        proc = proc_of()
        if proc is None or proc.poll() is not None:
            log.warning("%s exited before it answered", what)
            return
        try:
            with urllib.request.urlopen(urllib.request.Request(probe, headers=headers or {}), timeout=2) as reply:
                ready = reply.status == 200
            if ready:
                register()
                log.info("%s ready", what)
                return
        except (OSError, AMError, AMUnreachable):
            pass
        time.sleep(0.2)


def keep_executed(executes: str | None, user_dir: Path, env: Mapping[str, str], task_id: str, location: str) -> None:
    """Copies the executed copy of the task's notebook (when its program is one) to ``location``,
    in the task's folder, for the job's history record; a failing store is said in the task's log."""
    from ..spec.notebook import is_notebook
    from ..storage import open_storage
    from .notebook import executed_path

    if not is_notebook(executes):
        return
    path = executed_path(Path(str(executes).split()[0]), dict(env))
    path = path if path.is_absolute() else user_dir / path
    if not path.is_file():
        return
    try:
        open_storage(location).put(path, f"{task_id.replace(':', '-')}/{path.name}")
        log.info("kept the executed notebook %s in %s", path.name, location)
    except Exception as e:  # noqa: BLE001 - the store's errors: the task's outcome does not depend on them
        log.warning("the executed notebook %s was not kept in %s: %s", path.name, location, e)
