"""ApplicationMaster attempts on YARN that outlive the AM's container.

Within one container the supervisor (:mod:`tony_workflow.am.supervisor`) runs the AM's attempts and
everything a later attempt needs is in the container's directory. A container can be lost whole,
though: its node dies, or the scheduler takes it back. skein then starts the ``tony-am`` service
again in a new container on another node (the service may be restarted; see
:func:`am_restarts`), with a fresh directory. What the job needs to go on is kept where that
container finds it:

* in skein's key-value store, ``tony.am.state``: the attempt that ran, how many attempts count
  against ``tony.am.max-attempts``, and where the job stood (session, relaunches spent, start
  time), written by each AM attempt as it starts and as it starts a session (:func:`save_state`);
* in the application's HDFS directory, ``am/events.jsonl``: the job's events up to then, so that
  its history keeps the sessions of the lost container.

A new container's supervisor runs this module's :func:`main` in a process of its own before it
starts anything (gRPC, which skein's client starts, must not run in a process that forks AM
attempts): it finds why the last container ended, writes the job's status and events into the
new directory, and says which attempt comes next and whether the lost one counts. As YARN does
for its own AM attempts, a container taken back by the cluster (lost with its node, preempted, on
failed disks) does not count; any other end does.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

__all__ = ["EVENTS_COPY", "KV_STATE", "EventsCopy", "am_restarts", "carry_over", "main", "save_state"]

KV_STATE = "tony.am.state"
EVENTS_COPY = "am/events.jsonl"


def am_restarts(max_attempts: int, reclaim_retries: int) -> int:
    """How many times skein may start the AM's service again: once per attempt that counts, and
    once per container the cluster may take back (tony.am.reclaim-retry-count); the supervisor
    decides, from what the store says, whether a new container may run an attempt."""
    return max(0, max_attempts - 1) + max(0, reclaim_retries)


def save_state(app: Any, state: dict[str, Any]) -> None:
    """Keeps ``state`` (:func:`tony_workflow.am.attempts.attempt_state`) in the key-value store of the
    skein application ``app``. A failure is swallowed: it costs a lost container its resume point,
    not the job."""
    with contextlib.suppress(Exception):
        app.kv[KV_STATE] = json.dumps(state).encode()


class EventsCopy:
    """Copies the job's events file to ``store`` (the application's HDFS directory) on a thread of
    its own whenever :meth:`request` is called: an upload costs a few round trips to the NameNode
    and a DataNode, which the AM's start and its session starts must not wait for. Each upload
    takes the file as it is then, so requests that come while one runs are served by one more."""

    def __init__(self, store: Any, events: Path):
        self.store, self.events = store, events
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def request(self) -> None:
        self._wake.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="events-copy", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self.events.is_file():
                with contextlib.suppress(Exception):  # a lost container loses its history, not the job
                    self.store.put(self.events, EVENTS_COPY)


def _previous_end(app: Any, me: str) -> tuple[str, bool]:
    """Why the AM's previous container ended, and whether the cluster took it back."""
    from .containers import AM_SERVICE, reclaim_cause

    ended = [c for c in app.get_containers(services=[AM_SERVICE], states=["SUCCEEDED", "FAILED", "KILLED"])
             if c.id != me]
    if not ended:
        return "the ApplicationMaster's container ended", False
    last = max(ended, key=lambda c: c.instance)
    message = (last.exit_message or "").strip()
    cause = reclaim_cause(message)
    if cause:
        return f"the ApplicationMaster's container {last.yarn_container_id} was {cause}", True
    return (f"the ApplicationMaster's container {last.yarn_container_id} ended ({last.state}"
            + (f": {message.splitlines()[0][:300]}" if message else "") + ")"), False


def carry_over(app: Any, app_dir: Path, me: str, store: Any = None) -> dict[str, Any]:
    """What a new AM container takes over: ``{"attempt": the last attempt that ran (0: none),
    "counted": attempts that count, the lost one included if it counts, "why": how the previous
    container ended, "reclaimed": whether the cluster took it back}``. Writes the job's status
    (which :func:`tony_workflow.am.attempts.resume_point` reads) and its events into ``app_dir``."""
    from ...status import StatusFile, status_from_state

    raw = app.kv.get(KV_STATE)
    if raw is None:
        return {"attempt": 0, "counted": 0, "why": None, "reclaimed": False}
    state = json.loads(raw.decode())
    why, reclaimed = _previous_end(app, me)
    status = status_from_state(app.id, state)
    StatusFile(app_dir / "status.json").write(json.dumps(status.to_dict()))
    if store is not None and not (app_dir / "events.jsonl").exists():
        with contextlib.suppress(Exception), tempfile.TemporaryDirectory() as tmp:
            store.get(EVENTS_COPY, Path(tmp) / "events.jsonl")
            os.replace(Path(tmp) / "events.jsonl", app_dir / "events.jsonl")
    counted = int(state.get("counted", 0)) + (0 if reclaimed else 1)
    return {"attempt": int(state.get("attempt", 1)), "counted": counted, "why": why, "reclaimed": reclaimed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tony-am-carry-over",
                                 description="what a new ApplicationMaster container of a YARN job takes over")
    ap.add_argument("--app-dir", required=True, type=Path)
    args = ap.parse_args(argv)
    import skein

    from ...storage import open_storage
    from .containers import app_store

    app = skein.ApplicationClient.from_current()
    try:
        store = open_storage(app_store(app.id))
    except Exception:  # noqa: BLE001 - no HDFS to reach: the status still comes from the key-value store
        store = None
    out = carry_over(app, args.app_dir.resolve(), os.environ.get("SKEIN_CONTAINER_ID", ""), store)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
