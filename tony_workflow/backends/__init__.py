"""Cluster backends. Each module implements :mod:`tony_workflow.backends.base`."""
from __future__ import annotations

from .base import Backend, ClusterManager, Container, ContainerRequest, NeverFits, get_backend

__all__ = ["Backend", "ClusterManager", "Container", "ContainerRequest", "NeverFits", "get_backend"]
