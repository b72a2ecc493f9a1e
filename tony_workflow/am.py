"""The ApplicationMaster: one process per job.

It allocates the job's containers as one gang, launches a TaskExecutor in each, collects their
addresses, hands out the cluster spec, watches heartbeats and exits, applies TonY's final-status
rules, and relaunches sessions (or single tasks, per ``tony.<type>.restart-policy``) after failures.

Failure handling, in order (see docs/architecture.md):

1. A sidecar task's failure is recorded and otherwise ignored.
2. A task whose type has restart policy ``task`` (never the chief, never a stop-on-failure type) is
   relaunched alone, in a new container on the same reservation and at the same address, up to
   ``tony.am.retry-count`` times per task.
3. Otherwise, while session retries remain (``tony.am.retry-count``), any failure tears the whole
   session down and a new one starts with ``SESSION_ID`` + 1; training resumes from the checkpoint.
4. With no retries left, TonY's rules decide: a failed chief, a failed stop-on-failure type, or any
   failed tracked task under ``tony.application.fail-on-worker-failure-enabled`` fails the job at
   once; a failed untracked task ends the session; any other worker failure is tolerated, and the
   verdict comes when every tracked task has finished.
"""
from __future__ import annotations

import argparse
import hmac
import html
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from .backends.base import ClusterManager, Container, ContainerRequest, NeverFits
from .history import EventLog, log_tail
from .rpc import TOKEN_HEADER
from .spec import JobSpec
from .status import JobState, JobStatus, TaskState, TaskStatus

__all__ = ["ApplicationMaster", "am_requests", "describe_exit", "main"]

#: TonY's exit code for a task whose heartbeats stopped (YARN's ContainerExitStatus.INVALID).
LOST_EXIT_CODE = -1000


def am_requests(spec: JobSpec) -> list[ContainerRequest]:
    """The gang a job asks for: the AM's own container first, then every task in type order."""
    reqs = [ContainerRequest("am", spec.am.memory_mb, spec.am.vcores, spec.am.gpus, spec.node_label)]
    for t, ts in spec.tasks.items():
        for i in range(ts.instances):
            reqs.append(ContainerRequest(f"{t}:{i}", ts.resources.memory_mb, ts.resources.vcores,
                                         ts.resources.gpus, ts.node_label))
    return reqs


def describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code == LOST_EXIT_CODE:
        return "exit code -1000 (lost: missed heartbeats)"
    if code > 128 and code - 128 < 65:
        try:
            return f"exit code {code} ({signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return f"exit code {code}"


class _Server(ThreadingHTTPServer):
    # The listen backlog is fixed when the socket is created: a whole gang registering at once
    # overflows the default of 5 and connections get reset.
    request_queue_size = 1024
    daemon_threads = True


@dataclass
class Task:
    """AM-side record of one task in the current session."""

    status: TaskStatus
    container: Container
    session_id: int
    launched_at: float = field(default_factory=time.time)
    registered_at: float | None = None
    last_heartbeat: float | None = None
    fixed_port: int | None = None
    stopping: bool = False
    reported: tuple[int, str] | None = None
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.status.task_id

    @property
    def final(self) -> bool:
        return self.status.state in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED, TaskState.LOST)

    @property
    def failed(self) -> bool:
        return self.status.state in (TaskState.FAILED, TaskState.LOST)


class SessionEnd(Exception):
    def __init__(self, state: str, diagnostics: str, retryable: bool = True):
        super().__init__(diagnostics)
        self.state, self.diagnostics, self.retryable = state, diagnostics, retryable


class ApplicationMaster:
    def __init__(self, spec: JobSpec, app_id: str, app_dir: Path, cluster: ClusterManager, *,
                 token: str, view_token: str, host: str = "127.0.0.1",
                 executor_argv: list[str] | None = None):
        self.spec = spec
        self.app_id = app_id
        self.app_dir = Path(app_dir)
        self.cluster = cluster
        self.token = token
        self.view_token = view_token
        self.host = host
        self.executor_argv = executor_argv or cluster.executor_argv
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self._gang_ready = threading.Event()  # set when the current session's gang has registered
        self.events = EventLog(self.app_dir / "events.jsonl")
        self.kill_requested: str | None = None
        self.cancel = threading.Event()
        self.tasks: dict[str, Task] = {}
        self.session_id = 0
        self.containers: dict[str, Container] = {}  # task id -> the reservation it runs on
        self.task_restarts: dict[str, int] = {}
        self.server: ThreadingHTTPServer | None = None
        self.status = JobStatus(application_id=app_id, state=JobState.ALLOCATING, name=spec.name,
                                started_at=time.time(), backend=type(cluster).__module__.rsplit(".", 1)[-1])
        self._sent_status = ""
        self._dirty = False
        self._last_write = 0.0
        self._write_lock = threading.Lock()
        self._cluster: dict[str, list[str]] | None = None  # the spec, once every task registered
        self.checkpoint_location = spec.checkpoint_location or cluster.checkpoint_location(self.app_dir)
        self.log_dir = cluster.log_dir(self.app_dir)
        # The spec derives these from its flat conf on every access; the monitor and the HTTP
        # handlers need them on every pass, so take them once.
        self.type_order = list(spec.tasks)
        self.tracked = frozenset(spec.tracked_types)
        self.sidecars = frozenset(spec.sidecar_types)
        self.stop_on_failure = frozenset(spec.stop_on_failure_types)
        self.chief = tuple(spec.chief)
        self.restart_policy = {t: ts.restart_policy for t, ts in spec.tasks.items()}
        self.retry_count = spec.retry_count
        self.fail_on_worker_failure = spec.fail_on_worker_failure
        hb = max(1, spec.heartbeat_interval_ms)
        by_count = hb * max(3, spec.max_missed_heartbeats) / 1000.0
        timeout = spec.heartbeat_timeout_ms / 1000.0
        # Whichever limit comes first, but never fewer than three missed beats.
        self.heartbeat_expiry = min(by_count, max(timeout, 3 * hb / 1000.0)) if timeout > 0 else by_count
        self.expiry_rule = (f"tony.task.max-missed-heartbeats={spec.max_missed_heartbeats}"
                            if self.heartbeat_expiry == by_count else
                            f"no heartbeat for {self.heartbeat_expiry:g} s, tony.task.heartbeat-timeout-ms="
                            f"{spec.heartbeat_timeout_ms}")
        self.tick = min(0.5, hb / 2000.0)

    # ---------------------------------------------------------------- status
    def _publish(self, force: bool = False) -> None:
        """Marks the status changed and wakes the monitor, which persists it (for clients that
        outlive the AM) at most every quarter second, outside the lock: a large gang registering
        would otherwise rewrite the whole file once per task while every request waits. Live
        status comes from the API. Called with the lock held."""
        self.status.tasks = [t.status for t in self.tasks.values()]
        self._dirty = True
        if force:
            self._write_status(self._status_snapshot())
        self.cond.notify_all()

    def _status_snapshot(self) -> str | None:
        """The status as JSON if it changed since the last snapshot. Called with the lock held."""
        if not self._dirty:
            return None
        self._dirty = False
        return json.dumps(self.status.to_dict())

    def _write_status(self, data: str | None) -> None:
        if data is None:
            return
        with self._write_lock:
            if data != self._sent_status:
                tmp = self.app_dir / "status.json.tmp"
                tmp.write_text(data)
                os.replace(tmp, self.app_dir / "status.json")
                self._sent_status = data
            self._last_write = time.monotonic()

    def _set_task_state(self, task: Task, state: str, **extra: Any) -> None:
        task.status.state = state
        self.events.emit("task_state", task=task.id, session=task.session_id, state=state, **extra)
        self._publish()

    # ---------------------------------------------------------------- HTTP API
    def start_server(self) -> str:
        am = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:  # keep the AM log readable
                pass

            def _send(self, code: int, body: Any = None, ctype: str = "application/json") -> None:
                data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self, allow_view: bool = False) -> bool:
                given = self.headers.get(TOKEN_HEADER, "")
                ok = hmac.compare_digest(given.encode(), am.token.encode()) or (
                    allow_view and hmac.compare_digest(given.encode(), am.view_token.encode()))
                if not ok:
                    self._send(HTTPStatus.UNAUTHORIZED, {"error": "missing or wrong token"})
                return ok

            def _body(self) -> dict:
                n = int(self.headers.get("Content-Length") or 0)
                if not n:
                    return {}
                try:
                    return json.loads(self.rfile.read(n))
                except json.JSONDecodeError:
                    return {}

            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path.startswith("/ui/"):
                    return self._ui(url.path)
                if url.path == "/v1/status":
                    if self._authorized(allow_view=True):
                        with am.lock:
                            self._send(200, am.status.to_dict())
                    return
                if not self._authorized():
                    return
                if url.path == "/v1/cluster-spec":
                    q = {k: v[0] for k, v in parse_qs(url.query).items()}
                    code, body = am.cluster_spec(q.get("task_id", ""), int(q.get("session_id", -1)),
                                                 float(q.get("wait", 0)))
                    return self._send(code, body)
                self._send(404, {"error": f"no route {url.path}"})

            def do_POST(self) -> None:
                url = urlparse(self.path)
                if not self._authorized():
                    return
                body = self._body()
                routes = {"/v1/register": am.register, "/v1/heartbeat": am.heartbeat,
                          "/v1/started": am.task_started, "/v1/result": am.task_result,
                          "/v1/tensorboard": am.register_tensorboard, "/v1/kill": am.kill}
                fn = routes.get(url.path)
                if fn is None:
                    return self._send(404, {"error": f"no route {url.path}"})
                code, reply = fn(body)
                self._send(code, reply)

            def _ui(self, path: str) -> None:
                parts = path.strip("/").split("/")
                if len(parts) < 2 or not hmac.compare_digest(parts[1].encode(), am.view_token.encode()):
                    return self._send(401, {"error": "missing or wrong token"})
                with am.lock:
                    st = am.status.to_dict()
                if len(parts) > 2 and parts[2] == "status.json":
                    return self._send(200, st)
                if len(parts) > 2 and parts[2] == "logs":
                    return self._logs(parts[3:])
                self._send(200, render_status_page(st).encode(), "text/html; charset=utf-8")

            def _logs(self, rest: list[str]) -> None:
                base = f"/ui/{am.view_token}/logs"
                with am.lock:
                    files = {t.id: (t.container.stdout, t.container.stderr) for t in am.tasks.values()}
                if not rest:
                    items = "".join(
                        f"<li>{html.escape(tid)}: <a href='{base}/{tid}/stdout'>stdout</a> "
                        f"<a href='{base}/{tid}/stderr'>stderr</a></li>" for tid in files)
                    page = f"<!doctype html><html><body><h1>Task logs</h1><ul>{items}</ul></body></html>"
                    return self._send(200, page.encode(), "text/html; charset=utf-8")
                if len(rest) != 2 or rest[0] not in files or rest[1] not in ("stdout", "stderr"):
                    return self._send(404, {"error": "no such log"})
                path = files[rest[0]][0 if rest[1] == "stdout" else 1]
                try:
                    with open(path, "rb") as fh:
                        fh.seek(0, os.SEEK_END)
                        fh.seek(max(0, fh.tell() - (1 << 20)))  # the last MiB is what anyone reads
                        data = fh.read()
                except (OSError, TypeError):
                    data = b""
                self._send(200, data, "text/plain; charset=utf-8")

        self.server = _Server((self.host, 0), Handler)
        threading.Thread(target=self.server.serve_forever, name="am-http", daemon=True).start()
        address = f"{self.host}:{self.server.server_address[1]}"
        self.status.tracking_url = f"http://{address}/ui/{self.view_token}"
        self.status.tracking_url = self.cluster.publish_endpoint(address, self.token, self.view_token,
                                                                 self.status.tracking_url)
        return address

    # Route handlers return (http status, body). They run on server threads.
    def _task_for(self, body: dict) -> tuple[Task | None, tuple[int, dict] | None]:
        task = self.tasks.get(str(body.get("task_id", "")))
        if task is None:
            return None, (404, {"error": f"unknown task {body.get('task_id')!r}", "action": "stop"})
        if int(body.get("session_id", -1)) != task.session_id or task.stopping or task.final:
            return None, (409, {"error": "stale session or stopped task", "action": "stop"})
        cid = body.get("container_id")
        if cid and cid != task.container.id:
            return None, (409, {"error": "stale container", "action": "stop"})
        return task, None

    def register(self, body: dict) -> tuple[int, dict]:
        with self.lock:
            task, err = self._task_for(body)
            if err:
                return err
            port = int(body["port"])
            if task.fixed_port and port != task.fixed_port:
                return 409, {"error": f"relaunched task must keep port {task.fixed_port}", "action": "stop"}
            task.status.host, task.status.port = str(body["host"]), port
            task.status.pid = body.get("pid")
            task.registered_at = task.last_heartbeat = time.time()
            self._set_task_state(task, TaskState.REGISTERED, host=task.status.host, port=port)
            self._cluster = None
            if all(t.registered_at for t in self.tasks.values()):
                self._cluster = self.cluster_dict()
                self._gang_ready.set()
                self.events.emit("cluster_spec_ready", session=self.session_id, cluster=self._cluster)
            return 200, {"ok": True}

    def cluster_dict(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for t in sorted(self.tasks.values(), key=lambda t: (self.type_order.index(t.status.type), t.status.index)):
            out.setdefault(t.status.type, []).append(f"{t.status.host}:{t.status.port}")
        return out

    def cluster_spec(self, task_id: str, session_id: int, wait: float) -> tuple[int, dict | None]:
        deadline = time.time() + min(max(wait, 0.0), 60.0)
        while True:
            with self.lock:
                task = self.tasks.get(task_id)
                if task is None or task.session_id != session_id or task.stopping:
                    return 409, {"error": "stale session", "action": "stop"}
                if self._cluster is not None:
                    return 200, {"cluster": self._cluster, "session_id": session_id, "chief": list(self.chief)}
                remaining = deadline - time.time()
                if remaining <= 0:
                    return 204, None
                gang = self._gang_ready
                if gang.is_set():  # a task relaunched alone is registering again
                    self.cond.wait(min(remaining, self.tick))
                    continue
            # Waiters sleep on the gang's own event, not the AM's condition: registrations would
            # otherwise wake every waiting request once per task (N² wake-ups for a gang of N).
            gang.wait(remaining)

    def heartbeat(self, body: dict) -> tuple[int, dict]:
        with self.lock:
            task, err = self._task_for(body)
            if err:
                return err
            task.last_heartbeat = time.time()
            task.metrics = body.get("metrics") or {}
            return 200, {"action": "continue"}

    def task_started(self, body: dict) -> tuple[int, dict]:
        with self.lock:
            task, err = self._task_for(body)
            if err:
                return err
            task.status.pid = body.get("pid", task.status.pid)
            task.last_heartbeat = time.time()
            self._set_task_state(task, TaskState.RUNNING, pid=task.status.pid)
            return 200, {"ok": True}

    def task_result(self, body: dict) -> tuple[int, dict]:
        with self.lock:
            task, err = self._task_for(body)
            if err:
                return err
            # Decisions belong to the monitor thread; a handler only records and wakes it.
            task.reported = (int(body["exit_code"]), str(body.get("diagnostics") or ""))
            self.cond.notify_all()
            return 200, {"ok": True}

    def register_tensorboard(self, body: dict) -> tuple[int, dict]:
        url = self.cluster.expose_tensorboard(str(body["url"])) or str(body["url"])
        with self.lock:
            self.status.tensorboard_url = url
            self.events.emit("tensorboard", url=self.status.tensorboard_url)
            self._publish()
        return 200, {"ok": True}

    def kill(self, body: dict) -> tuple[int, dict]:
        with self.lock:
            self.kill_requested = str(body.get("reason") or "killed by user")
            self.cancel.set()
            self.events.emit("kill_requested", reason=self.kill_requested)
            self.cond.notify_all()
        return 200, {"ok": True}

    # ---------------------------------------------------------------- sessions
    def _task_env(self, task_id: str, session_id: int, fixed_port: int | None, container: Container) -> dict[str, str]:
        # Only what this job adds: the backend merges it into the container's own environment.
        env = dict(self.spec.container_env)
        env.update({
            "TONY_AM_ADDRESS": self.address, "TONY_AM_TOKEN": self.token, "TONY_TASK_ID": task_id,
            "SESSION_ID": str(session_id), "TONY_APPLICATION_ID": self.app_id, "JOB_ID": self.app_id,
            "TONY_SPEC_FILE": str(self.app_dir / "spec.json"),
            "TONY_CHECKPOINT_LOCATION": self.checkpoint_location, "TONY_CONTAINER_ID": container.id,
        })
        if self.log_dir:
            env["TONY_LOG_DIR"] = self.log_dir
        if fixed_port:
            env["TONY_TASK_PORT"] = str(fixed_port)
        return env

    def _new_task(self, task_id: str, container: Container, session_id: int, fixed_port: int | None = None,
                  restarts: int = 0) -> Task:
        ttype, idx = task_id.split(":")
        status = TaskStatus(type=ttype, index=int(idx), state=TaskState.NEW, container_id=container.id,
                            host=container.host, restarts=restarts)
        task = Task(status=status, container=container, session_id=session_id, fixed_port=fixed_port)
        self.tasks[task_id] = task
        return task

    def _mark_launched(self, task: Task) -> None:
        self._set_task_state(task, TaskState.LAUNCHED, container=task.container.id, gpus=task.container.gpu_indices)

    def _launch(self, task_id: str, container: Container, session_id: int, fixed_port: int | None = None,
                restarts: int = 0) -> Task:
        """Creates and launches one task. Called with the lock held."""
        task = self._new_task(task_id, container, session_id, fixed_port, restarts)
        self.cluster.launch(container, self.executor_argv, self._task_env(task_id, session_id, fixed_port, container))
        task.status.log_url = self.cluster.log_url(container)
        self._mark_launched(task)
        return task

    def _start_session(self, session_id: int) -> None:
        with self.lock:
            self.session_id = session_id
            self.status.session_id = session_id
            self.status.attempts = session_id + 1
            self.tasks = {}
            self._cluster = None
            self._gang_ready = threading.Event()
            self.events.emit("session_started", session=session_id)
            tasks = []
            for task_id, reserved in self.containers.items():
                container = reserved if session_id == 0 else self.cluster.new_container(reserved)
                task = self._new_task(task_id, container, session_id)
                self._mark_launched(task)
                tasks.append(task)
            self.status.state = JobState.RUNNING
            self._publish()
        # Launched without the lock, so status requests and early registrations are answered while
        # the rest of the gang is still being started.
        self.cluster.launch_all([(t.container, self.executor_argv, self._task_env(t.id, session_id, None, t.container))
                                 for t in tasks])
        with self.lock:
            for task in tasks:
                task.status.log_url = self.cluster.log_url(task.container)
            self._publish()

    def _on_exit(self, task: Task, code: int, diagnostics: str = "") -> None:
        """Records a task's end and applies the failure rules. Called with the lock held."""
        if task.final:
            return
        task.status.exit_code = code
        if task.stopping:
            return self._set_task_state(task, TaskState.KILLED, exit_code=code)
        if code == 0:
            return self._set_task_state(task, TaskState.SUCCEEDED, exit_code=0)
        state = TaskState.LOST if code == LOST_EXIT_CODE else TaskState.FAILED
        self._set_task_state(task, state, exit_code=code, diagnostics=diagnostics[-2000:])
        self._on_failure(task, code, diagnostics)

    def _failure_message(self, task: Task, code: int, extra: str = "") -> str:
        msg = f"Job {task.id} exited with {describe_exit(code)} on host:{task.status.host}"
        if task.status.log_url:
            msg += f" (log: {task.status.log_url})"
        return msg + (f". {extra.strip()}" if extra.strip() else "")

    def _on_failure(self, task: Task, code: int, diagnostics: str) -> None:
        ttype = task.status.type
        if ttype in self.sidecars:
            self.events.emit("sidecar_failed", task=task.id, exit_code=code)
            return
        is_chief = (ttype, task.status.index) == self.chief
        policy = self.restart_policy.get(ttype, "session")
        used = self.task_restarts.get(task.id, 0)
        if (policy == "task" and not is_chief and ttype not in self.stop_on_failure
                and used < self.retry_count):
            self.task_restarts[task.id] = used + 1
            self._pending_task_restarts.append(task)
            return
        message = self._failure_message(task, code, diagnostics)
        if self.session_id < self.retry_count:
            raise SessionEnd(JobState.FAILED, message)
        tracked = ttype in self.tracked
        if is_chief or ttype in self.stop_on_failure or (tracked and self.fail_on_worker_failure):
            raise SessionEnd(JobState.FAILED, message, retryable=False)
        if not tracked:
            # TonY stops the session when an untracked task dies; the verdict then follows the rules.
            raise SessionEnd(*self._verdict(stopped_early=message), retryable=False)
        self.events.emit("worker_failure_tolerated", task=task.id, exit_code=code)

    def _verdict(self, stopped_early: str | None = None) -> tuple[str, str]:
        """TonY's end-of-session rules over the tracked tasks."""
        tracked = [t for t in self.tasks.values() if t.status.type in self.tracked]
        unfinished = [t for t in tracked if not t.final]
        failed = [t for t in tracked if t.failed]
        notes = [stopped_early] if stopped_early else []
        notes += [f"Job {t.id} hasn't finished yet." for t in unfinished]
        notes += [self._failure_message(t, t.status.exit_code or 0) for t in failed]
        if unfinished:
            return JobState.FAILED, "\n".join(notes)
        if failed and (self.fail_on_worker_failure or len(failed) >= len(tracked)):
            return JobState.FAILED, "\n".join(
                [f"At least one job task exited with non-zero status, failedCnt={len(failed)}", *notes])
        if failed:
            return JobState.SUCCEEDED, "\n".join(
                [f"Training completed with some worker jobs failure, failedCnt={len(failed)}", *notes])
        return JobState.SUCCEEDED, ""

    def _relaunch_task(self, task: Task) -> None:
        """Restart policy ``task``: same index, same address, same reservation, same session."""
        self.cluster.kill(task.container, grace=1.0)
        container = self.cluster.new_container(task.container)
        self.events.emit("task_restarted", task=task.id, session=self.session_id,
                         restart=self.task_restarts[task.id], port=task.status.port)
        with self.lock:
            new = self._launch(task.id, container, self.session_id, fixed_port=task.status.port,
                               restarts=self.task_restarts[task.id])
            new.status.host = task.status.host

    def _check(self) -> None:
        """One pass of the monitor. Raises SessionEnd when the session is over."""
        now = time.time()
        if self.kill_requested:
            raise SessionEnd(JobState.KILLED, self.kill_requested, retryable=False)
        timeout = self.spec.application_timeout_ms
        if timeout > 0 and now - (self.status.started_at or now) > timeout / 1000.0:
            raise SessionEnd(JobState.FAILED, f"Application timed out after {timeout} ms "
                             f"(tony.application.timeout)", retryable=False)
        reg_timeout = self.spec.registration_timeout_ms
        for task in list(self.tasks.values()):
            if task.final:
                continue
            if task.reported is not None:
                self._on_exit(task, *task.reported)
                continue
            code = self.cluster.poll(task.container)
            if code is not None:
                code = 128 - code if code < 0 else code  # killed by signal N -> 128+N, as shells report it
                diag = "" if task.registered_at else "task failed before registering with the AM. "
                self._on_exit(task, code, diag + log_tail(task.container.stderr))
                continue
            if task.last_heartbeat and now - task.last_heartbeat > self.heartbeat_expiry:
                missed = int((now - task.last_heartbeat) * 1000 / max(1, self.spec.heartbeat_interval_ms))
                self.cluster.kill(task.container, grace=0.5)
                self._on_exit(task, LOST_EXIT_CODE, f"Task with id [{task.id}] has missed [{missed}] heartbeats "
                              f"({self.expiry_rule}).")
                continue
            if reg_timeout > 0 and not task.registered_at and now - task.launched_at > reg_timeout / 1000.0:
                raise SessionEnd(JobState.FAILED, f"Task {task.id} did not register within {reg_timeout} ms "
                                 f"(tony.container.registration.timeout)")
        tracked = [t for t in self.tasks.values() if t.status.type in self.tracked]
        if tracked and all(t.final for t in tracked):
            raise SessionEnd(*self._verdict(), retryable=False)

    def _run_session(self) -> SessionEnd:
        while True:
            self._pending_task_restarts: list[Task] = []
            try:
                with self.cond:
                    self.cond.wait(self.tick)
                    self._check()
                    due = time.monotonic() - self._last_write >= 0.25
                    data = self._status_snapshot() if due else None
                self._write_status(data)
            except SessionEnd as end:
                return end
            for task in self._pending_task_restarts:
                self._relaunch_task(task)

    def _teardown(self) -> None:
        with self.lock:
            for t in self.tasks.values():
                # Tasks that ended on their own keep their real outcome, not "killed".
                code = None if t.final else (t.reported[0] if t.reported else self.cluster.poll(t.container))
                if code is not None:
                    code = 128 - code if code < 0 else code
                    self._set_task_state(t, TaskState.SUCCEEDED if code == 0 else TaskState.FAILED, exit_code=code)
                    t.status.exit_code = code
            live = [t for t in self.tasks.values() if not t.final]
            for t in live:
                t.stopping = True
            self._gang_ready.set()  # wakes waiters for the cluster spec; they find their session gone
            self.cond.notify_all()
        threads = [threading.Thread(target=self.cluster.kill, args=(t.container, 3.0)) for t in live]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        with self.lock:
            for t in live:
                if not t.final:
                    code = self.cluster.poll(t.container)
                    t.status.exit_code = code
                    self._set_task_state(t, TaskState.KILLED, exit_code=code)

    # ---------------------------------------------------------------- main loop
    def run(self) -> int:
        self._pending_task_restarts = []
        self.address = self.start_server()
        (self.app_dir / "am.json").write_text(json.dumps({"address": self.address, "pid": os.getpid(),
                                                          "tracking_url": self.status.tracking_url}))
        self.events.emit("am_started", address=self.address, pid=os.getpid(), spec=self.spec.name)
        with self.lock:
            self._publish(force=True)
        try:
            end = self._allocate_and_run()
        except Exception as e:  # the AM must always leave a final status behind
            self.events.emit("am_error", error=repr(e))
            end = SessionEnd(JobState.FAILED, f"ApplicationMaster error: {e}", retryable=False)
            try:
                self._teardown()
            except Exception:
                pass
        return self._finish(end)

    def _allocate_and_run(self) -> SessionEnd:
        requests = am_requests(self.spec)
        self.events.emit("allocating", containers=len(requests))
        try:
            allocated = self.cluster.allocate(requests, self.cancel)
        except InterruptedError:
            return SessionEnd(JobState.KILLED, self.kill_requested or "killed while waiting for resources")
        except NeverFits as e:
            return SessionEnd(JobState.FAILED, str(e))
        self.containers = {c.task_id: c for c in allocated if c.task_id != "am"}
        self.events.emit("allocated", containers={c.task_id: {"id": c.id, "gpus": c.gpu_indices} for c in allocated})
        session = 0
        while True:
            self._start_session(session)
            end = self._run_session()
            self.events.emit("session_finished", session=session, state=end.state, diagnostics=end.diagnostics)
            self._teardown()
            if end.state == JobState.FAILED and end.retryable and session < self.retry_count:
                session += 1
                with self.lock:
                    self.status.diagnostics = f"session {session - 1} failed: {end.diagnostics}"
                continue
            return end

    def _finish(self, end: SessionEnd) -> int:
        with self.lock:
            self.status.state = end.state
            self.status.diagnostics = end.diagnostics
            self.status.finished_at = time.time()
            self._publish(force=True)
        self.events.emit("application_finished", state=end.state, diagnostics=end.diagnostics)
        try:
            self.cluster.release()
            with self.lock:
                final = self.status.to_dict()
            self.cluster.finish(end.state, end.diagnostics, final)
        finally:
            am_json = self.app_dir / "am.json"
            info = json.loads(am_json.read_text())
            info["stopped"] = True
            am_json.write_text(json.dumps(info))
            if self.server:
                self.server.shutdown()
            self.events.close()
        return 0 if end.state == JobState.SUCCEEDED else 1


def render_status_page(st: dict) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(t['type'])}:{t['index']}</td><td>{html.escape(t['state'])}</td>"
        f"<td>{'' if t['exit_code'] is None else t['exit_code']}</td><td>{html.escape(str(t['host']))}:{t['port']}</td>"
        f"<td>{t['restarts']}</td><td>{html.escape(str(t['log_url'] or ''))}</td></tr>" for t in st["tasks"])
    tb = st.get("tensorboard_url")
    tb_link = f'<p>TensorBoard: <a href="{html.escape(tb)}">{html.escape(tb)}</a></p>' if tb else ""
    return (f"<!doctype html><html><head><meta charset='utf-8'><meta http-equiv='refresh' content='5'>"
            f"<title>{html.escape(st['application_id'])}</title></head><body>"
            f"<h1>{html.escape(st.get('name') or '')} {html.escape(st['application_id'])}</h1>"
            f"<p>State: <b>{html.escape(st['state'])}</b>, session {st['session_id']}, attempts {st['attempts']}</p>"
            f"{tb_link}<pre>{html.escape(st.get('diagnostics') or '')}</pre>"
            f"<table border='1'><tr><th>task</th><th>state</th><th>exit</th><th>address</th><th>restarts</th>"
            f"<th>log</th></tr>{rows}</table></body></html>")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tony-am", description="tony-workflow ApplicationMaster")
    ap.add_argument("--backend", default="local", choices=["local", "yarn"])
    ap.add_argument("--app-dir", required=True, type=Path)
    args = ap.parse_args(argv)
    app_dir: Path = args.app_dir.resolve()
    spec = JobSpec.from_dict(json.loads((app_dir / "spec.json").read_text()))
    if args.backend == "yarn":
        from .backends.yarn import YarnClusterManager
        cluster: ClusterManager = YarnClusterManager()
        app_id = cluster.app_id
        # Clients read these from skein's key-value store, which only the application's owner can.
        token, view_token = secrets.token_urlsafe(24), secrets.token_urlsafe(12)
        host = os.environ.get("NM_HOST") or socket.getfqdn()
    else:
        from .backends.local import Inventory, LocalClusterManager
        app_id = app_dir.name
        cluster = LocalClusterManager(app_id, app_dir, Inventory.of(spec.local_capacity),
                                      fork_server=spec.local_fork_server)
        secret = json.loads((app_dir / "am.secret").read_text())
        token, view_token, host = secret["token"], secret["view_token"], "127.0.0.1"
    am = ApplicationMaster(spec, app_id, app_dir, cluster, token=token, view_token=view_token, host=host)

    def on_term(signum: int, frame: Any) -> None:
        am.kill({"reason": f"ApplicationMaster received {signal.Signals(signum).name}"})

    signal.signal(signal.SIGTERM, on_term)
    return am.run()


if __name__ == "__main__":
    sys.exit(main())
