"""The embedded cluster's books: what this machine offers, who holds what, and who waits.

There is no daemon. The books live under ``$TONY_HOME/local`` (default ``~/.tony/local``):
``cluster.json`` (the cluster's start time and the application counter) and ``ledger.json`` (who
holds which resources, and who waits), both changed only under an exclusive ``flock``
(:func:`locked_json`). Every AM takes its whole gang (its own container plus all tasks) in one
step (:meth:`Ledger.take`), and waiting AMs are served strictly first-come-first-served, in
submission order, so two jobs can never deadlock holding half of what they need, and a big job is
not starved by a stream of small ones. The entries of dead holders and waiters are dropped on
every look (a holder is the job's supervisor, named by its pid and start time, so a reused pid
never keeps resources).

How vcores are counted: memory and GPUs are never oversubscribed, but a vcore here is a share of a
core, not a core: the capacity is ``cores × tony.local.vcore-oversubscription`` (default 4; like
every ``tony.local.*`` setting it comes from ``$TONY_CONF_DIR/tony-site.xml``, never from a job), because
training tasks on one machine spend much of their time waiting on each other, and an AM plus a
3–4 task job must fit on a 2-core machine.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ... import process
from ...process import detect_gpus
from ...spec import LocalCapacity
from ...spec.site import tony_home
from ..base import Capacity, ContainerRequest, Wait, check_fits

__all__ = ["Inventory", "Ledger", "cluster_dir", "detect_gpus", "forget_allocation", "join_queue", "locked_json",
           "next_application_id", "tony_home"]


def cluster_dir() -> Path:
    d = tony_home() / "local"
    (d / "apps").mkdir(parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def locked_json(path: Path, default: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Read-modify-write of a JSON file under an exclusive lock on ``path.lock``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            try:
                data = json.loads(path.read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                data = json.loads(json.dumps(default))
            before = json.dumps(data, sort_keys=True)
            yield data
            if json.dumps(data, sort_keys=True) != before:
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
                os.replace(tmp, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def next_application_id() -> str:
    """``application_<cluster start ms>_<seq>``: YARN's shape, so YARN-id parsers work unchanged."""
    with locked_json(cluster_dir() / "cluster.json", {}) as c:
        c.setdefault("cluster_timestamp", int(time.time() * 1000))
        c["next_seq"] = c.get("next_seq", 0) + 1
        return f"application_{c['cluster_timestamp']}_{c['next_seq']:04d}"


@dataclass
class Inventory:
    """What this machine offers to containers."""

    memory_mb: int
    vcores: int
    gpus: list[int]

    @classmethod
    def of(cls, capacity: LocalCapacity) -> Inventory:
        """The inventory ``capacity`` describes, asking the machine for what it leaves unset."""
        memory_mb = capacity.memory_mb or psutil.virtual_memory().total // (1024 * 1024)
        vcores = int((capacity.vcores or os.cpu_count() or 1) * capacity.oversubscription)
        gpus = list(capacity.gpus) if capacity.gpus is not None else detect_gpus()
        return cls(memory_mb, vcores, gpus)

    def check_fits(self, requests: list[ContainerRequest]) -> None:
        """Raises :class:`~.base.NeverFits` naming the key to change when the gang can never be placed.
        One machine: its largest node and its whole are the same."""
        offer = Capacity(self.memory_mb, self.vcores, len(self.gpus))
        check_fits(requests, offer, offer, node="this machine", cluster="this machine", hints=HINTS)


# Where each amount of the embedded cluster comes from, so that an error says what to change.
HINTS = {"memory_mb": "tony.local.memory in $TONY_CONF_DIR/tony-site.xml",
          "gpus": "tony.local.gpus in $TONY_CONF_DIR/tony-site.xml",
          "vcores": "cores × tony.local.vcore-oversubscription in $TONY_CONF_DIR/tony-site.xml"}


def wait_reason(requests: list[ContainerRequest], ahead: list[str], inv: Inventory, used_mem: int, used_vc: int,
                 free_gpus: int, holders: Mapping[str, Mapping[str, Any]]) -> str:
    """Why a gang waits on the embedded cluster: jobs ahead (first come, first served), or the
    resource that the jobs holding their gangs leave short, naming the jobs that hold some of it
    (``holders``: each job's allocation, its ``memory_mb``, ``vcores`` and ``gpus``)."""
    tasks = [r for r in requests if r.task_id != "am"] or requests
    ttype = max(tasks, key=lambda r: (r.gpus, r.memory_mb, r.vcores)).task_id.split(":")[0]
    of_type = [r for r in tasks if r.task_id.split(":")[0] == ttype]
    r = of_type[0]
    shape = f"{r.memory_mb} MB, {r.vcores} vcore{'' if r.vcores == 1 else 's'}" + (f", {r.gpus} GPU{'' if r.gpus == 1 else 's'}" if r.gpus else "")
    head = f"{ttype}: 0 of {len(of_type)} containers ({shape} each); blocked by "
    if ahead:
        shown = ", ".join(ahead[:3]) + (f" and {len(ahead) - 3} more" if len(ahead) > 3 else "")
        return head + f"{len(ahead)} job{'' if len(ahead) == 1 else 's'} ahead on the embedded cluster ({shown}), " \
                      "served first come, first served"

    def held(resource: str) -> str:
        jobs = sorted(app for app, a in holders.items() if a.get(resource))
        return (f", held by {', '.join(jobs[:3])}" + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")
                if jobs else "")
    need_mem, need_vc = sum(q.memory_mb for q in requests), sum(q.vcores for q in requests)
    need_gpu = sum(q.gpus for q in requests)
    if need_gpu > free_gpus:
        return head + (f"GPUs: the gang needs {need_gpu} at once and {free_gpus} of {len(inv.gpus)} are free"
                       f"{held('gpus')}")
    if used_mem + need_mem > inv.memory_mb:
        return head + (f"memory: the gang needs {need_mem} MB at once and {inv.memory_mb - used_mem} MB of "
                       f"{inv.memory_mb} MB are free{held('memory_mb')}")
    return head + (f"vcores: the gang needs {need_vc} at once and {inv.vcores - used_vc} of {inv.vcores} are free"
                   f"{held('vcores')}")


def app_seq(app_id: str) -> tuple[int, int]:
    _, ts, seq = app_id.split("_")
    return int(ts), int(seq)


def enqueue(ledger: dict[str, Any], app_id: str, pid: int) -> None:
    """Queues in submission order (the application sequence), whichever AM reaches the ledger first."""
    ledger.setdefault("queue", []).append({"app": app_id, "pid": pid, "started": process.start_time(pid),
                                           "since": time.time()})
    ledger["queue"].sort(key=lambda q: app_seq(q["app"]))


def _purge(ledger: dict[str, Any]) -> None:
    """Drops the entries of holders and waiters that are gone."""
    ledger.setdefault("allocations", {})
    ledger.setdefault("queue", [])
    for app, a in list(ledger["allocations"].items()):
        if not process.alive(a["pid"], a.get("started")):
            del ledger["allocations"][app]
    ledger["queue"] = [q for q in ledger["queue"] if process.alive(q["pid"], q.get("started"))]


class Ledger:
    """One application's account in the books. ``owner_pid`` (started at ``owner_started``) holds
    the resources: the job's supervisor, which outlives any one AM attempt."""

    def __init__(self, app_id: str, inventory: Inventory, owner_pid: int, owner_started: float | None):
        self.app_id = app_id
        self.inventory = inventory
        self.owner_pid, self.owner_started = owner_pid, owner_started
        self.path = cluster_dir() / "ledger.json"

    def take(self, requests: list[ContainerRequest]) -> tuple[list[int] | None, Wait | None]:
        """One look, under the lock: the GPUs the gang gets when it is granted now (its allocation
        is recorded and it leaves the queue), else None and why it waits (it is queued, in
        submission order, if it was not)."""
        inv = self.inventory
        with locked_json(self.path, {}) as L:
            _purge(L)
            held = L["allocations"].get(self.app_id)
            if held is not None:
                # An earlier attempt's gang, kept by the job's supervisor while it cleared what that
                # attempt left: this attempt takes it over as it is.
                L["queue"] = [q for q in L["queue"] if q["app"] != self.app_id]
                return list(held["gpus"]), None
            if not any(q["app"] == self.app_id for q in L["queue"]):
                enqueue(L, self.app_id, self.owner_pid)
            used_mem = sum(a["memory_mb"] for a in L["allocations"].values())
            used_vc = sum(a["vcores"] for a in L["allocations"].values())
            used_gpu = {g for a in L["allocations"].values() for g in a["gpus"]}
            free_gpu = [g for g in inv.gpus if g not in used_gpu]
            need_mem, need_vc = sum(r.memory_mb for r in requests), sum(r.vcores for r in requests)
            need_gpu = sum(r.gpus for r in requests)
            head = L["queue"][0]["app"] == self.app_id
            fits = used_mem + need_mem <= inv.memory_mb and used_vc + need_vc <= inv.vcores and need_gpu <= len(free_gpu)
            if head and fits:
                given = free_gpu[:need_gpu]
                L["allocations"][self.app_id] = {"pid": self.owner_pid, "started": self.owner_started,
                                                 "since": time.time(), "memory_mb": need_mem, "vcores": need_vc,
                                                 "gpus": given}
                L["queue"] = [q for q in L["queue"] if q["app"] != self.app_id]
                return given, None
            queued = [q["app"] for q in L["queue"]]
            ahead = queued[:queued.index(self.app_id)]
            return None, Wait(wait_reason(requests, ahead, inv, used_mem, used_vc, len(free_gpu),
                                          L["allocations"]), tuple(ahead))

    def leave_queue(self) -> None:
        """Stops waiting (an allocation cancelled or failed)."""
        with locked_json(self.path, {}) as L:
            L["queue"] = [q for q in L.get("queue", []) if q["app"] != self.app_id]

    def release(self) -> None:
        forget_allocation(self.app_id)


def join_queue(app_id: str, pid: int) -> None:
    """Takes a submitted job's place in the queue at once (``pid``: its supervisor), so that jobs
    are served in the order they were submitted, whichever AM reaches the books first."""
    with locked_json(cluster_dir() / "ledger.json", {}) as L:
        enqueue(L, app_id, pid)


def forget_allocation(app_id: str) -> None:
    """Gives the application's resources back to the local cluster and takes it out of the queue."""
    with locked_json(cluster_dir() / "ledger.json", {}) as L:
        L.get("allocations", {}).pop(app_id, None)
        L["queue"] = [q for q in L.get("queue", []) if q["app"] != app_id]
