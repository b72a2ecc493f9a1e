"""The ApplicationMaster's HTTP transport: routing, authentication and the tracking pages.

The AM (:mod:`tony_workflow.am.master`) holds the job's state and applies its rules; this module holds the
wire. It serves the routes of :mod:`tony_workflow.protocol` by name, with handlers the AM hands
over, and never imports the AM: the dependency runs one way, and the server can be started on any
set of handlers (a test's, a benchmark's).

Authentication: every API request carries a token in ``X-Tony-Token``. The full token (the
executors' secret) opens every route; the read-only view token opens only the routes the protocol
marks ``view`` (the status) and the tracking pages, which carry it in their path, so that a
workflow UI can link to them without holding the executors' secret. The group token (derived from
the full one) opens only the routes marked ``group``: those an in-place elastic job's trainers use. Tokens are compared with
:func:`hmac.compare_digest`, whose time does not depend on where the strings differ.

Tracking pages, under ``/ui/<view token>``: the job page (HTML, refreshed every 5 s),
``status.json``, ``logs`` (an index of the current session's task logs) and
``logs/<task id>/stdout|stderr`` (the last MiB of the file). The HTML comes from Jinja2 templates
in ``templates/`` with autoescape on: every value shown (names, diagnostics, stderr lines) comes
from the job and must never become markup.

The request handler reads the request line and headers itself and writes each reply in one
``send``: the standard handler parses headers with the e-mail package and writes a reply in two
sends, which cost more than the AM's own logic at a thousand heartbeats a second and, the second
send meeting the client's delayed acknowledgement, stalled some replies for tens of milliseconds.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import hmac
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .. import protocol
from ..context import describe as describe_context
from ..protocol import TOKEN_HEADER, BadRequest, Handler

__all__ = ["AMHttpServer", "Handler", "calm_collector", "render_log_index", "render_status_page"]

log = logging.getLogger("tony.am")

_HTML = "text/html; charset=utf-8"
_LOG_TAIL_BYTES = 1 << 20  # the last MiB is what anyone reads in a browser
_MAX_LINE = 65536           # the longest request line or header line taken
_MAX_HEADERS = 100
_PHRASES = {s.value: s.phrase for s in HTTPStatus}


@functools.cache
def _templates():
    # Imported on the first page view, not with the AM: executors are what the AM serves first.
    import jinja2

    return jinja2.Environment(loader=jinja2.PackageLoader("tony_workflow.am", "templates"), autoescape=True,
                              trim_blocks=True, lstrip_blocks=True)


def render_status_page(st: dict) -> str:
    """The job's tracking page for a ``JobStatus.to_dict()``."""
    return _templates().get_template("status.html").render(st=st, origin=describe_context)


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
    app: AMHttpServer


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
        self.group_token = protocol.group_token(token)
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


class _Headers(dict):
    """A request's headers, by lower-cased name (the last of repeated ones)."""

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(name.lower(), default)


class _Date:
    """The Date header's value, made once a second rather than once a reply."""

    def __init__(self) -> None:
        self._second, self._text = -1, ""

    def __call__(self) -> str:
        now = int(time.time())
        if now != self._second:
            from email.utils import formatdate

            self._second, self._text = now, formatdate(now, usegmt=True)
        return self._text


_date = _Date()


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, fmt: str, *args: Any) -> None:  # keep the AM log readable
        pass

    def parse_request(self) -> bool:
        """Reads the request line (already in ``raw_requestline``) and the headers; on a malformed
        request, answers 400 (431 for too many or too long headers) and closes the connection."""
        self.command, self.request_version, self.close_connection = None, "HTTP/1.1", True
        self.headers = _Headers()
        self.requestline = line = self.raw_requestline.decode("latin-1").rstrip("\r\n")
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1]:
            self._refuse(HTTPStatus.BAD_REQUEST, f"bad request line {line[:100]!r}")
            return False
        self.command, self.path, self.request_version = parts
        for _ in range(_MAX_HEADERS + 1):
            raw = self.rfile.readline(_MAX_LINE + 1)
            if raw in (b"\r\n", b"\n", b""):
                break
            if len(raw) > _MAX_LINE:
                self._refuse(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "header line too long")
                return False
            name, sep, value = raw.decode("latin-1").partition(":")
            if not sep or not name or name != name.strip():
                self._refuse(HTTPStatus.BAD_REQUEST, f"bad header line {raw[:100]!r}")
                return False
            self.headers[name.lower()] = value.strip()
        else:
            self._refuse(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "too many headers")
            return False
        if self.headers.get("transfer-encoding"):
            self._refuse(HTTPStatus.LENGTH_REQUIRED, "request bodies are sent with a Content-Length")
            return False
        connection = self.headers.get("connection", "").lower()
        self.close_connection = connection == "close" or (self.request_version == "HTTP/1.0"
                                                          and connection != "keep-alive")
        if self.headers.get("expect", "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """What the base class answers with (an unknown method, a request line too long)."""
        self._refuse(code, message or _PHRASES.get(code, "error"))

    def _refuse(self, code: int, why: str) -> None:
        """Answers ``code`` and closes the connection. What the client sent beyond the point of
        refusal is read and dropped first (for a second at most): a socket closed with unread data
        is reset, and the reset can destroy the reply before the client reads it."""
        self.close_connection = True
        self._send(code, {"error": why})
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(1.0)
            for _ in range(64):
                if not self.rfile.read1(65536):
                    break

    def _send(self, code: int, body: Any = None, ctype: str = "application/json") -> None:
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        close = "Connection: close\r\n" if self.close_connection else ""
        head = (f"HTTP/1.1 {code} {_PHRASES.get(code, '')}\r\nDate: {_date()}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(data)}\r\n{close}\r\n")
        # One send: a reply split in two waits for the client's delayed acknowledgement (Nagle).
        self.wfile.write(head.encode("latin-1") + data)

    def _unauthorized(self) -> None:
        # The request's body is left unread, so this connection cannot carry another request.
        self._refuse(HTTPStatus.UNAUTHORIZED, "missing or wrong token")

    def _authorized(self, allow_view: bool, allow_group: bool = False) -> bool:
        app = self.server.app
        given = self.headers.get(TOKEN_HEADER, "").encode()
        ok = hmac.compare_digest(given, app.token.encode()) or (
            allow_view and hmac.compare_digest(given, app.view_token.encode())) or (
            allow_group and hmac.compare_digest(given, app.group_token.encode()))
        if not ok:
            self._unauthorized()
        return ok

    def _body(self) -> Any:
        """The request's JSON body (None when it has none); raises BadRequest when it is not JSON."""
        n = int(self.headers.get("Content-Length") or 0)
        if not n:
            return {}
        data = self.rfile.read(n)
        try:
            return json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise BadRequest(f"the body is not JSON: {data[:80]!r}") from None

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        url = urlparse(self.path)
        if method == "GET" and url.path.startswith("/ui/"):
            return self._ui(url.path)
        route = protocol.route_for(method, url.path)
        if not self._authorized(allow_view=route is not None and route.view,
                                allow_group=route is not None and route.group):
            return
        try:
            # The body is read even for an unknown route: the connection is kept alive.
            raw = None if method == "GET" else self._body()
            if route is None:
                return self._send(HTTPStatus.NOT_FOUND, {"error": f"no route {url.path}"})
            request = route.decode_query(url.query) if method == "GET" else route.decode(raw)
        except BadRequest as e:
            return self._send(HTTPStatus.BAD_REQUEST, {"error": str(e), "field": e.field})
        try:
            code, reply = self.server.app.handlers[route.name](request)
        except Exception as e:
            log.exception("%s %s failed", method, url.path)
            code, reply = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(e).__name__}: {e}"}
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
