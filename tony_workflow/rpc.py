"""The ApplicationMaster's HTTP/JSON protocol, client side.

Routes, methods and fields come from :mod:`tony_workflow.protocol`, which the AM's server reads
too. Every request carries the job's secret token in the ``X-Tony-Token`` header; the AM answers
401 without it. Executors use the full token; read-only viewers (the tracking page) use the view
token.
"""
from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any
from urllib.parse import urlencode

from . import protocol
from .errors import AMError, AMUnreachable
from .protocol import TOKEN_HEADER, Route

__all__ = ["TOKEN_HEADER", "AMClient", "AMError", "AMUnreachable"]

# Errors that mean the request never reached the AM, or a kept-alive connection had been closed by
# the AM before it was reused: safe to send again.
_RETRYABLE = (ConnectionRefusedError, ConnectionResetError, BrokenPipeError, ConnectionAbortedError,
              http.client.RemoteDisconnected)


class AMClient:
    """A small client of the AM API. ``address`` is ``host:port``.

    Speaks HTTP/1.1 over the standard library's ``http.client``, one kept-alive connection per
    thread: an executor imports and starts in a fraction of the time a ``requests`` stack takes,
    which is most of what a container launch costs.
    """

    def __init__(self, address: str, token: str, *, timeout: float = 10.0, retries: int = 2):
        self.base = f"http://{address}"
        host, _, port = address.rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        self.timeout = timeout
        # Connection errors are retried briefly (the AM's listen backlog can overflow when a whole
        # gang registers at once). Status codes and read timeouts are never retried here.
        self.retries = retries
        self._headers = {TOKEN_HEADER: token, "Accept": "application/json"}
        self._local = threading.local()

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            self._local.conn = conn
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def close(self) -> None:
        """Closes this thread's connection (others close when their threads end)."""
        self._drop()

    def _call(self, route: Route, *, timeout: float | None = None, **fields: Any) -> Any:
        values = route.request_fields(**fields)
        method = route.method
        params = values if method == "GET" else None
        url = route.path + ("?" + urlencode(params) if params else "")
        body = None if method == "GET" else json.dumps(values).encode()
        headers = dict(self._headers)
        if body is not None:
            headers["Content-Type"] = "application/json"
        attempt, stale_retried = 0, False
        while True:
            conn = self._connection(timeout or self.timeout)
            reused = conn.sock is not None
            try:
                conn.request(method, url, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if resp.will_close:
                    self._drop()
                break
            except _RETRYABLE as e:
                self._drop()
                if reused and not stale_retried:  # the AM had closed an idle connection
                    stale_retried = True
                    continue
                if attempt >= self.retries:
                    raise AMUnreachable(f"ApplicationMaster at {self.base} unreachable: {e}") from None
                time.sleep(0.2 * 2 ** attempt)
                attempt += 1
            except (OSError, http.client.HTTPException) as e:  # timeouts, unknown host, bad replies
                self._drop()
                raise AMUnreachable(f"ApplicationMaster at {self.base} unreachable: {e}") from None
        if resp.status == 204:
            return None
        if resp.status >= 400:
            text = data.decode(errors="replace")
            try:
                msg = json.loads(text).get("error", text)
            except (ValueError, AttributeError):
                msg = text
            raise AMError(resp.status, msg)
        try:
            return json.loads(data)
        except ValueError:
            raise AMError(resp.status, f"not JSON: {data[:200]!r}") from None

    # executor side
    def register(self, task_id: str, session_id: int, host: str, port: int, **extra: Any) -> dict:
        return self._call(protocol.REGISTER, task_id=task_id, session_id=session_id, host=host, port=port,
                          **extra)

    def cluster_spec(self, task_id: str, session_id: int, wait: float = 20.0) -> dict | None:
        """Long-polls for the cluster spec; None while not every task has registered."""
        return self._call(protocol.CLUSTER_SPEC, task_id=task_id, session_id=session_id, wait=wait,
                          timeout=wait + 10)

    def heartbeat(self, task_id: str, session_id: int, metrics: dict | None = None, progress: dict | None = None,
                  store: dict | None = None, container_id: str | None = None) -> dict:
        return self._call(protocol.HEARTBEAT, task_id=task_id, session_id=session_id, metrics=metrics or {},
                          progress=progress, store=store, **({"container_id": container_id} if container_id else {}))

    def task_started(self, task_id: str, session_id: int, pid: int, restored: dict | None = None,
                     container_id: str | None = None, at: float | None = None) -> dict:
        return self._call(protocol.STARTED, task_id=task_id, session_id=session_id, pid=pid, restored=restored,
                          **({"container_id": container_id} if container_id else {}),
                          **({"at": at} if at is not None else {}))

    def result(self, task_id: str, session_id: int, exit_code: int, diagnostics: str = "",
               container_id: str | None = None, at: float | None = None) -> dict:
        return self._call(protocol.RESULT, task_id=task_id, session_id=session_id, exit_code=exit_code,
                          diagnostics=diagnostics, **({"container_id": container_id} if container_id else {}),
                          **({"at": at} if at is not None else {}))

    def horovod_driver(self, task_id: str, session_id: int, host: str, port: int,
                       slots: list[dict] | None = None) -> dict:
        return self._call(protocol.HOROVOD_DRIVER, task_id=task_id, session_id=session_id, host=host, port=port,
                          slots=slots)

    def register_tensorboard(self, url: str) -> dict:
        return self._call(protocol.TENSORBOARD, url=url)

    def register_notebook(self, url: str) -> dict:
        return self._call(protocol.NOTEBOOK, url=url)

    # client side
    def status(self) -> dict:
        return self._call(protocol.STATUS)

    def record(self) -> dict:
        """The job's record as it stands (see :mod:`tony_workflow.history`)."""
        return self._call(protocol.RECORD)

    def kill(self, reason: str = "killed by user") -> dict:
        return self._call(protocol.KILL, reason=reason)
