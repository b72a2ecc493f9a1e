"""The mini cluster's NodeManagers as its ``cluster.json`` lists them (:mod:`tony_workflow.minicluster.nodes`).
Stopping one on a running cluster is tests/tony_workflow/jobs/test_yarn_reclaim.py."""
from __future__ import annotations

import pytest

from tony_workflow.minicluster.build import MiniClusterError
from tony_workflow.minicluster.nodes import nodemanager_of

INFO = {"nodes": [{"index": 0, "node_id": "127.0.0.1:40001", "http_address": "127.0.0.1:8042"},
                  {"index": 1, "node_id": "127.0.0.2:40002", "http_address": "127.0.0.2:8042"}]}


def test_a_node_manager_is_found_by_its_node_id_or_its_web_address():
    assert nodemanager_of(INFO, "127.0.0.2:40002") == 1
    assert nodemanager_of(INFO, "127.0.0.1:8042") == 0


def test_an_address_of_no_node_manager_is_refused_listing_them():
    with pytest.raises(MiniClusterError, match="no NodeManager of this cluster is at 10.0.0.1:1"):
        nodemanager_of(INFO, "10.0.0.1:1")
