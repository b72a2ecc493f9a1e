"""One env builder per framework: what the user process needs to find its peers.

Every builder takes the same :class:`TaskContext` and returns the variables to add. Adding a
framework means adding one function to ``BUILDERS``. A framework whose own launcher must start the
user's command (PyTorch's elastic agent, for several processes per container) adds one function to
``LAUNCHERS`` too: it wraps the command.
"""
from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

__all__ = [
    "BUILDERS",
    "CAVEATS",
    "IN_PLACE_VARIABLES",
    "LAUNCHERS",
    "PLACE_VARIABLES",
    "RANKED_TYPES",
    "TaskContext",
    "build_env",
    "in_place_env",
    "launch_command",
    "tf_config",
]

#: The task types a PyTorch or JAX job ranks, in rank order: the chief (or master) is rank 0.
RANKED_TYPES = ("chief", "master", "worker")


@dataclass
class TaskContext:
    """Where one task stands in the job.

    ``cluster`` maps every task type (sidecars included) to its ``host:port`` list, in index order.
    ``monitored`` counts the tasks that decide completion (TonY's ``TASK_NUM``). ``processes``
    maps a type to how many processes of its command each container runs (absent: 1), and
    ``agent`` says whether the ranked tasks run under the framework's launcher (PyTorch: when any
    type runs more than one, or the job is elastic). An elastic job's ``elastic`` is set: its
    ranked containers (nodes) as (fewest, most), and ``rendezvous`` the AM's address, ``run_id``
    the session's rendezvous, ``max_restarts`` how often an agent may restart its workers,
    ``join_timeout_s`` how long it waits for a round, ``host`` this container's address.
    """

    framework: str
    cluster: dict[str, list[str]]
    task_type: str
    index: int
    is_chief: bool
    sidecar_types: list[str] = field(default_factory=list)
    monitored: int = 0
    processes: dict[str, int] = field(default_factory=dict)
    agent: bool = False
    elastic: tuple[int, int] | None = None
    rendezvous: str = ""
    run_id: str = ""
    max_restarts: int = 0
    join_timeout_s: int = 600
    host: str = ""


class _TFTask(TypedDict):
    type: str
    index: int


class _TFConfig(TypedDict):
    """TF_CONFIG: the cluster TensorFlow sees, and this task's place in it."""

    cluster: dict[str, list[str]]
    task: _TFTask


def tf_config(ctx: TaskContext) -> _TFConfig:
    # TensorFlow must not see sidecars (they are no servers), nor an evaluator unless it is one:
    # an evaluator in the cluster makes workers wait for it in collective ops.
    cluster = {t: list(a) for t, a in ctx.cluster.items()
               if t not in ctx.sidecar_types and (t != "evaluator" or ctx.task_type == "evaluator")}
    return {"cluster": cluster, "task": {"type": ctx.task_type, "index": ctx.index}}


def _common(ctx: TaskContext) -> dict[str, str]:
    env = {
        "JOB_NAME": ctx.task_type,
        "TASK_INDEX": str(ctx.index),
        "TASK_NUM": str(ctx.monitored),
        "DISTRIBUTED_MODE": "GANG",
        "CLUSTER_SPEC": json.dumps(ctx.cluster, separators=(",", ":")),
    }
    if ctx.is_chief:
        env["IS_CHIEF"] = "true"
    return env


def _tensorflow(ctx: TaskContext) -> dict[str, str]:
    env = _common(ctx)
    env["TF_CONFIG"] = json.dumps(tf_config(ctx), separators=(",", ":"))
    return env


def _first(ctx: TaskContext, *types: str) -> tuple[str, str] | None:
    for t in types:
        if ctx.cluster.get(t):
            host, _, port = ctx.cluster[t][0].rpartition(":")
            return host, port
    return None


def _rank_order(ctx: TaskContext) -> list[str]:
    return [t for t in RANKED_TYPES if ctx.cluster.get(t)]


def _containers_before(ctx: TaskContext, order: list[str]) -> list[str]:
    """The ranked types of the containers before this task's, one entry per container."""
    before: list[str] = []
    for t in order:
        if t == ctx.task_type:
            return before + [t] * ctx.index
        before += [t] * len(ctx.cluster[t])
    return before


def _pytorch(ctx: TaskContext) -> dict[str, str]:
    """torchrun's variables, for a container that is one node of ``torchrun --nnodes``: the chief
    (or master) is node 0, then the workers; each node runs ``processes`` ranks (its local world),
    numbered after the ranks of the nodes before it. With one process per container the user
    process gets them as they are; under the agent (several processes), torch's agent gives each
    process its own RANK, LOCAL_RANK and WORLD_SIZE, the same numbers."""
    env = _common(ctx)
    order = _rank_order(ctx)
    if ctx.task_type not in order:  # a type outside the ranks (a sidecar, say) only learns where the master is
        order_world = 0
        node = rank = None
    else:
        before = _containers_before(ctx, order)
        node, rank = len(before), sum(ctx.processes.get(t, 1) for t in before)
        order_world = sum(len(ctx.cluster[t]) * ctx.processes.get(t, 1) for t in order)
    master = _first(ctx, *order)
    if master:
        env["MASTER_ADDR"], env["MASTER_PORT"] = master
        env["INIT_METHOD"] = f"tcp://{master[0]}:{master[1]}"
    nodes = sum(len(ctx.cluster[t]) for t in order)
    local = ctx.processes.get(ctx.task_type, 1)
    env.update({"WORLD_SIZE": str(order_world), "WORLD": str(order_world), "GROUP_WORLD_SIZE": str(nodes)})
    if node is not None:
        env.update({"RANK": str(rank), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": str(local),
                    "GROUP_RANK": str(node), "NODE_RANK": str(node), "ROLE_RANK": str(rank),
                    "ROLE_WORLD_SIZE": str(order_world)})
    return env


def _torchrun(ctx: TaskContext, command: str, python: str) -> str:
    """The command under torch's elastic agent: this container is node GROUP_RANK of a static
    rendezvous at the chief's address (the chief's agent serves it on the chief's reserved port),
    running ``processes`` copies of the user's command with torchrun's variables. The agent does not
    restart anything (``--max-restarts 0``): a failed process fails the task, and the AM's rules
    decide what follows, as for any task."""
    order = _rank_order(ctx)
    master = _first(ctx, *order)
    if ctx.task_type not in order or master is None:
        return command
    if ctx.elastic:
        return _elastic_torchrun(ctx, command, python)
    nodes = sum(len(ctx.cluster[t]) for t in order)
    argv = [python, "-m", "torch.distributed.run", "--nnodes", str(nodes),
            "--node-rank", str(len(_containers_before(ctx, order))),
            "--nproc-per-node", str(ctx.processes.get(ctx.task_type, 1)),
            "--master-addr", master[0], "--master-port", master[1],
            "--max-restarts", "0", "--monitor-interval", "0.5", "--no-python", "bash", "-c", command]
    return shlex.join(argv)


#: The directory tony_workflow is imported from: the elastic agent imports it with the job's
#: interpreter, which need not have it installed.
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
#: How the agents of an elastic job rendezvous: a node's keep-alive every second, missed three
#: times before it is dropped from the round; a round closes one second after it has enough nodes.
ELASTIC_RDZV_CONF = "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3,close_timeout=10"


def _elastic_torchrun(ctx: TaskContext, command: str, python: str) -> str:
    """An elastic job's command: torch's agent (:mod:`tony_workflow.task.torch_agent`) in a dynamic
    rendezvous kept by the AM, between ``elastic`` nodes; its workers' ranks and world change with
    the group, and it restarts them (the group re-forms) up to ``max_restarts`` times."""
    assert ctx.elastic is not None
    lo, hi = ctx.elastic
    boot = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
            "from tony_workflow.task.torch_agent import main; main()")
    argv = [python, "-c", boot, _PACKAGE_ROOT, "--nnodes", f"{lo}:{hi}",
            "--nproc-per-node", str(ctx.processes.get(ctx.task_type, 1)),
            "--rdzv-backend", "tony", "--rdzv-endpoint", ctx.rendezvous, "--rdzv-id", ctx.run_id,
            "--rdzv-conf", f"join_timeout={ctx.join_timeout_s},{ELASTIC_RDZV_CONF}",
            "--max-restarts", str(ctx.max_restarts), "--monitor-interval", "0.5"]
    if ctx.host:
        argv += ["--local-addr", ctx.host]
    return shlex.join([*argv, "--no-python", "bash", "-c", command])


#: torchrun's variables that say a process's place in a group; a trainer regrouping in place
#: learns its place from each generation instead (:mod:`tony_workflow.torch_elastic`).
PLACE_VARIABLES = ("RANK", "WORLD_SIZE", "WORLD", "GROUP_RANK", "NODE_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE",
                   "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "INIT_METHOD")
#: The variables of a trainer regrouping in place.
IN_PLACE_VARIABLES = ("TONY_ELASTIC_REGROUP", "TONY_ELASTIC_ENDPOINT", "TONY_ELASTIC_RUN_ID", "TONY_ELASTIC_TOKEN",
                      "TONY_ELASTIC_MIN", "TONY_ELASTIC_MAX", "TONY_ELASTIC_HOST")


def in_place_env(env: dict[str, str], ctx: TaskContext, token: str) -> None:
    """Makes ``env`` (a ranked task's) that of a trainer regrouping in place: no place (no RANK,
    WORLD_SIZE, MASTER_ADDR: a script that does not train through
    :func:`tony_workflow.torch_elastic.run` must not train alone unnoticed, see that module); the
    AM's address and the group token, the session's rendezvous, the group's bounds; and, for an
    interpreter that does not have it installed, the directory tony_workflow is imported from,
    after the script's own path."""
    assert ctx.elastic is not None
    lo, hi = ctx.elastic
    for name in PLACE_VARIABLES:
        env.pop(name, None)
    env.update({"TONY_ELASTIC_REGROUP": "in-place", "TONY_ELASTIC_ENDPOINT": ctx.rendezvous,
                "TONY_ELASTIC_RUN_ID": ctx.run_id, "TONY_ELASTIC_TOKEN": token, "TONY_ELASTIC_MIN": str(lo),
                "TONY_ELASTIC_MAX": str(hi), "TONY_ELASTIC_HOST": ctx.host, "LOCAL_RANK": "0",
                "LOCAL_WORLD_SIZE": "1"})
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if _PACKAGE_ROOT not in path:
        env["PYTHONPATH"] = os.pathsep.join([*path, _PACKAGE_ROOT])


def _horovod(ctx: TaskContext) -> dict[str, str]:
    env = _common(ctx)
    workers = ctx.cluster.get("worker", [])
    hosts = [a.rpartition(":")[0] for a in workers]
    if ctx.task_type == "worker" and workers:
        host = hosts[ctx.index]
        same_host = [i for i, h in enumerate(hosts) if h == host]
        distinct = list(dict.fromkeys(hosts))
        rdv = _first(ctx, "driver", "chief") or (hosts[0], workers[0].rpartition(":")[2])
        env.update({
            "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo", "HOROVOD_GLOO_TIMEOUT_SECONDS": "2000",
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": rdv[0], "HOROVOD_GLOO_RENDEZVOUS_PORT": rdv[1],
            "HOROVOD_RANK": str(ctx.index), "HOROVOD_SIZE": str(len(workers)),
            "HOROVOD_LOCAL_RANK": str(same_host.index(ctx.index)), "HOROVOD_LOCAL_SIZE": str(len(same_host)),
            "HOROVOD_CROSS_RANK": str(distinct.index(host)), "HOROVOD_CROSS_SIZE": str(len(distinct)),
            "HOROVOD_HOSTNAME": host,
        })
    return env


def _mxnet(ctx: TaskContext) -> dict[str, str]:
    env = _common(ctx)
    env["DMLC_ROLE"] = ctx.task_type
    root = _first(ctx, "scheduler")
    if root:
        env["DMLC_PS_ROOT_URI"], env["DMLC_PS_ROOT_PORT"] = root
    env["DMLC_NUM_SERVER"] = str(len(ctx.cluster.get("server", [])))
    env["DMLC_NUM_WORKER"] = str(len(ctx.cluster.get("worker", [])))
    env["DMLC_LOCAL"] = "0"
    return env


def _jax(ctx: TaskContext) -> dict[str, str]:
    env = _common(ctx)
    order = _rank_order(ctx)
    coord = _first(ctx, *order)
    pid = 0
    for t in order:
        if t == ctx.task_type:
            pid += ctx.index
            break
        pid += len(ctx.cluster[t])
    if coord:
        env["JAX_COORDINATOR_ADDRESS"] = f"{coord[0]}:{coord[1]}"
    env["JAX_NUM_PROCESSES"] = str(sum(len(ctx.cluster[t]) for t in order))
    env["JAX_PROCESS_ID"] = str(pid)
    return env


def _standalone(ctx: TaskContext) -> dict[str, str]:
    env = {"JOB_NAME": ctx.task_type, "TASK_INDEX": str(ctx.index), "TASK_NUM": str(ctx.monitored)}
    if ctx.is_chief:
        env["IS_CHIEF"] = "true"
    return env


BUILDERS: dict[str, Callable[[TaskContext], dict[str, str]]] = {
    "tensorflow": _tensorflow,
    "pytorch": _pytorch,
    "horovod": _horovod,
    "mxnet": _mxnet,
    "jax": _jax,
    "standalone": _standalone,
}


#: Launchers that start the user's command for a framework: ``(ctx, command, python) -> command``.
#: Used only when the context says so (``agent``).
LAUNCHERS: dict[str, Callable[[TaskContext, str, str], str]] = {
    "pytorch": _torchrun,
}


#: What a job of these frameworks must know before it runs: their libraries are retired and cannot
#: be installed beside this project's, so the runtime gives them their variables but proves nothing
#: of them. Every job of the framework shows the caveat with its status.
CAVEATS: dict[str, str] = {
    "horovod": ("framework horovod: Horovod's last release (0.28.1, 2023) does not build against this project's "
                "torch (whose headers need C++20) or TensorFlow (whose wheel lacks the headers Horovod's XLA "
                "operations include), so tony-workflow has not run Horovod itself: the job's own environment "
                "(python_venv) must bring a Horovod that works, in which its driver task starts Horovod's "
                "rendezvous server; tony.horovod.mode.test tries the job without one"),
    "mxnet": ("framework mxnet: MXNet is retired upstream (1.9.1, 2022) and needs numpy < 1.24, which this "
              "project's TensorFlow and JAX do not allow: run the job with a python_venv of MXNet's own "
              "(`make mxnet` builds one, .venv-mxnet); tony-workflow sets its DMLC_* variables"),
}


#: The math libraries' thread pools (OpenMP: PyTorch's CPU operators, OpenBLAS and MKL under NumPy)
#: size themselves to every core of the machine, whatever the container asked for. Several tasks on
#: a node then run several times more threads than cores, and the spinning threads cost more than
#: they compute. Each process of a task gets its share of the container's vcores instead (as
#: torchrun, PySpark and Ray do), unless the job or its environment already says.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def thread_env(vcores: int, processes: int, env: Mapping[str, str]) -> dict[str, str]:
    """The thread limits for a process of a task of ``vcores`` running ``processes`` processes,
    for each of :data:`THREAD_VARIABLES` that ``env`` (what the task would otherwise get) lacks."""
    share = str(max(1, vcores // max(1, processes)))
    return {name: share for name in THREAD_VARIABLES if not env.get(name)}


def build_env(ctx: TaskContext) -> dict[str, str]:
    """The framework variables for one task. Unknown frameworks are refused by spec validation."""
    return BUILDERS[ctx.framework](ctx)


def launch_command(ctx: TaskContext, command: str, python: str) -> str:
    """The command the executor runs for ``command``: wrapped by the framework's launcher when the
    job runs its tasks under one, else as it is. ``python`` is the job's interpreter."""
    launcher = LAUNCHERS.get(ctx.framework)
    return launcher(ctx, command, python) if launcher and ctx.agent else command
