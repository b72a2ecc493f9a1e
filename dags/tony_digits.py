"""Train a classifier of scikit-learn's handwritten digits under TonY, then score what it saved.

Three DAGs, the same three steps each (a checkpoint directory for the run, the
training job, the evaluation of the model it left there):

- ``tony_pytorch_ddp``: two workers run ``examples/pytorch_ddp/train.py`` as torchrun would (gloo on
  CPUs, NCCL on GPUs), each reading its share of the training set (Parquet files the first step
  writes) through ``tony_workflow.data``; set ``tony.worker.processes`` to run several ranks per
  container under torch's own agent.
- ``tony_pytorch_elastic``: the same script, unchanged, on three workers of which two are enough
  (``tony.worker.min-instances``): a lost worker is replaced while the other two train on.
- ``tony_jax``: three workers run ``examples/jax/train.py``, joined through ``jax.distributed`` at
  the address the runtime gives them (``JAX_COORDINATOR_ADDRESS``); the gradients are averaged
  across processes every step.

Both run on the embedded cluster with no configuration (the ``tony_default`` connection); point
``tony_default`` at a ``tony`` connection with backend ``yarn`` to run them on YARN.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_provider.hooks import TonyHook
from airflow_provider.operators import TonyOperator

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DATA_ROOT = Path(os.environ.get("TONY_WORKFLOW_DATA", Path.home() / "tony-workflow-data"))


def digits_dag(dag_id: str, example: str, task_params: str, tag: str, code: str | None = None,
               data: bool = False) -> DAG:
    """The DAG that trains ``examples/<example>`` (its ``<example>.yaml``) with the code of
    ``examples/<code>`` (default: the example's own) and runs that code's ``evaluate.py``. With
    ``data``, the first step also writes the training set as Parquet files, which the job reads as
    its ``train`` input (copied to HDFS first on YARN)."""
    source = EXAMPLES / (code or example)
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
             template_searchpath=[str(EXAMPLES)], tags=["tony", "example", tag], doc_md=__doc__) as dag:

        @task
        def checkpoints(run_id: str | None = None) -> str:
            """Where this run's training state goes: the evaluation reads the final model there.
            With ``data``, the run's training set is written beside it."""
            run = DATA_ROOT / dag_id / re.sub(r"[^A-Za-z0-9_.-]", "_", run_id or "manual")
            out = run / "checkpoints"
            out.mkdir(parents=True, exist_ok=True)
            if data:
                sys.path.insert(0, str(source))
                import digits
                digits.save_parquet(run / "train")
            return str(out)

        @task
        def training_set(checkpoint_dir: str) -> str:
            """Where the job reads the training set from: HDFS on YARN, where the nodes read it."""
            return TonyHook().stage_data(Path(checkpoint_dir).with_name("train"), f"{dag_id}-{Path(checkpoint_dir).parent.name}")

        location = checkpoints()
        conf = {"tony.checkpoint.location": "{{ ti.xcom_pull(task_ids='checkpoints') }}", "tony.am.memory": "512m"}
        if data:
            conf["tony.data.train.path"] = "{{ ti.xcom_pull(task_ids='training_set') }}"
        train = TonyOperator(
            task_id="train",
            job_spec=f"{example}/{example}.yaml",
            src_dir=str(source),
            task_params=task_params,
            conf=conf,
            poll_interval=2,
        )

        @task
        def evaluate(checkpoint_dir: str) -> dict:
            done = subprocess.run([sys.executable, str(source / "evaluate.py"), "--checkpoint-dir", checkpoint_dir],
                                  capture_output=True, text=True, cwd=source, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"evaluation failed: {done.stderr[-2000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            print("evaluation:", result)
            return result

        if data:
            location >> training_set(location) >> train
        location >> train >> evaluate(location)
    return dag


tony_pytorch_ddp = digits_dag("tony_pytorch_ddp", "pytorch_ddp", "--epochs 8 --save-every 10", "pytorch", data=True)
tony_pytorch_elastic = digits_dag("tony_pytorch_elastic", "pytorch_elastic",
                                  "--epochs 8 --save-every 10 --batch-size 96", "pytorch", code="pytorch_ddp",
                                  data=True)
tony_jax = digits_dag("tony_jax", "jax", "--steps 300 --save-every 20", "jax")
