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
import contextlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from ..storage.local import LocalStorage
from . import TonyClient

__all__ = ["cmd_tensorboard", "serve_kept_events"]

_READY_S = 120.0


def _free_port(preferred: int) -> int:
    """``preferred`` when nothing listens there, else any free port."""
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise OSError("no free port")


def _event_files(store: Any, key: str, scratch: Path) -> Path:
    """A local directory holding the event files under ``key`` of ``store``."""
    if isinstance(store, LocalStorage):
        return store.root / key
    for rel in store.list(key):
        target = scratch / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        store.get(f"{key}/{rel}", target)
    return scratch


def _dies_with_this_command() -> None:
    """Run in TensorBoard's process before it starts: the kernel stops it (SIGTERM) when this
    command dies, however it dies (Linux's PR_SET_PDEATHSIG), so no server is left behind."""
    with contextlib.suppress(Exception):
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)


def serve_kept_events(logdir: Path, host: str, port: int, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Starts TensorBoard on ``logdir`` and returns it with its URL once it answers; RuntimeError
    with the end of its log when it does not."""
    from ..task.executor import TENSORBOARD_WITHOUT_TF

    out = open(log, "ab")  # noqa: SIM115 - TensorBoard writes there while it runs
    proc = subprocess.Popen([sys.executable, "-c", TENSORBOARD_WITHOUT_TF, "--logdir", str(logdir), "--host", host,
                             "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            preexec_fn=_dies_with_this_command)  # noqa: PLW1509 - the command runs no thread
    out.close()
    url = f"http://{host}:{port}/"
    deadline = time.monotonic() + _READY_S
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError), urllib.request.urlopen(url + "data/logdir", timeout=2):
            return proc, url
        time.sleep(0.3)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    tail = log.read_text(errors="replace").strip().splitlines()[-5:]
    raise RuntimeError("TensorBoard did not start: " + (" / ".join(tail) or f"it exited {proc.returncode}"))


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
        logdir = _event_files(history.store, kept["key"], Path(scratch) / "events")
        try:
            proc, url = serve_kept_events(logdir, args.host, _free_port(args.port), Path(scratch) / "tensorboard.log")
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
