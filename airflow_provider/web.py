"""The TonY pages inside Airflow's UI: a FastAPI app the provider's plugin mounts at ``/tony``.

The pages are the history server's (:class:`tony_workflow.web.pages.JobPages`: the jobs list with
its filters and pages, one job's page, its event log, and the TensorBoard of a job that ended),
over the jobs of a ``tony`` connection's cluster (``?conn_id=``, default ``tony_default``), whose
links keep the connection. One more view is Airflow's own:

* ``/tony/ti/<dag>/<run>/<task>/<map index>`` is the task instance's TonY view (the plugin's
  external view): it finds the application the task submitted (its ``application_id`` XCom) and
  shows that job.

Airflow mounts a plugin's app as it is, without its own authentication, so every route here
depends on Airflow's: the user behind the request's JWT (the UI's cookie or a bearer token), and
for the task-instance view the auth manager's permission to read that DAG's task instances. The
data comes from :class:`~airflow_provider.hooks.TonyHook`, like the operator's, as the
connection's login reads it: who may see what is Airflow's to say, as for the rest of its UI.
"""
from __future__ import annotations

from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from tony_workflow.web.pages import JobPages, render

__all__ = ["create_app"]

DEFAULT_CONN = "tony_default"


def _conn_id(request: Request) -> str:
    return request.query_params.get("conn_id") or DEFAULT_CONN


def _client(request: Request):
    from airflow_provider.hooks import TonyHook

    return TonyHook(tony_conn_id=_conn_id(request)).get_conn()


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
    pages = JobPages(_client, lambda request: None, query_of=lambda request: {"conn_id": _conn_id(request)})
    app.include_router(pages.router())

    @app.get("/ti/{dag_id}/{run_id}/{task_id}/{map_index}", response_class=HTMLResponse,
             dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))])
    def task_instance(request: Request, dag_id: str, run_id: str, task_id: str, map_index: str,
                      conn_id: str = DEFAULT_CONN):
        try:
            # Airflow 3.3 fills MAP_INDEX in only for a mapped task instance; left as is, it means -1.
            index = -1 if map_index == "{MAP_INDEX}" else int(map_index)
        except ValueError:
            raise HTTPException(404, f"map index must be a number, got {map_index[:40]!r}") from None
        app_id = _application_of(dag_id, run_id, task_id, index)
        if not app_id:
            return render("no_job.html", dag_id=dag_id, run_id=run_id, task_id=task_id)
        url = str(request.url_for("job", app_id=app_id))
        return RedirectResponse(url + (f"?conn_id={quote(conn_id)}" if conn_id != DEFAULT_CONN else ""))

    return app
