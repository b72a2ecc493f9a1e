"""What a YARN task container runs: the TaskExecutor, once the container knows which task it is.

A container the AM adds itself (a relaunch, a replacement) carries the task's environment from
the start. The first session's containers are asked for before the AM runs, all at once (by skein's
master as the application starts, or by the gate when the job's turn comes; see
:mod:`.gate`): asked together, the gang is placed in one round of YARN's scheduling, and the
containers start while the AM does. Such a container waits here for its launch order, the
environment the AM would have given it, which the AM leaves in skein's key-value store under the
container's own id (:func:`.containers.launch_key`), and then becomes the executor
(``exec``): its process shows the executor's command line and the task's environment, as every
task's does.

Run as ``python -m tony_workflow.backends.yarn.boot`` in the container's directory.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any

from .containers import launch_key

__all__ = ["launch_order", "main"]


def launch_order(kv: Any, container_id: str) -> dict[str, str]:
    """The environment the AM left for skein container ``container_id`` in the key-value store
    ``kv`` (a skein ``KeyValueStore``), waiting until it is there. The container is killed if the
    AM gives it up, so the wait needs no end of its own."""
    return {str(k): str(v) for k, v in json.loads(kv.wait(launch_key(container_id))).items()}


def main() -> int:
    env = dict(os.environ)
    if "TONY_TASK_ID" not in env:
        import skein

        with skein.ApplicationClient.from_current() as app:
            env.update(launch_order(app.kv, env["SKEIN_CONTAINER_ID"]))
    os.execve(sys.executable, [sys.executable, "-m", "tony_workflow.task.executor"], env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
