"""Following what a job's tasks print: their stdout and stderr, as lines, as they come.

A :class:`OutputFollower` reads the files of the tasks it follows (the chief by default: ``chief:0``
where the job has a chief, else ``worker:0``) through the backend
(:meth:`~tony_workflow.backends.base.Backend.read_output`: the embedded cluster's container files,
YARN's NodeManagers), from byte offsets it keeps in a :class:`Cursor`. Offsets move only past whole
lines, so a follower started again from a cursor (an Airflow retry that reattaches, a second
``tony logs --follow``) prints no line twice and drops none. A line still being written waits for
its end (or for the job's, or until it is :data:`MAX_LINE` long: then it is cut, and says so).

A relaunched session runs in new containers: the follower reads what the old ones still had,
then marks the change (``--- session 1 ---``) before the new ones' lines.

A task that prints a lot never holds up the job (nothing here writes to it or waits on it) and
never floods the follower: lines come at most :data:`RATE` a second (with a burst of
:data:`BURST`), and a file that ran more than :data:`SKIP_OVER` bytes ahead is read from near its
end; what was left out is said, with how much, in a line of its own.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import OutputRefused

__all__ = ["BURST", "MAX_LINE", "OUTPUT_INTERVAL_S", "RATE", "READ_LIMIT", "SKIP_OVER", "TAIL_LINES", "Cursor",
           "OutputFollower", "OutputLine", "Piece", "StatusGap", "default_tasks", "failed_output", "last_lines",
           "parse_tasks", "selected"]

#: how often a job's followers look at its output between two reads of its status (seconds)
OUTPUT_INTERVAL_S = 1.0

#: lines a second a follower passes on, over all the tasks it follows, and the burst it allows
RATE, BURST = 200.0, 2000.0
#: the longest line passed on whole (in bytes); a longer one is cut, and says by how much
MAX_LINE = 8192
#: the most read of one file at one look
READ_LIMIT = 1 << 20
#: a file this far ahead of its offset is read from near its end: the rest is left out, and said
SKIP_OVER = 4 << 20
STREAMS = ("stdout", "stderr")
#: how long the last lines of an ended job are waited for (on YARN its NodeManagers may have let
#: its files go before its logs are aggregated)
DRAIN_WAIT_S = 65.0
#: how many of a failed task's last lines (of each stream) its job's error shows
TAIL_LINES = 50
#: the most read from the end of a file for its last lines
TAIL_BYTES = 64 << 10
#: the failed tasks whose last lines an error shows; the others are named
TAIL_TASKS = 3


@dataclass(frozen=True)
class Piece:
    """One file a task's container writes: the task (``worker:0``), the session the container
    ran in, the container's id, which stream, and where the cluster shows its logs (the task's
    log link: a file on the embedded cluster, a NodeManager's page on YARN)."""

    task: str
    session: int
    container: str
    stream: str
    where: str | None = None

    @property
    def key(self) -> str:
        return f"{self.container}/{self.stream}"


@dataclass
class OutputLine:
    """A line a task printed (without its end of line), or a line of the follower's own
    (``task`` empty: a session's start, what was left out)."""

    task: str
    stream: str
    text: str
    session: int = 0

    def render(self) -> str:
        if not self.task:
            return self.text
        return f"[{self.task}{' stderr' if self.stream == 'stderr' else ''}] {self.text}"


@dataclass
class Cursor:
    """Where a follower is: per file (``<container>/<stream>``), the bytes passed on (whole lines
    only), and the last session it marked. JSON, to be kept between a follower's lives."""

    offsets: dict[str, int] = field(default_factory=dict)
    session: int = 0
    #: the files not read to their end yet, by key: (task, session, where), so that a follower
    #: started again reads an ended container's last lines too
    open_files: dict[str, tuple[str, int, str | None]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"offsets": self.offsets, "session": self.session,
                           "open": {k: list(v) for k, v in self.open_files.items()}}, sort_keys=True)

    def furthest(self, other: Cursor | None) -> Cursor:
        """The cursor that has passed on what either of two cursors of one job has (offsets only
        grow): where a follower goes on when two records of how far it got may differ."""
        if other is None:
            return self
        offsets = {k: max(self.offsets.get(k, 0), other.offsets.get(k, 0)) for k in {*self.offsets, *other.offsets}}
        return Cursor(offsets, max(self.session, other.session), {**other.open_files, **self.open_files})

    @classmethod
    def from_json(cls, text: str | None) -> Cursor:
        if not text:
            return cls()
        doc = json.loads(text)
        return cls({str(k): int(v) for k, v in (doc.get("offsets") or {}).items()}, int(doc.get("session") or 0),
                   {str(k): (str(v[0]), int(v[1]), v[2]) for k, v in (doc.get("open") or {}).items()})


def default_tasks(status: Any) -> list[str]:
    """The chief: ``chief:0`` where the job has a chief, else ``worker:0``, else its first task."""
    ids = [t.task_id for t in status.tasks]
    for tid in ("chief:0", "worker:0"):
        if tid in ids:
            return [tid]
    return ids[:1]


def parse_tasks(value: str | Sequence[str] | None) -> list[str] | None:
    """Which tasks to follow, as a user gives it (``tony.output.tasks``, an operator's
    ``output_tasks``, ``--logs``): task ids (``worker:1``) and types (``worker``: its every task),
    comma-separated or a list. ``none`` or an empty list: none; None, an empty text or ``chief``:
    the chief (:func:`default_tasks`)."""
    if value is None:
        return None
    parts = value.split(",") if isinstance(value, str) else [x for v in value for x in str(v).split(",")]
    items = [v.strip() for v in parts if v.strip()]
    if (isinstance(value, str) and not items) or items == ["chief"]:
        return None
    return [] if items in ([], ["none"]) else items


def selected(status: Any, wanted: Sequence[str] | None) -> list[str]:
    """The ids of the tasks ``wanted`` names in ``status`` (None: the chief), in the order named."""
    if wanted is None:
        return default_tasks(status)
    ids = [t.task_id for t in status.tasks]
    out: list[str] = []
    for w in wanted:
        for tid in ([w] if ":" in w else [i for i in ids if i.partition(":")[0] == w]):
            if tid in ids and tid not in out:
                out.append(tid)
    return out


#: reads ``limit`` bytes of a piece from ``offset``: (the bytes, the file's size then if known),
#: or None when it cannot be read now (not written yet, its node not answering)
Reader = Callable[[Piece, int, int], "tuple[bytes, int | None] | None"]


class OutputFollower:
    """Follows ``tasks`` (None: :func:`default_tasks`; ``[]``: none) of a job through ``read``,
    from ``cursor``. :meth:`poll` takes the job's status and returns the lines new since the last
    poll; :meth:`follow` polls a job until it ends."""

    def __init__(self, read: Reader, tasks: Sequence[str] | None = None, cursor: Cursor | None = None,
                 rate: float = RATE, burst: float = BURST, clock: Callable[[], float] = time.monotonic):
        self.read = read
        self.tasks = list(tasks) if tasks is not None else None
        self.cursor = cursor or Cursor()
        self.rate, self.burst, self.clock = rate, burst, clock
        self._tokens = burst
        self._at = clock()
        # every file seen and not read to its end (an ended container's are read to their end), by key
        self._known: dict[str, Piece] = {}
        for key, (task, session, where) in self.cursor.open_files.items():
            container, _, stream = key.rpartition("/")
            self._known[key] = Piece(task, session, container, stream, where)
        self._current: set[str] = set()
        self._left_out = 0  # lines left out since the last said
        self._refused: dict[str, str] = {}  # files whose node refused them at this poll, and what it said
        self._said_refused: dict[str, str] = {}

    # ------------------------------------------------------------------ what to read
    def pieces(self, status: Any) -> list[Piece]:
        """The files to read at this poll: the followed tasks' current containers', and those of
        earlier containers not read to their end yet, oldest session first."""
        wanted = selected(status, self.tasks)
        session = int(getattr(status, "session_id", 0) or 0)
        current = set()
        for t in status.tasks:
            if t.task_id in wanted and t.container_id:
                for stream in STREAMS:
                    p = Piece(t.task_id, session, str(t.container_id), stream, t.log_url)
                    known = self._known.setdefault(p.key, p)
                    if p.where and known.where != p.where:
                        # A cluster that places a container as it grants it (YARN) links its logs
                        # later than it names it: the link of the newest status is where to read.
                        self._known[p.key] = replace(known, where=p.where)
                    current.add(p.key)
        self._current = current
        self.cursor.open_files = {k: (p.task, p.session, p.where) for k, p in self._known.items()}
        return sorted(self._known.values(),
                      key=lambda p: (p.session, wanted.index(p.task) if p.task in wanted else 0, STREAMS.index(p.stream)))

    @property
    def pending(self) -> bool:
        """Whether a file seen is not read to its end yet (on YARN, an ended job's files while its
        logs are still being aggregated)."""
        return bool(self._known)

    def drain(self, status: Any, wait_s: float = DRAIN_WAIT_S, sleep: Callable[[float], Any] = time.sleep,
              clock: Callable[[], float] = time.monotonic) -> list[OutputLine]:
        """The last lines of an ended job (``status`` final): read again every few seconds, for
        at most ``wait_s``, while a file cannot be read to its end yet; then what was left out."""
        out = self.poll(status)
        end = clock() + wait_s
        while self.pending and clock() < end:
            sleep(min(2.0, max(0.0, end - clock())))
            out += self.poll(status)
        return out + self.flush()

    def _finished(self, p: Piece) -> None:
        self._known.pop(p.key, None)
        self.cursor.open_files.pop(p.key, None)

    # ------------------------------------------------------------------ reading
    def poll(self, status: Any) -> list[OutputLine]:
        """The lines written since the last poll (at the job's end, the unfinished last lines
        too), with the follower's own lines among them."""
        final = bool(getattr(status, "is_final", False))
        out: list[OutputLine] = []
        self._refused: dict[str, str] = {}
        for p in self.pieces(status):
            ended = final or p.key not in self._current
            if p.session > self.cursor.session:
                out.append(OutputLine("", "", f"--- session {p.session} ---", p.session))
                self.cursor.session = p.session
            got = self._read(p, ended)
            if got is None:
                if ended and p.key not in self._current:
                    self._finished(p)  # an earlier container whose files cannot be read any more
                continue
            lines, at_end = got
            out.extend(lines)
            if ended and at_end:
                self._finished(p)
        for key, said in self._refused.items():  # each refusal once, until it changes
            if self._said_refused.get(key) != said:
                self._said_refused[key] = said
                out.append(OutputLine("", "", said, self.cursor.session))
        return self._limit(out)

    def _read(self, p: Piece, ended: bool) -> tuple[list[OutputLine], bool] | None:
        offset = self.cursor.offsets.get(p.key, 0)
        try:
            got = self.read(p, offset, READ_LIMIT)
        except OutputRefused as e:
            self._refused[p.key] = f"[{p.task} {p.stream}: cannot be read now: {e}; asked again]"
            return None
        if got is None:
            return None
        data, size = got
        lines: list[OutputLine] = []
        if size is not None and size - offset > SKIP_OVER:
            start = size - READ_LIMIT
            lines.append(OutputLine("", "", f"[{p.task} {p.stream}: {start - offset} bytes left out]", p.session))
            offset = start
            got = self.read(p, offset, READ_LIMIT)
            if got is None:
                return None
            data, size = got
            cut = data.find(b"\n")  # from the first whole line
            if cut >= 0:
                offset, data = offset + cut + 1, data[cut + 1:]
        used = 0
        while True:
            nl = data.find(b"\n", used)
            if nl < 0 or nl - used > MAX_LINE:
                if len(data) - used > MAX_LINE:  # a line too long to wait for: its start, cut
                    lines.append(self._line(p, data[used:used + MAX_LINE], cut=True))
                    end = data.find(b"\n", used + MAX_LINE)
                    used = end + 1 if end >= 0 else len(data)
                    continue
                break
            lines.append(self._line(p, data[used:nl]))
            used = nl + 1
        whole = len(data) < READ_LIMIT and (size is None or offset + len(data) >= size)
        if ended and whole and used < len(data):  # the job or container ended: its last line, unfinished
            lines.append(self._line(p, data[used:]))
            used = len(data)
        self.cursor.offsets[p.key] = offset + used
        return lines, whole and used == len(data)

    @staticmethod
    def _line(p: Piece, raw: bytes, cut: bool = False) -> OutputLine:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        return OutputLine(p.task, p.stream, text + (" [line cut]" if cut else ""), p.session)

    def _limit(self, lines: list[OutputLine]) -> list[OutputLine]:
        """At most :attr:`rate` lines a second (the follower's own always pass). Of more than may
        pass, the latest do, as ``tail`` would show them, after a line saying how many before
        them were left out."""
        now = self.clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        theirs = sum(1 for line in lines if line.task)
        drop = max(0, theirs - int(self._tokens))
        self._tokens -= theirs - drop
        out: list[OutputLine] = []
        for line in lines:
            if line.task and drop:
                drop -= 1
                self._left_out += 1
                continue
            if line.task and self._left_out:
                out.append(OutputLine("", "", self._said(self._left_out), line.session))
                self._left_out = 0
            out.append(line)
        return out

    def flush(self) -> list[OutputLine]:
        """The follower's last word: how many lines it left out since it last said so."""
        if not self._left_out:
            return []
        n, self._left_out = self._left_out, 0
        return [OutputLine("", "", self._said(n), self.cursor.session)]

    def _said(self, n: int) -> str:
        return f"[{n} line{'' if n == 1 else 's'} left out: more than {self.rate:g} a second]"

    def follow(self, status: Callable[[], Any], interval: float = 1.0,
               sleep: Callable[[float], Any] = time.sleep) -> Iterator[OutputLine]:
        """Every line until the job ends (``status()`` says it has), then its last ones."""
        while True:
            st = status()
            if st.is_final:
                yield from self.drain(st, sleep=sleep)
                return
            yield from self.poll(st)
            sleep(interval)


class StatusGap:
    """The looks at a job's output between two reads of its status ``poll_interval`` apart: the
    output is looked at more often than the status (which says which files), so that a line
    reaches its reader within about ``output_interval`` of being written; none just before the
    next status read, which looks itself. Used as ``while (p := gap.pause()) is not None: sleep(p);
    if gap.look(): ...``, by a blocking follower and an asynchronous one alike."""

    def __init__(self, poll_interval: float, output_interval: float = OUTPUT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic):
        self.output_interval, self.clock = output_interval, clock
        self.next_status = clock() + poll_interval

    def pause(self) -> float | None:
        """How long to wait before the next look; None once it is time to read the status."""
        left = self.next_status - self.clock()
        return min(self.output_interval, left) if left > 0 else None

    def look(self) -> bool:
        """Whether to look at the output now (not within 50 ms of the next status read)."""
        return self.clock() < self.next_status - 0.05


def last_lines(read: Reader, piece: Piece, n: int = TAIL_LINES) -> list[str] | None:
    """The last ``n`` lines of one file (from at most :data:`TAIL_BYTES` before its end, long
    lines cut), or None when it cannot be read."""
    try:
        got = read(piece, 0, 0)
        if got is None:
            return None
        size = got[1]
        start = max(0, size - TAIL_BYTES) if size is not None else 0
        got = read(piece, start, TAIL_BYTES if size is not None else READ_LIMIT)
    except OutputRefused:
        return None
    if got is None:
        return None
    data = got[0] if size is not None else got[0][-TAIL_BYTES:]
    if start > 0 or size is None:
        data = data[data.find(b"\n") + 1:] if b"\n" in data else data
    lines = data.decode("utf-8", errors="replace").splitlines()[-n:]
    return [line if len(line) <= MAX_LINE else line[:MAX_LINE] + " [line cut]" for line in lines]


def failed_output(status: Any, read: Reader, n: int = TAIL_LINES) -> str:
    """What the failed (or lost) tasks of ``status`` printed last: for each, up to ``n`` lines of
    its stdout and of its stderr, as a block for the job's error (empty when none failed, or
    nothing of theirs can be read). The first :data:`TAIL_TASKS` failed tasks are shown, the
    rest named."""
    failed = [t for t in status.tasks if t.state in ("FAILED", "LOST") and t.container_id]
    session = int(getattr(status, "session_id", 0) or 0)
    blocks: list[str] = []
    for t in failed[:TAIL_TASKS]:
        for stream in STREAMS:
            lines = last_lines(read, Piece(t.task_id, session, str(t.container_id), stream, t.log_url), n)
            if lines:
                exit_code = f", exit code {t.exit_code}" if t.exit_code is not None else ""
                blocks.append(f"--- {t.task_id} {stream} ({t.state}{exit_code}), its last {len(lines)} "
                              f"line{'' if len(lines) == 1 else 's'}:\n" + "\n".join(lines))
    if blocks and len(failed) > TAIL_TASKS:
        blocks.append(f"--- also failed: {', '.join(t.task_id for t in failed[TAIL_TASKS:])} (see their logs)")
    return "\n".join(blocks)
