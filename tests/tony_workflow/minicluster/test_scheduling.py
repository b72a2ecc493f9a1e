"""The mini cluster's scheduling options as Hadoop settings (:mod:`tony_workflow.minicluster.scheduling`),
without starting it: preemption's two queues, exclusive node labels, priorities, node expiry, and the
options refused before any JVM starts."""
from __future__ import annotations

from pathlib import Path

import pytest

from tony_workflow.minicluster.build import MiniClusterError
from tony_workflow.minicluster.scheduling import Scheduling, parse_node_labels

CS = "yarn.scheduler.capacity.root"


def test_node_labels_are_given_as_label_equals_index():
    assert parse_node_labels("gpu=1, gpu=2,big=0") == {"gpu": [1, 2], "big": [0]}
    assert parse_node_labels("") == {}
    with pytest.raises(MiniClusterError, match="LABEL=INDEX"):
        parse_node_labels("gpu:1")


def test_a_plain_cluster_has_one_queue_and_no_extra_settings():
    s = Scheduling()
    s.check(1)
    assert s.queues == {"default": {"capacity": 100, "maximum_capacity": 100}}
    assert s.server_settings(Path("/tmp/mc")) == {} and s.client_settings() == {}


def test_preemption_splits_the_cluster_between_two_queues_and_turns_the_monitor_on():
    s = Scheduling(preemption=True)
    settings = s.server_settings(Path("/tmp/mc"))
    assert settings["yarn-site.xml"]["yarn.resourcemanager.scheduler.monitor.enable"] is True
    cs = settings["capacity-scheduler.xml"]
    assert cs[f"{CS}.queues"] == "default,urgent"
    assert (cs[f"{CS}.urgent.capacity"], cs[f"{CS}.urgent.maximum-capacity"]) == (50, 100)
    assert s.client_settings() == {"capacity-scheduler.xml": cs}


def test_labels_priority_and_expiry_reach_the_resource_manager(tmp_path):
    s = Scheduling(node_labels={"gpu": [1]}, max_priority=10, node_expiry_s=5, distinct_hosts=True)
    s.check(2)
    yarn = s.server_settings(tmp_path)["yarn-site.xml"]
    assert yarn["yarn.node-labels.enabled"] is True and yarn["yarn.cluster.max-application-priority"] == 10
    assert yarn["yarn.nm.liveness-monitor.expiry-interval-ms"] == 5000
    assert yarn["yarn.node-labels.fs-store.root-dir"].startswith(tmp_path.as_uri())
    assert s.describe()["node_labels"] == {"gpu": [1]}


@pytest.mark.parametrize("options, nodemanagers, says", [
    ({"max_priority": -1}, 1, "max_priority must be an integer >= 0"),
    ({"node_expiry_s": 1}, 1, "node_expiry_s must be at least 3 seconds"),
    ({"node_labels": {"-bad": [0]}}, 2, "a node label is letters"),
    ({"node_labels": {"gpu": [3]}}, 2, "numbered 0 to 1"),
    ({"node_labels": {"a": [0], "b": [0]}}, 2, "cannot carry both"),
    ({"node_labels": {"gpu": [0, 1]}}, 2, "leaving none for ApplicationMasters"),
])
def test_options_yarn_would_refuse_are_refused_first(options, nodemanagers, says):
    with pytest.raises(MiniClusterError, match=says):
        Scheduling(**options).check(nodemanagers)
