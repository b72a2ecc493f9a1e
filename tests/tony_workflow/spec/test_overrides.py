"""``KEY=VALUE`` overrides (:mod:`tony_workflow.spec.overrides`): replace or append, and where each came from."""
from __future__ import annotations

import pytest

from tests.tony_workflow.spec.common import errors_of
from tony_workflow.spec import (
    MULTI_VALUE_KEYS,
    JobSpec,
    SpecError,
    apply_overrides,
    load_spec,
)


def test_overrides_replace_or_append():
    conf = {"tony.containers.envs": "A=1", "tony.worker.instances": "1", "tony.execution.envs": ""}
    result = apply_overrides(conf, ["tony.containers.envs=B=2", "tony.worker.instances=4",
                                    "tony.execution.envs=C=3", "tony.application.tags=x"])
    assert result["tony.containers.envs"] == "A=1,B=2"
    assert result["tony.worker.instances"] == "4"
    assert result["tony.execution.envs"] == "C=3"
    assert result["tony.application.tags"] == "x"
    assert conf["tony.containers.envs"] == "A=1"  # the input is left alone
    assert set(MULTI_VALUE_KEYS) >= {"tony.containers.envs", "tony.execution.envs", "tony.containers.resources"}

    spec = JobSpec(conf={"tony.containers.envs": "A=1"}).with_overrides(["tony.containers.envs=B=2"])
    assert spec.container_env == {"A": "1", "B": "2"}
    assert apply_overrides({}, {"tony.docker.enabled": False}) == {"tony.docker.enabled": "false"}


def test_bad_overrides_are_named():
    with pytest.raises(SpecError) as info:
        apply_overrides({}, ["novalue", "=x", "ok=1"])
    assert [(i.key, i.value) for i in info.value.issues] == [("--conf", "novalue"), ("--conf", "=x")]


def test_override_origin_shows_in_messages(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("command: run\ntasks:\n  worker: {instances: 1, memory: 2g}\n")
    error = errors_of(path, overrides=["tony.worker.memory=lots"])
    assert "--conf tony.worker.memory" in str(error)
    assert load_spec(path, overrides={"tony.worker.memory": "3g"}).tasks["worker"].resources.memory_mb == 3072
