"""The ApplicationMaster's HTTP/JSON protocol, client side.

Every request carries the job's secret token in the ``X-Tony-Token`` header; the AM answers 401
without it. Executors use the full token; read-only viewers (the tracking page) use the view token.
"""
from __future__ import annotations

import time
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

__all__ = ["TOKEN_HEADER", "AMClient", "AMError", "AMUnreachable"]

TOKEN_HEADER = "X-Tony-Token"


class AMError(RuntimeError):
    """The AM answered with an error status."""

    def __init__(self, status: int, message: str):
        super().__init__(f"AM answered {status}: {message}")
        self.status = status


class AMUnreachable(ConnectionError):
    """The AM could not be reached (not started yet, or gone)."""


class AMClient:
    """A small client of the AM API. ``address`` is ``host:port``."""

    def __init__(self, address: str, token: str, *, timeout: float = 10.0, retries: int = 2):
        self.base = f"http://{address}"
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers[TOKEN_HEADER] = token
        # Connection errors are retried briefly: the AM's listen backlog can overflow when a
        # whole gang registers at once. Status codes are never retried here; callers decide.
        retry = Retry(total=retries, connect=retries, read=0, status=0, backoff_factor=0.2,
                      allowed_methods=None, raise_on_status=False)
        self.session.mount("http://", HTTPAdapter(max_retries=retry, pool_maxsize=4))

    def _call(self, method: str, path: str, *, timeout: float | None = None, **kw: Any) -> Any:
        try:
            r = self.session.request(method, self.base + path, timeout=timeout or self.timeout, **kw)
        except requests.RequestException as e:
            raise AMUnreachable(f"ApplicationMaster at {self.base} unreachable: {e}") from None
        if r.status_code == 204:
            return None
        if r.status_code >= 400:
            try:
                msg = r.json().get("error", r.text)
            except ValueError:
                msg = r.text
            raise AMError(r.status_code, msg)
        return r.json()

    # executor side
    def register(self, task_id: str, session_id: int, host: str, port: int, **extra: Any) -> dict:
        return self._call("POST", "/v1/register", json={"task_id": task_id, "session_id": session_id,
                                                         "host": host, "port": port, **extra})

    def cluster_spec(self, task_id: str, session_id: int, wait: float = 20.0) -> dict | None:
        """Long-polls for the cluster spec; None while not every task has registered."""
        return self._call("GET", "/v1/cluster-spec",
                          params={"task_id": task_id, "session_id": session_id, "wait": wait},
                          timeout=wait + 10)

    def heartbeat(self, task_id: str, session_id: int, **metrics: Any) -> dict:
        return self._call("POST", "/v1/heartbeat", json={"task_id": task_id, "session_id": session_id,
                                                          "metrics": metrics})

    def task_started(self, task_id: str, session_id: int, pid: int) -> dict:
        return self._call("POST", "/v1/started", json={"task_id": task_id, "session_id": session_id,
                                                        "pid": pid})

    def result(self, task_id: str, session_id: int, exit_code: int, diagnostics: str = "") -> dict:
        return self._call("POST", "/v1/result", json={"task_id": task_id, "session_id": session_id,
                                                       "exit_code": exit_code, "diagnostics": diagnostics})

    def register_tensorboard(self, url: str) -> dict:
        return self._call("POST", "/v1/tensorboard", json={"url": url})

    # client side
    def status(self) -> dict:
        return self._call("GET", "/v1/status")

    def kill(self, reason: str = "killed by user") -> dict:
        return self._call("POST", "/v1/kill", json={"reason": reason})

    def wait_ready(self, deadline: float) -> None:
        while True:
            try:
                self.status()
                return
            except AMUnreachable:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
