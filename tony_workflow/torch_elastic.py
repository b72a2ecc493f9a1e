"""Elastic PyTorch training in place: the trainers keep their processes and state when the group changes.

A training script that trains through :func:`run` runs unchanged everywhere:

- alone (``python train.py``): a group of one;
- under ``torchrun``, in a fixed job, or in an elastic job with ``tony.elastic.regroup=restart``:
  one group from torchrun's variables, for the life of the process (a change of membership
  restarts the process, which restores its checkpoint);
- in an elastic job with ``tony.elastic.regroup=in-place``: the group changes under a running
  process. When a member is lost, the survivors' collective fails (or their next
  :meth:`State.commit` learns of it); they leave ``train``, form the next *generation* of the
  group with the ApplicationMaster (:mod:`tony_workflow.am.rendezvous`), make their states agree,
  and call ``train`` again, without a process start, an import or a checkpoint read. When a
  replacement asks to join, every member leaves ``train`` at the same :meth:`State.commit`, the
  group grows, and the newcomer receives the state.

::

    state = State(model=model, optimizer=optimizer, step=0)   # restored from a checkpoint if you like

    def train(state, group):
        ddp = DistributedDataParallel(state.model) if group.world_size > 1 else state.model
        sampler = DistributedSampler(dataset, num_replicas=group.world_size, rank=group.rank)
        ...
        while state.step < total:
            ...one step...
            state.step += 1
            state.commit()        # where a change of membership may take effect

    run(train, state)

``train`` is called once per generation with the group's place (:class:`Group`) and the process
group initialized; it must build whatever depends on the group (the DDP wrapper, the sampler)
inside. :class:`State` holds what must survive a change: objects with ``state_dict`` /
``load_state_dict`` (models, optimizers, schedulers) and plain values. When a generation forms,
the members compare their ``step`` and the newest member's state is handed to the others (none is
sent when all agree); a member lost mid-step leaves the others at a consistent step, since a
step's update is applied only after its collectives succeed.

The process group's store is the AM's (through its token-checked routes, with the group token
only: the executors' secret stays with the executor), so no member hosts it and losing any
member, rank 0's included, loses nothing. NCCL is used on GPUs, gloo elsewhere; collectives time
out after ``TONY_ELASTIC_COLLECTIVE_TIMEOUT_S`` (default 120 s), the longest a member lost
without its connections closing (a node gone) can hold the others.
"""
from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["Group", "Regroup", "State", "run"]

#: How long a failed collective waits for the AM's word that the group changed before the error
#: is taken for the script's own (and raised).
_ERROR_GRACE_S = 30.0
#: An error that looks like a collective's with a lost peer (gloo, NCCL, the store, a socket).
_DIST_ERROR = re.compile(r"gloo|nccl|connection|peer|socket|timed out|timeout|store|broken pipe|reset", re.IGNORECASE)
_WATCH_S = 25.0
#: Generations in a row that may fail to start before the error is raised.
_MAX_UNFORMED = 5


class Regroup(Exception):
    """Raised by :meth:`State.commit` on every member at the same step: the group is changing."""


@dataclass(frozen=True)
class Group:
    """One generation of the group, as ``train`` sees it."""

    rank: int
    world_size: int
    #: 0, 1, ... in an in-place elastic job; -1 otherwise
    generation: int = -1
    members: tuple[str, ...] = ()
    device: Any = None


class State:
    """What survives a change of the group: ``State(model=..., optimizer=..., step=0)``. Objects
    with ``state_dict``/``load_state_dict`` are saved and loaded through them; anything else is a
    plain value. ``step`` (if given) says which member's state is the newest."""

    def __init__(self, **values: Any):
        self.__dict__["_values"] = dict(values)
        self.__dict__["_group"] = None
        self.__dict__["_coordinator"] = None

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._values[name] = value

    def state_dict(self) -> dict[str, Any]:
        return {k: v.state_dict() if hasattr(v, "state_dict") else v for k, v in self._values.items()}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        for k, v in saved.items():
            current = self._values.get(k)
            if hasattr(current, "load_state_dict"):
                current.load_state_dict(v)
            else:
                self._values[k] = v

    def commit(self) -> None:
        """A point where a change of membership may take effect: raises :class:`Regroup` on every
        member when some member has heard of one (a replacement waiting, a member gone). Costs one
        all-reduce of one number in an in-place elastic job; nothing otherwise. The data readers the
        state holds (:mod:`tony_workflow.data`) are committed first: a change finds them at this step."""
        for value in self._values.values():
            if hasattr(value, "state_dict") and callable(getattr(value, "commit", None)):
                value.commit()
        group, coordinator = self._group, self._coordinator
        if group is None or coordinator is None:
            return
        flag = 1 if coordinator.changed.is_set() else 0
        if group.world_size > 1:
            box = torch.tensor([flag], dtype=torch.int32,
                               device=group.device if getattr(group.device, "type", "cpu") == "cuda" else None)
            dist.all_reduce(box, op=dist.ReduceOp.MAX)
            flag = int(box.item())
        if flag:
            raise Regroup(f"generation {group.generation} is changing")

    def sync(self, group: Group) -> None:
        """Makes every member's state the newest member's (by ``step``; rank order breaks ties).
        Nothing is sent when every member is at the same step."""
        if group.world_size <= 1:
            return
        mine = int(self._values.get("step", 0) or 0)
        steps: list[Any] = [None] * group.world_size
        dist.all_gather_object(steps, mine)
        source = max(range(group.world_size), key=lambda r: (steps[r], -r))
        if all(s == steps[source] for s in steps):
            return
        box = [self.state_dict() if group.rank == source else None]
        device = group.device if getattr(group.device, "type", "cpu") == "cuda" else None
        dist.broadcast_object_list(box, src=source, device=device)
        if group.rank != source:
            self.load_state_dict(box[0])


def _device() -> torch.device:
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0") or 0)
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def _backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def _timeout() -> timedelta:
    return timedelta(seconds=float(os.environ.get("TONY_ELASTIC_COLLECTIVE_TIMEOUT_S", "120") or 120))


def _log(message: str) -> None:
    print(f"tony-elastic: {message}", file=sys.stderr, flush=True)


def run(train: Callable[[State, Group], Any], state: State) -> Any:
    """Calls ``train(state, group)`` in the group this process belongs to, again after each change
    of the group when the job regroups in place (see the module docstring); returns what the last
    call returns."""
    if os.environ.get("TONY_ELASTIC_REGROUP") != "in-place":
        return _run_fixed(train, state)
    coordinator = _Coordinator.from_env()
    after, unformed = -1, 0
    while True:
        place = coordinator.join(after)
        after = place["generation"]
        try:
            group = _form(place, coordinator)
            unformed = 0
        except (dist.DistError, RuntimeError) as e:
            # A member of it died before it started; anything else fails every time.
            _destroy()
            coordinator.suspect(after)
            unformed += 1
            if unformed >= _MAX_UNFORMED or not coordinator.changed_since(after, 5.0):
                raise
            _log(f"generation {after} could not start ({e}); joining the next")
            continue
        state.__dict__["_group"], state.__dict__["_coordinator"] = group, coordinator
        try:
            state.sync(group)
            _holds_rank0(group.rank == 0)
            _log(f"generation {group.generation}: rank {group.rank} of {group.world_size}, step "
                 f"{state._values.get('step', '-')}")
            return train(state, group)
        except Regroup as e:
            _log(f"{e}: regrouping")
        except Exception as e:
            grace = _ERROR_GRACE_S if isinstance(e, dist.DistError) or _DIST_ERROR.search(str(e)) else 1.0
            if grace > 1.0:
                coordinator.suspect(group.generation)
            if not coordinator.changed_since(group.generation, grace):
                raise
            _log(f"generation {group.generation} lost a member ({type(e).__name__}: {str(e)[:200]}); regrouping")
        finally:
            state.__dict__["_group"] = state.__dict__["_coordinator"] = None
            coordinator.stop_watching()
            _destroy()


def _holds_rank0(yes: bool) -> None:
    """Tells this container's executor whether its saves are the group's from now on: it mirrors
    the checkpoints of the container that holds rank 0 (:mod:`tony_workflow.task.handoff`)."""
    from .task.handoff import HandoffError, ask

    try:
        ask({"rank0": yes}, timeout=60.0)
    except HandoffError as e:
        _log(f"the executor was not told who holds rank 0: {e}")


def _run_fixed(train: Callable[[State, Group], Any], state: State) -> Any:
    device = _device()
    created = False
    if dist.is_available() and not dist.is_initialized() and "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        dist.init_process_group(_backend(device), init_method="env://")
        created = True
    if dist.is_available() and dist.is_initialized():
        group = Group(dist.get_rank(), dist.get_world_size(), device=device)
    else:
        group = Group(0, 1, device=device)
    try:
        state.sync(group)
        return train(state, group)
    finally:
        if created:
            _destroy()


def _destroy() -> None:
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception as e:  # noqa: BLE001 - a group with a dead member may not close cleanly
            _log(f"closing the process group: {e}")


def _form(place: dict[str, Any], coordinator: _Coordinator) -> Group:
    """The process group of one generation, on the AM's store under the generation's prefix."""
    device = _device()
    generation, rank, world = int(place["generation"]), int(place["rank"]), int(place["world_size"])
    members = tuple(place["members"])
    store = coordinator.store(generation, set(members))
    dist.init_process_group(_backend(device), store=store, rank=rank, world_size=world, timeout=_timeout())
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "GROUP_RANK": str(rank),
                       "GROUP_WORLD_SIZE": str(world), "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(world),
                       "TONY_ELASTIC_GENERATION": str(generation)})
    coordinator.watch(generation)
    return Group(rank, world, generation, members, device)


class _Coordinator:
    """This trainer's side of the AM's generations: its place in each, and a watcher that says when
    the current one is changing."""

    def __init__(self, endpoint: str, token: str, run_id: str, task_id: str, session_id: int, node: str):
        from .rpc import AMClient

        self.am = AMClient(endpoint, token, timeout=45.0, retries=5)
        self.run_id, self.task_id, self.session_id, self.node = run_id, task_id, session_id, node
        self.changed = threading.Event()
        self._watching = -1

    @classmethod
    def from_env(cls) -> _Coordinator:
        e = os.environ
        missing = [k for k in ("TONY_ELASTIC_ENDPOINT", "TONY_ELASTIC_TOKEN", "TONY_ELASTIC_RUN_ID", "TONY_TASK_ID")
                   if not e.get(k)]
        if missing:
            raise SystemExit(f"tony-elastic: {', '.join(missing)} not set: run inside a tony-workflow job")
        host = e.get("TONY_ELASTIC_HOST") or "localhost"
        return cls(e["TONY_ELASTIC_ENDPOINT"], e["TONY_ELASTIC_TOKEN"], e["TONY_ELASTIC_RUN_ID"], e["TONY_TASK_ID"],
                   int(e.get("SESSION_ID", "0") or 0), f"{e['TONY_TASK_ID']}@{host}:{os.getpid()}")

    def _call(self, op: str, generation: int, wait: float) -> dict[str, Any]:
        from . import protocol
        from .errors import AMError

        try:
            reply: dict[str, Any] = self.am._call(protocol.RDZV_GROUP, timeout=wait + 15.0, task_id=self.task_id,
                                                  session_id=self.session_id, run_id=self.run_id, node=self.node,
                                                  op=op, generation=generation, wait=wait)
        except AMError as e:
            if e.status == 409:  # this session is over, or the AM gave this trainer up
                _log(f"leaving: {e}")
                os._exit(75)  # no cleanup can reach a group that no longer exists
            raise
        return reply

    def join(self, after: int) -> dict[str, Any]:
        """This trainer's place in the first generation after ``after`` (waits for it to form)."""
        self.changed.clear()
        while True:
            reply = self._call("join", after, _WATCH_S)
            if reply.get("formed"):
                return reply

    def store(self, generation: int, members: set[str]) -> dist.Store:
        """The AM's store, under the generation's own prefix (torch's PrefixStore does not wrap a
        store written in Python)."""
        from .task.torch_agent import _AM, AMStore

        prefix = f"tony/generation/{generation}/"

        class GenerationStore(AMStore):
            def _op(self, op: str, keys: list[str], values: list[bytes | str] | None = None, amount: int = 0,
                    wait: float = 0.0) -> dict[str, Any]:
                return super()._op(op, [prefix + k for k in keys], values, amount, wait)

            def clone(self) -> GenerationStore:
                return GenerationStore(_AM(self._am.am, self._am.run_id), self.timeout, members=lambda: members)

        return GenerationStore(_AM(self.am, self.run_id), _timeout(), members=lambda: members)

    def watch(self, generation: int) -> None:
        """Watches ``generation`` on a thread of its own until it changes (sets :attr:`changed`)."""
        self.changed.clear()
        self._watching = generation

        def loop() -> None:
            while self._watching == generation:
                try:
                    reply = self._call("watch", generation, _WATCH_S)
                except Exception:  # noqa: BLE001 - the AM busy or restarting: ask again
                    time.sleep(1.0)
                    continue
                if reply.get("changed") and self._watching == generation:
                    self.changed.set()
                    return

        threading.Thread(target=loop, name=f"tony-elastic-watch-{generation}", daemon=True).start()

    def suspect(self, generation: int) -> None:
        """Tells the AM that a collective of ``generation`` failed: it looks for a lost member now
        (where the cluster's own report of one may come seconds later). Best effort."""
        try:
            self._call("suspect", generation, 0.0)
        except Exception as e:  # noqa: BLE001 - the AM still hears of a lost member, later
            _log(f"could not tell the AM that generation {generation} failed: {e}")

    def stop_watching(self) -> None:
        self._watching = -1

    def changed_since(self, generation: int, wait: float) -> bool:
        """Whether ``generation`` is changing, waiting up to ``wait`` seconds for the AM to hear of it."""
        if self.changed.is_set():
            return True
        deadline = time.monotonic() + wait
        while True:
            remaining = deadline - time.monotonic()
            reply = self._call("watch", generation, max(0.0, min(remaining, _WATCH_S)))
            if reply.get("changed"):
                return True
            if time.monotonic() >= deadline:
                return False
