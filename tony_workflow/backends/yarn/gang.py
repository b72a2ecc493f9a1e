"""Gangs on a shared YARN queue: whose turn it is, and what blocks a job that must wait.

YARN grants containers one at a time, as room frees up, and has no notion of a job that needs N of
them at once. Two such jobs that each ask for everything and each get part of it can wait for each
other forever. TonY jobs in one queue therefore take turns, in the order YARN itself serves the
queue (higher priority first, then the order of submission), and a job asks for its containers
only when the rest of its gang, and what every older job of the queue still lacks, fit together in
what the ResourceManager reports free: node by node, in the node's partition (label), and within
the queue's headroom. An older job's needs are set aside first, so a stream of small jobs never
starves a big one; a younger job goes ahead of an older one only when both fit at once
(backfilling), so nothing is kept idle that could run. A job that holds part of its gang while an
older job cannot place what it still lacks gives back what it holds (:attr:`Verdict.elders_blocked`):
the older job is the one that must form first, and the two never wait on each other.

Every job sees what the others still need without talking to them: at submission the client tags
the application with the shape of its gang (:func:`gang_tag`: skein's master container, then each
container of the gang), and the ResourceManager lists every application's tags, state, priority
and running containers. What a job still lacks is its gang less the containers it runs; which of
its containers are missing is not reported, so the largest are assumed missing. A job that asks
for its whole gang as its application starts says so in its tag (:func:`asked_at_start`): from its
submission on, before YARN even starts its master, its gang counts as asked for.

YARN serves only the jobs that ask: an older job still waiting for its turn has no request at the
ResourceManager, and a younger one whose turn came (it asked, and is being granted its gang) is
served before it whatever their ages. So jobs that have asked (:attr:`Member.asked`: the line
directory says so, :mod:`.line`) come first in the order, oldest first, and only then those
that wait. Judged otherwise, an older job would ask for room that a younger one's requests already
take, and hold part of its gang beside the younger one's whole.

This module is pure: the snapshot comes from the ResourceManager (:mod:`.rm`, read by
:mod:`.am` and :mod:`.gate`), and the verdict is a function of it, tested as tables.
"""
from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...status import counted
from ..base import Capacity
from .rm import AppReport, amounts

__all__ = [
    "GANG_TAG_PREFIX",
    "LIVE_STATES",
    "Member",
    "Node",
    "Shape",
    "Verdict",
    "asked_at_start",
    "gang_tag",
    "headroom_from",
    "maximum_from",
    "members_from",
    "minimum_allocation",
    "nodes_from",
    "parse_gang_tag",
    "queue_order",
    "reason_for",
    "shape_of",
    "verdict",
    "verdicts",
]

#: The application tag that carries a job's gang: ``tony-gang:MASTER/SHAPE*N/...``.
GANG_TAG_PREFIX = "tony-gang:"
#: YARN refuses application tags longer than this.
_TAG_MAX = 100
_SHAPE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:@([a-z0-9_-]+))?(?:\*(\d+))?(!)?$")
#: How long after its submission a job that asks for its gang at start counts as asking while YARN
#: has not started its master: past it, the queue's share for ApplicationMasters is what holds it
#: back, and it must not hold back the jobs already started.
START_GRACE_S = 60.0
#: The states of an application of the queue: submitted (before the scheduler accepts it, for a
#: moment), accepted (its master not registered yet) or running.
LIVE_STATES = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")


@dataclass(frozen=True)
class Shape:
    """What one container asks for: memory, vcores, GPUs, and the partition (node label) it must
    run in ("" for the default partition)."""

    memory_mb: int
    vcores: int
    gpus: int = 0
    label: str = ""

    @property
    def size(self) -> tuple[int, int, int]:
        """Orders shapes scarcest resource first: GPUs, then memory, then vcores."""
        return (self.gpus, self.memory_mb, self.vcores)

    def fits(self, room: Sequence[int]) -> bool:
        return self.memory_mb <= room[0] and self.vcores <= room[1] and self.gpus <= room[2]

    def text(self) -> str:
        parts = [f"{self.memory_mb} MB", f"{self.vcores} vcore{'' if self.vcores == 1 else 's'}"]
        if self.gpus:
            parts.append(f"{self.gpus} GPU{'' if self.gpus == 1 else 's'}")
        return ", ".join(parts)

    def _code(self) -> str:
        return f"{self.memory_mb}.{self.vcores}.{self.gpus}" + (f"@{self.label}" if self.label else "")


def shape_of(memory_mb: int, vcores: int, gpus: int, label: str | None, minimum: tuple[int, int] = (1, 1)) -> Shape:
    """The container YARN grants for such a request: memory and vcores rounded up to multiples of
    the scheduler's minimum allocation (``minimum``), the label lowercased as tags are."""
    mem_step, vc_step = max(1, minimum[0]), max(1, minimum[1])
    return Shape(-(-memory_mb // mem_step) * mem_step, -(-vcores // vc_step) * vc_step, gpus, (label or "").lower())


def minimum_allocation(queue: dict[str, Any] | None) -> tuple[int, int]:
    """The scheduler's minimum allocation (memory MB, vcores), which it rounds every request up to,
    as the scheduler's entry for a queue shows it; (1, 1) when it does not."""
    partitions = ((queue or {}).get("capacities") or {}).get("queueCapacitiesByPartition") or []
    for entry in [queue or {}, *partitions]:
        for key in ("configuredMinResource", "configuredMaxResource"):
            infos = ((entry.get(key) or {}).get("resourceInformations") or {}).get("resourceInformation") or []
            found = {i.get("name"): int(i.get("minimumAllocation") or 1) for i in infos}
            if "memory-mb" in found:
                return found["memory-mb"], found.get("vcores", 1)
    return (1, 1)


def gang_tag(master: Shape, gang: Sequence[Shape], at_start: bool = False) -> str:
    """The application tag naming skein's master container and every container of the gang (the
    ApplicationMaster's and the tasks'), the master's marked ``!`` when skein's master asks for
    the whole gang as the application starts (``at_start``). YARN lowercases tags and keeps at
    most 100 characters: a gang with too many distinct shapes is written as that many of the
    largest (asks too much of the others' patience, never too little)."""
    counts: dict[Shape, int] = {}
    for s in gang:
        counts[s] = counts.get(s, 0) + 1
    head = master._code() + ("!" if at_start else "")
    body = "/".join(f"{s._code()}*{n}" for s, n in sorted(counts.items(), key=lambda kv: kv[0].size, reverse=True))
    tag = f"{GANG_TAG_PREFIX}{head}/{body}"
    if len(tag) > _TAG_MAX:
        big = Shape(max(s.memory_mb for s in gang), max(s.vcores for s in gang), max(s.gpus for s in gang))
        tag = f"{GANG_TAG_PREFIX}{head}/{big._code()}*{len(gang)}"
    return tag.lower()


def asked_at_start(tags: Iterable[str]) -> bool:
    """Whether the gang tag among ``tags`` says its job asks for its whole gang as it starts."""
    return any(t.startswith(GANG_TAG_PREFIX) and t[len(GANG_TAG_PREFIX):].split("/")[0].endswith("!")
               for t in tags)


def parse_gang_tag(tags: Iterable[str]) -> tuple[Shape, tuple[Shape, ...]] | None:
    """(master, gang) from an application's tags; None when it has no gang tag (not a TonY job of
    this kind) or the tag is damaged."""
    for tag in tags:
        if not tag.startswith(GANG_TAG_PREFIX):
            continue
        shapes: list[Shape] = []
        master = None
        for i, part in enumerate(tag[len(GANG_TAG_PREFIX):].split("/")):
            m = _SHAPE.match(part)
            if not m:
                return None
            s = Shape(int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4) or "")
            if i == 0:
                master = s
            else:
                shapes.extend([s] * int(m.group(5) or 1))
        return (master, tuple(shapes)) if master is not None and shapes else None
    return None


@dataclass(frozen=True)
class Node:
    """A RUNNING NodeManager: its partition and what it has free and in all, (memory MB, vcores, GPUs)."""

    id: str
    label: str
    free: tuple[int, int, int]
    total: tuple[int, int, int]


@dataclass(frozen=True)
class Member:
    """A TonY job of the queue, as the ResourceManager shows it. ``held`` is how many containers of
    its gang it runs (its running containers less skein's master), None when the ResourceManager
    does not show them (another user's application, without the right to view it)."""

    app_id: str
    priority: int
    state: str
    master: Shape
    gang: tuple[Shape, ...]
    held: int | None
    #: it asks for its whole gang as its master starts, which YARN has not yet done (within
    #: :data:`START_GRACE_S` of its submission)
    starting: bool = False
    #: YARN has placed its master's container, though the master has not registered yet
    master_placed: bool = False
    #: its requests for its gang are at the ResourceManager (or granted): it is served before any
    #: job that waits for its turn
    asked: bool = False
    #: it waits for its turn at the gate, and YARN is about to start its master (within
    #: :data:`START_GRACE_S` of its submission)
    arriving: bool = False

    def remaining(self) -> list[Shape]:
        """What it still lacks, largest first: its whole gang unless it runs part of it. Nothing
        before YARN starts its master (YARN decides when: the queue's share for ApplicationMasters
        may hold it back, and a job waiting for that must not hold back those already started),
        unless its master will ask for the whole gang as it starts: then the master's container
        too, which no node holds yet; else its master's container alone, which YARN is about to
        place (a job submitted just before another must not find its master's room taken)."""
        ordered = sorted(self.gang, key=lambda s: s.size, reverse=True)
        if self.state != "RUNNING":
            if not self.starting:  # a job that will wait at the gate: its master alone, soon placed
                return [self.master] if self.arriving and not self.master_placed else []
            return ordered if self.master_placed else sorted((*self.gang, self.master), key=lambda s: s.size,
                                                              reverse=True)
        if self.held is None:
            return ordered
        return ordered[:max(0, len(self.gang) - self.held)]


def _seq(app_id: str) -> tuple[int, int]:
    try:
        _, ts, seq = app_id.split("_")
        return int(ts), int(seq)
    except ValueError:
        return (0, 0)


def _place(priority: int, app_id: str, asked: bool) -> tuple[int, int, tuple[int, int]]:
    return (0 if asked else 1, -priority, _seq(app_id))


def _placed(m: Member) -> tuple[int, int, tuple[int, int]]:
    return _place(m.priority, m.app_id, m.asked or m.starting)


def queue_order(members: Iterable[Member]) -> list[Member]:
    """The order YARN's FIFO ordering serves a queue in: the jobs that have asked first, then
    those that wait for their turn; in each, higher priority first, then submission."""
    return sorted(members, key=_placed)


@dataclass(frozen=True)
class Verdict:
    """Whether a job may ask for what it still lacks now (``go``), else why not: ``reason`` (one
    line), ``ahead`` (older jobs that still lack containers) and ``elders_blocked`` (an older job
    cannot place what it lacks: a job holding part of its gang gives it back). ``blocker`` is what
    blocks it and ``shape`` the container it is blocked on, from which :func:`reason_for` writes
    the reason again in another job's words (its task types, its counts)."""

    go: bool
    reason: str | None = None
    ahead: tuple[str, ...] = ()
    elders_blocked: bool = False
    blocker: str | None = None
    shape: Shape | None = None
    #: next in line (one older job lacks containers), and its AM's container cannot keep that job
    #: from forming (:meth:`_Pass.next_early`)
    next_early: bool = False

    @property
    def first_in_line(self) -> bool:
        """Judged on the queue (a container shape blocks it, not a board still being read) and
        kept waiting by the room alone: no older job lacks containers."""
        return not self.go and not self.ahead and self.shape is not None and not self.elders_blocked

    @property
    def starts_early(self) -> bool:
        """Whether its ApplicationMaster may start now, before its turn, to wait for it: first in
        line, or next with room to spare (:attr:`next_early`)."""
        return self.first_in_line or (self.next_early and not self.go)


@dataclass
class _Room:
    """What is free, being handed out in a simulation: per node, and per partition of the queue."""

    nodes: list[Node]
    headroom: Mapping[str, Capacity] | None
    free: dict[str, list[int]] = field(default_factory=dict)
    queue: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.free = {n.id: list(n.free) for n in self.nodes}
        self.queue = {label: [c.memory_mb, c.vcores, c.gpus] for label, c in (self.headroom or {}).items()}

    def copy(self) -> _Room:
        twin = _Room(self.nodes, self.headroom)
        twin.free = {k: list(v) for k, v in self.free.items()}
        twin.queue = {k: list(v) for k, v in self.queue.items()}
        return twin

    def take(self, shape: Shape) -> bool:
        """Places ``shape`` on the node of its partition it fills best (the least room left after);
        False when the queue's headroom or every node is short of it."""
        q = self.queue.get(shape.label)
        if q is not None and not shape.fits(q):
            return False
        fitting = [n for n in self.nodes if n.label == shape.label and shape.fits(self.free[n.id])]
        if not fitting:
            return False
        best = min(fitting, key=lambda n: (self.free[n.id][0] - shape.memory_mb, n.id))
        room = self.free[best.id]
        room[0] -= shape.memory_mb
        room[1] -= shape.vcores
        room[2] -= shape.gpus
        if q is not None:
            q[0] -= shape.memory_mb
            q[1] -= shape.vcores
            q[2] -= shape.gpus
        return True


def _never_placed(shape: Shape, nodes: Sequence[Node]) -> bool:
    """No node of the shape's partition could hold it even empty (or the partition has none)."""
    return not any(n.label == shape.label and shape.fits(n.total) for n in nodes)


def _crowded_out(m: Member, members: Sequence[Member], nodes: Sequence[Node],
                 maximum: Mapping[str, Capacity] | None) -> bool:
    """Whether ``m``'s gang cannot fit its partitions beside the masters of the other jobs that
    wait (they hold nothing else): it cannot form while they wait, so it must not hold them back
    either, or each would wait for the other."""
    masters = [o.master for o in members if o.app_id != m.app_id and o.state == "RUNNING" and o.held == 0]
    for label in {s.label for s in m.gang} | {m.master.label}:
        room = [sum(n.total[i] for n in nodes if n.label == label) for i in range(3)]
        if maximum and label in maximum:
            cap = maximum[label]
            room = [min(room[0], cap.memory_mb), min(room[1], cap.vcores), min(room[2], cap.gpus)]
        need = [s for s in (*m.gang, m.master) if s.label == label] + [s for s in masters if s.label == label]
        if any(sum((s.memory_mb, s.vcores, s.gpus)[i] for s in need) > room[i] for i in range(3)):
            return True
    return False


class _Pass:
    """A pass over a queue in the order YARN serves it: each job served in turn takes what it
    still lacks from the room (:meth:`serve`), and a job may be judged against what those served
    before it left (:meth:`judge`)."""

    def __init__(self, members: Sequence[Member], nodes: Sequence[Node], headroom: Mapping[str, Capacity] | None,
                 maximum: Mapping[str, Capacity] | None, queue: str):
        self.members, self.nodes, self.headroom, self.maximum, self.queue = members, nodes, headroom, maximum, queue
        self.room = _Room(list(nodes), headroom)
        self.ahead: list[str] = []
        self.blocked: dict[str, str] = {}  # partition -> the first older job that cannot form in it now

    def serve(self, m: Member) -> None:
        """``m`` as an elder of the jobs after it: what it lacks is set aside for it."""
        lacks = [s for s in m.remaining() if not _never_placed(s, self.nodes)]
        if not lacks or _crowded_out(m, self.members, self.nodes, self.maximum):
            return
        self.ahead.append(m.app_id)
        # A job that cannot form now keeps what it waits for in its partition: nobody behind it
        # may take that. Partitions are apart (a queue's capacity is per partition too).
        for s in lacks:
            if s.label in self.blocked or not self.room.take(s):
                self.blocked.setdefault(s.label, m.app_id)

    def judge(self, pending: Sequence[tuple[str, Shape]], counts: Mapping[str, tuple[int, int]]) -> Verdict:
        """Whether a job that lacks ``pending`` may ask for it now, the room left as it is."""
        mine = sorted(pending, key=lambda p: p[1].size, reverse=True)
        ahead = tuple(self.ahead)
        clash = next(((t, s) for t, s in mine if s.label in self.blocked), None)
        if clash is not None:
            blocker = (f"{_jobs(ahead)} ahead in queue {self.queue or '?'}; {self.blocked[clash[1].label]} "
                       "cannot be placed yet and goes first")
            return Verdict(False, _reason([clash], counts, blocker), ahead, elders_blocked=True, blocker=blocker,
                           shape=clash[1])
        trial = self.room.copy()
        for ttype, shape in mine:
            if trial.take(shape):
                continue
            blocker = _blocker(mine, self.nodes, self.headroom, ahead, self.queue)
            return Verdict(False, _reason([(ttype, shape)], counts, blocker), ahead, blocker=blocker, shape=shape)
        return Verdict(True, ahead=ahead)

    def next_early(self, me: Member, am: Shape) -> bool:
        """Whether ``me``, next in line (exactly one older job lacks containers), may start its
        AM (a container of shape ``am``) before its turn without keeping the job ahead from ever
        forming. Once every complete gang has ended, what stays held is what the jobs lacking
        containers hold: their masters, AMs started early and parts of gangs (the largest shapes
        assumed), ``me``'s master, and the AM. Where YARN put them is not reported, so all of them
        are taken from every node of their partition (and from the queue's maximum): if the job
        ahead still fits there, it fits wherever they are. At most two AMs of a queue wait so."""
        if len(self.ahead) != 1:
            return False
        held = [am]
        for m in self.members:
            if m.state == "RUNNING" and m.held is None:
                return False  # what it holds is not shown
            if m.state == "RUNNING" and not m.remaining() and m.app_id != me.app_id:
                continue  # a whole gang: it ends, and all it holds with it
            if m.state == "RUNNING" or m.master_placed:
                held.append(m.master)
            if m.state == "RUNNING":
                held.extend(sorted(m.gang, key=lambda s: s.size, reverse=True)[:m.held or 0])
        taken: dict[str, list[int]] = {}
        for s in held:
            t = taken.setdefault(s.label, [0, 0, 0])
            for i, amount in enumerate((s.memory_mb, s.vcores, s.gpus)):
                t[i] += amount

        def left(label: str, whole: Sequence[int]) -> tuple[int, int, int]:
            t = taken.get(label, [0, 0, 0])
            return (max(0, whole[0] - t[0]), max(0, whole[1] - t[1]), max(0, whole[2] - t[2]))

        nodes = [Node(n.id, n.label, left(n.label, n.total), n.total) for n in self.nodes]
        caps = {label: Capacity(*left(label, (c.memory_mb, c.vcores, c.gpus))) for label, c in (self.maximum or {}).items()}
        room = _Room(nodes, caps or None)
        ahead = next((m for m in self.members if m.app_id == self.ahead[0]), None)
        if ahead is None:
            return False
        # One whose master YARN is about to start lacks only that now, and its whole gang after.
        needs = [*ahead.gang, ahead.master] if ahead.arriving else ahead.remaining()
        return all(room.take(s) for s in sorted(needs, key=lambda s: s.size, reverse=True)
                   if not _never_placed(s, self.nodes))


def verdict(me: str, priority: int, members: Iterable[Member], nodes: Sequence[Node],
            headroom: Mapping[str, Capacity] | None, pending: Sequence[tuple[str, Shape]],
            counts: Mapping[str, tuple[int, int]], queue: str = "",
            maximum: Mapping[str, Capacity] | None = None) -> Verdict:
    """Whether application ``me`` (of YARN priority ``priority``) may ask now for ``pending``
    ((task type, shape) pairs: what it still lacks), given the TonY jobs of its queue
    (``members``; those served before it are its elders), the RUNNING nodes, and the queue's
    headroom and maximum capacity per partition (None when unknown). ``counts`` gives, per task
    type, (held, wanted), for the reason; ``queue`` names the queue in it."""
    members = list(members)
    line = _Pass(members, list(nodes), headroom, maximum, queue)
    own = next((m for m in members if m.app_id == me), None)
    mine_at = _placed(own) if own is not None else _place(priority, me, False)
    for m in queue_order(members):
        if m.app_id != me and _placed(m) < mine_at:
            line.serve(m)
    v = line.judge(pending, counts)
    if not v.go and own is not None and own.state == "RUNNING" and own.held == 0 and pending:
        # its AM's container taken as its largest, as the board judges every job (a tag does not
        # say which is the AM's): one rule, whichever job of the queue looks for the others
        v = replace(v, next_early=line.next_early(own, max((s for _, s in pending), key=lambda s: s.size)))
    return v


def verdicts(members: Iterable[Member], nodes: Sequence[Node], headroom: Mapping[str, Capacity] | None,
             queue: str = "", maximum: Mapping[str, Capacity] | None = None) -> dict[str, Verdict]:
    """:func:`verdict` of every member that still lacks containers, in one pass over the queue:
    each is judged on what it lacks by its tag (its largest containers), with no names for its
    task types (see :func:`reason_for`)."""
    members = list(members)
    line = _Pass(members, list(nodes), headroom, maximum, queue)
    out = {}
    for m in queue_order(members):
        lacks = m.remaining()
        if lacks:
            v = line.judge([("task", s) for s in lacks], {})
            if not v.go and m.state == "RUNNING" and m.held == 0:  # its AM's shape is not told: its largest
                v = replace(v, next_early=line.next_early(m, lacks[0]))
            out[m.app_id] = v
        line.serve(m)
    return out


def reason_for(v: Verdict, pending: Sequence[tuple[str, Shape]], counts: Mapping[str, tuple[int, int]]) -> str | None:
    """``v``'s reason in the words of the job it is about: its task type that lacks ``v``'s shape
    (else its largest), with its counts (:func:`verdict`'s ``counts``)."""
    if v.go or v.blocker is None:
        return v.reason
    mine = sorted(pending, key=lambda p: p[1].size, reverse=True)
    named = next(((t, s) for t, s in mine if s == v.shape), mine[0] if mine else ("task", v.shape or Shape(0, 0)))
    return _reason([named], counts, v.blocker)


def _jobs(ahead: Sequence[str]) -> str:
    shown = ", ".join(ahead[:3]) + (f" and {len(ahead) - 3} more" if len(ahead) > 3 else "")
    return f"{len(ahead)} job{'' if len(ahead) == 1 else 's'} ({shown})"


def _reason(mine: Sequence[tuple[str, Shape]], counts: Mapping[str, tuple[int, int]], blocker: str) -> str:
    if not mine:
        return blocker
    ttype, shape = mine[0]
    held, wanted = counts.get(ttype, (0, 0))
    label = f" labelled {shape.label}" if shape.label else ""
    return f"{ttype}: {held} of {wanted} containers ({shape.text()}{label} each); blocked by {blocker}"


def _blocker(mine: Sequence[tuple[str, Shape]], nodes: Sequence[Node], headroom: Mapping[str, Capacity] | None,
             ahead: Sequence[str], queue: str) -> str:
    """What keeps the rest of the gang (``mine``) from being placed: a label no node carries, nodes
    too small, older jobs whose containers go first, the queue's headroom, or the room on the
    nodes."""
    for _, shape in mine:
        partition = [n for n in nodes if n.label == shape.label]
        if not partition:
            return (f"node label {shape.label!r}, which no running node carries" if shape.label
                    else "no running node in the default partition")
        if _never_placed(shape, nodes):
            biggest = max(partition, key=lambda n: n.total)
            return (f"the largest container a node can give ({biggest.total[0]} MB, "
                    f"{counted(biggest.total[1], 'vcore')}, {counted(biggest.total[2], 'GPU')} on {biggest.id})")
    alone = _Room(list(nodes), headroom)
    short = next((s for _, s in mine if not alone.take(s)), None)
    if short is None:  # it would fit but for what older jobs take first
        return f"{_jobs(ahead)} ahead in queue {queue or '?'}, whose containers are placed first"
    q = (headroom or {}).get(short.label)
    if q is not None and alone.queue[short.label] and not short.fits(alone.queue[short.label]):
        need = [s for _, s in mine if s.label == short.label]
        return (f"queue headroom: queue {queue or '?'} has {max(q.memory_mb, 0)} MB, "
                f"{counted(max(q.vcores, 0), 'vcore')}, {counted(max(q.gpus, 0), 'GPU')} free of its maximum "
                f"capacity, and the gang lacks {sum(s.memory_mb for s in need)} MB, "
                f"{counted(sum(s.vcores for s in need), 'vcore')}, {counted(sum(s.gpus for s in need), 'GPU')} there")
    partition = [n for n in nodes if n.label == short.label]
    roomiest = max(partition, key=lambda n: (n.free[2] >= short.gpus, n.free[0], n.free[1]))
    return (f"room on the nodes: the largest container a node can give now is {roomiest.free[0]} MB, "
            f"{counted(roomiest.free[1], 'vcore')}, {counted(roomiest.free[2], 'GPU')} ({roomiest.id})")


# ---------------------------------------------------------------------- from the REST API's answers
def nodes_from(listed: Iterable[dict[str, Any]]) -> list[Node]:
    """The RUNNING NodeManagers of ``/ws/v1/cluster/nodes``, each in its partition (its first
    label; YARN gives a node one), labels lowercased as application tags are."""
    out = []
    for n in listed:
        if n.get("state") != "RUNNING":
            continue
        labels = n.get("nodeLabels") or []
        free = amounts(n.get("availableResource")) if n.get("availableResource") else (
            int(n.get("availMemoryMB", 0)), int(n.get("availableVirtualCores", 0)), 0)
        total = amounts(n.get("totalResource")) if n.get("totalResource") else (
            free[0] + int(n.get("usedMemoryMB", 0)), free[1] + int(n.get("usedVirtualCores", 0)), free[2])
        out.append(Node(str(n.get("id")), str(labels[0]).lower() if labels else "", free, total))
    return out


def maximum_from(queue: dict[str, Any] | None) -> dict[str, Capacity] | None:
    """The queue's maximum capacity in each partition (``effectiveMaxResource``); None when the
    scheduler does not say. A maximum that names no GPUs does not limit them."""
    if not queue:
        return None
    out = {}
    for p in (queue.get("capacities") or {}).get("queueCapacitiesByPartition") or []:
        if p.get("effectiveMaxResource"):
            mem, vcores, gpus = amounts(p.get("effectiveMaxResource"))
            out[(p.get("partitionName") or "").lower()] = Capacity(mem, vcores, gpus or 1 << 30)
    return out or None


def headroom_from(queue: dict[str, Any] | None) -> dict[str, Capacity] | None:
    """What the queue may still take in each partition: its maximum (``effectiveMaxResource``)
    less what it uses; None when the scheduler does not say (no such queue, another scheduler)."""
    if not queue:
        return None
    maxima = {(p.get("partitionName") or "").lower(): amounts(p.get("effectiveMaxResource"))
              for p in (queue.get("capacities") or {}).get("queueCapacitiesByPartition") or []
              if p.get("effectiveMaxResource")}
    used = {(p.get("partitionName") or "").lower(): amounts(p.get("used"))
            for p in (queue.get("resources") or {}).get("resourceUsagesByPartition") or []}
    if not maxima:
        return None
    out = {}
    for label, (mem, vcores, gpus) in maxima.items():
        u = used.get(label, (0, 0, 0))
        # A queue whose maximum names no GPUs (a scheduler without GPU accounting) is not limited in them.
        out[label] = Capacity(mem - u[0], vcores - u[1], gpus - u[2] if gpus else 1 << 30)
    return out


def members_from(reports: Iterable[AppReport], queue: str, now: float | None = None,
                 asked: Iterable[str] = ()) -> list[Member]:
    """The TonY jobs with a gang tag in ``queue`` (as the ResourceManager names it, e.g.
    ``root.default``) that YARN has been given and has not ended (:data:`LIVE_STATES`). ``now`` is
    the time, for jobs that ask at start and wait for their master (default the clock's);
    ``asked`` names the applications that have asked for their gang."""
    marked = set(asked)
    now = time.time() if now is None else now
    out = []
    for r in reports:
        if r.queue != queue or r.state not in LIVE_STATES:
            continue
        parsed = parse_gang_tag(r.tags)
        if parsed is None:
            continue
        held = None if r.state != "RUNNING" or r.running_containers is None else max(0, r.running_containers - 1)
        recent = r.state != "RUNNING" and now - (r.started_at or now) < START_GRACE_S
        at_start = asked_at_start(r.tags)
        out.append(Member(r.id, r.priority, r.state, parsed[0], parsed[1], held, recent and at_start,
                          master_placed=r.state != "RUNNING" and bool(r.running_containers), asked=r.id in marked,
                          arriving=recent and not at_start))
    return out
