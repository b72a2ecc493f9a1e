"""The tables of the keys a job may set, job-wide and per task type: each key's default, parser,
lower bound and meaning, written once.

:class:`~.model.JobSpec`'s typed fields are made from it (``retry_count = field_of(RETRY_COUNT)``),
:mod:`.validation` checks every key of it, the effective defaults (:data:`TONY_DEFAULTS`) and the
'did you mean' list (:func:`known_keys`) come from it, and so does the key reference (docs/reference.md)
(:func:`reference_markdown`, written by ``python -m tony_workflow.spec --readme docs/reference.md``, which a
test holds the reference to). A key's default is TonY's own
(``tony-default.xml``, :data:`~.keys.TONY_XML_DEFAULTS`) unless the table gives one: TonY's keys
keep TonY's defaults, this project's keys carry theirs here.

The settings every task type has (``tony.<type>.<field>``) are the second table,
:data:`TASK_KEYS`: their YAML names under ``tasks.<type>`` (:mod:`.document`), the values the model
reads (:mod:`.model`), the checks every declared type gets (:mod:`.validation`) and their part of
the reference come from it. The local cluster's own settings, which no job may set, are
:data:`~.keys.LOCAL_CLUSTER_DEFAULTS`.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

from ..context import FIELDS as CONTEXT_FIELDS
from .data import DATA_FIELDS
from .data import key_problem as data_key_problem
from .groups import DEPENDENCY_KEY, GROUP_KEY
from .keys import (
    CLIENT_DEFAULTS,
    CLIENT_DOCS,
    CLIENT_KEY_REASON,
    LOCAL_CLUSTER_DEFAULTS,
    LOCAL_KEY_REASON,
    OTHER_TONY_KEYS,
    RESERVED_TYPES,
    TONY_XML_DEFAULTS,
)
from .unhonoured import markdown as unhonoured_markdown
from .unhonoured import not_honoured
from .values import (
    optional,
    parse_acl,
    parse_bool,
    parse_env,
    parse_environment,
    parse_int,
    parse_list,
    parse_memory,
    parse_processes,
    parse_regroup,
    parse_restart_policy,
    parse_store_failure,
    parse_user,
)

__all__ = [
    "KEYS",
    "PROJECT_DEFAULTS",
    "TASK_DEFAULTS",
    "TASK_FIELDS",
    "TASK_KEY",
    "TASK_KEYS",
    "TONY_DEFAULTS",
    "Key",
    "TaskKey",
    "known_keys",
    "reference_markdown",
    "unknown_key",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Key(Generic[T]):
    """One job-wide key: ``parse`` turns its text into the field's value (raising ValueError saying
    what is allowed), ``minimum`` is the lower bound ``parse`` applies to an integer (shown in the
    reference), ``default`` is this project's (None: TonY's own), ``doc`` its meaning."""

    name: str
    parse: Callable[[str], T]
    doc: str
    default: str | None = None
    minimum: int | None = None
    kind: str = "text"

    @property
    def effective_default(self) -> str:
        return self.default if self.default is not None else TONY_XML_DEFAULTS.get(self.name, "")

    @property
    def project(self) -> bool:
        """A key of this project's, not TonY's."""
        return self.name not in TONY_XML_DEFAULTS and self.name not in OTHER_TONY_KEYS


def integer(name: str, minimum: int | None, doc: str, default: str | None = None) -> Key[int]:
    return Key(name, partial(parse_int, minimum=minimum), doc, default, minimum, "integer")


def boolean(name: str, doc: str, default: str | None = None) -> Key[bool]:
    return Key(name, parse_bool, doc, default, kind="boolean")


def _optional_text(value: str) -> str | None:
    return (value or "").strip() or None


def text(name: str, doc: str, default: str | None = None) -> Key[str | None]:
    """A text key; its field is None when the value is empty."""
    return Key(name, _optional_text, doc, default, kind="text")


def listing(name: str, doc: str, default: str | None = None) -> Key[list[str]]:
    return Key(name, lambda v: parse_list(v or ""), doc, default, kind="comma-separated list")


def environment(name: str, doc: str) -> Key[dict[str, str]]:
    return Key(name, lambda v: parse_env(v or ""), doc, kind="NAME=value list")


# -- the table ----------------------------------------------------------------------------------
# TonY's keys (default from tony-default.xml)
RETRY_COUNT = integer("tony.am.retry-count", 0, "session relaunches after the job's own failures")
HEARTBEAT_INTERVAL_MS = integer("tony.task.heartbeat-interval-ms", 1, "how often executors beat")
MAX_MISSED_HEARTBEATS = integer("tony.task.max-missed-heartbeats", 1,
                                "beats a task may miss before the AM declares it lost")
EXECUTION_TIMEOUT_MS = integer("tony.task.executor.execution-timeout-ms", 0,
                               "a task's time limit (its type's own tony.<type>.timeout wins); 0: none")
METRICS_INTERVAL_MS = integer("tony.task.metrics-interval-ms", 100, "how often executors sample their task's resources")
GPU_METRICS_ENABLED = boolean("tony.task.gpu-metrics.enabled", "whether executors sample their GPUs through NVML")
APPLICATION_TIMEOUT_MS = integer("tony.application.timeout", 0, "the job's time limit in ms; 0: none")
AM_STARTUP_TIMEOUT_MS = integer("tony.am.startup-timeout", 0, "how long in ms a job may wait from its submission "
                                "for its ApplicationMaster to start before it fails; the wait for its turn counts "
                                "(on the embedded cluster the AM's container comes with the first gang); 0: none")
ALLOCATION_TIMEOUT_MS = integer("tony.container.allocation.timeout", None,
                                "how long a session's gang may take to be granted whole, from when the job "
                                "first asks; <= 0: no limit")
REGISTRATION_TIMEOUT_MS = integer("tony.container.registration.timeout", None,
                                  "how long tasks may take to register; <= 0: no limit")
FAIL_ON_WORKER_FAILURE = boolean("tony.application.fail-on-worker-failure-enabled",
                                 "a failed worker fails the job at once (else it is tolerated)")
MAX_TOTAL_INSTANCES = integer("tony.task.max-total-instances", -1, "the most tasks a job may ask for; -1: no limit")
MAX_TOTAL_GPUS = integer("tony.task.max-total-gpus", -1, "the most GPUs a job may ask for; -1: no limit")
PREPARE_STAGE = listing("tony.application.prepare-stage", "TonY's stages: task types that run and end before the "
                        "training stage's start (they get the gang's containers with the others)")
TRAINING_STAGE = listing("tony.application.training-stage", "TonY's stages: task types whose commands start only "
                         "once every task of the prepare stage has succeeded")
UNTRACKED_TYPES = listing("tony.application.untracked.jobtypes", "task types whose end the job does not wait for")
SIDECAR_TYPES = listing("tony.application.sidecar.jobtypes", "task types that serve the others and whose "
                        "failure is ignored")
STOP_ON_FAILURE_TYPES = listing("tony.application.stop-on-failure-jobtypes",
                                "task types whose failure stops the job")
TAGS = listing("tony.application.tags", "the application's tags on YARN")
NODE_LABEL = text("tony.application.node-label", "on YARN, the node label expression of every container")
PROXY_USER = Key("tony.application.proxy-user", parse_user, "on YARN, the user the job runs as, impersonated by "
                 "the submitting login (which hadoop.proxyuser.<login>.* must allow); empty: the login itself", "")
VIEW_ACLS = Key("tony.application.view-acls", parse_acl,
                "on YARN, who besides the job's owner and the cluster's administrators may see it (its status, "
                "logs and pages): `users groups`, or * for everyone", "", kind="YARN ACL")
MODIFY_ACLS = Key("tony.application.modify-acls", parse_acl,
                  "on YARN, who besides the job's owner and the cluster's administrators may kill it: "
                  "`users groups`, or * for everyone", "", kind="YARN ACL")
CONTAINER_COMMAND = text("tony.containers.command", "the command of every task type without its own")
ENABLE_PREPROCESS = boolean("tony.application.enable-preprocess", "TonY's preprocessing job: the job's command "
                            "(tony.am.command, ...) runs in the ApplicationMaster before any task; it failing fails "
                            "the job, and what it prints after 'Model parameters: ' the tasks get as MODEL_PARAMS")
AM_COMMAND = text("tony.am.command", "a single-node job's command, run in the ApplicationMaster's container "
                  "(else tony.containers.command, else executes)")
SINGLE_NODE = Key("tony.application.single-node", lambda v: parse_bool(v) if (v or "").strip() else False,
                  "the job is its command run in the ApplicationMaster's container, as a job with no task "
                  "instances is; true with task instances is refused", kind="boolean")
CONTAINER_ENV = environment("tony.containers.envs", "the environment of every container")
EXECUTION_ENV = environment("tony.execution.envs", "the environment of every user process")
CONTAINER_RESOURCES = listing("tony.containers.resources", "files every container (the AM's too) is given in its "
                              "working directory: `path`, `path::alias`, `path#archive` (unpacked), a directory; "
                              "local or hdfs://")
HISTORY_RETENTION_S = integer("tony.history.retention-sec", 0, "how long history records are kept; 0: forever")
DOCKER_ENABLED = boolean("tony.docker.enabled", "containers run in docker images (tony.docker.<type>.image)")

# This project's keys
TENSORBOARD_ENABLED = boolean("tony.task.tensorboard.enabled",
                              "run TensorBoard on the chief (at nice 19: it takes only the CPU training leaves)", "true")
TENSORBOARD_LOG_DIR = text("tony.application.tensorboard-log-dir", "a log directory for TonY's TensorBoard task: a "
                           "sidecar 'tensorboard' of its own (2 vcores, 2g unless tony.tensorboard.* say) serves it, "
                           "and every task finds it in TB_LOG_DIR")
CHECKPOINT_LOCATION = text("tony.checkpoint.location", "where TONY_CHECKPOINT_DIR is mirrored to and restored "
                           "from; empty: the job's directory", "")
HEARTBEAT_TIMEOUT_MS = integer("tony.task.heartbeat-timeout-ms", 0,
                               "the AM declares a silent task lost after this, or after interval × "
                               "max-missed-heartbeats if that comes first; 0: only the latter (TonY's rule)", "8000")
YARN_PYTHON = text("tony.yarn.python", "on a YARN cluster whose nodes have this project installed, the "
                   "interpreter its containers run the AM and executors with, and nothing is shipped for them; empty: "
                   "the runtime goes with the job and runs on tony.yarn.base-python", "")
YARN_BASE_PYTHON = text("tony.yarn.base-python", "the base Python 3 on the YARN nodes that runs the runtime shipped "
                        "with the job (the client's minor version); empty: python3.<the client's minor version>, "
                        "found on the containers' PATH", "")
YARN_ENVIRONMENT = Key("tony.yarn.environment", parse_environment,
                       "the environment of a YARN job's own processes when it has no python_venv: client (what the "
                       "job's source imports, with what that requires, from the distributions installed where it "
                       "is submitted: one archive each, uploaded once) or nodes (nothing goes: the nodes' Python "
                       "has it all); empty: client, but nodes where tony.yarn.python names the nodes' interpreter",
                       "", kind="client, nodes or empty")
YARN_ENVIRONMENT_PACKAGES = listing("tony.yarn.environment-packages", "with tony.yarn.environment=client, "
                                    "distributions that go besides what the job's source imports (with what "
                                    "they require); * for every installed one", "")
CHECKPOINT_ON_STORE_FAILURE = Key("tony.checkpoint.on-store-failure", parse_store_failure,
                                  "what a failing checkpoint store does to the job: warn (training goes on, the "
                                  "failure is shown) or fail", "warn", kind="warn or fail")
AM_MAX_ATTEMPTS = integer("tony.am.max-attempts", 1, "how many times the ApplicationMaster is started when it "
                          "dies or hangs; a later attempt starts a new session from the last checkpoint", "2")
AM_LIVENESS_TIMEOUT_MS = integer("tony.am.liveness-timeout-ms", 1000,
                                 "an AM silent this long is replaced; tasks that cannot reach it this long stop",
                                 "30000")
RECLAIM_RETRY_COUNT = integer("tony.am.reclaim-retry-count", 0,
                              "relaunches of tasks whose containers the cluster took back (preempted, lost with "
                              "their node); they do not spend tony.am.retry-count", "10")
PRIORITY = integer("tony.application.priority", 0, "the YARN priority asked for (higher runs first in a queue, "
                   "capped by the cluster); 0: the queue's default", "0")
DOCKER_MOUNTS = listing("tony.docker.mounts", "with tony.docker.enabled, what every container mounts: "
                        "host path:container path:ro|rw entries", "")
AM_NODE_LABEL = text("tony.am.node-label", "on YARN, the node label expression of the AM's container; empty: "
                     "the application's", "")
TONY_HISTORY_FORMAT = boolean("tony.history.tony-format", "also write TonY's history files in the job's record "
                              "folder (its .jhist events and tony-final.xml), for the TonY Portal and Dr. Elephant",
                              "false")
NOTEBOOK_IDLE_TIMEOUT_MS = integer("tony.application.notebook-idle-timeout-ms", 0,
                                   "a notebook job (tony notebook) that has had no request, no kernel at work and "
                                   "no open connection this long shuts down and frees its container; 0: never",
                                   "3600000")
PROGRESS_TIMEOUT_MS = integer("tony.task.progress-timeout-ms", 0,
                              "a task that reported progress and then reports none this long is lost; 0: never",
                              "0")
GANG_HOLD_TIMEOUT_MS = integer("tony.gang.hold-timeout-ms", 0,
                               "how long part of a gang may be held before it is given back and asked for again, "
                               "keeping the job's place; 0: held on", "60000")
GANG_LINE_DIR = text("tony.gang.line-dir", "on YARN, the directory (HDFS unless a URI says otherwise) where "
                     "jobs being submitted announce themselves to the others of their queue, so that a job "
                     "submitted to a queue with room asks for its whole gang as its application starts; the same "
                     "for every job of the cluster (tony-site.xml); empty: every job waits for its turn in "
                     "skein's master", "/tmp/tony-gang")
GANG_BACKOFF_MS = integer("tony.gang.backoff-ms", 0,
                          "after a give-back, the wait before asking again: random between half and one and a "
                          "half times this, doubling up to eight times", "5000")
ELASTIC_FALLBACK_TIMEOUT_MS = integer("tony.elastic.fallback-timeout-ms", 1,
                                     "elastic PyTorch jobs: how long fewer than tony.<type>.min-instances tasks of a "
                                     "type may remain before the session is relaunched whole", "120000")
ELASTIC_MAX_MEMBERSHIP_CHANGES = integer("tony.elastic.max-membership-changes", 0,
                                         "elastic PyTorch jobs: how many times a session's group may lose a task "
                                         "and go on without it (a container the cluster took back is not "
                                         "counted); past it, the failure rules apply", "10")
ELASTIC_REGROUP = Key("tony.elastic.regroup", parse_regroup,
                      "elastic PyTorch jobs: how the group changes: restart (torch's elastic agent restarts "
                      "every trainer, which restores its checkpoint) or in-place (the trainers keep their "
                      "processes and state and re-form their process group; the script trains through "
                      "tony_workflow.torch_elastic.run)", "restart", kind="restart or in-place")

#: Where the job came from (:mod:`tony_workflow.context`): set by the workflow front ends.
CONTEXT_KEYS: tuple[Key[str | None], ...] = tuple(text(f.key, f.doc, "") for f in CONTEXT_FIELDS)
LINEAGE_INPUTS = listing("tony.lineage.inputs", "what the job reads, for lineage (OpenLineage): URIs or paths "
                         "(hdfs://namenode:port/data, /local/path)", "")
LINEAGE_OUTPUTS = listing("tony.lineage.outputs", "what the job writes besides its checkpoints (always an output), "
                          "for lineage: URIs or paths", "")
OUTPUT_TASKS = text("tony.output.tasks", "the tasks whose output (stdout and stderr) is followed into the log of "
                    "what runs the job (the Airflow task log, the Azkaban job log, tony submit --wait --logs): "
                    "task ids (worker:1) or types (worker: its every task), comma-separated; none: none; "
                    "empty: the chief (chief:0, else worker:0)", "")

KEYS: tuple[Key[Any], ...] = (tuple(v for v in list(globals().values()) if isinstance(v, Key))
                              + CONTEXT_KEYS)
_BY_NAME = {k.name: k for k in KEYS}
assert len(_BY_NAME) == len(KEYS), "a key is in the table twice"



@dataclass(frozen=True)
class TaskKey(Generic[T]):
    """One setting every task type has, ``tony.<type>.<name>``: ``yaml`` is its name under
    ``tasks.<type>`` in a YAML job (None: set as a key only), ``parse`` turns its text into the
    value (raising ValueError saying what is allowed), ``default`` is what it reads unset,
    ``minimum`` the bound ``parse`` applies to an integer, ``doc`` its meaning. ``checked``: every
    declared type's value is parsed by validation as it is; the others have checks of their own
    there (they depend on other keys)."""

    name: str
    yaml: str | None
    parse: Callable[[str], T]
    doc: str
    default: str = ""
    minimum: int | None = None
    kind: str = "text"
    checked: bool = True

    def key(self, task_type: str) -> str:
        return f"tony.{task_type}.{self.name}"


def _task_integer(name: str, yaml: str, minimum: int, doc: str, default: str = "",
                  checked: bool = True) -> TaskKey[int]:
    return TaskKey(name, yaml, partial(parse_int, minimum=minimum), doc, default, minimum, "integer", checked)


TASK_KEYS: tuple[TaskKey[Any], ...] = (
    _task_integer("instances", "instances", 0, "how many tasks of the type (declares the type)", checked=False),
    TaskKey("max-instances", None, optional(parse_int), "TonY's upper bound on instances; empty or negative: none",
            kind="integer", checked=False),
    TaskKey("memory", "memory", parse_memory, "each container's memory (`2g`, `512m`, or MB)", "2g", kind="memory"),
    _task_integer("vcores", "vcores", 1, "each container's vcores", "1"),
    _task_integer("gpus", "gpus", 0, "each container's GPUs", "0"),
    TaskKey("command", "command", _optional_text, "the type's command (else tony.containers.command, else the job's)",
            checked=False),
    TaskKey("node-label", "node_label", _optional_text, "on YARN, the node label expression of the type's containers"),
    TaskKey("restart-policy", "restart_policy", parse_restart_policy,
            "`session` (a failure relaunches the session) or `task` (only that task, at its address)", "session",
            kind="session or task"),
    _task_integer("timeout", "timeout", 0, "a task's time limit in ms; 0: none", "0"),
    TaskKey("resources", None, _optional_text, "files the type's containers are given, as "
            "tony.containers.resources (the type's own win by name)", checked=False),
    TaskKey("spread", "spread", parse_bool, "on YARN, the type's tasks go to distinct nodes where the cluster allows",
            "false", kind="boolean"),
    TaskKey("processes", "processes", parse_processes, "PyTorch: processes of the command per container, under "
            "torch's elastic agent; `gpus`: one per GPU", "1", kind="integer ≥ 1 or gpus", checked=False),
    TaskKey("min-instances", "min_instances", optional(partial(parse_int, minimum=1)),
            "PyTorch: below instances, the type is elastic: a lost task is replaced while the others train on, as "
            "long as this many remain; empty: instances (fixed)", minimum=1, kind="integer", checked=False),
)
TASK_KEY: dict[str, TaskKey[Any]] = {k.name: k for k in TASK_KEYS}
#: The settings every task type has, and what each reads unset.
TASK_FIELDS = tuple(TASK_KEY)
TASK_DEFAULTS = {k.name: k.default for k in TASK_KEYS}

#: This project's keys, with their defaults.
PROJECT_DEFAULTS: dict[str, str] = {k.name: k.effective_default for k in KEYS if k.project}

#: The effective configuration before any file: TonY's defaults, then this project's.
TONY_DEFAULTS: dict[str, str] = {**TONY_XML_DEFAULTS, **PROJECT_DEFAULTS}

#: TonY's keys outside the table whose default is an integer or a boolean: their values must stay one.
#: (Container sizes are checked per type, where their bounds are known.)
UNTYPED_INTEGERS = tuple(k for k, v in TONY_XML_DEFAULTS.items() if k not in _BY_NAME
                         and re.fullmatch(r"-?\d+", v) and k.rsplit(".", 1)[1] not in ("memory", "vcores", "gpus"))
UNTYPED_BOOLEANS = tuple(k for k, v in TONY_XML_DEFAULTS.items() if k not in _BY_NAME and v in ("true", "false"))

_TASK_KEY = re.compile(r"^tony\.([a-z][a-z0-9_-]*)\.([a-z][a-z0-9_.-]*)$")
_DOCKER_IMAGE_KEY = re.compile(r"^tony\.docker\.([a-z][a-z0-9_-]*)\.image$")
_KEY_FAMILIES = (re.compile(r"^tony\.task\.max-total-[a-z][a-z0-9_-]*$"), re.compile(r"^tony\.version-info\.[^.]+$"),
                 GROUP_KEY, DEPENDENCY_KEY)


def unknown_key(key: str, declared_types: set[str]) -> str | None:
    """Why ``key`` is not a key of TonY or of this project (None when it is one). ``declared_types``
    are the task types the configuration declares (a ``tony.<type>.instances`` key)."""
    if (key in TONY_DEFAULTS or key in OTHER_TONY_KEYS or any(f.match(key) for f in _KEY_FAMILIES)
            or not_honoured(key) is not None):
        return None
    if key.startswith("tony.local."):
        return LOCAL_KEY_REASON
    if key.startswith("tony.client.") or key in CLIENT_DEFAULTS:
        return CLIENT_KEY_REASON
    if key.startswith("tony.data."):
        return data_key_problem(key)
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


#: The key reference's generated section (docs/reference.md) lies between these lines.
README_BEGIN = "<!-- keys: written by `python -m tony_workflow.spec --readme docs/reference.md` from spec/table.py; edit the table -->"
README_END = "<!-- /keys -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _shown(value: str) -> str:
    return f"`{value}`" if value != "" else "empty"


def reference_markdown() -> str:
    """The key reference (docs/reference.md): every key of the table, this project's first."""
    lines = ["| key | default | allowed | meaning |", "|---|---|---|---|"]
    for k in sorted(KEYS, key=lambda k: (not k.project, k.name)):
        allowed = k.kind + (f" ≥ {k.minimum}" if k.minimum is not None else "")
        lines.append(f"| `{k.name}` | {_shown(k.effective_default)} | {allowed} | "
                     f"{_cell(k.doc)}{'' if k.project else ' (TonY)'} |")
    lines += ["", "Every task type has these settings, `tony.<type>.<field>` (`tasks.<type>.<yaml>` in YAML):", "",
              "| field | yaml | default | allowed | meaning |", "|---|---|---|---|---|"]
    for t in TASK_KEYS:
        allowed = t.kind + (f" ≥ {t.minimum}" if t.minimum is not None and t.kind == "integer" else "")
        lines.append(f"| `{t.name}` | {f'`{t.yaml}`' if t.yaml else '—'} | {_shown(t.default)} | {allowed} | "
                     f"{_cell(t.doc)} |")
    lines += ["", ("A job's inputs (`tony.data.<input>.<field>`, `data.<input>.<field>` in YAML; read in a task "
                   "with `tony_workflow.data.dataset(\"<input>\")`) have these fields:"), "",
              "| field | meaning |", "|---|---|"]
    lines += [f"| `{name}` | {_cell(doc)} |" for name, doc in DATA_FIELDS.items()]
    local = ", ".join(f"`{name}`" for name in LOCAL_CLUSTER_DEFAULTS)
    lines.append("")
    lines.append(f"The embedded cluster's own settings ({local}) are read from `$TONY_CONF_DIR/tony-site.xml` "
                 "only; a job that sets one is refused. So is each setting of the machine's `tony` command: "
                 + "; ".join(f"`{name}` (default {f'`{value}`' if value else 'none'}): {CLIENT_DOCS[name]}"
                             for name, value in CLIENT_DEFAULTS.items()) + ".")
    lines += ["", ("TonY's keys that this project does not honour. Set to anything but TonY's default, each is "
                   "refused at submission, naming the key and why, or accepted with a warning in the job's status "
                   "(the job runs as written without it):"), "", unhonoured_markdown()]
    return "\n".join(lines)


def write_readme(path: str) -> None:
    """Rewrites the key reference between :data:`README_BEGIN` and :data:`README_END` in ``path``."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    head, _, rest = text.partition(README_BEGIN + "\n")
    _, _, tail = rest.partition(README_END)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(f"{head}{README_BEGIN}\n{reference_markdown()}\n{README_END}{tail}")
