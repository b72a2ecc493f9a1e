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


KEY = b"0123456789abcdef0123456789abcdef"


def test_the_identity_names_the_task_run_whatever_the_try():
    first = ctx.from_conf({**AIRFLOW, "tony.context.try-number": "1"})
    again = ctx.from_conf(AIRFLOW)
    assert ctx.identity(first, KEY) == ctx.identity(again, KEY) and len(ctx.identity(first, KEY)) == 32
    other_index = ctx.from_conf({**AIRFLOW, "tony.context.map-index": "4"})
    other_run = ctx.from_conf({**AIRFLOW, "tony.context.dag-run-id": "manual__1"})
    assert len({ctx.identity(first, KEY), ctx.identity(other_index, KEY), ctx.identity(other_run, KEY)}) == 3
    # Not enough to name a run, or no key: no identity, so nothing is ever taken over by mistake.
    assert ctx.identity(ctx.from_conf({"tony.context.dag-id": "d"}), KEY) is None
    assert ctx.identity({}, KEY) is None and ctx.identity(first, None) is None and ctx.identity(first, b"") is None
    az = ctx.from_conf({"tony.context.execution-id": "42", "tony.context.flow-id": "f", "tony.context.job-id": "j"})
    assert az["source"] == "azkaban" and ctx.identity_tag(ctx.identity(az, KEY)) == f"tony.context:{ctx.identity(az, KEY)}"
    assert ctx.identity_tag(None) is None


def test_the_same_run_of_another_deployment_or_server_has_another_identity():
    run = ctx.from_conf(AIRFLOW)
    staging, production = b"staging-key-0123456789", b"production-key-0123456789"
    assert ctx.identity(run, staging, "http://airflow:8080") != ctx.identity(run, production, "http://airflow:8080")
    az = ctx.from_conf({"tony.context.execution-id": "1", "tony.context.flow-id": "f", "tony.context.job-id": "j"})
    # Two Azkaban servers both count execution ids from 1: the server's host tells them apart
    # even under one key, as the key does on one host.
    assert ctx.identity(az, KEY, "azkaban-a") != ctx.identity(az, KEY, "azkaban-b")
    assert ctx.identity(az, KEY, "Azkaban-A ") == ctx.identity(az, KEY, "azkaban-a")
    # Without the key, the fields alone give nothing a job can be found by.
    assert ctx.identity(run, KEY) != ctx.identity(run, b"another-key-0123456789")


def test_a_spec_never_carries_an_identity_of_its_own_and_may_not_forge_its_tag():
    s = spec(AIRFLOW)
    assert s.identity is None  # the context keys alone name nothing a workflow run reattaches to
    named = s.with_identity(KEY, "http://airflow:8080")
    assert named.identity == ctx.identity(s.context, KEY, "http://airflow:8080") and named.conf == s.conf
    assert type(s).from_dict(named.to_dict()).identity == named.identity  # staged with the job
    with pytest.raises(SpecError) as e:
        spec(AIRFLOW, tags=[f"tony.context:{named.identity}"]).validate()
    assert "tony.application.tags" in str(e.value) and "Airflow or Azkaban only" in str(e.value)


def test_a_deployment_key_is_made_once_for_its_owner_only(tmp_path):
    import os
    path = tmp_path / "k" / "reattach.key"
    key = ctx.deployment_key(path)
    assert len(key) == 64 and ctx.deployment_key(path) == key and os.stat(path).st_mode & 0o777 == 0o600
    os.chmod(path, 0o644)
    with pytest.raises(OSError, match="may be read by others"):
        ctx.deployment_key(path)
    with pytest.raises(OSError):
        ctx.deployment_key(tmp_path / "absent", create=False)


def test_tags_keep_yarns_limits_and_say_what_was_left_off():
    c = ctx.from_conf(AIRFLOW)
    tags, dropped = ctx.application_tags(["tony", "gang:1"], [], c, ctx.identity(c, KEY))
    assert dropped == [] and len(tags) == 8
    assert "airflow.dag_id:nightly_train" in tags and "airflow.map_index:3" in tags  # lowercased, as YARN keeps them
    assert not any(t.startswith("airflow.url") for t in tags)
    user = [f"team-{i}" for i in range(7)]
    tags, dropped = ctx.application_tags(["tony", "gang:1"], user, c, ctx.identity(c, KEY))
    assert len(tags) == ctx.MAX_TAGS and tags[:3] == ["tony", "gang:1", ctx.identity_tag(ctx.identity(c, KEY))]
    assert dropped == ["dag_id", "dag_run_id", "task_id", "try_number", "map_index"]
    assert "dag_id, dag_run_id" in ctx.dropped_warning(dropped) and ctx.dropped_warning([]) is None
    tags, dropped = ctx.application_tags(["tony", "gang:1"], user[:4], c, ctx.identity(c, KEY))
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
