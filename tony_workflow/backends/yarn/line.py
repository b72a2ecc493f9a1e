"""A YARN job's view of the line it waits in: the ResourceManager read once for a whole queue, and
the verdicts shared.

Whether a job's turn has come is :mod:`.gang`'s verdict on what the ResourceManager says of
the queue: its TonY applications, its headroom, and the nodes. If every waiting job read that
itself every couple of seconds, the load on the one process every job of the cluster depends on
would grow with jobs × nodes: fifty jobs on five thousand nodes would pull hundreds of megabytes
a minute. So each queue has one *looker*, a job waiting for its turn, that reads for all and
leaves every job's verdict on the queue's *board*, a small file in the line directory
(``tony.gang.line-dir``, :mod:`.start`'s); the others read the board, from HDFS, and ask the
ResourceManager nothing. The looker reads the cheapest answers first: the queue's TonY
applications (brief, of its queue only) and the scheduler's word on the queue (its headroom);
the nodes only when the headroom leaves room for some waiting job, and no more often than
:data:`NODE_BYTES_PER_S` allows for the size of the last node list.

Who looks: the board lists the jobs that wait for their turn, in the queue's order. A board whose
file's time has not changed for :data:`STALE_S` (measured on the reader's own clock from when it
first saw that time: no two clocks are compared) has lost its looker; the first job in that order
takes over at once, the k-th after k more looks, so that the first one alive takes over and the
others find its board. Two lookers at once (a race) settle it as they see each other's boards:
the one served later steps down. A looker whose turn has come says so on its last board
(``leaving``), and the next in line takes over at its next look. A job that holds part of its gang
(forming, in its AM) reads the board but never looks for others.

A job that asks for its gang says so first with a file of its own in the directory
(``asked-<application id>``, :meth:`Line.asking`), and removes it when it gives its gang back to
wait again, or ends: the looker, which lists the directory anyway, serves such jobs before every
job that waits (:attr:`.gang.Member.asked`), as the ResourceManager does, whatever their ages.

Without a line directory, every job reads the ResourceManager itself, and looks less often the
longer its verdict stays the same (up to :data:`BACKOFF_MAX_S`).
"""
from __future__ import annotations

import contextlib
import json
import logging
import random
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...storage import Storage
from ..base import Capacity, ContainerRequest
from .gang import (
    LIVE_STATES,
    Member,
    Node,
    Shape,
    Verdict,
    headroom_from,
    maximum_from,
    members_from,
    minimum_allocation,
    nodes_from,
    queue_order,
    reason_for,
    shape_of,
    verdict,
    verdicts,
)
from .rm import AppReport, ResourceManager, RMError

__all__ = ["ASKED_PREFIX", "BACKOFF_MAX_S", "BOARD_PREFIX", "KEEN_LOOK_S", "LOOK_EVERY_S", "NODE_BYTES_PER_S", "STALE_S", "Board", "Line", "line_store",
           "queue_dir"]

log = logging.getLogger("tony.yarn")

#: How often a waiting job looks at its line (each look is spread by ±25 %, so that jobs started
#: together do not ask in step).
LOOK_EVERY_S = 2.0
#: How often a job looks whose AM started before its turn (first or next in line), to ask for its
#: gang once the room frees. It reads the ResourceManager itself (two such jobs a queue at most), not
#: another looker's board, which is up to a look of that looker older.
KEEN_LOOK_S = 0.5
#: A board whose time has not changed for this long has lost its looker.
STALE_S = 3 * LOOK_EVERY_S
#: How many bytes a second the looker may spend on the ResourceManager's node list.
NODE_BYTES_PER_S = 512 * 1024
#: The longest pause of a job that looks alone, while its verdict does not change.
BACKOFF_MAX_S = 30.0
#: The board files of a queue's directory: ``board-<looker's application id>``.
BOARD_PREFIX = "board-"
#: The files of a queue's directory that say a job asked for its gang: ``asked-<application id>``.
ASKED_PREFIX = "asked-"


def line_store(location: str | None, hadoop_conf_dir: str | None = None, login: Any = None) -> Storage | None:
    """The line directory ``tony.gang.line-dir`` names (HDFS unless a URI says otherwise); None
    when it names none, or it cannot be opened here."""
    if not location:
        return None
    from ...errors import ConfigError
    from ...storage import open_storage
    try:
        return open_storage(location if "://" in location else f"hdfs://{location}", hadoop_conf_dir=hadoop_conf_dir,
                            login=login)
    except (ConfigError, OSError) as e:
        log.info("tony.gang.line-dir %s cannot be opened (%s)", location, e)
        return None


def queue_dir(queue: str) -> str:
    """The line directory's subdirectory of a queue (``root.default``)."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in queue) or "default"


@dataclass
class Board:
    """What a looker leaves for its queue: the jobs that wait for their turn in the queue's order
    (who looks next), every waiting job's verdict, and whether the looker is leaving."""

    looker: str
    waiting: list[str]
    verdicts: dict[str, Verdict]
    leaving: bool = False

    def to_json(self) -> str:
        def one(v: Verdict) -> dict[str, Any]:
            return {"go": v.go, "ahead": list(v.ahead), "release": v.elders_blocked, "blocker": v.blocker,
                    "shape": _code(v.shape) if v.shape else None, "early": v.next_early}
        return json.dumps({"looker": self.looker, "waiting": self.waiting, "leaving": self.leaving,
                           "verdicts": {k: one(v) for k, v in self.verdicts.items()}})

    @classmethod
    def from_json(cls, text: str) -> Board:
        doc = json.loads(text)
        out = {k: Verdict(bool(v["go"]), None, tuple(v.get("ahead") or ()), bool(v.get("release")),
                          v.get("blocker"), _shape(v.get("shape")), bool(v.get("early")))
               for k, v in (doc.get("verdicts") or {}).items()}
        return cls(str(doc["looker"]), list(doc.get("waiting") or []), out, bool(doc.get("leaving")))


def _code(shape: Shape) -> list[Any]:
    return [shape.memory_mb, shape.vcores, shape.gpus, shape.label]


def _shape(code: Any) -> Shape | None:
    return Shape(int(code[0]), int(code[1]), int(code[2]), str(code[3])) if code else None


@dataclass
class _Seen:
    """A board file as this job last saw it, and since when (its own monotonic clock) its time
    has not changed."""

    mtime: float
    since: float
    board: Board | None = None


@dataclass
class Line:
    """Application ``app_id``'s place in its queue, read through ``rm`` (None: not readable from
    here; every look then says so, and the job asks without waiting its turn), sharing the
    queue's reads through ``board`` (the line directory; None: none)."""

    app_id: str
    rm: ResourceManager | None
    board: Storage | None = None
    look_every_s: float = LOOK_EVERY_S
    minimum: tuple[int, int] = (1, 1)
    queue: str = ""
    #: the job's own report at the last look that read it
    me: AppReport | None = None
    unreadable: str | None = None
    #: whether this job is its queue's looker now
    looking: bool = False
    #: its AM started before its turn (first or next in line) and waits for it (:func:`pause`)
    keen: bool = False
    _seen: dict[str, _Seen] = field(default_factory=dict)
    _interval: float = 0.0
    _last: tuple[Any, ...] | None = None
    _nodes: tuple[float, list[Node]] | None = None  # (when read, the running nodes)
    _node_bytes: int = 0
    _absent_since: float | None = None  # when this job first found itself missing from a fresh board
    #: the jobs the directory said had asked, at its last listing, and since when (monotonic)
    _marks: dict[str, float] = field(default_factory=dict)
    _kept: set[str] = field(default_factory=set)  # marks of ended jobs this job may not delete

    def __post_init__(self) -> None:
        self._interval = self.look_every_s
        if self.rm is None:
            self.unreadable = "the ResourceManager's REST API cannot be reached from this container"

    def pause(self) -> float:
        """Seconds until the next look: a job whose AM waits for its turn (:attr:`keen`, two a
        queue at most) looks every :data:`KEEN_LOOK_S` for itself, for its gang is asked for the
        moment the room frees."""
        return (KEEN_LOOK_S if self.keen else self._interval) * random.uniform(0.75, 1.25)

    def shape(self, request: ContainerRequest) -> Shape:
        """The container YARN grants for ``request`` (rounded up to the scheduler's minimum; the
        request's label is the one its container asks for)."""
        return shape_of(request.memory_mb, request.vcores, request.gpus, request.node_label, self.minimum)

    # ------------------------------------------------------------------ looking
    def look(self, pending: Sequence[ContainerRequest], counts: Mapping[str, tuple[int, int]],
             may_lead: bool = True) -> Verdict | None:
        """Whether the job may ask for the containers of ``pending`` now (see
        :func:`.gang.verdict`; ``counts`` gives each task type's (held, wanted)); None when
        the ResourceManager cannot be read (:attr:`unreadable` says why). ``may_lead``: whether
        this job may be its queue's looker (a job waiting for its turn, not one forming)."""
        if self.rm is None:
            return None
        try:
            if not self.queue:
                me = self.rm.app(self.app_id)
                if me is None:
                    raise RMError(f"the ResourceManager does not know {self.app_id}")
                self.me, self.queue = me, me.queue
            v, lead = self._from_board(pending, counts, may_lead) if self.board is not None else (None, False)
            alone = v is None and not lead
            if v is None:
                v = self._look(pending, counts, lead=lead)
        except (RMError, ValueError, KeyError) as e:
            if self.unreadable is None:
                log.warning("%s: the line cannot be read (%s); asking without waiting for a turn", self.app_id, e)
            self.unreadable = str(e)
            return None
        self.unreadable = None
        self._back_off(v, alone)
        return v

    def _back_off(self, v: Verdict, alone: bool) -> None:
        """A job that read the ResourceManager for itself alone looks less often while its verdict
        stays the same; the looker and the board's readers keep their pace (a board is cheap)."""
        now = (v.go, v.reason, v.ahead)
        if not alone or now != self._last:
            self._interval = self.look_every_s
        else:
            self._interval = min(BACKOFF_MAX_S, self._interval * 1.5)
        self._last = now

    def _look(self, pending: Sequence[ContainerRequest], counts: Mapping[str, tuple[int, int]], lead: bool) -> Verdict:
        """Reads the ResourceManager: this job's verdict, and with ``lead`` every waiting job's,
        left on the queue's board."""
        rm = self.rm
        assert rm is not None
        reports = rm.apps(tags=("tony",), states=LIVE_STATES, queue=self.queue, brief=True)
        me = next((r for r in reports if r.id == self.app_id), None) or rm.app(self.app_id)
        if me is None:
            raise RMError(f"the ResourceManager does not know {self.app_id}")
        self.me, self.queue = me, me.queue
        info = rm.queue(me.queue)
        self.minimum = minimum_allocation(info)
        members = members_from(reports, me.queue, asked=self._marks)
        headroom, maximum = headroom_from(info), maximum_from(info)
        nodes = self._nodes_for(members, headroom)
        shapes = [(r.task_id.split(":")[0], self.shape(r)) for r in pending]
        mine = verdict(self.app_id, me.priority, members, nodes, headroom, shapes, counts, queue=me.queue,
                       maximum=maximum)
        if lead:
            self._publish(members, nodes, headroom, maximum, mine)
            self._sweep({r.id for r in reports})
        return mine

    def _nodes_for(self, members: list[Member], headroom: Mapping[str, Capacity] | None) -> list[Node]:
        """The running nodes: read again only when the queue's headroom leaves room for some job's
        whole remainder (else the headroom alone blocks everyone), and no sooner than the node
        budget allows for the last list's size."""
        rm = self.rm
        assert rm is not None
        now = time.monotonic()
        if self._nodes is not None:
            read_at, nodes = self._nodes
            if now - read_at < self._node_bytes / NODE_BYTES_PER_S or not _room_in(members, headroom):
                return nodes
        nodes = nodes_from(rm.nodes(states=("RUNNING",)))
        self._nodes, self._node_bytes = (now, nodes), rm.last_bytes
        return nodes

    # ------------------------------------------------------------------ the board
    def _key(self, app_id: str) -> str:
        return f"{queue_dir(self.queue)}/{BOARD_PREFIX}{app_id}"

    def _publish(self, members: list[Member], nodes: list[Node], headroom: Mapping[str, Capacity] | None,
                 maximum: Mapping[str, Capacity] | None, mine: Verdict) -> None:
        """Leaves every waiting job's verdict on this job's board (the time of the file changes
        even when nothing else does: readers see the looker alive)."""
        store = self.board
        assert store is not None
        every = verdicts(members, nodes, headroom, self.queue, maximum)
        every[self.app_id] = mine
        waiting = [m.app_id for m in queue_order(members)
                   if m.state == "RUNNING" and m.held == 0 and m.remaining() and not m.asked]
        board = Board(self.app_id, waiting, every, leaving=mine.go)
        self._write(board)
        self.looking = not mine.go

    def _sweep(self, live: set[str]) -> None:
        """Deletes the boards of lookers that ended without removing theirs (a container killed
        with its node): gone from the queue's accepted and running applications, and unchanged
        for :data:`STALE_S`; the same for the marks of jobs that asked. Only its owner can delete
        a file of the sticky directory: another user's stays, tried once per process."""
        store = self.board
        assert store is not None
        now = time.monotonic()
        for app_id, since in self._marks.items():
            # Not yet listed as accepted may be just submitted: only a mark seen a while goes.
            if app_id not in live and app_id not in self._kept and now - since > STALE_S:
                try:
                    store.delete(f"{queue_dir(self.queue)}/{ASKED_PREFIX}{app_id}")
                except OSError:
                    self._kept.add(app_id)
        for key, seen in list(self._seen.items()):
            looker = key.rsplit("/", 1)[-1][len(BOARD_PREFIX):]
            if looker in live or looker == self.app_id or now - seen.since < STALE_S:
                continue
            try:
                store.delete(key)
                del self._seen[key]
            except OSError as e:
                log.debug("%s: the board of %s, which has ended, stays (%s)", self.app_id, looker, e)

    def _write(self, board: Board) -> None:
        store = self.board
        assert store is not None
        key = self._key(self.app_id)
        seen = self._seen.get(key)
        try:
            if seen is not None and seen.board is not None and seen.board.to_json() == board.to_json():
                store.stamp(key, max(time.time(), seen.mtime + 0.001))  # the same board, alive
            else:
                store.shared_dir(queue_dir(self.queue))
                with tempfile.TemporaryDirectory() as tmp:
                    (Path(tmp) / "board.json").write_text(board.to_json())
                    store.put(Path(tmp) / "board.json", key)
            self._seen[key] = _Seen(seen.mtime if seen else 0.0, time.monotonic(), board)
        except OSError as e:
            log.info("%s: the queue's board cannot be written (%s)", self.app_id, e)

    def _boards(self) -> dict[str, tuple[_Seen, Board]]:
        """The queue's boards by looker, with when each was last seen to change."""
        store = self.board
        assert store is not None
        own = self._key(self.app_id)
        every = store.list(queue_dir(self.queue))
        now = time.monotonic()
        marks = [name[len(ASKED_PREFIX):] for name in every if name.startswith(ASKED_PREFIX)]
        self._marks = {app_id: self._marks.get(app_id, now) for app_id in marks}
        listed = {name: e for name, e in every.items() if name.startswith(BOARD_PREFIX)}
        out = {}
        for name, entry in listed.items():
            key = f"{queue_dir(self.queue)}/{name}"
            seen = self._seen.get(key)
            if seen is None or seen.mtime != entry.mtime:
                # First seen, or changed: its age is unknown, so it counts as fresh from now.
                board = seen.board if seen is not None and key == own else self._read(key)
                seen = self._seen[key] = _Seen(entry.mtime, now, board)
            if seen.board is not None:
                out[seen.board.looker] = (seen, seen.board)
        for key in [k for k in self._seen if k.rsplit("/", 1)[-1] not in listed]:
            del self._seen[key]
        return out

    def _read(self, key: str) -> Board | None:
        store = self.board
        assert store is not None
        with tempfile.TemporaryDirectory() as tmp:
            try:
                store.get(key, Path(tmp) / "board.json")
                return Board.from_json((Path(tmp) / "board.json").read_text())
            except (OSError, ValueError, KeyError):
                return None

    def _from_board(self, pending: Sequence[ContainerRequest], counts: Mapping[str, tuple[int, int]],
                    may_lead: bool) -> tuple[Verdict | None, bool]:
        """This job's verdict from the queue's freshest board, else None and whether it looks for
        the whole queue (it is the looker, or the one to take over) or only for itself."""
        try:
            boards = self._boards()
        except OSError as e:
            log.info("%s: the queue's board cannot be read (%s)", self.app_id, e)
            return None, False
        now = time.monotonic()
        fresh = [looker for looker, (seen, b) in boards.items()
                 if now - seen.since < STALE_S and not b.leaving and looker != self.app_id]
        if fresh and self.keen:
            # First or next in line with its AM up: its own verdict from the ResourceManager, now (the
            # asked marks just listed included), rather than the looker's of up to a look ago.
            self.looking = False
            return None, False
        if fresh:
            # The first looker in the queue's order holds; a later one (this job too) steps down.
            first = _in_order(fresh, boards)[0]
            if self.looking and _in_order([self.app_id, first], boards)[0] == self.app_id:
                return None, True
            self.looking = False
            v = boards[first][1].verdicts.get(self.app_id)
            if v is not None:
                self._absent_since = None
                shapes = [(r.task_id.split(":")[0], self.shape(r)) for r in pending]
                return replace(v, reason=reason_for(v, shapes, counts)), False
            self._absent_since = self._absent_since or now
            if now - self._absent_since < STALE_S:
                return Verdict(False, "waiting for the queue's looker to read its place in the queue",
                               blocker="its place in the queue is being read"), False
            return None, False  # a looker that does not see this job: it reads for itself alone
        if not may_lead:
            return None, False
        if self.looking or not boards:
            self.looking = True
            return None, True
        # No looker alive: the first waiting job of the last board takes over at once, the k-th
        # after k looks (by when the first has taken over); a looker that left hands over at once.
        seen, last = max(boards.values(), key=lambda sb: sb[0].since)
        order = [i for i in last.waiting if i != last.looker]
        place = order.index(self.app_id) if self.app_id in order else len(order)
        wait_s = (0.0 if last.leaving else STALE_S) + place * self.look_every_s
        if now - seen.since < wait_s:
            v = last.verdicts.get(self.app_id)
            blocker = "the queue's looker has gone quiet: the next in line takes over"
            return Verdict(False, blocker if v is None else reason_for(v, [(r.task_id.split(":")[0], self.shape(r))
                                                                          for r in pending], counts),
                           v.ahead if v else (), blocker=blocker), False
        self.looking = True
        return None, True

    def leave(self) -> None:
        """This job no longer waits for its turn: as the looker, it says so on its board, so that
        the next in line takes over at its next look."""
        if self.board is None or not self.looking or not self.queue:
            return
        key = self._key(self.app_id)
        seen = self._seen.get(key)
        if seen is not None and seen.board is not None:
            self._write(Board(self.app_id, seen.board.waiting, seen.board.verdicts, leaving=True))
        self.looking = False

    def asking(self, asks: bool = True) -> None:
        """Says in the line directory that this job asks for its gang now (before its requests
        go), or with ``asks`` false that it no longer does (it gave its gang back, and waits)."""
        if self.board is None or not self._known_queue():
            return
        key = f"{queue_dir(self.queue)}/{ASKED_PREFIX}{self.app_id}"
        try:
            if asks:
                self.board.shared_dir(queue_dir(self.queue))
                self.board.touch(key)
            else:
                self.board.delete(key)
        except OSError as e:
            log.info("%s: the line directory cannot say whether it asks (%s)", self.app_id, e)

    def _known_queue(self) -> bool:
        if not self.queue and self.rm is not None:
            with contextlib.suppress(RMError, ValueError, KeyError):  # as a look: the line unreadable, not the job
                me = self.rm.app(self.app_id)
                self.queue = me.queue if me is not None else ""
        return bool(self.queue)

    def close(self) -> None:
        """Removes this job's board and its word that it asked (at its end)."""
        if self.board is not None and self.queue:
            for key in (self._key(self.app_id), f"{queue_dir(self.queue)}/{ASKED_PREFIX}{self.app_id}"):
                try:
                    self.board.delete(key)
                except OSError as e:
                    log.info("%s: %s stays (%s)", self.app_id, key, e)


def _in_order(ids: list[str], boards: dict[str, tuple[_Seen, Board]]) -> list[str]:
    """``ids`` in the queue's order as the boards list it (unlisted ones last, oldest first)."""
    order: list[str] = []
    for _, b in boards.values():
        order = b.waiting if len(b.waiting) > len(order) else order
    return sorted(ids, key=lambda i: (order.index(i) if i in order else len(order), i))


def _room_in(members: list[Member], headroom: Mapping[str, Capacity] | None) -> bool:
    """Whether the queue's headroom could hold what some member still lacks (unknown headroom:
    yes), by the totals alone."""
    if headroom is None:
        return True
    for m in members:
        need: dict[str, list[int]] = {}
        for s in m.remaining():
            t = need.setdefault(s.label, [0, 0, 0])
            t[0], t[1], t[2] = t[0] + s.memory_mb, t[1] + s.vcores, t[2] + s.gpus
        if need and all(label not in headroom or (c := headroom[label]) is None or (
                t[0] <= c.memory_mb and t[1] <= c.vcores and t[2] <= c.gpus) for label, t in need.items()):
            return True
    return False
