"""The one table of keys (:mod:`tony_workflow.spec.table`): every typed field of a JobSpec comes from
it, every key of it is checked with its own parser and bound, and the key reference (docs/reference.md) is the
table's own text."""
from __future__ import annotations

import pytest

from tests.conftest import REPO
from tony_workflow.spec import JobSpec, SpecError, load_job, table
from tony_workflow.spec.model import field_of


def test_the_readme_reference_is_the_tables_own():
    text = (REPO / "docs" / "reference.md").read_text()
    begin = text.index(table.README_BEGIN) + len(table.README_BEGIN) + 1
    section = text[begin:text.index(table.README_END)].rstrip("\n")
    assert section == table.reference_markdown(), (
        "the key reference is stale: run python -m tony_workflow.spec --readme docs/reference.md")


def test_every_field_of_the_spec_reads_a_key_of_the_table():
    fields = {name: f for name, f in vars(JobSpec).items() if isinstance(f, field_of)}
    assert len(fields) >= 30
    assert all(f.key in table.KEYS for f in fields.values())
    assert len({f.key.name for f in fields.values()}) == len(fields)  # no key read twice


def test_a_field_holds_the_tables_default_until_the_job_sets_it():
    spec = load_job({"name": "t", "command": "true", "tasks": {"worker": {"instances": 1}}})
    assert (spec.gang_hold_timeout_ms, spec.am_max_attempts, spec.tensorboard_enabled) == (60000, 2, True)
    assert spec.checkpoint_location is None and spec.docker_mounts == []
    spec = load_job({"name": "t", "command": "true", "tasks": {"worker": {"instances": 1}},
                     "conf": {"tony.gang.hold-timeout-ms": "0", "tony.docker.mounts": "/d:/d:ro,/e:/e:rw"}})
    assert spec.gang_hold_timeout_ms == 0 and spec.docker_mounts == ["/d:/d:ro", "/e:/e:rw"]


@pytest.mark.parametrize("key", [k for k in table.KEYS if k.minimum is not None], ids=lambda k: k.name)
def test_a_value_under_a_keys_bound_is_refused_naming_the_key_and_the_bound(key):
    with pytest.raises(SpecError) as e:
        load_job({"name": "t", "command": "true", "tasks": {"worker": {"instances": 1}},
                  "conf": {key.name: str(key.minimum - 1)}}).validate()
    assert key.name in str(e.value) and str(key.minimum) in str(e.value)


@pytest.mark.parametrize("key", [k for k in table.KEYS if k.kind == "boolean"], ids=lambda k: k.name)
def test_a_boolean_key_takes_only_a_boolean(key):
    with pytest.raises(SpecError) as e:
        load_job({"name": "t", "command": "true", "tasks": {"worker": {"instances": 1}},
                  "conf": {key.name: "maybe"}}).validate()
    assert key.name in str(e.value) and "'maybe'" in str(e.value)


def test_the_defaults_and_the_did_you_mean_list_come_from_the_table():
    assert all(table.TONY_DEFAULTS[k.name] == k.effective_default for k in table.KEYS if k.project)
    assert {k.name for k in table.KEYS} <= set(table.known_keys(set()))
    assert table.unknown_key("tony.gang.hold-timeout-ms", set()) is None
    assert "not a key of TonY or of tony-workflow" in table.unknown_key("tony.gang.hold-timeout", set())


def test_the_command_rewrites_only_the_readmes_generated_section(tmp_path):
    import subprocess
    import sys

    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nbefore\n{table.README_BEGIN}\nstale\n{table.README_END}\n\nafter\n")
    subprocess.run([sys.executable, "-m", "tony_workflow.spec", "--readme", str(readme)], check=True)
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n") and text.endswith(f"{table.README_END}\n\nafter\n")
    assert "stale" not in text and table.reference_markdown() in text
    printed = subprocess.run([sys.executable, "-m", "tony_workflow.spec"], capture_output=True, text=True, check=True)
    assert printed.stdout.strip() == table.reference_markdown().strip()


def pytorch_job(worker: dict) -> dict:
    return {"name": "j", "framework": "pytorch", "command": "true", "tasks": {"worker": {"instances": 2, **worker}}}


@pytest.mark.parametrize("setting", [k for k in table.TASK_KEYS if k.checked and k.kind != "text"],
                         ids=lambda k: k.name)
def test_every_per_type_key_the_table_checks_refuses_a_bad_value_naming_the_key(setting):
    with pytest.raises(SpecError) as e:
        load_job({**pytorch_job({}), "conf": {setting.key("worker"): "not-a-value"}}).validate()
    assert setting.key("worker") in str(e.value) and "not-a-value" in str(e.value)


def test_every_yaml_name_of_the_per_type_table_sets_its_key_and_the_model_reads_it():
    samples = {"instances": "3", "memory": "1g", "vcores": "2", "gpus": "0", "command": "echo hi",
               "node-label": "big", "restart-policy": "session", "timeout": "5000", "spread": "true",
               "processes": "2", "min-instances": "2"}
    named = [k for k in table.TASK_KEYS if k.yaml]
    assert {k.name for k in named} == set(samples)  # a new key of the table gets a sample here
    spec = load_job(pytorch_job({k.yaml: samples[k.name] for k in named}))
    spec.validate()
    for k in named:
        assert spec.get(k.key("worker")) == samples[k.name], k.name
    worker = spec.tasks["worker"]
    assert (worker.instances, worker.resources.memory_mb, worker.resources.vcores, worker.node_label,
            worker.timeout_ms, worker.spread, worker.processes, worker.min_instances) == (
        3, 1024, 2, "big", 5000, True, 2, 2)


def test_the_reference_lists_every_per_type_key_with_its_yaml_name():
    text = table.reference_markdown()
    for k in table.TASK_KEYS:
        assert f"| `{k.name}` | {f'`{k.yaml}`' if k.yaml else '—'} |" in text
