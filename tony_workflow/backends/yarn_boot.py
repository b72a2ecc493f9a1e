"""What a YARN task container runs: the TaskExecutor, once the container knows which task it is.

A container the AM adds itself (a relaunch, a replacement) carries the task's environment from
the start. The first session's containers are asked for before the AM runs, all at once (by skein's
master as the application starts, or by the gate when the job's turn comes; see
:mod:`.yarn_gate`): asked together, the gang is placed in one round of YARN's scheduling, and the
executors start while the AM does. Such a container waits here for its launch order, the
environment the AM would have given it, which the AM leaves in skein's key-value store under the
container's own id (:func:`.yarn_containers.launch_key`), and then runs the executor in this very
process.

Run as ``python -m tony_workflow.backends.yarn_boot`` in the container's directory.
"""
from __future__ import annotations

import json
import os
import sys

from .yarn_containers import launch_key

__all__ = ["launch_order", "main"]


def launch_order(kv, container_id: str) -> dict[str, str]:
    """The environment the AM left for skein container ``container_id`` in the key-value store
    ``kv`` (a skein ``KeyValueStore``), waiting until it is there. The container is killed if the
    AM gives it up, so the wait needs no end of its own."""
    return {str(k): str(v) for k, v in json.loads(kv.wait(launch_key(container_id))).items()}


def main() -> int:
    from ..task import executor  # before the wait: the imports overlap with the AM's start

    if "TONY_TASK_ID" not in os.environ:
        import skein

        # Closed before the executor starts the user's processes: a child must not inherit gRPC's threads.
        with skein.ApplicationClient.from_current() as app:
            os.environ.update(launch_order(app.kv, os.environ["SKEIN_CONTAINER_ID"]))
    return executor.main()


if __name__ == "__main__":
    sys.exit(main())
