"""Loading a job (:mod:`tony_workflow.spec.loading`): templates, files, mappings, base directories, the site."""
from __future__ import annotations

import json
import os

from tests.tony_workflow.spec.common import GOOD_SPECS, errors_of
from tony_workflow.spec import (
    load_spec,
)


def test_template_spec_with_variables():
    spec = load_spec(GOOD_SPECS / "mwms.yaml.j2", variables={"workers": 3})
    spec.validate()
    assert spec.name == "mnist-mwms-3"
    assert spec.tasks["worker"].instances == 3
    assert spec.command_for("worker") == "python3 train.py --epochs 3"
    assert spec.shell_env == {"HOME_COPY": os.environ.get("HOME", "")}


def test_missing_file_names_it(tmp_path):
    error = errors_of(tmp_path / "nope.yaml")
    assert "no such file" in str(error) and "nope.yaml" in str(error)


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


def test_the_sites_local_cluster_keys_stay_out_of_jobs(tmp_path, local_site):
    from tony_workflow.spec import LocalSettings, load_job, local_settings

    conf_dir = local_site({"tony.local.memory": "3g", "tony.local.gpus": "2", "tony.am.retry-count": "4",
                           "tony.local.env-whitelist": "PATH,TEAM_*", "tony.client.backend": "local",
                           "tony.history.server-url": "http://hs:19886"})
    spec = load_job({"name": "s", "command": "true", "tasks": {"worker": {}}})
    spec.validate()  # the site's local and client keys do not make its jobs invalid...
    assert "tony.local.memory" not in spec.conf and spec.retry_count == 4  # ... nor become theirs
    assert "tony.client.backend" not in spec.conf and "tony.history.server-url" not in spec.conf
    settings = local_settings()
    assert (settings.capacity.memory_mb, settings.capacity.gpus) == (3072, (0, 1))
    assert settings.capacity.vcores is None and settings.capacity.oversubscription == 4.0  # defaults
    assert settings.inherited_env({"PATH": "/bin", "TEAM_X": "1", "AIRFLOW_CONN_DB": "s"}) == {"PATH": "/bin",
                                                                                             "TEAM_X": "1"}
    assert LocalSettings.from_dict(json.loads(json.dumps(settings.to_dict()))) == settings
    assert local_settings(tmp_path / "nowhere") == LocalSettings.from_conf({})
    assert local_settings(conf_dir) == settings
