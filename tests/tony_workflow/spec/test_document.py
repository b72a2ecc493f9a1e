"""Reading specs (:mod:`tony_workflow.spec.document`): TonY's own XML files, YAML and JSON, with line numbers and
the spellings users write."""
from __future__ import annotations

import json

import pytest

from tests.tony_workflow.spec.common import GOOD_SPECS, TONY_FIXTURES, errors_of, tony_fixture
from tony_workflow.spec import (
    FRAMEWORKS,
    TONY_DEFAULTS,
    Resources,
    SpecError,
    load_spec,
    load_tony_xml,
    spec_from_mapping,
)


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
    # The rest of the document is checked too: with its instances misspelled, the worker has no command.
    assert keys == ["framwork", "tasks.worker.instance", "am.cores", "tony.worker.command"]
    message = str(info.value)
    assert "did you mean 'framework'?" in message and "did you mean 'instances'?" in message
    assert "job.yaml: framwork: unknown field" in message
