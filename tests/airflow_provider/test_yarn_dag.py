"""The example DAG on the Hadoop mini cluster, through a ``tony`` connection with backend ``yarn``."""
from __future__ import annotations

import json
import os

import pytest

from tests.airflow_provider.conftest import load_dag, xcoms

pytestmark = [pytest.mark.yarn, pytest.mark.tf]


def test_mnist_dag_runs_on_yarn_through_a_tony_connection(airflow_db, hadoop_cluster, monkeypatch):
    from tony_workflow import minicluster
    cluster = hadoop_cluster
    for key, value in minicluster.client_env(cluster).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW_CONN_TONY_DEFAULT", json.dumps({
        "conn_type": "tony", "extra": {"backend": "yarn", "hadoop_conf_dir": cluster["hadoop_conf_dir"]}}))
    dr = load_dag("tony_mnist").test()
    assert dr.state == "success"
    x = xcoms("tony_mnist", dr.run_id, "train")
    assert x["status"]["backend"] == "yarn" and x["status"]["state"] == "SUCCEEDED"
    assert "/proxy/" in x["tensorboard_url"] and "/proxy/" in x["tracking_url"]
    assert x["_link_TonyTensorBoardLink"] == x["tensorboard_url"]
    assert xcoms("tony_mnist", dr.run_id, "evaluate")["return_value"]["train_steps"] == 120
    assert os.environ["HADOOP_CONF_DIR"] == cluster["hadoop_conf_dir"]
