"""The narrow interface every backend implements, and what all backends share.

A backend has two halves. :class:`Backend` is used by the client: it submits an application
(starting its ApplicationMaster), finds a running AM, reads persisted status and logs, and force-kills.
:class:`ClusterManager` is used by the AM: it gang-allocates containers, launches a command in
each, watches and kills them.

What a job asks for (:func:`gang_requests`) and whether it can ever be granted (:func:`check_fits`)
live here rather than in the AM or in one backend: the client side of every backend checks a job
before submitting it and the AM allocates the same gang, so the backends depend on this module
only, never on the AM. This module imports no backend; the factories that do are in the package
(:mod:`tony_workflow.backends`).
"""
from __future__ import annotations

import dataclasses
import logging
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import SubmissionRefused, UnknownApplication

if TYPE_CHECKING:
    from ..spec import JobSpec
    from ..status import JobStatus

__all__ = ["AMEndpoint", "AMIdentity", "Backend", "Capacity", "CheckpointLocality", "ClusterManager", "Container",
           "ContainerRequest", "GangForming", "NeverFits", "Reclaiming", "Wait", "check_fits", "gang_requests",
           "label_key", "raised_to_minimum"]


class NeverFits(SubmissionRefused):
    """A request that no amount of waiting can satisfy. ``key`` names the spec key to change."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}", key)


@dataclass(frozen=True)
class Wait:
    """Why a job's gang is not whole, as the cluster manager sees it.

    ``reason`` is one concrete line: the task type, how many of how many containers, and what
    blocks the rest (queue headroom, the largest container a node can give, a node label no node
    carries, other jobs ahead). ``ahead`` lists the applications served first. ``release`` tells
    a gang that holds part of what it asks for to give it back now: an older job needs the room.
    """

    reason: str
    ahead: tuple[str, ...] = ()
    release: bool = False


@dataclass
class ContainerRequest:
    task_id: str            # "worker:1", or "am"
    memory_mb: int
    vcores: int
    gpus: int
    node_label: str | None = None


def gang_requests(spec: JobSpec) -> list[ContainerRequest]:
    """The gang a job asks for: the AM's own container first, then every task in type order, each
    with the node label its container asks for (its own, else the application's)."""
    reqs = [ContainerRequest("am", spec.am.memory_mb, spec.am.vcores, spec.am.gpus,
                             spec.am_node_label or spec.node_label)]
    for t, ts in spec.tasks.items():
        for i in range(ts.instances):
            reqs.append(ContainerRequest(f"{t}:{i}", ts.resources.memory_mb, ts.resources.vcores,
                                         ts.resources.gpus, ts.node_label or spec.node_label))
    return reqs


def label_key(spec: JobSpec, task_id: str) -> str:
    """The key that gave the container of ``task_id`` ("am" or "worker:0") its node label: its
    own type's (or tony.am.node-label), else the application's."""
    if task_id == "am":
        return "tony.am.node-label" if spec.am_node_label else "tony.application.node-label"
    ttype = task_id.split(":")[0]
    task = spec.tasks.get(ttype)
    return f"tony.{ttype}.node-label" if task is not None and task.node_label else "tony.application.node-label"


@dataclass(frozen=True)
class Capacity:
    """An amount of each resource a container asks for: a node's, or a whole cluster's."""

    memory_mb: int
    vcores: int
    gpus: int


# (attribute, spec key suffix, unit). Memory and GPUs are what a machine has, vcores what it
# offers: the local cluster oversubscribes cores.
_MEMORY, _GPUS, _VCORES = ("memory_mb", "memory", "MB"), ("gpus", "gpus", "GPU"), ("vcores", "vcores", "vcore")


def _amount(unit: str, n: int) -> str:
    return f"{n} MB" if unit == "MB" else f"{n} {unit}{'' if n == 1 else 's'}"


def _type_key(req: ContainerRequest) -> str:
    return "tony.am" if req.task_id == "am" else f"tony.{req.task_id.split(':')[0]}"


def check_fits(requests: list[ContainerRequest], largest: Capacity, total: Capacity, *,
               node: str, cluster: str, hints: Mapping[str, str] | None = None) -> None:
    """Raises :class:`NeverFits` when the gang can never be placed: one container is larger than
    the largest node, or the whole gang, which must hold its containers at once, is larger than
    the cluster. The error names the spec key to change and what the cluster offers.

    ``node`` and ``cluster`` name the largest node and the whole ("this machine" twice for the
    local cluster, where both are the same); ``hints`` says, per attribute, where an amount comes
    from (``tony.local.memory``), for a cluster whose size the user sets.
    """
    hints = hints or {}

    def offers(where: str, attr: str, unit: str, n: int) -> str:
        hint = f" ({hints[attr]})" if attr in hints else ""
        return f"{where} {'offers' if attr == 'vcores' else 'has'} {_amount(unit, n)}{hint}"

    for r in requests:
        for attr, suffix, unit in (_MEMORY, _GPUS, _VCORES):
            asked = getattr(r, attr)
            if asked > getattr(largest, attr):
                raise NeverFits(f"{_type_key(r)}.{suffix}", f"{r.task_id} asks for {_amount(unit, asked)} "
                                f"but {offers(node, attr, unit, getattr(largest, attr))}")
    # GPUs first: the scarcest resource, and the likeliest reason a gang can never be placed.
    for attr, suffix, unit in (_GPUS, _MEMORY, _VCORES):
        need = sum(getattr(r, attr) for r in requests)
        if need <= getattr(total, attr):
            continue
        by_key: dict[str, int] = {}
        per_type: dict[str, list[int]] = {}
        for r in requests:
            by_key[_type_key(r)] = by_key.get(_type_key(r), 0) + getattr(r, attr)
            per_type.setdefault(r.task_id.split(":")[0], []).append(getattr(r, attr))
        # The key to change is the type that takes the most of it.
        key = max(by_key, key=by_key.__getitem__)
        breakdown = ", ".join(f"{t} {len(v)}×{v[0]}" for t, v in per_type.items())
        raise NeverFits(f"{key}.{suffix}", f"the job needs {_amount(unit, need)} at once ({breakdown}) "
                        f"but {offers(cluster, attr, unit, getattr(total, attr))}")


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


@dataclass(frozen=True)
class AMIdentity:
    """Who the ApplicationMaster is on its cluster: its application, its tokens, its host."""

    app_id: str
    token: str
    view_token: str
    host: str


class Reclaiming:
    """An ability of a cluster that takes containers back (preemption, a lost node): it says why a
    container ended when the end was its doing, and the AM does not count that against the job.
    The defaults here are a cluster that never does."""

    #: How long the AM holds its verdict on a task that failed by a signal or fell silent while the
    #: cluster has not yet said how its container ended: a cluster that can take containers back
    #: (:meth:`reclaimed`) reports a preemption or a lost node only after the task's own end is seen.
    reclaim_wait_s: float = 0.0

    def ended_now(self, container: Container) -> int | None:
        """The container's exit code if it has ended, asked where it runs rather than as the
        cluster reports it (which may come later); None while it runs or when that cannot be
        told. A cluster whose :meth:`poll` already asks there needs nothing more."""
        return None

    def reclaimed(self, container: Container) -> str | None:
        """Why the cluster took ``container`` back, when its end was the cluster's doing and not
        the task's ("preempted by the scheduler", "lost with its node", ...); None otherwise, or
        while the cluster has not said."""
        return None



class GangForming:
    """An ability of a cluster that grants a gang's containers one by one, after the job's turn has
    come (YARN): the AM shows which are granted, and why the rest wait. The defaults here are a
    cluster that grants a gang whole, at once."""

    def waited_since(self) -> float | None:
        """Since when the job has waited for its gang before its AM started (a cluster that makes
        a job wait its turn before starting the AM, as YARN's gate does); None if it did not."""
        return None

    def admitted_at(self) -> float | None:
        """When the job's turn came at such a gate and its gang was asked for; None if no gate
        held it."""
        return None

    def granted(self, container: Container) -> bool:
        """Whether the cluster has given ``container`` (launched): a task whose container is not
        granted is REQUESTED, not LAUNCHED. Containers of a reservation are granted at once."""
        return True

    def forming(self, pending: list[Container], granted: list[Container]) -> Wait | None:
        """While the ``pending`` containers of a gang are not granted (and ``granted`` are): why,
        and whether to give back what is held (:attr:`Wait.release`). None: nothing to add."""
        return None



class CheckpointLocality:
    """An ability of a cluster whose containers share a filesystem with their predecessors (the
    embedded cluster): a new session may resume from an earlier container's checkpoint directory
    when it is newer than the store's. The defaults here are containers that share nothing."""

    def checkpoint_fallbacks(self, task_id: str) -> list[str]:
        """Checkpoint directories earlier containers of ``task_id`` left where this session's tasks
        can read them (newest first); none where containers do not share a filesystem."""
        return []

    def prune_checkpoints(self, keep: set[str]) -> None:
        """Removes the checkpoint directories of containers other than ``keep``, once the tasks
        running in those have restored theirs."""


class ClusterManager(Reclaiming, GangForming, CheckpointLocality, ABC):
    """AM-side access to the cluster: what every backend must do (allocate a gang, launch, poll and
    kill containers, give them back), what it may add for the AM (the endpoint clients find, the
    job's directories, the final record), and the optional abilities it inherits with defaults
    that mean "not this cluster" (:class:`Reclaiming`, :class:`GangForming`,
    :class:`CheckpointLocality`), which a backend that has one overrides."""

    #: the backend's name (``local``, ``yarn``): the job status's ``backend``
    name: str = "local"

    #: whether the AM's own container is granted only with the job's first gang (the embedded
    #: cluster): until then the job has, in YARN's terms, not started its AM (tony.am.startup-timeout)
    am_waits_with_gang: bool = False

    #: the command a container runs to start the TaskExecutor
    executor_argv: ClassVar[list[str]] = [sys.executable, "-m", "tony_workflow.task.executor"]
    # What the AM gives its cluster manager (:meth:`bind`), None until it does.
    _events: Any = None
    _on_change: Callable[[], None] | None = None
    _on_wait: Callable[[Wait | None], None] | None = None

    def bind(self, events: Any, on_change: Callable[[], None], on_wait: Callable[[Wait | None], None]) -> None:
        """The AM's part, given once as it takes this cluster manager: ``events``, the job's event
        log (what the cluster did to the job's placement, for the record); ``on_change``, which
        makes the AM look at its containers now rather than on its next pass; ``on_wait``, which
        :meth:`allocate` calls on every pass of its wait with the reason (None once granted) and
        which may raise to stop the wait (the AM's tony.container.allocation.timeout)."""
        self._events, self._on_change, self._on_wait = events, on_change, on_wait

    def waiting(self, wait: Wait | None) -> None:
        """Tells the AM why the gang waits (None: it does not)."""
        if self._on_wait is not None:
            self._on_wait(wait)

    def note(self, event: str, **fields: Any) -> None:
        """Records ``event`` in the job's events (nothing before the AM gave its log)."""
        if self._events is not None:
            self._events.emit(event, **fields)

    def container_changed(self) -> None:
        """A container ended (or otherwise changed) where this backend learns it as it happens: the
        AM hears of it at once. Backends that only learn by polling need not call it."""
        if self._on_change is not None:
            self._on_change()
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

    def report_progress(self, fraction: float) -> None:
        """Tells the cluster how far training has got (0..1), for its own UI; at most every few
        seconds. Failures are the backend's to swallow: progress must never stop a job."""

    def finish(self, state: str, diagnostics: str, status: dict[str, Any] | None = None) -> None:
        """Records the final state (and the whole final JobStatus) with the cluster; called once,
        after release()."""

    @abstractmethod
    def allocate(self, requests: list[ContainerRequest], cancel: threading.Event) -> list[Container]:
        """Returns one container per request, all at once (gang), waiting in the queue as long as
        needed and saying why through :meth:`waiting`. Called as each session starts: a cluster
        that keeps a job's reservation between sessions returns it at once. Raises
        :class:`NeverFits` if the request can never be satisfied, and ``InterruptedError`` if
        ``cancel`` is set while waiting.

        A cluster that grants containers only as it launches them (YARN) returns containers that
        are admitted, not granted: the job's turn has come and its gang fits, and
        :meth:`granted` says when each one is there."""

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

    def kill_all(self, containers: list[Container], grace: float) -> None:
        """:meth:`kill` for each of ``containers`` at once: the slowest to die sets the wait."""
        threads = [threading.Thread(target=self.kill, args=(c, grace), daemon=True) for c in containers]
        for th in threads:
            th.start()
        for th in threads:
            th.join()

    @abstractmethod
    def release(self) -> None:
        """Gives every reservation of this application back to the cluster."""

    def am_workdir(self, app_dir: Path) -> Path:
        """Where a single-node job's command runs (:mod:`tony_workflow.am.single_node`): the AM's own
        container's directory, which holds the job's source, resources and venv as a task's does."""
        return Path.cwd()

    def exit_diagnostics(self, container: Container) -> str | None:
        """What the cluster itself says of an ended container (YARN's diagnostics: a file it could
        not localize, a memory limit it enforced), or None where it says nothing beyond the code."""
        return None

    def log_url(self, container: Container) -> str | None:
        return str(container.stdout) if container.stdout else None

    def board_store(self) -> str | None:
        """Where the chief copies its TensorBoard event files for the job's history when no
        directory is shared by the job's tasks (:meth:`log_dir` None); None when none need be."""
        return None

    def am_log_url(self) -> str | None:
        """Where the AM's own log is read from outside (its container's page), if anywhere."""
        return None

    def recover(self) -> None:
        """Called by a later AM attempt before anything else: stops what an earlier attempt left
        running that this backend can still reach."""

    def save_attempt_state(self, state: dict[str, Any], app_dir: Path) -> None:
        """Keeps where the job stands (:func:`tony_workflow.am.attempts.attempt_state`), and its events
        in ``app_dir``, where an AM attempt in another container would find them; nothing where
        every attempt runs beside the job's directory. Called as each session starts."""

    def finished_tasks(self, session_id: int) -> dict[str, int]:
        """Exit codes the executors of ``session_id`` recorded for user processes that ended by
        themselves (task id -> code), where the AM can read them; empty elsewhere."""
        return {}


class Backend(ABC):
    """Client-side access to a cluster."""

    name: str

    @abstractmethod
    def check_fits(self, spec: JobSpec) -> object:
        """Raises :class:`NeverFits`, naming the key to change, when the cluster could never hold
        the job's gang at once; what the check learned of the cluster otherwise. Submitting checks
        first; a validator may check without submitting."""

    @abstractmethod
    def submit(self, spec: JobSpec) -> str:
        """Checks the request fits, stages files, starts the AM; returns the application id."""

    @abstractmethod
    def endpoint(self, app_id: str) -> AMEndpoint | None:
        """Where the application's AM listens, or None before it is up / after it is gone."""

    def am_gone(self, app_id: str) -> bool:
        """Whether the application's AM has finished: unregistered, and (where the backend can tell)
        its process ended. A final job whose AM is gone has nothing of it left running."""
        return self.endpoint(app_id) is None

    @abstractmethod
    def stored_status(self, app_id: str) -> JobStatus:
        """The last status the AM persisted (or what the cluster knows once the AM is gone).
        Raises :class:`~tony_workflow.errors.UnknownApplication` for an application the cluster
        does not know."""

    def check_exists(self, app_id: str) -> None:
        """Raises :class:`~tony_workflow.errors.UnknownApplication` for an application the cluster
        does not know (or this user may not view), at the least cost the cluster allows; here,
        by reading its status."""
        self.stored_status(app_id)

    @abstractmethod
    def force_kill(self, app_id: str) -> None:
        """Kills the application without the AM's help."""

    @abstractmethod
    def logs(self, app_id: str, task: str | None = None, *, status: JobStatus | None = None,
             into: Path | None = None) -> dict[str, Path]:
        """Log files by name (``worker:0/stdout``, ``am/stderr`` ...) of ``task``, or of every task
        and the AM. ``status`` is the job's, when the caller has it; a backend that must copy the
        files from elsewhere (YARN's NodeManagers, HDFS) writes them under ``into``."""

    def read_output(self, app_id: str, container: str, stream: str, where: str | None, offset: int,
                    limit: int) -> tuple[bytes, int | None] | None:
        """Up to ``limit`` bytes from ``offset`` of what a task's container wrote to ``stream``
        (``stdout``, ``stderr``), with the file's size then when known; None when it cannot be
        read now (not written yet, its node not answering). ``where`` is the task's log link."""
        return None

    @abstractmethod
    def list_applications(self) -> list[str]:
        """Known application ids, newest last."""

    def tags(self, app_id: str) -> list[str]:
        """The application's tags as YARN keeps them (lowercased): TonY's, the user's
        (``tony.application.tags``) and the context's."""
        return []

    def running_with(self, identity_tag: str, spec: JobSpec | None = None) -> list[str]:
        """The applications not yet final that carry ``identity_tag``
        (:func:`tony_workflow.context.identity_tag`) and that the user this client submits
        ``spec`` as submitted (:meth:`submitted_as_me`), newest last: what a workflow task run
        submitted before, and that still runs."""
        found = []
        for app_id in self.list_applications():
            if identity_tag.lower() not in self.tags(app_id) or not self.submitted_as_me(app_id, spec):
                continue
            try:
                status = self.stored_status(app_id)
            except UnknownApplication:
                continue
            if not status.is_final:
                found.append(app_id)
        return found

    def kills_through_cluster(self, app_id: str) -> bool:
        """Whether a kill of the application must go through the cluster, which checks who may
        (YARN's modify ACL), rather than through the AM, which cannot tell who asks."""
        return False

    def submitted_as_me(self, app_id: str, spec: JobSpec | None = None) -> bool:
        """Whether the application was submitted by the user this client would submit ``spec`` as."""
        return True

    def store_options(self) -> dict[str, Any]:
        """How this backend's client reaches the cluster's files (the job history, a job's final
        status): :func:`~tony_workflow.storage.open_storage`'s keyword arguments."""
        return {}


def raised_to_minimum(spec: JobSpec, minimum_mb: int, cluster_key: str) -> JobSpec:
    """``spec`` with every container asking for at least ``minimum_mb``, as a scheduler raises a
    smaller request to its minimum allocation (named ``cluster_key``), each raise said (a warning
    of ``tony.ship``, which the front ends show): the job then sees the memory it is given (its
    limit, its records), not what it asked for."""
    raised = {}
    sizes = {f"tony.{t}.memory": task.resources.memory_mb for t, task in spec.tasks.items()}
    for key, size in {**sizes, "tony.am.memory": spec.am.memory_mb}.items():
        if size < minimum_mb:
            raised[key] = f"{minimum_mb}m"
            logging.getLogger("tony.ship").warning(
                "%s: %d MB is below the cluster's minimum allocation, %d MB (%s): the container is given %d MB",
                spec.display(key), size, minimum_mb, cluster_key, minimum_mb)
    return dataclasses.replace(spec, conf={**spec.conf, **raised}) if raised else spec
