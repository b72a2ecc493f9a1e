"""The executor's part in a Horovod job's driver task (:mod:`tony_workflow.task.horovod`): what the
driver is told, and the wait for its announcement (the driver itself: test_horovod_driver.py)."""
from __future__ import annotations

from tony_workflow.horovod_driver import PORT_FILE_SUFFIX
from tony_workflow.task.horovod import driver_env


def test_the_driver_gets_the_workers_hosts_and_an_empty_place_to_announce_in(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / f"1{PORT_FILE_SUFFIX}").write_text("[]")  # an earlier attempt's
    env = driver_env({"driver": ["d:1"], "worker": ["a:1", "a:2", "b:3"], "ps": ["b:4"]}, tmp_path / "out")
    assert env == {"CLUSTER_WORKER_LIST": "a:2,b:2", "DRIVER_OUTPUT_PATH": str(tmp_path / "out")}
    assert list((tmp_path / "out").iterdir()) == []
