"""YARN names both sides of the YARN backend share (:mod:`tony_workflow.backends.yarn.containers`):
services, skein's master as a request, the causes of containers YARN took back, the job's HDFS
directory."""
from __future__ import annotations

import pytest

from tony_workflow.backends.yarn.containers import (
    app_store,
    decode_asked,
    encode_asked,
    first_container,
    launch_key,
    master_request,
    reclaim_cause,
    service_name,
)
from tony_workflow.spec import load_job


def test_a_task_type_is_a_service_and_skeins_master_counts_with_the_am():
    assert service_name("worker") == "tony-worker"
    spec = load_job({"name": "y", "command": "true", "tasks": {"worker": {"instances": 1}},
                     "conf": {"tony.application.node-label": "gpu"}})
    master = master_request(spec)
    assert master.task_id == "am" and master.node_label == "gpu" and master.gpus == 0 and master.memory_mb > 0


@pytest.mark.parametrize("message, cause", [
    ("Container preempted by scheduler", "preempted by the scheduler"),
    ("Container released on a *lost* node", "lost with its node"),
    ("Container released on a lost node", "lost with its node"),
    ("Node is being decommissioned", "lost: its node was decommissioned"),
    ("Disk failure: 1/1 local-dirs are bad", "lost: its node's disks failed"),
    ("Exception from container-launch: exit code 1", None),
    ("", None),
])
def test_what_yarn_took_back_is_told_from_what_failed(message, cause):
    assert reclaim_cause(message) == cause


def test_the_jobs_hdfs_directory_is_under_the_users_home(monkeypatch):
    monkeypatch.setenv("HADOOP_USER_NAME", "etl")
    assert app_store("application_1_0001") == "hdfs:///user/etl/.tony/application_1_0001"


def test_tasks_asked_for_before_the_am_are_named_shortly_and_found_as_their_services_first_containers():
    asked = ["ps:0", "worker:0", "worker:1", "worker:2"]
    assert encode_asked(asked) == "ps*1;worker*3"
    assert decode_asked(encode_asked(asked)) == asked
    assert decode_asked("") == [] and encode_asked([]) == ""
    # A thousand tasks still fit in a line of a few characters.
    assert len(encode_asked([f"worker:{i}" for i in range(1000)])) < 20
    assert first_container("worker:2") == "tony-worker_2"
    assert launch_key(first_container("ps:0")) == "tony.launch.tony-ps_0"


@pytest.mark.parametrize("diagnostics, status", [
    (("Container [pid=4711,containerID=container_1_0001_01_000002] is running 176128000B beyond the 'PHYSICAL' "
     "memory limit. Current usage: 1.2 GB of 1 GB physical memory used; 2.3 GB of 2.1 GB virtual memory used. "
     "Killing container.\nContainer killed on request. Exit code is 143"), -104),
    (("Container [pid=1,containerID=c] is running beyond virtual memory limits. Current usage: 100 MB of 1 GB "
     "physical memory used; 2.2 GB of 2.1 GB virtual memory used. Killing container."), -103),
    # What skein gives of a container Hadoop 3.5's monitor killed: the usage alone.
    ("646.4 MB of 256 MB physical memory used", -104),
    ("100 MB of 1 GB physical memory used; 2.2 GB of 2.1 GB virtual memory used", -103),
    ("Exception from container-launch.\nContainer id: c\nExit code: 127\n", 127),
    ("[2026-11-28 16:29:09.501]Incomplete HDFS URI, no host: hdfs:/data/one.jar", 1),
])
def test_a_failed_containers_status_is_read_from_yarns_diagnostics(diagnostics, status):
    from tony_workflow.backends.yarn.containers import container_exit_status
    assert container_exit_status(diagnostics) == status
