"""Cluster backends: each a package that implements :mod:`tony_workflow.backends.base`, the
embedded cluster (:mod:`.local`) and YARN (:mod:`.yarn`). Adding a backend is adding a package
and naming it in the two factories here.

The factories are here, not in ``base``: they import a backend's package, and only when it is
asked for (YARN needs skein), while the backends import ``base``. Kept apart, no arrow runs back up.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

__all__ = [
    "AMIdentity",
    "Backend",
    "Capacity",
    "ClusterManager",
    "Container",
    "ContainerRequest",
    "NeverFits",
    "Wait",
    "check_fits",
    "client_setting",
    "default_backend",
    "gang_requests",
    "get_backend",
    "get_cluster_manager",
    "history_server",
]

#: The backends there are, by the name a user gives.
BACKENDS = ("local", "yarn")


def client_setting(variable: str, key: str, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """A setting of the machine's ``tony`` command: the environment ``variable``, else ``key`` in
    tony-site.xml (``CLIENT_DEFAULTS`` when neither), with where it was read, for errors."""
    from ..spec.keys import CLIENT_DEFAULTS
    from ..spec.loading import site_conf, site_path

    env = os.environ if environ is None else environ
    if env.get(variable, "").strip():
        return env[variable].strip(), variable
    conf_dir = env.get("TONY_CONF_DIR")
    value = ((site_conf(conf_dir) if conf_dir else {}).get(key) or CLIENT_DEFAULTS[key]).strip()
    return value, f"{key} in {site_path(conf_dir)}"


def history_server(environ: Mapping[str, str] | None = None) -> str | None:
    """The history server's address (``$TONY_HISTORY_SERVER``, else tony-site.xml's
    ``tony.history.server-url``), without its trailing slash; None when neither says one.
    ConfigError naming where it came from when it is no http(s) address."""
    value, where = client_setting("TONY_HISTORY_SERVER", "tony.history.server-url", environ)
    if not value:
        return None
    if not value.startswith(("http://", "https://")) or len(value.split("/")) < 3 or not value.split("/")[2]:
        raise ConfigError(f"{where}={value!r} is no address of a history server: expected http(s)://host:port")
    return value.rstrip("/")


def default_backend(environ: Mapping[str, str] | None = None) -> str:
    """The backend a client uses when none is named: ``$TONY_BACKEND``, else tony-site.xml's
    ``tony.client.backend``, else the embedded cluster. ConfigError naming where the value came
    from when it names no backend."""
    value, where = client_setting("TONY_BACKEND", "tony.client.backend", environ)
    if value not in BACKENDS:
        raise ConfigError(f"{where}={value!r} names no backend: allowed are 'local' and 'yarn'")
    return value


def get_backend(name: str = "local", **kwargs: Any) -> Backend:
    if name == "local":
        from .local import LocalBackend
        return LocalBackend(**kwargs)
    if name == "yarn":
        try:
            from .yarn.client import YarnBackend
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
        from .yarn.am import YarnClusterManager
        return YarnClusterManager.for_app(app_dir, spec)
    raise ConfigError(f"unknown backend {name!r}: allowed are 'local' and 'yarn'")
