"""The narrow interface every backend implements.

A backend has two halves. :class:`Backend` is used by the client: it submits an application
(starting its ApplicationMaster), finds a running AM, reads persisted status and logs, and force-kills.
:class:`ClusterManager` is used by the AM: it gang-allocates containers, launches a command in
each, watches and kills them.
"""
from __future__ import annotations

import sys
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..spec import JobSpec
    from ..status import JobStatus

__all__ = ["Backend", "ClusterManager", "Container", "ContainerRequest", "NeverFits", "get_backend"]


class NeverFits(ValueError):
    """A request that no amount of waiting can satisfy. ``key`` names the spec key to change."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass
class ContainerRequest:
    task_id: str            # "worker:1", or "am"
    memory_mb: int
    vcores: int
    gpus: int
    node_label: str | None = None


@dataclass
class Container:
    id: str
    task_id: str
    memory_mb: int
    vcores: int
    gpu_indices: list[int] = field(default_factory=list)
    host: str = "127.0.0.1"
    workdir: Path | None = None
    stdout: Path | None = None
    stderr: Path | None = None
    pid: int | None = None


@dataclass
class AMEndpoint:
    address: str            # host:port
    token: str
    view_token: str | None = None


class ClusterManager(ABC):
    """AM-side access to the cluster."""

    #: the command a container runs to start the TaskExecutor
    executor_argv: list[str] = [sys.executable, "-m", "tony_workflow.executor"]

    def checkpoint_location(self, app_dir: Path) -> str:
        """Where the checkpoint mirror lives unless ``tony.checkpoint.location`` says otherwise."""
        return str(app_dir / "checkpoints")

    def log_dir(self, app_dir: Path) -> str | None:
        """A TensorBoard log directory every task can write to, or None for each task's own."""
        return str(app_dir / "tensorboard")

    def publish_endpoint(self, address: str, token: str, view_token: str, tracking_url: str) -> str:
        """Makes the AM findable by clients; returns the tracking URL users should see."""
        return tracking_url

    def expose_tensorboard(self, url: str) -> str | None:
        """Makes TensorBoard reachable for users (e.g. behind a proxy); returns the URL to show."""
        return None

    def finish(self, state: str, diagnostics: str, status: dict | None = None) -> None:
        """Records the final state (and the whole final JobStatus) with the cluster; called once,
        after release()."""

    @abstractmethod
    def allocate(self, requests: list[ContainerRequest], cancel: threading.Event) -> list[Container]:
        """Returns one container per request, all at once (gang), waiting in the queue as long as
        needed. Raises :class:`NeverFits` if the request can never be satisfied, and
        ``InterruptedError`` if ``cancel`` is set while waiting."""

    @abstractmethod
    def new_container(self, like: Container) -> Container:
        """A fresh container on the same reservation as ``like`` (a relaunch keeps the resources)."""

    @abstractmethod
    def launch(self, container: Container, argv: list[str], env: dict[str, str]) -> None:
        """Starts ``argv`` in the container, in a process group of its own."""

    def launch_all(self, launches: list[tuple[Container, list[str], dict[str, str]]]) -> None:
        """Starts several containers; a backend may do it faster than one by one."""
        for container, argv, env in launches:
            self.launch(container, argv, env)

    @abstractmethod
    def poll(self, container: Container) -> int | None:
        """The container's exit code, or None while it runs."""

    @abstractmethod
    def kill(self, container: Container, grace: float = 5.0) -> None:
        """Stops the container's whole process tree: SIGTERM, then SIGKILL after ``grace``."""

    @abstractmethod
    def release(self) -> None:
        """Gives every reservation of this application back to the cluster."""

    def log_url(self, container: Container) -> str | None:
        return str(container.stdout) if container.stdout else None


class Backend(ABC):
    """Client-side access to a cluster."""

    name: str

    @abstractmethod
    def submit(self, spec: "JobSpec") -> str:
        """Checks the request fits, stages files, starts the AM; returns the application id."""

    @abstractmethod
    def endpoint(self, app_id: str) -> AMEndpoint | None:
        """Where the application's AM listens, or None before it is up / after it is gone."""

    @abstractmethod
    def stored_status(self, app_id: str) -> "JobStatus":
        """The last status the AM persisted (or what the cluster knows once the AM is gone).
        Raises KeyError for an unknown application."""

    @abstractmethod
    def force_kill(self, app_id: str) -> None:
        """Kills the application without the AM's help."""

    @abstractmethod
    def logs(self, app_id: str, task: str | None = None) -> dict[str, Path]:
        """Log files by name (``worker:0/stdout``, ``am/stderr`` ...)."""

    @abstractmethod
    def list_applications(self) -> list[str]:
        """Known application ids, newest last."""


def get_backend(name: str = "local", **kwargs) -> Backend:
    if name == "local":
        from .local import LocalBackend
        return LocalBackend(**kwargs)
    if name == "yarn":
        try:
            from .yarn import YarnBackend  # type: ignore[import-not-found]
        except ImportError as e:
            raise ValueError(f"backend 'yarn' is not available here ({e}); install tony-workflow[yarn]") from None
        return YarnBackend(**kwargs)
    raise ValueError(f"unknown backend {name!r}: allowed are 'local' and 'yarn'")
