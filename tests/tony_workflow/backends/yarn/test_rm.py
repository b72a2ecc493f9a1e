"""The ResourceManager's REST API as the runtime reads it (:mod:`tony_workflow.backends.yarn.rm`): its
answers' shapes turned into amounts and reports, and, on the shared mini cluster, the reads and
refusals against a real ResourceManager (no job is run)."""
from __future__ import annotations

import pytest

from tony_workflow.backends.yarn.rm import AppReport, RMError, amounts, container_rm, node_totals


def test_amounts_read_memory_vcores_and_gpus():
    gpu = {"resourceInformations": {"resourceInformation": [{"name": "memory-mb", "value": 4096},
                                                            {"name": "yarn.io/gpu", "value": 2}]}}
    assert amounts({"memory": 4096, "vCores": 8, **gpu}) == (4096, 8, 2)
    assert amounts(None) == (0, 0, 0)
    node = {"usedMemoryMB": 1024, "availMemoryMB": 3072, "usedVirtualCores": 1, "availableVirtualCores": 7,
            "totalResource": {"memory": 4096, "vCores": 8, **gpu}}
    assert node_totals(node) == (4096, 8, 2)


def test_an_application_report_reads_yarns_fields():
    report = AppReport.from_json({
        "id": "application_1_0001", "name": "j", "user": "u", "queue": "default", "state": "RUNNING",
        "finalStatus": "UNDEFINED", "startedTime": 1500, "finishedTime": 0, "amRPCAddress": "N/A",
        "priority": 5, "applicationTags": "tony,team-a", "runningContainers": 3})
    assert (report.started_at, report.finished_at, report.am_rpc_address) == (1.5, None, None)
    assert report.tags == frozenset({"tony", "team-a"}) and report.priority == 5 and report.running_containers == 3
    assert AppReport.from_json({"id": "application_1_0002", "runningContainers": -1}).running_containers is None


def test_the_asks_the_resource_manager_holds_count_each_container_once():
    # One request per priority for any node ("*"), and the node and rack requests of the same
    # containers beside it: only the first kind counts.
    asks = [{"priority": 1, "resourceName": "*", "numContainers": 2},
            {"priority": 1, "resourceName": "node-1", "numContainers": 2},
            {"priority": 3, "resourceName": "*", "numContainers": 1},
            {"priority": 4, "resourceName": "*", "numContainers": 0}]
    assert AppReport.from_json({"id": "application_1_0001", "resourceRequests": asks}).asks == 3
    assert AppReport.from_json({"id": "application_1_0001", "resourceRequests": {"resourceRequest": asks}}).asks == 3
    assert AppReport.from_json({"id": "application_1_0001"}).asks == 0  # none listed: none held


@pytest.mark.yarn
def test_a_real_resource_manager_is_read_and_refuses_clearly(yarn_cluster):
    rm = container_rm()
    assert rm is not None
    nodes = rm.nodes()
    assert nodes and all(node_totals(n)[0] > 0 for n in nodes)
    default = rm.queue("default")
    assert default is not None and default.get("queueName") == "default"
    assert rm.queue("no-such-queue") is None
    assert rm.app("application_1_9999") is None
    assert isinstance(rm.apps(tags=("tony",), states=("RUNNING",)), list)
    with pytest.raises(RMError, match="refused PUT /apps/application_1_9999/state"):
        rm.kill("application_1_9999")
