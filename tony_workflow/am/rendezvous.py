"""The rendezvous of an elastic job's agents, kept by the ApplicationMaster.

An elastic PyTorch job runs torch's elastic agent in each ranked container, and the agents meet in
torch's dynamic rendezvous. That rendezvous needs two things shared by every agent and outliving
any one of them: a *state* written by compare-and-set under a fencing token (who takes part, which
round, who waits), and a *key-value store* (rank 0's address for the round, the agents' barriers).
Both live here, in the AM's memory, and are served on the AM's routes under the executors' token
(:mod:`tony_workflow.protocol`, ``/v1/rendezvous/*``): no worker holds them, so losing any worker,
rank 0's included, loses neither, and no port is opened that the job's token does not guard.

One rendezvous is open at a time, named by its run id (the application and the session): a
request for another (an agent of an ended session) is refused, and a new session starts from an
empty state and store. The store's blocking reads wait here, on this object's own condition, not
on the AM's lock.

The agents also say which round they joined, as which node, in a world of how many
(:meth:`Rendezvous.joined`): when every node of a round has said so, the round is *formed*, and the
AM records the group's new size and members.

When the AM learns that a member's task is gone, it names that member's node dead
(:meth:`Rendezvous.departed`), and every answer about the state carries the dead nodes' names: the
agents drop them from the round at once instead of waiting for their keep-alives to lapse.

A job with ``tony.elastic.regroup=in-place`` has no agents: its trainers keep their processes and
re-form their process group themselves (:mod:`tony_workflow.torch_elastic`), in *generations*
decided here (:meth:`Rendezvous.gather`). A trainer asks to be in the generation after the one it
knows; a generation forms when every surviving member of the current one has asked (any
newcomers waiting then are in it too) and there are at least the group's minimum, or, for the
first one, when the whole group has asked (or the minimum, after :data:`FIRST_LAST_CALL_S`).
Survivors keep their order (rank 0 stays rank 0 while it lives); newcomers come after them. Each
generation is a :class:`Formed` round like an agent's, for the job's status. Trainers watch for a
change (:meth:`Rendezvous.watch`: a member dead, or a newcomer waiting) between their steps.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BadStoreOp", "Formed", "Rendezvous", "RendezvousClosed"]

#: The most a store may hold (keys and values together), and the largest state: torch's agents
#: keep a few small keys a round and a state of a few kilobytes; anything near this is a runaway,
#: refused rather than kept in the AM's memory.
MAX_STORE_BYTES = 16 * 1024 * 1024
#: The longest one blocking read waits in the AM before answering (the caller asks again).
MAX_WAIT_S = 30.0
#: In-place regrouping: how long the first generation waits for the whole group once the
#: minimum has asked (a task that never comes is replaced; the others need not wait for it).
FIRST_LAST_CALL_S = 30.0


class RendezvousClosed(Exception):
    """A request for a rendezvous that is not the open one."""


class BadStoreOp(ValueError):
    """A store operation that cannot be done (unknown op, a value too large, a counter that is not one)."""


@dataclass(frozen=True)
class Formed:
    """A round every node of which has reported: its members (task id -> node rank), in rank order."""

    round: int
    members: dict[str, int]

    @property
    def size(self) -> int:
        return len(self.members)


@dataclass
class _Round:
    world_size: int
    members: dict[str, int] = field(default_factory=dict)
    formed: bool = False


class Rendezvous:
    """The open rendezvous's state (bytes and a token), store and rounds."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.run_id: str | None = None
        self._state: bytes | None = None
        self._token = 0
        self._store: dict[str, bytes] = {}
        self._bytes = 0
        self._rounds: dict[int, _Round] = {}
        self._dead: set[str] = set()
        self.minimum, self.target = 1, 1
        self._gens = _Generations()

    # ------------------------------------------------------------------ lifecycle
    def open(self, run_id: str, minimum: int = 1, target: int = 1) -> None:
        """Opens ``run_id``'s rendezvous, empty; whatever another one held is dropped. A group
        regrouping in place has between ``minimum`` and ``target`` members."""
        with self._cond:
            self.run_id = run_id
            self._state, self._token = None, 0
            self._store, self._bytes, self._rounds, self._dead = {}, 0, {}, set()
            self.minimum, self.target = max(1, minimum), max(1, minimum, target)
            self._gens = _Generations()
            self._cond.notify_all()

    def close(self) -> None:
        """No rendezvous is open: every request is refused, and waiting reads return."""
        with self._cond:
            self.run_id = None
            self._cond.notify_all()

    def _check(self, run_id: str) -> None:
        if self.run_id is None or run_id != self.run_id:
            raise RendezvousClosed(f"rendezvous {run_id!r} is not open (the open one: {self.run_id!r})")

    # ------------------------------------------------------------------ state
    def get_state(self, run_id: str) -> tuple[bytes | None, int]:
        with self._cond:
            self._check(run_id)
            return self._state, self._token

    def departed(self, node: str) -> None:
        """The node named ``node`` (torch's name for an agent) is gone with its task."""
        with self._cond:
            if node and node not in self._dead:
                self._dead.add(node)
                self._gens.waiting.pop(node, None)
                # A get waiting for a key the dead node would have written ends now, with the
                # news: its caller decides whether to wait on. The survivors of a generation may
                # all be waiting for the next one already.
                self._form(time.monotonic())
                self._cond.notify_all()

    def dead(self, run_id: str) -> list[str]:
        """The nodes of the open rendezvous known to be gone, by name."""
        with self._cond:
            self._check(run_id)
            return sorted(self._dead)

    def set_state(self, run_id: str, state: bytes, token: int | None) -> tuple[bytes | None, int, bool]:
        """Writes ``state`` if ``token`` is the current token (None: if there is no state yet), and
        returns the state that holds afterwards (None: none), its token and whether this call wrote it."""
        if len(state) > MAX_STORE_BYTES:
            raise BadStoreOp(f"a rendezvous state of {len(state)} bytes is more than {MAX_STORE_BYTES}")
        with self._cond:
            self._check(run_id)
            current = self._token if self._state is not None else None
            if token != current:
                return self._state, self._token, False
            self._state, self._token = state, self._token + 1
            return state, self._token, True

    # ------------------------------------------------------------------ store
    def _put(self, key: str, value: bytes) -> None:
        old = self._store.get(key)
        size = self._bytes + len(key) + len(value) - (len(key) + len(old) if old is not None else 0)
        if size > MAX_STORE_BYTES:
            raise BadStoreOp(f"the rendezvous store would hold {size} bytes, more than {MAX_STORE_BYTES}")
        self._store[key], self._bytes = value, size
        self._cond.notify_all()

    def _wait_for(self, run_id: str, keys: list[str], wait: float) -> bool:
        deadline = time.monotonic() + min(max(wait, 0.0), MAX_WAIT_S)
        dead = len(self._dead)
        while True:
            self._check(run_id)
            if all(k in self._store for k in keys):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or len(self._dead) != dead:
                return False
            self._cond.wait(remaining)

    def store(self, run_id: str, op: str, keys: list[str], values: list[bytes], amount: int = 0,
              wait: float = 0.0) -> tuple[list[bytes | None], int, bool]:
        """One operation of torch's Store interface: (values, count, ok). ``set`` writes the keys'
        values; ``get`` waits up to ``wait`` seconds for every key and returns their values (None
        for a missing one); ``check`` says whether every key is there now; ``add`` adds ``amount``
        to the counter at ``keys[0]`` (count: its new value); ``compare_set`` writes ``values[1]``
        at ``keys[0]`` if it holds ``values[0]`` (absent counts as empty) and returns what it holds
        after; ``delete`` removes the keys (ok: all were there); ``count`` counts the keys."""
        with self._cond:
            self._check(run_id)
            if op == "set":
                if len(keys) != len(values):
                    raise BadStoreOp(f"set takes as many values as keys, got {len(keys)} keys and {len(values)} values")
                for k, v in zip(keys, values, strict=True):
                    self._put(k, v)
                return [], 0, True
            if op == "get":
                ok = self._wait_for(run_id, keys, wait)
                return [self._store.get(k) for k in keys], 0, ok
            if op == "check":
                return [], 0, all(k in self._store for k in keys)
            if op == "add":
                key = self._one(op, keys)
                try:
                    total = int(self._store.get(key, b"0")) + amount
                except ValueError:
                    raise BadStoreOp(f"key {key!r} holds no counter") from None
                self._put(key, str(total).encode())
                return [], total, True
            if op == "compare_set":
                key = self._one(op, keys)
                if len(values) != 2:
                    raise BadStoreOp("compare_set takes two values: the expected and the desired")
                expected, desired = values
                current = self._store.get(key)
                if (current if current is not None else b"") == expected:
                    self._put(key, desired)
                    current = desired
                return [current if current is not None else expected], 0, True
            if op == "delete":
                present = all(k in self._store for k in keys)
                for k in keys:
                    old = self._store.pop(k, None)
                    if old is not None:
                        self._bytes -= len(k) + len(old)
                return [], 0, present
            if op == "count":
                return [], len(self._store), True
            raise BadStoreOp(f"unknown store operation {op!r}: set, get, check, add, compare_set, delete or count")

    @staticmethod
    def _one(op: str, keys: list[str]) -> str:
        if len(keys) != 1:
            raise BadStoreOp(f"{op} takes one key, got {len(keys)}")
        return keys[0]

    # ------------------------------------------------------------------ rounds
    def joined(self, run_id: str, round_: int, task_id: str, rank: int, world_size: int) -> Formed | None:
        """An agent of ``task_id`` joined round ``round_`` as node ``rank`` of ``world_size``: the
        round, once every node of it has said so (once per round), else None."""
        with self._cond:
            self._check(run_id)
            if world_size < 1 or not 0 <= rank < world_size:
                raise BadStoreOp(f"rank {rank} is not a node of a world of {world_size}")
            r = self._rounds.setdefault(round_, _Round(world_size))
            r.members[task_id] = rank
            if r.formed or len(r.members) < r.world_size:
                return None
            r.formed = True
            return Formed(round_, dict(sorted(r.members.items(), key=lambda kv: kv[1])))

    # ------------------------------------------------------------------ in-place generations
    def gather(self, run_id: str, task_id: str, node: str, after: int, wait: float) -> dict[str, Any] | None:
        """``node`` (of ``task_id``) asks to be in a generation after ``after``: its place in the
        first such generation (``generation``, ``rank``, ``world_size``, ``members``), or None when
        none formed within ``wait`` seconds (formed generations wait in :meth:`formed_rounds`
        for the caller to record). Raises :class:`RendezvousClosed` for another session's, :class:`BadStoreOp` for a
        node named dead: a trainer the AM gave up on takes no part any more."""
        deadline = time.monotonic() + min(max(wait, 0.0), MAX_WAIT_S)
        with self._cond:
            self._check(run_id)
            if node in self._dead:
                raise BadStoreOp(f"{node} was named gone: it takes no part in the group any more")
            g = self._gens
            place = g.places.get(node)
            if (place is None or place["generation"] <= after) and node not in g.waiting:
                g.waiting[node] = (task_id, time.monotonic())
                if g.first_wait is None:
                    g.first_wait = time.monotonic()
                self._cond.notify_all()  # the current generation's watchers: someone waits for the next
            self._form(time.monotonic())
            while True:
                place = g.places.get(node)
                if place is not None and place["generation"] > after:
                    return dict(place)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(min(remaining, 1.0))
                self._check(run_id)
                if node in self._dead:
                    raise BadStoreOp(f"{node} was named gone: it takes no part in the group any more")
                # A first generation's last call ends by time, not by a request.
                self._form(time.monotonic())

    def watch(self, run_id: str, generation: int, wait: float) -> dict[str, Any]:
        """Waits up to ``wait`` seconds for generation ``generation`` to need re-forming: a member
        named dead, a member or a newcomer waiting for the next one, or a later generation.
        Returns ``changed`` and what: ``generation`` (the newest), ``joining`` (newcomers
        waiting), ``dead`` (its members named gone)."""
        deadline = time.monotonic() + min(max(wait, 0.0), MAX_WAIT_S)
        with self._cond:
            while True:
                self._check(run_id)
                g = self._gens
                members = g.members if g.generation == generation else []
                dead = sorted(m for m in members if m in self._dead)
                joining = sorted(n for n in g.waiting if n not in members)
                again = sorted(n for n in g.waiting if n in members)
                changed = g.generation != generation or bool(dead or joining or again)
                remaining = deadline - time.monotonic()
                if changed or remaining <= 0:
                    return {"changed": changed, "generation": g.generation, "joining": joining, "dead": dead}
                self._cond.wait(remaining)

    def _form(self, now: float) -> bool:
        """Forms the next generation if it is due (see the module docstring). Called with the
        condition held; True when it formed one (its round is queued for :meth:`formed_rounds`)."""
        g = self._gens
        if not g.waiting:
            return False
        if g.generation < 0:
            due = len(g.waiting) >= self.target or (
                len(g.waiting) >= self.minimum and g.first_wait is not None
                and now - g.first_wait >= FIRST_LAST_CALL_S)
        else:
            survivors = [m for m in g.members if m not in self._dead]
            due = all(m in g.waiting for m in survivors) and len(g.waiting) >= self.minimum
        if not due:
            return False
        kept = [m for m in g.members if m in g.waiting]
        newcomers = sorted((n for n in g.waiting if n not in kept), key=lambda n: (task_order(g.waiting[n][0]), n))
        order = (kept + newcomers)[:self.target]
        g.generation += 1
        g.members = order
        tasks = {n: g.waiting[n][0] for n in order}
        for rank, n in enumerate(order):
            g.places[n] = {"generation": g.generation, "rank": rank, "world_size": len(order),
                           "members": list(order)}
            del g.waiting[n]
        g.unreported.append(Formed(g.generation, {tasks[n]: r for r, n in enumerate(order)}))
        self._cond.notify_all()
        return True

    def formed_rounds(self) -> list[Formed]:
        """The generations formed since this was last asked, oldest first (for the job's status)."""
        with self._cond:
            out, self._gens.unreported = self._gens.unreported, []
            return out

    @property
    def generation(self) -> int:
        with self._cond:
            return self._gens.generation


@dataclass
class _Generations:
    """The in-place group's generations: the newest, its members (node names) in rank order, each
    node's place in the newest generation it is in, and the nodes waiting for the next one."""

    generation: int = -1
    members: list[str] = field(default_factory=list)
    places: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: node -> (task id, since when)
    waiting: dict[str, tuple[str, float]] = field(default_factory=dict)
    first_wait: float | None = None
    unreported: list[Formed] = field(default_factory=list)


def task_order(task_id: str) -> tuple[str, int]:
    """``type:index`` task ids in type, then index order."""
    ttype, _, index = task_id.partition(":")
    return ttype, int(index) if index.isdigit() else 0
