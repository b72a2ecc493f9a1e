"""Tests of tony_workflow.spec: loading TonY XML and YAML/JSON specs, overrides, validation."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tony_workflow.spec import (
    FRAMEWORKS,
    MULTI_VALUE_KEYS,
    PROJECT_DEFAULTS,
    TONY_DEFAULTS,
    JobSpec,
    Resources,
    SpecError,
    SpecIssue,
    TaskSpec,
    apply_overrides,
    load_spec,
    load_tony_xml,
    parse_memory,
    spec_from_mapping,
)

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("TONY_SHARED_DIR") or Path(__file__).resolve().parents[3] / "shared")
TONY_FIXTURES = SHARED / "fixtures" / "tony"


def tony_fixture(name: str) -> Path:
    """One of TonY's own files from the shared fixtures; the test skips, saying why, without them."""
    path = TONY_FIXTURES / name
    if not path.is_file():
        pytest.skip(f"TonY's fixture {name} is not at {TONY_FIXTURES} (the shared fixtures sit beside a "
                    "development checkout, not in a clone)")
    return path
BAD_SPECS = sorted((HERE / "bad_specs").iterdir())
GOOD_SPECS = HERE / "good_specs"


def errors_of(spec_or_path, **kwargs) -> SpecError:
    """The SpecError that loading and validating raises."""
    with pytest.raises(SpecError) as info:
        spec = spec_or_path if isinstance(spec_or_path, JobSpec) else load_spec(spec_or_path, **kwargs)
        spec.validate()
    return info.value


# -- TonY's own files ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(TONY_FIXTURES.glob("*.xml")) or [pytest.param(None, marks=pytest.mark.skip(
    reason=f"TonY's fixtures are not at {TONY_FIXTURES} (they sit beside a development checkout)"))],
    ids=lambda p: p.name if p else "none")
def test_every_tony_fixture_loads(path):
    assert load_tony_xml(path) is not None  # the site-file reader takes every one of TonY's files
    try:
        spec = load_spec(path)
    except SpecError as exc:
        # As a job's own file, only a nameless <property> (TonY's fixture of broken files has two) is refused.
        assert exc.issues and all("without a <name>" in issue.message for issue in exc.issues)
        return
    assert spec.source == str(path)
    assert set(TONY_DEFAULTS) <= set(spec.conf)
    assert spec.framework in FRAMEWORKS
    assert spec.am.memory_mb > 0


def test_mxnet_job():
    spec = load_spec(tony_fixture("tony_mxnet_job.xml"))
    assert spec.framework == "mxnet"
    assert spec.name == "mxnet - linearregression"
    assert list(spec.tasks) == ["scheduler", "server", "worker"]  # ps has 0 instances
    assert {t: s.instances for t, s in spec.tasks.items()} == {"scheduler": 1, "server": 2, "worker": 2}
    assert spec.tasks["worker"].resources == Resources(memory_mb=4096, vcores=2, gpus=0)
    assert spec.tasks["server"].resources == Resources()
    assert spec.conf["tony.application.security.enabled"] == "false"


def test_history_config():
    spec = load_spec(tony_fixture("history-config.xml"))
    assert spec.name == "TensorFlowApplication"
    assert {t: s.instances for t, s in spec.tasks.items()} == {"ps": 1, "worker": 1}
    assert spec.am == Resources(memory_mb=2048, vcores=1, gpus=0)
    assert spec.untracked_types == ["ps"]
    assert spec.tracked_types == ["worker"]
    assert spec.chief == ("worker", 0)
    assert spec.container_resources == [
        "/user/testuser/.tony/a908e7f8-deb0-4760-b5cf-e03f654c2afd",
        "/user/testuser/.tony/application_123456_0001/tony_src.zip"]
    assert spec.max_missed_heartbeats == 25


def test_final_application_keeps_incomplete_properties():
    conf = load_tony_xml(tony_fixture("tony-final-application_123_456.xml"))
    assert conf == {"fookey": "fooval", "barkey": "barval", "key_only": "", "bazkey": "bazval"}
    # As a job spec, the properties without a name are mistakes, each named by its line.
    message = str(errors_of(tony_fixture("tony-final-application_123_456.xml")))
    assert "line 4: a <property> without a <name>" in message and "line 22: a <property> without a <name>" in message


def test_final_typical_loads_but_has_nothing_to_run():
    spec = load_spec(tony_fixture("tony-final-typical.xml"))
    assert spec.conf["name"] == "value"
    assert spec.tasks == {}
    message = str(errors_of(spec))
    assert "no tracked task" in message
    assert "tony.<type>.instances" in message and "tony.worker.instances" in message
    assert message.startswith(str(tony_fixture("tony-final-typical.xml")))


# -- The same formats, from this suite's own files -------------------------------------------------


def test_a_job_with_several_types_one_switched_off():
    spec = load_spec(GOOD_SPECS / "multi_type_job.xml")
    spec.validate()
    assert spec.framework == "mxnet" and spec.name == "regression on four types"
    assert list(spec.tasks) == ["scheduler", "server", "worker"]
    assert {t: s.instances for t, s in spec.tasks.items()} == {"scheduler": 1, "server": 2, "worker": 3}
    assert spec.tasks["worker"].resources == Resources(memory_mb=3072, vcores=2, gpus=0)
    assert spec.tasks["server"].resources == Resources()
    assert spec.conf["tony.application.security.enabled"] == "false"


def test_untracked_ps_and_a_resource_list():
    spec = load_spec(GOOD_SPECS / "untracked_ps.xml")
    assert (spec.untracked_types, spec.tracked_types, spec.chief) == (["ps"], ["worker"], ("worker", 0))
    assert spec.container_resources == ["/data/vocab.txt", "/user/someone/model.zip"]
    assert spec.max_missed_heartbeats == 10


def test_properties_with_parts_missing():
    conf = load_tony_xml(GOOD_SPECS / "partial_properties.xml")
    assert conf == {"alpha": "one", "no_value": "", "omega": "last"}
    message = str(errors_of(GOOD_SPECS / "partial_properties.xml"))
    assert "line 4: a <property> without a <name>" in message and "line 14: a <property> without a <name>" in message
    assert "no_value" not in message.split("unknown key")[0]  # a property without a value is an empty one


def test_a_key_set_twice_in_a_job_file_is_refused_with_both_lines():
    text = ("<configuration>\n<property><name>tony.worker.instances</name><value>2</value></property>\n"
            "<property><name>tony.containers.command</name><value>true</value></property>\n"
            "<property><name>tony.worker.instances</name><value>4</value></property>\n</configuration>")
    message = str(errors_of(text))
    assert "tony.worker.instances: is set twice (lines 2 and 4); keep one" in message
    assert load_tony_xml(text)["tony.worker.instances"] == "4"  # a site file: the last one wins, as in Hadoop


def test_defaults_match_tony_default_xml():
    from_file = load_tony_xml(tony_fixture("tony-default.xml"))
    assert len(from_file) > 50
    assert {k: TONY_DEFAULTS.get(k) for k in from_file} == from_file
    # Everything else in TONY_DEFAULTS is this project's own, and documented as such.
    assert set(TONY_DEFAULTS) - set(from_file) == set(PROJECT_DEFAULTS)


def test_project_defaults():
    spec = JobSpec(conf={})
    assert spec.get("tony.local.vcore-oversubscription") is None  # the local cluster's, not a job's
    assert spec.get("tony.task.tensorboard.enabled") == "true"
    assert spec.get("tony.checkpoint.location") == ""
    assert spec.get("no.such.key", "fallback") == "fallback"


# -- memory sizes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value, megabytes", [
    ("2g", 2048), ("2G", 2048), ("512m", 512), ("512M", 512), ("4096", 4096), (4096, 4096),
    ("1.5g", 1536), ("2gb", 2048), ("2GB", 2048), ("256mb", 256), (" 3g ", 3072), ("0.5m", 1),
])
def test_parse_memory(value, megabytes):
    assert parse_memory(value) == megabytes


@pytest.mark.parametrize("value", ["0", 0, "0g", "-1g", "-512", "abc", "2x", "2t", "2kb", "", "g", "1.2.3g",
                                   True, None, "nan", "inf"])
def test_parse_memory_refuses(value):
    with pytest.raises(ValueError, match="positive size"):
        parse_memory(value)


# -- YAML / JSON ----------------------------------------------------------------------------------


def test_yaml_and_xml_describe_the_same_job():
    from_yaml = load_spec(GOOD_SPECS / "mnist.yaml")
    from_xml = load_spec(GOOD_SPECS / "mnist.xml")
    from_yaml.validate()
    from_xml.validate()
    assert from_yaml.tasks == from_xml.tasks
    assert from_yaml.conf == from_xml.conf
    assert from_yaml.tasks["evaluator"].command == "python eval.py"
    assert from_yaml.tasks["worker"].resources == Resources(4096, 2, 0)
    assert from_yaml.container_env == {"TF_CPP_MIN_LOG_LEVEL": "2"}
    assert (from_yaml.tags, from_yaml.queue, from_yaml.retry_count) == (["mnist", "nightly"], "research", 1)
    assert from_yaml.am.memory_mb == 1024


def test_json_text_and_format_guessing(tmp_path):
    document = {"name": "j", "command": "run", "tasks": {"worker": {"instances": 3}}}
    (tmp_path / "job.json").write_text(json.dumps(document, indent=1))
    from_file = load_spec(tmp_path / "job.json")
    from_text = load_spec(json.dumps(document), fmt="json")
    assert from_file.tasks == from_text.tasks
    assert from_file.tasks["worker"].instances == 3
    assert from_text.source is None
    (tmp_path / "job.yml.j2").write_text("name: {{ n }}\ntasks: {worker: {}}\ncommand: run\n")
    templated = load_spec(tmp_path / "job.yml.j2", variables={"n": "t"})
    assert templated.name == "t"
    assert templated.tasks["worker"].instances == 1  # a listed task without instances runs once
    xml_text = "<configuration><property><name>tony.worker.instances</name><value>2</value></property></configuration>"
    assert load_spec(xml_text).tasks["worker"].instances == 2


def test_template_spec_with_variables():
    spec = load_spec(GOOD_SPECS / "mwms.yaml.j2", variables={"workers": 3})
    spec.validate()
    assert spec.name == "mnist-mwms-3"
    assert spec.tasks["worker"].instances == 3
    assert spec.command_for("worker") == "python3 train.py --epochs 3"
    assert spec.shell_env == {"HOME_COPY": os.environ.get("HOME", "")}


def test_values_become_strings():
    spec = spec_from_mapping({
        "tasks": {"worker": {"instances": 2, "gpus": 1, "docker_image": "tf:2"}},
        "conf": {"tony.application.fail-on-worker-failure-enabled": True, "tony.containers.resources": ["a", "b"]},
        "env": ["A=1", "B=2"], "tags": "x, y", "timeout": 60000})
    assert spec.conf["tony.worker.instances"] == "2"
    assert spec.conf["tony.application.fail-on-worker-failure-enabled"] == "true"
    assert spec.fail_on_worker_failure is True
    assert spec.container_resources == ["a", "b"]
    assert spec.container_env == {"A": "1", "B": "2"}
    assert spec.tags == ["x", "y"]
    assert spec.application_timeout_ms == 60000
    # Asking for an image in a task is asking for docker.
    assert spec.conf["tony.docker.enabled"] == "true"
    assert spec.tasks["worker"].docker_image == "tf:2"


def test_yaml_anchors_and_merge_keys():
    spec = load_spec("x-big: &big {memory: 8g, vcores: 4}\ncommand: run\n"
                     "tasks:\n  chief: {<<: *big, instances: 1}\n  worker: {<<: *big, instances: 3}\n")
    assert spec.tasks["chief"].resources == spec.tasks["worker"].resources == Resources(8192, 4, 0)
    assert not any(key.startswith("x-") for key in spec.conf)


def test_unknown_fields_suggest_the_close_one():
    with pytest.raises(SpecError) as info:
        spec_from_mapping({"framwork": "tensorflow", "tasks": {"worker": {"instance": 2}}, "am": {"cores": 1}},
                          source="job.yaml")
    keys = [issue.key for issue in info.value.issues]
    assert keys == ["framwork", "tasks.worker.instance", "am.cores"]
    message = str(info.value)
    assert "did you mean 'framework'?" in message and "did you mean 'instances'?" in message
    assert "job.yaml: framwork: unknown field" in message


def test_missing_file_names_it(tmp_path):
    error = errors_of(tmp_path / "nope.yaml")
    assert "no such file" in str(error) and "nope.yaml" in str(error)


# -- overrides ------------------------------------------------------------------------------------


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


# -- derived values ---------------------------------------------------------------------------------


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


def test_issue_and_error_text():
    issue = SpecIssue("tasks.worker.memory (tony.worker.memory)", "2x", "must be a positive size", "job.yaml")
    assert str(issue) == "job.yaml: tasks.worker.memory (tony.worker.memory): must be a positive size (got '2x')"
    assert str(SpecIssue("tasks", None, "no tracked task type")) == "tasks: no tracked task type"
    error = SpecError([issue, SpecIssue("a", 1, "b")])
    assert str(error).splitlines() == [str(issue), "a: b (got 1)"]
    assert isinstance(error, ValueError)


# -- validation -----------------------------------------------------------------------------------


def _expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    match = re.match(r"\s*(?:#|<!--)\s*expect:\s*(.*?)\s*(?:-->)?\s*$", first)
    assert match, f"{path.name} must start with an expect comment"
    return match.group(1)


def test_bad_corpus_is_large_and_mixed():
    assert len(BAD_SPECS) >= 30
    assert {p.suffix for p in BAD_SPECS} == {".yaml", ".xml"}


@pytest.mark.parametrize("path", BAD_SPECS, ids=lambda p: p.name)
def test_bad_spec_is_refused_with_a_named_key(path):
    message = str(errors_of(path))
    assert _expected(path) in message
    for line in message.splitlines():
        assert line.startswith(str(path)), line  # every issue names the file
        assert not line.startswith("Traceback") and not line.lstrip().startswith('File "'), line


def test_every_problem_is_reported_at_once(tmp_path):
    path = tmp_path / "many.yaml"
    path.write_text(
        "framework: caffe\n"
        "retries: -2\n"
        "env: [NOEQUALS]\n"
        "am: {memory: 1x}\n"
        "tasks:\n"
        "  chief: {instances: 1, restart_policy: task}\n"
        "  worker: {instances: two, memory: 2x, vcores: -1, gpus: 0.5}\n"
        "  ps: {instances: 1, command: serve}\n")
    error = errors_of(path)
    keys = [issue.key for issue in error.issues]
    for expected in ("framework (tony.application.framework)", "retries (tony.am.retry-count)",
                     "env (tony.containers.envs)", "am.memory (tony.am.memory)",
                     "tasks.worker.instances (tony.worker.instances)", "tasks.worker.memory (tony.worker.memory)",
                     "tasks.worker.vcores (tony.worker.vcores)", "tasks.worker.gpus (tony.worker.gpus)",
                     "tasks.chief.restart_policy (tony.chief.restart-policy)", "tony.chief.command"):
        assert expected in keys, (expected, keys)
    assert len(keys) == len(set(keys))
    assert "allowed: tensorflow, pytorch, horovod, mxnet, jax, standalone" in str(error)


def test_load_job_takes_a_mapping_and_a_base_directory(tmp_path, monkeypatch):
    from tony_workflow.spec import load_job

    monkeypatch.delenv("TONY_CONF_DIR", raising=False)
    (tmp_path / "src").mkdir()
    job = {"name": "m", "executes": "train.py", "src_dir": "src", "tasks": {"worker": {"instances": 2}}}
    spec = load_job(job, conf={"tony.worker.memory": "3g"}, base_dir=tmp_path, task_params="--epochs 1")
    spec.validate()
    assert spec.src_dir == str(tmp_path / "src")
    assert spec.tasks["worker"].resources.memory_mb == 3072 and spec.task_params == "--epochs 1"
    # The mapping is data, not a template: braces stay as written.
    assert load_job({**job, "task_params": "{{ x }}"}).task_params == "{{ x }}"
    # A field's relative path is resolved against the base directory too.
    assert load_job(job, base_dir=tmp_path, python_venv="venv.zip").python_venv == str(tmp_path / "venv.zip")


def test_a_spec_is_immutable_and_reads_each_field_once():
    import dataclasses

    spec = JobSpec(conf={"tony.worker.instances": "2"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.executes = "x.py"
    assert spec.tasks is spec.tasks  # parsed once, then kept
    changed = dataclasses.replace(spec, conf={**spec.conf, "tony.worker.instances": "3"})
    assert changed.tasks["worker"].instances == 3 and spec.tasks["worker"].instances == 2


def test_the_sites_local_cluster_keys_stay_out_of_jobs(tmp_path, local_site):
    from tony_workflow.spec import LocalSettings, load_job, local_settings

    conf_dir = local_site({"tony.local.memory": "3g", "tony.local.gpus": "2", "tony.am.retry-count": "4",
                           "tony.local.env-whitelist": "PATH,TEAM_*"})
    spec = load_job({"name": "s", "command": "true", "tasks": {"worker": {}}})
    spec.validate()  # the site's local keys do not make its jobs invalid...
    assert "tony.local.memory" not in spec.conf and spec.retry_count == 4  # ... nor become theirs
    settings = local_settings()
    assert (settings.capacity.memory_mb, settings.capacity.gpus) == (3072, (0, 1))
    assert settings.capacity.vcores is None and settings.capacity.oversubscription == 4.0  # defaults
    assert settings.inherited_env({"PATH": "/bin", "TEAM_X": "1", "AIRFLOW_CONN_DB": "s"}) == {"PATH": "/bin",
                                                                                             "TEAM_X": "1"}
    assert LocalSettings.from_dict(json.loads(json.dumps(settings.to_dict()))) == settings
    assert local_settings(tmp_path / "nowhere") == LocalSettings.from_conf({})
    assert local_settings(conf_dir) == settings
