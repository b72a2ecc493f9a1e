"""The embedded cluster's own settings (:mod:`tony_workflow.spec.site`), from ``tony-site.xml`` only:
typed, every bad one named at once, and what a job inherits from its submitter's environment."""
from __future__ import annotations

import pytest

from tony_workflow.spec import SpecError
from tony_workflow.spec.site import LocalSettings, local_settings


def test_without_a_site_file_the_machine_is_asked_and_the_defaults_hold(monkeypatch, tmp_path):
    monkeypatch.setenv("TONY_CONF_DIR", str(tmp_path))
    s = local_settings()
    assert (s.capacity.memory_mb, s.capacity.vcores, s.capacity.gpus) == (None, None, None)
    assert s.capacity.oversubscription == 4 and s.fork_server and s.retention_s == 7 * 86400
    assert s.pmem_check and s.monitor_interval_ms == 3000  # YARN's defaults


def test_a_site_file_sizes_the_machine(local_site):
    local_site({"tony.local.memory": "6g", "tony.local.vcores": "3", "tony.local.gpus": "0,2",
                "tony.local.fork-server": "false", "tony.local.retention-sec": "0",
                "tony.local.pmem-check-enabled": "false", "tony.local.container-monitor-interval-ms": "500"})
    s = local_settings()
    assert (s.capacity.memory_mb, s.capacity.vcores, s.capacity.gpus) == (6144, 3, (0, 2))
    assert not s.fork_server and s.retention_s == 0
    assert not s.pmem_check and s.monitor_interval_ms == 500
    assert LocalSettings.from_dict(s.to_dict()) == s
    assert LocalSettings.from_conf({"tony.local.gpus": "2"}).capacity.gpus == (0, 1)


def test_every_bad_setting_is_named_at_once_with_a_close_key_suggested(local_site):
    local_site({"tony.local.memory": "lots", "tony.local.vcore-oversubscribe": "2",
                "tony.local.env-whitelist": "PATH,BAD-NAME", "tony.local.container-monitor-interval-ms": "5"})
    with pytest.raises(SpecError) as e:
        local_settings()
    text = str(e.value)
    assert "tony.local.memory" in text and "'lots'" in text
    assert "did you mean tony.local.vcore-oversubscription?" in text
    assert "BAD-NAME" in text and "tony-site.xml" in text
    assert "tony.local.container-monitor-interval-ms" in text and ">= 100" in text


def test_a_job_inherits_only_the_whitelisted_part_of_its_submitters_environment():
    s = LocalSettings.from_conf({"tony.local.env-whitelist": "PATH,TONY_*"})
    env = {"PATH": "/bin", "TONY_HOME": "/t", "AIRFLOW_CONN_DB": "postgres://secret", "TONYX": "no"}
    assert s.inherited_env(env) == {"PATH": "/bin", "TONY_HOME": "/t"}
