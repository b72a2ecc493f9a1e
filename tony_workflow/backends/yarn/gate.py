"""The gate: a YARN job waits for its turn in skein's master container, holding nothing else.

skein starts every application with a master container (its Java ApplicationMaster, which YARN
counts against the queue's share for ApplicationMasters). This program runs there, as the master's
script, before anything of the job's own: it looks at the job's line (:mod:`.line`) until
every older job's gang and this one's (the job's own ApplicationMaster container and every task)
fit in what is free, then asks for the whole gang at once: the ``tony-am`` container, whose
supervisor runs the job's AM, and every task's container (but a spread type's, which the AM
places node by node), in one round of skein's requests to the ResourceManager. The task
containers wait for the AM's launch order (:mod:`.boot`); the AM adopts them as its first
session's. Until its turn the job holds one container, YARN's AM container, however long it
waits: the queue's share for ApplicationMasters (``maximum-am-resource-percent``) bounds what all
waiting jobs hold together, and the rest of the queue is for gangs. The one exception is the job
first in line (no older job lacks containers: only the room keeps it waiting): its gate asks for
the ``tony-am`` container alone and ends, and the AM waits for the turn (``early`` in
:data:`KV_GATE`), so that when the room frees the gang is asked for at once instead of after an
ApplicationMaster's start. Its AM's later requests are seconds after its own grant, past the trap
below (and a lost request is asked for again, :meth:`.am.YarnClusterManager._lost`).

Asked together, the requests also keep clear of a trap of skein's: its master numbers requests
from 1 again once none is outstanding, and YARN keys an application's asks by that number, not by
size. A request made just after another was granted, with the number the granted one had, and
smaller, is overwritten at the ResourceManager by the granted one's withdrawal, which skein sends
with it on its next heartbeat: the request is lost, and nothing is asked for. The AM asking for
its tasks right after its own container was granted was exactly that.

While it waits it keeps its reason in skein's key-value store (:data:`KV_GATE`), where a client
following the job reads it (no AM answers yet) and where the AM, once started, finds since when
the job has waited, and which task containers were asked for (``asked``). Any failure of its own
lets the job through with its AM's container alone: the AM waits its turn again before it asks for
the tasks' containers, so a gate that cannot see the line only costs the job a second container
while it waits.

Run as ``python -m tony_workflow.backends.yarn.gate --app-dir .`` with ``HADOOP_CONF_DIR`` set,
the way :mod:`.app` writes the master's script.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..base import ContainerRequest, Wait, gang_requests
from .containers import AM_SERVICE, KV_GATE, encode_asked, service_name
from .gang import Verdict
from .line import Line, line_store
from .rm import container_rm

if TYPE_CHECKING:
    from ...spec import JobSpec

__all__ = ["asked_first", "main", "wait_turn"]

log = logging.getLogger("tony.yarn.gate")


def wait_turn(line: Line, requests: Sequence[ContainerRequest], publish: Callable[[Wait], None],
              stop: threading.Event | None = None,
              deadline: float | None = None, early: Callable[[Verdict], bool] | None = None) -> Wait | None:
    """Looks at ``line`` until the gang of ``requests`` (its AM's container and every task) may be
    asked for, ``stop`` is set, the wall clock passes ``deadline`` or ``early(verdict)`` says to
    stop waiting here; ``publish(wait)`` is told why it waits at each look. Returns None when the
    gang may be asked for (its turn has come, or the line cannot be read), else the last wait."""
    counts: dict[str, tuple[int, int]] = {}
    for r in requests:
        ttype = r.task_id.split(":")[0]
        counts[ttype] = (0, counts.get(ttype, (0, 0))[1] + 1)
    while True:
        v = line.look(requests, counts)
        if v is None or v.go:
            return None
        last = Wait(v.reason or "", v.ahead)
        publish(last)
        if early is not None and early(v):
            return last
        if (stop or threading.Event()).wait(line.pause()) or (deadline is not None and time.time() > deadline):
            return last


def asked_first(spec: JobSpec, requests: list[ContainerRequest]) -> list[str]:
    """The tasks whose containers are asked for with the AM's, before it runs: every task but those
    of spread types (placed node by node by the AM, :mod:`.spread`), in gang order, so that
    each type's are its service's first containers (:func:`.containers.first_container`)."""
    return [r.task_id for r in requests if r.task_id != "am" and not spec.tasks[r.task_id.split(":")[0]].spread]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tony-yarn-gate", description="waits for a YARN job's turn in its queue")
    ap.add_argument("--app-dir", default=".", type=Path)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    import skein

    app = skein.ApplicationClient.from_current()
    since = time.time()
    asked: list[str] = []
    early_at: list[float] = []  # when the job, first or next in line, let its AM start before its turn
    place: list[str] = []  # which of the two
    try:
        from ...spec import JobSpec

        spec = JobSpec.from_dict(json.loads((args.app_dir / "spec.json").read_text()))
        line = Line(skein.properties.application_id, container_rm(), board=line_store(spec.gang_line_dir))
        requests = gang_requests(spec)

        def publish(wait: Wait) -> None:
            log.info("waiting: %s", wait.reason)
            app.kv[KV_GATE] = json.dumps({"reason": wait.reason, "ahead": list(wait.ahead), "since": since,
                                          "held": 0, "wanted": len(requests)}).encode()

        # TonY's tony.container.allocation.timeout bounds the wait here too: past it the AM starts,
        # and finds the job overdue (its wait counts from the gate's).
        timeout_ms = spec.allocation_timeout_ms
        deadlines = [since + ms / 1000.0 for ms in (timeout_ms, spec.am_startup_timeout_ms) if ms > 0]
        # First in line (no older job lacks containers), the job waits only for the room: its AM
        # starts now, beside the running gangs, and waits there, so that when the room frees its
        # gang is asked for at once rather than after an ApplicationMaster's start. So does the
        # next in line, where its AM cannot keep the job ahead from forming.
        def first_in_line(v: Verdict) -> bool:
            if not v.starts_early:
                return False
            early_at.append(time.time())
            place.append("first" if v.first_in_line else "next")
            return True

        overdue = wait_turn(line, requests, publish, deadline=min(deadlines) if deadlines else None,
                            early=first_in_line)
        line.leave()  # the gate no longer waits: the next in line looks for the queue (an early AM reads it)
        startup_ms = spec.am_startup_timeout_ms
        if overdue is not None and not early_at and startup_ms > 0 and time.time() > since + startup_ms / 1000.0:
            # TonY's client kills an application whose AM has not started in time: the job fails here,
            # its AM never started, and what it waited for is said.
            app.shutdown("FAILED", f"The ApplicationMaster did not start within {startup_ms} ms "
                                   f"(tony.am.startup-timeout): the job waited for its turn: {overdue.reason}")
            return 1
        if line.unreadable:
            log.warning("the line could not be read (%s): the ApplicationMaster starts now", line.unreadable)
        # Past tony.container.allocation.timeout the AM starts only to fail the job, asking for nothing.
        asked = [] if overdue is not None else asked_first(spec, requests)
    except Exception:  # the gate must never keep a job from running: the AM waits its turn too
        log.exception("the gate failed: the ApplicationMaster starts now")
    if asked:  # the line serves a job that asks before those that wait, whatever their ages
        line.asking()
    # Said before the AM's container is asked for: the AM reads it as it starts.
    word = {"early": early_at[0], "place": place[0]} if early_at else {"admitted": time.time()}
    app.kv[KV_GATE] = json.dumps({"since": since, **word, "asked": encode_asked(asked)}).encode()
    app.add_container(AM_SERVICE)
    for task_id in asked:
        app.add_container(service_name(task_id.split(":")[0]))
    if early_at:
        log.info("%s in line: its ApplicationMaster's container is asked for, to wait there for its turn", place[0])
    else:
        log.info("the job's turn has come: its ApplicationMaster's container and %d task containers are asked for",
                 len(asked))
    return 0


if __name__ == "__main__":
    sys.exit(main())
