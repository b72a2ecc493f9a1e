"""TonY's keys this project does not honour (:mod:`tony_workflow.spec.unhonoured`): every key of
TonY's tony-default.xml is read here or listed there, and a job that sets a listed key is refused
or warned, naming it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.tony_workflow.spec.common import tony_fixture
from tony_workflow.spec import SpecError, load_job, load_tony_xml, table
from tony_workflow.spec.unhonoured import NOT_HONOURED, not_honoured, refusals, warnings

# TonY's keys the model reads by name, outside the key table (what the job is: its name, framework,
# queue, AM, task types) and TonY's descriptive version keys; each must appear in the code.
READ_BY_NAME = {"tony.history.location", "tony.keytab.user", "tony.keytab.location", "tony.application.name", "tony.application.framework", "tony.application.type", "tony.yarn.queue",
                "tony.am.memory", "tony.am.vcores", "tony.am.gpus", "tony.am.retry-count",
                "tony.application.untracked.jobtypes", "tony.application.stop-on-failure-jobtypes",
                "tony.horovod.mode.test", "tony.horovod.mode.test.fast.fail", "tony.horovod.driver.mode.debug"}
TASK_KEY = re.compile(r"^tony\.[a-z][a-z0-9_-]*\.([a-z][a-z0-9_.-]*)$")


def job(**conf: str) -> dict:
    return {"name": "keys", "command": "true", "tasks": {"worker": {"instances": 1}}, "conf": conf}


def test_every_key_of_tony_default_xml_is_read_here_or_said_not_to_be():
    code = "\n".join(p.read_text() for p in (REPO / "tony_workflow").rglob("*.py"))
    for key in load_tony_xml(tony_fixture("tony-default.xml")):
        field = TASK_KEY.match(key)
        honoured = (key in {k.name for k in table.KEYS} or key in READ_BY_NAME
                    or (field is not None and field.group(1) in table.TASK_FIELDS)
                    or key.startswith("tony.version-info."))
        assert honoured != (not_honoured(key) is not None), key
    for key in READ_BY_NAME:
        assert f'"{key}"' in code, key


def test_a_key_that_would_change_the_job_is_refused_naming_it_and_why():
    with pytest.raises(SpecError) as e:
        load_job(job(**{"tony.application.distributed-mode": "FCFS", "tony.other.namenodes": "hdfs://other",
                        "tony.application.placement-spec": "worker,notin,node_0"})).validate()
    message = str(e.value)
    assert "tony.application.distributed-mode: not done by this project: only GANG" in message
    assert "tony.other.namenodes: not done by this project" in message
    # One of TonY's keys that tony-default.xml does not list: refused for what it is, not as a typo.
    assert "tony.application.placement-spec: not done by this project: YARN placement constraints" in message
    assert "unknown key" not in message
    # At TonY's default, or left unset, nothing is said.
    spec = load_job(job(**{"tony.application.distributed-mode": "gang", "tony.am.startup-timeout": "0"}))
    spec.validate()
    assert refusals(spec.conf) == [] and warnings(spec.conf) == []


def test_a_key_of_another_part_of_tony_is_accepted_with_a_warning_naming_it():
    spec = load_job(job(**{"tony.history.finished": "/tony/history", "tony.task.executor.jvm.opts": "-Xmx4g",
                           "tony.worker.resources": "hdfs:///data/vocab.txt"}))
    spec.validate()
    # Resources are given to the containers (spec/resources.py): no word on them.
    assert sorted(w.split(" has no effect")[0] for w in spec.warnings) == [
        "tony.history.finished='/tony/history'", "tony.task.executor.jvm.opts='-Xmx4g'"]
    assert any(w.startswith("tony.history.finished=") and "TonY's history server" in w for w in spec.warnings)


def test_a_whole_tony_final_xml_runs_with_a_word_on_what_it_sets_that_has_no_effect():
    conf = load_tony_xml(tony_fixture("tony-final-typical.xml"))
    assert refusals(conf) == []
    assert all(w.startswith(tuple(n.key.split("<")[0] for n in NOT_HONOURED)) for w in warnings(conf))


def test_the_readme_lists_them_from_the_code():
    text = Path(REPO / "docs" / "reference.md").read_text()
    for n in NOT_HONOURED:
        assert f"| `{n.key}` | {'refused' if n.refused else 'warning'} |" in text, n.key
