"""torch's elastic agent with the ApplicationMaster as its rendezvous.

``python -m tony_workflow.task.torch_agent <torchrun's arguments>`` is ``torchrun`` with one more
rendezvous backend, ``tony``: the agents of an elastic job keep torch's dynamic rendezvous (the same
joining, keep-alives, rounds and waiting list as its ``c10d`` backend) but hold its state and its
key-value store in the AM (:mod:`tony_workflow.am.rendezvous`), through the AM's token-checked
routes. No worker hosts them, so the group survives the loss of any worker, rank 0's included, and
nothing listens on a port without the job's token.

The executor starts this module in place of the user's command when the job is elastic
(:func:`tony_workflow.frameworks.launch_command`); ``--rdzv-endpoint`` is the AM's address and
``--rdzv-id`` the session's run id. The AM's token comes in ``TONY_AM_TOKEN``, which is taken out
of the environment before the agent starts any worker: user code never sees it. After each round
the agent tells the AM which round it joined, as which node of how many, so that the job's status
and timeline show the group's size over time; and when the AM says a node's task is gone, the
state the agent reads marks that node's keep-alive long lapsed, so torch's own sanitizing drops it
from the round at once rather than seconds later, and the agent counts the departure as a node
waiting (torch's cue for a membership change): it restarts its workers in a new round within its
monitor interval, instead of waiting for them to fail in a collective with the dead node, which
they may only do when their own timeout ends (a node lost without closing its connections).

Imported only in an elastic job's containers: it imports torch.
"""
from __future__ import annotations

import base64
import os
import pickle
import sys
import time
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousHandler,
    RendezvousParameters,
    rendezvous_handler_registry,
)
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousBackend, create_handler

from .. import protocol
from ..errors import AMError, AMUnreachable
from ..rpc import AMClient
from .handoff import HandoffError, ask

__all__ = ["BACKEND", "AMRendezvousBackend", "AMStore", "MemberGone", "create_tony_handler", "main"]

#: The rendezvous backend's name, as ``--rdzv-backend`` gives it.
BACKEND = "tony"
#: The longest one store read waits in the AM before asking again (the AM caps it too).
_POLL_S = 25.0


def _b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else bytes(data)).decode("ascii")


def _raw(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


class _AM:
    """The AM's rendezvous routes for one run id, with the errors torch's rendezvous expects."""

    def __init__(self, am: AMClient, run_id: str):
        self.am, self.run_id = am, run_id

    def call(self, route: protocol.Route, *, timeout: float | None = None, **fields: Any) -> Any:
        try:
            return self.am._call(route, timeout=timeout, run_id=self.run_id, **fields)
        except AMUnreachable as e:
            raise RendezvousConnectionError(str(e)) from None
        except AMError as e:
            if e.status == 409:  # not the open rendezvous: this session is over
                raise RendezvousClosedError(str(e)) from None
            raise


#: How long ago a dead node's last keep-alive is made to look: past any keep-alive setting.
_LAPSED = timedelta(days=3650)


def without_dead(state: bytes, dead: list[str]) -> tuple[bytes, set[str]]:
    """``state`` with the keep-alives of the ``dead`` nodes (by torch's name, ``addr_pid_localid``)
    long lapsed, so that the handler's own sanitizing removes them as it does any silent node, and
    those of them that took part in the round. ``state`` itself comes back when no dead node is
    in it, or when it is not the state this torch writes (the nodes then leave when their
    keep-alives lapse, as without the AM's word)."""
    if not dead:
        return state, set()
    try:
        # What this job's agents wrote, which torch unpickles as well.
        decoded = pickle.loads(state)
        beats = decoded.last_heartbeats
        gone = [node for node in beats if repr(node) in dead]
        if not gone:
            return state, set()
        for node in gone:
            beats[node] = beats[node] - _LAPSED
        return pickle.dumps(decoded), {repr(node) for node in gone if node in decoded.participants}
    except Exception:  # noqa: BLE001 - another torch's state: leave it to torch's keep-alive rule
        return state, set()


class AMRendezvousBackend(RendezvousBackend):
    """torch's rendezvous state, kept by the AM under a fencing token."""

    def __init__(self, am: _AM):
        self._am = am
        #: the nodes the AM says are gone that took part in the round this agent last read (kept
        #: until :meth:`new_round`: torch's sanitizing drops them from its state at once)
        self.lost: set[str] = set()

    @property
    def member_lost(self) -> bool:
        return bool(self.lost)

    def new_round(self) -> None:
        self.lost.clear()

    @property
    def name(self) -> str:
        return BACKEND

    def _seen(self, state: bytes, dead: list[str]) -> bytes:
        state, lost = without_dead(state, dead)
        self.lost |= lost
        return state

    def get_state(self) -> tuple[bytes, Any] | None:
        reply = self._am.call(protocol.RDZV_STATE)
        state = _raw(reply["state"])
        return None if state is None else (self._seen(state, reply.get("dead") or []), reply["token"])

    def set_state(self, state: bytes, token: Any | None = None) -> tuple[bytes, Any, bool] | None:
        reply = self._am.call(protocol.RDZV_SET_STATE, state=_b64(state), token=token)
        held = _raw(reply["state"])
        if held is None:
            return None
        return self._seen(held, reply.get("dead") or []), reply["token"], bool(reply["written"])


class MemberGone(dist.DistStoreError):
    """A store read waited for a key that a member of the agent's round, now dead, was to write
    (rank 0's address for the round's workers): the round can never start."""


class AMStore(dist.Store):
    """torch's Store interface on the AM's rendezvous store. Blocking reads wait in the AM (a few
    seconds at a time) until the store's timeout, or until the AM names dead a node that
    ``members()`` says is in this agent's round (:class:`MemberGone`)."""

    def __init__(self, am: _AM, timeout: timedelta, members: Any = None):
        super().__init__()
        self._am = am
        self._members = members or (lambda: set())
        self.set_timeout(timeout)

    def _op(self, op: str, keys: list[str], values: list[bytes | str] | None = None, amount: int = 0,
            wait: float = 0.0) -> dict[str, Any]:
        reply: dict[str, Any] = self._am.call(protocol.RDZV_STORE, op=op, keys=keys,
                                              values=[_b64(v) for v in values or []], amount=amount, wait=wait,
                                              timeout=wait + 10.0)
        return reply

    def _await(self, keys: list[str], timeout: timedelta | None = None) -> list[bytes]:
        limit = (timeout or self.timeout).total_seconds()
        deadline = time.monotonic() + limit
        while True:
            remaining = deadline - time.monotonic()
            reply = self._op("get", keys, wait=max(0.0, min(_POLL_S, remaining)))
            if reply["ok"]:
                return [_raw(v) or b"" for v in reply["values"]]
            gone = set(reply.get("dead") or []) & self._members()
            if gone:
                raise MemberGone(f"{', '.join(sorted(gone))} of this round is gone: the round cannot start")
            if time.monotonic() >= deadline:
                missing = [k for k, v in zip(keys, reply["values"], strict=True) if v is None]
                raise dist.DistStoreError(f"the rendezvous store has no {missing} after {limit:g} s")

    def set(self, key: str, value: bytes | str) -> None:
        self._op("set", [key], [value])

    def multi_set(self, keys: list[str], values: list[bytes | str]) -> None:
        self._op("set", list(keys), list(values))

    def get(self, key: str) -> bytes:
        return self._await([key])[0]

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return self._await(list(keys))

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        self._await(list(keys), timeout)

    def check(self, keys: list[str]) -> bool:
        return bool(self._op("check", list(keys))["ok"])

    def add(self, key: str, amount: int) -> int:
        return int(self._op("add", [key], amount=amount)["count"])

    def compare_set(self, key: str, expected: bytes | str, desired: bytes | str) -> bytes:
        return _raw(self._op("compare_set", [key], [expected, desired])["values"][0]) or b""

    def delete_key(self, key: str) -> bool:
        return bool(self._op("delete", [key])["ok"])

    def num_keys(self) -> int:
        return int(self._op("count", [])["count"])


_TOKEN: str | None = None


def create_tony_handler(params: RendezvousParameters) -> RendezvousHandler:
    """torch's dynamic rendezvous on the AM at ``params.endpoint`` (``host:port``)."""
    token = _TOKEN or os.environ.get("TONY_AM_TOKEN")
    if not token:
        raise ValueError("the tony rendezvous needs the AM's token (TONY_AM_TOKEN)")
    am = _AM(AMClient(params.endpoint, token, timeout=30.0, retries=5), params.run_id)
    join = params.get_as_int("join_timeout", 600) or 600
    handler: Any = None

    def members() -> set[str]:
        """The round's members, those the AM says are gone included: torch, syncing its state
        (its keep-alives do), drops them from its participants before a read waiting on one of
        them (rank 0's address) hears that it is gone."""
        state = getattr(getattr(handler, "_state_holder", None), "state", None)
        return {repr(node) for node in getattr(state, "participants", {}) or {}} | backend.lost

    store = AMStore(am, timedelta(seconds=join), members)
    backend = AMRendezvousBackend(am)
    handler = create_handler(store, backend, params)
    task_id, session = os.environ.get("TONY_TASK_ID", ""), int(os.environ.get("SESSION_ID", "0") or 0)
    joined, waiting = handler.next_rendezvous, handler.num_nodes_waiting
    held = {"rank0": False, "rounds": 0}

    def hand_over(request: dict[str, Any]) -> dict[str, Any]:
        try:
            return ask(request)
        except HandoffError as e:  # the group trains on, from what this container has
            print(f"tony-elastic: the checkpoint was not handed over: {e}", file=sys.stderr, flush=True)
            return {}

    def share_checkpoint(info: Any) -> None:
        # Before this round's trainers start, every container's checkpoint directory becomes the
        # group's newest: the container that held rank 0 pushes its saves to the store, the others
        # wait for it and take them, and rank 0's container mirrors from then on (task.handoff). A
        # member gone meanwhile is MemberGone: the next round does it again.
        round_ = getattr(getattr(getattr(handler, "_state_holder", None), "state", None), "round", None)
        flushed = bool(held["rank0"]) and hand_over({"flush": True}).get("flushed") is not None
        keys = [f"tony.checkpoint.{session}.{round_}.{rank}" for rank in range(info.world_size)]
        store.set(keys[info.rank], "flushed" if flushed else "-")
        others = store.multi_get(keys)
        pull = not flushed and (held["rounds"] > 0 or b"flushed" in others)
        reply = hand_over({"pull": pull, "rank0": info.rank == 0})
        if pull and not reply.get("skipped"):
            print(f"tony-elastic: round {round_}: this container took the group's checkpoint "
                  f"({reply.get('pulled', 0)} file(s))", file=sys.stderr, flush=True)
        held["rank0"], held["rounds"] = info.rank == 0, held["rounds"] + 1
        os.environ["TONY_ELASTIC_ROUND"] = str(round_)  # the round's trainers are started with it

    def num_nodes_waiting() -> int:
        # The agent asks this every monitor interval while its workers are healthy: a member gone
        # counts as a change of membership, as a node waiting to join does.
        n: int = waiting()
        return n if n or not backend.member_lost else 1

    def next_rendezvous() -> Any:
        deadline = time.monotonic() + join
        while True:
            backend.new_round()
            try:
                info = joined()
                share_checkpoint(info)
                break
            except MemberGone as e:
                # A member died between the round's forming and its start (rank 0 before it
                # published its workers' address): leave that round and join the next.
                if time.monotonic() >= deadline:
                    raise
                print(f"tony-elastic: {e}; joining the next round", file=sys.stderr, flush=True)
        backend.new_round()
        # torch keeps the round in the handler's state; the AM groups the agents' reports by it.
        holder = getattr(handler, "_state_holder", None)
        round_ = getattr(getattr(holder, "state", None), "round", None)
        if task_id and isinstance(round_, int):
            try:
                am.call(protocol.RDZV_ROUND, task_id=task_id, session_id=session, round=round_, rank=info.rank,
                        world_size=info.world_size, node=repr(getattr(handler, "_this_node", "")))
            except (RendezvousConnectionError, AMError) as e:  # the group trains on; only the display misses it
                print(f"tony-elastic: could not report round {round_}: {e}", file=sys.stderr, flush=True)
        return info

    handler.next_rendezvous = next_rendezvous  # type: ignore[method-assign]
    handler.num_nodes_waiting = num_nodes_waiting  # type: ignore[method-assign]
    return handler


def main(argv: list[str] | None = None) -> None:
    global _TOKEN
    # The token opens the AM's routes: the agent keeps it, its workers do not inherit it.
    _TOKEN = os.environ.pop("TONY_AM_TOKEN", None)
    # Each round's rank 0 picks a fresh master port for its workers; an address shared across
    # rounds would outlive the node that held it.
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    rendezvous_handler_registry.register(BACKEND, create_tony_handler)
    from torch.distributed.run import main as torchrun

    torchrun(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
