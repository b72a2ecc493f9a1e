"""Memory is a limit on the embedded cluster, as a NodeManager's container monitor makes it on YARN.

Every ``tony.local.container-monitor-interval-ms`` (3 s, YARN's default) a :class:`MemoryWatch`
measures each running container: the resident set size summed over its first process, every
descendant and every member of its process group (what a task started and left behind lives on in
its group). A container over the memory it was given is killed whole, and the watch keeps the
cluster's word on it: the exit status YARN gives such a container (-104) and a diagnostic that
names the limit, the usage and the biggest processes. The AM reads both as it reads YARN's.

Resident set size counts a page shared by two processes of the tree twice, as YARN's default
process-tree reader does; what a container asks for is meant to cover it. With
``tony.local.pmem-check-enabled=false`` (a site setting, like everything ``tony.local.*``) nothing
is measured and nothing is killed.

One pass reads the process table once, however many containers there are.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ... import process
from ...protocol import EXCEEDED_MEMORY_EXIT

__all__ = ["EXCEEDED_MEMORY_EXIT", "MemoryWatch", "Watched", "limit_message", "tree_usage"]

log = logging.getLogger("tony.local.memory")
MB = 1024 * 1024


@dataclass
class Watched:
    """One container under watch: its first process (pid and start time) and its limit."""

    container_id: str
    pid: int
    started: float | None
    limit_mb: int
    #: the key that sets the limit (``tony.worker.memory``), for the diagnostic
    key: str = ""


def _table() -> dict[int, tuple[int, int, int, str]]:
    """pid -> (parent pid, process group, resident bytes, name) of every process this user may read."""
    import psutil

    table = {}
    for p in psutil.process_iter(["ppid", "memory_info", "name", "status"]):
        info = p.info
        if info.get("memory_info") is None or info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        with contextlib.suppress(OSError):
            table[p.pid] = (info["ppid"], os.getpgid(p.pid), info["memory_info"].rss, info.get("name") or "?")
    return table


def tree_usage(root: int, table: dict[int, tuple[int, int, int, str]]) -> list[tuple[int, int, str]]:
    """(pid, resident bytes, name) of ``root``, its descendants and the members of the process group
    it leads (with theirs), from a process ``table`` as :func:`_table` reads it."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    heads = [root] + [pid for pid, (_, pgid, _, _) in table.items() if pgid == root and pid != root]
    seen: set[int] = set()
    stack = [h for h in heads if h in table]
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stack.extend(children.get(pid, ()))
    return [(pid, table[pid][2], table[pid][3]) for pid in seen]


def _size(n: float) -> str:
    return f"{n / 1024:.1f} GB" if n >= 1024 else f"{n:.0f} MB"


def limit_message(w: Watched, usage: list[tuple[int, int, str]]) -> str:
    """The diagnostic of a container killed for its memory: the limit, the usage, by how much, and
    the processes that held most of it."""
    used_mb = sum(rss for _, rss, _ in usage) / MB
    top = sorted(usage, key=lambda u: -u[1])[:5]
    tree = ", ".join(f"{name} (pid {pid}) {_size(rss / MB)}" for pid, rss, name in top)
    more = f" and {len(usage) - len(top)} more" if len(usage) > len(top) else ""
    limit = f"{_size(w.limit_mb)}{f' ({w.key})' if w.key else ''}"
    return (f"Container {w.container_id} (pid {w.pid}) is running {_size(used_mb - w.limit_mb)} beyond its "
            f"physical memory limit: {_size(used_mb)} of {limit} used. Killing container. "
            f"Largest processes: {tree}{more}.")


class MemoryWatch:
    """The embedded cluster's container monitor (see the module docstring). ``on_kill`` is called
    after a container was killed for its memory, from the watch's thread."""

    def __init__(self, interval_s: float = 3.0, on_kill: Callable[[str], None] | None = None):
        self.interval_s = interval_s
        self.on_kill = on_kill
        self._watched: dict[str, Watched] = {}
        self._verdicts: dict[str, str] = {}  # container id -> diagnostic
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, w: Watched) -> None:
        """Starts watching a container (and the watch's thread with the first one)."""
        with self._lock:
            self._watched[w.container_id] = w
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)
                self._thread.start()

    def forget(self, container_id: str) -> None:
        with self._lock:
            self._watched.pop(container_id, None)

    def exceeded(self, container_id: str) -> str | None:
        """The diagnostic of a container killed for its memory; None for any other."""
        with self._lock:
            return self._verdicts.get(container_id)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception:  # the watch must outlive a process table read gone wrong
                log.exception("memory watch pass failed")

    def check(self) -> list[str]:
        """One pass: kills every container over its limit; the ids of those killed."""
        with self._lock:
            watched = list(self._watched.values())
        if not watched:
            return []
        table = _table()
        killed = []
        for w in watched:
            usage = tree_usage(w.pid, table)
            if sum(rss for _, rss, _ in usage) <= w.limit_mb * MB or not process.alive(w.pid, w.started):
                continue
            message = limit_message(w, usage)
            with self._lock:
                if w.container_id not in self._watched:
                    continue  # stopped meanwhile
                self._verdicts[w.container_id] = message
                del self._watched[w.container_id]
            log.warning("%s", message)
            # As a NodeManager does: SIGTERM to the whole tree, SIGKILL a quarter of a second later.
            process.kill_tree(w.pid, 0.25, started=w.started)
            killed.append(w.container_id)
            if self.on_kill is not None:
                self.on_kill(w.container_id)
        return killed
