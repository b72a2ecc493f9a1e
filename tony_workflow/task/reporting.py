"""Progress reports from user code to its TaskExecutor, both ends of the wire.

A training script calls :func:`report` (exported as ``tony_workflow.report``) with its step, the
total and any numbers it likes; the executor's :class:`ReportInbox` keeps the latest and sends it to
the ApplicationMaster with the next heartbeat, which shows it as the job's progress, moves YARN's
progress bar and, with ``tony.task.progress-timeout-ms``, declares a task that stops reporting hung.

Reports travel as UDP datagrams on the loopback interface, to the address and with the key the
executor puts in the user process's environment (:data:`ADDRESS_ENV`, :data:`KEY_ENV`). A datagram
is sent without waiting for anyone: a report costs the trainer a few microseconds, and never blocks
or fails when the executor is busy or gone. Reports closer together than :data:`MIN_INTERVAL` are
merged; the last one is sent when the interval is over (or when the process exits), so the newest
step always arrives.

The user side runs inside training processes, often in another interpreter than the runtime's:
standard library only, nothing done at import time, and a no-op outside a job.
"""
from __future__ import annotations

import atexit
import json
import math
import os
import select
import socket
import threading
import time
from numbers import Real
from typing import Any

__all__ = ["ADDRESS_ENV", "KEY_ENV", "MAX_METRICS", "MIN_INTERVAL", "ReportInbox", "report"]

ADDRESS_ENV = "TONY_REPORT_ADDRESS"   # host:port of the executor's inbox
KEY_ENV = "TONY_REPORT_KEY"           # proves a datagram comes from the task's own processes
MIN_INTERVAL = 0.2                    # seconds between datagrams from one process
MAX_METRICS = 32
MAX_NAME = 64


class _Sender:
    """The process's one reporting channel: merges reports, sends at most one per interval."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._target: tuple[str, int] | None = None
        self._key = ""
        self._pid = -1
        self._pending: dict[str, Any] | None = None
        self._sent_at = -math.inf
        self._timer: threading.Timer | None = None
        self._exit_hook = False

    def _open(self) -> bool:
        """Opens the socket for this process (again after a fork); False outside a job."""
        if self._pid == os.getpid():
            return self._target is not None
        self._pid, self._target, self._timer, self._pending = os.getpid(), None, None, None
        address = os.environ.get(ADDRESS_ENV, "")
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            return False
        self._key = os.environ.get(KEY_ENV, "")
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        self._target = (host, int(port))
        if not self._exit_hook:
            atexit.register(self.flush)
            self._exit_hook = True
        return True

    def add(self, step: int | None, total: int | None, metrics: dict[str, float]) -> None:
        with self._lock:
            if not self._open():
                return
            pending = self._pending or {"metrics": {}}
            if step is not None:
                pending["step"] = step
            if total is not None:
                pending["total"] = total
            pending["metrics"].update(metrics)
            self._pending = pending
            wait = self._sent_at + MIN_INTERVAL - time.monotonic()
            if wait <= 0:
                self._send()
            elif self._timer is None:
                self._timer = threading.Timer(wait, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        with self._lock:
            self._timer = None
            if self._pending is not None and self._pid == os.getpid():
                self._send()

    def _send(self) -> None:
        pending, self._pending = self._pending, None
        self._sent_at = time.monotonic()
        data = json.dumps({"key": self._key, **pending}, separators=(",", ":")).encode()
        try:
            self._sock.sendto(data, self._target)
        except OSError:
            pass  # no executor listening (it ended) or its buffer is full: this report is dropped


_sender = _Sender()


def _number(name: str, value: Any, integral: bool = False) -> float | int:
    # numpy and TensorFlow scalars are not Real subclasses, but convert.
    if isinstance(value, bool) or not (isinstance(value, Real) or hasattr(value, "__float__")):
        raise TypeError(f"tony_workflow.report: {name} must be a number, got {type(value).__name__} {value!r:.80}")
    if integral:
        as_int = int(value)
        if as_int < 0:
            raise ValueError(f"tony_workflow.report: {name} must be >= 0, got {as_int}")
        return as_int
    return float(value)


def report(step: int | None = None, total: int | None = None, **metrics: float) -> None:
    """Reports training progress to the job: the current ``step`` (a count from 0 or 1, as the
    trainer counts), the ``total`` steps it will run (for the fraction done and the ETA), and any
    named numbers (``loss=0.31``, ``examples_per_sec=5400``). Values left out keep the last reported
    ones. Cheap enough to call every batch; a no-op outside a tony-workflow task.

    Raises TypeError or ValueError for a value that is not a number (or a negative step/total), and
    ValueError for more than :data:`MAX_METRICS` metrics or a name longer than :data:`MAX_NAME`.
    """
    if ADDRESS_ENV not in os.environ:
        return
    if len(metrics) > MAX_METRICS:
        raise ValueError(f"tony_workflow.report: at most {MAX_METRICS} metrics per report, got {len(metrics)}")
    clean = {}
    for name, value in metrics.items():
        if len(name) > MAX_NAME:
            raise ValueError(f"tony_workflow.report: metric name longer than {MAX_NAME} characters: {name[:80]!r}")
        number = _number(name, value)
        if math.isfinite(number):  # JSON has no NaN; a NaN loss is left out, not sent as text
            clean[name] = number
    _sender.add(None if step is None else _number("step", step, True),
                None if total is None else _number("total", total, True), clean)


class ReportInbox:
    """The executor's end: a loopback UDP socket that keeps the newest report of its task.

    :meth:`environment` gives the variables that point a user process here; :meth:`snapshot` the
    progress to send with a heartbeat (None until a first report).
    """

    def __init__(self, key: str):
        self.key = key
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)  # so the receiving thread sees close() soon
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self._lock = threading.Lock()
        self._latest: dict[str, Any] = {"metrics": {}}
        self._count = 0
        self._at = 0.0
        self._closed = False
        self._receiver = threading.Thread(target=self._receive, name="reports", daemon=True)
        self._receiver.start()

    def environment(self) -> dict[str, str]:
        return {ADDRESS_ENV: self.address, KEY_ENV: self.key}

    def _receive(self) -> None:
        while not self._closed:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            self.accept(data)

    def accept(self, data: bytes) -> bool:
        """Takes one datagram; False (and nothing kept) for one that is not a report of this task."""
        try:
            msg = json.loads(data)
        except ValueError:
            return False
        if not isinstance(msg, dict) or msg.get("key") != self.key:
            return False
        metrics = msg.get("metrics")
        metrics = {str(k)[:MAX_NAME]: float(v) for k, v in list(metrics.items())[:MAX_METRICS]
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)} \
            if isinstance(metrics, dict) else {}
        with self._lock:
            for field in ("step", "total"):
                value = msg.get(field)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    self._latest[field] = value
            self._latest["metrics"].update(metrics)
            self._count += 1
            self._at = time.monotonic()
        return True

    def drain(self) -> None:
        """Takes every datagram still waiting, in the caller's thread: the last reports of a process
        that has just exited, before the final heartbeat. The receiving thread is stopped first: a
        datagram it had taken off the socket but not yet kept would otherwise miss that heartbeat.
        Nothing is received after this."""
        self._closed = True
        if self._receiver is not threading.current_thread():
            self._receiver.join(timeout=2.0)  # its recv waits at most the socket's timeout
        # MSG_DONTWAIT does not make recv return at once: a socket with a timeout is first polled
        # for up to that timeout. Poll without waiting instead.
        while True:
            try:
                if not select.select([self.sock], [], [], 0)[0]:
                    return
                data = self.sock.recv(65536)
            except (OSError, ValueError):  # closed
                return
            self.accept(data)

    def snapshot(self) -> dict[str, Any] | None:
        """The newest report: ``step``, ``total``, ``metrics``, ``reports`` (how many arrived) and
        ``age`` (seconds since the last one, so the AM needs no clock shared with this host)."""
        with self._lock:
            if not self._count:
                return None
            return {**self._latest, "metrics": dict(self._latest["metrics"]), "reports": self._count,
                    "age": round(time.monotonic() - self._at, 3)}

    def close(self) -> None:
        self._closed = True
        try:
            self.sock.close()
        except OSError:
            pass
