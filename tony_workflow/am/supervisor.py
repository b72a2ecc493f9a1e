"""The supervisor of a job's ApplicationMaster: attempts, liveness and the last word on cleanup.

One small process per job runs the AM as its child, as YARN's ResourceManager runs AM attempts:

* **Attempts.** When the AM dies before it has written a final status, what it left running is
  killed and another attempt starts (:mod:`tony_workflow.am.attempts` says where it resumes), up to
  ``tony.am.max-attempts``. Each attempt is recorded in the job's events.
* **Liveness.** The AM must answer its status route; one that has not answered for
  ``tony.am.liveness-timeout-ms`` (stopped, deadlocked, swapped out) is killed and replaced.
* **Start-up.** With ``tony.am.startup-timeout``, an AM that has not answered that long after the
  supervisor started (on the embedded cluster, the job's submission; on YARN, once the gate let the
  job's AM container be asked for, the gate bounding its own wait likewise) fails the job, as
  TonY's client kills an application whose AM does not start in time.
* **Nothing left behind.** The supervisor is a child subreaper: whatever a container starts and
  abandons is re-parented to it rather than to init, so when an attempt ends, and when the job
  ends, it kills every process still below it.

It holds the job's place on the local cluster (the ledger names it as the owner of the job's
resources), so that the resources of a dead AM are not handed to the next job while its containers
are being cleared. Only the standard library and :mod:`tony_workflow.process` are imported: it runs
for the whole job and should cost nothing.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from .. import process
from ..events import EventLog
from ..status import JobState, JobStatus, StatusFile
from .attempts import ATTEMPT_ENV, COUNTED_ENV, OWNER_ENV, mark_am_stopped

__all__ = ["INFO_FILE", "Supervisor", "main"]

#: ``{pid, started}`` of the job's supervisor, beside its status.
INFO_FILE = "supervisor.json"
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Makes orphaned descendants this process's children (Linux); False where that is not possible."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class Supervisor:
    def __init__(self, backend: str, app_dir: Path, *, max_attempts: int, liveness_s: float,
                 python: str = sys.executable, carried: dict | None = None, startup_s: float = 0.0):
        self.backend = backend
        self.app_dir = app_dir
        self.max_attempts = max(1, max_attempts)
        #: what an earlier container of the job's AM left (YARN: :mod:`.backends.yarn.attempts`)
        self.carried = carried or {}
        self.liveness_s = liveness_s
        self.startup_s = startup_s
        self._born = time.monotonic()
        self.answered = False  # whether an attempt of the AM has answered yet: then it has started
        self.python = python
        self.events = EventLog(app_dir / "events.jsonl")
        self.stop_reason: str | None = None
        self._wake = threading.Event()
        self.am: _Child | None = None

    def log_dir(self) -> Path:
        """Where the AM's am.stdout and am.stderr go: on YARN its container's log directory (the
        first of ``LOG_DIRS``), which the NodeManager serves and log aggregation keeps once the job
        has ended, unlike the container's working directory; else the job's directory."""
        dirs = os.environ.get("LOG_DIRS", "") if self.backend == "yarn" else ""
        return Path(dirs.split(",")[0]) if dirs else self.app_dir

    # -------------------------------------------------------------- one attempt
    def _start(self, attempt: int, counted: int) -> _Child:
        """Starts attempt ``attempt`` (``counted`` earlier ones count against the limit): a fork of
        this process (which imported the AM before it started anything, so a restart costs no
        interpreter start and no imports) that runs the AM's main with the attempt's environment
        and the AM's log files as stdout and stderr."""
        me = os.getpid()
        env = {ATTEMPT_ENV: str(attempt), COUNTED_ENV: str(counted), OWNER_ENV: f"{me}:{process.start_time(me)!r}"}
        logs = self.log_dir()
        out = os.open(logs / "am.stdout", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        err = os.open(logs / "am.stderr", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the AM
            code = 1
            try:
                os.dup2(out, 1)
                os.dup2(err, 2)
                os.close(out)
                os.close(err)
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, signal.SIG_DFL)  # the AM installs its own
                os.environ.update(env)
                # The AM's log: its events as they happen, and what goes wrong, one line each.
                logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True,
                                    format="%(asctime)s %(name)s %(levelname)s %(message)s")
                logging.getLogger("pyhdfs").setLevel(logging.WARNING)  # a line per WebHDFS call says nothing
                from . import master
                code = master.main(["--backend", self.backend, "--app-dir", str(self.app_dir)])
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:  # noqa: BLE001 - printed to the AM's stderr; the child must reach os._exit
                import traceback
                traceback.print_exc()
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(code)
        os.close(out)
        os.close(err)
        return _Child(pid)

    def _answers(self, am: _Child, timeout: float) -> bool:
        """Whether this attempt's AM answers its status route within ``timeout`` seconds."""
        from ..rpc import AMClient, AMError, AMUnreachable

        try:
            info = json.loads((self.app_dir / "am.json").read_text())
            if info.get("pid") != am.pid:
                return False  # not registered yet (the file is an earlier attempt's, or absent)
            token = json.loads((self.app_dir / "am.secret").read_text())["token"]
        except (OSError, ValueError, KeyError):
            return False
        client = AMClient(info["address"], token, timeout=timeout, retries=0)
        try:
            client.status()
            return True
        except (AMUnreachable, AMError, OSError):
            return False
        finally:
            client.close()

    def _watch(self, am: _Child, attempt: int) -> str | None:
        """Waits for the attempt to end. None: it ended the job (a final status and unregistered);
        else why the attempt failed."""
        probe_every = max(0.2, min(2.0, self.liveness_s / 4))
        last_ok = time.monotonic()  # the start-up counts against the limit as well
        next_probe = time.monotonic() + probe_every
        forwarded = False
        while True:
            code = am.poll()
            if code is not None:
                if self._final():
                    return None
                how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                return f"ApplicationMaster attempt {attempt} {how} before the job ended"
            if self.stop_reason and not forwarded:
                forwarded = True
                with contextlib.suppress(OSError):
                    am.send_signal(signal.SIGTERM)  # the AM stops the tasks and writes KILLED
            now = time.monotonic()
            if now >= next_probe:
                if self._answers(am, timeout=min(5.0, max(0.5, self.liveness_s / 2))):
                    last_ok, self.answered = time.monotonic(), True
                next_probe = time.monotonic() + probe_every
                if not self.answered and self.startup_s and time.monotonic() - self._born > self.startup_s:
                    return self.late_start()
                if time.monotonic() - last_ok > self.liveness_s:
                    return (f"ApplicationMaster attempt {attempt} did not answer for {self.liveness_s:g} s "
                            f"(tony.am.liveness-timeout-ms)")
                self._reap()
            self._wake.wait(0.2)

    def late_start(self) -> str:
        """Why the job fails: its AM did not start within tony.am.startup-timeout."""
        return f"the ApplicationMaster did not start within {self.startup_s * 1000:.0f} ms (tony.am.startup-timeout)"

    def _final(self) -> bool:
        """Whether the AM decided the job's end (a final status), even if it died right after: what
        it did not get to release, clear() does."""
        try:
            status = JobStatus.from_dict(json.loads((self.app_dir / "status.json").read_text()))
        except (OSError, ValueError):
            return False
        return status.is_final

    def _reap(self) -> None:
        """Reaps orphans that ended (they were re-parented here); never the AM, whose Popen does."""
        import psutil

        with contextlib.suppress(psutil.Error):
            for child in psutil.Process().children():
                if self.am is not None and child.pid == self.am.pid:
                    continue
                with contextlib.suppress(psutil.Error, ChildProcessError):
                    if child.status() == psutil.STATUS_ZOMBIE:
                        os.waitpid(child.pid, os.WNOHANG)

    def clear(self) -> None:
        """Kills everything of the job still running: the AM's tree, every container (by the pid and
        start time each recorded) and every process re-parented here."""
        import psutil

        if self.am is not None and self.am.poll() is None:
            process.kill_tree(self.am.pid, 0.5)
            self.am.wait(timeout=5)
        for pid_file in (self.app_dir / "containers").glob("*/pid"):
            with contextlib.suppress(ValueError, OSError):
                started_file = pid_file.with_name("started")
                started = float(started_file.read_text()) if started_file.is_file() else None
                process.kill_tree(int(pid_file.read_text()), 1.0, started=started)
        with contextlib.suppress(psutil.Error):
            left = psutil.Process().children(recursive=True)
            for p in left:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            psutil.wait_procs(left, timeout=5)

    # -------------------------------------------------------------- the job
    def run(self) -> int:
        me = os.getpid()
        (self.app_dir / INFO_FILE).write_text(json.dumps({"pid": me, "started": process.start_time(me)}))
        # Attempts are numbered across the job's AM containers; those that count are its failures.
        attempt, counted = int(self.carried.get("attempt", 0)) + 1, int(self.carried.get("counted", 0))
        try:
            if attempt > 1:  # a new container: the one before it was lost with what ran in it
                why = self.carried.get("why") or "the ApplicationMaster's container ended"
                reclaimed = bool(self.carried.get("reclaimed"))
                self.events.emit("am_attempt_failed", attempt=attempt - 1, reason=why, counted=not reclaimed)
                if reclaimed:
                    why += " (which does not count against tony.am.max-attempts)"
                if counted >= self.max_attempts:
                    self._final_status(JobState.FAILED, f"{why}; no attempts left "
                                       f"(tony.am.max-attempts={self.max_attempts})")
                    return 1
                self._note(f"{why}; starting attempt {attempt}", attempt)
            while True:
                self.am = self._start(attempt, counted)
                why = self._watch(self.am, attempt)
                if why is None:
                    self._mark_stopped()
                    return 0 if self._state() == JobState.SUCCEEDED else 1
                self.clear()
                counted += 1
                self.events.emit("am_attempt_failed", attempt=attempt, reason=why, counted=True)
                if why == self.late_start():
                    self._final_status(JobState.FAILED, why)
                    return 1
                if self.stop_reason:
                    self._final_status(JobState.KILLED, f"{self.stop_reason}; {why}")
                    return 1
                if counted >= self.max_attempts:
                    self._final_status(JobState.FAILED, f"{why}; no attempts left "
                                       f"(tony.am.max-attempts={self.max_attempts})")
                    return 1
                attempt += 1
                self._note(f"{why}; starting attempt {attempt} ({counted} of {self.max_attempts} spent)", attempt)
        finally:
            self.clear()
            self.events.close()

    def _state(self) -> str | None:
        try:
            return json.loads((self.app_dir / "status.json").read_text()).get("state")
        except (OSError, ValueError):
            return None

    def _update_status(self, change) -> None:
        path = self.app_dir / "status.json"
        try:
            status = JobStatus.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            status = JobStatus(application_id=self.app_dir.name, started_at=time.time(), backend=self.backend)
        change(status)
        StatusFile(path).write(json.dumps(status.to_dict()))  # the AM's own atomic replace

    def _note(self, diagnostics: str, attempt: int) -> None:
        def change(st: JobStatus) -> None:
            st.diagnostics, st.am_attempt = diagnostics, attempt
            if not st.is_final:
                st.state = JobState.ALLOCATING
        self._update_status(change)

    def _final_status(self, state: str, diagnostics: str) -> None:
        def change(st: JobStatus) -> None:
            st.state, st.diagnostics, st.finished_at = state, diagnostics, time.time()
            for t in st.tasks:
                if t.state not in ("SUCCEEDED", "FAILED", "KILLED", "LOST"):
                    t.state = "KILLED"
        self._update_status(change)
        self.events.emit("application_finished", state=state, diagnostics=diagnostics)
        from ..history import record_history

        record_history(self.app_dir, self.backend)  # no attempt lived to write it
        if self.backend == "yarn":  # the ResourceManager and the status in HDFS must hear it too
            with contextlib.suppress(Exception):
                from ..backends.yarn.am import YarnClusterManager

                status = json.loads((self.app_dir / "status.json").read_text())
                YarnClusterManager().finish(state, diagnostics, status)
        self._mark_stopped()

    def _mark_stopped(self) -> None:
        mark_am_stopped(self.app_dir)

    def stop(self, reason: str) -> None:
        self.stop_reason = reason
        self._wake.set()


class _Child:
    """The forked AM, watched as ``subprocess.Popen`` would watch it."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL  # reaped elsewhere: its end is unknown
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


def carried_over(app_dir: Path) -> dict | None:
    """On YARN, in a container that skein started again after the AM's container before it ended
    (its node lost, say), what that container left: :func:`tony_workflow.backends.yarn.attempts.carry_over`,
    asked in a process of its own (skein's gRPC must not start in a process that forks the AM).
    None in the job's first AM container, which costs nothing."""
    import subprocess

    instance = os.environ.get("SKEIN_CONTAINER_ID", "").rpartition("_")[2]
    if not instance.isdigit() or int(instance) == 0:
        return None
    done = subprocess.run([sys.executable, "-m", "tony_workflow.backends.yarn.attempts", "--app-dir", str(app_dir)],
                          capture_output=True, text=True, timeout=300, check=False)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        sys.stderr.write(f"tony-supervisor: could not read what the earlier AM container left:\n{done.stderr}\n")
        # A restarted container is a lost one: count it, as nothing says the cluster took it back.
        return {"attempt": int(instance), "counted": int(instance), "reclaimed": False,
                "why": "the ApplicationMaster's container ended (what it left could not be read)"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tony-supervisor", description="runs a job's ApplicationMaster attempts")
    ap.add_argument("--backend", default="local", choices=["local", "yarn"])
    ap.add_argument("--app-dir", required=True, type=Path)
    args = ap.parse_args(argv)
    app_dir: Path = args.app_dir.resolve()
    from ..spec import JobSpec
    from . import master  # noqa: F401  (imported once here, so that each attempt is a fork, not a start)

    spec = JobSpec.from_dict(json.loads((app_dir / "spec.json").read_text()))
    become_subreaper()
    sup = Supervisor(args.backend, app_dir, max_attempts=spec.am_max_attempts,
                     liveness_s=spec.am_liveness_timeout_ms / 1000.0, startup_s=spec.am_startup_timeout_ms / 1000.0,
                     carried=carried_over(app_dir) if args.backend == "yarn" else None)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, f: sup.stop(f"killed: the job's supervisor received {signal.Signals(s).name}"))
    try:
        return sup.run()
    finally:
        if args.backend == "local":
            from ..backends.local.ledger import forget_allocation
            forget_allocation(app_dir.name)


if __name__ == "__main__":
    sys.exit(main())
