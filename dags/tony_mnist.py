"""Prepare data, train MNIST with MultiWorkerMirroredStrategy under TonY, evaluate the checkpoint.

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
    def prepare_data(run_id: str | None = None) -> str:
        out = run_dir(run_id or "manual")
        out.mkdir(parents=True, exist_ok=True)
        sys.path.insert(0, str(MNIST))
        import synthetic_mnist
        return str(synthetic_mnist.save(out / "mnist.npz"))

    data = prepare_data()

    train = TonyOperator(
        task_id="train",
        job_spec="mnist_mwms/mnist_mwms.yaml",
        src_dir=str(MNIST),
        task_params="--epochs 3 --steps-per-epoch 40 --data {{ ti.xcom_pull(task_ids='prepare_data') }}",
        conf={
            # the evaluate step reads the final checkpoint from here
            "tony.checkpoint.location": "{{ ti.xcom_pull(task_ids='prepare_data') | replace('mnist.npz', 'checkpoints') }}",
            "tony.am.memory": "512m",
        },
        poll_interval=2,
        model_asset=MNIST_MODEL,
    )

    @task
    def evaluate(data_path: str) -> dict:
        checkpoints = Path(data_path).with_name("checkpoints")
        done = subprocess.run([sys.executable, str(MNIST / "evaluate.py"), "--checkpoint-dir", str(checkpoints)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"evaluation failed: {done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print("evaluation:", result)
        return result

    data >> train >> evaluate(data)
