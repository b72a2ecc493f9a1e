"""What the YARN backend's containers are called, where a YARN job keeps its files and its AM's
address, and how YARN says that it took a container back. Shared by the client, the AM's cluster manager and a new AM
container taking over (:mod:`.attempts`), without skein."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ...process import user_name
from ...protocol import EXCEEDED_MEMORY_EXIT
from ..base import ContainerRequest

if TYPE_CHECKING:
    from ...spec import JobSpec

__all__ = [
    "AM_SERVICE",
    "ASKED_ENV",
    "EXCEEDED_PMEM",
    "EXCEEDED_VMEM",
    "HISTORY_ENV",
    "KV_ADDRESS",
    "KV_GATE",
    "KV_LAUNCH",
    "KV_TOKEN",
    "KV_VIEW",
    "MASTER_JAVA_OPTIONS",
    "MASTER_MEMORY_MB",
    "MASTER_VCORES",
    "app_store",
    "container_exit_status",
    "decode_asked",
    "encode_asked",
    "first_container",
    "launch_key",
    "master_request",
    "reclaim_cause",
    "service_name",
]

#: The skein service whose container runs the job's supervisor and ApplicationMaster.
AM_SERVICE = "tony-am"
#: Where in skein's key-value store the AM leaves its address and tokens for clients.
KV_ADDRESS, KV_TOKEN, KV_VIEW = "tony.am.address", "tony.am.token", "tony.am.view-token"
#: Where the gate in skein's master (:mod:`.gate`) says why the job waits for its turn, and
#: since when: JSON ``{"reason", "ahead", "since", "held", "wanted"}``, then ``{"since", "admitted"}``.
KV_GATE = "tony.gang.gate"
#: Where the AM leaves the launch order of a task container asked for before the AM ran (by skein's
#: master as the application starts, or by the gate): ``tony.launch.<skein container id>``, the
#: task's environment as JSON, which the container waits for (:mod:`.boot`).
KV_LAUNCH = "tony.launch."
#: The AM's environment: the tasks whose containers skein's master asked for as the application
#: started (the client found room for the whole gang), as :func:`encode_asked` writes them.
ASKED_ENV = "TONY_YARN_ASKED"
#: The AM container's variable naming the history server the submitting client is configured with:
#: the job's page there is the application's tracking URL once it ends.
HISTORY_ENV = "TONY_YARN_HISTORY_SERVER"


#: skein's master container (its Java ApplicationMaster, and the job's gate while it waits its turn).
MASTER_MEMORY_MB, MASTER_VCORES = 512, 1
#: The options of skein's ApplicationMaster JVM (which takes them from its environment): a small
#: server that waits on the ResourceManager and answers a few calls a second needs no optimizing
#: compiler, whose work is most of what the JVM spends in a short job (one quick compiler thread
#: is enough), nor a parallel collector for its 128 MB heap. Half the CPU seconds of a 20-second
#: application; not verifying skein's own classes again (the jar the client shipped) and keeping
#: no performance counters file take about a tenth more (2.9 to 3.1 CPU seconds a job on the mini
#: cluster, against 3.1 to 3.8).
MASTER_JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC -XX:-UsePerfData "
                       "-XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote")


def master_request(spec: JobSpec) -> ContainerRequest:
    """skein's master container, as a request: YARN's ApplicationMaster of the job, in the
    application's partition. Named ``am`` in the fits check: it comes with the AM."""
    return ContainerRequest("am", MASTER_MEMORY_MB, MASTER_VCORES, 0, spec.node_label)


def service_name(task_type: str) -> str:
    """The skein service of a task type: the AM adds one container to it per task."""
    return f"tony-{task_type}"


def first_container(task_id: str) -> str:
    """The skein container of task ``task_id`` ("worker:1") when its service's containers were asked
    for in task order from none (``tony-worker_1``): as skein's master starts a service's instances,
    and as the gate asks for them."""
    ttype, index = task_id.split(":")
    return f"{service_name(ttype)}_{index}"


def encode_asked(task_ids: list[str]) -> str:
    """Tasks asked for as their services' first containers, in a line that stays short however big
    the job: ``worker*3;ps*1`` (each type's first N)."""
    counts: dict[str, int] = {}
    for task_id in task_ids:
        ttype = task_id.split(":")[0]
        counts[ttype] = counts.get(ttype, 0) + 1
    return ";".join(f"{t}*{n}" for t, n in counts.items())


def decode_asked(text: str) -> list[str]:
    """The inverse of :func:`encode_asked`."""
    out: list[str] = []
    for part in filter(None, (text or "").split(";")):
        ttype, _, n = part.partition("*")
        out.extend(f"{ttype}:{i}" for i in range(int(n or 0)))
    return out


def launch_key(skein_container_id: str) -> str:
    """The key of a container's launch order in skein's key-value store (:data:`KV_LAUNCH`)."""
    return KV_LAUNCH + skein_container_id


#: YARN's diagnostics for containers it took back (PREEMPTED, ABORTED, DISKS_FAILED exit statuses),
#: which skein's AM keeps as the container's exit message, and what the AM says of each.
_RECLAIM_CAUSES = (("preempted", "preempted by the scheduler"), ("lost* node", "lost with its node"),
                   ("lost node", "lost with its node"), ("decommission", "lost: its node was decommissioned"),
                   ("disk", "lost: its node's disks failed"))


def reclaim_cause(exit_message: str) -> str | None:
    """What the AM says of a container YARN ended with ``exit_message``, if YARN took it back."""
    text = exit_message.lower()
    return next((cause for marker, cause in _RECLAIM_CAUSES if marker in text), None)


def app_store(app_id: str, user: str | None = None) -> str:
    """The application's own HDFS directory, in the home of ``user``, the one it runs as (default:
    this process's, as in its own containers): checkpoints and the final status live there."""
    return f"hdfs:///user/{user or user_name()}/.tony/{app_id}"


#: YARN's exit status of a container its NodeManager killed for using more physical memory than
#: it was given (ContainerExitStatus.KILLED_EXCEEDED_PMEM), and of one over its virtual memory.
EXCEEDED_PMEM, EXCEEDED_VMEM = EXCEEDED_MEMORY_EXIT, -103
_EXIT_CODE = re.compile(r"Exit code(?: is)?:? (-?\d+)")
_USAGE = re.compile(r"([\d.]+) ?([KMGT]?B) of ([\d.]+) ?([KMGT]?B) (physical|virtual) memory used")
_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def _over(diagnostics: str, kind: str) -> bool:
    """Whether YARN's usage line ('646.4 MB of 256 MB physical memory used', which its monitor
    gives a container it killed, alone or in its longer message) shows ``kind`` memory over its limit."""
    for used, unit, limit, limit_unit, which in _USAGE.findall(diagnostics):
        if which == kind and float(used) * _UNITS[unit] > float(limit) * _UNITS[limit_unit]:
            return True
    return False


def container_exit_status(diagnostics: str) -> int:
    """The exit status of a failed container from YARN's diagnostics: a memory limit YARN enforced
    (its own negative status), else the code the diagnostics give ('Exit code is 143'), else 1."""
    if ("beyond the 'PHYSICAL' memory limit" in diagnostics or "beyond physical memory limits" in diagnostics
            or _over(diagnostics, "physical")):
        return EXCEEDED_PMEM
    if ("beyond the 'VIRTUAL' memory limit" in diagnostics or "beyond virtual memory limits" in diagnostics
            or _over(diagnostics, "virtual")):
        return EXCEEDED_VMEM
    m = _EXIT_CODE.search(diagnostics)
    return int(m.group(1)) if m and int(m.group(1)) > 0 else 1
