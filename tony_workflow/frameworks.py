"""One env builder per framework: what the user process needs to find its peers.

Every builder takes the same :class:`TaskContext` and returns the variables to add. Adding a
framework means adding one function to ``BUILDERS``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["TaskContext", "build_env", "BUILDERS", "tf_config"]


@dataclass
class TaskContext:
    """Where one task stands in the job.

    ``cluster`` maps every task type (sidecars included) to its ``host:port`` list, in index order.
    ``monitored`` counts the tasks that decide completion (TonY's ``TASK_NUM``).
    """

    framework: str
    cluster: dict[str, list[str]]
    task_type: str
    index: int
    is_chief: bool
    sidecar_types: list[str] = field(default_factory=list)
    monitored: int = 0


def tf_config(ctx: TaskContext) -> dict:
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
    return [t for t in ("chief", "master", "worker") if ctx.cluster.get(t)]


def _pytorch(ctx: TaskContext) -> dict[str, str]:
    env = _common(ctx)
    order = _rank_order(ctx)
    # Global rank: chief/master first, then workers, matching torch.distributed's rank-0 master.
    rank, world = 0, sum(len(ctx.cluster[t]) for t in order)
    for t in order:
        if t == ctx.task_type:
            rank += ctx.index
            break
        rank += len(ctx.cluster[t])
    master = _first(ctx, *order)
    if master:
        env["MASTER_ADDR"], env["MASTER_PORT"] = master
        env["INIT_METHOD"] = f"tcp://{master[0]}:{master[1]}"
    env.update({"RANK": str(rank), "WORLD_SIZE": str(world), "WORLD": str(world), "LOCAL_RANK": "0"})
    return env


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
            "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo",
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


def build_env(ctx: TaskContext) -> dict[str, str]:
    """The framework variables for one task. Unknown frameworks are refused by spec validation."""
    return BUILDERS[ctx.framework](ctx)
