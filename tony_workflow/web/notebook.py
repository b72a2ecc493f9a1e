"""A running notebook job's JupyterLab, through the history server: ``/jobs/<id>/notebook/``.

The lab (:mod:`tony_workflow.task.lab`) serves under that same path in its container and asks every
request for the job's notebook token (:func:`tony_workflow.protocol.notebook_token`), which the
server derives from the job's secret as its client reads it from the cluster. Viewers never see
that token: the server signs them in as it does for every page (their token, or a Kerberos login)
and applies the job's access rule (its owner, ``tony.application.view-acls``, the server's
admins), then passes the request on with the lab's token added and the server's own credentials
taken out. HTTP requests and websockets (kernels, terminals) both pass; a websocket that is not
the viewer's to open is refused with 403 before it opens.

What the job's owner shares by naming users in ``tony.application.view-acls`` is the notebook
itself, whose kernels run code as the owner: the job page says so.
"""
from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, HTTPException, Request, WebSocket
from fastapi.responses import RedirectResponse, Response
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.responses import StreamingResponse

from ..protocol import notebook_token
from ..status import FINAL_STATES

if TYPE_CHECKING:
    from .access import Viewer
    from .pages import JobPages

__all__ = ["NotebookProxy"]

#: Headers that belong to one hop, or to the server's own sign-in, and are not passed on.
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authenticate",
        "proxy-authorization", "host", "cookie", "authorization", "origin", "referer", "content-length",
        "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol"}
_REMEMBER_S = 10.0  # how long where a lab answers, and who may use it, are kept before being asked again
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


class NotebookProxy:
    """The notebook routes of a server whose pages are ``pages``; ``viewer_of(connection)`` signs
    a websocket's viewer in (the HTTP middleware does it for the rest); ``cookie`` is the name of
    the server's sign-in cookie, never passed on."""

    def __init__(self, pages: JobPages, viewer_of: Callable[[HTTPConnection], Awaitable[Viewer | None]],
                 cookie: str):
        self.pages, self.viewer_of, self.cookie = pages, viewer_of, cookie
        self._labs: dict[str, tuple[float, str, str]] = {}
        self._allowed: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._http: Any = None

    def mount(self, app: FastAPI) -> None:
        self.pages.notebooks = True
        app.add_api_route("/jobs/{app_id}/notebook", self.enter, methods=["GET"], include_in_schema=False)
        app.add_api_route("/jobs/{app_id}/notebook/{path:path}", self.http, methods=_METHODS, include_in_schema=False)
        app.add_api_websocket_route("/jobs/{app_id}/notebook/{path:path}", self.socket)

        @app.on_event("shutdown")
        async def close() -> None:
            if self._http is not None:
                await self._http.aclose()

    # -- where the lab is, and whether this viewer may use it --------------------------------------

    def target(self, conn: HTTPConnection, app_id: str) -> tuple[str, str]:
        """The lab's base URL and token, for a viewer who may use it: 404 when the job has none (or
        has ended), 403 when the job is not the viewer's to see (the pages' rule)."""
        viewer = getattr(conn.state, "viewer", None)
        who = (viewer.name if viewer else "", app_id)
        now = time.monotonic()
        with self._lock:
            allowed = self._allowed.get(who, 0.0) > now
            lab = self._labs.get(app_id)
        if not allowed:
            record, _ = self.pages._record(conn, app_id)  # type: ignore[arg-type]  # it reads .state and the query
            if record.get("state") in FINAL_STATES:
                raise HTTPException(404, f"{app_id} has ended ({record.get('state')}): its notebook went with it")
            with self._lock:
                self._allowed[who] = now + _REMEMBER_S
        if lab is None or lab[0] <= now:
            lab = (now + _REMEMBER_S, *self._ask_job(conn, app_id))
            with self._lock:
                self._labs[app_id] = lab
        return lab[1], lab[2]

    def _ask_job(self, conn: HTTPConnection, app_id: str) -> tuple[str, str]:
        from ..errors import TonyError
        from ..rpc import AMClient, AMError, AMUnreachable

        client = self.pages.client_of(conn)  # type: ignore[arg-type]
        try:
            endpoint = client.attach(app_id).backend.endpoint(app_id)
            status = AMClient(endpoint.address, endpoint.token, timeout=5, retries=1).status() if endpoint else {}
        except (TonyError, AMError, AMUnreachable, OSError) as e:
            raise HTTPException(503, f"the ApplicationMaster of {app_id} did not answer: {e}") from None
        url = status.get("notebook_url")
        if endpoint is None or not url:
            raise HTTPException(404, f"{app_id} serves no notebook" + (
                " yet: JupyterLab is starting (try again in a few seconds)" if status.get("state") == "RUNNING"
                and any(t.get("task_id", "").startswith("notebook:") for t in status.get("tasks") or ()) else
                " (it is not a notebook job, or is not running)"))
        return url, notebook_token(endpoint.token)

    def _headers(self, conn: HTTPConnection, token: str) -> dict[str, str]:
        headers = {k: v for k, v in conn.headers.items() if k.lower() not in _HOP}
        cookies = "; ".join(f"{k}={v}" for k, v in conn.cookies.items() if k != self.cookie)
        if cookies:
            headers["Cookie"] = cookies
        headers["Authorization"] = f"token {token}"
        return headers

    # -- routes ------------------------------------------------------------------------------------

    async def enter(self, request: Request, app_id: str) -> Response:
        return RedirectResponse(f"{request.url.path}/lab", status_code=307)

    async def http(self, request: Request, app_id: str, path: str = "") -> Response:
        import httpx

        base, token = await run_in_threadpool(self.target, request, app_id)
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(120.0, connect=10.0), follow_redirects=False)
        upstream_request = self._http.build_request(
            request.method, base + path, params=list(request.query_params.multi_items()),
            headers=self._headers(request, token), content=await request.body())
        try:
            upstream = await self._http.send(upstream_request, stream=True)
        except httpx.HTTPError as e:
            with self._lock:
                self._labs.pop(app_id, None)  # asked again next time: the lab may have moved
            raise HTTPException(502, f"the notebook of {app_id} did not answer: {e}") from None
        headers = [(k, v) for k, v in upstream.headers.multi_items() if k.lower() not in _HOP
                   and k.lower() != "content-encoding"]
        kind = upstream.headers.get("content-type", "")
        if kind.startswith(("text/", "application/json", "application/javascript")):
            # The lab writes its token into what it serves (its page's settings): taken out, as
            # viewers reach it through this server, never around it.
            body = (await upstream.aread()).replace(token.encode(), b"")
            await upstream.aclose()
            return _with(Response(body, status_code=upstream.status_code), headers)
        return _with(StreamingResponse(upstream.aiter_raw(), status_code=upstream.status_code,
                                       background=BackgroundTask(upstream.aclose)), headers)

    async def socket(self, websocket: WebSocket, app_id: str, path: str = "") -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import WebSocketException

        viewer = await self.viewer_of(websocket)
        if viewer is None:
            await websocket.close(code=1008)  # before accepting: the handshake is answered 403
            return
        websocket.state.viewer = viewer
        try:
            base, token = await run_in_threadpool(self.target, websocket, app_id)
        except HTTPException:
            await websocket.close(code=1008)
            return
        query = websocket.url.query
        url = "ws" + base[len("http"):] + path + (f"?{query}" if query else "")
        offered = list(websocket.scope.get("subprotocols") or [])
        try:
            upstream = await connect(url, additional_headers=self._headers(websocket, token),
                                     subprotocols=offered or None, max_size=None, compression=None, open_timeout=30)
        except (TimeoutError, OSError, WebSocketException):
            await websocket.close(code=1011)
            return
        async with upstream:
            await websocket.accept(subprotocol=upstream.subprotocol)
            await _pump(websocket, upstream)


def _with(response: Response, headers: list[tuple[str, str]]) -> Response:
    """``response`` with the lab's headers, each line kept (several Set-Cookie lines stay apart)."""
    for name, value in headers:
        if name.lower() == "content-type":
            response.headers[name] = value
        else:
            response.headers.append(name, value)
    return response


async def _pump(downstream: WebSocket, upstream: Any) -> None:
    """Passes messages both ways until either side closes (or goes: a lab that ended, a browser
    tab closed), then closes the other."""
    from starlette.websockets import WebSocketDisconnect
    from websockets.exceptions import ConnectionClosed

    async def down() -> None:
        while True:
            message = await downstream.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            await upstream.send(data if data is not None else message.get("text") or "")

    async def up() -> None:
        async for data in upstream:
            if isinstance(data, bytes):
                await downstream.send_bytes(data)
            else:
                await downstream.send_text(data)

    async def quietly(pass_on: Callable[[], Awaitable[None]]) -> None:
        with contextlib.suppress(ConnectionClosed, WebSocketDisconnect, RuntimeError, OSError):
            await pass_on()

    tasks = [asyncio.ensure_future(quietly(down)), asyncio.ensure_future(quietly(up))]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    with contextlib.suppress(Exception):
        await upstream.close()
    with contextlib.suppress(Exception):
        await downstream.close()
