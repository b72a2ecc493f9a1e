"""What the YARN backend's containers are called, where a YARN job keeps its files and its AM's
address, and how YARN says that it took a container back. Shared by the client, the AM's cluster manager and a new AM
container taking over (:mod:`.yarn_attempts`), without skein."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..process import user_name
from .base import ContainerRequest

if TYPE_CHECKING:
    from ..spec import JobSpec

__all__ = [
    "AM_SERVICE",
    "KV_ADDRESS",
    "KV_GATE",
    "KV_TOKEN",
    "KV_VIEW",
    "MASTER_MEMORY_MB",
    "MASTER_VCORES",
    "app_store",
    "master_request",
    "reclaim_cause",
    "service_name",
]

#: The skein service whose container runs the job's supervisor and ApplicationMaster.
AM_SERVICE = "tony-am"
#: Where in skein's key-value store the AM leaves its address and tokens for clients.
KV_ADDRESS, KV_TOKEN, KV_VIEW = "tony.am.address", "tony.am.token", "tony.am.view-token"
#: Where the gate in skein's master (:mod:`.yarn_gate`) says why the job waits for its turn, and
#: since when: JSON ``{"reason", "ahead", "since", "held", "wanted"}``, then ``{"since", "admitted"}``.
KV_GATE = "tony.gang.gate"


#: skein's master container (its Java ApplicationMaster, and the job's gate while it waits its turn).
MASTER_MEMORY_MB, MASTER_VCORES = 512, 1


def master_request(spec: JobSpec) -> ContainerRequest:
    """skein's master container, as a request: YARN's ApplicationMaster of the job, in the
    application's partition. Named ``am`` in the fits check: it comes with the AM."""
    return ContainerRequest("am", MASTER_MEMORY_MB, MASTER_VCORES, 0, spec.node_label)


def service_name(task_type: str) -> str:
    """The skein service of a task type: the AM adds one container to it per task."""
    return f"tony-{task_type}"


#: YARN's diagnostics for containers it took back (PREEMPTED, ABORTED, DISKS_FAILED exit statuses),
#: which skein's AM keeps as the container's exit message, and what the AM says of each.
_RECLAIM_CAUSES = (("preempted", "preempted by the scheduler"), ("lost* node", "lost with its node"),
                   ("lost node", "lost with its node"), ("decommission", "lost: its node was decommissioned"),
                   ("disk", "lost: its node's disks failed"))


def reclaim_cause(exit_message: str) -> str | None:
    """What the AM says of a container YARN ended with ``exit_message``, if YARN took it back."""
    text = exit_message.lower()
    return next((cause for marker, cause in _RECLAIM_CAUSES if marker in text), None)


def app_store(app_id: str) -> str:
    """The application's own HDFS directory: checkpoints and the final status live there."""
    return f"hdfs:///user/{user_name()}/.tony/{app_id}"
