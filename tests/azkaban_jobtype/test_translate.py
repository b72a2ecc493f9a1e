"""Props of TonyJob / TensorFlowJob jobs as the JobSpec they submit."""
from __future__ import annotations

from pathlib import Path

import pytest

from azkaban_jobtype.flow import load_project
from azkaban_jobtype.props import read_properties, resolve
from azkaban_jobtype.translate import TONY_JOB_TYPES, context_conf, describe, translate
from tony_workflow.context import application_tags, identity
from tony_workflow.spec import TONY_DEFAULTS, SpecError

from .conftest import EXAMPLE

MINIMAL = {"type": "TonyJob", "executes": "train.py", "tony.worker.instances": "1"}


def spec_of(project_dir: Path, job: str):
    with load_project(project_dir) as project:
        [instance] = [i for i in project.instances() if i.node.name == job]
        props = instance.props
        return translate(resolve(props), source=instance.node.source, origins=props.origins())


@pytest.mark.parametrize("project", ["hadoop-dsl-expected/jobs1", "hadoop-dsl-tensorflowjob"])
def test_jobs1_job24_in_both_its_spellings(fixtures_dir, project):
    spec = spec_of(fixtures_dir / project, "jobs1_job24")
    tasks = spec.tasks
    assert list(tasks) == ["ps", "worker"]
    worker, ps = tasks["worker"], tasks["ps"]
    assert (worker.instances, worker.resources.memory_mb, worker.resources.gpus, worker.resources.vcores) == \
        (4, 8192, 2, 1)
    assert (ps.instances, ps.resources.memory_mb, ps.resources.gpus, ps.resources.vcores) == (2, 2048, 0, 1)
    assert (spec.am.memory_mb, spec.am.gpus, spec.am.vcores) == (2048, 1, 1)
    assert spec.execution_env == {"ENV1": "val1", "ENV2": "val2"}
    assert spec.executes == "path/to/python/script.py" and spec.src_dir == "src"
    assert spec.framework == "tensorflow"
    assert spec.chief == ("worker", 0)


def test_jobs1_job25a_keeps_tonys_defaults_for_what_it_does_not_set(fixtures_dir):
    spec = spec_of(fixtures_dir / "hadoop-dsl-expected" / "jobs1", "jobs1_job25a")
    assert (spec.am.memory_mb, spec.am.gpus) == (2048, 0)
    assert spec.execution_env == {}
    assert spec.conf["tony.application.name"] == TONY_DEFAULTS["tony.application.name"]


def test_the_two_type_names_translate_alike():
    a = translate({**MINIMAL, "type": "TonyJob"})
    b = translate({**MINIMAL, "type": "TensorFlowJob"})
    assert a == b and set(TONY_JOB_TYPES) == {"TonyJob", "TensorFlowJob"}


def test_tony_keys_pass_through_and_lay_over_the_defaults():
    spec = translate({**MINIMAL, "tony.application.framework": "pytorch", "tony.yarn.queue": "gpu",
                      "tony.task.heartbeat-interval-ms": "500", "not.tony": "x"})
    assert spec.framework == "pytorch" and spec.queue == "gpu" and spec.heartbeat_interval_ms == 500
    assert "not.tony" not in spec.conf
    assert spec.conf["tony.am.memory"] == TONY_DEFAULTS["tony.am.memory"]


def test_client_arguments():
    spec = translate({**MINIMAL, "task_params": "--epochs 3 --lr 0.1", "python_binary_path": "bin/python3",
                      "python_venv": "venv.zip", "src_dir": "code"})
    assert (spec.executes, spec.task_params, spec.python_binary_path, spec.python_venv, spec.src_dir) == \
        ("train.py", "--epochs 3 --lr 0.1", "bin/python3", "venv.zip", "code")
    assert spec.command_for("worker") == "bin/python3 train.py --epochs 3 --lr 0.1"


def test_relative_directories_start_at_the_working_directory(tmp_path):
    spec = translate({**MINIMAL, "python_venv": "venv.zip"}, base_dir=tmp_path)
    assert spec.src_dir == str(tmp_path / "src") and spec.python_venv == str(tmp_path / "venv.zip")
    spec = translate({**MINIMAL, "src_dir": "/abs/code"}, base_dir=tmp_path)
    assert spec.src_dir == "/abs/code"


def test_worker_env_and_datasets_become_user_process_env():
    spec = translate({**MINIMAL, "worker_env.B": "2", "worker_env.A": "x=y",
                      "tony.execution.envs": "FIRST=1",
                      "azkaban.input.dataset": "/data/a,/data/b", "azkaban.output.dataset": "/out/c"})
    assert spec.execution_env == {"FIRST": "1", "A": "x=y", "B": "2",
                                  "AZKABAN_INPUT_DATASET": "/data/a;/data/b", "AZKABAN_OUTPUT_DATASET": "/out/c"}
    assert spec.shell_env == {}


def test_the_execution_is_the_jobs_context_and_tags_it_as_tony_did():
    props = {**MINIMAL, "azkaban.flow.execid": "42", "azkaban.flow.flowid": "mnist", "azkaban.flow.projectname": "ML",
             "azkaban.webserverhost": "az.example.com", "azkaban.job.id": "train", "azkaban.job.attempt": "1",
             "azkaban.link.execution.url": "https://az.example.com/executor?execid=42",
             "tony.application.tags": "team-a", "tony.context.execution-id": "a job's own say"}
    spec = translate(props)
    assert spec.tags == ["team-a"]
    assert spec.context == {"source": "azkaban", "project": "ML", "flow_id": "mnist", "execution_id": "42",
                            "job_id": "train", "attempt": "1", "host": "az.example.com",
                            "url": "https://az.example.com/executor?execid=42"}
    named = spec.with_identity(b"the-executors-key-0123", "az.example.com")
    tags, dropped = application_tags(["tony", "gang:x"], named.tags, named.context, named.identity)
    assert named.identity == identity(spec.context, b"the-executors-key-0123", "az.example.com")
    assert dropped == [] and tags[:4] == ["tony", "gang:x", f"tony.context:{named.identity}", "team-a"]
    # TonY's own tags, as its Azkaban job type wrote them (lowercased: YARN keeps them so).
    assert tags[4:] == ["azkaban.flow.execid:42", "azkaban.flow.flowid:mnist", "azkaban.flow.projectname:ml",
                        "azkaban.job.id:train", "azkaban.job.attempt:1", "azkaban.webserverhost:az.example.com"]
    assert context_conf({"azkaban.flow.flowid": "a,b"}) == {"tony.context.source": "azkaban",
                                                           "tony.context.flow-id": "a,b"}
    assert context_conf({}) == {} and translate(MINIMAL).context == {}


def test_where_the_executor_proxies_the_job_runs_as_the_flows_user_to_proxy():
    flow = {**MINIMAL, "user.to.proxy": "alice", "tony.application.proxy-user": "someone-else"}
    assert translate({**flow, "azkaban.should.proxy": "true"}).proxy_user == "alice"  # Azkaban's say, not the job's
    assert translate(flow).proxy_user == "someone-else"  # an executor that does not proxy: the job's own key
    assert translate({**MINIMAL, "user.to.proxy": "alice"}).proxy_user is None
    assert translate({**MINIMAL, "azkaban.should.proxy": "true"}).proxy_user is None


def test_hdfs_classpath_is_localised_like_a_container_resource():
    spec = translate({**MINIMAL, "hdfs_classpath": "hdfs:///libs/tony", "tony.containers.resources": "data.zip"})
    assert spec.container_resources == ["data.zip", "hdfs:///libs/tony"]


def test_describe_says_what_is_submitted(fixtures_dir):
    spec = spec_of(fixtures_dir / "hadoop-dsl-tensorflowjob", "jobs1_job24")
    lines = describe(spec)
    assert "  worker: 4 x (8192 MB, 1 vcore, 2 GPUs)" in lines
    assert "  ps: 2 x (2048 MB, 1 vcore, 0 GPUs)" in lines
    assert "  am: 2048 MB, 1 vcore, 1 GPU" in lines
    assert "  env: ENV1=val1 ENV2=val2" in lines


def test_the_example_project_translates(tmp_path):
    with load_project(EXAMPLE) as project:
        [train] = [i for i in project.instances() if i.node.name == "mnist_train"]
        spec = translate(resolve(train.props), base_dir=project.root, check_paths=True)
    assert spec.tasks["worker"].instances == 2 and spec.am.memory_mb == 512
    assert spec.name == "mnist-mnist"  # ${azkaban.flow.flowid} from the runtime properties
    assert Path(spec.src_dir, spec.executes).is_file()


# --------------------------------------------------------------------------------------------------
# Mistakes: every one reported at once, each with the file and the key


def problems(text: str, **kwargs) -> list[str]:
    props = read_properties(text, "bad.job")
    with pytest.raises(SpecError) as err:
        translate(resolve(props), source="bad.job", origins=props.origins(), **kwargs)
    return [str(issue) for issue in err.value.issues]


def test_bad_instances_and_missing_executes():
    found = problems("type=TonyJob\ntony.worker.instances=four\ntony.ps.memory=lots\n")
    assert "bad.job: tony.worker.instances (line 2): must be an integer >= 0 (got 'four')" in found
    assert [p for p in found if "executes" in p] == [next(p for p in found if p.startswith("bad.job: executes: "))]
    assert not any("has no command" in p for p in found)  # said once, in the job's terms


def test_no_task_type_at_all_is_tonys_single_node_job():
    # TonY runs a job with no task instances in its ApplicationMaster, as this project does.
    spec = translate({"type": "TonyJob", "executes": "train.py"})
    assert spec.single_node and spec.command_for("am") == "python train.py"
    found = problems("type=TonyJob\ntony.application.single-node=true\nexecutes=train.py\ntony.worker.instances=2\n")
    assert any(p.startswith("bad.job: tony.application.single-node (line 2): a single-node job runs its command "
                            "in the ApplicationMaster and has no task instances, but this job has worker 2")
               for p in found), found


def test_a_command_instead_of_executes_is_enough():
    spec = translate({"tony.worker.instances": "2", "tony.containers.command": "python -c pass"})
    assert spec.command_for("worker") == "python -c pass"


def test_bad_worker_env():
    found = problems("type=TonyJob\nexecutes=t.py\ntony.worker.instances=1\nworker_env.1BAD=x\n"
                     "worker_env.LIST=a,b\n")
    assert "bad.job: worker_env.1BAD (line 4): '1BAD' is not an environment variable name (letters, digits " \
           "and '_', not starting with a digit)" in found
    assert any(p.startswith("bad.job: worker_env.LIST (line 5): the value must not contain ','") for p in found)


def test_a_key_inherited_from_a_properties_file_is_named_with_that_file():
    shared = read_properties("tony.worker.gpus=two\n", "shared.properties")
    job = read_properties("type=TonyJob\nexecutes=t.py\ntony.worker.instances=1\n", "bad.job")
    job.parent = shared
    with pytest.raises(SpecError) as err:
        translate(resolve(job), source="bad.job", origins=job.origins())
    assert str(err.value) == ("bad.job: tony.worker.gpus (from shared.properties:1): must be an integer >= 0 "
                              "(got 'two')")


def test_missing_directories_are_reported_when_checked(tmp_path):
    found = problems("type=TonyJob\nexecutes=t.py\ntony.worker.instances=1\npython_venv=venv.zip\n",
                     base_dir=tmp_path, check_paths=True)
    assert any(p.startswith("bad.job: src_dir: must be an existing directory (the default, since src_dir is not "
                            "set)") for p in found)
    assert any(p.startswith("bad.job: python_venv (line 4): must be an existing virtualenv") for p in found)


@pytest.mark.parametrize("name, job, framework, workers, params", [
    ("pytorch_ddp", "ddp_train", "pytorch", 2, "--epochs 8 --save-every 10"),
    ("jax", "jax_train", "jax", 3, "--steps 300 --save-every 20")])
def test_the_pytorch_and_jax_example_projects_are_jobs_of_their_framework_with_their_scripts(name, job, framework,
                                                                                             workers, params):
    # Their scripts are the examples' own (src/ links to them), which the framework job tests and
    # the example DAGs train for real; what is the projects' own is their props.
    project = EXAMPLE.parent / name
    with load_project(project) as loaded:
        [instance] = [i for i in loaded.instances(runtime={"azkaban.flow.execid": "7"}) if i.node.name == job]
        props = instance.props
        spec = translate(resolve(props), source=instance.node.source, origins=props.origins(), base_dir=project,
                         check_paths=True)
    assert spec.framework == framework and spec.tasks["worker"].instances == workers
    assert (spec.executes, spec.task_params) == ("train.py", params)
    assert (Path(spec.src_dir) / "train.py").is_file()
    assert spec.conf["tony.am.retry-count"] == "1"
