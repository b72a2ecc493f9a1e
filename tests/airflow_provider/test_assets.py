"""The main example DAG and models as Airflow assets, end to end with Airflow's own parts:
``tony_mnist`` trains for real under ``dag.test()`` (its XComs, links and evaluation checked) and
publishes the model asset with the job's application, checkpoints and metrics; Airflow queues
``tony_mnist_deploy`` (scheduled on the asset) and a real ``airflow scheduler`` with the
LocalExecutor runs it, and it deploys that very model."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.airflow_provider.conftest import AIRFLOW_HOME, LINK_KEYS, load_dag, xcoms

pytestmark = pytest.mark.tf


def airflow(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, check=False)


def deploy_runs() -> list:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select
    with create_session() as session:
        runs = session.scalars(select(DagRun).where(DagRun.dag_id == "tony_mnist_deploy")).all()
        for r in runs:
            session.expunge(r)
        return runs


def test_a_trained_model_is_an_asset_whose_event_starts_the_deploy_dag(api_server, tony_home, tmp_path):
    from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    # The DAG processor's part: both DAGs in the metadata DB, the deploy DAG's schedule on the asset.
    done = airflow("dags", "reserialize")
    assert done.returncode == 0, done.stderr[-3000:]
    done = airflow("dags", "unpause", "tony_mnist_deploy")
    assert done.returncode == 0, done.stderr[-3000:]

    dr = load_dag("tony_mnist").test()
    assert dr.state == "success"
    x = xcoms("tony_mnist", dr.run_id, "train")
    app_id = x["application_id"]
    assert app_id.startswith("application_")
    assert x["status"]["state"] == "SUCCEEDED" and x["status"]["application_id"] == app_id
    assert x["tensorboard_url"].startswith("http://") and x["tracking_url"].startswith("http://")
    for key in LINK_KEYS:
        assert x[key].startswith("http://"), key
    assert x["_link_TonyTensorBoardLink"] == x["tensorboard_url"]
    evaluation = xcoms("tony_mnist", dr.run_id, "evaluate")["return_value"]
    assert evaluation["test_accuracy"] > 0.5 and evaluation["train_steps"] == 120
    with create_session() as session:
        asset = session.scalars(select(AssetModel).where(AssetModel.name == "tony_mnist_model")).one()
        events = session.scalars(select(AssetEvent).where(AssetEvent.asset_id == asset.id)).all()
        [extra] = [dict(e.extra) for e in events if (e.extra or {}).get("application_id") == app_id]
        queued = session.scalars(select(AssetDagRunQueue.target_dag_id)
                                 .where(AssetDagRunQueue.asset_id == asset.id)).all()
    assert extra["application_id"] == app_id and extra["final_state"] == "SUCCEEDED"
    assert extra["checkpoint_location"].startswith("file:///") and extra["checkpoint_location"].endswith("checkpoints")
    assert extra["metrics"] and extra["step"] and extra["context"]["dag_id"] == "tony_mnist"
    assert queued == ["tony_mnist_deploy"]

    log = open(tmp_path / "scheduler.log", "ab")  # noqa: SIM115 - the scheduler keeps it
    scheduler = subprocess.Popen([sys.executable, "-m", "airflow", "scheduler"], stdout=log, stderr=subprocess.STDOUT,
                                 env={**os.environ, "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                                      "TONY_HOME": str(tony_home)}, start_new_session=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            runs = deploy_runs()
            if runs and runs[0].state in ("success", "failed"):
                break
            time.sleep(2)
    finally:
        os.killpg(scheduler.pid, signal.SIGTERM)
        try:
            scheduler.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(scheduler.pid, signal.SIGKILL)
    [run] = deploy_runs()
    assert run.run_type == "asset_triggered" and run.state == "success", (tmp_path / "scheduler.log").read_text()[-4000:]
    manifest = xcoms("tony_mnist_deploy", run.run_id, "deploy")["return_value"]
    assert manifest["application_id"] == app_id and manifest["checkpoint_location"] == extra["checkpoint_location"]
    assert manifest["metrics"] == extra["metrics"] and manifest["files"] >= 1
    current = json.loads((AIRFLOW_HOME / "data" / "serving" / "tony_mnist" / "current.json").read_text())
    assert current == manifest
    served = AIRFLOW_HOME / "data" / "serving" / "tony_mnist" / app_id
    source = extra["checkpoint_location"].removeprefix("file://")
    assert sorted(p.name for p in served.rglob("*") if p.is_file()) == sorted(
        p.name for p in Path(source).rglob("*") if p.is_file())
