"""Whether a YARN job asks for its whole gang as its application starts.

The quickest way to a running gang is to ask for every container, the AM's and the tasks', in the
very first round of requests that skein's master sends: YARN places them in one pass, and the AM
and the executors start together (the executors wait for the AM's launch order, :mod:`.boot`).
The client submitting a job decides it, with the gate's own verdict (:func:`.gang.verdict`):
the gang must fit now beside everything the older jobs of the queue still lack. Otherwise the
gate in skein's master waits for the job's turn and asks then (:mod:`.gate`), which is always
safe but slower.

Two jobs submitted to one queue at the same moment each see the queue as it was before the other
existed. So each first announces itself: an *intent*, an empty file in the queue's directory under
``tony.gang.line-dir`` whose name gives its gang (:func:`intent_name`), written before it looks.
The intents written before its own, or at the same time (by the store's clock), count as jobs ahead
of it; those written after count it, not it them. Of submissions at the same moment, the first to
write its intent asks at start if its gang fits, the second only if both gangs fit, and so on: as
many start at once as fit, and the others wait for their turn. (That is safe whatever the order of
writing and listing: a job that did not see another's intent listed before that intent was written,
so the other's is not older and counts this one; two intents of the same time, or whose times are
read in the middle of their writing, may each count the other, which only sends both the gate's
way.) Once submitted, the job's tag says that it asks at start (:func:`.gang.asked_at_start`),
which counts its gang in every look from then on, and the intent is removed. A job that waits
for its turn is submitted at once if its master's container fits beside what the jobs asking at
start still lack; else once they have asked (their masters run), within seconds: YARN places a
queue's containers in the order their requests come, and a gang's requests come only once its
master runs, so a master submitted meanwhile would take room the gang was counted to have
(:func:`_after_elders`). The ResourceManager's
list of applications is read after the intents, so that a job whose intent has gone since was
submitted, and is in it. An intent older than :data:`INTENT_TTL_S` is from a client that died while
submitting, and is ignored; one older than :data:`INTENT_GONE_S` is deleted.

Any trouble (no line directory, HDFS unreachable, a ResourceManager that cannot be read) means
the gate's way.
"""
from __future__ import annotations

import contextlib
import logging
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...storage import Storage
from .gang import (
    GANG_TAG_PREFIX,
    Member,
    Node,
    Shape,
    gang_tag,
    headroom_from,
    maximum_from,
    members_from,
    parse_gang_tag,
    verdict,
)
from .line import ASKED_PREFIX, BOARD_PREFIX, STALE_S, Board, queue_dir
from .rm import AppReport, RMError

__all__ = ["INTENT_GONE_S", "INTENT_TTL_S", "StartPlan", "intent_name", "parse_intent", "plan_start"]

log = logging.getLogger("tony.yarn")

#: How long an intent counts: a client writes it, looks and submits within seconds.
INTENT_TTL_S = 30.0
#: An intent this much older than a new one is deleted by the new one's client.
INTENT_GONE_S = 600.0
#: How long a job that waits for its turn lets the jobs that ask for their gang at start go first
#: (:func:`_after_elders`): a submission takes a second or two, a master's start some seconds more
ELDERS_WAIT_S = 30.0
ELDERS_LOOK_S = 0.25
#: Younger than every real application, so that the job being submitted is served last.
_NEWCOMER = "application_9999999999999_999999"
#: skein's master, as a reason names it
_MASTER = "skein's master"


@dataclass
class StartPlan:
    """What a submission does: the tasks skein's master asks for at start (none: the gate's way)
    and why, with the intent to remove once the application exists (:meth:`done`)."""

    tasks: list[str]
    why: str
    store: Storage | None = None
    intent: str | None = None
    looked: dict[str, Any] = field(default_factory=dict)

    def asked(self, app_id: str) -> str:
        """The application ``app_id`` (returned) is submitted asking for its gang: the line
        directory says so (:meth:`.line.Line.asking`) before its intent goes."""
        if self.store is not None and self.intent is not None and self.tasks:
            with contextlib.suppress(OSError):
                self.store.touch(f"{self.intent.rsplit('/', 1)[0]}/{ASKED_PREFIX}{app_id}")
        return app_id

    def done(self) -> None:
        """The application is submitted (or not): its intent goes."""
        if self.store is not None and self.intent is not None:
            with contextlib.suppress(OSError):
                self.store.delete(self.intent)
            self.intent = None


def intent_name(master: Shape, gang: Sequence[Shape], priority: int) -> str:
    """An intent's file name, which holds all it says (an empty file is written in one quick round,
    where a file with data waits for its block): when, a nonce, the job's priority and its gang as
    its tag gives it, its slashes as ``+``."""
    code = gang_tag(master, gang)[len(GANG_TAG_PREFIX):].replace("/", "+")
    return f"intent-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}-{priority}-{code}"


def parse_intent(name: str) -> Member | None:
    """The job an intent's file name announces, as a member of the queue ahead of any real one."""
    parts = name.split("-", 4)
    if len(parts) != 5 or parts[0] != "intent" or not parts[3].isdigit():
        return None
    parsed = parse_gang_tag([GANG_TAG_PREFIX + parts[4].replace("+", "/")])
    if parsed is None:
        return None
    # A job about to be submitted that asks at start: its master's container is placed with its gang.
    return Member(f"intent:{parts[1]}-{parts[2]}", int(parts[3]), "ACCEPTED", parsed[0], parsed[1], 0, starting=True)


def _listing(store: Storage, queue: str, mine: str) -> tuple[list[Member], bool, set[str]]:
    """The live intents of the queue written before this one, as jobs ahead of it, whether a
    looker's board says jobs wait for their turn (:mod:`.line`), and the jobs that have asked for
    their gang. The store's clock (a file's modification time) decides what is live and what came
    first, whatever the clients' clocks say."""
    listed = store.list(queue_dir(queue))
    own = listed.get(mine)
    if own is None:
        raise OSError(f"the intent {mine} is not listed in its own directory")
    out, waiting, asked = [], False, set()
    for name, entry in listed.items():
        if name == mine:
            continue
        if name.startswith(ASKED_PREFIX):
            asked.add(name[len(ASKED_PREFIX):])
            continue
        if name.startswith(BOARD_PREFIX) and entry.mtime >= own.mtime - STALE_S and not waiting:
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    store.get(f"{queue_dir(queue)}/{name}", Path(tmp) / "b")
                    board = Board.from_json((Path(tmp) / "b").read_text())
                    waiting = bool(board.waiting) and not board.leaving
                except (OSError, ValueError, KeyError):
                    pass
        if entry.mtime < own.mtime - INTENT_TTL_S:
            if name.startswith("intent-") and entry.mtime < own.mtime - INTENT_GONE_S:
                # Its client died submitting, long ago: the file goes (its owner's to delete,
                # the directory being sticky; another user's stays, ignored).
                with contextlib.suppress(OSError):
                    store.delete(f"{queue_dir(queue)}/{name}")
            continue
        if entry.mtime > own.mtime:
            continue  # written after this one: that job counts this one's gang, not this one its
        member = parse_intent(name)
        if member is not None:
            out.append(member)
    return out, waiting, asked


def plan_start(tasks: list[str], gang: Sequence[tuple[str, Shape]], master: Shape, priority: int,
               queue: str, queue_info: dict[str, Any] | None, nodes: Sequence[Node],
               reports: Callable[[], Sequence[AppReport]], store: Storage | None,
               elders_wait_s: float = ELDERS_WAIT_S,
               room_now: Callable[[], tuple[Sequence[Node], dict[str, Any] | None]] | None = None) -> StartPlan:
    """Whether the tasks ``tasks`` (those that may be asked for at start; the AM's container is
    among ``gang``, the (task type, shape) of every container the job asks for) are asked for as
    the application starts. ``queue`` is the ResourceManager's name for the job's queue,
    ``queue_info`` its scheduler entry, ``nodes`` the running NodeManagers, ``reports`` reads the TonY
    applications the ResourceManager lists (:data:`.gang.LIVE_STATES`), after the intents are listed,
    so that a job whose intent is gone from the listing (it was submitted meanwhile) is in the list;
    ``store`` the line directory (None: there is none). A job that waits for its turn returns once
    its master's container fits beside what the jobs asking at start still lack, or after
    ``elders_wait_s`` (:func:`_after_elders`; ``room_now`` reads the nodes and the queue's entry
    again meanwhile, default: as given)."""
    if not tasks:
        return StartPlan([], "no task may be asked for before the AM runs (spread types are placed by the AM)")
    if store is None:
        return StartPlan([], "no line directory (tony.gang.line-dir) to announce the job in")
    name = intent_name(master, [s for _, s in gang], priority)
    try:
        store.shared_dir(queue_dir(queue))
        store.touch(f"{queue_dir(queue)}/{name}")
        plan = StartPlan([], "", store, f"{queue_dir(queue)}/{name}")
        others, waiting, asked = _listing(store, queue, name)
    except OSError as e:
        log.info("the line directory cannot be used (%s): the job waits for its turn in skein's master", e)
        return StartPlan([], f"the line directory cannot be used: {e}")
    if waiting:
        plan.why = "jobs of the queue wait for their turn (its board says so)"
        plan.done()
        return plan
    try:
        listed = reports()
    except RMError as e:
        plan.why = f"the ResourceManager's applications cannot be read: {e}"
        plan.done()
        return plan
    counts: dict[str, tuple[int, int]] = {}
    for ttype, _ in gang:
        counts[ttype] = (0, counts.get(ttype, (0, 0))[1] + 1)
    # skein's master is placed with the gang too: last, so that a reason names a task of the
    # same size before it.
    counts[_MASTER] = (0, 1)
    from_rm = members_from(listed, queue, asked=asked)
    members = [*others, *from_rm]
    v = verdict(_NEWCOMER, priority, members, nodes, headroom_from(queue_info), [*gang, (_MASTER, master)], counts,
                queue=queue, maximum=maximum_from(queue_info))
    plan.looked = {"intents": len(others), "members": len(members), "go": v.go}
    if v.go:
        plan.tasks, plan.why = list(tasks), "the queue has room for the whole gang now"
    else:
        plan.why = f"its turn has not come: {v.reason}"
        plan.done()  # a job that waits for its turn holds no room: the gate asks when it comes
        first = _Look(others, [m for m in from_rm if m.starting], nodes, queue_info)
        plan.looked["held_s"] = _after_elders(store, queue, priority, master, first, reports,
                                              room_now or (lambda: (nodes, queue_info)), elders_wait_s)
    return plan


@dataclass
class _Look:
    """The jobs asking for their gang as they start that a waiting job's master must not crowd:
    ``intents`` (not submitted yet) and ``starting`` (submitted, their masters not running), with
    the nodes and the queue's scheduler entry of the same look."""

    intents: list[Member]
    starting: list[Member]
    nodes: Sequence[Node]
    queue_info: dict[str, Any] | None

    def master_fits(self, master: Shape, priority: int, queue: str) -> bool:
        members = [*self.intents, *self.starting]
        if not members:
            return True
        v = verdict(_NEWCOMER, priority, members, self.nodes, headroom_from(self.queue_info),
                    [(_MASTER, master)], {_MASTER: (0, 1)}, queue=queue, maximum=maximum_from(self.queue_info))
        return v.go


def _after_elders(store: Storage, queue: str, priority: int, master: Shape, look: _Look,
                  reports: Callable[[], Sequence[AppReport]],
                  room_now: Callable[[], tuple[Sequence[Node], dict[str, Any] | None]], within_s: float) -> float:
    """Returns (the seconds it held the submission) once the master's container of a job that
    waits for its turn fits beside what the jobs that ask for their gang as they start still lack,
    those ``look`` counted ahead of it (by their intents) and those YARN has been given, or after
    ``within_s``. YARN places a queue's containers in the order their requests come, and a gang
    asked at start is requested only once its master runs: a waiting job's master submitted
    before that would take room the gang was counted to have (three gangs fitting exactly, one
    would wait for a running job to end). Where room is left over, it is submitted at once."""
    t0 = time.monotonic()
    while not look.master_fits(master, priority, queue):
        if time.monotonic() - t0 >= within_s:
            log.info("the jobs asking at start still lack room after %.0f s: submitting anyway", within_s)
            break
        time.sleep(ELDERS_LOOK_S)
        try:
            # intents first: one gone since is submitted, and in the ResourceManager's list after
            live = {m.app_id for name in store.list(queue_dir(queue)) if (m := parse_intent(name)) is not None}
            look = _Look([m for m in look.intents if m.app_id in live],
                         [m for m in members_from(reports(), queue) if m.starting], *room_now())
        except (OSError, RMError):
            break
    return round(time.monotonic() - t0, 2)
