"""OpenLineage from TonyOperator, through the real ``apache-airflow-providers-openlineage``: a DAG
runs with ``dag.test()`` in a process of its own whose OpenLineage configuration writes events
to a file (the file transport), and the test reads the events the provider emitted: START and
COMPLETE (or FAIL) for the task, with the job's facet, its run facet, its inputs and its outputs.

The unit part checks the naming of datasets, which decides whether lineage joins across tools."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.airflow_provider.conftest import DAGS
from tony_workflow.client import TonyClient

pytest.importorskip("airflow.providers.openlineage", reason="installed with the airflow extra (make test)")

RUN_DAG = textwrap.dedent("""
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("dag_under_test", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dr = module.dag.test()
    print("DAGRUN", dr.state, dr.run_id, flush=True)
""")

DAG = textwrap.dedent("""
    from datetime import datetime
    from airflow.sdk import DAG, Asset
    from airflow_provider.operators import TonyOperator

    JOB = {{"name": "lineage", "framework": "tensorflow", "am": {{"memory": "128m"}},
            "tasks": {{"worker": {{"instances": 2, "memory": "128m", "vcores": 1, "command": {command!r}}}}},
            "conf": {{"tony.task.tensorboard.enabled": "false", "tony.lineage.inputs": "/data/raw/digits.csv",
                      "tony.lineage.outputs": "hdfs://nn.example:8020/exports/digits"}}}}

    with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        TonyOperator(task_id="train", job_spec=JOB, poll_interval=0.5, tensorboard_wait=0,
                     inlets=[Asset("s3://features/digits/v3")])
""")


def run_with_lineage(tmp_path, tony_home, dag_id: str, command: str) -> tuple[str, list[dict]]:
    dag = DAGS / f"{dag_id}.py"
    dag.write_text(DAG.format(dag_id=dag_id, command=command))
    events = tmp_path / "lineage.jsonl"
    env = {**os.environ, "TONY_HOME": str(tony_home), "AIRFLOW__OPENLINEAGE__NAMESPACE": "tony-tests",
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events),
                                                          "append": True})}
    r = subprocess.run([sys.executable, "-c", RUN_DAG, str(dag)], env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    out = r.stdout + r.stderr
    assert events.exists(), out[-4000:]
    emitted = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    return out, [e for e in emitted if e.get("job", {}).get("name") == f"{dag_id}.train"]


def names(datasets: list[dict]) -> set[tuple[str, str]]:
    return {(d["namespace"], d["name"]) for d in datasets}


@pytest.mark.job
def test_a_training_task_reports_its_job_inputs_outputs_and_run(airflow_db, tony_home, tmp_path):
    out, events = run_with_lineage(tmp_path, tony_home, "tony_lineage", "sleep 1")
    assert "DAGRUN success" in out, out[-4000:]
    by_type = {e["eventType"]: e for e in events}
    assert set(by_type) == {"START", "COMPLETE"}, [e["eventType"] for e in events]
    start, done = by_type["START"], by_type["COMPLETE"]
    assert start["job"]["namespace"] == "tony-tests" and start["run"]["runId"] == done["run"]["runId"]

    job = done["job"]["facets"]["tony"]
    assert job["framework"] == "tensorflow" and job["backend"] == "local" and job.get("queue") is None
    assert job["tasks"] == {"worker": {"instances": 2, "memoryMb": 128, "vcores": 1, "gpus": 0}}
    assert job["am"]["memoryMb"] == 128 and job["_schemaURL"].endswith("TonyJobFacet:1-0-0")
    assert start["job"]["facets"]["tony"]["tasks"] == job["tasks"]

    [app] = TonyClient("local").list()
    run = done["run"]["facets"]["tony"]
    assert run["applicationId"] == app.application_id and run["finalState"] == "SUCCEEDED"
    assert run["sessions"] == 1 and run["retries"] == 0 and run["amAttempts"] == 1
    assert run["trackingUrl"].startswith("http://")
    assert run["checkpointLocation"] == app.checkpoint_location and app.checkpoint_location.startswith("file:///")
    checkpoint = app.checkpoint_location.removeprefix("file://")

    wanted_in = {("file", "/data/raw/digits.csv"), ("s3://features", "digits/v3")}
    assert wanted_in <= names(start["inputs"]) and wanted_in <= names(done["inputs"])
    assert names(done["outputs"]) >= {("file", checkpoint), ("hdfs://nn.example:8020", "/exports/digits")}
    # At the start the checkpoints' place is not known yet (it is per application): only the declared ones.
    assert ("file", checkpoint) not in names(start["outputs"])


@pytest.mark.job
def test_a_failed_training_reports_why(airflow_db, tony_home, tmp_path):
    out, events = run_with_lineage(tmp_path, tony_home, "tony_lineage_fails", "exit 3")
    assert "DAGRUN failed" in out, out[-4000:]
    [fail] = [e for e in events if e["eventType"] == "FAIL"]
    run = fail["run"]["facets"]
    assert run["tony"]["finalState"] == "FAILED" and run["tony"]["applicationId"].startswith("application_")
    assert "worker" in run["errorMessage"]["message"] or "exit" in run["errorMessage"]["message"]


def test_datasets_are_named_as_openlineage_names_them():
    from tony_workflow.lineage import dataset

    assert (dataset("hdfs://nn:8020/data/x").namespace, dataset("hdfs://nn:8020/data/x").name) == ("hdfs://nn:8020",
                                                                                                 "/data/x")
    assert (dataset("file:///models/m").namespace, dataset("file:///models/m").name) == ("file", "/models/m")
    assert (dataset("/models/m").namespace, dataset("/models/m").name) == ("file", "/models/m")
    assert (dataset("s3://bucket/a/b").namespace, dataset("s3://bucket/a/b").name) == ("s3://bucket", "a/b")
    assert (dataset("gs://bucket/a").namespace, dataset("gs://bucket/a").name) == ("gs://bucket", "a")
    assert dataset("file://host/p").namespace == "file://host"


def test_a_jobs_declared_inputs_are_its_input_datasets_with_their_schema(tony_home, tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tony_workflow.client import TonyClient, load_job
    from tony_workflow.lineage import datasets
    data = tmp_path / "clicks"
    data.mkdir()
    pq.write_table(pa.table({"features": np.ones((4, 3)).tolist(), "label": np.arange(4), "day": ["d"] * 4}),
                   data / "part-0.parquet")
    spec = load_job({"name": "j", "executes": "t.py", "framework": "standalone", "tasks": {"worker": {"instances": 1}},
                     "data": {"train": {"path": str(data), "columns": ["features", "label"]}}})
    submitted = TonyClient("local").preflight(spec)  # what a submission sends: the inputs planned
    inputs, _ = datasets(submitted, None, qualify=lambda p: p)
    [train] = [d for d in inputs if d.name == str(data)]
    assert train.namespace == "file"
    assert [(f.name, f.type) for f in train.facets["schema"].fields] == [("features", "list<element: double>"),
                                                                        ("label", "int64")]
    before, _ = datasets(spec, None, qualify=lambda p: p)  # unplanned: the dataset, no schema yet
    assert [d.name for d in before] == [str(data)] and "schema" not in before[0].facets
