"""What a mini cluster's scheduler offers beyond one queue: two queues with preemption, node labels,
application priorities, a ResourceManager that soon notices a NodeManager gone, and NodeManagers
on hosts of their own.

These are what a job must survive or use on a shared production cluster: containers taken back
for another queue (exit status PREEMPTED), containers lost with their node (ABORTED), task types
placed on labelled nodes, and a priority raised after submission. All of them are off unless asked
for, so a plain cluster is configured exactly as before. :class:`Scheduling` holds what was asked,
checks it, and turns it into settings laid over the daemons' and clients' ones (see
:mod:`.config`) and into the part of ``cluster.json`` that says what the cluster offers.

Preemption is tuned to act within seconds rather than Hadoop's tens of seconds: the monitor runs
every second, may take back everything needed in one round, does not wait for containers to end
by themselves, and kills a marked container a second after asking its ApplicationMaster for it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .build import MiniClusterError

__all__ = ["URGENT_QUEUE", "Scheduling", "parse_node_labels"]

URGENT_QUEUE = "urgent"
# The launcher reads this (LABEL=INDEX,...) and labels the NodeManagers once they have registered.
NODE_LABELS_KEY = "tony.minicluster.node-labels"
# The launcher reads this and puts NodeManager INDEX on 127.0.0.(INDEX+1).
DISTINCT_HOSTS_KEY = "tony.minicluster.distinct-hosts"

_CS = "yarn.scheduler.capacity"
_PREEMPTION = "yarn.resourcemanager.monitor.capacity.preemption"


def parse_node_labels(text: str) -> dict[str, list[int]]:
    """``"gpu=1,gpu=2,big=0"`` -> ``{"gpu": [1, 2], "big": [0]}``: each label and the indexes of
    the NodeManagers that carry it."""
    labels: dict[str, list[int]] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        label, sep, index = item.partition("=")
        if not sep or not label.strip() or not index.strip().isdigit():
            raise MiniClusterError(f"node labels are given as LABEL=INDEX[,LABEL=INDEX...] (INDEX a NodeManager's "
                                   f"index, from 0), not {item!r}")
        labels.setdefault(label.strip(), []).append(int(index))
    return labels


@dataclass(frozen=True)
class Scheduling:
    """``preemption``: the queues ``default`` and ``urgent``, each guaranteed half the cluster and
    allowed all of it when the other is idle, and the preemption monitor, which takes containers
    back from a queue over its share for one under it. ``node_labels``: label -> indexes of the
    NodeManagers carrying it; labels are exclusive (only requests naming one run there) and every
    queue may use every label. ``max_priority``: the highest application priority the cluster
    grants (0, Hadoop's default, grants none above the queues' default of 0). ``node_expiry_s``:
    how long the ResourceManager waits for a silent NodeManager before declaring it LOST (None:
    Hadoop's 10 minutes). ``distinct_hosts``: NodeManager INDEX on the loopback address
    127.0.0.(INDEX+1), a host of its own, instead of all on localhost, where YARN cannot place
    containers on one host rather than another."""

    preemption: bool = False
    node_labels: Mapping[str, list[int]] = field(default_factory=dict)
    max_priority: int = 0
    node_expiry_s: float | None = None
    distinct_hosts: bool = False

    def check(self, nodemanagers: int) -> None:
        if not isinstance(self.max_priority, int) or isinstance(self.max_priority, bool) or self.max_priority < 0:
            raise MiniClusterError(f"max_priority must be an integer >= 0, got {self.max_priority!r}")
        # Well above the NodeManagers' one-second heartbeat, so that a busy machine loses no node.
        if self.node_expiry_s is not None and not self.node_expiry_s >= 3:
            raise MiniClusterError(f"node_expiry_s must be at least 3 seconds, got {self.node_expiry_s!r}")
        labelled: dict[int, str] = {}
        for label, indexes in self.node_labels.items():
            if not label or not all(c.isalnum() or c in "-_" for c in label) or not label[0].isalnum():
                raise MiniClusterError(f"a node label is letters, digits, '-' and '_', starting with a letter or "
                                       f"digit, not {label!r}")
            for index in indexes:
                if not isinstance(index, int) or not 0 <= index < nodemanagers:
                    raise MiniClusterError(f"node label {label!r} is on NodeManager {index!r}, but the NodeManagers "
                                           f"are numbered 0 to {nodemanagers - 1}")
                # YARN gives a node one label (its partition) at most.
                if labelled.setdefault(index, label) != label:
                    raise MiniClusterError(f"NodeManager {index} cannot carry both {labelled[index]!r} and "
                                           f"{label!r}: a node has one label at most")
        if len(labelled) == nodemanagers and self.node_labels:
            raise MiniClusterError("every NodeManager would carry an exclusive label, leaving none for "
                                   "ApplicationMasters and unlabelled containers")

    @property
    def queues(self) -> dict[str, dict[str, float]]:
        """Each leaf queue's guaranteed and maximum share of the cluster, in percent."""
        if self.preemption:
            return {"default": {"capacity": 50, "maximum_capacity": 100},
                    URGENT_QUEUE: {"capacity": 50, "maximum_capacity": 100}}
        return {"default": {"capacity": 100, "maximum_capacity": 100}}

    def server_settings(self, d: Path) -> dict[str, dict[str, object]]:
        """The daemons' settings, by file, on top of the plain cluster's; ``d`` is the cluster's
        directory."""
        settings = {"yarn-site.xml": self._yarn_site(d), "capacity-scheduler.xml": self._capacity_scheduler()}
        return {name: props for name, props in settings.items() if props}

    def client_settings(self) -> dict[str, dict[str, object]]:
        """The queues, for clients that read capacity-scheduler.xml; the rest concerns the daemons only."""
        cs = self._capacity_scheduler()
        return {"capacity-scheduler.xml": cs} if cs else {}

    def _yarn_site(self, d: Path) -> dict[str, object]:
        yarn: dict[str, object] = {}
        if self.preemption:
            yarn.update({
                "yarn.resourcemanager.scheduler.monitor.enable": True,
                "yarn.resourcemanager.scheduler.monitor.policies":
                    "org.apache.hadoop.yarn.server.resourcemanager.monitor.capacity.ProportionalCapacityPreemptionPolicy",
                f"{_PREEMPTION}.monitoring_interval": 1000,
                f"{_PREEMPTION}.max_wait_before_kill": 1000,
                f"{_PREEMPTION}.total_preemption_per_round": 1.0,
                f"{_PREEMPTION}.natural_termination_factor": 1.0,
                # By default a queue less than 10% over its share keeps its containers.
                f"{_PREEMPTION}.max_ignored_over_capacity": 0.0,
            })
        if self.node_expiry_s is not None:
            expiry_ms = int(self.node_expiry_s * 1000)
            yarn["yarn.nm.liveness-monitor.expiry-interval-ms"] = expiry_ms
            yarn["yarn.resourcemanager.nm-liveness-monitor.interval-ms"] = min(1000, expiry_ms // 4)
        if self.node_labels:
            yarn.update({
                "yarn.node-labels.enabled": True,
                "yarn.node-labels.configuration-type": "centralized",
                # The default store is under /tmp and shared by every cluster of the user.
                "yarn.node-labels.fs-store.root-dir": (d / "data" / "node-labels").as_uri(),
                NODE_LABELS_KEY: ",".join(f"{label}={i}" for label, idx in self.node_labels.items() for i in idx),
            })
        if self.max_priority:
            yarn["yarn.cluster.max-application-priority"] = self.max_priority
        if self.distinct_hosts:
            yarn[DISTINCT_HOSTS_KEY] = True
        return yarn

    def _capacity_scheduler(self) -> dict[str, object]:
        cs: dict[str, object] = {}
        queues = self.queues
        if self.preemption:
            cs[f"{_CS}.root.queues"] = ",".join(queues)
        if self.node_labels:
            cs[f"{_CS}.root.accessible-node-labels"] = ",".join(self.node_labels)
            for label in self.node_labels:
                cs[f"{_CS}.root.accessible-node-labels.{label}.capacity"] = 100
        for name, share in queues.items():
            q = f"{_CS}.root.{name}"
            if self.preemption:
                cs.update({
                    f"{q}.capacity": share["capacity"],
                    f"{q}.maximum-capacity": share["maximum_capacity"],
                    f"{q}.state": "RUNNING",
                    f"{q}.acl_submit_applications": "*",
                    f"{q}.acl_administer_queue": "*",
                    # One user may only use its queue's share times this; a test submits as one user.
                    f"{q}.user-limit-factor": share["maximum_capacity"] / share["capacity"],
                })
            if self.node_labels:
                cs[f"{q}.accessible-node-labels"] = ",".join(self.node_labels)
                for label in self.node_labels:
                    cs[f"{q}.accessible-node-labels.{label}.capacity"] = share["capacity"]
                    cs[f"{q}.accessible-node-labels.{label}.maximum-capacity"] = share["maximum_capacity"]
            if self.max_priority:
                cs[f"{q}.default-application-priority"] = 0
        return cs

    def describe(self) -> dict[str, object]:
        """What ``cluster.json`` says the cluster offers."""
        return {"queues": self.queues, "preemption": self.preemption,
                "node_labels": {label: list(idx) for label, idx in self.node_labels.items()},
                "max_application_priority": self.max_priority, "node_expiry_s": self.node_expiry_s,
                "distinct_hosts": self.distinct_hosts}
