"""YARN, the ApplicationMaster's side: the job's containers are skein containers.

Every task type is a skein service with no instances of its own (:mod:`tony_workflow.backends.yarn`
defines them at submission); :class:`YarnClusterManager` adds one container per task to its type's
service, with the task's identity in the container's environment, watches and kills them through
skein's ApplicationClient, and says which ones YARN took back (preempted, lost with their node).
Before it asks for the tasks' containers it waits for the job's turn in its queue (:mod:`.yarn_line`,
:mod:`.yarn_gang`): YARN grants containers one by one, and jobs that each hold part of a gang would
wait for each other forever. While they come it says which are still missing and why, and whether
an older job needs the room it holds (:meth:`YarnClusterManager.forming`).
It also publishes the AM's address and tokens in skein's key-value store, puts the AM's page and
TensorBoard behind the ResourceManager's proxy, keeps what a later AM container needs
(:mod:`.yarn_attempts`), places spread task types on distinct nodes (:mod:`.yarn_spread`), and
at the end writes the final status to HDFS and tells YARN how the job ended.
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..status import JobState
from ..storage import open_storage
from .base import ClusterManager, Container, ContainerRequest, Wait
from .rm import container_rm
from .yarn_attempts import EventsCopy, save_state
from .yarn_containers import AM_SERVICE, KV_ADDRESS, KV_GATE, KV_TOKEN, KV_VIEW, app_store, reclaim_cause, service_name
from .yarn_gate import wait_turn
from .yarn_line import Line
from .yarn_spread import Placement

__all__ = ["YarnClusterManager"]

log = logging.getLogger("tony.yarn")

_SKEIN_FINAL = {JobState.SUCCEEDED: "SUCCEEDED", JobState.FAILED: "FAILED", JobState.KILLED: "KILLED"}


class YarnClusterManager(ClusterManager):
    """AM side: containers are skein containers added to the task type's service."""

    name = "yarn"

    # The NodeManager sees a preempted container's processes end before the ResourceManager tells
    # skein's AM why (a heartbeat each way), and a lost node is declared only after
    # yarn.nm.liveness-monitor.expiry-interval-ms (10 minutes by default; far less on clusters
    # tuned for it). Past this, a silent task is judged a failure like any other: a hung task must
    # not wait for a node loss that may never be declared.
    reclaim_wait_s = 30.0

    def __init__(self, app_client=None):
        import skein
        self.app = app_client or skein.ApplicationClient.from_current()
        self.app_id = skein.properties.application_id
        self._containers: dict[str, Any] = {}   # our container id -> skein container id
        self._seq = 0
        self._cache: tuple[float, dict[str, Any]] = (0.0, {})
        self._lock = threading.Lock()
        self.placement = Placement.from_env()  # nodes for spread task types
        self._events_copy: EventsCopy | None = None
        self.line = Line(self.app_id, container_rm())
        self._requests: dict[str, ContainerRequest] = {}  # task id -> what its container asks for
        self._looked: tuple[float, Wait | None] = (0.0, None)

    def allocate(self, requests_: list[ContainerRequest], cancel: threading.Event) -> list[Container]:
        """Waits for the job's turn in its queue (every older job's gang and this one's fit in
        what is free), then returns the containers to ask for. The AM's own container is held
        already: it runs this."""
        self._requests = {r.task_id: r for r in requests_}
        wait_turn(self.line, [r for r in requests_ if r.task_id != "am"], self.waiting, stop=cancel)
        if cancel.is_set():
            raise InterruptedError("allocation cancelled")
        self._looked = (time.monotonic(), None)
        return [self._make(r.task_id, r.memory_mb, r.vcores, r.gpus) for r in requests_]

    def waited_since(self) -> float | None:
        """Since when the job waited for its turn at the gate in skein's master (:mod:`.yarn_gate`),
        if it did."""
        try:
            raw = self.app.kv.get(KV_GATE)
            gate = json.loads(raw) if raw else {}
        except Exception:  # noqa: BLE001 - the store's errors: a wait we cannot read is one we do not show
            return None
        return float(gate["since"]) if gate.get("reason") or gate.get("admitted") else None

    def granted(self, container: Container) -> bool:
        # A container not granted yet is only looked at here (the monitor polls granted ones), so a
        # spread task whose node gives nothing is asked anywhere from here too.
        sid = self._containers.get(container.id)
        c = self._states().get(sid) if sid else None
        if c is None or (c := self._placed(container, c)) is None:
            return False
        return str(c.state) not in ("WAITING", "REQUESTED")

    def forming(self, pending: list[Container], granted: list[Container]) -> Wait | None:
        """Why ``pending`` are not granted yet, looked up every couple of seconds: room that is
        free (YARN is placing them), or what blocks them; with ``release`` when an older job of
        the queue cannot place what it still lacks, part of which this job holds."""
        at, last = self._looked
        if time.monotonic() - at < self.line.look_every_s:
            return last
        counts: dict[str, tuple[int, int]] = {}
        for c, was_granted in [*((c, False) for c in pending), *((c, True) for c in granted)]:
            ttype = c.task_id.split(":")[0]
            held, wanted = counts.get(ttype, (0, 0))
            counts[ttype] = (held + was_granted, wanted + 1)
        asked = [self._requests.get(c.task_id) or ContainerRequest(c.task_id, c.memory_mb, c.vcores,
                                                                     len(c.gpu_indices)) for c in pending]
        v = self.line.look(asked, counts)
        me = self.line.me
        if v is not None and me is not None and (me.running_containers or 0) - 1 >= 1 + len(pending) + len(granted):
            # YARN placed them all (skein's master aside); skein has not said so yet
            wait = Wait(f"all {len(pending) + len(granted)} task containers are placed by YARN and starting")
        elif v is None or v.go:
            ttype = pending[0].task_id.split(":")[0] if pending else "?"
            held, wanted = counts.get(ttype, (0, 0))
            why = (f"{ttype}: {held} of {wanted} containers granted; YARN is placing the rest"
                   + (" (the room is free)" if v is not None else f" ({self.line.unreadable})"))
            wait = Wait(why, v.ahead if v is not None else ())
        else:
            wait = Wait(v.reason or "", v.ahead, release=v.elders_blocked)
        self._looked = (time.monotonic(), wait)
        return wait

    def _make(self, task_id: str, memory_mb: int, vcores: int, gpus: int) -> Container:
        with self._lock:
            self._seq += 1
            cid = f"{task_id}#{self._seq}"
        return Container(id=cid, task_id=task_id, memory_mb=memory_mb, vcores=vcores,
                         gpu_indices=list(range(gpus)), host="")

    def new_container(self, like: Container) -> Container:
        return self._make(like.task_id, like.memory_mb, like.vcores, len(like.gpu_indices))

    def launch(self, container: Container, argv: list[str], env: dict[str, str]) -> None:
        env = {k: str(v) for k, v in env.items()}
        service, _ = self.placement.choose(container.id, container.task_id.split(":")[0], env, time.monotonic())
        self._containers[container.id] = self.app.add_container(service, env=env).id
        self._cache = (0.0, {})

    def _placed(self, container: Container, c: Any) -> Any:
        """``c``, or the container asked anywhere in its stead when its node did not give it in time."""
        overdue = self.placement.overdue(container.id, str(c.state) in ("WAITING", "REQUESTED"), time.monotonic())
        if overdue is None:
            return c
        log.warning("%s: node %s gave no container in %g s; asking anywhere", container.task_id, overdue.host,
                    self.placement.wait_s)
        self.note("placed_anywhere", task=container.task_id, host=overdue.host, waited_s=self.placement.wait_s)
        with contextlib.suppress(Exception):
            self.app.kill_container(c.id)
        self._containers[container.id] = self.app.add_container(service_name(overdue.task_type), env=overdue.env).id
        self._cache = (0.0, {})
        return None

    def _states(self) -> dict[str, Any]:
        # One RPC per monitor pass at most, not one per container.
        at, states = self._cache
        if time.time() - at > 1.0:
            states = {c.id: c for c in self.app.get_containers(
                states=["WAITING", "REQUESTED", "RUNNING", "SUCCEEDED", "FAILED", "KILLED"])}
            self._cache = (time.time(), states)
        return states

    def poll(self, container: Container) -> int | None:
        sid = self._containers.get(container.id)
        c = self._states().get(sid) if sid else None
        if c is None or (c := self._placed(container, c)) is None:
            return None
        state = str(c.state)
        if state in ("SUCCEEDED", "FAILED", "KILLED"):
            self.placement.ended(container.id)
        if state == "SUCCEEDED":
            return 0
        if state == "FAILED":
            return 1
        if state == "KILLED":
            return 137
        return None

    def reclaimed(self, container: Container) -> str | None:
        sid = self._containers.get(container.id)
        c = self._states().get(sid) if sid else None
        if c is None or str(c.state) != "FAILED":
            return None
        return reclaim_cause(c.exit_message or "")

    def kill(self, container: Container, grace: float = 5.0) -> None:
        self.placement.ended(container.id)
        sid = self._containers.get(container.id)
        if sid:
            with contextlib.suppress(Exception):  # already gone
                self.app.kill_container(sid)
            self._cache = (0.0, {})

    def release(self) -> None:
        for sid in list(self._containers.values()):
            with contextlib.suppress(Exception):  # already gone
                self.app.kill_container(sid)

    def log_url(self, container: Container) -> str | None:
        sid = self._containers.get(container.id)
        c = self._states().get(sid) if sid else None
        if c is None or not c.yarn_node_http_address:
            return None
        user = os.environ.get("USER") or os.environ.get("HADOOP_USER_NAME") or ""
        return f"http://{c.yarn_node_http_address}/node/containerlogs/{c.yarn_container_id}/{user}"

    def checkpoint_location(self, app_dir: Path) -> str:
        return f"{app_store(self.app_id)}/checkpoints"

    def log_dir(self, app_dir: Path) -> str | None:
        return None  # no directory is shared across nodes: the chief serves its own

    def publish_endpoint(self, address: str, token: str, view_token: str, tracking_url: str) -> str:
        self.app.kv[KV_TOKEN] = token.encode()
        self.app.kv[KV_VIEW] = view_token.encode()
        self.app.kv[KV_ADDRESS] = address.encode()  # last: clients look for the address first
        return self._proxy("tony", tracking_url, "TonY") or tracking_url

    def expose_tensorboard(self, url: str) -> str | None:
        return self._proxy("tensorboard", url, "TensorBoard")

    def _proxy(self, route: str, url: str, link_name: str) -> str | None:
        """The ResourceManager-proxied address of ``url``, one per route for the whole application:
        a relaunched session's TensorBoard, or a later AM attempt, takes the route over, so the link
        users already have keeps working. None when the proxy cannot be set up."""
        ui = self.app.ui
        with contextlib.suppress(Exception):  # the route is taken: by an earlier session or attempt
            return ui.add_page(route, url, link_name=link_name).address
        try:
            ui.remove_page(route)
            return ui.add_page(route, url, link_name=link_name).address
        except Exception:  # noqa: BLE001 - whatever the reason, the job runs on without the proxied link
            return None

    def recover(self) -> None:
        """A later AM attempt's first step: the task containers an earlier attempt started (the
        services still run them) are killed, so that the new session does not train beside them."""
        for c in self.app.get_containers(states=["WAITING", "REQUESTED", "RUNNING"]):
            if c.service_name == AM_SERVICE:
                continue
            with contextlib.suppress(Exception):  # already gone
                self.app.kill_container(c.id)

    @functools.cached_property
    def store(self):
        """The application's HDFS directory: checkpoints, the events' copy, the final status."""
        return open_storage(app_store(self.app_id))

    def save_attempt_state(self, state: dict, app_dir: Path) -> None:
        # A later AM container takes these over (yarn_attempts.carry_over).
        save_state(self.app, state)
        if self._events_copy is None:
            self._events_copy = EventsCopy(self.store, app_dir / "events.jsonl")
        self._events_copy.request()

    def report_progress(self, fraction: float) -> None:
        try:
            self.app.set_progress(min(1.0, max(0.0, fraction)))  # the ResourceManager's progress bar
        except Exception as e:  # noqa: BLE001 - the driver's errors, a closed channel while the AM ends
            log.debug("progress not reported to the ResourceManager: %s", e)

    def finish(self, state: str, diagnostics: str, status: dict | None = None) -> None:
        if status is not None:
            # The whole final status outlives the AM in HDFS; the ResourceManager keeps only a line.
            try:
                with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
                    json.dump(status, fh)
                self.store.put(Path(fh.name), "status.json")
                os.unlink(fh.name)
            except (OSError, ValueError):
                pass
        self.app.shutdown(_SKEIN_FINAL.get(state, "FAILED"),
                          (diagnostics or f"TonY application {state}")[-4000:])
