"""The YARN backend's client side where it needs no cluster (:mod:`tony_workflow.backends.yarn`): the
job's lifetime on YARN, a docker job's container variables, and the keytab a job is submitted with.
Submitting, following and killing on a real cluster are tests/tony_workflow/jobs/test_yarn_*.py."""
from __future__ import annotations

import pytest

from tony_workflow.backends.yarn import docker_env, job_login, yarn_lifetime_s
from tony_workflow.spec import SpecError, load_job


def test_yarns_lifetime_outlasts_the_jobs_own_timeout_by_a_tenth_within_bounds():
    assert yarn_lifetime_s(60_000) == 70.0            # at least 10 s more
    assert yarn_lifetime_s(300_000) == 330.0          # a tenth more
    assert yarn_lifetime_s(36_000_000) == 36_060.0    # at most a minute more


def test_a_docker_image_becomes_the_node_managers_runtime_variables():
    assert docker_env(None, ["/d:/d:ro"]) == {}
    assert docker_env("tf:2.21", ["/data:/data:ro", "/ckpt:/ckpt:rw"]) == {
        "YARN_CONTAINER_RUNTIME_TYPE": "docker", "YARN_CONTAINER_RUNTIME_DOCKER_IMAGE": "tf:2.21",
        "YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS": "/data:/data:ro,/ckpt:/ckpt:rw"}


def job(conf: dict):
    return load_job({"name": "k", "command": "true", "tasks": {"worker": {"instances": 1}}, "conf": conf})


def test_a_job_without_a_keytab_uses_the_submitters_login():
    assert job_login(job({})) is None


def test_a_keytab_needs_both_keys_and_a_readable_file(tmp_path):
    with pytest.raises(SpecError) as e:
        job_login(job({"tony.keytab.user": "etl@EXAMPLE.COM"}))
    assert "tony.keytab.location" in str(e.value) and "must be set too" in str(e.value)
    with pytest.raises(SpecError) as e:
        job_login(job({"tony.keytab.user": "etl@EXAMPLE.COM", "tony.keytab.location": str(tmp_path / "none")}))
    assert "must be a readable keytab file" in str(e.value)
    keytab = tmp_path / "etl.keytab"
    keytab.write_bytes(b"\x05\x02")
    login = job_login(job({"tony.keytab.user": "etl@EXAMPLE.COM", "tony.keytab.location": str(keytab)}))
    assert login is not None and "etl@EXAMPLE.COM" in login.describe()
