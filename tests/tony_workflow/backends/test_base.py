"""What every backend shares (:mod:`tony_workflow.backends.base`): the gang a job asks for, the
node label each container carries, and the one check of what can never fit, naming the key."""
from __future__ import annotations

import pytest

from tony_workflow.backends.base import Capacity, ContainerRequest, NeverFits, check_fits, gang_requests, label_key
from tony_workflow.spec import load_job


def spec(conf: dict | None = None, **tasks):
    return load_job({"name": "g", "command": "true", "tasks": tasks or {"worker": {"instances": 2, "memory": "1g"},
                                                                         "ps": {"instances": 1}},
                     "conf": conf or {}})


def test_the_gang_is_the_am_then_every_task_in_type_order_with_its_label():
    reqs = gang_requests(spec({"tony.application.node-label": "cpu", "tony.am.node-label": "stable",
                               "tony.worker.node-label": "fast"}))
    assert [(r.task_id, r.memory_mb, r.node_label) for r in reqs] == [
        ("am", 2048, "stable"), ("worker:0", 1024, "fast"), ("worker:1", 1024, "fast"), ("ps:0", 2048, "cpu")]


def test_the_label_key_names_where_a_containers_label_came_from():
    s = spec({"tony.application.node-label": "cpu", "tony.worker.node-label": "fast"})
    assert label_key(s, "worker:1") == "tony.worker.node-label"
    assert label_key(s, "ps:0") == "tony.application.node-label"
    assert label_key(s, "am") == "tony.application.node-label"


NODE, CLUSTER = Capacity(4096, 8, 2), Capacity(3 * 4096, 24, 4)


def fits(*reqs: ContainerRequest) -> None:
    check_fits(list(reqs), NODE, CLUSTER, node="the largest NodeManager", cluster="the queue")


def test_a_gang_within_the_largest_node_and_the_whole_fits():
    fits(ContainerRequest("am", 1024, 1, 0), *(ContainerRequest(f"worker:{i}", 4096, 8, 1) for i in range(2)))


@pytest.mark.parametrize("reqs, key, says", [
    ([ContainerRequest("worker:0", 8192, 1, 0)], "tony.worker.memory",
     "worker:0 asks for 8192 MB but the largest NodeManager has 4096 MB"),
    ([ContainerRequest("am", 1024, 16, 0)], "tony.am.vcores", "am asks for 16 vcores but the largest NodeManager offers 8"),
    ([ContainerRequest(f"worker:{i}", 1024, 1, 2) for i in range(3)], "tony.worker.gpus",
     "the job needs 6 GPUs at once (worker 3×2) but the queue has 4 GPUs"),
    ([ContainerRequest("am", 2048, 1, 0), *(ContainerRequest(f"ps:{i}", 4096, 1, 0) for i in range(3))],
     "tony.ps.memory", "the job needs 14336 MB at once (am 1×2048, ps 3×4096) but the queue has 12288 MB"),
])
def test_what_can_never_fit_is_refused_naming_the_key_and_the_offer(reqs, key, says):
    with pytest.raises(NeverFits) as e:
        fits(*reqs)
    assert e.value.key == key and says in str(e.value)


def test_the_default_backend_is_tony_backend_else_the_sites_else_the_embedded_cluster(local_site):
    from tony_workflow.backends import default_backend
    from tony_workflow.errors import ConfigError
    assert default_backend({}) == "local" and default_backend({"TONY_BACKEND": " yarn "}) == "yarn"
    with pytest.raises(ConfigError, match="TONY_BACKEND='yran' names no backend: allowed are 'local' and 'yarn'"):
        default_backend({"TONY_BACKEND": "yran"})
    conf_dir = str(local_site({"tony.client.backend": "yarn", "tony.local.memory": "2g"}))
    assert default_backend({"TONY_CONF_DIR": conf_dir}) == "yarn"
    assert default_backend({"TONY_CONF_DIR": conf_dir, "TONY_BACKEND": "local"}) == "local"  # the variable wins
    bad = str(local_site({"tony.client.backend": "yran"}))
    with pytest.raises(ConfigError, match=r"tony.client.backend in .*tony-site.xml='yran' names no backend"):
        default_backend({"TONY_CONF_DIR": bad})


def test_the_history_server_is_tony_history_server_else_the_sites_else_none(local_site):
    from tony_workflow.backends import history_server
    from tony_workflow.errors import ConfigError
    assert history_server({}) is None
    assert history_server({"TONY_HISTORY_SERVER": " http://hs:19886/ "}) == "http://hs:19886"
    conf_dir = str(local_site({"tony.history.server-url": "https://history.example.com:8443/"}))
    assert history_server({"TONY_CONF_DIR": conf_dir}) == "https://history.example.com:8443"
    assert history_server({"TONY_CONF_DIR": conf_dir, "TONY_HISTORY_SERVER": "http://mine:1"}) == "http://mine:1"
    with pytest.raises(ConfigError, match="TONY_HISTORY_SERVER='hs:19886' is no address of a history server: "
                                          r"expected http\(s\)://host:port"):
        history_server({"TONY_HISTORY_SERVER": "hs:19886"})
    bad = str(local_site({"tony.history.server-url": "http://"}))
    with pytest.raises(ConfigError, match=r"tony.history.server-url in .*tony-site.xml='http://' is no address"):
        history_server({"TONY_CONF_DIR": bad})
