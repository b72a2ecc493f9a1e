"""``tony tensorboard APP``: TensorBoard for a job that has ended, over the event files kept with
its history record (:meth:`tony_workflow.history.JobHistory.write`).

A job's TensorBoard ends with the job; its event files outlive it in the job history, under the
history's retention. This command serves them on this machine until it is stopped: read where
they are when the history is a local directory, else copied into a temporary directory first
(HDFS), which goes with the command. TensorBoard runs without TensorFlow (its own file API reads a
local directory), as the chief's does.
"""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..web.boards import event_files, free_port, serve_kept_events
from . import TonyClient

__all__ = ["add_tensorboard_parser", "cmd_tensorboard"]


def add_tensorboard_parser(sub: Any, backend_help: str) -> None:
    """``tony tensorboard``'s arguments, in the subcommands ``sub`` of ``tony``."""
    tb = sub.add_parser("tensorboard", help="TensorBoard for a job that has ended, from its history",
                        description="Serves the TensorBoard event files a finished job's history record kept, "
                                    "on this machine, until Ctrl-C. Prints the URL on stdout.")
    tb.add_argument("app_id", metavar="APPLICATION_ID")
    tb.add_argument("--port", type=int, default=6006, help="the port, if free (default 6006; else any free one)")
    tb.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    tb.add_argument("--backend", choices=["local", "yarn"], default=argparse.SUPPRESS, help=backend_help)
    tb.set_defaults(fn=cmd_tensorboard)

def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def cmd_tensorboard(args: argparse.Namespace) -> int:
    history = TonyClient(args.backend).history()
    record = history.get(args.app_id)
    if record is None:
        print(f"tony: no history of {args.app_id} in {history.store.uri}", file=sys.stderr)
        return 3
    kept = record.get("tensorboard_logs")
    if not kept:
        print(f"tony: {args.app_id} kept no TensorBoard event files: its tasks wrote none to TONY_LOG_DIR",
              file=sys.stderr)
        return 3
    with tempfile.TemporaryDirectory(prefix="tony-tensorboard-") as scratch:
        logdir = event_files(history.store, kept["key"], Path(scratch) / "events")
        try:
            proc, url = serve_kept_events(logdir, args.host, free_port(args.port), Path(scratch) / "tensorboard.log")
        except RuntimeError as e:
            print(f"tony: {e}", file=sys.stderr)
            return 1
        # Stopped as a server is: Ctrl-C, or SIGTERM (a service manager, a parent that ignores SIGINT).
        signal.signal(signal.SIGTERM, _interrupted)
        print(url, flush=True)
        print(f"tony: TensorBoard of {args.app_id} ({record.get('state')}, {record.get('name') or '-'}): "
              f"{kept.get('files')} event file(s) kept in {kept.get('uri')}; Ctrl-C or SIGTERM stops it", file=sys.stderr,
              flush=True)
        try:
            proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return 0
    return 0 if proc.returncode == 0 else 1
