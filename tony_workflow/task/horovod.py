"""The executor's part in a Horovod job's driver task (:mod:`tony_workflow.horovod_driver`): the
driver's environment (the workers' hosts, where to announce its server) and the wait for its
announcement, a port file, whose port and plan the executor then gives the ApplicationMaster."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from ..horovod_driver import PORT_FILE_SUFFIX

__all__ = ["announced", "driver_env"]


def driver_env(cluster: dict[str, list[str]], out_dir: Path) -> dict[str, str]:
    """``CLUSTER_WORKER_LIST`` (``host:n,...``: the tasks of every type but the driver, per host, in
    the cluster spec's order) and ``DRIVER_OUTPUT_PATH`` (made empty of earlier announcements)."""
    counts: dict[str, int] = {}
    for task_type, addresses in cluster.items():
        if task_type != "driver":
            for address in addresses:
                host = address.rpartition(":")[0]
                counts[host] = counts.get(host, 0) + 1
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob(f"*{PORT_FILE_SUFFIX}"):
        old.unlink()
    return {"CLUSTER_WORKER_LIST": ",".join(f"{h}:{n}" for h, n in counts.items()), "DRIVER_OUTPUT_PATH": str(out_dir)}


def announced(out_dir: Path, proc: subprocess.Popen, timeout: float = 60.0,
              stopped: Any = None) -> tuple[int, list[dict[str, Any]]] | str:
    """The driver's announcement, (port, plan), once its port file is there; else why not (the
    driver ended first, or said nothing within ``timeout`` seconds, or ``stopped()`` said stop)."""
    deadline = time.monotonic() + timeout
    while True:
        for path in out_dir.glob(f"*{PORT_FILE_SUFFIX}"):
            try:
                plan = json.loads(path.read_text() or "null")
                return int(path.name[: -len(PORT_FILE_SUFFIX)]), list(plan or [])
            except (ValueError, OSError):
                pass  # a driver writing it in place: read it again
        if proc.poll() is not None:
            return (f"the Horovod driver ended (exit {proc.returncode}) without announcing its rendezvous server "
                    f"(a file *{PORT_FILE_SUFFIX} in DRIVER_OUTPUT_PATH)")
        if time.monotonic() > deadline or (stopped is not None and stopped()):
            return f"the Horovod driver announced no rendezvous server within {timeout:g} s"
        time.sleep(0.1)
