"""YARN, the ApplicationMaster's side: the job's containers are skein containers.

Every task type is a skein service with no instances of its own (:mod:`tony_workflow.backends.yarn`
defines them at submission); :class:`YarnClusterManager` adds one container per task to its type's
service, with the task's identity in the container's environment, watches and kills them through
skein's ApplicationClient, and says which ones YARN took back (preempted, lost with their node).
Before it asks for the tasks' containers it waits for the job's turn in its queue (:mod:`.line`,
:mod:`.gang`): YARN grants containers one by one, and jobs that each hold part of a gang would
wait for each other forever. The first session's containers are usually asked for before the AM
runs, with its own (by skein's master as the application starts, or by the gate,
:mod:`.gate`): the AM adopts them, and gives each its launch order through skein's key-value
store (:mod:`.boot`). While containers come it says which are still missing and why, with what
the ResourceManager holds of its asks, whether an older job needs the room it holds
(:meth:`YarnClusterManager.forming`), and asks again for any request the ResourceManager lost.
It also publishes the AM's address and tokens in skein's key-value store, puts the AM's page and
TensorBoard behind the ResourceManager's proxy, keeps what a later AM container needs
(:mod:`.attempts`), places spread task types on distinct nodes (:mod:`.spread`), and
at the end writes the final status to HDFS and tells YARN how the job ended.
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import secrets
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ... import hadoop
from ...protocol import BOARD_STORE_ENV, NOTEBOOK_STORE_ENV
from ...status import JobState
from ...storage import Storage, open_storage
from ..base import AMIdentity, ClusterManager, Container, ContainerRequest, Wait
from .attempts import EventsCopy, save_state
from .containers import (
    AM_SERVICE,
    ASKED_ENV,
    HISTORY_ENV,
    KV_ADDRESS,
    KV_GATE,
    KV_TOKEN,
    KV_VIEW,
    app_store,
    container_exit_status,
    decode_asked,
    first_container,
    launch_key,
    reclaim_cause,
    service_name,
)
from .gang import reason_for
from .gate import wait_turn
from .line import Line, line_store
from .master import Master
from .rm import AppReport, RMError, container_rm
from .skein_jar import FINAL_TRACKING_URL_KEY, UI_HOME_KEY
from .spread import Placement

if TYPE_CHECKING:
    from ...spec import JobSpec

__all__ = ["YarnClusterManager"]

log = logging.getLogger("tony.yarn")

_SKEIN_FINAL = {JobState.SUCCEEDED: "SUCCEEDED", JobState.FAILED: "FAILED", JobState.KILLED: "KILLED"}


def idle_heartbeat_s(conf: dict[str, str]) -> float:
    """How long skein's master waits between its requests to the ResourceManager while it has no
    request outstanding: half of ``yarn.am.liveness-monitor.expiry-interval-ms``, at most 5 s.
    Containers asked for then go out at its next one; with requests outstanding, within a second."""
    try:
        expiry_ms = int(conf.get("yarn.am.liveness-monitor.expiry-interval-ms") or 600000)
    except ValueError:
        expiry_ms = 600000
    return min(5.0, max(0.0, expiry_ms / 2000.0))


#: Past skein's next heartbeat, how long the ResourceManager may take to show an ask it was sent.
_RM_SLACK_S = 2.5
#: A NodeManager's states of a container whose process has ended.
_NM_ENDED = frozenset({"EXITED_WITH_SUCCESS", "EXITED_WITH_FAILURE", "KILLING", "CONTAINER_CLEANEDUP_AFTER_KILL",
                       "CONTAINER_RESOURCES_CLEANINGUP", "DONE", "LOCALIZATION_FAILED"})
#: The exit code of a container seen ended at its node with no code of its own (its node gone, or
#: killed by a signal the NodeManager did not report): as a SIGKILL.
LOST_NODE_EXIT = 137


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class YarnClusterManager(ClusterManager):
    """AM side: containers are skein containers added to the task type's service."""

    name = "yarn"

    # The NodeManager sees a preempted container's processes end before the ResourceManager tells
    # skein's AM why (a heartbeat each way), and a lost node is declared only after
    # yarn.nm.liveness-monitor.expiry-interval-ms (10 minutes by default; far less on clusters
    # tuned for it). Past this, a silent task is judged a failure like any other: a hung task must
    # not wait for a node loss that may never be declared.
    reclaim_wait_s = 30.0

    @classmethod
    def for_app(cls, app_dir: Path, spec: JobSpec) -> tuple[YarnClusterManager, AMIdentity]:
        """The cluster manager of the application skein runs this container for, and the identity
        its AM takes. Clients read the AM's tokens from skein's key-value store, which only the
        application's owner can, so the AM makes them itself, once: a later attempt in this
        container takes them over."""
        cluster = cls(line_dir=spec.gang_line_dir)
        secret = app_dir / "am.secret"
        if not secret.is_file():
            fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump({"token": secrets.token_urlsafe(24), "view_token": secrets.token_urlsafe(12)}, fh)
        tokens = json.loads(secret.read_text())
        return cluster, AMIdentity(cluster.app_id, tokens["token"], tokens["view_token"],
                                   os.environ.get("NM_HOST") or socket.getfqdn())

    def __init__(self, app_client: Any = None, line_dir: str | None = None):
        import skein
        self.app = Master(app_client or skein.ApplicationClient.from_current())  # patient with its stumbles
        self.app_id = skein.properties.application_id
        self._containers: dict[str, Any] = {}   # our container id -> skein container id
        self._seq = 0
        self._cache: tuple[float, dict[str, Any]] = (0.0, {})
        self._lock = threading.Lock()
        self.placement = Placement.from_env()  # nodes for spread task types
        self._events_copy: EventsCopy | None = None
        self.line = Line(self.app_id, container_rm(), board=line_store(line_dir))
        self._requests: dict[str, ContainerRequest] = {}  # task id -> what its container asks for
        # when the queue was last read, and what was read: its verdict, the app's report, requests lost
        self._looked: tuple[float, tuple[Any, AppReport | None, int] | None] = (0.0, None)
        self._first = True  # the first allocation of the first attempt may adopt what was asked before
        self._adopt: dict[str, str] = {}  # our container id -> the skein container asked before the AM ran
        self._envs: dict[str, dict[str, str]] = {}  # our container id -> its launch environment
        self._asked: dict[str, float] = {}  # our container id -> when it was last asked for (monotonic)
        self.idle_heartbeat_s = idle_heartbeat_s(hadoop.read_conf(os.environ.get("HADOOP_CONF_DIR")))

    def allocate(self, requests_: list[ContainerRequest], cancel: threading.Event) -> list[Container]:
        """Waits for the job's turn in its queue (every older job's gang and this one's fit in
        what is free), then returns the containers to ask for. The AM's own container is held
        already: it runs this. The first time, the containers asked for before the AM ran (as the
        application started, or by the gate once the job's turn had come) are adopted instead:
        the turn was waited for then."""
        self._requests = {r.task_id: r for r in requests_}
        gate = self._gate() if self._first and not os.environ.get(ASKED_ENV) else {}
        asked = set(self._asked_before(gate)) if self._first else set()
        early = bool(gate.get("early"))  # the AM started first or next in line, before its turn
        self._first = False
        if not asked:
            self.line.keen = early
            self.line.asking(False)  # a gang given back, or a new session's: it waits again
            wait_turn(self.line, [r for r in requests_ if r.task_id != "am"], self.waiting, stop=cancel)
            self.line.leave()  # no longer waiting for its turn: the next in line looks for the queue
            if cancel.is_set():
                raise InterruptedError("allocation cancelled")
            self.line.asking()
            if early:
                self.note("turn_came", place=str(gate.get("place") or "first"))
        self._looked = (time.monotonic(), None)
        containers = [self._make(r.task_id, r.memory_mb, r.vcores, r.gpus) for r in requests_]
        for c in containers:
            if c.task_id in asked:
                self._adopt[c.id] = first_container(c.task_id)
        self._asked.clear()  # containers of an earlier session are gone
        if asked:
            self.note("adopted", tasks=sorted(asked))
        return containers

    @staticmethod
    def _asked_before(gate: dict[str, Any]) -> list[str]:
        """The tasks whose containers were asked for before the AM ran: by skein's master as the
        application started (:data:`ASKED_ENV`), else by the gate (``gate``, its word in
        :data:`KV_GATE`; without it, nothing: the AM asks anew)."""
        if os.environ.get(ASKED_ENV):
            return decode_asked(os.environ[ASKED_ENV])
        return decode_asked(str(gate.get("asked") or ""))

    def _gate(self) -> dict[str, Any]:
        """What the gate in skein's master (:mod:`.gate`) left in the key-value store; empty when
        it cannot be read (a wait we cannot read is one we do not show)."""
        try:
            raw = self.app.kv.get(KV_GATE)
            return json.loads(raw) if raw else {}
        except Exception:  # noqa: BLE001 - the store's errors
            return {}

    def waited_since(self) -> float | None:
        """Since when the job waited for its turn at the gate, if it did."""
        gate = self._gate()
        return float(gate["since"]) if gate.get("reason") or gate.get("admitted") or gate.get("early") else None

    def admitted_at(self) -> float | None:
        admitted = self._gate().get("admitted")
        return float(admitted) if admitted else None

    def granted(self, container: Container) -> bool:
        # A container not granted yet is only looked at here (the monitor polls granted ones), so a
        # spread task whose node gives nothing is asked anywhere from here too.
        sid = self._containers.get(container.id)
        c = self._states().get(sid) if sid else None
        if c is None or (c := self._placed(container, c)) is None:
            return False
        return str(c.state) not in ("WAITING", "REQUESTED")

    def forming(self, pending: list[Container], granted: list[Container]) -> Wait | None:
        """Why ``pending`` are not granted yet, looked up every couple of seconds: what blocks
        them, or that the room is free and YARN is placing them, always with how many asks the
        ResourceManager holds; with ``release`` when an older job of the queue cannot place what it
        still lacks, part of which this job holds. A request the ResourceManager lost is asked
        for again (:meth:`_lost`)."""
        counts: dict[str, tuple[int, int]] = {}
        for c, was_granted in [*((c, False) for c in pending), *((c, True) for c in granted)]:
            ttype = c.task_id.split(":")[0]
            held, wanted = counts.get(ttype, (0, 0))
            counts[ttype] = (held + was_granted, wanted + 1)
        # The queue and the ResourceManager are read every couple of seconds; the counts, which the
        # same status shows beside each task's state, are always today's.
        asked = [self._requests.get(c.task_id) or ContainerRequest(c.task_id, c.memory_mb, c.vcores,
                                                                     len(c.gpu_indices)) for c in pending]
        at, looked = self._looked
        if time.monotonic() - at >= self.line.look_every_s:
            v = self.line.look(asked, counts, may_lead=False)
            me = self._report() if v is not None else None
            looked = (v, me, len(self._lost(pending, me)))
            self._looked = (time.monotonic(), looked)
        if looked is None:
            return None
        v, me, lost = looked
        ttype = pending[0].task_id.split(":")[0] if pending else "?"
        held, wanted = counts.get(ttype, (0, 0))
        granted_line = f"{ttype}: {held} of {wanted} containers granted"
        if me is not None and (me.running_containers or 0) - 1 >= 1 + len(pending) + len(granted):
            # YARN placed them all (skein's master aside); skein has not said so yet
            return Wait(f"all {len(pending) + len(granted)} task containers are placed by YARN and starting")
        if lost:
            return Wait(f"{granted_line}; the ResourceManager held no request for {lost} of them "
                        "(lost on the way): asked again", v.ahead if v is not None else ())
        if v is None:
            return Wait(f"{granted_line}; YARN is placing the rest ({self.line.unreadable})")
        if v.go:
            return Wait(f"{granted_line}; {self._asks_held(me)}, and the room is free: YARN is placing them", v.ahead)
        reason = v.reason  # what blocks the gang, in its counts of now
        if v.blocker is not None:
            reason = reason_for(v, [(r.task_id.split(":")[0], self.line.shape(r)) for r in asked], counts) or reason
        return Wait(f"{reason}; {self._asks_held(me)}", v.ahead, release=v.elders_blocked)

    def _report(self) -> AppReport | None:
        """The application's own report, with its asks (the queue's board does not carry them)."""
        if self.line.rm is None:
            return None
        try:
            return self.line.rm.app(self.app_id)
        except RMError:
            return None

    @staticmethod
    def _asks_held(me: AppReport | None) -> str:
        """What the ResourceManager holds of the job's asks, in words."""
        if me is None or not me.asks:
            return "the ResourceManager holds no request of the job's yet"
        return f"the ResourceManager holds {_plural(me.asks, 'request')} of the job's"

    def _lost(self, pending: list[Container], me: AppReport | None) -> list[Container]:
        """The containers of ``pending`` whose requests the ResourceManager does not hold (``me``:
        its report of the application, with its asks and running containers), asked for again.

        A request is lost once the ResourceManager should have it and does not: a little after
        skein's master sent it, which is known to have happened when the ResourceManager holds
        some of the job's asks or granted a container asked for with it; else, a little after the
        master's next heartbeat could have carried it (:func:`idle_heartbeat_s`)."""
        states = self._states()
        requested = [c for c in pending if (sid := self._containers.get(c.id)) and sid in states
                     and str(states[sid].state) == "REQUESTED"]
        if not requested or me is None or me.running_containers is None:
            return []
        # Granted by the ResourceManager, not yet heard of by skein: not lost.
        unseen = max(0, me.running_containers - 1 - sum(str(c.state) == "RUNNING" for c in states.values()))
        missing = len(requested) - me.asks - unseen
        if missing <= 0:
            return []
        now = time.monotonic()

        def sent(asked: float) -> bool:
            return me.asks > 0 or any(
                t >= asked - 1.0 and (sid := self._containers.get(cid)) in states
                and str(states[sid].state) not in ("WAITING", "REQUESTED") for cid, t in self._asked.items())

        due = [c for c in requested
               if now >= (t := self._asked.get(c.id, now)) + (1.0 if sent(t) else self.idle_heartbeat_s) + _RM_SLACK_S]
        # Those not due yet may be what the ResourceManager lacks; of the rest, the earliest asked
        # (the numbers skein reused first).
        lost = due[:max(0, missing - (len(requested) - len(due)))]
        for c in lost:
            old = self._containers[c.id]
            with contextlib.suppress(Exception):  # withdraws skein's own record of the request
                self.app.kill_container(old)
            self._containers[c.id] = self.app.add_container(old.rpartition("_")[0], env=self._envs.get(c.id)).id
            self._asked[c.id] = time.monotonic()
        if lost:
            self._cache = (0.0, {})
            log.warning("the ResourceManager held no request for %s: asked again", ", ".join(c.task_id for c in lost))
            self.note("requests_lost", tasks=[c.task_id for c in lost], asks_held=me.asks, requested=len(requested))
        return lost

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
        env["TONY_SPEC_FILE"] = "spec.json"  # every container has the job's spec in its own directory
        env[BOARD_STORE_ENV] = self.board_store()
        env[NOTEBOOK_STORE_ENV] = f"{app_store(self.app_id)}/notebooks"
        self._envs[container.id] = env
        adopted = self._adopt.pop(container.id, None)
        if adopted is not None:
            # Asked for before the AM ran: it waits for this launch order (yarn/boot.py).
            self.app.kv[launch_key(adopted)] = json.dumps(env).encode()
            self._containers[container.id] = adopted
        else:
            service, _ = self.placement.choose(container.id, container.task_id.split(":")[0], env, time.monotonic())
            self._containers[container.id] = self.app.add_container(service, env=env).id
        self._asked[container.id] = time.monotonic()
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
            return container_exit_status(c.exit_message or "")
        if state == "KILLED":
            return 137
        return None

    def exit_diagnostics(self, container: Container) -> str | None:
        """YARN's diagnostics of an ended container (skein's exit message): why a container that
        never ran the executor failed (a resource it could not localize), or that the NodeManager
        killed it (its memory limit), which the code alone does not say."""
        sid = self._containers.get(container.id)
        c = self._states().get(sid) if sid else None
        message = " ".join((c.exit_message or "").split()) if c is not None else ""
        return message[:1500] or None

    def ended_now(self, container: Container) -> int | None:
        """Its NodeManager's word on the container (``/ws/v1/node/containers/<id>``), which knows
        as soon as the container's process ends; the ResourceManager, and skein's master from it,
        hear of it a heartbeat or two later. A NodeManager that does not answer is taken for gone
        with its node. A container the ResourceManager had killed (preempted, say) is left to the
        ResourceManager's report, which says why; so is one its NodeManager no longer lists, which
        it forgets only once the ResourceManager has acknowledged the container's end (a preempted
        container's too). None when the NodeManager's web API refuses us (a secure cluster's asks
        for a Kerberos login the AM does not have)."""
        import requests

        sid = self._containers.get(container.id)
        c = self._states().get(sid) if sid else None
        if c is None or not c.yarn_node_http_address or not c.yarn_container_id:
            return None
        url = f"http://{c.yarn_node_http_address}/ws/v1/node/containers/{c.yarn_container_id}"
        try:
            user = os.environ.get("USER") or os.environ.get("HADOOP_USER_NAME")
            r = requests.get(url, params={"user.name": user} if user else {}, timeout=2.0,
                             headers={"Accept": "application/json"})
        except requests.ConnectionError:
            return LOST_NODE_EXIT
        except requests.RequestException:
            return None
        if r.status_code != 200:
            return None
        try:
            info = r.json()["container"]
        except (ValueError, KeyError):
            return None
        if str(info.get("state")) not in _NM_ENDED or "by ResourceManager" in str(info.get("diagnostics") or ""):
            return None
        code = int(info.get("exitCode", -1000))
        return code if code not in (-1000, 0) or info.get("state") == "EXITED_WITH_SUCCESS" else LOST_NODE_EXIT

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

    def board_store(self) -> str:
        return f"{app_store(self.app_id)}/tensorboard"

    def am_log_url(self) -> str | None:
        # YARN tells every container its id and its NodeManager's web address.
        container, host, port = (os.environ.get(k) for k in ("CONTAINER_ID", "NM_HOST", "NM_HTTP_PORT"))
        if not (container and host and port):
            return None
        user = os.environ.get("USER") or os.environ.get("HADOOP_USER_NAME") or ""
        return f"http://{host}:{port}/node/containerlogs/{container}/{user}"

    def checkpoint_location(self, app_dir: Path) -> str:
        return f"{app_store(self.app_id)}/checkpoints"

    def log_dir(self, app_dir: Path) -> str | None:
        return None  # no directory is shared across nodes: the chief serves its own

    def publish_endpoint(self, address: str, token: str, view_token: str, tracking_url: str) -> str:
        self.app.kv[KV_TOKEN] = token.encode()
        self.app.kv[KV_VIEW] = view_token.encode()
        self.app.kv[KV_ADDRESS] = address.encode()  # last: clients look for the address first
        # skein's master (with TonY's changes, .skein_jar) ends the application with this tracking
        # URL, and its UI (the tracking URL while it runs) opens on the job's page.
        final = self._final_tracking_url()
        if final:
            self.app.kv[FINAL_TRACKING_URL_KEY] = final.encode()
        page = self._proxy("tony", tracking_url, "TonY")
        if page is not None:
            self.app.kv[UI_HOME_KEY] = b"/pages/tony/"
        return page or tracking_url

    def _final_tracking_url(self) -> str | None:
        """The job's page on the history server the client was configured with, else YARN's own page
        of the application (skein's master would end with none, and YARN's proxy then leads to the
        ResourceManager's address as it started, which may not be the one it serves)."""
        if os.environ.get(HISTORY_ENV):
            return f"{os.environ[HISTORY_ENV].rstrip('/')}/jobs/{self.app_id}"
        rm = hadoop.rm_web_url(hadoop.read_conf(os.environ.get("HADOOP_CONF_DIR")))
        return f"{rm.rstrip('/')}/cluster/app/{self.app_id}" if rm else None

    def expose_tensorboard(self, url: str) -> str | None:
        return self._proxy("tensorboard", url, "TensorBoard")

    def _proxy(self, route: str, url: str, link_name: str) -> str | None:
        """The ResourceManager-proxied address of ``url``, one per route for the whole application:
        a relaunched session's TensorBoard, or a later AM attempt, takes the route over, so the link
        users already have keeps working. None when the proxy cannot be set up."""
        ui = self.app.ui
        with contextlib.suppress(Exception):  # the route is taken: by an earlier session or attempt
            return str(ui.add_page(route, url, link_name=link_name).address)
        try:
            ui.remove_page(route)
            return str(ui.add_page(route, url, link_name=link_name).address)
        except Exception:  # noqa: BLE001 - whatever the reason, the job runs on without the proxied link
            return None

    def recover(self) -> None:
        """A later AM attempt's first step: the task containers an earlier attempt started (the
        services still run them) are killed, so that the new session does not train beside them.
        Nothing asked for before the first attempt ran is adopted any more: it is killed too."""
        self._first = False
        for c in self.app.get_containers(states=["WAITING", "REQUESTED", "RUNNING"]):
            if c.service_name == AM_SERVICE:
                continue
            with contextlib.suppress(Exception):  # already gone
                self.app.kill_container(c.id)

    @functools.cached_property
    def store(self) -> Storage:
        """The application's HDFS directory: checkpoints, the events' copy, the final status."""
        return open_storage(app_store(self.app_id))

    def save_attempt_state(self, state: dict[str, Any], app_dir: Path) -> None:
        # A later AM container takes these over (attempts.carry_over).
        save_state(self.app, state)
        if self._events_copy is None:
            self._events_copy = EventsCopy(self.store, app_dir / "events.jsonl")
        self._events_copy.request()

    def report_progress(self, fraction: float) -> None:
        try:
            self.app.set_progress(min(1.0, max(0.0, fraction)))  # the ResourceManager's progress bar
        except Exception as e:  # noqa: BLE001 - the driver's errors, a closed channel while the AM ends
            log.debug("progress not reported to the ResourceManager: %s", e)

    def finish(self, state: str, diagnostics: str, status: dict[str, Any] | None = None) -> None:
        if status is not None:
            # The whole final status outlives the AM in HDFS; the ResourceManager keeps only a line.
            try:
                with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
                    json.dump(status, fh)
                self.store.put(Path(fh.name), "status.json")
                os.unlink(fh.name)
            except (OSError, ValueError):
                pass
        self.line.close()
        self.app.shutdown(_SKEIN_FINAL.get(state, "FAILED"),
                          (diagnostics or f"TonY application {state}")[-4000:])
