"""Gangs no amount of waiting can place on a YARN queue, refused before anything is submitted."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..base import Capacity, ContainerRequest, NeverFits, check_fits
from .gang import Node
from .rm import amounts

__all__ = ["refuse_never_fits"]


def _label(request: ContainerRequest) -> str:
    return (request.node_label or "").lower()


def refuse_never_fits(requests: Sequence[ContainerRequest], master: ContainerRequest, nodes: Sequence[Node],
                      queue: dict[str, Any] | None, queue_name: str, label_key: Callable[[str], str]) -> None:
    """Raises :class:`NeverFits` for a gang no amount of waiting can place: a node label no running
    node carries, a container larger than every node of its partition, a gang larger than its
    partition, or (skein's master container included) larger than the queue's maximum capacity.
    ``label_key(task_id)`` names the key that gave a container its label."""
    carried = sorted({n.label for n in nodes if n.label})
    for r in [master, *requests]:
        if _label(r) and not any(n.label == _label(r) for n in nodes):
            raise NeverFits(label_key(r.task_id), f"{r.task_id} asks for node label {r.node_label!r}, which no running "
                            f"node of the cluster carries (labels carried: {', '.join(carried) or 'none'})")
    for label in sorted({_label(r) for r in requests}):
        part = [n for n in nodes if n.label == label]
        where = f" labelled {label}" if label else ""
        biggest = Capacity(*(max(n.total[i] for n in part) for i in range(3))) if part else Capacity(0, 0, 0)
        total = Capacity(*(sum(n.total[i] for n in part) for i in range(3)))
        check_fits([r for r in requests if _label(r) == label], biggest, total,
                   node=f"the largest NodeManager{where}",
                   cluster=f"partition {label} of the cluster" if label else "the cluster")
    if not queue:
        return
    maxima = {(p.get("partitionName") or "").lower(): amounts(p.get("effectiveMaxResource"))
              for p in (queue.get("capacities") or {}).get("queueCapacitiesByPartition") or []
              if p.get("effectiveMaxResource")}
    unbounded = Capacity(1 << 30, 1 << 30, 1 << 30)
    for label, (mem, vcores, gpus) in maxima.items():
        gang = [r for r in [master, *requests] if _label(r) == label]
        if gang and mem > 0:
            check_fits(gang, unbounded, Capacity(mem, vcores, gpus if gpus else 1 << 30), node="",
                       cluster=f"queue {queue_name}{f' in partition {label}' if label else ''} at its maximum "
                               "capacity (skein's master container included)")
