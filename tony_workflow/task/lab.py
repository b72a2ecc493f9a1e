"""A notebook job's program: JupyterLab in the task's container (``tony notebook``).

The executor (:mod:`tony_workflow.task.serving`) gives it the task's port, the path it serves under
and the token every request must carry; the token is moved into Jupyter's own environment
variable (never a command line, which any user of the node can read) and JupyterLab starts in the
task's working directory with the job's interpreter, so that its kernels see what any task sees:
``TONY_*``, the checkpoint and log directories, the GPUs pinned to the container, Kerberos
credentials.

It ends, and with it the job and its container, when:

- someone shuts it down from JupyterLab (File, Shut Down);
- it has been idle for ``TONY_NOTEBOOK_IDLE_S`` seconds (the job's
  ``tony.application.notebook-idle-timeout-ms``; 0: never): no request, no kernel at work and no
  open connection (a browser tab holds one to each kernel it shows) in that time. It then shuts
  Jupyter down as the menu does, and the kernels with it;
- the task is stopped (``tony kill``, the job's time limit): SIGTERM, passed on to Jupyter.

Run as ``python -m tony_workflow.task.lab``; exit status: Jupyter's (0 after a shut down).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from ..protocol import SHIPPED_DATA_DIR
from .serving import BASE_ENV, IDLE_ENV, IP_ENV, PORT_ENV, TOKEN_ENV

__all__ = ["idle_seconds", "main"]

_LOOK_S = 2.0  # seconds between looks at the lab's activity


def _ask(url: str, token: str, method: str = "GET") -> Any:
    request = urllib.request.Request(url, method=method, headers={"Authorization": f"token {token}"},
                                     data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=10) as reply:
        body = reply.read()
    return json.loads(body) if body else None


def _when(text: str | None) -> float:
    try:
        return _dt.datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return 0.0


def idle_seconds(status: dict[str, Any], kernels: list[dict[str, Any]], now: float) -> float:
    """How long the lab has been idle, from its ``/api/status`` and ``/api/kernels`` answers: 0
    while a kernel works or a connection is open, else the time since its last activity."""
    if int(status.get("connections") or 0) > 0 or any(k.get("execution_state") == "busy" for k in kernels):
        return 0.0
    return max(0.0, now - _when(status.get("last_activity")))


def shipped_jupyter() -> tuple[list[str], dict[str, str]]:
    """Where JupyterLab's pages and Jupyter's data are when this interpreter's prefix has none: in
    the job's shipped environment (YARN: a wheel's ``share/`` files travel in its part, under
    SHIPPED_DATA_DIR). The lab's arguments and environment for them."""
    if (Path(sys.prefix) / "share" / "jupyter" / "lab" / "static").is_dir():
        return [], {}
    for entry in sys.path:
        data = Path(entry or ".") / SHIPPED_DATA_DIR / "share" / "jupyter"
        if (data / "lab" / "static").is_dir():
            found = os.pathsep.join(p for p in (str(data), os.environ.get("JUPYTER_PATH", "")) if p)
            return [f"--LabApp.app_dir={data / 'lab'}"], {"JUPYTER_PATH": found}
    return [], {}


#: JupyterLab's setting that asks each new user whether to fetch the Jupyter news feed: answered
#: "never" (a cluster's container need not reach a website, nor its user be asked).
NEWS_SETTING = ("@jupyterlab/apputils-extension:notification", "fetchNews", "false")


def app_settings(pages: list[str], into: Path) -> list[str]:
    """The lab's arguments for an application settings directory ``into``: a copy of the
    installation's own (its ``settings/``), whose overrides answer :data:`NEWS_SETTING` unless they
    already do. The user's own settings stay where JupyterLab keeps them."""
    app_dir = next((Path(a.split("=", 1)[1]) for a in pages if a.startswith("--LabApp.app_dir=")),
                   Path(sys.prefix) / "share" / "jupyter" / "lab")
    if (app_dir / "settings").is_dir():
        shutil.copytree(app_dir / "settings", into, dirs_exist_ok=True)
    into.mkdir(parents=True, exist_ok=True)
    overrides: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        overrides = json.loads((into / "overrides.json").read_text())
    plugin, key, value = NEWS_SETTING
    if isinstance(overrides, dict):
        overrides.setdefault(plugin, {}).setdefault(key, value)
    (into / "overrides.json").write_text(json.dumps(overrides))
    return [f"--LabApp.app_settings_dir={into}"]


def main(argv: list[str] | None = None) -> int:
    token = os.environ.pop(TOKEN_ENV, "")
    if not token or PORT_ENV not in os.environ:
        print("tony notebook: this program is a notebook job's JupyterLab and runs in its container "
              f"({TOKEN_ENV} and {PORT_ENV} are set there)", file=sys.stderr)
        return 2
    port, base = int(os.environ[PORT_ENV]), os.environ.get(BASE_ENV, "/")
    ip, idle = os.environ.get(IP_ENV, "127.0.0.1"), int(os.environ.get(IDLE_ENV, "0") or 0)
    private = tempfile.mkdtemp(prefix="tony-lab-")  # Jupyter's runtime files (kernels' connection keys)
    env = {**os.environ, "JUPYTER_TOKEN": token, "JUPYTER_RUNTIME_DIR": private,
           "JUPYTERLAB_WORKSPACES_DIR": os.path.join(private, "workspaces")}
    for name in (TOKEN_ENV, PORT_ENV, BASE_ENV, IP_ENV, IDLE_ENV):
        env.pop(name, None)
    pages, data = shipped_jupyter()
    env.update(data)
    argv = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.ip={ip}", f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0", f"--ServerApp.base_url={base}", f"--ServerApp.root_dir={os.getcwd()}",
            "--ServerApp.allow_remote_access=True", "--ServerApp.quit_button=True",
            "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            *pages, *app_settings(pages, Path(private) / "app-settings"), *(["--allow-root"] if os.geteuid() == 0 else []),  # a container's user is the job's, root or not
            *(sys.argv[1:] if argv is None else argv)]
    if idle:  # kernels nobody uses go first; the lab then goes when nothing at all happens
        argv += [f"--MappingKernelManager.cull_idle_timeout={idle}", "--MappingKernelManager.cull_connected=False",
                 f"--MappingKernelManager.cull_interval={max(1, min(60, idle // 2))}"]
    lab = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
    signal.signal(signal.SIGTERM, lambda *_: lab.terminate())
    local = f"http://{'127.0.0.1' if ip == '0.0.0.0' else ip}:{port}{base}"
    try:
        while lab.poll() is None:
            time.sleep(_LOOK_S)
            if not idle:
                continue
            try:
                # Asked without counting as activity (Jupyter counts every API request otherwise).
                quiet = idle_seconds(_ask(local + "api/status?no_track_activity=1", token),
                                     _ask(local + "api/kernels?no_track_activity=1", token), time.time())
            except (OSError, ValueError):
                continue  # not up yet, or busy answering: looked at again
            if quiet >= idle:
                print(f"tony notebook: idle for {quiet:.0f} s (tony.application.notebook-idle-timeout-ms): "
                      "shutting down", file=sys.stderr, flush=True)
                with contextlib.suppress(OSError, ValueError):
                    _ask(local + "api/shutdown", token, "POST")
                try:
                    lab.wait(30)
                except subprocess.TimeoutExpired:
                    lab.terminate()
        return lab.wait()
    finally:
        if lab.poll() is None:
            lab.kill()
            lab.wait()
        import shutil
        shutil.rmtree(private, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
