"""TensorBoard for finished jobs, started by the history server when someone opens one.

One TensorBoard per job, shared by everyone looking at it, over the event files its history
record kept (copied out of HDFS first, read in place from a local history). It serves under the
job page's own path (TensorBoard's ``--path_prefix``), and the server passes requests through to
it, so that the server's authentication and the job's ACL apply to it as to the page. A board
nobody has asked anything of for ``idle_s`` seconds is stopped, and so is the least recently used
when ``most`` run; all are stopped with the server.

TensorBoard is started from the keeper's own thread, which lives as long as the keeper: the
kernel stops a child whose parent thread ends (``PR_SET_PDEATHSIG``), and the server's request
threads come and go.
"""
from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from queue import Queue
from typing import Any

from ..storage.local import LocalStorage

__all__ = ["Board", "BoardKeeper", "event_files", "free_port", "serve_kept_events"]

_READY_S = 120.0


def free_port(preferred: int) -> int:
    """``preferred`` when nothing listens there, else any free port."""
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise OSError("no free port")


def event_files(store: Any, key: str, scratch: Path) -> Path:
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


def serve_kept_events(logdir: Path, host: str, port: int, log: Path,
                      path_prefix: str = "") -> tuple[subprocess.Popen[bytes], str]:
    """Starts TensorBoard on ``logdir`` (serving under ``path_prefix``: a path that starts with a
    slash, or nothing) and returns it with its URL once it answers; RuntimeError with the end of
    its log when it does not."""
    from ..task.executor import TENSORBOARD_WITHOUT_TF

    out = open(log, "ab")  # noqa: SIM115 - TensorBoard writes there while it runs
    proc = subprocess.Popen([sys.executable, "-c", TENSORBOARD_WITHOUT_TF, "--logdir", str(logdir), "--host", host,
                             "--port", str(port), *(["--path_prefix", path_prefix] if path_prefix else [])], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            preexec_fn=_dies_with_this_command)  # noqa: PLW1509 - the command runs no thread
    out.close()
    url = f"http://{host}:{port}{path_prefix}/"
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


@dataclass
class Board:
    """A running TensorBoard: its process, where it answers, and when it was last asked."""

    app_id: str
    proc: subprocess.Popen[bytes]
    url: str
    scratch: Path
    last_used: float = field(default_factory=time.monotonic)


class BoardKeeper:
    """Starts, shares and stops the boards (see the module)."""

    def __init__(self, idle_s: float = 600.0, most: int = 8, host: str = "127.0.0.1"):
        self.idle_s, self.most, self.host = idle_s, most, host
        self._boards: dict[str, Board] = {}
        self._starting: dict[str, Future[Board]] = {}
        self._lock = threading.Lock()
        self._work: Queue[tuple[Callable[[], Any], Future[Any]] | None] = Queue()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tony-boards", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                item = self._work.get(timeout=min(5.0, max(0.5, self.idle_s / 4)))
            except Exception:  # noqa: BLE001 - queue.Empty: time to look for idle boards
                item = None
            if item is not None:
                fn, future = item
                try:
                    future.set_result(fn())
                except BaseException as e:  # noqa: BLE001 - handed to the waiting request
                    future.set_exception(e)
            self._stop_idle()

    def _stop_idle(self) -> None:
        now = time.monotonic()
        with self._lock:
            idle = [b for b in self._boards.values() if now - b.last_used > self.idle_s or b.proc.poll() is not None]
            for b in idle:
                del self._boards[b.app_id]
        for b in idle:
            _stop(b)

    def running(self) -> dict[str, Board]:
        with self._lock:
            return dict(self._boards)

    def board(self, app_id: str, store: Any, key: str, prefix: str, timeout: float = 150.0) -> Board:
        """The job's board, started if none runs (on the keeper's thread; this waits for it)."""
        with self._lock:
            b = self._boards.get(app_id)
            if b is not None and b.proc.poll() is None:
                b.last_used = time.monotonic()
                return b
            future = self._starting.get(app_id)
            if future is None:
                future = Future()
                self._starting[app_id] = future
                self._work.put((lambda: self._start(app_id, store, key, prefix), future))
        return future.result(timeout)

    def _start(self, app_id: str, store: Any, key: str, prefix: str) -> Board:
        try:
            scratch = Path(tempfile.mkdtemp(prefix="tony-board-"))
            try:
                logdir = event_files(store, key, scratch / "events")
                if not logdir.is_dir() or not any(logdir.rglob("*")):
                    raise RuntimeError(f"the event files of {app_id} are no longer in {getattr(store, 'uri', store)}/{key} "
                                       "(purged with the history's retention?)")
                proc, url = serve_kept_events(logdir, self.host, free_port(0), scratch / "tensorboard.log",
                                              path_prefix=prefix)
            except BaseException:
                shutil.rmtree(scratch, ignore_errors=True)
                raise
            b = Board(app_id, proc, url, scratch)
            with self._lock:
                late = self._stopped.is_set()  # stopped while this board started: stop() did not see it
                if not late:
                    self._boards[app_id] = b
            if late:
                _stop(b)
                raise RuntimeError("the history server is stopping")
            with self._lock:
                extra = sorted(self._boards.values(), key=lambda x: x.last_used)[:max(0, len(self._boards) - self.most)]
                for old in extra:
                    del self._boards[old.app_id]
            for old in extra:
                _stop(old)
            return b
        finally:
            with self._lock:
                self._starting.pop(app_id, None)

    def stop(self) -> None:
        """Stops every board and the keeper's thread."""
        self._stopped.set()
        self._work.put(None)  # wakes the thread now, not at its next look for idle boards
        with self._lock:
            boards, self._boards = list(self._boards.values()), {}
        for b in boards:
            _stop(b)
        # A board still starting (TensorBoard takes seconds) is stopped by the thread itself once it answers.
        self._thread.join(_READY_S + 15)


def _stop(b: Board) -> None:
    if b.proc.poll() is None:
        b.proc.terminate()
        try:
            b.proc.wait(10)
        except subprocess.TimeoutExpired:
            b.proc.kill()
            b.proc.wait()
    shutil.rmtree(b.scratch, ignore_errors=True)
