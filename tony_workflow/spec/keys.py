"""What is known of TonY's configuration: its keys and defaults (``tony-default.xml``), the keys
its code reads besides, the settings every task type has, and the local cluster's own settings
(which no job may set). Everything here is data. The keys a job may set, job-wide and per task
type, with their parsers, bounds and meanings, are the tables in :mod:`.table`; the value parsers are in
:mod:`.values`, the checks in :mod:`.validation`.
"""
from __future__ import annotations

import re

__all__ = [
    "CLIENT_DEFAULTS",
    "CLIENT_DOCS",
    "CLIENT_KEY_REASON",
    "FRAMEWORKS",
    "KNOWN_TYPES",
    "LOCAL_CLUSTER_DEFAULTS",
    "LOCAL_KEY_REASON",
    "MULTI_VALUE_KEYS",
    "OTHER_TONY_KEYS",
    "RESERVED_TYPES",
    "RESTART_POLICIES",
    "TONY_XML_DEFAULTS",
    "task_key",
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
    # A container over its memory is killed, as YARN's NodeManager does (same names, same defaults).
    "tony.local.pmem-check-enabled": "true",
    "tony.local.container-monitor-interval-ms": "3000",
    # A smaller memory request is raised to this, as YARN's scheduler does (its key's name and the
    # mini cluster's value; YARN's own default is 1024).
    "tony.local.minimum-allocation-mb": "128",
}

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
    "checkpoint", "python-exec-path", "gpu-exec-path", "gang", "elastic", "context", "lineage", "data",
})

#: The task types TonY's frameworks give a meaning (TensorFlow's, PyTorch's, Horovod's and MXNet's
#: roles, TensorBoard's and a notebook's sidecars): a declared type one edit away from one of them
#: (or from another declared type, or a reserved word) is taken for a typo.
KNOWN_TYPES = ("worker", "ps", "chief", "master", "evaluator", "driver", "scheduler", "server", "tensorboard",
               "notebook")

#: TonY's keys that tony-default.xml does not list (its client and code read them), known so that
#: they are not taken for typos.
OTHER_TONY_KEYS = frozenset({
    "tony.containers.envs", "tony.execution.envs", "tony.containers.resources", "tony.containers.command",
    "tony.docker.containers.image", "tony.gpu-exec-path", "tony.python-exec-path", "tony.history.host",
    "tony.history.cache.max-entries", "tony.history.maxAppends", "tony.init.module",
    "tony.application.single-node", "tony.am.command", "tony.application.prepare-stage",
    "tony.application.training-stage", "tony.chief.name", "tony.chief.index", "tony.evaluator.run-alone.timeout",
    "tony.application.stop.on.failure.jobtypes", "tony.application.reserve.port.python.process.wait.seconds",
    "tony.application.docker.enabled", "tony.application.docker.image", "tony.application.tensorboard-log-dir",
})

#: Why a job may not set ``tony.local.*``.
#: The machine's own settings of the ``tony`` command (and of the Azkaban job type), read from
#: tony-site.xml: which cluster a command means when it names none (``TONY_BACKEND`` wins).
CLIENT_DEFAULTS: dict[str, str] = {
    "tony.client.backend": "local",
    "tony.history.server-url": "",
}

#: What each of the client's settings does (the reference's words).
CLIENT_DOCS: dict[str, str] = {
    "tony.client.backend": "the cluster a `tony` command or an Azkaban job means when it names none "
                           "(`TONY_BACKEND` wins)",
    "tony.history.server-url": "the address of the history server (`tony history serve`, e.g. `http://host:19886`): "
                               "a job that ended has its tracking and TensorBoard links there, in `tony status`, "
                               "the Airflow links and the Azkaban output properties (`TONY_HISTORY_SERVER` wins)",
}

CLIENT_KEY_REASON = ("is a setting of the machine's tony command, not of a job (which cluster a command means "
                     "when it names none, where the history server is): set it in $TONY_CONF_DIR/tony-site.xml")

LOCAL_KEY_REASON = ("is a setting of the local cluster, not of a job (a job cannot size the machine it runs on): "
                    "set it in $TONY_CONF_DIR/tony-site.xml")


def task_key(task_type: str, name: str) -> str:
    """``tony.<type>.<name>``: the key of one setting of a task type."""
    return f"tony.{task_type}.{name}"
