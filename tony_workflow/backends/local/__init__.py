"""The embedded cluster: one machine, no Hadoop. The backend and its cluster manager are
:mod:`.cluster`, the machine's ledger of what is handed out (memory, cores, GPUs, gangs) is
:mod:`.ledger`, and the fork server that starts containers quickly is :mod:`.forkserver`."""
from __future__ import annotations

from .cluster import LocalBackend, LocalClusterManager

__all__ = ["LocalBackend", "LocalClusterManager"]
