"""An elastic job's part of the ApplicationMaster: its group, the rendezvous its agents meet in, and
the mechanics that replace a lost task while the others train on.

A PyTorch type with ``tony.<type>.min-instances`` below its instances is elastic: when one of its
tasks is lost, the others keep their containers and agents, torch's agents re-form the group
without it, and the AM asks for a replacement, which joins at the next rendezvous.

:class:`ElasticGroup` keeps the numbers those decisions rest on, as plain values, and decides
nothing about processes:

- :meth:`ElasticGroup.lost`: whether a lost task is replaced (the session goes on) or the ordinary
  failure rules apply (``tony.elastic.max-membership-changes`` is spent). A container the cluster
  took back is not counted (it spends ``tony.am.reclaim-retry-count``, as ever).
- :meth:`ElasticGroup.formed`: a rendezvous round every node of which has joined: the group's size
  from then on, and the change since the round before (who left, who joined, and the cause the AM
  recorded for each departure).
- :meth:`ElasticGroup.overdue`: fewer than min-instances tasks of a type have been alive for longer
  than ``tony.elastic.fallback-timeout-ms``: the session is relaunched whole, as for a fixed job.

:class:`ElasticPart` is what the AM holds for an elastic job (:attr:`~.state.AMState.elastic`; None for
a fixed one), as it holds its gang watch and its policy: the group, the session's rendezvous
(:mod:`.rendezvous`), which containers' agents and trainers have joined, and the mechanics. It is
given the AM's state, whose cluster it uses, and the AM's way to launch a replacement; it changes
the state only through the state's own methods, under its lock. It is given a task of an elastic
type that ended and either settles it (the task is replaced alone and the session goes on; or it
ended after the group had finished) or hands it back to the ordinary failure rules. On each
monitor pass it counts the tasks that remain (replacements count once they have joined the group),
stops replacements that came too late to join, and says when too few have remained for too long.

Every change goes into the job's status (``elastic``: the size, the target, the workers waiting to
join, the history of sizes with their causes) and into the event log, which the timeline reads.
The agents' side is :mod:`tony_workflow.task.torch_agent`; the trainers' side, for a group that
re-forms in place, :mod:`tony_workflow.torch_elastic`.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..backends import Container
from ..frameworks import RANKED_TYPES
from ..status import TaskState
from .policy import LOST_EXIT_CODE, Failure, Policy, describe_exit, deterministic_cause
from .rendezvous import Formed, Rendezvous, task_order
from .tasks import Task

if TYPE_CHECKING:
    import threading

    from ..backends import ClusterManager
    from ..events import EventLog
    from ..spec import JobSpec
    from ..status import JobStatus


class AMState(Protocol):
    """What an elastic part reads and calls of the AM's state (:class:`.state.AMState`, which holds
    the part: named here by what it offers, so that neither module imports the other)."""

    @property
    def app_id(self) -> str: ...
    @property
    def spec(self) -> JobSpec: ...
    @property
    def cluster(self) -> ClusterManager: ...
    @property
    def lock(self) -> threading.RLock: ...
    @property
    def cond(self) -> threading.Condition: ...
    @property
    def events(self) -> EventLog: ...
    @property
    def policy(self) -> Policy: ...
    @property
    def progressed_types(self) -> set[str]: ...
    @property
    def status(self) -> JobStatus: ...
    @property
    def session_id(self) -> int: ...
    @property
    def tasks(self) -> dict[str, Task]: ...
    def publish(self, force: bool = False) -> None: ...
    def set_task_state(self, task: Task, state: str, **extra: Any) -> None: ...

__all__ = ["SUSPECT_WINDOW_S", "ElasticGroup", "ElasticPart"]

#: How long after a trainer's collective failed the monitor looks for a lost member at the nodes.
SUSPECT_WINDOW_S = 10.0

#: How many membership changes the status keeps (the event log keeps them all).
HISTORY_KEPT = 200


@dataclass
class ElasticGroup:
    """One session's elastic group (see the module docstring)."""

    #: elastic types: (min-instances, instances)
    bounds: dict[str, tuple[int, int]]
    #: every ranked type's instances: the group's full size, in nodes
    target: int
    minimum: int
    max_changes: int
    fallback_timeout_s: float
    session: int = 0
    changes: int = 0
    size: int = 0
    round: int = -1
    members: dict[str, int] = field(default_factory=dict)
    #: task id -> why it left, until the next formed round records it
    departures: dict[str, str] = field(default_factory=dict)
    #: since when some elastic type has fewer than its min-instances alive
    below_since: float | None = None
    #: training is over: a member ended by itself with success
    finished: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_spec(cls, spec: JobSpec) -> ElasticGroup | None:
        """The group of an elastic job (None for a fixed one)."""
        if not spec.elastic:
            return None
        bounds = {t: (ts.min_instances or ts.instances, ts.instances) for t, ts in spec.tasks.items() if ts.elastic}
        minimum, target = spec.elastic_nodes
        return cls(bounds, target=target, minimum=minimum,
                   max_changes=spec.elastic_max_membership_changes,
                   fallback_timeout_s=spec.elastic_fallback_timeout_ms / 1000.0)

    def begin(self, session: int, now: float) -> None:
        """A new session: its group starts empty and full-sized in intent; nothing is counted yet."""
        self.session, self.changes, self.size, self.round = session, 0, 0, -1
        self.members, self.departures, self.below_since, self.finished = {}, {}, None, False
        self.history.append({"at": now, "session": session, "size": 0, "event": "session started"})

    def is_elastic(self, task_type: str) -> bool:
        return task_type in self.bounds

    def lost(self, task_id: str, why: str, reclaimed: bool) -> bool:
        """A task of an elastic type failed or was taken back: True when it is to be replaced while
        the others go on (the change is counted unless ``reclaimed``), False when the ordinary rules
        apply (the budget is spent, or training is over)."""
        if self.finished:
            return False
        if not reclaimed:
            if self.changes >= self.max_changes:
                return False
            self.changes += 1
        if task_id in self.members:
            self.departures[task_id] = why  # recorded with the round that forms without it
            return True
        # The others re-formed without it before the cluster said how it ended (YARN tells a
        # container's end seconds later): the cause goes with the change already recorded.
        for change in reversed(self.history):
            if task_id in change.get("left", ()):
                change.setdefault("causes", {})[task_id] = why
                break
        return True

    def formed(self, f: Formed, now: float) -> dict[str, Any] | None:
        """A round that every node joined: the group's size from now on. Returns the change (for
        the event log), or None for a round older than the one recorded."""
        if f.round <= self.round:
            return None
        left = sorted(set(self.members) - set(f.members), key=task_order)
        joined = sorted(set(f.members) - set(self.members), key=task_order)
        # A task that left and whose replacement joined under the same id appears in neither set.
        replaced = sorted(set(self.departures) & set(f.members) & set(self.members), key=task_order)
        causes = {t: self.departures.pop(t) for t in [*left, *replaced] if t in self.departures}
        if self.round < 0:
            event = "group formed"
        elif len(f.members) < self.size:
            event = "group shrank"
        elif len(f.members) > self.size:
            event = "group grew"
        else:
            event = "group re-formed"
        change: dict[str, Any] = {"at": now, "round": f.round, "size": f.size, "event": event,
                                  "members": list(f.members)}
        if left:
            change["left"] = left
        if joined:
            change["joined"] = joined
        if replaced:
            change["replaced"] = replaced
        if causes:
            change["causes"] = causes
        self.round, self.size, self.members = f.round, f.size, dict(f.members)
        self.history.append(change)
        del self.history[:-HISTORY_KEPT]
        return change

    def overdue(self, alive: dict[str, int], now: float) -> str | None:
        """Why the session must be relaunched whole: a type has had fewer than its min-instances
        tasks alive (``alive``: per elastic type) for longer than the fallback timeout."""
        short = {t: (n, lo) for t, (lo, _) in self.bounds.items() if (n := alive.get(t, 0)) < lo}
        # Until the group first forms, the gang is still being granted: that wait is the gang's
        # (tony.container.allocation.timeout), not a shortage of members.
        if not short or self.finished or self.round < 0:
            self.below_since = None
            return None
        if self.below_since is None:
            self.below_since = now
        if now - self.below_since <= self.fallback_timeout_s:
            return None
        what = ", ".join(f"{n} of tony.{t}.min-instances={lo} '{t}' tasks" for t, (n, lo) in sorted(short.items()))
        return (f"the elastic group has had only {what} for more than {self.fallback_timeout_s:g} s "
                "(tony.elastic.fallback-timeout-ms): relaunching the session whole")

    def show(self, status: JobStatus, waiting: list[str]) -> None:
        """The group as the job's status shows it; ``waiting``: tasks alive that have not joined yet."""
        status.elastic = {
            "size": self.size, "target": self.target, "min": self.minimum, "round": self.round,
            "changes": self.changes, "max_changes": self.max_changes, "waiting": waiting,
            "below_min_since": self.below_since, "history": [dict(h) for h in self.history],
        }


#: The AM's way to launch a replacement: (task id, its new container, its restarts) -> the task.
Launch = Callable[[str, Container, int], Task]


class ElasticPart:
    """An elastic job's part of the AM (see the module docstring). Every method but
    :meth:`replace` is called with the state's lock held."""

    def __init__(self, state: AMState, group: ElasticGroup, launch: Launch):
        self.state, self.group, self.launch = state, group, launch
        #: the session's rendezvous (its own lock: blocking reads do not hold the AM's)
        self.rendezvous = Rendezvous()
        #: the containers whose agent has joined a round of the session's rendezvous, with its
        #: node's name in torch's rendezvous
        self.joined: dict[str, str] = {}
        #: in-place regrouping: the containers whose trainer asked for a place, with its node's name
        self.trainers: dict[str, str] = {}
        #: until when (wall clock) the monitor looks at the group's containers at their nodes: a
        #: member's collective failed, and the cluster's own report of a lost one comes later
        self.suspect_until = 0.0
        #: lost tasks to replace after the monitor's pass, outside the lock
        self.replacements: list[Task] = []

    def begin(self, session_id: int, now: float) -> None:
        """A new session: its agents meet in a rendezvous of its own (those of an ended session
        are refused), and its group starts empty."""
        self.rendezvous.open(f"{self.state.app_id}-{session_id}", self.group.minimum, self.group.target)
        self.joined, self.trainers, self.replacements = {}, {}, []
        self.group.begin(session_id, now)

    def covers(self, task: Task) -> bool:
        """Whether ``task`` is of an elastic type."""
        return self.group.is_elastic(task.status.type)

    def succeeded(self, task: Task) -> str | None:
        """A task of an elastic type ended with success: training is over, no more replacements
        (None); or why that is a failure: regrouping in place, it trained outside the group (a
        script that does not train through tony_workflow.torch_elastic.run sees no RANK and trains
        alone)."""
        if self.state.spec.regroup_in_place and not self.group.finished and task.container.id not in self.trainers:
            return ("with tony.elastic.regroup=in-place the training command must train through "
                    "tony_workflow.torch_elastic.run, which gives it its place in the group; this one ended "
                    "without ever asking for one. Use that function, or set tony.elastic.regroup=restart "
                    "(torch's elastic agent) for a plain torchrun script")
        self.group.finished = True
        return None

    def lost(self, task: Task, code: int, cause: str | None, diagnostics: str) -> bool:
        """A task of an elastic type ended with ``code`` (``cause``: why the cluster took its
        container back, if it did): True when that is settled here (it is replaced while the others
        train on, or it ended after the group finished), False when the ordinary rules apply."""
        s, group = self.state, self.group
        if group.finished and task.container.id not in self.joined:
            # A replacement too late to join: the others finished training without it.
            s.set_task_state(task, TaskState.KILLED, exit_code=code,
                             diagnostics="the elastic group finished before this task joined it")
            return True
        if not cause and deterministic_cause(Failure.of(task.status, diagnostics, s.progressed_types)):
            # Killed for memory before any progress, a module missing: its replacement would end the
            # same way, and the group would spend every change on it. The ordinary rules fail the job
            # at once with the cause and the key to change.
            return False
        reclaimed = bool(cause) and s.status.reclaims < s.policy.reclaim_retry_count
        why = (f"its container was {cause}" if cause else
               "lost: the AM gave up on it" if code == LOST_EXIT_CODE else describe_exit(code))
        if not group.lost(task.id, why, reclaimed):
            return False
        if reclaimed:
            s.status.reclaims += 1
            s.events.emit("container_reclaimed", task=task.id, session=task.session_id, cause=cause)
        # Its agent's node leaves the round now, not when its keep-alives lapse.
        self.rendezvous.departed(self.joined.get(task.container.id, "") or self.trainers.get(task.container.id, ""))
        state = TaskState.KILLED if reclaimed else TaskState.LOST if code == LOST_EXIT_CODE else TaskState.FAILED
        s.set_task_state(task, state, exit_code=code, diagnostics=diagnostics[-2000:])
        s.events.emit("elastic_member_lost", task=task.id, session=task.session_id, exit_code=code, cause=why,
                      reclaimed=reclaimed, changes=group.changes, max_changes=group.max_changes)
        # Replaced after the monitor's pass, outside the lock: the old container's kill waits.
        self.replacements.append(task)
        return True

    def take_replacements(self) -> list[Task]:
        """The lost tasks to replace now (the monitor, after its pass)."""
        with self.state.lock:
            out, self.replacements = self.replacements, []
        return out

    def replace(self, task: Task) -> None:
        """A lost elastic task gets a new container, on any port and (on YARN) any node; its agent
        joins the group at the next rendezvous. The others are left running. Called without the
        lock: the old container's kill waits."""
        s = self.state
        s.cluster.kill(task.container, grace=1.0)
        restarts = task.status.restarts + 1
        with s.lock:
            if s.session_id != task.session_id or self.group.finished:
                return
            container = s.cluster.new_container(task.container)
            s.events.emit("task_replaced", task=task.id, session=s.session_id, restart=restarts)
            self.launch(task.id, container, restarts)

    def suspect(self, now: float) -> bool:
        """Whether the monitor looks at the group's containers at their nodes on this pass."""
        return now < self.suspect_until

    def monitor_pass(self, now: float | None = None) -> str | None:
        """One look at the group on the monitor's pass: why the session must be relaunched whole
        (too few remained for too long), or None. Replacements that have not joined do not count
        as remaining; once training is over, those are stopped."""
        s, group = self.state, self.group
        now = time.time() if now is None else now
        alive: dict[str, int] = {}
        for t in list(s.tasks.values()):
            if t.final or t.stopping or t.status.state == TaskState.REQUESTED or not group.is_elastic(t.status.type):
                continue
            joined = t.container.id in self.joined
            if group.finished and not joined:
                t.stopping = True
                s.cluster.kill(t.container, grace=0.5)
                s.set_task_state(t, TaskState.KILLED, exit_code=t.status.exit_code,
                                 diagnostics="the elastic group finished before this task joined it")
                continue
            if joined or t.status.restarts == 0:  # a first launch counts from the start; a replacement once it joins
                alive[t.status.type] = alive.get(t.status.type, 0) + 1
        return group.overdue(alive, now)

    def collective_failed(self, task: Task, generation: int) -> None:
        """A trainer of ``task`` says a collective of ``generation`` failed: a member may be gone.
        For the next :data:`SUSPECT_WINDOW_S` the monitor looks at the group's containers at their
        nodes on every pass, rather than waiting for the cluster to report one ended (on YARN
        that report comes seconds later)."""
        s = self.state
        if time.time() >= self.suspect_until:
            s.events.emit("collective_failed", task=task.id, session=s.session_id, generation=generation)
        self.suspect_until = time.time() + SUSPECT_WINDOW_S
        s.cond.notify_all()

    def joined_round(self, task: Task, formed: Formed | None, node: str = "") -> None:
        """``task``'s agent (named ``node`` in torch's rendezvous) joined a rendezvous round;
        ``formed``: the round, once every node of it has."""
        s = self.state
        self.joined[task.container.id] = node or self.joined.get(task.container.id, "")
        if formed is not None:
            change = self.group.formed(formed, time.time())
            if change is not None:
                s.events.emit("elastic_group", session=s.session_id, what=change["event"], target=self.group.target,
                              **{k: v for k, v in change.items() if k not in ("at", "event")})
        s.publish()

    def show(self) -> None:
        """The group in the job's status, with the tasks alive that have not joined it yet."""
        s = self.state
        waiting = [t.id for t in s.tasks.values()
                   if t.status.type in RANKED_TYPES and not t.final and t.status.state != TaskState.REQUESTED
                   and t.container.id not in self.joined]
        self.group.show(s.status, waiting)
