"""A real YARN cluster, through skein (submission, the ApplicationMaster's containers) and the
ResourceManager's REST API (following), with HDFS through WebHDFS.

The client's side is :mod:`.client` (:class:`YarnBackend`), which builds what it submits with
:mod:`.app`; the ApplicationMaster's side is :mod:`.am` (:class:`~.am.YarnClusterManager`), with
the programs YARN runs in the job's containers before the runtime does (:mod:`.gate`, :mod:`.boot`)
and what both sides share (:mod:`.containers`, :mod:`.attempts`). Gangs on a shared queue:
:mod:`.gang`, :mod:`.line`, :mod:`.start`, :mod:`.spread`. What travels with a job: :mod:`.ship`,
:mod:`.runtime`. Who may do what: :mod:`.access`, as whom: :mod:`.logins`. The REST API: :mod:`.rm`; skein's Java driver:
:mod:`.driver`.

This package's face is the client's: its names come from :mod:`.client` when first asked for, so
that the programs run in a job's containers (``python -m tony_workflow.backends.yarn.gate``,
``.boot``), which import this package first, do not load the client's side.
"""
from __future__ import annotations

from typing import Any

__all__ = ["YarnBackend", "app_store", "close_drivers", "docker_env", "job_login", "yarn_lifetime_s"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import client
        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
