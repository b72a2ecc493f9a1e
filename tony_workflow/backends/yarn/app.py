"""A job's skein application, built from the job's spec and what the client decided: a pure
function, tested without a cluster.

The client (:mod:`.client`) logs in, checks that the gang can ever be placed, decides how the gang is
asked for (:mod:`.start`), ships what the containers need (:mod:`.ship`,
:mod:`.runtime`), and hands all that to :func:`application`, which lays out the services:
``tony-am`` (the supervisor and its AM attempts), one ``tony-<type>`` per task type (one more per
node a spread type may use), and skein's master, whose script waits for the job's turn (the gate)
unless the whole gang is asked for as the application starts.

Every container's script starts the same way (:func:`prelude`): the Hadoop configuration shipped
with the job, the spec written out of the environment, and the runtime's path, then
``exec <interpreter> -m tony_workflow...``: the node's base Python with the runtime shipped, or
the interpreter ``tony.yarn.python`` names on clusters whose nodes have this project installed.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...protocol import ENVIRONMENT_ENV, RESOURCES_ENV, RUNTIME_ENV
from .attempts import am_restarts
from .containers import (
    AM_SERVICE,
    ASKED_ENV,
    HISTORY_ENV,
    MASTER_JAVA_OPTIONS,
    MASTER_MEMORY_MB,
    MASTER_VCORES,
    encode_asked,
    service_name,
)
from .runtime import RUNTIME_DIR, runtime_path
from .ship import SPEC_ENV
from .spread import SPREAD_ENV, encode_hosts, spread_service

__all__ = ["Shipment", "application", "prelude"]



@dataclass
class Shipment:
    """What the containers get: skein ``File`` objects by name (``runtime``, the environment's
    parts, ``hadoop-conf``, ``src``, ``venv``, ``spec.json``), the spec's environment variable (None: it
    goes as ``spec.json``), the interpreter, and skein's credentials (None: skein's own)."""

    python: str
    files: dict[str, Any] = field(default_factory=dict)
    spec_env: dict[str, str] | None = None
    security: Any = None
    #: TonY's resources by name: None's every container's (the AM's too), a task type's its own.
    resources: dict[str | None, dict[str, Any]] = field(default_factory=dict)
    #: The names (in ``files``) of the job's environment's parts, in the order they are joined.
    environment: list[str] = field(default_factory=list)

    def resources_of(self, task_type: str | None) -> dict[str, Any]:
        """The resources a container of ``task_type`` (None: the AM) gets: its type's over every container's."""
        return {**self.resources.get(None, {}), **(self.resources.get(task_type, {}) if task_type else {})}

    @property
    def runtime(self) -> bool:
        return RUNTIME_DIR in self.files

    def common(self) -> dict[str, Any]:
        """What every container of the job gets."""
        return {k: v for k, v in self.files.items() if k in ("hadoop-conf", "spec.json", RUNTIME_DIR)}

    def for_tasks(self) -> dict[str, Any]:
        """What task containers get besides: the user's source and environment."""
        return {k: v for k, v in self.files.items() if k in ("src", "venv", *self.environment)}


def prelude(shipment: Shipment) -> str:
    """The start of every container's script: its output to YARN's ``stdout`` and ``stderr`` in
    the container's log directory (what NodeManagers serve and ``tony logs`` reads, as TonY's
    containers write them), the Hadoop configuration shipped as ``hadoop-conf``, the spec written
    out of the environment (then dropped from it, so that no task's process inherits it), and the
    runtime on the path."""
    out = ('if [ -n "${LOG_DIRS:-}" ]; then exec >>"${LOG_DIRS%%,*}/stdout" 2>>"${LOG_DIRS%%,*}/stderr"; fi; '
           'export HADOOP_CONF_DIR="$PWD/hadoop-conf"; ')
    if shipment.spec_env is not None:
        out += f'printf %s "${SPEC_ENV}" | base64 -d | gzip -dc > spec.json && unset {SPEC_ENV} && '
    if shipment.runtime:
        out += f'export PYTHONPATH="{runtime_path("$PWD")}" {RUNTIME_ENV}="$PWD/{RUNTIME_DIR}"; '
    if shipment.environment:
        out += f'export {ENVIRONMENT_ENV}="{":".join(f"$PWD/{name}" for name in shipment.environment)}"; '
    return out


def application(spec: Any, shipment: Shipment, *, tags: list[str], at_start: list[str],
                spread: Mapping[str, list[str]], docker_env: Any, secure: bool = False,
                submitter: str | None = None, history: str | None = None) -> Any:
    """The skein ``ApplicationSpec`` of ``spec``: ``at_start`` names the tasks skein's master asks
    for as the application starts (none: the gate asks when the job's turn comes), ``spread`` the
    hosts of each spread type's services, ``docker_env(image)`` the variables of a container's
    image, ``tags`` the application's tags, ``secure`` whether the cluster uses Kerberos and
    ``submitter`` the user who submits it (:func:`acls`), ``history`` the history server the
    client is configured with. A job with tony.application.proxy-user runs as that user."""
    import skein

    python, head = shipment.python, prelude(shipment)
    base_env = {"TONY_BACKEND": "yarn", "PYTHONUNBUFFERED": "1", **(shipment.spec_env or {})}
    am_env = {**base_env, **docker_env(spec.docker_image("am"))}
    single = spec.single_node  # its command runs in the AM's container, which gets what a task's would
    if single:
        am_env.update({"TONY_WORKDIR": "src" if spec.src_dir else ".",
                       RESOURCES_ENV: ",".join(sorted(shipment.resources_of(None)))})
    if at_start:
        am_env[ASKED_ENV] = encode_asked(at_start)
    if history:  # the job's page there becomes its tracking URL once it ends (yarn/am.py)
        am_env[HISTORY_ENV] = history
    if spread:
        am_env[SPREAD_ENV] = encode_hosts(dict(spread))
    started = {t: sum(1 for a in at_start if a.startswith(f"{t}:")) for t in spec.tasks}
    services = {}
    for ttype, task in spec.tasks.items():
        def task_service(task: Any = task, instances: int = 0, **locality: Any) -> Any:
            return skein.Service(
                resources=skein.Resources(memory=task.resources.memory_mb, vcores=task.resources.vcores,
                                          gpus=task.resources.gpus),
                # The executor; a container asked for before the AM ran learns its task first (yarn/boot.py).
                script=(f'{head}if [ -n "${{TONY_TASK_ID:-}}" ]; then exec {python} -m tony_workflow.task.executor; '
                        f"fi; exec {python} -m tony_workflow.backends.yarn.boot"),
                files={**shipment.resources_of(task.type), **shipment.common(), **shipment.for_tasks()},
                env={**base_env, "TONY_WORKDIR": "src" if spec.src_dir else ".", **docker_env(task.docker_image),
                     RESOURCES_ENV: ",".join(sorted(shipment.resources_of(task.type)))},
                instances=instances, max_restarts=0,
                # The AM decides what a failed task means; skein must not fail the application.
                allow_failures=True, node_label=task.node_label or "", **locality)
        services[service_name(ttype)] = task_service(instances=started[ttype])
        for k, host in enumerate(spread.get(ttype) or []):  # one service per node the type may use
            services[spread_service(ttype, k)] = task_service(nodes=[host], relax_locality=False)
    services[AM_SERVICE] = skein.Service(
        resources=skein.Resources(memory=spec.am.memory_mb, vcores=spec.am.vcores, gpus=spec.am.gpus),
        # The supervisor runs the AM's attempts in this container (tony_workflow.am.supervisor).
        script=f"{head}exec {python} -m tony_workflow.am.supervisor --backend yarn --app-dir .",
        files={**shipment.resources_of(None), **shipment.common(), **(shipment.for_tasks() if single else {})},
        env=am_env, node_label=spec.am_node_label or "",
        # A container lost whole (its node) is started again elsewhere (yarn/attempts.py).
        max_restarts=am_restarts(spec.am_max_attempts, spec.reclaim_retry_count),
        # Asked for as the application starts, or by the gate once the job's turn has come (yarn/gate.py).
        instances=1 if at_start else 0)
    # skein ends the application when the master's script ends: after the gate it sleeps, and the
    # AM ends the application. A gate that cannot start fails the job at once.
    gate = "" if at_start else f"{head}{python} -m tony_workflow.backends.yarn.gate --app-dir . && "
    master = skein.Master(resources=skein.Resources(memory=MASTER_MEMORY_MB, vcores=MASTER_VCORES),
                          script=f"{gate}exec sleep 2147483647", files=shipment.common() if not at_start else {},
                          env={**(base_env if not at_start else {}), "JAVA_TOOL_OPTIONS": MASTER_JAVA_OPTIONS},
                          security=shipment.security)
    return skein.ApplicationSpec(name=spec.name, queue=spec.queue or "default", services=services, master=master,
                                 tags=set(tags), max_attempts=1, node_label=spec.node_label or "",
                                 acls=acls(spec, secure, submitter), user=spec.proxy_user or "")


def acls(spec: Any, secure: bool = True, submitter: str | None = None) -> Any:
    """The application's access control lists: always enforced (where the cluster enables ACLs,
    ``yarn.acl.enable``), the owner and the cluster's administrators always in them, anyone else
    only as tony.application.view-acls (status, logs, and the pages skein's web UI serves through
    the ResourceManager's proxy, which take users, not groups) and tony.application.modify-acls
    (killing it) name them. A cluster without Kerberos (``secure`` false) cannot tell who asks
    for the pages: they stay open to all, as its web servers are. A job run as its proxy user
    names the user who submitted it (``submitter``) in both lists, so that the service which
    submits for others may follow and stop what it submitted."""
    import skein

    (view_users, view_groups), (modify_users, modify_groups) = spec.view_acls, spec.modify_acls
    if spec.proxy_user and submitter and submitter != spec.proxy_user and "*" not in modify_users:
        modify_users = (*modify_users, submitter)
    # Who may kill a job may see it too.
    viewers = list(dict.fromkeys((*view_users, *modify_users)))
    viewer_groups = list(dict.fromkeys((*view_groups, *modify_groups)))
    if "*" in viewers:
        viewers, viewer_groups = ["*"], []
    return skein.ACLs(enable=True, view_users=viewers, view_groups=viewer_groups,
                      modify_users=list(modify_users), modify_groups=list(modify_groups),
                      ui_users=viewers if secure else ["*"])
