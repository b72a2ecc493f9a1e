"""Which nodes a spread task type may use, and the AM's choice among them (``tony.<type>.spread``);
the mini cluster tests in ``test_yarn_reclaim.py`` show YARN honouring it."""
from __future__ import annotations

from tony_workflow.backends.yarn.spread import Placement, decode_hosts, encode_hosts, spread_hosts, spread_service


def node(host: str, avail_mb: int = 4096, used_mb: int = 0, vcores: int = 8, state: str = "RUNNING",
         label: str = "", gpus: int = 0) -> dict:
    return {"nodeHostName": host, "state": state, "availMemoryMB": avail_mb, "usedMemoryMB": used_mb,
            "availableVirtualCores": vcores, "usedVirtualCores": 0, "nodeLabels": [label] if label else [],
            "totalResource": {"resourceInformations": {"resourceInformation": [
                {"name": "yarn.io/gpu", "value": gpus}]}}}


def test_the_nodes_of_a_spread_type_are_the_running_ones_of_its_partition_that_fit_it_roomiest_first():
    nodes = [node("a", avail_mb=1000, used_mb=3000), node("b"), node("c", state="LOST"), node("d", label="gpu", gpus=2),
             node("e", avail_mb=512), node("f", avail_mb=2000, used_mb=2096)]
    assert spread_hosts(nodes, "", 1024, 1, 0, instances=4) == ["b", "f", "a"]  # e is too small in all
    assert spread_hosts(nodes, "gpu", 1024, 1, 1, instances=2) == ["d"]
    assert spread_hosts(nodes, "", 1024, 1, 1, instances=2) == []  # no GPU outside the gpu partition
    many = [node(f"h{i:02}") for i in range(20)]
    assert len(spread_hosts(many, "", 1024, 1, 0, instances=3)) == 6  # twice the tasks: spares for relaunches


def test_hosts_travel_in_the_environment_without_quotes():
    hosts = {"worker": ["10.0.0.1", "node-2.example.com"], "ps": ["10.0.0.3"]}
    text = encode_hosts(hosts)
    assert '"' not in text and decode_hosts(text) == hosts
    assert decode_hosts("") == {}


def test_each_task_goes_to_the_node_with_the_fewest_of_its_type():
    p = Placement({"worker": ["a", "b", "c"]})
    chosen = [p.choose(f"w{i}", "worker", {"I": str(i)}, now=0.0) for i in range(5)]
    assert [host for _, host in chosen] == ["a", "b", "c", "a", "b"]
    assert chosen[1][0] == spread_service("worker", 1) == "tony-worker-on-1"
    p.ended("w0")  # its node is free again: a relaunch goes there
    assert p.choose("w5", "worker", {}, now=0.0)[1] == "a"
    assert p.choose("x", "ps", {}, now=0.0) == ("tony-ps", None)  # not spread


def test_a_node_that_gives_no_container_in_time_is_avoided_and_the_task_asked_anywhere():
    p = Placement({"worker": ["a", "b"]}, wait_s=20.0)
    p.choose("w0", "worker", {"TONY_TASK_ID": "worker:0"}, now=0.0)
    p.choose("w1", "worker", {"TONY_TASK_ID": "worker:1"}, now=0.0)
    assert p.overdue("w0", waiting=False, now=5.0) is None   # running on a: settled
    assert p.overdue("w1", waiting=True, now=19.0) is None    # still within its wait
    gave_up = p.overdue("w1", waiting=True, now=21.0)
    assert gave_up.host == "b" and gave_up.env == {"TONY_TASK_ID": "worker:1"}
    assert p.overdue("w0", waiting=True, now=100.0) is None   # a running one never becomes overdue
    # b is avoided from now on; with a taken twice over, a third task still goes to a, the only node left.
    assert [p.choose(f"w{i}", "worker", {}, now=30.0)[1] for i in (2, 3)] == ["a", "a"]
    p2 = Placement({"worker": ["b"]})
    p2.choose("w0", "worker", {}, now=0.0)
    p2.overdue("w0", waiting=True, now=60.0)
    assert p2.choose("w1", "worker", {}, now=61.0) == ("tony-worker", None)  # no node left: anywhere
