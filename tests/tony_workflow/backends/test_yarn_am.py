"""YARN, the AM's side (:mod:`tony_workflow.backends.yarn_am`), driven directly on the shared mini
cluster: a plain skein application stands in for a job's (no AM, no executor), and the cluster
manager adds, watches and kills its containers, publishes the AM's endpoint, reports progress and
ends the application. Whole TonY jobs on YARN are tests/tony_workflow/jobs/test_yarn_*.py."""
from __future__ import annotations

import contextlib
import os
import threading

import pytest

from tests.conftest import wait_for
from tony_workflow import hadoop
from tony_workflow.backends.base import ContainerRequest
from tony_workflow.backends.driver import shared_driver
from tony_workflow.backends.rm import container_rm
from tony_workflow.backends.yarn_am import YarnClusterManager
from tony_workflow.backends.yarn_containers import KV_ADDRESS, KV_TOKEN, service_name

pytestmark = pytest.mark.yarn


@pytest.fixture
def app(yarn_cluster):
    """A running skein application with a worker service of no instances, as a job's would be."""
    import skein

    conf_dir = os.environ["HADOOP_CONF_DIR"]
    client = shared_driver(hadoop.read_conf(conf_dir), conf_dir)
    worker = skein.Service(resources=skein.Resources(memory=256, vcores=1),
                           script='echo "task $TONY_TASK_ID"; exec sleep 300', instances=0, max_restarts=0,
                           allow_failures=True)
    spec = skein.ApplicationSpec(name="yarn-am-unit", queue="default", tags={"tony-unit"},
                                 services={service_name("worker"): worker},
                                 master=skein.Master(resources=skein.Resources(memory=256, vcores=1),
                                                     script="exec sleep 600"))
    app_id = client.submit(spec)
    app = client.connect(app_id, wait=True)
    yield app_id, app
    with contextlib.suppress(Exception):  # already ended by the test
        client.kill_application(app_id)


def test_task_containers_are_added_watched_and_killed(app):
    _, client = app
    cluster = YarnClusterManager(app_client=client)
    [c] = cluster.allocate([ContainerRequest("worker:0", 256, 1, 0)], threading.Event())
    assert c.task_id == "worker:0" and not cluster.granted(c)
    cluster.launch(c, ["ignored"], {"TONY_TASK_ID": "worker:0"})
    wait_for(lambda: cluster.granted(c) and cluster.log_url(c), timeout=120, interval=1)
    assert cluster.poll(c) is None and "/node/containerlogs/" in cluster.log_url(c)
    cluster.kill(c)
    assert wait_for(lambda: cluster.poll(c), timeout=60, interval=1) == 137
    assert cluster.reclaimed(c) is None  # killed by its AM, not taken back by YARN


def test_the_endpoint_is_published_progress_reported_and_the_application_ended(app):
    app_id, client = app
    cluster = YarnClusterManager(app_client=client)
    tracking = cluster.publish_endpoint("10.0.0.5:4321", "secret", "view", "http://10.0.0.5:4321/ui/view")
    assert client.kv[KV_ADDRESS] == b"10.0.0.5:4321" and client.kv[KV_TOKEN] == b"secret"
    assert tracking.startswith("http") and app_id.split("_", 1)[1] in tracking  # behind the RM's proxy
    cluster.report_progress(0.25)
    rm = container_rm()
    wait_for(lambda: float(rm._json("GET", f"/apps/{app_id}")["app"]["progress"]) >= 25.0, timeout=60, interval=1)
    cluster.finish("SUCCEEDED", "done")
    report = wait_for(lambda: (r := rm.app(app_id)) and r.state == "FINISHED" and r, timeout=120, interval=1)
    assert report.final_status == "SUCCEEDED"
