"""``tony notebook``: JupyterLab in one container of the cluster, with the resources asked for.

The notebook is a job like the others (a ``standalone`` job of one ``notebook`` task running
:mod:`tony_workflow.task.lab`): it is in ``tony list`` and the history, has a page, and ends with
``tony kill``, its idle timeout (``--idle-timeout``: ``tony.application.notebook-idle-timeout-ms``)
or its time limit, or when it is shut down from JupyterLab. It does not end when this command
does.

The command waits until JupyterLab answers, then prints one URL that opens it: on the history
server when one is configured (``$TONY_HISTORY_SERVER``, ``tony.history.server-url``), else on a
server this command runs itself until Ctrl-C (the link signs its owner in; ``--attach APP``
serves a running notebook again). Either way the server passes HTTP and websockets on to the lab
under the job page's access rule (:mod:`tony_workflow.web.notebook`); the lab's own token is never
shown.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import signal
import sys
import threading
import time
from typing import Any

from ..errors import TonyError, UsageError
from ..retention import parse_duration
from ..spec import JobSpec, load_job
from ..spec.errors import SpecError, SpecIssue
from . import JobHandle, TonyClient

__all__ = ["LAB_COMMAND", "add_notebook_parser", "cmd_notebook", "notebook_spec"]

#: What a notebook job's task runs.
LAB_COMMAND = "python -m tony_workflow.task.lab"
_READY_S = 600.0  # how long the command waits for JupyterLab to answer once the job runs


def add_notebook_parser(sub: Any, backend_help: str) -> None:
    """``tony notebook``'s arguments, in the subcommands ``sub`` of ``tony``."""
    nb = sub.add_parser("notebook", help="JupyterLab in a container of the cluster, reached through one URL",
                        description=__doc__.split("\n\n")[1] if __doc__ else None)
    nb.add_argument("--memory", default="2g", help="the container's memory (default 2g)")
    nb.add_argument("--vcores", type=int, default=1, help="its vcores (default 1)")
    nb.add_argument("--gpus", type=int, default=0, help="its GPUs (default 0)")
    nb.add_argument("--queue", help="the YARN queue")
    nb.add_argument("--node-label", help="the node label its container must have")
    nb.add_argument("--python-venv", help="a virtualenv (directory or zip) with JupyterLab in it, shipped with it")
    nb.add_argument("--src-dir", help="a directory shipped as the notebook's working directory")
    nb.add_argument("--idle-timeout", default="1h", metavar="DURATION",
                    help="end when nothing has happened for this long (30m, 2h, 1d; 0: never; default 1h)")
    nb.add_argument("--time-limit", default="0", metavar="DURATION",
                    help="end after this long whatever happens (TonY's notebooks: 24h; default 0: none)")
    nb.add_argument("--name", default="notebook", help="the job's name (default notebook)")
    nb.add_argument("--conf", action="append", metavar="KEY=VALUE", help="any other job key (repeatable)")
    nb.add_argument("--attach", metavar="APPLICATION_ID", help="serve a running notebook job instead of starting one")
    nb.add_argument("--host", default="127.0.0.1", help="where this command's own server listens (no history "
                                                        "server configured; default 127.0.0.1)")
    nb.add_argument("--port", type=int, default=0, help="its port (default: any free one)")
    nb.add_argument("--backend", choices=["local", "yarn"], default=argparse.SUPPRESS, help=backend_help)
    nb.set_defaults(fn=cmd_notebook)


def _ms(flag: str, text: str) -> int:
    text = text.strip()
    if text in ("0", ""):
        return 0
    try:
        return int(parse_duration(text) * 1000)
    except ValueError:
        raise SpecError([SpecIssue(flag, text, "expected a duration such as 30m, 2h or 1d, or 0 for none")]) from None


def notebook_spec(args: argparse.Namespace, backend: str) -> JobSpec:
    """The notebook job ``tony notebook``'s arguments describe (not yet validated)."""
    task: dict[str, Any] = {"instances": 1, "memory": args.memory, "vcores": args.vcores, "gpus": args.gpus,
                            "command": LAB_COMMAND}
    if args.node_label:
        task["node_label"] = args.node_label
    conf: dict[str, Any] = {"tony.application.notebook-idle-timeout-ms": _ms("--idle-timeout", args.idle_timeout)}
    limit = _ms("--time-limit", args.time_limit)
    if limit:
        conf["tony.application.timeout"] = limit
    given = {str(c).split("=", 1)[0].strip() for c in args.conf or ()}
    if backend == "yarn" and "tony.yarn.environment-packages" not in given:
        # The lab goes with its environment, and so does the TensorBoard its summaries show in.
        board = ["tensorboard"] if importlib.util.find_spec("tensorboard") is not None else []
        conf["tony.yarn.environment-packages"] = ",".join(["jupyterlab", "ipykernel", *board])
    doc: dict[str, Any] = {"name": args.name, "framework": "standalone", "tasks": {"notebook": task}, "conf": conf}
    if args.queue:
        doc["queue"] = args.queue
    return load_job(doc, conf=list(args.conf or ()), src_dir=args.src_dir, python_venv=args.python_venv)


def _ready(handle: JobHandle) -> str:
    """Waits for the notebook to answer; the job's end (with its diagnostics) raises UsageError."""
    said, deadline = "", None
    while True:
        st = handle.status()
        if st.notebook_url:
            return st.notebook_url
        if st.is_final:
            raise TonyError(f"the notebook {handle.app_id} ended {st.state} before JupyterLab answered"
                             + (f": {st.diagnostics}" if st.diagnostics else "")
                             + f"; its output: tony logs {handle.app_id}")
        line = st.waiting_reason or f"{st.state}: waiting for JupyterLab to answer"
        if line != said:
            print(f"tony: {handle.app_id} {line}", file=sys.stderr, flush=True)
            said = line
        if st.state == "RUNNING":
            deadline = deadline or time.monotonic() + _READY_S
            if time.monotonic() > deadline:
                raise TonyError(f"JupyterLab of {handle.app_id} did not answer in {_READY_S:.0f} s; it still runs: "
                                 f"see tony logs {handle.app_id}, end it with tony kill {handle.app_id}")
        time.sleep(0.25)


def cmd_notebook(args: argparse.Namespace) -> int:
    from ..backends import history_server

    client = TonyClient(args.backend)
    server = history_server()
    if args.attach:
        handle = client.attach(args.attach)
    else:
        spec = client.checked(lambda: notebook_spec(args, args.backend))
        if not args.python_venv and importlib.util.find_spec("jupyterlab") is None:
            raise UsageError("tony notebook runs JupyterLab, which is not installed here: pip install "
                             "'tony-workflow[notebook]', or give --python-venv with JupyterLab in it")
        handle = client.submit(spec, checked=True)
        print(f"Submitted application {handle.app_id}", file=sys.stderr, flush=True)
    path = f"/jobs/{handle.app_id}/notebook/lab"
    if server:
        _ready(handle)
        print(f"{server}{path}", flush=True)
        print(f"tony: the notebook {handle.app_id} runs until tony kill {handle.app_id}, its idle timeout, or "
              "File > Shut Down in JupyterLab", file=sys.stderr, flush=True)
        return 0
    own = _Server(client, args.host, args.port)  # started while the cluster starts the notebook
    try:
        _ready(handle)
        shown = "localhost" if args.host in ("127.0.0.1", "0.0.0.0") else args.host
        print(f"http://{shown}:{own.port()}{path}?token={own.book.owner_token}", flush=True)
        print(f"tony: served here until Ctrl-C; the notebook {handle.app_id} goes on after it (tony notebook --attach "
              f"{handle.app_id} serves it again, tony kill {handle.app_id} ends it)", file=sys.stderr, flush=True)
        signal.signal(signal.SIGTERM, lambda *_: own.stop())
        while not own.stopped():
            with contextlib.suppress(Exception):  # the cluster not answering for a moment ends nothing
                if handle.status().is_final:
                    print(f"tony: the notebook {handle.app_id} has ended", file=sys.stderr, flush=True)
                    break
            own.wait(2.0)
    except KeyboardInterrupt:
        pass
    finally:
        own.stop()
    return 0


class _Server:
    """The server this command runs (no history server configured), on a thread of its own: it
    serves the owner the job's pages and its notebook until :meth:`stop`."""

    def __init__(self, client: TonyClient, host: str, port: int):
        import uvicorn

        from ..process import user_name
        from ..web.access import TokenBook
        from ..web.boards import BoardKeeper
        from ..web.server import create_server

        self.book, self.keeper = TokenBook(user_name()), BoardKeeper()
        app = create_server(client, self.book, self.keeper)
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
        self.thread = threading.Thread(target=self.server.run, name="tony-notebook-server", daemon=True)
        self.thread.start()

    def port(self) -> int:
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise TonyError("this command's server did not start (is the port taken? --port)")
            time.sleep(0.05)
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    def wait(self, seconds: float) -> None:
        self.thread.join(seconds)

    def stopped(self) -> bool:
        return not self.thread.is_alive()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.keeper.stop()
