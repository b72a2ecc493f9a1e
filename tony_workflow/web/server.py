"""``tony history serve``: the history server, the TonY job pages (:mod:`.pages`) on their own,
for the users of Azkaban and of the command line as for Airflow's.

It reads the job history the client reads (``tony.history.location``: a local directory, or HDFS
on YARN, as the cluster's login, Kerberos included) and the running jobs of the backend it is
given, and serves them read-only: the jobs list with its filters, each job's page, its event log,
and the TensorBoard of any job that ended, started on demand and stopped when idle.

Every page asks who is looking (:mod:`.access`): a token per user, and the viewer sees their own
jobs, those whose ``tony.application.view-acls`` name them, or every job when they administer the
server. A request without a valid token gets the login form (401), never a page.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from .access import Spnego, SpnegoError, TokenBook, TokenFileError, Viewer
from .boards import BoardKeeper
from .notebook import NotebookProxy
from .pages import JobPages, render

if TYPE_CHECKING:
    from .pages import TonyClient

__all__ = ["cmd_serve", "create_server", "serve_parser"]

COOKIE = "tony_history_token"
_OPEN = ("/login", "/favicon.ico")


def _token(request: HTTPConnection) -> str | None:
    auth = request.headers.get("authorization") or ""
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.query_params.get("token") or request.cookies.get(COOKIE)


def create_server(client: TonyClient, book: TokenBook, keeper: BoardKeeper | None = None,
                  index_ttl: float = 5.0, spnego: Spnego | None = None) -> FastAPI:
    """The history server's app over ``client``'s jobs and history, for the users ``book`` knows
    (and, with ``spnego``, those Kerberos logs in)."""
    app = FastAPI(title="TonY history server", docs_url=None, redoc_url=None, openapi_url=None)

    def viewer_of(request: Request) -> Viewer | None:
        viewer: Viewer | None = request.state.viewer
        return viewer

    pages = JobPages(lambda request: client, viewer_of, keeper=keeper, index_ttl=index_ttl,
                     title="TonY job history")
    app.state.pages = pages

    @app.middleware("http")
    async def authenticate(request: Request, call_next: Any) -> Response:
        if request.url.path in _OPEN:
            opened: Response = await call_next(request)
            return opened
        token = _token(request)
        viewer = book.viewer(token)
        answer_token = None
        auth = request.headers.get("authorization") or ""
        if viewer is None and spnego is not None and auth.lower().startswith("negotiate "):
            accepted = await run_in_threadpool(spnego.accept, auth[10:].strip())
            if accepted is not None:
                viewer = book.viewer_named(accepted[0])
                answer_token = accepted[1]
        if viewer is None:
            challenge = {"WWW-Authenticate": 'Bearer realm="tony"'}
            if spnego is not None:
                challenge = {"WWW-Authenticate": "Negotiate"}
            if auth or "text/html" not in request.headers.get("accept", "text/html"):
                return Response("a valid token is needed (Authorization: Bearer TOKEN"
                                + (", or a Kerberos login: Negotiate" if spnego else "") + ")\n",
                                status_code=401, headers=challenge)
            page = render("login.html", next=_without_token(request), failed=bool(token))
            page.status_code = 401
            page.headers.update(challenge)
            return page
        if request.query_params.get("token"):  # a link that logs in: keep the token in a cookie, drop it from the URL
            out = RedirectResponse(_without_token(request), status_code=303)
            _set_cookie(out, request, token or "")
            return out
        request.state.viewer = viewer
        answer: Response = await call_next(request)
        if answer_token:
            answer.headers["WWW-Authenticate"] = f"Negotiate {answer_token}"
        return answer

    @app.post("/login", response_class=HTMLResponse)
    async def login(request: Request) -> Response:
        form = await request.form()
        token = str(form.get("token") or "")
        target = str(form.get("next") or "/")
        if not target.startswith("/") or target.startswith("//"):
            target = "/"
        if book.user_of(token) is None:
            page = render("login.html", next=target, failed=True)
            page.status_code = 401
            return page
        out = RedirectResponse(target, status_code=303)
        _set_cookie(out, request, token)
        return out

    @app.get("/logout")
    def logout(request: Request) -> Response:
        out = RedirectResponse(str(request.url_for("jobs")), status_code=303)
        out.delete_cookie(COOKIE, path="/")
        return out

    app.include_router(pages.router())

    async def socket_viewer(conn: HTTPConnection) -> Viewer | None:
        """A websocket's viewer, signed in as a page's is (its token, or a Kerberos login)."""
        viewer = book.viewer(_token(conn))
        auth = conn.headers.get("authorization") or ""
        if viewer is None and spnego is not None and auth.lower().startswith("negotiate "):
            accepted = await run_in_threadpool(spnego.accept, auth[10:].strip())
            viewer = book.viewer_named(accepted[0]) if accepted is not None else None
        return viewer

    NotebookProxy(pages, socket_viewer, COOKIE).mount(app)
    return app


def _without_token(request: Request) -> str:
    query = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    return request.url.path + (f"?{urlencode(query)}" if query else "")


def _set_cookie(response: Response, request: Request, token: str) -> None:
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")


def serve_parser(backend_help: str, jobs: Callable[[str | None], TonyClient]) -> argparse.ArgumentParser:
    """The arguments of ``tony history serve``; ``jobs(backend)`` is the client the pages read."""
    p = argparse.ArgumentParser(
        prog="tony history serve",
        description="Serves the job history's pages (and the running jobs'): the jobs list with filters, each job's "
                    "page and event log, and TensorBoard for jobs that ended. Prints a link that signs you in on "
                    "stdout; other users sign in with the tokens of --tokens. Ctrl-C or SIGTERM stops it.")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=19886, help="the port (default 19886; 0: any free one)")
    p.add_argument("--tokens", metavar="FILE", help="a file of 'user token' lines (mode 600): who else may sign in")
    p.add_argument("--spnego-keytab", metavar="KEYTAB", help="also take Kerberos logins (SPNEGO), with the HTTP "
                                                              "service's key from this keytab")
    p.add_argument("--spnego-principal", metavar="PRINCIPAL", help="the HTTP service's principal in the keytab "
                                                                    "(HTTP/host@REALM; default: any it holds)")
    p.add_argument("--admins", metavar="USERS", help="comma-separated users who see every job (the server's owner "
                                                     "always does)")
    p.add_argument("--board-idle", type=float, default=600.0, metavar="SECONDS",
                   help="stop a finished job's TensorBoard nobody has used for this long (default 600)")
    p.add_argument("--boards", type=int, default=8, metavar="N", help="at most N TensorBoards at once (default 8)")
    p.add_argument("--backend", choices=["local", "yarn"], default=None, help=backend_help)
    p.set_defaults(fn=cmd_serve, jobs=jobs)
    return p


def cmd_serve(args: argparse.Namespace) -> int:
    """``tony history serve``: runs the server until SIGTERM or Ctrl-C."""
    import uvicorn

    from ..process import user_name

    try:
        book = TokenBook(user_name(), Path(args.tokens) if args.tokens else None,
                         admins=[a for a in (args.admins or "").split(",") if a.strip()])
        spnego = Spnego(Path(args.spnego_keytab), args.spnego_principal) if args.spnego_keytab else None
    except (TokenFileError, SpnegoError) as e:
        print(f"tony: {e}", file=sys.stderr)
        return 2
    if args.spnego_principal and not args.spnego_keytab:
        print("tony: --spnego-principal names the key of --spnego-keytab: give the keytab too", file=sys.stderr)
        return 2
    client = args.jobs(args.backend)
    keeper = BoardKeeper(idle_s=args.board_idle, most=args.boards)
    app = create_server(client, book, keeper, spnego=spnego)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    shown = "localhost" if args.host in ("127.0.0.1", "0.0.0.0") else args.host

    def started() -> None:
        # The history is read now, not when the first viewer asks: 10,000 records take seconds.
        threading.Thread(target=lambda: app.state.pages.index(client).refresh(), name="tony-index", daemon=True).start()
        port = server.servers[0].sockets[0].getsockname()[1] if server.servers else args.port
        print(f"http://{shown}:{port}/?token={book.owner_token}", flush=True)
        print(f"tony: the job history of {client.history().store.uri} is served for {book.owner} (the link above "
              f"signs in){' and the users of ' + args.tokens if args.tokens else ''}; Ctrl-C or SIGTERM stops it",
              file=sys.stderr, flush=True)

    original = server.startup

    async def startup(sockets: Any = None) -> None:
        await original(sockets)
        started()

    server.startup = startup  # type: ignore[method-assign]
    signal.signal(signal.SIGTERM, lambda *_: setattr(server, "should_exit", True))
    try:
        server.run()
    except KeyboardInterrupt:  # a server stopped as servers are (Ctrl-C), as tony tensorboard is: done, 0
        pass
    finally:
        keeper.stop()
    return 0
