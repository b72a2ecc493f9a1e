"""A simulated ResourceManager REST API, for measuring what waiting jobs ask of a large cluster.

It answers the endpoints the runtime reads (``/ws/v1/cluster/apps``, ``/apps/{id}``, ``/nodes``,
``/scheduler``, ``/metrics``) with the real API's shapes: each answer is built from an answer of a
real Hadoop 3.5.0 ResourceManager (``rm_shapes.json``, captured from the mini cluster), repeated
for as many nodes, queues and applications as asked, with the filters the runtime uses
(``applicationTags``, ``states``, ``queue``, ``deSelects``; ``states`` of nodes). It counts every
request and the bytes of every answer. It schedules nothing: the cluster stays as it is set.
"""
from __future__ import annotations

import copy
import json
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from counting import Counted

SHAPES = json.loads((Path(__file__).with_name("rm_shapes.json")).read_text())
_DESELECTABLE = {"resourceRequests": "resourceRequests", "timeouts": "timeouts", "resourceInfo": "resourceInfo",
                 "appNodeLabelExpression": "appNodeLabelExpression",
                 "amNodeLabelExpression": "amNodeLabelExpression"}


def _resource(mb: int, vcores: int, gpus: int = 0) -> dict[str, Any]:
    infos = [{"maximumAllocation": 9223372036854775807, "minimumAllocation": 0, "name": n, "resourceType": "COUNTABLE",
              "units": u, "value": v} for n, u, v in (("memory-mb", "Mi", mb), ("vcores", "", vcores),
                                                      ("yarn.io/gpu", "", gpus))]
    return {"memory": mb, "vCores": vcores, "resourceInformations": {"resourceInformation": infos}}


class SimRM(Counted):
    """A cluster of ``nodes`` NodeManagers of ``node_mb`` MB and ``node_vcores`` vcores, each with
    ``free_mb`` free, and ``queues`` leaf queues of ``queue_max_mb`` each with ``queue_used_mb``
    used; TonY applications are added with :meth:`add_app`."""

    def __init__(self, nodes: int, queues: list[str], *, node_mb: int = 65536, node_vcores: int = 64,
                 free_mb: int = 0, queue_max_mb: int = 1 << 20, queue_used_mb: int = 1 << 20):
        super().__init__()
        self.apps: dict[str, dict[str, Any]] = {}
        self._nodes = self._node_list(nodes, node_mb, node_vcores, free_mb)
        self._scheduler = json.dumps(self._scheduler_doc(queues, queue_max_mb, queue_used_mb)).encode()
        self._metrics = json.dumps(SHAPES["metrics"]).encode()

    # ------------------------------------------------------------------ the cluster
    @staticmethod
    def _node_list(n: int, node_mb: int, node_vcores: int, free_mb: int) -> dict[str, bytes]:
        entries = []
        for i in range(n):
            node = copy.deepcopy(SHAPES["node"])
            host = f"nm-{i:05d}.example.com"
            node.update(id=f"{host}:8041", nodeHostName=host, nodeHTTPAddress=f"{host}:8042", state="RUNNING",
                        availMemoryMB=free_mb, usedMemoryMB=node_mb - free_mb,
                        availableVirtualCores=node_vcores // 2, usedVirtualCores=node_vcores - node_vcores // 2,
                        numContainers=4, availableResource=_resource(free_mb, node_vcores // 2),
                        usedResource=_resource(node_mb - free_mb, node_vcores - node_vcores // 2),
                        totalResource=_resource(node_mb, node_vcores))
            entries.append(node)
        running = json.dumps({"nodes": {"node": entries}}).encode()
        return {"": running, "RUNNING": running}

    @staticmethod
    def _scheduler_doc(queues: list[str], max_mb: int, used_mb: int) -> dict[str, Any]:
        doc = copy.deepcopy(SHAPES["scheduler"])
        info = doc["scheduler"]["schedulerInfo"]
        template = info["queues"]["queue"][0]
        leaves = []
        for name in queues:
            q = copy.deepcopy(template)
            q.update(queueName=name, queuePath=f"root.{name}")
            q["capacities"]["queueCapacitiesByPartition"][0]["effectiveMaxResource"] = _resource(max_mb, max_mb // 1024)
            q["resources"]["resourceUsagesByPartition"][0]["used"] = _resource(used_mb, used_mb // 2048)
            leaves.append(q)
        info["queues"] = {"queue": leaves}
        return doc

    def add_app(self, app_id: str, queue: str, tags: list[str], *, state: str = "RUNNING", containers: int = 1,
                started: float | None = None) -> None:
        app = copy.deepcopy(SHAPES["app_waiting"])
        app.update(id=app_id, queue=f"root.{queue}", state=state, applicationTags=",".join(tags),
                   runningContainers=containers, priority=0, name=f"job-{app_id[-4:]}",
                   startedTime=int((started or time.time()) * 1000), finalStatus="UNDEFINED")
        with self.lock:
            self.apps[app_id] = app

    # ------------------------------------------------------------------ answering
    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, bytes, str]:
        """(HTTP status, body, endpoint name) of a GET of ``path``."""
        prefix = "/ws/v1/cluster"
        if not path.startswith(prefix):
            return 404, b"{}", "other"
        path = path[len(prefix):]
        if path == "/nodes":
            states = (query.get("states") or [""])[0]
            return 200, self._nodes.get(states, self._nodes[""]), "nodes"
        if path == "/scheduler":
            return 200, self._scheduler, "scheduler"
        if path == "/metrics":
            return 200, self._metrics, "metrics"
        if path == "/apps":
            return 200, json.dumps({"apps": {"app": self._apps(query)}}).encode(), "apps"
        if path.startswith("/apps/"):
            with self.lock:
                app = self.apps.get(path.split("/")[2])
            if app is None:
                return 404, b'{"RemoteException": {"message": "not found"}}', "app"
            return 200, json.dumps({"app": app}).encode(), "app"
        return 404, b"{}", "other"

    def _apps(self, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        tags = set(filter(None, (query.get("applicationTags") or [""])[0].lower().split(",")))
        states = set(filter(None, (query.get("states") or [""])[0].split(",")))
        queue = (query.get("queue") or [""])[0]
        dropped = [_DESELECTABLE[d] for d in (query.get("deSelects") or [""])[0].split(",") if d in _DESELECTABLE]
        with self.lock:
            apps = list(self.apps.values())
        out = []
        for app in apps:
            if tags and not tags & set(app["applicationTags"].split(",")):
                continue
            if states and app["state"] not in states:
                continue
            if queue and app["queue"] not in (queue, f"root.{queue}"):
                continue
            out.append({k: v for k, v in app.items() if k not in dropped} if dropped else app)
        return out

    # ------------------------------------------------------------------ serving
    def start(self) -> str:
        sim = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                status, body, endpoint = sim.answer(parts.path, parse_qs(parts.query))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                sim.count(endpoint, len(body))

            def log_message(self, *args: Any) -> None:
                pass

        return self.serve(Handler)
