"""The TonY pages inside Airflow's UI: a FastAPI app the provider's plugin mounts at ``/tony``.

* ``/tony/`` lists the jobs of a ``tony`` connection's cluster: those running now and, from the job
  history, those that ended.
* ``/tony/jobs/<application id>`` shows one: its tasks with their figures, the timeline of sessions
  and restarts, the progress, charts of the figures over time (SVG drawn here, no script), its
  TensorBoard, tracking and log links, and its configuration. A running job's record comes live from
  its ApplicationMaster, an ended one's from the history (:meth:`JobHandle.record`).
* ``/tony/ti/<dag>/<run>/<task>/<map index>`` is the task instance's TonY view (the plugin's
  external view): it finds the application the task submitted (its ``application_id`` XCom) and
  shows that job.

Airflow mounts a plugin's app as it is, without its own authentication, so every route here
depends on Airflow's: the user behind the request's JWT (the UI's cookie or a bearer token), and
for the task-instance view the auth manager's permission to read that DAG's task instances. The
data comes from :class:`~airflow_provider.hooks.TonyHook`, like the operator's.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from tony_workflow.advice import advise, runs_of
from tony_workflow.context import describe as describe_context
from tony_workflow.status import FINAL_STATES, check_application_id, progress_text

__all__ = ["chart", "create_app"]

_TEMPLATES = Environment(loader=FileSystemLoader(str(Path(__file__).parent / "templates")),
                         autoescape=select_autoescape(["html"]))
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _hook(conn_id: str):
    from airflow_provider.hooks import TonyHook

    return TonyHook(tony_conn_id=conn_id)


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else ""


def _render(name: str, **context: Any) -> HTMLResponse:
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
        segments, current = [], []
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


def _charts(series: dict | None) -> list[dict[str, Any]]:
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


def _application_of(dag_id: str, run_id: str, task_id: str, map_index: int) -> str | None:
    """The application a task instance submitted: its ``application_id`` XCom."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalars(select(XComModel).where(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.task_id == task_id,
            XComModel.map_index == map_index, XComModel.key == "application_id")).first()
        return XComModel.deserialize_value(row) if row is not None else None


def create_app() -> FastAPI:
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag, requires_authenticated

    app = FastAPI(title="TonY", dependencies=[Depends(requires_authenticated())])

    @app.get("/", response_class=HTMLResponse, name="jobs")
    def jobs(request: Request, conn_id: str = "tony_default", limit: int = 50) -> HTMLResponse:
        client = _hook(conn_id).get_conn()
        running = [s for s in client.list() if s.state not in FINAL_STATES]
        ended = client.history().list(limit=max(1, min(limit, 500)))
        return _render("jobs.html", running=running, ended=ended, conn_id=conn_id, progress_text=progress_text,
                       base=str(request.url_for("jobs")).rstrip("/"))

    @app.get("/jobs/{app_id}", response_class=HTMLResponse, name="job")
    def job(request: Request, app_id: str, conn_id: str = "tony_default") -> HTMLResponse:
        try:
            check_application_id(app_id)
        except ValueError as e:
            raise HTTPException(404, str(e)) from None
        record = _hook(conn_id).get_conn().record(app_id)
        if record is None:
            raise HTTPException(404, f"no TonY application {app_id} on this cluster or in its history")
        live = record["state"] not in FINAL_STATES
        # An ended job's advice for its next run, from it and the earlier runs of its task.
        advice = [] if live else advise(runs_of(_hook(conn_id).get_conn().history(), record))
        return _render("job.html", r=record, live=live, charts=_charts(record.get("series")), advice=advice,
                       progress=progress_text(record["progress"], metrics=8) if record.get("progress") else "",
                       base=str(request.url_for("jobs")).rstrip("/"), conn_id=conn_id)

    @app.get("/ti/{dag_id}/{run_id}/{task_id}/{map_index}", response_class=HTMLResponse,
             dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))])
    def task_instance(request: Request, dag_id: str, run_id: str, task_id: str, map_index: str,
                      conn_id: str = "tony_default"):
        try:
            # Airflow 3.3 fills MAP_INDEX in only for a mapped task instance; left as is, it means -1.
            index = -1 if map_index == "{MAP_INDEX}" else int(map_index)
        except ValueError:
            raise HTTPException(404, f"map index must be a number, got {map_index[:40]!r}") from None
        app_id = _application_of(dag_id, run_id, task_id, index)
        if not app_id:
            return _render("no_job.html", dag_id=dag_id, run_id=run_id, task_id=task_id)
        url = str(request.url_for("job", app_id=app_id))
        return RedirectResponse(url + (f"?conn_id={quote(conn_id)}" if conn_id != "tony_default" else ""))

    return app
