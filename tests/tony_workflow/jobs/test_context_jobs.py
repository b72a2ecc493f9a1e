"""Where a job came from, on the embedded cluster with real processes: the tasks see the context,
the status and the history record carry it, ``tony list`` / ``tony history`` filter on it beside
a neighbour from another DAG, and the task run's still-running application is found by it (and
no longer once it has ended)."""
from __future__ import annotations

import json

import pytest

from tests.conftest import app_processes, run_tony, wait_for
from tony_workflow.client import TonyClient, load_job

pytestmark = pytest.mark.job


KEY, SERVER = b"the-deployments-key-0123", "http://airflow.example"


def context(dag: str, run: str = "manual__2026-11-25T10:00:00+00:00", try_number: int = 1) -> dict:
    return {"tony.context.dag-id": dag, "tony.context.dag-run-id": run, "tony.context.task-id": "train",
            "tony.context.try-number": str(try_number), "tony.context.map-index": "-1",
            "tony.context.url": f"http://airflow.example/dags/{dag}/runs/{run}/tasks/train"}


def job(name: str, conf: dict, seconds: int) -> dict:
    show = "env | grep -E '^(TONY_CONTEXT|AIRFLOW_CTX)_' | sort"
    return {"name": name, "framework": "standalone", "am": {"memory": "128m"},
            "tasks": {"worker": {"instances": 1, "memory": "128m", "command": f"{show}; sleep {seconds}"}},
            "conf": {"tony.task.tensorboard.enabled": "false", **conf}}


def test_the_context_reaches_the_tasks_the_status_the_history_and_the_filters(tony_home):
    client = TonyClient("local")
    ours = client.submit(load_job(job("nightly", context("Nightly_Train"), 6)).with_identity(KEY, SERVER))
    neighbour = client.submit(load_job(job("other", context("other_dag"), 6)).with_identity(KEY, SERVER))
    hand = client.submit(load_job(job("by-hand", {}, 1)))
    # A stranger's job whose spec sets the same task run's keys by hand, submitted after ours.
    forged = client.submit(load_job(job("forged", context("Nightly_Train"), 6)))
    mine = load_job(job("nightly", context("Nightly_Train", try_number=2), 0)).with_identity(KEY, SERVER)

    # While it runs, a later try of the same task run finds it, not the newer forged one; another
    # run, another deployment (another key) or a spec without a front end's identity finds nothing.
    wait_for(lambda: ours.status().state == "RUNNING", timeout=120)
    assert client.find_running(mine) == ours.app_id
    assert client.find_running(load_job(job("x", context("Nightly_Train", run="manual__2"), 0))
                               .with_identity(KEY, SERVER)) is None
    assert client.find_running(mine.with_identity(b"another-deployments-key", SERVER)) is None
    assert client.find_running(load_job(job("nightly", context("Nightly_Train", try_number=2), 0))) is None
    assert forged.status().context == ours.status().context  # shown with the context it claims
    assert [s.application_id for s in client.list(context={"dag_id": "nightly_train"})] == [ours.app_id, forged.app_id]
    assert [s.application_id for s in client.list(tags=["airflow.dag_id:other_dag"])] == [neighbour.app_id]
    listed = run_tony("list", "--dag", "NIGHTLY_TRAIN", "--task", "train")
    assert listed.returncode == 0 and ours.app_id in listed.stdout and neighbour.app_id not in listed.stdout
    assert "Airflow DAG Nightly_Train, run manual__2026-11-25T10:00:00+00:00, task train, try 1" in listed.stdout

    for h in (ours, neighbour, hand, forged):
        assert h.wait(poll_interval=0.5, timeout=180).state == "SUCCEEDED"
    assert client.find_running(mine) is None  # ended: a later try submits afresh

    st = ours.status()
    assert st.context["dag_id"] == "Nightly_Train" and st.context["source"] == "airflow"
    assert hand.status().context is None
    out = ours.logs("worker:0")["worker:0/stdout"].read_text()
    assert "TONY_CONTEXT_DAG_ID=Nightly_Train" in out and "AIRFLOW_CTX_DAG_RUN_ID=manual__2026-11-25T10:00:00+00:00" in out
    assert "AIRFLOW_CTX_TRY_NUMBER=1" in out and "TONY_CONTEXT_URL=http://airflow.example/dags/Nightly_Train" in out
    assert "TONY_CONTEXT" not in hand.logs("worker:0")["worker:0/stdout"].read_text()

    shown = run_tony("status", ours.app_id)
    assert "from: Airflow DAG Nightly_Train" in shown.stdout and "http://airflow.example/dags/" in shown.stdout
    record = wait_for(lambda: client.history().get(ours.app_id), timeout=60)
    assert record["context"] == st.context and "airflow.task_id:train" in record["tags"]
    history = run_tony("history", "--dag", "nightly_train", "--json")
    assert sorted(r["application_id"] for r in json.loads(history.stdout)) == [ours.app_id, forged.app_id]
    tagged = run_tony("history", "--tag", "airflow.dag_id:other_dag")
    assert neighbour.app_id in tagged.stdout and ours.app_id not in tagged.stdout
    one = run_tony("history", ours.app_id)
    assert "from: Airflow DAG Nightly_Train" in one.stdout
    for h in (ours, neighbour, hand, forged):
        wait_for(lambda h=h: not app_processes(h.app_id), timeout=60)
