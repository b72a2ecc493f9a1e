"""The TonY job pages, one set of views for every place that serves them: the history server
(``tony history serve``) and the pages inside Airflow's UI.

* ``/`` lists the jobs: those running now, then those that ended, from the job history's index
  (:class:`~tony_workflow.web.index.HistoryIndex`), filtered by DAG, run, task, Azkaban project,
  flow, execution and job, user, state, start time and name, a page at a time.
* ``/jobs/<application id>`` shows one: its tasks with their figures, the timeline, the progress,
  charts of the figures and training curves over time (SVG drawn here, no script), the advice for
  its next run, its TensorBoard, tracking and log links, its configuration, and the link back to
  the workflow run. A running job's record comes live from its ApplicationMaster, an ended one's
  from the history.
* ``/jobs/<application id>/events`` is an ended job's event log, as kept with its record, and
  ``/jobs/<application id>/logs`` its log files (``?task=worker:0``), while the cluster keeps them.
* ``/jobs/<application id>/tensorboard/`` is the TensorBoard of a job that ended, over the event
  files its record kept, started when first asked for and shared (:mod:`.boards`).

Who may see a job is the viewer's business (:func:`~tony_workflow.web.access.may_view`): the place
that mounts the pages says who the viewer is, or None where it decides access itself.
"""
from __future__ import annotations

import datetime as _dt
import json
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from ..advice import advise, runs_of
from ..context import FIELDS
from ..context import describe as describe_context
from ..spec.table import TONY_DEFAULTS
from ..spec.values import parse_acl
from ..status import FINAL_STATES, check_application_id, progress_text
from .access import Viewer, may_view
from .boards import BoardKeeper
from .index import Filters, HistoryIndex

if TYPE_CHECKING:
    from ..history import JobHistory, SubmitterHistory
    from ..status import JobStatus


class TonyClient(Protocol):
    """What the pages read jobs through: a :class:`tony_workflow.client.TonyClient`, which the
    front end (the tony command, Airflow's plugin) gives them; named here by what it offers, as
    the client is above the pages (it starts their server)."""

    def history(self) -> JobHistory | SubmitterHistory: ...
    def record(self, app_id: str) -> dict[str, Any] | None: ...
    def list(self) -> list[JobStatus]: ...
    def attach(self, app_id: str) -> Any: ...

__all__ = ["JobPages", "chart", "charts", "render"]

_TEMPLATES = Environment(loader=FileSystemLoader(str(Path(__file__).parent / "templates")),
                         autoescape=select_autoescape(["html"]))


def _set_by_the_job(conf: Mapping[str, Any] | None) -> tuple[dict[str, Any], int]:
    """The keys a job's configuration holds at other values than their defaults (what it set), and
    how many are left out: TonY's defaults include placeholders (``/path/to/tony-history``) that
    would read as if the job had set them."""
    conf = conf or {}
    own = {k: v for k, v in conf.items() if TONY_DEFAULTS.get(k) != str(v)}
    return own, len(conf) - len(own)


_TEMPLATES.globals["set_by_the_job"] = _set_by_the_job
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
#: The list's filters on the context, by query parameter (tony list's options): the field each names.
CONTEXT_FILTERS = {f.option: f.name for f in FIELDS if f.option}
STATES = ("SUCCEEDED", "FAILED", "KILLED")
MAX_LIMIT = 500
LOG_TAIL = 1 << 20  # the last MiB of each log file


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else ""


def render(name: str, **context: Any) -> HTMLResponse:
    return HTMLResponse(_TEMPLATES.get_template(name).render(when=_when, origin=describe_context, **context))


def chart(title: str, t: list[float], lines: dict[str, list[float | None]], unit: str,
          width: int = 640, height: int = 180) -> dict[str, Any] | None:
    """One chart as SVG geometry: a polyline per named line over the times ``t`` (gaps where a value
    is None), with the axis range; None when there is nothing to draw."""
    values = [v for line in lines.values() for v in line if v is not None]
    if len(t) < 2 or not values:
        return None
    pad = 36
    t0, t1 = t[0], t[-1] if t[-1] > t[0] else t[0] + 1
    top = max(values) * 1.1 or 1.0
    bottom = min(0.0, min(values) * 1.1)  # a metric may go below zero (a log-likelihood, a margin)
    if top <= bottom:
        top = bottom + 1.0
    series = []
    for i, (name, line) in enumerate(lines.items()):
        segments: list[list[str]] = []
        current: list[str] = []
        for ts, v in zip(t, line):
            if v is None:
                if current:
                    segments.append(current)
                current = []
                continue
            x = pad + (ts - t0) / (t1 - t0) * (width - pad - 8)
            y = height - 20 - (v - bottom) / (top - bottom) * (height - 30)
            current.append(f"{x:.1f},{y:.1f}")
        if current:
            segments.append(current)
        series.append({"name": name, "color": _COLORS[i % len(_COLORS)],
                       "segments": [" ".join(s) for s in segments if len(s) >= 1]})
    return {"title": title, "unit": unit, "width": width, "height": height, "pad": pad, "top": _axis(top),
            "bottom": _axis(bottom), "seconds": round(t1 - t0), "series": series}


def _axis(value: float) -> float:
    """An axis end as shown: a loss of 0.02 keeps its digits, a memory of 2048.4 MiB loses them."""
    return round(value, 1) if abs(value) >= 10 else float(f"{value:.3g}")


def charts(series: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The charts of a record's series: the step, each task's memory, CPU and GPU, and each metric
    the training reported."""
    if not series or len(series.get("t") or []) < 2:
        return []
    t, tasks = series["t"], series.get("tasks") or {}
    out = [chart("Training step", t, {"step": series.get("step") or []}, "step"),
           chart("Memory (RSS)", t, {k: v.get("rss_mb") or [] for k, v in tasks.items()}, "MiB"),
           chart("CPU", t, {k: v.get("cpu_percent") or [] for k, v in tasks.items()}, "% of a core"),
           chart("GPU utilisation", t, {k: v.get("gpu_util_percent") or [] for k, v in tasks.items()}, "%"),
           chart("GPU memory", t, {k: v.get("gpu_mem_mb") or [] for k, v in tasks.items()}, "MiB")]
    # The training's own curves (report(loss=...), the Keras callback's logs), one chart each.
    out += [chart(f"Training: {name}", t, {name: values}, "as reported")
            for name, values in (series.get("metrics") or {}).items()]
    return [c for c in out if c]


def _day(value: str | None, name: str, end: bool = False) -> float | None:
    """A day (YYYY-MM-DD, this machine's time) as epoch seconds: its start, or with ``end`` the
    next day's; 400 naming the parameter when it is not one."""
    if not value:
        return None
    try:
        day = _dt.datetime.strptime(value.strip(), "%Y-%m-%d")
    except ValueError:
        raise HTTPException(400, f"{name} must be a day as YYYY-MM-DD, got {value[:40]!r}") from None
    return (day + _dt.timedelta(days=1 if end else 0)).timestamp()


class JobPages:
    """The views (see the module) over the jobs ``client_of(request)`` reaches, shown to
    ``viewer_of(request)``. ``query_of(request)`` is what the pages' links carry to stay on the
    same source (Airflow's connection); ``keeper`` starts the finished jobs' TensorBoards."""

    def __init__(self, client_of: Callable[[Request], TonyClient], viewer_of: Callable[[Request], Viewer | None],
                 query_of: Callable[[Request], dict[str, str]] | None = None, keeper: BoardKeeper | None = None,
                 index_ttl: float = 5.0, title: str = "TonY jobs"):
        self.client_of, self.viewer_of = client_of, viewer_of
        self.query_of = query_of or (lambda request: {})
        self.keeper = keeper or BoardKeeper()
        self.index_ttl, self.title = index_ttl, title
        self.notebooks = False  # whether the server passes /jobs/<id>/notebook/ on (web.notebook)
        self._indexes: dict[str, HistoryIndex] = {}
        self._lock = threading.Lock()

    def index(self, client: TonyClient) -> HistoryIndex:
        """The index of ``client``'s history, one per history (kept between requests)."""
        history = client.history()
        with self._lock:
            index = self._indexes.get(history.store.uri)
            if index is None:
                index = self._indexes[history.store.uri] = HistoryIndex(history, ttl=self.index_ttl)
            return index

    # -- access --------------------------------------------------------------------------------------

    def _visible(self, viewer: Viewer | None, index: HistoryIndex) -> Callable[[Mapping[str, Any]], bool]:
        def visible(s: Mapping[str, Any]) -> bool:
            def acls() -> tuple[tuple[str, ...], tuple[str, ...]]:
                record = index.record(s["application_id"]) or {}
                found = parse_acl(str((record.get("conf") or {}).get("tony.application.view-acls") or ""))
                if isinstance(s, dict):
                    s["view_acls"] = found  # a record written before summaries held it: read once
                return found
            return may_view(viewer, s, acls)
        return visible

    def _may_see(self, viewer: Viewer | None, record: dict[str, Any]) -> bool:
        conf = record.get("conf") or {}
        summary = {**record, "submitter": record.get("submitter") or record.get("user"),
                   "view_acls": parse_acl(str(conf.get("tony.application.view-acls") or record.get("view_acls") or ""))}
        return may_view(viewer, summary)

    def _record(self, request: Request, app_id: str) -> tuple[dict[str, Any], HistoryIndex]:
        """The record of ``app_id`` the viewer may see (the history's, else the running job's);
        404 when there is none, 403 when it is not theirs to see."""
        try:
            check_application_id(app_id)
        except ValueError as e:
            raise HTTPException(404, str(e)) from None
        client = self.client_of(request)
        index = self.index(client)
        from ..errors import TonyError

        try:
            record = index.record(app_id) or client.record(app_id)
        except TonyError as e:  # the cluster refuses to say (its own ACLs), or cannot be reached
            raise HTTPException(404, f"{app_id}: {e}") from None
        if record is None:
            raise HTTPException(404, f"no TonY application {app_id} on this cluster or in its history")
        viewer = self.viewer_of(request)
        if not self._may_see(viewer, record):
            raise HTTPException(403, f"{viewer.name if viewer else 'you'} may not see {app_id}: it is "
                                     f"{record.get('user')}'s, and its tony.application.view-acls does not name you")
        return record, index

    # -- routes --------------------------------------------------------------------------------------

    def router(self) -> APIRouter:
        r = APIRouter()
        r.add_api_route("/", self.jobs, methods=["GET"], response_class=HTMLResponse, name="jobs")
        r.add_api_route("/jobs/{app_id}", self.job, methods=["GET"], response_class=HTMLResponse, name="job")
        r.add_api_route("/jobs/{app_id}/events", self.events, methods=["GET"], response_class=PlainTextResponse,
                        name="events")
        r.add_api_route("/jobs/{app_id}/logs", self.logs, methods=["GET"], response_class=PlainTextResponse,
                        name="logs")
        r.add_api_route("/jobs/{app_id}/tensorboard/{path:path}", self.tensorboard, methods=["GET", "POST"],
                        name="tensorboard")
        r.add_api_route("/jobs/{app_id}/notebooks/{task}/{name}", self.notebook, methods=["GET"], name="notebook")
        return r

    def jobs(self, request: Request, user: str | None = None, state: str | None = None, since: str | None = None,
             until: str | None = None, name: str | None = None, offset: int = 0, limit: int = 50) -> HTMLResponse:
        if state and state.upper() not in STATES:
            raise HTTPException(400, f"state must be one of {', '.join(STATES)}, got {state[:40]!r}")
        if not 1 <= limit <= MAX_LIMIT:
            raise HTTPException(400, f"limit must be from 1 to {MAX_LIMIT}, got {limit}")
        context = {field: v for option, field in CONTEXT_FILTERS.items() if (v := request.query_params.get(option))}
        filters = Filters(context=context, user=user or None, state=state or None, since=_day(since, "since"),
                          until=_day(until, "until", end=True), name=name or None)
        client = self.client_of(request)
        index = self.index(client)
        viewer = self.viewer_of(request)
        from ..errors import TonyError

        cluster_error = None
        try:
            running = [s for s in client.list() if s.state not in FINAL_STATES]
        except TonyError as e:  # the cluster is away: the history is still there to show
            running, cluster_error = [], str(e)
        if filters.context or filters.name or filters.since or filters.until:
            running = [s for s in running if Filters(context=filters.context, name=filters.name,
                                                        since=filters.since, until=filters.until).admits(s.to_dict())]
        if filters.state:
            running = []
        if viewer is not None and not viewer.admin or filters.user:
            running = [s for s in running if (rec := client.record(s.application_id)) and self._may_see(viewer, rec)
                       and (not filters.user or rec.get("user") == filters.user)]
        page = index.page(filters, offset, limit, self._visible(viewer, index))
        base = str(request.url_for("jobs")).rstrip("/")
        keep = self.query_of(request)
        asked = {k: v for k, v in request.query_params.items() if k != "offset" and k not in keep and v}

        def at(off: int | None) -> str | None:
            return None if off is None else f"{base}/?{urlencode({**asked, **keep, 'offset': off})}"

        return render("jobs.html", title=self.title, running=running, cluster_error=cluster_error, page=page,
                      base=base, q=_q(keep),
                      keep=keep, asked=asked, states=STATES, filters=CONTEXT_FILTERS, viewer=viewer,
                      progress_text=progress_text, newer=at(page.previous_offset), older=at(page.next_offset))

    def job(self, request: Request, app_id: str) -> HTMLResponse:
        record, index = self._record(request, app_id)
        live = record["state"] not in FINAL_STATES
        advice = [] if live else advise(runs_of(index, record))
        base = str(request.url_for("jobs")).rstrip("/")
        keep = self.query_of(request)
        board = f"{base}/jobs/{app_id}/tensorboard/{_q(keep)}" if not live and record.get("tensorboard_logs") else None
        return render("job.html", r=record, live=live, charts=charts(record.get("series")), advice=advice,
                      progress=progress_text(record["progress"], metrics=8) if record.get("progress") else "",
                      base=base, q=_q(keep), board=board, viewer=self.viewer_of(request), notebooks=self.notebooks,
                      events=f"{base}/jobs/{app_id}/events{_q(keep)}" if not live else None)

    def events(self, request: Request, app_id: str) -> PlainTextResponse:
        _, index = self._record(request, app_id)
        where = index.where(app_id)
        if where is None:
            raise HTTPException(404, f"{app_id} is still running: its events are in its status and timeline")
        history, key = where
        text = ""
        with tempfile.TemporaryDirectory(prefix="tony-events-") as tmp:
            try:
                history.store.get(key.rsplit("/", 1)[0] + "/events.jsonl", Path(tmp) / "events")
                text = (Path(tmp) / "events").read_text()
            except OSError:
                text = ""
        return PlainTextResponse(text or f"# {app_id} kept no event log\n")

    def logs(self, request: Request, app_id: str, task: str | None = None) -> PlainTextResponse:
        """The job's log files (``task``'s, or every task's and the AM's), the end of each."""
        self._record(request, app_id)
        from ..errors import TonyError

        client = self.client_of(request)
        with tempfile.TemporaryDirectory(prefix="tony-logs-") as tmp:
            try:
                files = client.attach(app_id).logs(task, into=Path(tmp))
            except (TonyError, OSError, ValueError) as e:
                raise HTTPException(404, f"the logs of {app_id} cannot be read: {e}") from None
            parts = []
            for name, path in sorted(files.items()):
                try:
                    data = path.read_bytes()
                except OSError:
                    continue
                cut = len(data) > LOG_TAIL
                parts.append(f"==> {name} <==\n" + ("[... the first bytes are left out ...]\n" if cut else "")
                             + data[-LOG_TAIL:].decode(errors="replace"))
        if not parts:
            raise HTTPException(404, f"no log file of {app_id} is left (its directory was cleaned, or the cluster "
                                     "kept none)")
        return PlainTextResponse("\n".join(parts))

    def notebook(self, request: Request, app_id: str, task: str, name: str, raw: bool = False) -> Response:
        """A task's executed notebook kept with the record: as HTML (nbconvert's, in a sandbox: its
        outputs are the job's, never scripts of this site), or the file itself with ``raw``."""
        record, index = self._record(request, app_id)
        kept = next((n for n in record.get("notebooks") or () if (n["task"], n["name"]) == (task, name)), None)
        history = index.history_of(app_id)
        if kept is None or history is None:
            raise HTTPException(404, f"{app_id} kept no executed notebook {name} of {task}")
        with tempfile.TemporaryDirectory(prefix="tony-notebook-") as tmp:
            history.store.get(kept["key"], Path(tmp) / "nb")
            text = (Path(tmp) / "nb").read_text(errors="replace")
        if raw:
            return Response(text, media_type="application/x-ipynb+json",
                            headers={"Content-Disposition": f'attachment; filename="{name}"'})
        return HTMLResponse(notebook_html(text), headers={"Content-Security-Policy": _SANDBOX})

    async def tensorboard(self, request: Request, app_id: str, path: str = "") -> Response:
        from starlette.concurrency import run_in_threadpool

        body = await request.body() if request.method == "POST" else None
        return await run_in_threadpool(self._tensorboard, request, app_id, path, body)

    def _tensorboard(self, request: Request, app_id: str, path: str, body: bytes | None) -> Response:
        record, index = self._record(request, app_id)
        kept = record.get("tensorboard_logs")
        history = index.history_of(app_id)
        if record["state"] not in FINAL_STATES:
            if record.get("tensorboard_url"):
                return Response(status_code=307, headers={"Location": record["tensorboard_url"]})
            raise HTTPException(404, f"{app_id} is running and has no TensorBoard (yet)")
        if not kept or history is None:
            raise HTTPException(404, f"{app_id} kept no TensorBoard event files: its tasks wrote none to TONY_LOG_DIR")
        prefix = request.url.path[:len(request.url.path) - len(path)].rstrip("/")
        try:
            board = self.keeper.board(app_id, history.store, kept["key"], prefix)
        except RuntimeError as e:
            raise HTTPException(502, str(e)) from None
        return _pass_on(request, board.url.rstrip("/") + "/" + path, body)


#: A kept notebook's page runs nothing and reaches nothing: a sandbox of its own (no scripts, no
#: origin), its styles and images inline.
_SANDBOX = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def notebook_html(text: str) -> str:
    """An executed notebook as a page: nbconvert's rendering, else its cells and text outputs."""
    from html import escape

    try:
        import nbformat
        from nbconvert import HTMLExporter

        body, _ = HTMLExporter(template_name="lab").from_notebook_node(nbformat.reads(text, as_version=4))  # type: ignore[no-untyped-call]
        return str(body)
    except ImportError:
        nb = json.loads(text)
        parts = []
        for cell in nb.get("cells") or ():
            source = "".join(cell.get("source") or "")
            parts.append(f"<pre class='source'>{escape(source)}</pre>")
            for out in cell.get("outputs") or ():
                shown = out.get("text") or (out.get("data") or {}).get("text/plain") or out.get("traceback") or ""
                parts.append(f"<pre class='output'>{escape(''.join(shown))}</pre>")
        return "<!DOCTYPE html><meta charset='utf-8'>" + "".join(parts)


def _q(keep: dict[str, str]) -> str:
    return f"?{urlencode(keep)}" if keep else ""


_HOP = {"connection", "keep-alive", "transfer-encoding", "content-encoding", "content-length", "te", "trailer",
        "upgrade", "proxy-authenticate", "proxy-authorization", "host", "cookie", "authorization"}


def _pass_on(request: Request, url: str, body: bytes | None) -> Response:
    """Asks TensorBoard ``url`` what ``request`` asks (its query, a POST's ``body``), and answers
    with what it said."""
    import requests

    headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
    headers["Accept-Encoding"] = "identity"
    upstream = requests.request(request.method, url, params=list(request.query_params.multi_items()), data=body,
                                headers=headers, timeout=60, allow_redirects=False)
    out = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP}
    return Response(upstream.content, status_code=upstream.status_code, headers=out)
