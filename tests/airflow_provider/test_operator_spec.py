"""TonyOperator.build_spec alone: a bad spec fails the task at once with the key named, nothing submitted."""
from __future__ import annotations

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.operators import TonyOperator

JOB = {"name": "af", "command": "true", "tasks": {"worker": {"instances": 1}}}


@pytest.mark.parametrize("job, conf, expected", [
    (JOB, {"tony.worker.memroy": "4g"}, "tony.worker.memroy: unknown key (did you mean tony.worker.memory?)"),
    ({**JOB, "conf": {"tony.application.timout": 5}}, {}, "did you mean tony.application.timeout?"),
    (JOB, {"tony.workr.gpus": "1"}, "no tony.workr.instances declares"),
    (JOB, {"mapreduce.job.queuename": "etl"}, "is not a TonY key"),
    (JOB, {"tony.local.memory": "512g"}, "tony.local.memory: a job may not set this key"),
])
def test_unknown_keys_fail_the_task_naming_the_nearest_known_key(airflow_db, tony_home, monkeypatch, job, conf,
                                                                  expected):
    monkeypatch.delenv("AIRFLOW_CONN_TONY_DEFAULT", raising=False)
    with DAG("spec_only", schedule=None):
        op = TonyOperator(task_id="train", job_spec=job, conf=conf)
    with pytest.raises(AirflowFailException) as info:
        op.build_spec()
    assert expected in str(info.value) and "nothing was submitted" in str(info.value)
    # An operator's own conf is named as what it is: there is no --conf here.
    assert "--conf" not in str(info.value)
    if conf:
        assert f"TonyOperator conf {next(iter(conf))}" in str(info.value), str(info.value)
    assert not list((tony_home / "local" / "apps").glob("application_*"))


def test_the_operator_maps_the_error_tree_in_one_place():
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider.operators import airflow_error
    from tony_workflow import errors
    from tony_workflow.backends.base import NeverFits

    # Input that must change fails the task without retries; the cluster failing is retried.
    for error in (errors.SpecError([]), NeverFits("tony.worker.memory", "too big"), errors.LoginError("no ticket"),
                  errors.ConfigError("no ResourceManager address")):
        mapped = airflow_error(error)
        assert isinstance(mapped, AirflowFailException) and str(error) in str(mapped), error
        assert "nothing was submitted" in str(mapped)
    for error in (errors.AMUnreachable("gone"), errors.StoreError("HDFS in safe mode"),
                  errors.UnknownApplication("application_1_0001")):
        mapped = airflow_error(error)
        assert type(mapped) is AirflowException and str(mapped) == f"TonY: {error}", error


def test_a_task_says_every_problem_of_its_spec_at_once(airflow_db, tony_home, monkeypatch, tmp_path):
    """As tony validate does (one preflight): a misspelled field, a value that does not parse and a
    script that is not in src_dir, in the one failure of the task."""
    monkeypatch.delenv("AIRFLOW_CONN_TONY_DEFAULT", raising=False)
    (tmp_path / "train.py").write_text("print('hello')\n")
    job = {"name": "three", "executes": "trian.py", "src_dir": str(tmp_path),
           "tasks": {"worker": {"instances": 1, "memroy": "2g", "vcores": "x"}}}
    with DAG("three_problems", schedule=None):
        op = TonyOperator(task_id="train", job_spec=job)
    with pytest.raises(AirflowFailException) as info:
        op.build_spec(check=True)
    said = str(info.value)
    for problem in ("tasks.worker.memroy: unknown task field (did you mean 'memory'?)",
                    "tasks.worker.vcores (tony.worker.vcores): must be an integer >= 1 (got 'x')",
                    "executes: is not a file in src_dir", "nothing was submitted"):
        assert problem in said, said
    assert not list((tony_home / "local" / "apps").glob("application_*"))
