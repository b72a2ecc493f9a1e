"""Asynchronous ParameterServerStrategy training (chief, workers, ps) under TonY.

Workers are relaunched alone when they fail (restart policy ``task``), so the chief keeps
training while a lost worker comes back.
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG

from airflow_provider.operators import TonyOperator

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

with DAG(
    dag_id="tony_ps_strategy",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    template_searchpath=[str(EXAMPLES)],
    tags=["tony", "example"],
    doc_md=__doc__,
) as dag:
    TonyOperator(
        task_id="train",
        job_spec="ps_strategy/ps_strategy.yaml",
        src_dir=str(EXAMPLES / "ps_strategy"),
        conf={"tony.am.memory": "512m"},
        poll_interval=2,
    )
