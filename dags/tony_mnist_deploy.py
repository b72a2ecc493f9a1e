"""Deploy each MNIST model ``tony_mnist`` trains: scheduled on the model asset it publishes.

The asset event's extra names the model: the application that trained it, where its checkpoints
are (``file://`` on the embedded cluster, ``hdfs://`` on YARN) and its final metrics. Deploying
copies those checkpoints into ``$TONY_WORKFLOW_DATA/serving/tony_mnist/<application id>`` and
points ``current.json`` there, with the metrics and where the model came from, so that what
serves predictions always knows which training run it serves.
"""
from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, Asset, task

DATA_ROOT = Path(os.environ.get("TONY_WORKFLOW_DATA", Path.home() / "tony-workflow-data"))
#: The asset tony_mnist's training publishes (the same name and URI as there).
MNIST_MODEL = Asset(name="tony_mnist_model", uri="tony://models/tony_mnist")

with DAG(
    dag_id="tony_mnist_deploy",
    schedule=[MNIST_MODEL],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["tony", "example"],
    doc_md=__doc__,
) as dag:

    @task
    def deploy(triggering_asset_events=None) -> dict:
        from tony_workflow.storage import open_storage

        events = list((triggering_asset_events or {}).get(MNIST_MODEL, []))
        if not events:
            raise RuntimeError("started without a tony_mnist_model event: nothing to deploy")
        # The newest, when several trainings ended since the last deploy (the run's events come in
        # no promised order).
        model = max(events, key=lambda e: e.timestamp).extra
        source = open_storage(model["checkpoint_location"])
        target = DATA_ROOT / "serving" / "tony_mnist" / model["application_id"]
        files = source.list("")
        if not files:
            raise RuntimeError(f"no checkpoint under {model['checkpoint_location']}")
        for key in files:
            (target / key).parent.mkdir(parents=True, exist_ok=True)
            source.get(key, target / key)
        manifest = {"model": str(target), "application_id": model["application_id"],
                    "checkpoint_location": model["checkpoint_location"], "metrics": model.get("metrics") or {},
                    "step": model.get("step"), "trained_by": model.get("context") or {}, "files": len(files)}
        current = DATA_ROOT / "serving" / "tony_mnist" / "current.json"
        current.write_text(json.dumps(manifest, indent=1))
        print("deployed:", json.dumps(manifest))
        return manifest

    deploy()
