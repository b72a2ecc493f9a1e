"""The TonY configuration keys this project knows, with their defaults.

TonY's own keys carry TonY's names and defaults (``tony-default.xml``); this project's additions
are listed in :data:`PROJECT_DEFAULTS` with what each one means, and the local cluster's own
settings (which no job may set) in :data:`LOCAL_CLUSTER_DEFAULTS`. Everything here is data: the
value parsers are in :mod:`.values`, the checks in :mod:`.validation`.
"""
from __future__ import annotations

import re

__all__ = [
    "BOOL_KEYS",
    "FRAMEWORKS",
    "INT_KEYS",
    "INT_MINIMUMS",
    "LOCAL_CLUSTER_DEFAULTS",
    "LOCAL_KEY_REASON",
    "MULTI_VALUE_KEYS",
    "OTHER_TONY_KEYS",
    "PROJECT_DEFAULTS",
    "RESERVED_TYPES",
    "RESTART_POLICIES",
    "TASK_DEFAULTS",
    "TASK_FIELDS",
    "TONY_DEFAULTS",
    "TONY_XML_DEFAULTS",
    "known_keys",
    "task_key",
    "unknown_key",
]

# Every key and default of TonY's tony-default.xml, as Hadoop's Configuration reads it (a property
# without a value reads as ""). A test compares this with the file itself.
TONY_XML_DEFAULTS: dict[str, str] = {
    "tony.other.namenodes": "",
    "tony.yarn.queue": "default",
    "tony.application.name": "TensorFlowApplication",
    "tony.application.type": "TONY",
    "tony.application.tags": "",
    "tony.application.node-label": "",
    "tony.application.enable-preprocess": "false",
    "tony.application.timeout": "0",
    "tony.am.startup-timeout": "0",
    "tony.application.framework": "tensorflow",
    "tony.application.num-client-rm-connect-retries": "3",
    "tony.application.distributed-mode": "GANG",
    "tony.task.max-total-instances": "-1",
    "tony.task.max-total-gpus": "-1",
    "tony.task.am.jvm.opts": "",
    "tony.task.executor.jvm.opts": "-Xmx1536m",
    "tony.task.heartbeat-interval-ms": "1000",
    "tony.task.max-missed-heartbeats": "25",
    "tony.task.metrics-interval-ms": "5000",
    "tony.task.gpu-metrics.enabled": "true",
    "tony.task.executor.execution-timeout-ms": "0",
    "tony.task.executor.registry-timeout-sec": "0",
    "tony.am.retry-count": "0",
    "tony.am.memory": "2g",
    "tony.am.vcores": "1",
    "tony.am.gpus": "0",
    "tony.am.wait-client-signal-stop-timeout-sec": "15",
    "tony.ps.memory": "2g",
    "tony.ps.vcores": "1",
    "tony.container.allocation.timeout": "-1",
    "tony.container.registration.timeout": "-1",
    "tony.worker.memory": "2g",
    "tony.worker.vcores": "1",
    "tony.worker.gpus": "0",
    "tony.application.untracked.jobtypes": "ps",
    "tony.application.sidecar.jobtypes": "tensorboard",
    "tony.application.stop-on-failure-jobtypes": "ps",
    "tony.application.fail-on-worker-failure-enabled": "false",
    "tony.docker.enabled": "false",
    "tony.application.security.enabled": "true",
    "tony.application.hdfs-conf-path": "",
    "tony.application.yarn-conf-path": "",
    "tony.application.mapred-conf-path": "",
    "tony.portal.url": "https://localhost:19886",
    "tony.history.location": "/path/to/tony-history",
    "tony.history.intermediate": "/path/to/tony-history/intermediate",
    "tony.history.finished": "/path/to/tony-history/finished",
    "tony.history.mover-interval-ms": "300000",
    "tony.history.retention-sec": "2592000",
    "tony.history.purger-interval-ms": "21600000",
    "tony.history.finished-dir-timezone": "UTC",
    "tony.portal.cache.max-entries": "10000",
    "tony.keytab.user": "user1",
    "tony.keytab.location": "/location/to/tony.keytab",
    "tony.https.port": "19886",
    "tony.https.keystore.path": "/location/to/tony.jks",
    "tony.https.keystore.type": "JKS",
    "tony.https.keystore.password": "password",
    "tony.https.keystore.algorithm": "SunX509",
    "tony.http.port": "disabled",
    "tony.secret.key": "changeme",
    "tony.horovod.mode.test.fast.fail": "false",
    "tony.horovod.mode.test": "false",
    "tony.horovod.driver.mode.debug": "false",
    "tony.task.executor.execution.error-message-max-depth": "20",
}

#: Keys of this project that TonY does not have, with their defaults.
#:
#: ``tony.task.tensorboard.enabled``
#:     Whether the chief gets a ``TB_PORT`` and the AM registers a TensorBoard URL.
#: ``tony.checkpoint.location``
#:     Where ``TONY_CHECKPOINT_DIR`` is mirrored to and restored from; empty: the job directory.
#: ``tony.task.heartbeat-timeout-ms``
#:     The AM declares a task lost after this long without a heartbeat, or after
#:     ``heartbeat-interval-ms × max-missed-heartbeats`` if that comes first; 0: only the latter, as
#:     in TonY. The executor's own patience with an unreachable AM stays at max-missed-heartbeats.
#: ``tony.yarn.python``
#:     The interpreter YARN containers start the AM and executors with; empty: the client's own
#:     (right when every node has the same installation at the same path).
#: ``tony.checkpoint.on-store-failure``
#:     What a failing checkpoint store does to the job: ``warn`` (training goes on; the failure is
#:     shown in the status, the events and the workflow logs) or ``fail`` (the job fails at once).
#: ``tony.am.max-attempts``
#:     How many times the ApplicationMaster is started when it dies or hangs (YARN's AM attempts);
#:     a later attempt starts a new session from the last checkpoint.
#: ``tony.am.liveness-timeout-ms``
#:     An ApplicationMaster that does not answer for this long is killed and replaced; executors
#:     that cannot reach their AM for this long stop their user processes.
#: ``tony.am.reclaim-retry-count``
#:     How many times tasks whose containers the cluster took back (preempted by the scheduler,
#:     lost with their node, on failed disks) are relaunched; these relaunches do not spend
#:     ``tony.am.retry-count``, which is for the job's own failures.
#: ``tony.application.priority``
#:     The YARN priority the application asks for (higher runs first within a queue); the cluster
#:     caps it at ``yarn.cluster.max-application-priority``. 0: the queue's default.
#: ``tony.docker.mounts``
#:     With ``tony.docker.enabled``, what every container mounts: comma-separated
#:     ``host path:container path:ro|rw`` entries (YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS).
#: ``tony.am.node-label``
#:     On YARN, the node label expression of the ApplicationMaster's container; empty: the
#:     application's (``tony.application.node-label``). A job whose AM must survive the loss of
#:     nodes that run its tasks can keep it on other machines.
#: ``tony.task.progress-timeout-ms``
#:     A task whose user code has reported progress (``tony_workflow.report``) and then reports none
#:     for this long is hung: it is LOST and the restart rules apply; 0: never.
#: ``tony.gang.hold-timeout-ms``
#:     How long a job may hold part of its gang (some containers granted, others not) before it
#:     gives back what it holds and asks again after a back-off, keeping its place in the queue;
#:     0: it holds on. Jobs wait their turn before asking, so this only ends a race with
#:     applications that are not TonY jobs.
#: ``tony.gang.backoff-ms``
#:     After a job gave back part of its gang, how long it waits before it asks again: a random
#:     time between half and one and a half times this, doubling with each give-back up to eight
#:     times, so that jobs never give back and ask again in step.
PROJECT_DEFAULTS: dict[str, str] = {
    "tony.gang.hold-timeout-ms": "60000",
    "tony.gang.backoff-ms": "5000",
    "tony.application.priority": "0",
    "tony.am.reclaim-retry-count": "10",
    "tony.am.node-label": "",
    "tony.docker.mounts": "",
    "tony.task.progress-timeout-ms": "0",
    "tony.checkpoint.on-store-failure": "warn",
    "tony.am.max-attempts": "2",
    "tony.am.liveness-timeout-ms": "30000",
    "tony.task.tensorboard.enabled": "true",
    "tony.checkpoint.location": "",
    "tony.task.heartbeat-timeout-ms": "8000",
    "tony.yarn.python": "",
}

#: The embedded local cluster's own settings, with their defaults. They are read from the site
#: configuration (``$TONY_CONF_DIR/tony-site.xml``) only; a job that sets one is refused.
#:
#: ``tony.local.memory``
#:     Memory the local cluster may hand out, in MB or as a memory string; empty: the machine's.
#: ``tony.local.vcores``
#:     Cores the local cluster may hand out; empty: the machine's.
#: ``tony.local.gpus``
#:     GPUs it may hand out: a count ("4") or an index list ("0,1,3"); empty: ask nvidia-smi.
#: ``tony.local.vcore-oversubscription``
#:     How many task vcores share one real core (a number >= 1).
#: ``tony.local.fork-server``
#:     Whether containers are forked from a pre-started server (fast) instead of each starting an
#:     interpreter.
#: ``tony.local.env-whitelist``
#:     The variables of the submitter's environment a local job's ApplicationMaster and tasks
#:     inherit (comma-separated names; ``NAME_*`` matches a prefix). Nothing else of the
#:     submitter's environment (an Airflow worker's connections, say) reaches a job: as on YARN,
#:     tasks start from the machine's basics plus what the job declares.
#: ``tony.local.retention-sec``
#:     How long the directory of a finished job (logs, events, source copies, the default
#:     checkpoint store) is kept; 0 keeps them all. ``tony clean`` removes them on demand.
LOCAL_CLUSTER_DEFAULTS: dict[str, str] = {
    "tony.local.memory": "",
    "tony.local.vcores": "",
    "tony.local.gpus": "",
    "tony.local.vcore-oversubscription": "4",
    "tony.local.fork-server": "true",
    "tony.local.env-whitelist": ("PATH,HOME,USER,LOGNAME,SHELL,LANG,LC_*,TZ,TMPDIR,TERM,TONY_*,JAVA_HOME,HADOOP_*,"
                                 "LD_LIBRARY_PATH,CUDA_*,NVIDIA_*,OPENBLAS_*,OMP_*,MKL_*"),
    "tony.local.retention-sec": str(7 * 86400),
}

#: The effective configuration before any file: TonY's defaults, then this project's.
TONY_DEFAULTS: dict[str, str] = {**TONY_XML_DEFAULTS, **PROJECT_DEFAULTS}

# What tony.<type>.<field> reads when neither the file nor TONY_DEFAULTS sets it (TonY's code
# defaults for memory/vcores/gpus; restart-policy, spread and processes are this project's own
# per-type keys: spread puts a type's tasks on distinct nodes of a YARN cluster where it can, and
# processes runs that many copies of a PyTorch task's command in each container, under torch's
# elastic agent).
TASK_DEFAULTS = {"memory": "2g", "vcores": "1", "gpus": "0", "restart-policy": "session", "timeout": "0",
                 "spread": "false", "processes": "1"}

FRAMEWORKS = ("tensorflow", "pytorch", "horovod", "mxnet", "jax", "standalone")

#: Keys whose ``--conf`` value is appended, comma-joined, to the existing one instead of replacing it.
#: TonY appends the first three; this project appends tags too.
MULTI_VALUE_KEYS = ("tony.containers.envs", "tony.execution.envs", "tony.containers.resources",
                    "tony.application.tags")

RESTART_POLICIES = ("session", "task")

TYPE_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
INSTANCES_KEY = re.compile(r"^tony\.(.+)\.instances$")

# Second segments of job-wide keys (tony.am.memory, tony.task.*, ...): a task type of that name
# would have its keys mixed up with them.
RESERVED_TYPES = frozenset({
    "am", "application", "task", "container", "containers", "docker", "execution", "history", "yarn",
    "http", "https", "keytab", "portal", "secret", "other", "version-info", "horovod", "local",
    "checkpoint", "python-exec-path", "gpu-exec-path", "gang",
})

# Typed checks of job-wide keys: every key whose default is a boolean must stay one, and every key
# whose default is an integer must stay one, with these lower bounds where TonY's meaning needs one.
# Container vcores/gpus are left to the per-type and AM checks, which know their bounds.
BOOL_KEYS = tuple(k for k, v in TONY_DEFAULTS.items() if v in ("true", "false"))
INT_MINIMUMS = {
    "tony.am.retry-count": 0,
    "tony.am.reclaim-retry-count": 0,
    "tony.am.max-attempts": 1,
    "tony.am.liveness-timeout-ms": 1000,
    "tony.task.heartbeat-timeout-ms": 0,
    "tony.task.progress-timeout-ms": 0,
    "tony.gang.hold-timeout-ms": 0,
    "tony.gang.backoff-ms": 0,
    "tony.task.metrics-interval-ms": 100,
    "tony.application.timeout": 0,
    "tony.application.priority": 0,
    "tony.task.heartbeat-interval-ms": 1,
    "tony.task.max-missed-heartbeats": 1,
    "tony.task.max-total-instances": -1,
    "tony.task.max-total-gpus": -1,
}
INT_KEYS = tuple(k for k, v in TONY_DEFAULTS.items()
                  if re.fullmatch(r"-?\d+", v) and k.rsplit(".", 1)[1] not in ("vcores", "gpus"))


#: TonY's keys that tony-default.xml does not list (its client and code read them), known so that
#: they are not taken for typos.
OTHER_TONY_KEYS = frozenset({
    "tony.containers.envs", "tony.execution.envs", "tony.containers.resources", "tony.containers.command",
    "tony.docker.containers.image", "tony.gpu-exec-path", "tony.python-exec-path", "tony.history.host",
    "tony.history.cache.max-entries", "tony.history.maxAppends", "tony.init.module",
    "tony.application.single-node", "tony.chief.name", "tony.chief.index", "tony.evaluator.run-alone.timeout",
    "tony.application.stop.on.failure.jobtypes", "tony.application.reserve.port.python.process.wait.seconds",
    "tony.application.docker.enabled", "tony.application.docker.image",
})

#: The settings every task type has: ``tony.<type>.<field>``.
TASK_FIELDS = ("instances", "max-instances", "memory", "vcores", "gpus", "command", "node-label",
               "restart-policy", "timeout", "resources", "spread", "processes")

_TASK_KEY = re.compile(r"^tony\.([a-z][a-z0-9_-]*)\.([a-z][a-z0-9_.-]*)$")
_DOCKER_IMAGE_KEY = re.compile(r"^tony\.docker\.([a-z][a-z0-9_-]*)\.image$")
_KEY_FAMILIES = (re.compile(r"^tony\.task\.max-total-[a-z][a-z0-9_-]*$"), re.compile(r"^tony\.version-info\.[^.]+$"))


#: Why a job may not set ``tony.local.*``.
LOCAL_KEY_REASON = ("is a setting of the local cluster, not of a job (a job cannot size the machine it runs on): "
                    "set it in $TONY_CONF_DIR/tony-site.xml")


def unknown_key(key: str, declared_types: set[str]) -> str | None:
    """Why ``key`` is not a key of TonY or of this project (None when it is one). ``declared_types``
    are the task types the configuration declares (a ``tony.<type>.instances`` key)."""
    if key in TONY_DEFAULTS or key in OTHER_TONY_KEYS or any(f.match(key) for f in _KEY_FAMILIES):
        return None
    if key.startswith("tony.local."):
        return LOCAL_KEY_REASON
    if not key.startswith("tony."):
        return "is not a TonY key (they start with 'tony.'); keys of other systems do not belong in a job's configuration"
    docker = _DOCKER_IMAGE_KEY.match(key)
    if docker and (docker.group(1) in declared_types or docker.group(1) == "am"):
        return None
    match = _TASK_KEY.match(key)
    if match and match.group(1) not in RESERVED_TYPES:
        task_type, field = match.groups()
        if field not in TASK_FIELDS:
            return f"is not a setting of a task type; a type's settings are {', '.join(TASK_FIELDS)}"
        if task_type not in declared_types:
            return (f"sets task type '{task_type}', which no tony.{task_type}.instances declares; "
                    "declare it, or fix the type's name")
        return None
    return "is not a key of TonY or of tony-workflow"


def known_keys(declared_types: set[str]) -> list[str]:
    """Every key a configuration with these task types may set, for 'did you mean'."""
    keys = set(TONY_DEFAULTS) | OTHER_TONY_KEYS
    for task_type in declared_types:
        keys.update(f"tony.{task_type}.{field}" for field in TASK_FIELDS)
        keys.add(f"tony.docker.{task_type}.image")
    keys.add("tony.docker.am.image")
    return sorted(keys)


def task_key(task_type: str, name: str) -> str:
    """``tony.<type>.<name>``: the key of one setting of a task type."""
    return f"tony.{task_type}.{name}"
