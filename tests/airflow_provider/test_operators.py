"""TonyOperator under a real Airflow 3 (SQLite metadata DB, dag.test()) on the embedded cluster. The
main example DAG, tony_mnist, trains once for the suite, in test_assets.py, which checks its XComs and
links as well as the model asset it publishes."""
from __future__ import annotations

import re
from datetime import UTC

import pytest
import yaml

from tests.airflow_provider.conftest import LINK_KEYS, load_dag, task_instance, write_dag, xcoms

pytestmark = pytest.mark.tf


def test_ps_strategy_dag_succeeds(airflow_db, tony_home):
    dag = load_dag("tony_ps_strategy")
    dr = dag.test()
    assert dr.state == "success"
    x = xcoms("tony_ps_strategy", dr.run_id, "train")
    assert x["status"]["state"] == "SUCCEEDED"
    assert {f"{t['type']}:{t['index']}" for t in x["status"]["tasks"]} == {"chief:0", "worker:0", "worker:1", "ps:0"}
    assert all(x[key] for key in LINK_KEYS)
    # The example as shipped trained to its end (the one real run of it with its own parameters;
    # test_tf_examples runs it with a worker killed): the coordinator said so, and its steps are
    # the job's progress.
    progress = x["status"]["progress"]
    assert progress["task"] == "chief:0" and progress["step"] == progress["total"] > 0, progress
    app_dir = tony_home / "local" / "apps" / x["status"]["application_id"]
    said = "".join(p.read_text(errors="replace") for p in app_dir.glob("containers/*/stdout"))
    assert re.search(r"\[ps\] session=0 done steps=\d+", said), said[-3000:]


def _one_task_dag(dag_id, **operator_kwargs):
    write_dag(dag_id, {"poll_interval": 0.5, "tensorboard_wait": 0, **operator_kwargs})
    return load_dag(dag_id)


SMALL_JOB = {"name": "af", "am": {"memory": "128m"}, "tasks": {"worker": {"instances": 2, "memory": "256m"}},
             "conf": {"tony.task.tensorboard.enabled": "false"}}


def test_deferrable_mode_succeeds_with_the_trigger_inline(airflow_db, tony_home):
    dag = _one_task_dag("tony_deferrable", job_spec={**SMALL_JOB, "command": "sleep 2"}, deferrable=True)
    dr = dag.test()
    assert dr.state == "success"
    x = xcoms("tony_deferrable", dr.run_id, "train")
    assert x["status"]["state"] == "SUCCEEDED"
    assert x["_link_TonyTrackingLink"] == x["tracking_url"]


def test_a_spec_file_given_by_its_absolute_path_is_found_and_rendered(airflow_db, tony_home, tmp_path):
    # Outside the DAG's folder and any template_searchpath, as a newcomer first writes it.
    spec = tmp_path / "jobs" / "train.yaml"
    spec.parent.mkdir()
    spec.write_text(yaml.safe_dump({**SMALL_JOB, "name": "abs-{{ dag.dag_id }}", "command": "true"}))
    dag = _one_task_dag("tony_abs_spec", job_spec=str(spec))
    dr = dag.test()
    assert dr.state == "success"
    x = xcoms("tony_abs_spec", dr.run_id, "train")
    assert x["status"]["state"] == "SUCCEEDED" and x["status"]["name"] == "abs-tony_abs_spec"


def test_failing_training_fails_the_task_with_its_traceback_in_the_error(airflow_db, tony_home, capfd):
    # worker:1 fails with a Python traceback on its stderr, after a line on its stdout; worker:0,
    # the one followed, prints its own line into the task's log.
    command = ('echo "step 1 of $JOB_NAME:$TASK_INDEX"; [ "$TASK_INDEX" = 1 ] || exec sleep 30; '
               'python -c "import math; raise FloatingPointError(\'loss went NaN at step %d\' % 7)"')
    job = {**SMALL_JOB, "command": command, "conf": {**SMALL_JOB["conf"],
                                                     "tony.application.fail-on-worker-failure-enabled": "true"}}
    dag = _one_task_dag("tony_failing", job_spec=job)
    dr = dag.test()
    assert dr.state == "failed"
    out = capfd.readouterr()
    log = out.out + out.err
    assert "[worker:0] step 1 of worker:0" in log and "XCom not found" not in log
    # The error names the job's end, then what the failed task printed last, stdout and stderr,
    # its traceback whole, then the link to its log.
    error = log[log.index("TonY application application_"):]
    stdout = error.index("--- worker:1 stdout (FAILED, exit code 1), its last 1 line:\nstep 1 of worker:1")
    stderr = error.index("--- worker:1 stderr (FAILED, exit code 1), its last ")
    traceback = error.index("Traceback (most recent call last):", stderr)
    cause = error.index("FloatingPointError: loss went NaN at step 7", traceback)
    assert stdout < stderr < traceback < cause < error.index("worker:1 FAILED exit=1 log=")
    x = xcoms("tony_failing", dr.run_id, "train")
    assert x["status"]["state"] == "FAILED"


def test_a_notebook_runs_as_the_tasks_step_with_the_operators_parameters(airflow_db, tony_home, tmp_path, capfd):
    # The operator runs a notebook unchanged: its parameters from the DAG (templated like any
    # task_params), its cells' output in the task's log, a raising cell's traceback in the error.
    from tests.tony_workflow.task.test_notebook import notebook
    src = tmp_path / "src"
    src.mkdir()
    notebook(src / "train.ipynb", ("import os\nrun = 'none'\nfail = False", ["parameters"]),
             ("print(f\"{os.environ['TONY_TASK_ID']} trained for run {run}\")", []),
             ("if fail:\n    raise FloatingPointError('loss went NaN in the notebook')", []))
    job = {**SMALL_JOB, "executes": "train.ipynb", "src_dir": str(src)}
    dag = _one_task_dag("tony_notebook", job_spec=job, task_params="--run {{ run_id }}")
    dr = dag.test()
    assert dr.state == "success"
    log = "".join(capfd.readouterr())
    assert f"[worker:0] worker:0 trained for run {dr.run_id}" in log, log[-3000:]
    dag = _one_task_dag("tony_notebook_fails", job_spec=job, task_params="--fail True")
    dr = dag.test()
    assert dr.state == "failed"
    log = "".join(capfd.readouterr())
    error = log[log.index("TonY application application_"):]
    assert "FloatingPointError" in error and "loss went NaN in the notebook" in error, error[-3000:]


def test_bad_spec_fails_at_once_names_the_key_and_submits_nothing(airflow_db, tony_home, capfd):
    job = {**SMALL_JOB, "command": "true", "tasks": {"worker": {"instances": "two"}}}
    dag = _one_task_dag("tony_bad_spec", job_spec=job, retries=3)
    dr = dag.test()
    assert dr.state == "failed"
    ti = task_instance("tony_bad_spec", dr.run_id, "train")
    assert ti.state == "failed" and ti.try_number == 1  # not retried
    out = capfd.readouterr()
    assert "tasks.worker.instances" in out.out + out.err
    # The cause is the last word: no "XCom not found" for the links of a job that never was.
    assert "XCom not found" not in out.out + out.err, out.out + out.err
    assert not list((tony_home / "local" / "apps").glob("application_*")) if (tony_home / "local").exists() else True


@pytest.mark.frameworks
@pytest.mark.parametrize("dag_id, world", [("tony_pytorch_ddp", 2), ("tony_jax", 3)])
def test_the_pytorch_and_jax_example_dags_train_and_evaluate(airflow_db, tony_home, dag_id, world):
    dr = load_dag("tony_digits", dag_id).test()
    assert dr.state == "success"
    x = xcoms(dag_id, dr.run_id, "train")
    assert x["status"]["state"] == "SUCCEEDED"
    assert len(x["status"]["tasks"]) == world
    evaluation = xcoms(dag_id, dr.run_id, "evaluate")["return_value"]
    assert evaluation["accuracy"] >= 0.85 and evaluation["examples"] == 360, evaluation
    assert evaluation["trained_steps"] == (176 if dag_id == "tony_pytorch_ddp" else 300)
    if dag_id == "tony_pytorch_ddp":
        # Its TensorBoard summaries are written without loading TensorFlow: none of its lines in the log.
        from tony_workflow.client import TonyClient
        logs = TonyClient("local").attach(x["status"]["application_id"]).logs()
        text = "".join(p.read_text(errors="replace") for p in logs.values() if p.exists())
        assert "[ddp] session=0 rank=0" in text and "oneDNN" not in text and "cudart_stub" not in text, text[-3000:]


def test_a_job_carrying_this_task_runs_context_but_not_submitted_by_it_is_not_followed(airflow_db, tony_home, capfd):
    # Run ids are predictable: a stranger submits by hand a job whose spec sets the coming run's
    # tony.context.* keys, and another deployment (another key) runs the same DAG run; both still
    # run when this deployment's run starts. Its task submits and trains its own job.
    from datetime import datetime

    from airflow_provider.hooks import TonyHook
    from tony_workflow.client import TonyClient, load_job

    logical = datetime(2026, 3, 1, tzinfo=UTC)
    run_id = f"manual__{logical.isoformat()}"
    keys = {"tony.context.source": "airflow", "tony.context.dag-id": "tony_forged", "tony.context.dag-run-id": run_id,
            "tony.context.task-id": "train", "tony.context.map-index": "-1", "tony.context.try-number": "1"}
    client = TonyClient("local")
    theirs = {**SMALL_JOB, "command": "sleep 60", "tasks": {"worker": {"instances": 1, "memory": "128m"}}}
    strangers = [client.submit(load_job(theirs, conf=keys)),
                 client.submit(load_job(theirs, conf=keys)
                               .with_identity(b"the-staging-deployments-key", TonyHook().deployment()[1]))]
    try:
        dag = _one_task_dag("tony_forged", job_spec={**SMALL_JOB, "command": "echo mine"})
        dr = dag.test(run_after=logical, logical_date=logical)
        assert dr.state == "success" and dr.run_id == run_id  # the very run the strangers named
        x = xcoms("tony_forged", dr.run_id, "train")
        assert x["application_id"] not in {h.app_id for h in strangers}
        assert x["status"]["state"] == "SUCCEEDED"
        assert "following it instead of submitting another" not in "".join(capfd.readouterr())
        assert all(h.status().state == "RUNNING" for h in strangers)  # untouched, still theirs
        # This deployment's own identity would find its own job again (it has ended: nothing).
        own = client.attach(x["application_id"])
        assert "mine" in own.logs("worker:0")["worker:0/stdout"].read_text()
    finally:
        for h in strangers:
            h.kill("test over")
