"""Train the digits classifier with PyTorch DDP under TonY, then score the saved model.

Two workers run ``examples/pytorch_ddp/train.py`` as torchrun would (gloo on CPUs, NCCL on
GPUs); set ``tony.worker.processes`` to run several ranks per container under torch's own agent.
Runs on the embedded cluster with no configuration (the ``tony_default`` connection); point
``tony_default`` at a ``tony`` connection with backend ``yarn`` to run it on YARN.
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

from airflow_provider.operators import TonyOperator

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DDP = EXAMPLES / "pytorch_ddp"
DATA_ROOT = Path(os.environ.get("TONY_WORKFLOW_DATA", Path.home() / "tony-workflow-data"))

with DAG(
    dag_id="tony_pytorch_ddp",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    template_searchpath=[str(EXAMPLES)],
    tags=["tony", "example", "pytorch"],
    doc_md=__doc__,
) as dag:

    @task
    def checkpoints(run_id: str | None = None) -> str:
        """Where this run's training state goes: the evaluation reads the final model there."""
        out = DATA_ROOT / "tony_pytorch_ddp" / re.sub(r"[^A-Za-z0-9_.-]", "_", run_id or "manual") / "checkpoints"
        out.mkdir(parents=True, exist_ok=True)
        return str(out)

    location = checkpoints()

    train = TonyOperator(
        task_id="train",
        job_spec="pytorch_ddp/pytorch_ddp.yaml",
        src_dir=str(DDP),
        task_params="--epochs 8 --save-every 10",
        conf={"tony.checkpoint.location": "{{ ti.xcom_pull(task_ids='checkpoints') }}", "tony.am.memory": "512m"},
        poll_interval=2,
    )

    @task
    def evaluate(checkpoint_dir: str) -> dict:
        done = subprocess.run([sys.executable, str(DDP / "evaluate.py"), "--checkpoint-dir", checkpoint_dir],
                              capture_output=True, text=True, cwd=DDP, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"evaluation failed: {done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print("evaluation:", result)
        return result

    location >> train >> evaluate(location)
