"""Where a job came from (:mod:`tony_workflow.context`): the fields its keys set, the YARN tags
within YARN's limits, the identity that finds a task run's application, the tasks' variables."""
from __future__ import annotations

import pytest

from tony_workflow import context as ctx
from tony_workflow.client import load_job
from tony_workflow.errors import SpecError

AIRFLOW = {"tony.context.dag-id": "Nightly_Train", "tony.context.dag-run-id": "scheduled__2026-11-25T00:00:00+00:00",
           "tony.context.task-id": "train", "tony.context.try-number": "2", "tony.context.map-index": "3",
           "tony.context.url": "http://airflow:8080/dags/Nightly_Train/runs/x/tasks/train/mapped/3?try_number=2"}


def spec(conf=None, tags=None):
    return load_job({"name": "c", "command": "true", "tasks": {"worker": {"instances": 1}},
                     **({"tags": tags} if tags else {})}, conf=conf or {})


def test_the_keys_make_the_context_and_its_source_is_the_one_whose_fields_are_set():
    c = spec(AIRFLOW).context
    assert c == {"source": "airflow", "dag_id": "Nightly_Train", "dag_run_id": "scheduled__2026-11-25T00:00:00+00:00",
                 "task_id": "train", "try_number": "2", "map_index": "3", "url": AIRFLOW["tony.context.url"]}
    assert spec().context == {}
    assert ctx.from_conf({"tony.context.url": "http://x"}) == {"url": "http://x"}  # no source to tell


def test_the_identity_names_the_task_run_whatever_the_try():
    first = ctx.from_conf({**AIRFLOW, "tony.context.try-number": "1"})
    again = ctx.from_conf(AIRFLOW)
    assert ctx.identity(first) == ctx.identity(again) and len(ctx.identity(first)) == 24
    other_index = ctx.from_conf({**AIRFLOW, "tony.context.map-index": "4"})
    other_run = ctx.from_conf({**AIRFLOW, "tony.context.dag-run-id": "manual__1"})
    assert len({ctx.identity(first), ctx.identity(other_index), ctx.identity(other_run)}) == 3
    # Not enough to name a run: no identity, so nothing is ever taken over by mistake.
    assert ctx.identity(ctx.from_conf({"tony.context.dag-id": "d"})) is None
    assert ctx.identity({}) is None
    az = ctx.from_conf({"tony.context.execution-id": "42", "tony.context.flow-id": "f", "tony.context.job-id": "j"})
    assert az["source"] == "azkaban" and ctx.identity_tag(az) == f"tony.context:{ctx.identity(az)}"


def test_tags_keep_yarns_limits_and_say_what_was_left_off():
    c = ctx.from_conf(AIRFLOW)
    tags, dropped = ctx.application_tags(["tony", "gang:1"], [], c)
    assert dropped == [] and len(tags) == 8
    assert "airflow.dag_id:nightly_train" in tags and "airflow.map_index:3" in tags  # lowercased, as YARN keeps them
    assert not any(t.startswith("airflow.url") for t in tags)
    user = [f"team-{i}" for i in range(7)]
    tags, dropped = ctx.application_tags(["tony", "gang:1"], user, c)
    assert len(tags) == ctx.MAX_TAGS and tags[:3] == ["tony", "gang:1", ctx.identity_tag(c)]
    assert dropped == ["dag_id", "dag_run_id", "task_id", "try_number", "map_index"]
    assert "dag_id, dag_run_id" in ctx.dropped_warning(dropped) and ctx.dropped_warning([]) is None
    tags, dropped = ctx.application_tags(["tony", "gang:1"], user[:4], c)
    assert dropped == ["try_number", "map_index"]  # the fields naming the run get the room first


def test_a_value_that_cannot_be_a_tag_as_it_is_is_cut_and_keeps_a_hash():
    long = "d" * 150
    tag = ctx.fit_tag("airflow.dag_id", long)
    assert len(tag) == ctx.MAX_TAG_LENGTH and tag.startswith("airflow.dag_id:ddd") and tag[-9] == "~"
    assert ctx.fit_tag("airflow.dag_id", long + "x") != tag  # still tells values apart
    odd = ctx.fit_tag("azkaban.flow.flowid", "a,b über")
    assert odd.isascii() and "," not in odd and "~" in odd
    assert ctx.fit_tag("azkaban.job.id", "Train") == "azkaban.job.id:train"


def test_every_task_sees_the_context_and_airflow_jobs_airflows_own_variables():
    env = ctx.task_env(ctx.from_conf(AIRFLOW))
    assert env["TONY_CONTEXT_SOURCE"] == "airflow" and env["TONY_CONTEXT_DAG_ID"] == "Nightly_Train"
    assert env["TONY_CONTEXT_MAP_INDEX"] == "3" and env["TONY_CONTEXT_URL"] == AIRFLOW["tony.context.url"]
    assert env["AIRFLOW_CTX_DAG_ID"] == "Nightly_Train" and env["AIRFLOW_CTX_TRY_NUMBER"] == "2"
    assert env["AIRFLOW_CTX_DAG_RUN_ID"] == AIRFLOW["tony.context.dag-run-id"] and env["AIRFLOW_CTX_TASK_ID"] == "train"
    az = ctx.task_env({"source": "azkaban", "execution_id": "42"})
    assert az == {"TONY_CONTEXT_SOURCE": "azkaban", "TONY_CONTEXT_EXECUTION_ID": "42"}


def test_filters_match_without_case_and_tags_give_back_what_they_can():
    c = ctx.from_conf(AIRFLOW)
    assert ctx.matches(c, {"dag_id": "nightly_train", "task_id": "TRAIN"})
    assert not ctx.matches(c, {"dag_id": "other"}) and not ctx.matches(None, {"dag_id": "x"})
    assert ctx.matches(None, {})
    back = ctx.from_tags(ctx.application_tags(["tony"], [], c)[0])
    assert back["source"] == "airflow" and back["dag_id"] == "nightly_train" and back["map_index"] == "3"
    assert ctx.describe(c) == ("Airflow DAG Nightly_Train, run scheduled__2026-11-25T00:00:00+00:00, task train[3], "
                               "try 2")
    assert ctx.describe({"source": "azkaban", "project": "p", "flow_id": "f", "execution_id": "7", "job_id": "j",
                         "attempt": "0"}) == "Azkaban project p, flow f, execution 7, job j, attempt 0"
    assert ctx.describe({}) == ""


def test_too_many_tags_or_an_unknown_source_are_refused_naming_the_key():
    with pytest.raises(SpecError) as e:
        spec(tags=[f"t{i}" for i in range(8)]).validate()
    assert "tony.application.tags" in str(e.value) and "at most 7" in str(e.value)
    with pytest.raises(SpecError) as e:
        spec(tags=["x" * 101]).validate()
    assert "at most 100 printable ASCII" in str(e.value)
    with pytest.raises(SpecError) as e:
        spec({"tony.context.source": "cron"}).validate()
    assert "tony.context.source" in str(e.value) and "airflow, azkaban" in str(e.value)
    spec({**AIRFLOW}, tags=[f"t{i}" for i in range(7)]).validate()
    with pytest.raises(SpecError, match="tony.context.sourc"):  # not a task type: a misspelt key
        spec({"tony.context.sourc": "airflow"}).validate()
