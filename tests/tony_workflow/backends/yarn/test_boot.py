"""A task container asked for before its AM ran (:mod:`tony_workflow.backends.yarn.boot`) waits for
its launch order in skein's key-value store, under its own container's id. The whole path, on the
mini cluster, is every YARN job test's first session."""
from __future__ import annotations

import json

from tony_workflow.backends.yarn.boot import launch_order


class KV:
    def __init__(self, values: dict[str, bytes]):
        self.values, self.asked = values, []

    def wait(self, key):
        self.asked.append(key)
        return self.values[key]


def test_the_launch_order_is_the_tasks_environment_under_the_containers_own_key():
    kv = KV({"tony.launch.tony-worker_1": json.dumps({"TONY_TASK_ID": "worker:1", "SESSION_ID": "0"}).encode(),
             "tony.launch.tony-worker_0": b"{}"})
    assert launch_order(kv, "tony-worker_1") == {"TONY_TASK_ID": "worker:1", "SESSION_ID": "0"}
    assert kv.asked == ["tony.launch.tony-worker_1"]
