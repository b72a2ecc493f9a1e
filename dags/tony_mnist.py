"""Prepare data, train MNIST with MultiWorkerMirroredStrategy under TonY, evaluate the checkpoint.

The data step writes the training set as Parquet files; the job names them as its ``train`` input,
and each worker reads its own share through ``tony_workflow.data`` (on YARN the step copies them
to HDFS first, where the nodes read them).

The trained model is the asset ``tony_mnist_model``: each successful training publishes it, with
the application, the checkpoints' location and the final metrics, and ``tony_mnist_deploy``
(scheduled on the asset) deploys it.

Runs on the embedded cluster with no configuration (the ``tony_default`` connection); point
``tony_default`` at a ``tony`` connection with backend ``yarn`` to run the same DAG on YARN.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, Asset, task

from airflow_provider.hooks import TonyHook
from airflow_provider.operators import TonyOperator

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MNIST = EXAMPLES / "mnist_mwms"
DATA_ROOT = Path(os.environ.get("TONY_WORKFLOW_DATA", Path.home() / "tony-workflow-data"))
#: The trained model; tony_mnist_deploy is scheduled on it.
MNIST_MODEL = Asset(name="tony_mnist_model", uri="tony://models/tony_mnist")


def run_dir(run_id: str) -> Path:
    return DATA_ROOT / "tony_mnist" / re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)


with DAG(
    dag_id="tony_mnist",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    template_searchpath=[str(EXAMPLES)],
    tags=["tony", "example"],
    doc_md=__doc__,
) as dag:

    @task
    def prepare_data(run_id: str | None = None) -> dict:
        out = run_dir(run_id or "manual")
        sys.path.insert(0, str(MNIST))
        import synthetic_mnist
        train = synthetic_mnist.save_parquet(out / "train")
        name = f"tony_mnist-{out.name}"
        return {"train": TonyHook().stage_data(train, name), "checkpoints": str(out / "checkpoints")}

    data = prepare_data()

    train = TonyOperator(
        task_id="train",
        job_spec="mnist_mwms/mnist_mwms.yaml",
        src_dir=str(MNIST),
        task_params="--epochs 3",
        conf={
            # each worker reads its share of these Parquet files
            "tony.data.train.path": "{{ ti.xcom_pull(task_ids='prepare_data')['train'] }}",
            # the evaluate step reads the final checkpoint from here
            "tony.checkpoint.location": "{{ ti.xcom_pull(task_ids='prepare_data')['checkpoints'] }}",
            "tony.am.memory": "512m",
        },
        poll_interval=2,
        model_asset=MNIST_MODEL,
    )

    @task
    def evaluate(prepared: dict) -> dict:
        checkpoints = Path(prepared["checkpoints"])
        done = subprocess.run([sys.executable, str(MNIST / "evaluate.py"), "--checkpoint-dir", str(checkpoints)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"evaluation failed: {done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print("evaluation:", result)
        return result

    data >> train >> evaluate(data)
