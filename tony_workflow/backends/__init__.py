"""Cluster backends. Each module implements :mod:`tony_workflow.backends.base`.

The factories are here, not in ``base``: they import a backend's module, and only when it is asked
for (YARN needs skein), while the backends import ``base``. Kept apart, no arrow runs back up.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .base import (
    AMIdentity,
    Backend,
    Capacity,
    ClusterManager,
    Container,
    ContainerRequest,
    NeverFits,
    Wait,
    check_fits,
    gang_requests,
)

if TYPE_CHECKING:
    from ..spec import JobSpec

__all__ = ["AMIdentity", "Backend", "Capacity", "ClusterManager", "Container", "ContainerRequest", "NeverFits",
           "Wait", "check_fits", "gang_requests", "get_backend", "get_cluster_manager"]


def get_backend(name: str = "local", **kwargs) -> Backend:
    if name == "local":
        from .local import LocalBackend
        return LocalBackend(**kwargs)
    if name == "yarn":
        try:
            from .yarn import YarnBackend  # type: ignore[import-not-found]
        except ImportError as e:
            raise ConfigError(f"backend 'yarn' is not available here ({e}); install tony-workflow[yarn]") from None
        return YarnBackend(**kwargs)
    raise ConfigError(f"unknown backend {name!r}: allowed are 'local' and 'yarn'")


def get_cluster_manager(name: str, app_dir: Path, spec: JobSpec) -> tuple[ClusterManager, AMIdentity]:
    """The AM side of backend ``name`` for the application whose files are in ``app_dir``, and the
    identity the AM takes there."""
    if name == "local":
        from .local import LocalClusterManager
        return LocalClusterManager.for_app(app_dir, spec)
    if name == "yarn":
        from .yarn_am import YarnClusterManager
        cluster = YarnClusterManager(line_dir=spec.gang_line_dir)
        # Clients read the tokens from skein's key-value store, which only the application's owner
        # can, so the AM makes them itself, once: a later attempt in this container takes them over.
        secret = app_dir / "am.secret"
        if not secret.is_file():
            fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump({"token": secrets.token_urlsafe(24), "view_token": secrets.token_urlsafe(12)}, fh)
        tokens = json.loads(secret.read_text())
        return cluster, AMIdentity(cluster.app_id, tokens["token"], tokens["view_token"],
                                   os.environ.get("NM_HOST") or socket.getfqdn())
    raise ConfigError(f"unknown backend {name!r}: allowed are 'local' and 'yarn'")
