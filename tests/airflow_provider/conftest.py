"""A throwaway Airflow home with a real SQLite metadata DB, set up before Airflow is imported."""
from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="tony-airflow-home-"))
DAGS = AIRFLOW_HOME / "dags"
DAGS.mkdir()
# The shipped DAGs (linked, so they still find examples/ next to them) plus DAGs tests write:
# dag.test() only runs DAGs it can parse from the DAGs folder.
for _dag_file in (REPO / "dags").glob("*.py"):
    (DAGS / _dag_file.name).symlink_to(_dag_file)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


API_PORT = _free_port()
API_BASE = f"http://127.0.0.1:{API_PORT}"

# Airflow reads its configuration when first imported, so this must happen at collection time.
os.environ.update({
    "AIRFLOW_HOME": str(AIRFLOW_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME}/airflow.db",
    "TONY_WORKFLOW_DATA": str(AIRFLOW_HOME / "data"),
    # Workers started by an executor reach the api-server below, with tokens it can verify.
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{API_BASE}/execution/",
    "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
    "AIRFLOW__API__BASE_URL": API_BASE,
})


@pytest.fixture(scope="session")
def airflow_db():
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True,
                   timeout=600)
    return AIRFLOW_HOME


def write_dag(dag_id: str, operator_kwargs: dict, retry_delay_s: float | None = None) -> Path:
    """A one-task DAG file running TonyOperator with ``operator_kwargs`` (Python literals)."""
    delay = f", retry_delay=timedelta(seconds={retry_delay_s})" if retry_delay_s is not None else ""
    path = DAGS / f"{dag_id}.py"
    path.write_text(
        "from datetime import datetime, timedelta\n"
        "from airflow.sdk import DAG\n"
        "from airflow_provider.operators import TonyOperator\n"
        f"with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:\n"
        f"    TonyOperator(task_id='train'{delay}, **{operator_kwargs!r})\n")
    return path


class ApiServer:
    """A real ``airflow api-server`` on this metadata DB (UI, public API and execution API), with
    ``env`` over this process's environment (e.g. the TONY_HOME its TonY pages read)."""

    def __init__(self, port: int, env: dict | None = None, log_name: str = "api-server.log"):
        self.base = f"http://127.0.0.1:{port}"
        log = open(AIRFLOW_HOME / log_name, "ab")  # noqa: SIM115 - the api-server process keeps it open
        self.proc = subprocess.Popen([sys.executable, "-m", "airflow", "api-server", "--port", str(port)],
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, **(env or {})})
        deadline = time.time() + 180
        while True:
            try:
                if requests.get(self.base + "/api/v2/version", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert self.proc.poll() is None and time.time() < deadline, "api-server did not start"
            time.sleep(1)

    def stop(self) -> None:
        os.killpg(self.proc.pid, 15)
        self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def api_server(airflow_db):
    server = ApiServer(API_PORT)
    yield server.base
    server.stop()


def load_dag(name: str, dag_id: str | None = None):
    """Imports a DAG file from the DAGs folder the way the DAG processor would; its ``dag``, or the
    DAG ``dag_id`` when the file defines several."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"dag_{name}", DAGS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag if dag_id is None else next(d for d in vars(module).values()
                                                  if getattr(d, "dag_id", None) == dag_id and hasattr(d, "test"))


#: The XComs the operator pushes for its extra links (TensorBoard, tracking page, logs).
LINK_KEYS = ("_link_TonyTensorBoardLink", "_link_TonyTrackingLink", "_link_TonyLogsLink")


def xcoms(dag_id: str, run_id: str, task_id: str) -> dict:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select
    with create_session() as session:
        rows = session.scalars(select(XComModel).where(XComModel.dag_id == dag_id, XComModel.run_id == run_id,
                                                       XComModel.task_id == task_id)).all()
        return {r.key: XComModel.deserialize_value(r) for r in rows}


def task_instance(dag_id: str, run_id: str, task_id: str):
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select
    with create_session() as session:
        ti = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id,
                                                        TaskInstance.task_id == task_id)).one()
        session.expunge(ti)
        return ti
