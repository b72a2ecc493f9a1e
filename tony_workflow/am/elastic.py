"""The AM's account of an elastic job's group: who trains, what changed and why, and when to give up.

A PyTorch type with ``tony.<type>.min-instances`` below its instances is elastic: when one of its
tasks is lost, the others keep their containers and agents, torch's agents re-form the group
without it, and the AM asks for a replacement, which joins at the next rendezvous. This object
decides nothing about processes; it keeps the numbers those decisions rest on, as plain values:

- :meth:`ElasticGroup.lost`: whether a lost task is replaced (the session goes on) or the ordinary
  failure rules apply (``tony.elastic.max-membership-changes`` is spent). A container the cluster
  took back is not counted (it spends ``tony.am.reclaim-retry-count``, as ever).
- :meth:`ElasticGroup.formed`: a rendezvous round every node of which has joined: the group's size
  from then on, and the change since the round before (who left, who joined, and the cause the AM
  recorded for each departure).
- :meth:`ElasticGroup.overdue`: fewer than min-instances tasks of a type have been alive for longer
  than ``tony.elastic.fallback-timeout-ms``: the session is relaunched whole, as for a fixed job.

Every change goes into the job's status (``elastic``: the size, the target, the workers waiting to
join, the history of sizes with their causes) and into the event log, which the timeline reads.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .rendezvous import Formed, task_order

if TYPE_CHECKING:
    from ..spec import JobSpec
    from ..status import JobStatus

__all__ = ["ElasticGroup"]

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
