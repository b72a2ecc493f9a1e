"""The ApplicationMaster's HTTP transport: routing, authentication and the tracking pages.

The AM (:mod:`tony_workflow.am`) holds the job's state and applies its rules; this module holds the
wire. It serves the routes of :mod:`tony_workflow.protocol` by name, with handlers the AM hands
over, and never imports the AM: the dependency runs one way, and the server can be started on any
set of handlers (a test's, a benchmark's).

Authentication: every API request carries a token in ``X-Tony-Token``. The full token (the
executors' secret) opens every route; the read-only view token opens only the routes the protocol
marks ``view`` (the status) and the tracking pages, which carry it in their path, so that a
workflow UI can link to them without holding the executors' secret. Tokens are compared with
:func:`hmac.compare_digest`, whose time does not depend on where the strings differ.

Tracking pages, under ``/ui/<view token>``: the job page (HTML, refreshed every 5 s),
``status.json``, ``logs`` (an index of the current session's task logs) and
``logs/<task id>/stdout|stderr`` (the last MiB of the file). The HTML comes from Jinja2 templates
in ``templates/`` with autoescape on: every value shown (names, diagnostics, stderr lines) comes
from the job and must never become markup.
"""
from __future__ import annotations

import functools
import gc
import hmac
import json
import os
import threading
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from . import protocol
from .protocol import TOKEN_HEADER

__all__ = ["AMHttpServer", "Handler", "calm_collector", "render_status_page", "render_log_index"]

#: A route's handler: the request's fields in, (HTTP status, JSON-able reply or None) out.
Handler = Callable[[dict], tuple[int, Any]]

_HTML = "text/html; charset=utf-8"
_LOG_TAIL_BYTES = 1 << 20  # the last MiB is what anyone reads in a browser


@functools.lru_cache(maxsize=None)
def _templates():
    # Imported on the first page view, not with the AM: executors are what the AM serves first.
    import jinja2

    return jinja2.Environment(loader=jinja2.PackageLoader("tony_workflow", "templates"), autoescape=True,
                              trim_blocks=True, lstrip_blocks=True)


def render_status_page(st: dict) -> str:
    """The job's tracking page for a ``JobStatus.to_dict()``."""
    return _templates().get_template("status.html").render(st=st)


def render_log_index(task_ids: list[str], base: str) -> str:
    return _templates().get_template("logs.html").render(task_ids=task_ids, base=base)


def calm_collector() -> None:
    """Makes the cyclic garbage collector run rarely in a process that serves the AM's routes.

    Every heartbeat parses a JSON body of nested dicts (figures, progress), so a thousand tasks
    allocate tens of thousands of short-lived containers a second. At Python's default threshold
    (700 allocations) that sets off a young collection every few milliseconds, and with them full
    collections over a heap that holds a thread and its frames per connection: measured, a quarter
    more CPU than the same server without the AM's logic. Those bodies hold no cycles (reference
    counting frees them), so collecting seventy times less often costs nothing in memory, and what
    the process allocated while starting is frozen out of every later collection.
    """
    gc.freeze()
    gc.set_threshold(50_000, 50, 1_000)


class _Server(ThreadingHTTPServer):
    # The listen backlog is fixed when the socket is created: a whole gang registering at once
    # overflows the default of 5 and connections get reset.
    request_queue_size = 1024
    daemon_threads = True
    app: "AMHttpServer"


class AMHttpServer:
    """The AM's HTTP server on ``host`` and an ephemeral port.

    ``handlers`` maps every route name of :data:`tony_workflow.protocol.ROUTES` to its handler;
    ``status`` gives the current ``JobStatus`` as a dict; ``task_logs`` gives each current task's
    (stdout, stderr) paths. Handlers run on the server's threads.
    """

    def __init__(self, host: str, *, token: str, view_token: str, handlers: Mapping[str, Handler],
                 status: Callable[[], dict], task_logs: Callable[[], Mapping[str, tuple[Any, Any]]]):
        missing = sorted({r.name for r in protocol.ROUTES} - set(handlers))
        if missing:
            raise ValueError(f"no handler for route(s) {', '.join(missing)}")
        self.host = host
        self.token, self.view_token = token, view_token
        self.handlers = dict(handlers)
        self.status = status
        self.task_logs = task_logs
        self._server: _Server | None = None

    def start(self, port: int = 0) -> str:
        """Starts serving on a thread of its own, on ``port`` if it is free (an earlier attempt's,
        so that links to it keep working), else on an ephemeral one; returns ``host:port``."""
        try:
            self._server = _Server((self.host, port), _RequestHandler)
        except OSError:
            if not port:
                raise
            self._server = _Server((self.host, 0), _RequestHandler)
        self._server.app = self
        threading.Thread(target=self._server.serve_forever, name="am-http", daemon=True).start()
        return f"{self.host}:{self._server.server_address[1]}"

    def shutdown(self) -> None:
        if self._server is not None:
            self._server.shutdown()


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, fmt: str, *args: Any) -> None:  # keep the AM log readable
        pass

    def _send(self, code: int, body: Any = None, ctype: str = "application/json") -> None:
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _unauthorized(self) -> None:
        # The request's body is left unread, so this connection cannot carry another request.
        self.close_connection = True
        self._send(HTTPStatus.UNAUTHORIZED, {"error": "missing or wrong token"})

    def _authorized(self, allow_view: bool) -> bool:
        app = self.server.app
        given = self.headers.get(TOKEN_HEADER, "").encode()
        ok = hmac.compare_digest(given, app.token.encode()) or (
            allow_view and hmac.compare_digest(given, app.view_token.encode()))
        if not ok:
            self._unauthorized()
        return ok

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        if not n:
            return {}
        try:
            body = json.loads(self.rfile.read(n))
        except json.JSONDecodeError:
            return {}
        return body if isinstance(body, dict) else {}

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        url = urlparse(self.path)
        if method == "GET" and url.path.startswith("/ui/"):
            return self._ui(url.path)
        route = protocol.route_for(method, url.path)
        if not self._authorized(allow_view=route is not None and route.view):
            return
        if method == "GET":
            try:
                fields = route.decode_query(url.query) if route else {}
            except ValueError as e:
                return self._send(HTTPStatus.BAD_REQUEST, {"error": f"bad query: {e}"})
        else:
            fields = self._body()  # read even for an unknown route: the connection is kept alive
        if route is None:
            return self._send(HTTPStatus.NOT_FOUND, {"error": f"no route {url.path}"})
        code, reply = self.server.app.handlers[route.name](fields)
        self._send(code, reply)

    # ------------------------------------------------------------------ tracking pages
    def _ui(self, path: str) -> None:
        app = self.server.app
        parts = path.strip("/").split("/")
        if len(parts) < 2 or not hmac.compare_digest(parts[1].encode(), app.view_token.encode()):
            return self._unauthorized()
        if len(parts) > 2 and parts[2] == "status.json":
            return self._send(200, app.status())
        if len(parts) > 2 and parts[2] == "logs":
            return self._logs(parts[3:])
        self._send(200, render_status_page(app.status()).encode(), _HTML)

    def _logs(self, rest: list[str]) -> None:
        app = self.server.app
        files = app.task_logs()
        if not rest:
            page = render_log_index(list(files), f"/ui/{app.view_token}/logs")
            return self._send(200, page.encode(), _HTML)
        if len(rest) != 2 or rest[0] not in files or rest[1] not in ("stdout", "stderr"):
            return self._send(HTTPStatus.NOT_FOUND, {"error": "no such log"})
        self._send(200, _tail(files[rest[0]][0 if rest[1] == "stdout" else 1]), "text/plain; charset=utf-8")


def _tail(path: str | os.PathLike | None) -> bytes:
    if path is None:
        return b""
    try:
        with open(Path(path), "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - _LOG_TAIL_BYTES))
            return fh.read()
    except OSError:
        return b""
