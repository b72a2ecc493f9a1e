"""Processes this package starts and stops: liveness, identity and killing whole trees.

One module for the executor (its user process), the fork server (its children), the local
backend (containers and AMs) and the mini cluster (its JVM). A pid alone names a process only
while it lives: once it exits the number can be handed to another process, so every record that
outlives a process keeps the pid together with its start time (:func:`start_time`), and
:func:`alive` and :func:`kill_tree` only act on a pid whose start time still matches.

psutil is imported on first use: an executor pays for it only when it kills or measures something.
"""
from __future__ import annotations

import contextlib
import getpass
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psutil

__all__ = ["alive", "detect_gpus", "file_lock", "group_members", "kill_tree", "login_name", "start_time", "user_name"]

_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
# Start times are whole clock ticks: equal for one process, a tick or more apart for two.
_START_TOLERANCE_S = 0.5 / _TICKS_PER_SECOND


def start_time(pid: int) -> float | None:
    """When ``pid`` started, in seconds after the machine booted, or None when no such process
    exists. An identity for a pid, not a clock: read from the kernel's tick count, so two readings
    of one process are equal (a wall-clock start time is boot time plus ticks, and the boot time the
    kernel reports can move by a second when the clock is adjusted)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[19]) / _TICKS_PER_SECOND
    except (OSError, ValueError, IndexError):
        return None


def _process(pid: int, started: float | None) -> psutil.Process | None:
    """The psutil.Process for ``pid`` if it runs (not a zombie) and, when ``started`` is given, is
    the process that started then; else None."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if started is not None:
            now = start_time(pid)
            if now is None or abs(now - float(started)) > _START_TOLERANCE_S:
                return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except (psutil.NoSuchProcess, ValueError, TypeError):
        return None
    except psutil.AccessDenied:
        # Another user's process: it exists, but it cannot be ours unless no start time was recorded.
        return None if started is not None else psutil.Process(pid)


def alive(pid: int | None, started: float | None = None) -> bool:
    """Whether ``pid`` runs and is not a zombie; with ``started``, also that it is the same process
    that started at that time (a recycled pid is not alive)."""
    if not pid or pid <= 0:
        return False
    return _process(pid, started) is not None


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_members(pgid: int) -> list[psutil.Process]:
    """Every live process of process group ``pgid`` (psutil.Process objects; a zombie whose threads
    have all exited is not live),
    its leader included if it still runs. A group outlives its leader: a container whose first process died keeps the
    processes that one started, and only their group still names them."""
    import psutil

    try:
        os.killpg(pgid, 0)  # one call answers the common case: the group is empty
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    members = []
    for proc in psutil.process_iter():
        with contextlib.suppress(ProcessLookupError, PermissionError, psutil.Error):
            if os.getpgid(proc.pid) == pgid and not (proc.status() == psutil.STATUS_ZOMBIE
                                                      and _ended_zombie(proc.pid)):
                members.append(proc)
    return members


def kill_tree(pid: int, grace: float = 5.0, *, started: float | None = None, group: bool = True) -> None:
    """Stops ``pid``, every descendant and (with ``group``, the default) every member of the process
    group ``pid`` leads and their descendants, also when the leader has already exited: SIGTERM
    (with SIGCONT, so a stopped process can act on it), then SIGKILL to whatever is left after
    ``grace`` seconds.

    With ``started``, nothing is signalled while ``pid`` names a different process than the one that
    started then (its number was handed out again). The group is still signalled when the leader is
    gone: a group id cannot be given to a new group while any member of the old one lives.
    """
    import psutil

    root = _process(pid, started)
    if root is None and started is not None and alive(pid):
        return  # the pid now belongs to an unrelated process
    found: dict[int, psutil.Process] = {}
    heads = [root] if root is not None else []
    if group:
        heads += group_members(pid)
    for head in heads:
        with contextlib.suppress(psutil.Error):
            for p in (head, *head.children(recursive=True)):
                found.setdefault(p.pid, p)
    procs = list(found.values())
    for sig in (signal.SIGTERM, signal.SIGCONT):
        if group:
            _signal_group(pid, sig)
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)
    left = _wait_gone(procs, grace)
    if group:
        _signal_group(pid, signal.SIGKILL)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    _wait_gone(left, 2.0)


def _ended_zombie(pid: int) -> bool:
    """Whether ``pid`` is a zombie all of whose threads have exited. A process whose main thread has
    exited shows as a zombie while its other threads still tear down, holding its files and ports;
    only once they are gone too has it let go of everything."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
    except OSError:
        return True
    return fields.get("State", "").strip().startswith("Z") and int(fields.get("Threads", "1").strip() or 1) <= 1


def _wait_gone(procs: list[Any], timeout: float) -> list[Any]:
    """Waits up to ``timeout`` seconds for ``procs`` to end; returns those still alive. A zombie
    whose threads have all exited counts as ended: its parent may be gone, and whoever inherited it
    (PID 1 in a container may be any program) may reap it late or never."""
    import psutil

    def living() -> list[Any]:
        out = []
        for p in procs:
            with contextlib.suppress(psutil.Error):
                if p.is_running() and not (p.status() == psutil.STATUS_ZOMBIE and _ended_zombie(p.pid)):
                    out.append(p)
        return out
    _, alive_now = psutil.wait_procs(procs, timeout=0)  # reaps those that are our own children
    left = [p for p in living() if p in alive_now]
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        psutil.wait_procs(left, timeout=0)
        left = [p for p in living() if p in left]
    return left


def user_name() -> str:
    """The user this process acts as toward Hadoop: ``HADOOP_USER_NAME``, else the login name, else
    ``tony`` for a uid without a passwd entry (as in some containers)."""
    return os.environ.get("HADOOP_USER_NAME") or login_name()


def login_name() -> str:
    """The login name of this process's user; ``tony`` for a uid without a passwd entry."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "tony"


def detect_gpus() -> list[int]:
    """This machine's NVIDIA GPUs, by index, as ``nvidia-smi`` lists them; none without it."""
    import shutil
    import subprocess
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [int(x) for x in out.split() if x.strip().isdigit()]


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Holds an exclusive lock on the file ``path`` (made, with its directory, if missing): how the
    processes of this machine take turns filling a shared cache."""
    import fcntl
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
