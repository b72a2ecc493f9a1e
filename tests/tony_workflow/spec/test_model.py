"""The job model (:mod:`tony_workflow.spec.model`): commands, task order, the chief, typed fields, round trips."""
from __future__ import annotations

import json

import pytest

from tests.tony_workflow.spec.common import GOOD_SPECS
from tony_workflow.spec import (
    JobSpec,
    Resources,
    SpecError,
    TaskSpec,
    load_job,
    load_spec,
)


def test_command_precedence():
    spec = JobSpec(conf={"tony.worker.instances": "2", "tony.ps.instances": "1"},
                   executes="train.py", task_params="--epochs 3")
    assert spec.command_for("worker") == "python train.py --epochs 3"
    assert spec.with_overrides({"tony.containers.command": "run.sh"}).command_for("worker") == "run.sh"
    both = spec.with_overrides({"tony.containers.command": "run.sh", "tony.ps.command": "serve.sh"})
    assert (both.command_for("ps"), both.command_for("worker")) == ("serve.sh", "run.sh")
    assert JobSpec(executes="t.py", python_binary_path="/opt/py/bin/python3").command_for("worker") \
        == "/opt/py/bin/python3 t.py"
    assert JobSpec().command_for("worker") is None


@pytest.mark.parametrize("executes,python_binary_path,command", [
    # TonY's rule: the interpreter goes in front when python_binary_path is given, whatever follows.
    ("exit_0.py", "python", "python exit_0.py --n 1"),
    ("python x.py", "/usr/bin/python3", "/usr/bin/python3 python x.py --n 1"),
    # Without one, TonY's command lines run as written...
    ("python exit_0.py", None, "python exit_0.py --n 1"),
    ("bash run.sh", None, "bash run.sh --n 1"),
    ("./train", None, "./train --n 1"),
    # ...and what can only be Python's gets the job's interpreter (the executor passes the one it resolved).
    ("train.py", None, "/venv/bin/python train.py --n 1"),
    ("-m pkg.train", None, "/venv/bin/python -m pkg.train --n 1"),
    # A notebook runs under the runtime's notebook runner, in the job's interpreter, whatever the rest.
    ("train.ipynb", None, "/venv/bin/python -m tony_workflow.task.notebook train.ipynb --n 1"),
    ("nb/train.ipynb", "/usr/bin/python3", "/usr/bin/python3 -m tony_workflow.task.notebook nb/train.ipynb --n 1"),
])
def test_the_interpreter_is_put_in_front_of_executes_as_tony_does(executes, python_binary_path, command):
    spec = JobSpec(executes=executes, python_binary_path=python_binary_path, task_params="--n 1")
    resolved = python_binary_path or "/venv/bin/python"
    assert spec.command_for("worker", python=resolved) == command


def test_task_order_chief_and_tracking():
    spec = JobSpec(conf={"tony.ps.instances": "1", "tony.evaluator.instances": "0", "tony.chief.instances": "1",
                         "tony.worker.instances": "2", "tony.tensorboard.instances": "1",
                         "tony.containers.command": "run"})
    assert list(spec.tasks) == ["ps", "chief", "worker", "tensorboard"]
    assert spec.chief == ("chief", 0)
    assert spec.tracked_types == ["chief", "worker"]
    assert spec.sidecar_types == ["tensorboard"] and spec.stop_on_failure_types == ["ps"]
    assert spec.tasks["worker"] == TaskSpec("worker", 2, Resources(), command="run")
    spec.validate()


def test_typed_properties_name_a_bad_value():
    spec = JobSpec(conf={"tony.am.retry-count": "x"}, key_origin={"tony.am.retry-count": "retries"})
    with pytest.raises(SpecError, match=r"retries \(tony.am.retry-count\): must be an integer >= 0"):
        _ = spec.retry_count


def test_round_trip():
    spec = load_spec(GOOD_SPECS / "mwms.yaml.j2", variables={"workers": 2}, overrides=["tony.am.memory=1g"])
    data = json.loads(json.dumps(spec.to_dict()))
    assert JobSpec.from_dict(data) == spec
    assert data["key_origin"]["tony.am.memory"] == "--conf tony.am.memory"
    task = spec.tasks["worker"]
    assert TaskSpec.from_dict(json.loads(json.dumps(task.to_dict()))) == task
    with pytest.raises(SpecError, match="unknown job spec field"):
        JobSpec.from_dict({**data, "extra": 1})


def test_spec_objects_check_their_fields():
    with pytest.raises(SpecError, match="memory_mb"):
        Resources(memory_mb=0)
    with pytest.raises(SpecError, match="restart_policy"):
        TaskSpec("worker", 1, restart_policy="always")
    with pytest.raises(SpecError, match="conf"):
        JobSpec(conf=["not", "a", "mapping"])


def test_a_spec_is_immutable_and_reads_each_field_once():
    import dataclasses

    spec = JobSpec(conf={"tony.worker.instances": "2"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.executes = "x.py"
    assert spec.tasks is spec.tasks  # parsed once, then kept
    changed = dataclasses.replace(spec, conf={**spec.conf, "tony.worker.instances": "3"})
    assert changed.tasks["worker"].instances == 3 and spec.tasks["worker"].instances == 2


def test_a_pytorch_type_below_its_instances_is_elastic_and_the_job_runs_under_torchs_agent():
    from tony_workflow.spec import load_job

    spec = load_job({"name": "el", "framework": "pytorch", "command": "python t.py",
                     "tasks": {"chief": {"instances": 1}, "worker": {"instances": 4, "min_instances": 2}},
                     "conf": {"tony.elastic.fallback-timeout-ms": "30000"}})
    assert spec.tasks["worker"].min_instances == 2 and spec.tasks["worker"].elastic
    assert spec.tasks["chief"].min_instances == 1 and not spec.tasks["chief"].elastic  # empty: its instances
    assert spec.elastic and spec.elastic_types == ["worker"] and spec.torch_agent
    assert spec.elastic_nodes == (3, 5)   # the chief's one container and 2 to 4 workers
    assert spec.elastic_fallback_timeout_ms == 30000 and spec.elastic_max_membership_changes == 10
    # The AM reads the spec back from spec.json.
    again = JobSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again.tasks["worker"].min_instances == 2 and again.elastic_types == ["worker"]
    fixed = load_job({"name": "f", "framework": "pytorch", "command": "python t.py",
                      "tasks": {"worker": {"instances": 4, "min_instances": 4}}})
    assert not fixed.elastic and not fixed.torch_agent
    # Elastic is PyTorch's: another framework's job is never elastic (validation refuses the key).
    tf = load_job({"name": "t", "command": "python t.py", "tasks": {"worker": {"instances": 3, "min_instances": 2}}})
    assert tf.elastic_types == [] and not tf.elastic


def test_a_tensorboard_log_dir_adds_tonys_tensorboard_task_as_a_sidecar():
    spec = load_job({"name": "tb", "command": "python train.py", "tasks": {"worker": {"instances": 2}},
                     "conf": {"tony.application.tensorboard-log-dir": "hdfs:///logs/run1",
                              "tony.application.sidecar.jobtypes": "notebook", "tony.tensorboard.memory": "1g"}})
    spec.validate()
    tb = spec.tasks["tensorboard"]
    assert (tb.instances, tb.resources) == (1, Resources(memory_mb=1024, vcores=2, gpus=0))
    assert spec.sidecar_types == ["notebook", "tensorboard"] and spec.tracked_types == ["worker"]
    assert spec.tensorboard_log_dir == "hdfs:///logs/run1"
    assert JobSpec.from_dict(spec.to_dict()).to_dict() == spec.to_dict()  # the task added once
    # Without the key, no such task.
    assert "tensorboard" not in load_job({"name": "x", "command": "true", "tasks": {"worker": {"instances": 1}}}).tasks
