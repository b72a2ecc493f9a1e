"""Job specifications: which tasks to run, how many, with what resources and commands.

A job is described by TonY's flat ``tony.*`` configuration, with the same key names and defaults as
TonY's ``tony-default.xml``. It can be written three ways, all ending in one :class:`JobSpec` whose
``conf`` is the single source of truth:

* TonY XML: a Hadoop ``<configuration>`` file, read by :func:`load_tony_xml`.
* YAML or JSON, read by :func:`spec_from_mapping`, with friendlier names that map onto ``tony.*`` keys::

      name: mnist                 # tony.application.name
      framework: tensorflow       # tony.application.framework (one of FRAMEWORKS)
      queue: default              # tony.yarn.queue
      node_label: gpu             # tony.application.node-label
      tags: [team-a, nightly]     # tony.application.tags (a list or a comma-separated string)
      command: python train.py    # tony.containers.command: the command of every task type
      env: {KEY: value}           # tony.containers.envs (a mapping, or a list of "KEY=value")
      execution_env: {KEY: value} # tony.execution.envs (same forms)
      resources: [data.zip]       # tony.containers.resources (a list or a comma-separated string)
      retries: 2                  # tony.am.retry-count (each key may be set by one spelling only)
      timeout: 3600000            # tony.application.timeout, in milliseconds
      am: {memory: 1g, vcores: 1, gpus: 0}          # tony.am.memory / vcores / gpus
      tasks:
        worker:                   # a task type: tony.worker.*
          instances: 2            # tony.worker.instances (1 when the task is listed without it)
          memory: 4g              # tony.worker.memory
          vcores: 2               # tony.worker.vcores
          gpus: 0                 # tony.worker.gpus
          command: ...            # tony.worker.command
          node_label: x           # tony.worker.node-label
          docker_image: img       # tony.docker.worker.image (and tony.docker.enabled=true unless set)
          restart_policy: task    # tony.worker.restart-policy: session | task
          timeout: 0              # tony.worker.timeout, in milliseconds
        ps: {instances: 1}
      conf: {tony.task.metrics-interval-ms: 10000}  # any flat key; values: strings, numbers, booleans, lists
      tony.task.heartbeat-interval-ms: 500   # flat tony.* keys are also accepted at the top level
      x-defaults: &defaults {memory: 4g}      # x-* keys are ignored: room for YAML anchors
      # What TonY takes as client arguments rather than configuration:
      executes: train.py          # the script the default command runs
      task_params: --epochs 3     # its arguments
      python_binary_path: python3 # its interpreter ("python" when unset)
      python_venv: venv.zip       # a virtualenv directory or zip shipped to every container
      src_dir: .                  # the source directory shipped to every container
      shell_env: {KEY: value}     # extra environment of the user process

Loading (:func:`load_spec`) reads a file, renders it as a Jinja2 template, parses it, lays it over
:data:`TONY_DEFAULTS` and applies ``--conf`` overrides. It does not validate: :meth:`JobSpec.validate`
reports every problem at once, each naming the key as the user wrote it, the bad value, and what
is allowed.
"""
from __future__ import annotations

import dataclasses
import datetime
import difflib
import json
import math
import os
import re
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SpecIssue", "SpecError", "Resources", "TaskSpec", "JobSpec", "parse_memory", "load_spec",
           "load_tony_xml", "spec_from_mapping", "apply_overrides", "LocalCapacity", "TONY_DEFAULTS", "PROJECT_DEFAULTS",
           "FRAMEWORKS", "MULTI_VALUE_KEYS"]

# --------------------------------------------------------------------------------------------------
# Keys and defaults

# Every key and default of TonY's tony-default.xml, as Hadoop's Configuration reads it (a property
# without a value reads as ""). A test compares this with the file itself.
_TONY_XML_DEFAULTS: dict[str, str] = {
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
#: ``tony.local.vcore-oversubscription``
#:     How many task vcores the local backend packs onto one real core (a float >= 1).
#: ``tony.local.memory``
#:     Memory the local backend may hand out, in MB or as a memory string; empty: detect.
#: ``tony.local.vcores``
#:     Cores the local backend may hand out; empty: detect.
#: ``tony.local.gpus``
#:     GPUs the local backend may hand out: a count ("4") or an index list ("0,1,3"); empty: ask nvidia-smi.
#: ``tony.task.tensorboard.enabled``
#:     Whether the chief gets a ``TB_PORT`` and the AM registers a TensorBoard URL.
#: ``tony.checkpoint.location``
#:     Where ``TONY_CHECKPOINT_DIR`` is mirrored to and restored from; empty: the job directory.
#: ``tony.task.heartbeat-timeout-ms``
#:     The AM declares a task lost after this long without a heartbeat, or after
#:     ``heartbeat-interval-ms × max-missed-heartbeats`` if that comes first; 0: only the latter, as
#:     in TonY. The executor's own patience with an unreachable AM stays at max-missed-heartbeats.
#: ``tony.local.fork-server``
#:     Whether the local backend forks task containers from a pre-started server (fast) instead of
#:     starting an interpreter for each.
#: ``tony.yarn.python``
#:     The interpreter YARN containers start the AM and executors with; empty: the client's own
#:     (right when every node has the same installation at the same path).
PROJECT_DEFAULTS: dict[str, str] = {
    "tony.local.vcore-oversubscription": "4",
    "tony.local.memory": "",
    "tony.local.vcores": "",
    "tony.local.gpus": "",
    "tony.task.tensorboard.enabled": "true",
    "tony.checkpoint.location": "",
    "tony.task.heartbeat-timeout-ms": "8000",
    "tony.local.fork-server": "true",
    "tony.yarn.python": "",
}

#: The effective configuration before any file: TonY's defaults, then this project's.
TONY_DEFAULTS: dict[str, str] = {**_TONY_XML_DEFAULTS, **PROJECT_DEFAULTS}

# What tony.<type>.<field> reads when neither the file nor TONY_DEFAULTS sets it (TonY's code
# defaults for memory/vcores/gpus; restart-policy is this project's own per-type key).
_TASK_DEFAULTS = {"memory": "2g", "vcores": "1", "gpus": "0", "restart-policy": "session", "timeout": "0"}

FRAMEWORKS = ("tensorflow", "pytorch", "horovod", "mxnet", "jax", "standalone")

#: Keys whose ``--conf`` value is appended, comma-joined, to the existing one instead of replacing it.
#: TonY appends the first three; this project appends tags too.
MULTI_VALUE_KEYS = ("tony.containers.envs", "tony.execution.envs", "tony.containers.resources",
                    "tony.application.tags")

RESTART_POLICIES = ("session", "task")

_TYPE_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INSTANCES_KEY = re.compile(r"^tony\.(.+)\.instances$")

# Second segments of job-wide keys (tony.am.memory, tony.task.*, ...): a task type of that name
# would have its keys mixed up with them.
_RESERVED_TYPES = frozenset({
    "am", "application", "task", "container", "containers", "docker", "execution", "history", "yarn",
    "http", "https", "keytab", "portal", "secret", "other", "version-info", "horovod", "local",
    "checkpoint", "python-exec-path", "gpu-exec-path",
})

# Typed checks of job-wide keys: every key whose default is a boolean must stay one, and every key
# whose default is an integer must stay one, with these lower bounds where TonY's meaning needs one.
# Container vcores/gpus are left to the per-type and AM checks, which know their bounds.
_BOOL_KEYS = tuple(k for k, v in TONY_DEFAULTS.items() if v in ("true", "false"))
_INT_MINIMUMS = {
    "tony.am.retry-count": 0,
    "tony.application.timeout": 0,
    "tony.task.heartbeat-interval-ms": 1,
    "tony.task.max-missed-heartbeats": 1,
    "tony.task.max-total-instances": -1,
    "tony.task.max-total-gpus": -1,
}
_INT_KEYS = tuple(k for k, v in _TONY_XML_DEFAULTS.items()
                  if re.fullmatch(r"-?\d+", v) and k.rsplit(".", 1)[1] not in ("vcores", "gpus"))


# --------------------------------------------------------------------------------------------------
# Issues and errors


@dataclass(frozen=True)
class SpecIssue:
    """One problem in a spec.

    ``key`` is the key as the user wrote it (``tasks.worker.memory (tony.worker.memory)``), a line
    (``line 3``) for syntax errors, or a field name. ``value`` is the offending value, or None when
    there is none to show. ``message`` says what is allowed. ``source`` is the file, when known.
    """

    key: str
    value: object
    message: str
    source: str | None = None

    def __str__(self) -> str:
        text = f"{self.key}: {self.message}"
        if self.value is not None:
            text += f" (got {self.value!r})"
        return f"{self.source}: {text}" if self.source else text


class SpecError(ValueError):
    """A spec that cannot be used. ``issues`` lists every problem found; ``str()`` gives one per line."""

    def __init__(self, issues: Iterable[SpecIssue]):
        self.issues = list(issues)
        super().__init__(self.issues)

    def __str__(self) -> str:
        return "\n".join(str(issue) for issue in self.issues)


def _error(key: str, value: object, message: str, source: str | None = None) -> SpecError:
    return SpecError([SpecIssue(key, value, message, source)])


# --------------------------------------------------------------------------------------------------
# Values. Each parser takes the raw string (or a Python value) and raises ValueError saying what is
# allowed; the callers attach the key and the value.

_MEMORY = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(?:([mg])b?)?$", re.IGNORECASE)
_MEMORY_ALLOWED = ("must be a positive size: megabytes as a bare number (4096), or a number with the unit "
                   "m or g (512m, 2g, 1.5g; case-insensitive, a trailing b is allowed: 2gb)")


def parse_memory(value: object) -> int:
    """Megabytes in a TonY memory size.

    A bare number is megabytes (``4096``, ``"4096"``); ``m`` and ``g`` give the unit, in either case and
    with an optional trailing ``b`` (``"512m"``, ``"2G"``, ``"2gb"``). Fractions are allowed and round up
    to whole megabytes (``"1.5g"`` is 1536). Zero, negative sizes, other units and other text raise
    ValueError.
    """
    if isinstance(value, bool):
        raise ValueError(_MEMORY_ALLOWED)
    if isinstance(value, (int, float)):
        amount, unit = float(value), "m"
    else:
        match = _MEMORY.match(str(value).strip())
        if not match:
            raise ValueError(_MEMORY_ALLOWED)
        amount, unit = float(match.group(1)), (match.group(2) or "m").lower()
    megabytes = amount * (1024 if unit == "g" else 1)
    if not math.isfinite(megabytes) or megabytes <= 0:
        raise ValueError(_MEMORY_ALLOWED)
    return math.ceil(megabytes)


def _parse_int(value: object, minimum: int | None = None) -> int:
    allowed = "must be an integer" + (f" >= {minimum}" if minimum is not None else "")
    if isinstance(value, bool):
        raise ValueError(allowed)
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        number = int(value)
    else:
        raise ValueError(allowed)
    if minimum is not None and number < minimum:
        raise ValueError(allowed)
    return number


def _parse_bool(value: object) -> bool:
    # Hadoop's getBoolean: "true"/"false" in any case; anything else is not a boolean.
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError("must be true or false")
    return text == "true"


def _parse_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _parse_env(value: str) -> dict[str, str]:
    """``"K=V,K2=V2"`` as TonY writes tony.containers.envs; ValueError names the first bad entry."""
    env = {}
    for entry in _parse_list(value):
        name, sep, val = entry.partition("=")
        if not sep or not _ENV_NAME.match(name.strip()):
            raise ValueError(f"entry {entry!r} is not KEY=value with KEY a valid environment variable name "
                             "(letters, digits and '_', not starting with a digit)")
        env[name.strip()] = val
    return env


def _parse_framework(value: str) -> str:
    framework = value.strip().lower()
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework; allowed: {', '.join(FRAMEWORKS)}")
    return framework


def _parse_restart_policy(value: str) -> str:
    policy = value.strip().lower()
    if policy not in RESTART_POLICIES:
        raise ValueError("must be 'session' (a failed task restarts the whole session) or 'task' "
                         "(only the failed task is relaunched)")
    return policy


def _parse_oversubscription(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not number >= 1 or math.isinf(number):
        raise ValueError("must be a number >= 1 (how many task vcores share one real core)")
    return number


def _parse_local_gpus(value: str) -> str:
    text = value.strip()
    if text and not re.fullmatch(r"\d+(\s*,\s*\d+)*", text):
        raise ValueError("must be empty (detect with nvidia-smi), a GPU count such as '4', "
                         "or a list of GPU indices such as '0,1,3'")
    return text


def _optional(parse):
    """A parser that also accepts the empty string (meaning: detect or unset)."""
    def parse_optional(value: str):
        return None if not str(value).strip() else parse(value)
    return parse_optional


def _conf_value(value: object) -> str:
    """A YAML/JSON value as a conf string: booleans as true/false, lists comma-joined, null as ""."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float, datetime.date)):
        return str(value)
    if isinstance(value, (list, tuple)) and all(not isinstance(v, (list, tuple, dict)) for v in value):
        return ",".join(_conf_value(v) for v in value)
    raise ValueError("must be a string, a number, a boolean or a list of them")


# --------------------------------------------------------------------------------------------------
# Spec objects


@dataclass(frozen=True)
class LocalCapacity:
    """What the embedded cluster may hand out, from ``tony.local.*``: ``memory_mb``, ``vcores`` and
    ``gpus`` (GPU indices) are None where the machine is to be asked; ``oversubscription`` is how
    many task vcores share one core."""

    memory_mb: int | None
    vcores: int | None
    gpus: tuple[int, ...] | None
    oversubscription: float


@dataclass
class Resources:
    """What one container asks for: ``memory_mb`` (default 2048), ``vcores`` (default 1), ``gpus`` (default 0)."""

    memory_mb: int = 2048
    vcores: int = 1
    gpus: int = 0

    def __post_init__(self):
        issues = []
        for name, minimum in (("memory_mb", 1), ("vcores", 1), ("gpus", 0)):
            try:
                setattr(self, name, _parse_int(getattr(self, name), minimum))
            except ValueError as exc:
                issues.append(SpecIssue(name, getattr(self, name), str(exc)))
        if issues:
            raise SpecError(issues)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> Resources:
        return cls(**_known_fields(cls, data, "resources"))


@dataclass
class TaskSpec:
    """One task type of a job.

    ``type`` is the type name (``worker``), ``instances`` how many tasks of it run, ``resources``
    what each container asks for. ``command`` is what each task runs, resolved by
    :meth:`JobSpec.command_for` (tony.<type>.command, then tony.containers.command, then executes),
    or None. ``node_label`` is tony.<type>.node-label, ``docker_image`` the image when
    tony.docker.enabled is true (tony.docker.<type>.image, else tony.docker.containers.image),
    ``restart_policy`` tony.<type>.restart-policy (``session``, the default, or ``task``) and
    ``timeout_ms`` tony.<type>.timeout (0, the default, means none).
    """

    type: str
    instances: int
    resources: Resources = field(default_factory=Resources)
    command: str | None = None
    node_label: str | None = None
    docker_image: str | None = None
    restart_policy: str = "session"
    timeout_ms: int = 0

    def __post_init__(self):
        if isinstance(self.resources, Mapping):
            self.resources = Resources.from_dict(self.resources)
        issues = []
        for name, parse in (("instances", lambda v: _parse_int(v, 0)),
                            ("restart_policy", _parse_restart_policy),
                            ("timeout_ms", lambda v: _parse_int(v, 0))):
            try:
                setattr(self, name, parse(getattr(self, name)))
            except ValueError as exc:
                issues.append(SpecIssue(f"{self.type}.{name}", getattr(self, name), str(exc)))
        if issues:
            raise SpecError(issues)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> TaskSpec:
        return cls(**_known_fields(cls, data, "task"))


def _known_fields(cls, data: Mapping, what: str) -> dict:
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise SpecError(SpecIssue(str(k), None, _unknown_message(str(k), names, f"{what} field"))
                        for k in unknown)
    return dict(data)


@dataclass
class JobSpec:
    """A job: its effective TonY configuration plus what TonY takes as client arguments.

    ``conf`` is the full flat ``tony.*`` configuration (TONY_DEFAULTS, then the file, then overrides)
    and the source of truth: every typed property is derived from it. A key missing from ``conf``
    reads as its TONY_DEFAULTS value, so a hand-built JobSpec need not repeat the defaults.

    ``executes`` is the script the default command runs, with ``task_params`` as its arguments and
    ``python_binary_path`` as its interpreter (``python`` when None). ``python_venv`` is a
    virtualenv directory or zip and ``src_dir`` a source directory, both shipped to every container.
    ``shell_env`` is extra environment for the user process. ``source`` is the file the spec came
    from and ``key_origin`` maps conf keys to the user's spelling (``tasks.worker.memory``), both
    only for messages.
    """

    conf: dict[str, str] = field(default_factory=dict)
    executes: str | None = None
    task_params: str | None = None
    python_binary_path: str | None = None
    python_venv: str | None = None
    src_dir: str | None = None
    shell_env: dict[str, str] = field(default_factory=dict)
    source: str | None = None
    key_origin: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        issues = []
        for name in ("conf", "shell_env", "key_origin"):
            value = getattr(self, name)
            if not isinstance(value, Mapping):
                issues.append(SpecIssue(name, value, "must be a mapping of strings to strings", self.source))
                continue
            converted = {}
            for key, item in value.items():
                try:
                    converted[str(key)] = _conf_value(item)
                except ValueError as exc:
                    issues.append(SpecIssue(f"{name}.{key}", item, str(exc), self.source))
            setattr(self, name, converted)
        for name in ("executes", "task_params", "python_binary_path", "python_venv", "src_dir", "source"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                issues.append(SpecIssue(name, value, "must be a string or null", self.source))
        if issues:
            raise SpecError(issues)

    # -- reading conf ------------------------------------------------------------------------------

    def get(self, key: str, default: str | None = None) -> str | None:
        """The conf value of ``key``: from ``conf``, else TONY_DEFAULTS, else ``default``."""
        if key in self.conf:
            return self.conf[key]
        return TONY_DEFAULTS.get(key, default)

    def _display(self, key: str) -> str:
        origin = self.key_origin.get(key)
        if not origin or origin == key:
            return key
        return origin if key in origin else f"{origin} ({key})"

    def _issue(self, key: str, value: object, message: str) -> SpecIssue:
        return SpecIssue(self._display(key), value, message, self.source)

    def _typed(self, key: str, parse, fallback: str | None = None):
        raw = self.get(key, fallback)
        try:
            return parse(raw)
        except ValueError as exc:
            raise SpecError([self._issue(key, raw, str(exc))]) from None

    def _task_key(self, task_type: str, name: str) -> str:
        return f"tony.{task_type}.{name}"

    def _task_typed(self, task_type: str, name: str, parse):
        return self._typed(self._task_key(task_type, name), parse, _TASK_DEFAULTS.get(name))

    def _text(self, key: str) -> str | None:
        value = (self.get(key) or "").strip()
        return value or None

    # -- job-wide properties -----------------------------------------------------------------------

    @property
    def name(self) -> str:
        """tony.application.name."""
        return self.get("tony.application.name") or ""

    @property
    def framework(self) -> str:
        """tony.application.framework, lower-cased."""
        return (self.get("tony.application.framework") or "").strip().lower()

    @property
    def application_type(self) -> str:
        """tony.application.type (the YARN application type)."""
        return self.get("tony.application.type") or ""

    @property
    def queue(self) -> str:
        """tony.yarn.queue."""
        return self.get("tony.yarn.queue") or ""

    @property
    def node_label(self) -> str | None:
        """tony.application.node-label, None when empty."""
        return self._text("tony.application.node-label")

    @property
    def tags(self) -> list[str]:
        """tony.application.tags, comma-separated."""
        return _parse_list(self.get("tony.application.tags") or "")

    @property
    def untracked_types(self) -> list[str]:
        """tony.application.untracked.jobtypes: types that do not decide when the job ends."""
        return _parse_list(self.get("tony.application.untracked.jobtypes") or "")

    @property
    def sidecar_types(self) -> list[str]:
        """tony.application.sidecar.jobtypes: types whose status is ignored altogether."""
        return _parse_list(self.get("tony.application.sidecar.jobtypes") or "")

    @property
    def stop_on_failure_types(self) -> list[str]:
        """tony.application.stop-on-failure-jobtypes: types whose failure ends the session at once."""
        return _parse_list(self.get("tony.application.stop-on-failure-jobtypes") or "")

    @property
    def fail_on_worker_failure(self) -> bool:
        """tony.application.fail-on-worker-failure-enabled."""
        return self._typed("tony.application.fail-on-worker-failure-enabled", _parse_bool)

    @property
    def retry_count(self) -> int:
        """tony.am.retry-count: how many times a failed session is retried."""
        return self._typed("tony.am.retry-count", lambda v: _parse_int(v, 0))

    @property
    def heartbeat_interval_ms(self) -> int:
        """tony.task.heartbeat-interval-ms."""
        return self._typed("tony.task.heartbeat-interval-ms", lambda v: _parse_int(v, 1))

    @property
    def max_missed_heartbeats(self) -> int:
        """tony.task.max-missed-heartbeats: missed heartbeats before a task counts as dead."""
        return self._typed("tony.task.max-missed-heartbeats", lambda v: _parse_int(v, 1))

    @property
    def local_fork_server(self) -> bool:
        """tony.local.fork-server."""
        return self._typed("tony.local.fork-server", _parse_bool)

    @property
    def tensorboard_enabled(self) -> bool:
        """tony.task.tensorboard.enabled: whether the chief (or the tensorboard sidecar) serves TensorBoard."""
        return self._typed("tony.task.tensorboard.enabled", _parse_bool)

    @property
    def execution_timeout_ms(self) -> int:
        """tony.task.executor.execution-timeout-ms: a task's time limit; 0 means none."""
        return self._typed("tony.task.executor.execution-timeout-ms", lambda v: _parse_int(v, 0))

    @property
    def checkpoint_location(self) -> str | None:
        """tony.checkpoint.location, None when empty (the backend's default place)."""
        return self._text("tony.checkpoint.location")

    @property
    def yarn_python(self) -> str | None:
        """tony.yarn.python, None when empty."""
        return self._text("tony.yarn.python")

    @property
    def local_capacity(self) -> LocalCapacity:
        """The embedded cluster's capacity settings (tony.local.memory, vcores, gpus, vcore-oversubscription)."""
        gpus = self._typed("tony.local.gpus", _parse_local_gpus)
        if not gpus:
            gpu_list = None
        elif "," in gpus:
            gpu_list = tuple(int(g) for g in gpus.split(",") if g.strip())
        else:
            gpu_list = tuple(range(int(gpus)))
        return LocalCapacity(memory_mb=self._typed("tony.local.memory", _optional(parse_memory)),
                             vcores=self._typed("tony.local.vcores", _optional(lambda v: _parse_int(v, 1))),
                             gpus=gpu_list,
                             oversubscription=self._typed("tony.local.vcore-oversubscription",
                                                          _parse_oversubscription))

    @property
    def heartbeat_timeout_ms(self) -> int:
        """tony.task.heartbeat-timeout-ms: the AM's limit on silence from a task; 0: none."""
        return self._typed("tony.task.heartbeat-timeout-ms", lambda v: _parse_int(v, 0))

    @property
    def application_timeout_ms(self) -> int:
        """tony.application.timeout: the job's time limit; 0 means none."""
        return self._typed("tony.application.timeout", lambda v: _parse_int(v, 0))

    @property
    def registration_timeout_ms(self) -> int:
        """tony.container.registration.timeout: how long tasks may take to register; <= 0 means no limit."""
        return self._typed("tony.container.registration.timeout", _parse_int)

    @property
    def container_command(self) -> str | None:
        """tony.containers.command: the command of every task type without its own."""
        return self._text("tony.containers.command")

    @property
    def container_env(self) -> dict[str, str]:
        """tony.containers.envs: environment of every container."""
        return self._typed("tony.containers.envs", _parse_env, "")

    @property
    def execution_env(self) -> dict[str, str]:
        """tony.execution.envs: environment of the user process."""
        return self._typed("tony.execution.envs", _parse_env, "")

    @property
    def container_resources(self) -> list[str]:
        """tony.containers.resources: files localised into every container."""
        return _parse_list(self.get("tony.containers.resources") or "")

    @property
    def am(self) -> Resources:
        """The ApplicationMaster's container: tony.am.memory, tony.am.vcores, tony.am.gpus."""
        return Resources(memory_mb=self._typed("tony.am.memory", parse_memory),
                         vcores=self._typed("tony.am.vcores", lambda v: _parse_int(v, 1)),
                         gpus=self._typed("tony.am.gpus", lambda v: _parse_int(v, 0)))

    # -- task types --------------------------------------------------------------------------------

    def _declared_types(self) -> list[str]:
        """Every type with a tony.<type>.instances key, in first-seen order."""
        types = []
        for key in self.conf:
            match = _INSTANCES_KEY.match(key)
            if match and match.group(1) not in types:
                types.append(match.group(1))
        return types

    @property
    def tasks(self) -> dict[str, TaskSpec]:
        """One TaskSpec per type with tony.<type>.instances > 0, in first-seen order."""
        tasks = {}
        for task_type in self._declared_types():
            instances = self._task_typed(task_type, "instances", lambda v: _parse_int(v, 0))
            if instances > 0:
                tasks[task_type] = self._task_spec(task_type, instances)
        return tasks

    def _task_spec(self, task_type: str, instances: int) -> TaskSpec:
        docker_image = None
        if self._typed("tony.docker.enabled", _parse_bool):
            docker_image = self._text(f"tony.docker.{task_type}.image") or self._text("tony.docker.containers.image")
        return TaskSpec(
            type=task_type,
            instances=instances,
            resources=Resources(
                memory_mb=self._task_typed(task_type, "memory", parse_memory),
                vcores=self._task_typed(task_type, "vcores", lambda v: _parse_int(v, 1)),
                gpus=self._task_typed(task_type, "gpus", lambda v: _parse_int(v, 0))),
            command=self.command_for(task_type),
            node_label=self._text(self._task_key(task_type, "node-label")),
            docker_image=docker_image,
            restart_policy=self._task_typed(task_type, "restart-policy", _parse_restart_policy),
            timeout_ms=self._task_typed(task_type, "timeout", lambda v: _parse_int(v, 0)),
        )

    def _active_types(self) -> list[str]:
        """Types with instances > 0, skipping unreadable counts (validate() reports those)."""
        active = []
        for task_type in self._declared_types():
            try:
                if _parse_int(self.get(self._task_key(task_type, "instances")), 0) > 0:
                    active.append(task_type)
            except ValueError:
                pass
        return active

    @property
    def chief(self) -> tuple[str, int]:
        """The chief task: ``("chief", 0)`` when there is a chief type, else ``("worker", 0)``."""
        return ("chief", 0) if "chief" in self._active_types() else ("worker", 0)

    @property
    def tracked_types(self) -> list[str]:
        """Task types that decide when the job ends: neither untracked nor sidecar."""
        ignored = set(self.untracked_types) | set(self.sidecar_types)
        return [t for t in self._active_types() if t not in ignored]

    def command_for(self, task_type: str, python: str | None = None) -> str | None:
        """The command tasks of ``task_type`` run, with TonY's precedence.

        tony.<type>.command, else tony.containers.command, else ``<python> <executes> <task_params>``
        where python is the ``python`` argument (the executor passes the interpreter it resolved
        from ``python_venv``/``python_binary_path``), else ``python_binary_path``, else ``python``;
        None when none of these is set.
        """
        command = self._text(self._task_key(task_type, "command")) or self.container_command
        if command:
            return command
        if not self.executes:
            return None
        parts = [shlex.quote(python) if python else (self.python_binary_path or "python"), self.executes]
        if self.task_params:
            parts.append(self.task_params)
        return " ".join(parts)

    # -- validation --------------------------------------------------------------------------------

    def validate(self) -> None:
        """Check the whole spec; raise SpecError listing every problem found (not just the first)."""
        issues: list[SpecIssue] = []

        def check(key: str, parse, fallback: str | None = None):
            raw = self.get(key, fallback)
            try:
                return parse(raw)
            except ValueError as exc:
                issues.append(self._issue(key, raw, str(exc)))
                return None

        framework = check("tony.application.framework", _parse_framework)
        for key in _BOOL_KEYS:
            check(key, _parse_bool)
        for key in _INT_KEYS:
            minimum = _INT_MINIMUMS.get(key)
            check(key, lambda v, m=minimum: _parse_int(v, m))
        check("tony.task.heartbeat-timeout-ms", lambda v: _parse_int(v, 0))
        check("tony.local.vcore-oversubscription", _parse_oversubscription)
        check("tony.local.memory", _optional(parse_memory))
        check("tony.local.vcores", _optional(lambda v: _parse_int(v, 1)))
        check("tony.local.gpus", _parse_local_gpus)
        check("tony.am.memory", parse_memory)
        check("tony.am.vcores", lambda v: _parse_int(v, 1))
        check("tony.am.gpus", lambda v: _parse_int(v, 0))
        for key in ("tony.containers.envs", "tony.execution.envs"):
            check(key, _parse_env, "")
        for name in self.shell_env:
            if not _ENV_NAME.match(name):
                issues.append(SpecIssue("shell_env", name, "names must be valid environment variable names "
                                        "(letters, digits and '_', not starting with a digit)", self.source))

        issues.extend(self._check_tasks(check, framework))
        if issues:
            raise SpecError(issues)

    def _check_tasks(self, check, framework: str | None) -> list[SpecIssue]:
        issues: list[SpecIssue] = []
        active: dict[str, int] = {}
        unreadable = []
        total_gpus = 0
        for task_type in self._declared_types():
            key = self._task_key(task_type, "instances")
            instances = check(key, lambda v: _parse_int(v, 0))
            if instances == 0:
                continue
            name_problem = _type_name_problem(task_type, framework, self.sidecar_types)
            if name_problem:
                issues.append(self._issue(key, task_type, name_problem))
            for name, parse in (("memory", parse_memory), ("vcores", lambda v: _parse_int(v, 1)),
                                ("gpus", lambda v: _parse_int(v, 0)), ("timeout", lambda v: _parse_int(v, 0)),
                                ("restart-policy", _parse_restart_policy)):
                value = check(self._task_key(task_type, name), parse, _TASK_DEFAULTS[name])
                if name == "gpus" and value and instances:
                    total_gpus += value * instances
            if instances is None:
                unreadable.append(task_type)
                continue
            active[task_type] = instances
            max_instances = check(self._task_key(task_type, "max-instances"), _optional(_parse_int), "")
            if max_instances is not None and 0 <= max_instances < instances:
                issues.append(self._issue(key, instances, f"at most {max_instances} allowed by "
                                          f"tony.{task_type}.max-instances"))
            if self.command_for(task_type) is None:
                issues.append(self._issue(
                    self._task_key(task_type, "command"), None,
                    f"task type '{task_type}' has no command: set tony.{task_type}.command (command: of the "
                    "task), tony.containers.command (top-level command:), or executes"))

        for key, total, what in (("tony.task.max-total-instances", sum(active.values()), "instances"),
                                 ("tony.task.max-total-gpus", total_gpus, "GPUs")):
            limit = _parse_int_or_none(self.get(key))
            if limit is not None and 0 <= limit < total:
                issues.append(self._issue(key, self.get(key), f"the job asks for {total} {what} in all, "
                                          "more than this limit (-1 means no limit)"))

        ignored = set(self.untracked_types) | set(self.sidecar_types)
        if not active and not unreadable:
            issues.append(SpecIssue(
                "tasks", None, "no tracked task type: no type has instances > 0; set tony.<type>.instances "
                "(tasks.<type>.instances in YAML) for at least one type, e.g. tony.worker.instances=1",
                self.source))
        elif active and all(t in ignored for t in active):
            issues.append(self._issue(
                "tony.application.untracked.jobtypes", ",".join(active),
                "no tracked task type: every task type is untracked (tony.application.untracked.jobtypes) "
                "or a sidecar (tony.application.sidecar.jobtypes), so nothing decides when the job ends"))

        chief_type = "chief" if "chief" in active else "worker"
        stop_on_failure = self.stop_on_failure_types
        for task_type in active:
            key = self._task_key(task_type, "restart-policy")
            if (self.get(key) or "").strip().lower() != "task":
                continue
            if task_type == chief_type:
                issues.append(self._issue(key, "task", f"not allowed on the chief type '{task_type}': a failed "
                                          "chief always ends the session; use 'session'"))
            elif task_type in stop_on_failure:
                issues.append(self._issue(key, "task", f"not allowed on '{task_type}', a stop-on-failure type "
                                          "(tony.application.stop-on-failure-jobtypes): its failure always "
                                          "ends the session; use 'session'"))

        if framework == "pytorch" and active and not {"worker", "chief"} & set(active):
            issues.append(self._issue("tony.application.framework", framework,
                                      "pytorch needs a 'worker' or 'chief' task type: its first task is "
                                      "the rendezvous master (MASTER_ADDR)"))
        return issues

    # -- round trip and overrides ------------------------------------------------------------------

    def to_dict(self) -> dict:
        """A JSON-safe dict; :meth:`from_dict` turns it back into an equal JobSpec."""
        data = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            data[f.name] = dict(value) if isinstance(value, dict) else value
        return data

    @classmethod
    def from_dict(cls, data: Mapping) -> JobSpec:
        """The JobSpec a :meth:`to_dict` dict describes; unknown fields raise SpecError."""
        if not isinstance(data, Mapping):
            raise _error("job spec", type(data).__name__, "must be a mapping")
        return cls(**_known_fields(cls, data, "job spec"))

    def with_overrides(self, pairs: Iterable[str] | Mapping[str, object], origin: str = "--conf") -> JobSpec:
        """A copy with ``key=value`` overrides applied as :func:`apply_overrides` does."""
        parsed = _parse_pairs(pairs, origin)
        key_origin = dict(self.key_origin)
        key_origin.update({key: f"{origin} {key}" for key, _ in parsed})
        return dataclasses.replace(self, conf=_apply_pairs(self.conf, parsed), key_origin=key_origin)


def _parse_int_or_none(value: str | None) -> int | None:
    try:
        return _parse_int(value)
    except ValueError:
        return None


def _type_name_problem(task_type: str, framework: str | None, sidecars: list[str]) -> str | None:
    if not _TYPE_NAME.match(task_type):
        return ("task type names must match ^[a-z][a-z0-9_-]*$ (a lower-case letter, then lower-case letters, "
                "digits, '_' or '-'): the name becomes part of tony.<type>.* keys, TF_CONFIG and JOB_NAME")
    if task_type in _RESERVED_TYPES:
        return (f"'{task_type}' is reserved: tony.{task_type}.* keys configure the job as a whole, "
                "not a task type; choose another name")
    if framework == "tensorflow" and "-" in task_type and task_type not in sidecars:
        return ("TensorFlow job names allow letters, digits and '_' only (they appear in device names "
                "such as /job:<type>/task:0); use '_' instead of '-'")
    return None


def _unknown_message(key: str, allowed: Iterable[str], what: str, also: str = "") -> str:
    allowed = sorted(allowed)
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown {what}{hint}; allowed: {', '.join(allowed)}{also}"


# --------------------------------------------------------------------------------------------------
# Overrides


def _parse_pairs(pairs: Iterable[str] | Mapping[str, object], origin: str) -> list[tuple[str, str]]:
    issues, parsed = [], []
    if isinstance(pairs, Mapping):
        items = [(str(k).strip(), v) for k, v in pairs.items()]
    else:
        if isinstance(pairs, str):
            pairs = [pairs]
        items = []
        for pair in pairs:
            key, sep, value = str(pair).partition("=")
            if not sep or not key.strip():
                issues.append(SpecIssue(origin, pair, "must be key=value with a non-empty key"))
                continue
            items.append((key.strip(), value.strip()))
    for key, value in items:
        if not key:
            issues.append(SpecIssue(origin, value, "the key must not be empty"))
            continue
        try:
            parsed.append((key, _conf_value(value)))
        except ValueError as exc:
            issues.append(SpecIssue(f"{origin} {key}", value, str(exc)))
    if issues:
        raise SpecError(issues)
    return parsed


def _apply_pairs(conf: Mapping[str, str], parsed: list[tuple[str, str]]) -> dict[str, str]:
    result = dict(conf)
    for key, value in parsed:
        if key in MULTI_VALUE_KEYS and result.get(key):
            result[key] = f"{result[key]},{value}"
        else:
            result[key] = value
    return result


def apply_overrides(conf: Mapping[str, str], pairs: Iterable[str] | Mapping[str, object],
                    origin: str = "--conf") -> dict[str, str]:
    """A copy of ``conf`` with overrides applied, as TonY's client applies ``--conf``.

    ``pairs`` are ``"key=value"`` strings (split at the first ``=``; key and value are stripped) or a
    mapping. A key in MULTI_VALUE_KEYS gets the value appended, comma-joined, to its existing value;
    any other key is replaced. A pair without ``=`` or with an empty key raises SpecError naming it,
    with ``origin`` (default ``--conf``) as the key of the issue.
    """
    return _apply_pairs(conf, _parse_pairs(pairs, origin))


# --------------------------------------------------------------------------------------------------
# YAML / JSON documents

_TOP_LEVEL_CONF = {
    "name": "tony.application.name",
    "framework": "tony.application.framework",
    "queue": "tony.yarn.queue",
    "node_label": "tony.application.node-label",
    "tags": "tony.application.tags",
    "command": "tony.containers.command",
    "env": "tony.containers.envs",
    "execution_env": "tony.execution.envs",
    "resources": "tony.containers.resources",
    "retries": "tony.am.retry-count",
    "timeout": "tony.application.timeout",
}
_TOP_LEVEL_ARGS = ("executes", "task_params", "python_binary_path", "python_venv", "src_dir")
_TOP_LEVEL = (*_TOP_LEVEL_CONF, *_TOP_LEVEL_ARGS, "shell_env", "am", "tasks", "conf")
_AM_FIELDS = ("memory", "vcores", "gpus")
_TASK_FIELDS = {"instances": "instances", "memory": "memory", "vcores": "vcores", "gpus": "gpus",
                "command": "command", "node_label": "node-label", "restart_policy": "restart-policy",
                "timeout": "timeout", "docker_image": None}
_ENV_KEYS = ("tony.containers.envs", "tony.execution.envs")


class _DocumentReader:
    """Turns one YAML/JSON document into conf keys, remembering the user's spelling of each."""

    def __init__(self, source: str | None):
        self.source = source
        self.conf: dict[str, str] = {}
        self.origin: dict[str, str] = {}
        self.args: dict[str, object] = {}
        self.issues: list[SpecIssue] = []

    def problem(self, where: str, value: object, message: str) -> None:
        self.issues.append(SpecIssue(where, value, message, self.source))

    def set(self, key: str, value: object, where: str) -> None:
        if key in self.conf:
            first = self.origin.get(key, key)
            self.problem(where, value, f"sets {key} again (already set by {first}); keep one")
            return
        try:
            self.conf[key] = _env_value(value) if key in _ENV_KEYS else _conf_value(value)
        except ValueError as exc:
            self.problem(where, value, str(exc))
            return
        if where != key:
            self.origin[key] = where

    def mapping(self, value: object, where: str) -> Mapping | None:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problem(where, value, "must be a mapping")
            return None
        return value

    def read(self, data: Mapping) -> None:
        for key, value in data.items():
            if not isinstance(key, str):
                self.problem(str(key), None, "field names must be strings")
            elif key.startswith("x-"):
                continue  # a place for YAML anchors, as in compose files
            elif key.startswith("tony."):
                self.set(key, value, key)
            elif key in _TOP_LEVEL_CONF:
                self.set(_TOP_LEVEL_CONF[key], value, key)
            elif key in _TOP_LEVEL_ARGS:
                if value is None or (isinstance(value, (str, int, float)) and not isinstance(value, bool)):
                    self.args[key] = None if value is None else str(value)
                else:
                    self.problem(key, value, "must be a string")
            elif key == "shell_env":
                try:
                    self.args[key] = _shell_env(value)
                except ValueError as exc:
                    self.problem(key, value, str(exc))
            elif key == "conf":
                self.read_conf(value)
            elif key == "am":
                self.read_am(value)
            elif key == "tasks":
                self.read_tasks(value, explicit=self.flat_keys(data))
            else:
                self.problem(key, None, _unknown_message(key, _TOP_LEVEL, "field", ", flat tony.* keys and x-* keys"))

    @staticmethod
    def flat_keys(data: Mapping) -> set[str]:
        keys = {k for k in data if isinstance(k, str) and k.startswith("tony.")}
        if isinstance(data.get("conf"), Mapping):
            keys |= {str(k) for k in data["conf"]}
        return keys

    def read_conf(self, value: object) -> None:
        conf = self.mapping(value, "conf")
        for key, item in (conf or {}).items():
            if not isinstance(key, str) or not key.strip():
                self.problem(f"conf.{key}", None, "keys must be non-empty strings")
            else:
                self.set(key.strip(), item, key.strip())

    def read_am(self, value: object) -> None:
        am = self.mapping(value, "am")
        for name, item in (am or {}).items():
            if name in _AM_FIELDS:
                self.set(f"tony.am.{name}", item, f"am.{name}")
            else:
                self.problem(f"am.{name}", None, _unknown_message(str(name), _AM_FIELDS, "am field"))

    def read_tasks(self, value: object, explicit: set[str]) -> None:
        tasks = self.mapping(value, "tasks")
        images = []
        for task_type, fields in (tasks or {}).items():
            where = f"tasks.{task_type}"
            if not isinstance(task_type, str) or not task_type:
                self.problem(where, task_type, "task type names must be non-empty strings")
                continue
            fields = self.mapping(fields, where)
            if fields is None:
                continue
            instances_key = f"tony.{task_type}.instances"
            if "instances" not in fields and instances_key not in explicit:
                self.set(instances_key, 1, where)
            for name, item in fields.items():
                if name not in _TASK_FIELDS:
                    self.problem(f"{where}.{name}", None, _unknown_message(str(name), _TASK_FIELDS, "task field"))
                elif name == "docker_image":
                    self.set(f"tony.docker.{task_type}.image", item, f"{where}.{name}")
                    images.append(f"{where}.{name}")
                else:
                    self.set(f"tony.{task_type}.{_TASK_FIELDS[name]}", item, f"{where}.{name}")
        # An image only takes effect with docker enabled; asking for one in a task is asking for docker.
        if images and "tony.docker.enabled" not in self.conf:
            self.conf["tony.docker.enabled"] = "true"
            self.origin["tony.docker.enabled"] = images[0]


def _env_value(value: object) -> str:
    """env / execution_env / shell_env as TonY's comma-separated ``K=V`` list."""
    if isinstance(value, Mapping):
        entries = []
        for name, item in value.items():
            text = _conf_value(item)
            if "," in text:
                raise ValueError(f"the value of {name} contains ',', which separates entries in TonY's "
                                 "env lists; it cannot be passed this way")
            entries.append(f"{name}={text}")
        return ",".join(entries)
    if isinstance(value, (list, tuple)):
        if not all(isinstance(v, str) for v in value):
            raise ValueError("must be a mapping, a list of KEY=value strings, or a comma-separated string")
        return ",".join(value)
    if isinstance(value, str) or value is None:
        return value or ""
    raise ValueError("must be a mapping, a list of KEY=value strings, or a comma-separated string")


def _shell_env(value: object) -> dict[str, str]:
    """shell_env as a dict. It never goes through a comma-separated conf value, so commas are fine."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(name): _conf_value(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return {name: val for name, val in (_parse_env(entry).popitem() for entry in value if entry.strip())}
    if isinstance(value, str):
        return _parse_env(value)
    raise ValueError("must be a mapping, a list of KEY=value strings, or a comma-separated string")


def spec_from_mapping(data: Mapping, *, source: str | None = None) -> JobSpec:
    """The JobSpec a parsed YAML/JSON document describes (schema in this module's docstring).

    The document's keys are laid over TONY_DEFAULTS. Structural problems (unknown fields, a field
    set twice, a mapping where a value belongs) raise SpecError listing all of them; the values
    themselves are checked by :meth:`JobSpec.validate`.
    """
    if not isinstance(data, Mapping):
        raise _error("document", type(data).__name__, "the top level must be a mapping of fields", source)
    reader = _DocumentReader(source)
    reader.read(data)
    if reader.issues:
        raise SpecError(reader.issues)
    return JobSpec(conf={**TONY_DEFAULTS, **reader.conf}, source=source, key_origin=reader.origin,
                   **reader.args)


_LOADER = None


def _unique_key_loader():
    """A SafeLoader that refuses a key repeated in one mapping instead of keeping the last silently.
    Built on first use: executors read specs as JSON and never pay for importing YAML."""
    global _LOADER
    if _LOADER is None:
        import yaml

        class UniqueKeyLoader(yaml.SafeLoader):
            def construct_mapping(self, node, deep=False):
                seen = set()
                for key_node, _ in node.value:
                    if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node)
                    if key in seen:
                        raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                                key_node.start_mark)
                    seen.add(key)
                return super().construct_mapping(node, deep)

        _LOADER = UniqueKeyLoader
    return _LOADER


def _parse_yaml(text: str, source: str | None) -> object:
    import yaml

    try:
        return yaml.load(text, Loader=_unique_key_loader())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}" if mark else "document"
        column = f" (column {mark.column + 1})" if mark else ""
        raise _error(where, None, f"invalid YAML{column}: {exc.problem or exc.context}", source) from None
    except yaml.YAMLError as exc:
        raise _error("document", None, f"invalid YAML: {exc}", source) from None


def _parse_json(text: str, source: str | None) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _error(f"line {exc.lineno}", None, f"invalid JSON (column {exc.colno}): {exc.msg}", source) from None


# --------------------------------------------------------------------------------------------------
# Files


def _read_text(path: str | os.PathLike) -> str:
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise _error("spec", str(path), "no such file") from None
    except IsADirectoryError:
        raise _error("spec", str(path), "is a directory, not a spec file") from None
    except UnicodeDecodeError as exc:
        raise _error("spec", str(path), f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise _error("spec", str(path), f"cannot be read: {exc.strerror}") from None


def _is_text(path_or_text: str | os.PathLike) -> bool:
    if isinstance(path_or_text, os.PathLike):
        return False
    return "\n" in path_or_text or path_or_text.lstrip("\ufeff \t\r").startswith(("<", "{"))


def load_tony_xml(path_or_text: str | os.PathLike, *, source: str | None = None) -> dict[str, str]:
    """The properties of a Hadoop ``<configuration>`` XML file or text, in file order.

    Like Hadoop's Configuration: a property without a name is skipped, a name without a value reads
    as "", and ``<final>``, ``<source>`` and ``<description>`` are ignored; names and values may also
    be given as attributes. Text (anything starting with ``<``) is parsed as is; anything else is a
    path. ``source`` names the origin in messages (default: the path). Malformed XML raises SpecError.
    """
    if _is_text(path_or_text):
        return _xml_conf(str(path_or_text), source)
    return _xml_conf(_read_text(path_or_text), source or str(path_or_text))


def _xml_conf(text: str, source: str | None) -> dict[str, str]:
    try:
        root = ET.fromstring(text.lstrip("\ufeff"))
    except ET.ParseError as exc:
        line = exc.position[0] if exc.position else None
        raise _error(f"line {line}" if line else "document", None, f"malformed XML: {exc}", source) from None
    if root.tag != "configuration":
        raise _error("document", root.tag, "the root element must be <configuration>", source)
    conf: dict[str, str] = {}
    for prop in root.iter("property"):
        name = (prop.findtext("name") or prop.get("name") or "").strip()
        if not name:
            continue
        value = prop.findtext("value")
        if value is None:
            value = prop.get("value", "")
        conf[name] = value.strip()
    return conf


_FORMATS = {"yaml": "yaml", "yml": "yaml", "json": "json", "xml": "xml"}


def _format_of(fmt: str | None, path: str | None, text: str, source: str | None) -> str:
    if fmt is not None:
        if fmt.lower() not in _FORMATS:
            raise _error("fmt", fmt, "unknown spec format; allowed: yaml, json, xml", source)
        return _FORMATS[fmt.lower()]
    if path:
        name = Path(path).name.lower().removesuffix(".j2")
        suffix = name.rpartition(".")[2] if "." in name else ""
        if suffix in _FORMATS:
            return _FORMATS[suffix]
    return "xml" if text.lstrip("\ufeff \t\r\n").startswith("<") else "yaml"


def load_spec(path_or_text: str | os.PathLike, *, overrides: Iterable[str] | Mapping[str, object] = (),
              variables: Mapping[str, object] | None = None, fmt: str | None = None) -> JobSpec:
    """Load a job spec from a file or a text.

    A PathLike, or a string without a newline that does not start with ``<`` or ``{``, is a path;
    any other string is the spec itself. The text is rendered as a Jinja2 template with
    ``variables`` (see :func:`~tony_workflow.render.render_template`), parsed as ``fmt`` ("yaml",
    "json" or "xml"; by default guessed from the file extension, ``.yaml``, ``.yml``, ``.json`` or
    ``.xml`` with an optional ``.j2``, else from the text: ``<`` means XML, anything else YAML),
    laid over TONY_DEFAULTS, and ``overrides`` are applied as ``--conf`` pairs.

    The result is not validated; call :meth:`JobSpec.validate`. A missing file, a syntax error or a
    document that is not a mapping raises SpecError naming the source (and the line when known).
    """
    # Imported here: render needs SpecError from this module.
    from .render import render_template

    if _is_text(path_or_text):
        path, source, text = None, None, str(path_or_text)
    else:
        path = source = str(path_or_text)
        text = _read_text(path_or_text)
    text = render_template(text, variables, source=source)
    kind = _format_of(fmt, path, text, source)
    if kind == "xml":
        spec = JobSpec(conf={**TONY_DEFAULTS, **_xml_conf(text, source)}, source=source)
    else:
        data = _parse_json(text, source) if kind == "json" else _parse_yaml(text, source)
        if data is None:
            raise _error("document", None, "the spec is empty; expected a mapping of fields", source)
        spec = spec_from_mapping(data, source=source)
    if overrides:
        spec = spec.with_overrides(overrides)
    return spec
