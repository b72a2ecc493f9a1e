"""The one table of keys (:mod:`tony_workflow.spec.table`): every typed field of a JobSpec comes from
it, every key of it is checked with its own parser and bound, and the README's reference is the
table's own text."""
from __future__ import annotations

import pytest

from tests.conftest import REPO
from tony_workflow.spec import JobSpec, SpecError, load_job, table
from tony_workflow.spec.model import field_of


def test_the_readme_reference_is_the_tables_own():
    text = (REPO / "README.md").read_text()
    begin = text.index(table.README_BEGIN) + len(table.README_BEGIN) + 1
    section = text[begin:text.index(table.README_END)].rstrip("\n")
    assert section == table.reference_markdown(), (
        "the README's key reference is stale: run python -m tony_workflow.spec --readme README.md")


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
