"""A fork server for the embedded cluster's containers.

Starting a task container used to mean starting a Python interpreter and importing the executor:
about 70 ms of CPU per container, paid by every container of a gang at the same moment. The AM of
a local job instead forks one fork server from itself as it starts, before it has any thread (so the
fork is safe); the server imports the executor once, in parallel with the AM's own start. For
each container the server forks a child, which leads a process group of its own (in the server's
session, which has no terminal), takes the container's working directory, environment and
stdout/stderr files, and runs the executor's ``main`` without another interpreter start. Commands
other than the executor are ``exec``-ed from the child. ``ForkServer(inline=False)`` starts the
server as a fresh interpreter instead, for processes that already run threads.

Protocol, JSON lines: the AM writes ``{"id", "argv", "env", "cwd", "stdout", "stderr"}`` to the
server's stdin; the server answers ``{"id", "pid"}`` (or ``{"id", "error"}``) and later reports
every child's end as ``{"exit": pid, "code": c}``, with ``c`` as :meth:`subprocess.Popen.poll`
gives it (negative for a signal). The server exits when its stdin closes; children outlive it,
and once the server is gone their liveness comes from :mod:`tony_workflow.process`.
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import IO, Any

from ... import process

__all__ = ["ForkServer", "ForkServerGone"]

EXECUTOR_MODULE = "tony_workflow.task.executor"


class ForkServerGone(RuntimeError):
    """The fork server is not running (never started, or exited)."""


# ------------------------------------------------------------------------------------ AM side
class ForkServer:
    """The AM's handle on its fork server. Thread-safe."""

    def __init__(self, inline: bool = False, python: str | None = None):
        self.pid: int
        self._popen: subprocess.Popen[bytes] | None = None
        self._requests: IO[bytes]
        self._replies_in: IO[bytes]
        if inline:
            self._fork_inline()
        else:
            self._popen = subprocess.Popen([python or sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, start_new_session=True, close_fds=True)
            self.pid = self._popen.pid
            assert self._popen.stdin is not None and self._popen.stdout is not None  # both PIPE
            self._requests, self._replies_in = self._popen.stdin, self._popen.stdout
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._seq = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._exits: dict[int, int] = {}
        self._gone = False
        #: called with a child's pid once its end is known (outside this object's lock)
        self.on_exit: Callable[[int], None] | None = None
        self._reader = threading.Thread(target=self._read, name="fork-server", daemon=True)
        self._reader.start()

    def _fork_inline(self) -> None:
        """Forks the server from this process. Only safe while this process has a single thread."""
        if threading.active_count() > 1:
            raise RuntimeError("an inline fork server must be started before any other thread")
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the server; it never returns into the caller's code
            code = 1
            try:
                os.setsid()
                os.dup2(req_r, 0)
                os.dup2(rep_w, 1)
                for fd in (req_r, req_w, rep_r, rep_w):
                    os.close(fd)
                serve()
                code = 0
            finally:
                os._exit(code)
        os.close(req_r)
        os.close(rep_w)
        self.pid = pid
        self._requests, self._replies_in = os.fdopen(req_w, "wb"), os.fdopen(rep_r, "rb")

    @property
    def alive(self) -> bool:
        return not self._gone

    def _read(self) -> None:
        for line in self._replies_in:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                if "exit" in msg:
                    self._exits[msg["exit"]] = msg["code"]
                else:
                    self._replies[msg["id"]] = msg
                self._cond.notify_all()
            if "exit" in msg and self.on_exit is not None:
                self.on_exit(msg["exit"])
        with self._cond:
            self._gone = True
            self._cond.notify_all()

    def spawn_all(self, launches: list[tuple[list[str], dict[str, str], str, str, str]],
                  timeout: float = 30.0) -> list[int | None]:
        """Starts several processes in one exchange. Returns, in order, each one's pid, or None for
        one the server did not start (it failed to fork, or went away): the caller starts those
        itself. Raises ForkServerGone if the server was already gone."""
        with self._cond:
            if self._gone:
                raise ForkServerGone("fork server exited")
            seqs, lines = [], []
            for argv, env, cwd, stdout, stderr in launches:
                self._seq += 1
                seqs.append(self._seq)
                lines.append(json.dumps({"id": self._seq, "argv": argv, "env": env, "cwd": cwd,
                                         "stdout": stdout, "stderr": stderr}) + "\n")
            try:
                self._requests.write("".join(lines).encode())
                self._requests.flush()
            except (BrokenPipeError, ValueError, OSError) as e:
                self._gone = True
                raise ForkServerGone(f"fork server unreachable: {e}") from None
            pids: list[int | None] = []
            deadline = time.monotonic() + timeout
            for seq in seqs:
                self._cond.wait_for(partial(self._answered, seq), max(0.0, deadline - time.monotonic()))
                reply = self._replies.pop(seq, None) or {}
                pids.append(reply.get("pid"))
            return pids

    def poll(self, pid: int) -> int | None:
        """The exit code of a child, or None while it runs. A child whose end the server can no longer
        report (the server died first) counts as killed once it is gone."""
        with self._lock:
            if pid in self._exits:
                return self._exits[pid]
            gone = self._gone
        if gone and not process.alive(pid):
            return -signal.SIGKILL
        return None

    def wait(self, pid: int, timeout: float) -> int | None:
        with self._cond:
            self._cond.wait_for(lambda: pid in self._exits or self._gone, timeout)
        return self.poll(pid)

    def _answered(self, seq: int) -> bool:
        """Whether request ``seq`` has its reply, or never will (the server is gone). Lock held."""
        return seq in self._replies or self._gone

    def close(self) -> None:
        """Stops the server (children keep running). Idempotent."""
        try:
            self._requests.close()
        except OSError:
            pass
        self._reap_server(5.0)

    def _reap_server(self, timeout: float) -> None:
        if self._popen is not None:
            try:
                self._popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._popen.kill()
                self._popen.wait()
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return
            if done:
                return
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                deadline = time.monotonic() + 30
            time.sleep(0.02)


# -------------------------------------------------------------------------------- server side
def _write(msg: dict[str, Any]) -> None:
    data = (json.dumps(msg) + "\n").encode()
    while data:
        data = data[os.write(1, data):]


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _write({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _is_executor(argv: list[str]) -> bool:
    return (len(argv) >= 3 and argv[1:3] == ["-m", EXECUTOR_MODULE]
            and os.path.realpath(argv[0]) == os.path.realpath(sys.executable))


def _become(request: dict[str, Any], close_fds: list[int]) -> int:
    """In the forked child: set up the container's process and run it. Returns its exit code."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
    for fd in close_fds:
        os.close(fd)
    with contextlib.suppress(PermissionError):  # the server already made it a group leader
        os.setpgid(0, 0)
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    env, argv = request["env"], request["argv"]
    os.environ.clear()
    os.environ.update(env)
    if not _is_executor(argv):
        os.execvpe(argv[0], argv, env)
    from ...task import executor

    sys.argv = [executor.__file__, *argv[3:]]
    try:
        code = executor.main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return code or 0


def _exit_child(code: int) -> None:
    """Ends a container's process as an interpreter exit would (exit handlers, logging, buffered
    output), without returning into the server's, or the AM's, code."""
    try:
        import atexit

        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    finally:
        os._exit(code & 0xFF if code >= 0 else 1)


def serve() -> None:
    """The server's loop, until its request pipe closes. Containers are forked from here and never
    return from it."""
    # Imported once here and inherited by every child: the executor, and what it imports when used
    # (psutil on its first metrics sample, storage when it restores checkpoints, as every task does).
    import psutil  # noqa: F401

    from ... import storage  # noqa: F401
    from ...task import executor  # noqa: F401

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    buf = b""
    while True:
        try:
            ready, _, _ = select.select([0, wake_r], [], [], 1.0)
        except InterruptedError:
            ready = []
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap()
        if 0 not in ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            request = json.loads(line)
            try:
                pid = os.fork()
            except OSError as e:
                _write({"id": request["id"], "error": f"fork failed: {e}"})
                continue
            if pid == 0:
                code = 127
                try:
                    code = _become(request, [wake_r, wake_w])
                except BaseException as e:  # noqa: BLE001 - the container cannot start: say why where its stderr goes
                    with contextlib.suppress(OSError):
                        os.write(2, f"tony-workflow: cannot start container command "
                                    f"{request['argv'][:1]}: {e}\n".encode())
                finally:
                    _exit_child(code)
            # A process group of its own before the AM hears of it, so that a kill of the group
            # right away reaches it (the child does the same, whichever runs first).
            with contextlib.suppress(OSError):
                os.setpgid(pid, pid)
            _write({"id": request["id"], "pid": pid})


def main() -> None:
    serve()


if __name__ == "__main__":
    main()
