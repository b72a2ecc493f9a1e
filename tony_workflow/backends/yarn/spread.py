"""Tasks of one type on distinct nodes of a YARN cluster (``tony.<type>.spread``).

Workers that share a machine share its network card, its disks and its fate: a job whose workers
YARN packed onto one node trains no faster than that node allows and loses them all with it.
YARN places a container by the locality its request names, and skein fixes a service's locality
when the application is submitted. So the client, which lists the NodeManagers through the
ResourceManager, gives a spread type one service per node it may use (``tony-worker-on-2`` asks
for the third node of the list, and that node only), and the AM (:class:`Placement`) puts each
task it launches on the node that runs the fewest tasks of its type. More tasks than nodes share
them as evenly as they can.

A node that gives no container within :data:`SPREAD_WAIT_S` (full, or gone since submission) is
avoided from then on, and the task is asked of the type's own service, with no locality: tasks go
to distinct nodes where the cluster allows, and none waits forever for a node that cannot take it.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

from .containers import service_name

__all__ = [
    "SPREAD_ENV",
    "SPREAD_WAIT_S",
    "Placement",
    "decode_hosts",
    "encode_hosts",
    "spread_hosts",
    "spread_service",
]

#: The AM's environment: the hosts of each spread type's services, ``worker:h1,h2;ps:h3`` (no
#: quotes: YARN's launch script writes a variable's value inside double quotes without escaping).
SPREAD_ENV = "TONY_YARN_SPREAD"
#: How long a task waits for a container on the node chosen for it before it is asked anywhere.
SPREAD_WAIT_S = 20.0
#: The most nodes a spread type gets a service for (the ones with the most room first).
MAX_NODES = 64


def spread_service(task_type: str, k: int) -> str:
    """The service of the ``k``-th node of a spread type's list."""
    return f"{service_name(task_type)}-on-{k}"


def encode_hosts(hosts: dict[str, list[str]]) -> str:
    """:data:`SPREAD_ENV`'s value for ``{task type: [host, ...]}``."""
    return ";".join(f"{t}:{','.join(hs)}" for t, hs in hosts.items() if hs)


def decode_hosts(text: str) -> dict[str, list[str]]:
    """The inverse of :func:`encode_hosts`."""
    out = {}
    for part in filter(None, text.split(";")):
        task_type, _, hosts = part.partition(":")
        if task_type and hosts:
            out[task_type] = [h for h in hosts.split(",") if h]
    return out


def _partition(node: dict[str, Any]) -> str:
    labels = node.get("nodeLabels") or []
    return labels[0] if isinstance(labels, list) and labels else ""


def spread_hosts(nodes: list[dict[str, Any]], label: str, memory_mb: int, vcores: int, gpus: int, instances: int) -> list[str]:
    """The hosts a spread type's tasks may go to: RUNNING NodeManagers of the partition ``label``
    ("" is the default one) that can hold one of its containers, those with the most free memory
    first, one per host, at most twice the type's instances (spares for relaunches) and
    :data:`MAX_NODES`. ``nodes`` is the ResourceManager's node list (``/ws/v1/cluster/nodes``)."""
    from .rm import node_totals  # the client's (the AM imports this module without the REST client)

    fit = []
    for node in nodes:
        total_mem, total_vcores, total_gpus = node_totals(node)
        if (node.get("state") == "RUNNING" and _partition(node) == (label or "") and node.get("nodeHostName")
                and total_mem >= memory_mb and total_vcores >= vcores and total_gpus >= gpus):
            fit.append((-int(node.get("availMemoryMB", 0)), node["nodeHostName"]))
    hosts = list(dict.fromkeys(host for _, host in sorted(fit)))
    return hosts[:min(MAX_NODES, max(2 * instances, instances + 2))]


@dataclass
class _Placed:
    task_type: str
    host: str
    env: dict[str, str]
    asked_at: float
    running: bool = False


@dataclass
class Placement:
    """The AM's choice of node for each task of a spread type (see the module's docstring).
    ``hosts`` maps each spread type to the hosts of its services, in their order."""

    hosts: dict[str, list[str]] = field(default_factory=dict)
    wait_s: float = SPREAD_WAIT_S
    _placed: dict[str, _Placed] = field(default_factory=dict)   # our container id -> where it was asked
    _avoid: set[tuple[str, str]] = field(default_factory=set)   # (type, host) that gave no container
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_env(cls) -> Placement:
        return cls(decode_hosts(os.environ.get(SPREAD_ENV) or ""))

    def choose(self, cid: str, task_type: str, env: dict[str, str], now: float) -> tuple[str, str | None]:
        """The service to ask for container ``cid`` of ``task_type``, and the host it names (None:
        anywhere, for a type that is not spread or has no node left to try)."""
        hosts = self.hosts.get(task_type) or []
        with self._lock:
            self._placed.pop(cid, None)
            usable = [h for h in hosts if (task_type, h) not in self._avoid]
            if not usable:
                return service_name(task_type), None
            load = {h: 0 for h in usable}
            for p in self._placed.values():
                if p.task_type == task_type and p.host in load:
                    load[p.host] += 1
            host = min(usable, key=lambda h: load[h])  # ties go to the earlier, roomier node
            self._placed[cid] = _Placed(task_type, host, dict(env), now)
            return spread_service(task_type, hosts.index(host)), host

    def overdue(self, cid: str, waiting: bool, now: float) -> _Placed | None:
        """Called as the container's state is seen: the placement to give up (its node is avoided
        from now on) when the container still waits for its node after :attr:`wait_s`, else None."""
        with self._lock:
            placed = self._placed.get(cid)
            if placed is None or placed.running:
                return None
            if not waiting:
                placed.running = True
                return None
            if now - placed.asked_at < self.wait_s:
                return None
            self._avoid.add((placed.task_type, placed.host))
            return self._placed.pop(cid)

    def ended(self, cid: str) -> None:
        with self._lock:
            self._placed.pop(cid, None)
