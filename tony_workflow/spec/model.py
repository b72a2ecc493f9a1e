"""The job model: :class:`JobSpec`, :class:`TaskSpec`, :class:`Resources`.

A :class:`JobSpec` holds the effective flat TonY configuration (``conf``, the single source of
truth, round-tripped through :meth:`JobSpec.to_dict`) plus what TonY takes as client arguments.
It is the only reader of ``tony.*`` configuration: the AM, the executor and the backends use its
typed fields, never the raw strings. A JobSpec is immutable, so each typed field is parsed once, on
first use, and kept. Reading a field whose value is invalid raises :class:`SpecError`;
:meth:`JobSpec.validate` finds every such problem at once (:mod:`.validation`).
"""
from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from . import table, unhonoured, validation
from .data import DataInput, inputs_of
from .errors import SpecError, SpecIssue, error, unknown_message
from .horovod import implied_keys
from .keys import INSTANCES_KEY, task_key
from .notebook import NOTEBOOK_MODULE, is_notebook
from .overrides import apply_pairs, parse_overrides
from .table import TASK_KEY, TONY_DEFAULTS
from .values import (
    conf_value,
    parse_bool,
    parse_int,
    parse_memory,
    parse_restart_policy,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["JobSpec", "Resources", "TaskSpec", "needs_interpreter", "with_tensorboard_task"]

_T = TypeVar("_T")


class field_of(Generic[_T]):
    """A JobSpec field read from one key of the table (:mod:`.table`), parsed on first use and kept.
    An invalid value raises :class:`SpecError` naming the key as the user wrote it."""

    def __init__(self, key: table.Key[_T]):
        self.key = key
        self.attr = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.attr = name

    @overload
    def __get__(self, spec: None, owner: type) -> field_of[_T]: ...

    @overload
    def __get__(self, spec: JobSpec, owner: type) -> _T: ...

    def __get__(self, spec: JobSpec | None, owner: type) -> field_of[_T] | _T:
        if spec is None:
            return self
        cache = spec.__dict__
        if self.attr not in cache:
            cache[self.attr] = spec._typed(self.key.name, self.key.parse)
        value: _T = cache[self.attr]
        return value


@dataclass
class Resources:
    """What one container asks for: ``memory_mb`` (default 2048), ``vcores`` (default 1), ``gpus`` (default 0)."""

    memory_mb: int = 2048
    vcores: int = 1
    gpus: int = 0

    def __post_init__(self) -> None:
        issues = []
        for name, minimum in (("memory_mb", 1), ("vcores", 1), ("gpus", 0)):
            try:
                setattr(self, name, parse_int(getattr(self, name), minimum))
            except ValueError as exc:
                issues.append(SpecIssue(name, getattr(self, name), str(exc)))
        if issues:
            raise SpecError(issues)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Resources:
        return cls(**known_fields(cls, data, "resources"))


@dataclass
class TaskSpec:
    """One task type of a job.

    ``type`` is the type name (``worker``), ``instances`` how many tasks of it run, ``resources``
    what each container asks for. ``command`` is what each task runs, resolved by
    :meth:`JobSpec.command_for` (tony.<type>.command, then tony.containers.command, then executes),
    or None. ``node_label`` is tony.<type>.node-label, ``docker_image`` the image when
    tony.docker.enabled is true (tony.docker.<type>.image, else tony.docker.containers.image),
    ``restart_policy`` tony.<type>.restart-policy (``session``, the default, or ``task``),
    ``timeout_ms`` tony.<type>.timeout (0, the default, means none), ``spread``
    tony.<type>.spread (on YARN, the tasks go to distinct nodes where the cluster allows) and
    ``processes`` tony.<type>.processes (how many processes of the command each container runs,
    ``gpus`` read as the container's GPUs; default 1). ``min_instances`` is tony.<type>.min-instances
    (equal to ``instances`` unless set lower: then the type is elastic, see :attr:`elastic`).
    """

    type: str
    instances: int
    resources: Resources = field(default_factory=Resources)
    command: str | None = None
    node_label: str | None = None
    docker_image: str | None = None
    restart_policy: str = "session"
    timeout_ms: int = 0
    spread: bool = False
    processes: int = 1
    min_instances: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.resources, Mapping):
            self.resources = Resources.from_dict(self.resources)
        issues = []
        for name, parse in (("instances", lambda v: parse_int(v, 0)),
                            ("restart_policy", parse_restart_policy),
                            ("timeout_ms", lambda v: parse_int(v, 0)), ("spread", parse_bool),
                            ("processes", lambda v: parse_int(v, 1)),
                            ("min_instances", lambda v: v if v is None else parse_int(v, 1))):
            try:
                setattr(self, name, parse(getattr(self, name)))
            except ValueError as exc:
                issues.append(SpecIssue(f"{self.type}.{name}", getattr(self, name), str(exc)))
        if issues:
            raise SpecError(issues)

        if self.min_instances is None or self.min_instances > self.instances:
            self.min_instances = self.instances

    @property
    def elastic(self) -> bool:
        """Whether the type goes on without a lost task (PyTorch, tony.<type>.min-instances below
        instances): the others train on while it is replaced."""
        return (self.min_instances or 0) < self.instances

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskSpec:
        return cls(**known_fields(cls, data, "task"))


def known_fields(cls: type[DataclassInstance], data: Mapping[str, Any], what: str) -> dict[str, Any]:
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise SpecError(SpecIssue(str(k), None, unknown_message(str(k), names, f"{what} field"))
                        for k in unknown)
    return dict(data)


#: TonY's TensorBoard task for tony.application.tensorboard-log-dir: one instance, and these
#: resources unless the job sets its own.
TENSORBOARD_TASK = {"vcores": "2", "memory": "2g", "gpus": "0"}


def with_tensorboard_task(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with TonY's TensorBoard task when tony.application.tensorboard-log-dir names a log
    directory: a sidecar type ``tensorboard`` of one instance, which serves that directory
    (:class:`tony_workflow.task.executor.TaskExecutor`), as TonY's client adds it."""
    if not (conf.get(table.TENSORBOARD_LOG_DIR.name) or "").strip():
        return conf
    conf = dict(conf)
    conf[task_key("tensorboard", "instances")] = "1"
    for name, value in TENSORBOARD_TASK.items():
        conf.setdefault(task_key("tensorboard", name), value)
    key = table.SIDECAR_TYPES.name
    sidecars = [t.strip() for t in (conf.get(key, TONY_DEFAULTS.get(key)) or "").split(",") if t.strip()]
    if "tensorboard" not in sidecars:
        conf[key] = ",".join([*sidecars, "tensorboard"])
    return conf


def needs_interpreter(executes: str) -> bool:
    """Whether ``executes`` is a Python script or interpreter options (``train.py --lr 0.1``,
    ``-m pkg.train``) rather than a command line of its own (``python train.py``, ``bash run.sh``,
    ``./run``): only the first can run under no interpreter named."""
    try:
        words = shlex.split(executes)
    except ValueError:
        words = executes.split()
    return bool(words) and (words[0].endswith(".py") or words[0].startswith("-"))


@dataclass(frozen=True)
class JobSpec:
    """A job: its effective TonY configuration plus what TonY takes as client arguments.

    ``conf`` is the full flat ``tony.*`` configuration (TONY_DEFAULTS, then the file, then overrides)
    and the source of truth: every typed property is derived from it. A key missing from ``conf``
    reads as its TONY_DEFAULTS value, so a hand-built JobSpec need not repeat the defaults.

    ``executes`` is what the default command runs, with ``task_params`` as its arguments: with
    ``python_binary_path`` as its interpreter, put in front of it as TonY does; without one, a
    script (``train.py``) or interpreter options (``-m pkg``) get the job's ``python``, and any
    other command line (TonY's ``python train.py``, ``bash run.sh``) runs as written. ``python_venv`` is a
    virtualenv directory or zip and ``src_dir`` a source directory, both shipped to every container.
    ``shell_env`` is extra environment for the user process. ``source`` is the file the spec came
    from and ``key_origin`` maps conf keys to the user's spelling (``tasks.worker.memory``), both
    only for messages. ``identity`` names the workflow task run that submitted the job
    (:func:`tony_workflow.context.identity`, keyed by the deployment's secret): only a front end
    sets it (:meth:`with_identity`), never a spec, and a retry of that run finds the job by it.
    ``submitter`` is the user who submitted a job that runs as another (tony.application.proxy-user):
    set by the backend as it submits, never by a spec, and kept in the job's history record.
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
    identity: str | None = None
    submitter: str | None = None

    def __post_init__(self) -> None:
        issues = []
        for name in ("conf", "shell_env", "key_origin"):
            value = getattr(self, name)
            if not isinstance(value, Mapping):
                issues.append(SpecIssue(name, value, "must be a mapping of strings to strings", self.source))
                continue
            converted = {}
            for key, item in value.items():
                try:
                    converted[str(key)] = conf_value(item)
                except ValueError as exc:
                    issues.append(SpecIssue(f"{name}.{key}", item, str(exc), self.source))
            object.__setattr__(self, name, with_tensorboard_task(converted) if name == "conf" else converted)
        for name in ("executes", "task_params", "python_binary_path", "python_venv", "src_dir", "source", "identity",
                     "submitter"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                issues.append(SpecIssue(name, value, "must be a string or null", self.source))
        if issues:
            raise SpecError(issues)

    # -- reading conf ------------------------------------------------------------------------------

    def get(self, key: str, default: str | None = None) -> str | None:
        """The conf value of ``key``: from ``conf``, else TONY_DEFAULTS, else ``default``. Raw text: the
        typed fields below are what the runtime reads."""
        implied = self._implied
        if key in implied:
            return implied[key]
        if key in self.conf:
            return self.conf[key]
        return TONY_DEFAULTS.get(key, default)

    @cached_property
    def _implied(self) -> dict[str, str]:
        """Keys TonY adds to the job's own (a Horovod job's driver task: :func:`.horovod.implied_keys`)."""
        return implied_keys(self.conf)

    def display(self, key: str) -> str:
        """``key`` as the user spelled it (``tasks.worker.memory (tony.worker.memory)``), for messages."""
        origin = self.key_origin.get(key)
        if not origin or origin == key:
            return key
        return origin if key in origin else f"{origin} ({key})"

    def issue(self, key: str, value: object, message: str) -> SpecIssue:
        """A SpecIssue about ``key``, named as the user spelled it, with this spec's source."""
        return SpecIssue(self.display(key), value, message, self.source)

    def _typed(self, key: str, parse: Callable[[Any], _T], fallback: str | None = None) -> _T:
        raw = self.get(key, fallback)
        try:
            return parse(raw)
        except ValueError as exc:
            raise SpecError([self.issue(key, raw, str(exc))]) from None

    def _task_value(self, task_type: str, name: str) -> Any:
        """tony.<type>.<name> as its entry of the per-type table reads it (its default when unset)."""
        setting = TASK_KEY[name]
        return self._typed(setting.key(task_type), setting.parse, setting.default)

    def _text(self, key: str) -> str | None:
        value = (self.get(key) or "").strip()
        return value or None

    # -- job-wide properties -----------------------------------------------------------------------

    @cached_property
    def name(self) -> str:
        """tony.application.name."""
        return self.get("tony.application.name") or ""

    @cached_property
    def framework(self) -> str:
        """tony.application.framework, lower-cased."""
        return (self.get("tony.application.framework") or "").strip().lower()

    @cached_property
    def warnings(self) -> list[str]:
        """What the job's user should know but that does not stop it: the framework's caveat
        (:data:`~tony_workflow.frameworks.CAVEATS`), and TonY's keys it sets that have no effect
        here (:mod:`.unhonoured`). Shown with the job's status everywhere."""
        from ..frameworks import CAVEATS
        caveat = CAVEATS.get(self.framework)
        return [*([caveat] if caveat else []), *unhonoured.warnings(self.conf)]

    @cached_property
    def application_type(self) -> str:
        """tony.application.type (the YARN application type)."""
        return self.get("tony.application.type") or ""

    @cached_property
    def queue(self) -> str:
        """tony.yarn.queue."""
        return self.get("tony.yarn.queue") or ""

    @cached_property
    def context(self) -> dict[str, str]:
        """Where the job came from: the fields its ``tony.context.*`` keys set, by name
        (:mod:`tony_workflow.context`); empty for a job submitted by hand."""
        from ..context import from_conf
        return from_conf(self.conf)

    # Fields read from one key of the table (.table: its default, parser, bound and meaning).
    node_label = field_of(table.NODE_LABEL)
    am_node_label = field_of(table.AM_NODE_LABEL)
    tags = field_of(table.TAGS)
    proxy_user = field_of(table.PROXY_USER)
    view_acls = field_of(table.VIEW_ACLS)
    modify_acls = field_of(table.MODIFY_ACLS)
    untracked_types = field_of(table.UNTRACKED_TYPES)
    prepare_stage = field_of(table.PREPARE_STAGE)
    training_stage = field_of(table.TRAINING_STAGE)
    sidecar_types = field_of(table.SIDECAR_TYPES)
    tensorboard_log_dir = field_of(table.TENSORBOARD_LOG_DIR)
    stop_on_failure_types = field_of(table.STOP_ON_FAILURE_TYPES)
    fail_on_worker_failure = field_of(table.FAIL_ON_WORKER_FAILURE)
    retry_count = field_of(table.RETRY_COUNT)
    heartbeat_interval_ms = field_of(table.HEARTBEAT_INTERVAL_MS)
    max_missed_heartbeats = field_of(table.MAX_MISSED_HEARTBEATS)
    tensorboard_enabled = field_of(table.TENSORBOARD_ENABLED)
    notebook_idle_timeout_ms = field_of(table.NOTEBOOK_IDLE_TIMEOUT_MS)
    execution_timeout_ms = field_of(table.EXECUTION_TIMEOUT_MS)
    checkpoint_location = field_of(table.CHECKPOINT_LOCATION)
    reclaim_retry_count = field_of(table.RECLAIM_RETRY_COUNT)
    priority = field_of(table.PRIORITY)
    docker_mounts = field_of(table.DOCKER_MOUNTS)
    lineage_inputs = field_of(table.LINEAGE_INPUTS)
    lineage_outputs = field_of(table.LINEAGE_OUTPUTS)

    @property
    def data_inputs(self) -> dict[str, DataInput]:
        """The job's named inputs (``tony.data.<input>.*``), those without problems."""
        return inputs_of(self.conf)[0]

    docker_enabled = field_of(table.DOCKER_ENABLED)

    def docker_image(self, task_type: str) -> str | None:
        """The image of ``task_type``'s containers (``am`` for the ApplicationMaster's) when
        tony.docker.enabled: tony.docker.<type>.image, else tony.docker.containers.image."""
        if not self.docker_enabled:
            return None
        return self._text(f"tony.docker.{task_type}.image") or self._text("tony.docker.containers.image")

    yarn_python = field_of(table.YARN_PYTHON)
    yarn_base_python = field_of(table.YARN_BASE_PYTHON)
    yarn_environment = field_of(table.YARN_ENVIRONMENT)
    yarn_environment_packages = field_of(table.YARN_ENVIRONMENT_PACKAGES)
    checkpoint_on_store_failure = field_of(table.CHECKPOINT_ON_STORE_FAILURE)
    am_max_attempts = field_of(table.AM_MAX_ATTEMPTS)
    am_liveness_timeout_ms = field_of(table.AM_LIVENESS_TIMEOUT_MS)
    am_startup_timeout_ms = field_of(table.AM_STARTUP_TIMEOUT_MS)
    heartbeat_timeout_ms = field_of(table.HEARTBEAT_TIMEOUT_MS)
    progress_timeout_ms = field_of(table.PROGRESS_TIMEOUT_MS)
    metrics_interval_ms = field_of(table.METRICS_INTERVAL_MS)
    gpu_metrics_enabled = field_of(table.GPU_METRICS_ENABLED)

    @cached_property
    def history_location(self) -> str | None:
        """tony.history.location; None when empty or tony-default.xml's placeholder (the backend's place)."""
        value = self._text("tony.history.location")
        return None if value in (None, "/path/to/tony-history") else value

    history_retention_s = field_of(table.HISTORY_RETENTION_S)

    @cached_property
    def history_timezone(self) -> str:
        """tony.history.finished-dir-timezone: the zone of the history's day directories."""
        return self._text("tony.history.finished-dir-timezone") or "UTC"

    application_timeout_ms = field_of(table.APPLICATION_TIMEOUT_MS)
    allocation_timeout_ms = field_of(table.ALLOCATION_TIMEOUT_MS)
    gang_hold_timeout_ms = field_of(table.GANG_HOLD_TIMEOUT_MS)
    gang_backoff_ms = field_of(table.GANG_BACKOFF_MS)
    gang_line_dir = field_of(table.GANG_LINE_DIR)
    registration_timeout_ms = field_of(table.REGISTRATION_TIMEOUT_MS)
    container_command = field_of(table.CONTAINER_COMMAND)
    single_node_asked = field_of(table.SINGLE_NODE)
    enable_preprocess = field_of(table.ENABLE_PREPROCESS)
    container_env = field_of(table.CONTAINER_ENV)
    execution_env = field_of(table.EXECUTION_ENV)
    container_resources = field_of(table.CONTAINER_RESOURCES)

    @cached_property
    def am(self) -> Resources:
        """The ApplicationMaster's container: tony.am.memory, tony.am.vcores, tony.am.gpus."""
        return Resources(memory_mb=self._typed("tony.am.memory", parse_memory),
                         vcores=self._typed("tony.am.vcores", lambda v: parse_int(v, 1)),
                         gpus=self._typed("tony.am.gpus", lambda v: parse_int(v, 0)))

    # -- task types --------------------------------------------------------------------------------

    def declared_types(self) -> list[str]:
        """Every type with a tony.<type>.instances key, in first-seen order."""
        types = []
        for key in [*self.conf, *self._implied]:
            match = INSTANCES_KEY.match(key)
            if match and match.group(1) not in types:
                types.append(match.group(1))
        return types

    @cached_property
    def tasks(self) -> dict[str, TaskSpec]:
        """One TaskSpec per type with tony.<type>.instances > 0, in first-seen order."""
        tasks = {}
        for task_type in self.declared_types():
            instances = self._task_value(task_type, "instances")
            if instances > 0:
                tasks[task_type] = self._task_spec(task_type, instances)
        return tasks

    @property
    def single_node(self) -> bool:
        """TonY's single-node job: no task instances, the command run in the ApplicationMaster's
        own container (:mod:`tony_workflow.am.single_node`)."""
        return not self.tasks

    def _task_spec(self, task_type: str, instances: int) -> TaskSpec:
        return TaskSpec(
            type=task_type,
            instances=instances,
            resources=Resources(
                memory_mb=self._task_value(task_type, "memory"),
                vcores=self._task_value(task_type, "vcores"),
                gpus=self._task_value(task_type, "gpus")),
            command=self.command_for(task_type),
            node_label=self._task_value(task_type, "node-label"),
            docker_image=self.docker_image(task_type),
            restart_policy=self._task_value(task_type, "restart-policy"),
            timeout_ms=self._task_value(task_type, "timeout"),
            spread=self._task_value(task_type, "spread"),
            processes=self.processes(task_type),
            min_instances=self._task_value(task_type, "min-instances"),
        )

    def processes(self, task_type: str) -> int:
        """tony.<type>.processes as a count: ``gpus`` is the type's tony.<type>.gpus (1 without GPUs;
        validation refuses that case)."""
        value = self._task_value(task_type, "processes")
        if value == "gpus":
            return max(1, int(self._task_value(task_type, "gpus")))
        return int(value)

    @cached_property
    def torch_agent(self) -> bool:
        """Whether a PyTorch job's tasks run under torch's elastic agent: when some type runs more
        than one process per container, or the job is elastic. The agents of all containers
        rendezvous together, so then every task of the job's ranked types runs under one."""
        return self.framework == "pytorch" and (any(t.processes > 1 for t in self.tasks.values())
                                                or (self.elastic and not self.regroup_in_place))

    @property
    def regroup_in_place(self) -> bool:
        """An elastic job whose trainers re-form their group themselves (tony.elastic.regroup)."""
        return self.elastic and self.elastic_regroup == "in-place"

    @cached_property
    def elastic_types(self) -> list[str]:
        """The types that go on without a lost task (tony.<type>.min-instances below instances;
        PyTorch jobs only, as validation holds)."""
        return [t for t, ts in self.tasks.items() if ts.elastic] if self.framework == "pytorch" else []

    @property
    def elastic(self) -> bool:
        """A PyTorch job whose ranked tasks rendezvous elastically under torch's agent."""
        return bool(self.elastic_types)

    @cached_property
    def elastic_nodes(self) -> tuple[int, int]:
        """An elastic group's size in containers (torchrun's nodes): the ranked types'
        min-instances and instances summed, (fewest, most)."""
        from ..frameworks import RANKED_TYPES

        ranked = [ts for t, ts in self.tasks.items() if t in RANKED_TYPES]
        return sum(ts.min_instances or ts.instances for ts in ranked), sum(ts.instances for ts in ranked)

    elastic_fallback_timeout_ms = field_of(table.ELASTIC_FALLBACK_TIMEOUT_MS)
    elastic_max_membership_changes = field_of(table.ELASTIC_MAX_MEMBERSHIP_CHANGES)
    elastic_regroup = field_of(table.ELASTIC_REGROUP)

    def _active_types(self) -> list[str]:
        """Types with instances > 0, skipping unreadable counts (validate() reports those)."""
        active = []
        for task_type in self.declared_types():
            try:
                if parse_int(self.get(task_key(task_type, "instances")), 0) > 0:
                    active.append(task_type)
            except ValueError:
                pass
        return active

    @cached_property
    def chief(self) -> tuple[str, int]:
        """The chief task: ``("chief", 0)`` when there is a chief type, else a notebook's, else ``("worker", 0)``."""
        return next(((t, 0) for t in ("chief", "notebook") if t in self._active_types()), ("worker", 0))

    @cached_property
    def tracked_types(self) -> list[str]:
        """Task types that decide when the job ends: neither untracked nor sidecar."""
        ignored = set(self.untracked_types) | set(self.sidecar_types)
        return [t for t in self._active_types() if t not in ignored]

    def command_for(self, task_type: str, python: str | None = None) -> str | None:
        """The command tasks of ``task_type`` run, with TonY's precedence.

        tony.<type>.command, else tony.containers.command, else ``[<python>] <executes> <task_params>``
        where python is the ``python`` argument (the executor passes the interpreter it resolved
        from ``python_venv``/``python_binary_path``), else ``python_binary_path``, else ``python``;
        None when none of these is set. As in TonY the interpreter goes in front of ``executes``
        when ``python_binary_path`` is given; otherwise only where ``executes`` cannot be a command
        line of its own (:func:`needs_interpreter`).
        """
        command = self._text(task_key(task_type, "command")) or self.container_command
        if command:
            return command
        if not self.executes:
            return None
        notebook = is_notebook(self.executes)  # run by the runtime, in a kernel of the task's interpreter
        parts = [f"-m {NOTEBOOK_MODULE} {self.executes}" if notebook else self.executes]
        if self.python_binary_path or notebook or needs_interpreter(self.executes):
            parts.insert(0, shlex.quote(python) if python else (self.python_binary_path or "python"))
        if self.task_params:
            parts.append(self.task_params)
        return " ".join(parts)

    # -- validation --------------------------------------------------------------------------------

    def validate(self) -> None:
        """Check the whole spec; raise SpecError listing every problem found (not just the first)."""
        issues = validation.problems(self)
        if issues:
            raise SpecError(issues)

    # -- round trip and overrides ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict; :meth:`from_dict` turns it back into an equal JobSpec."""
        data = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            data[f.name] = dict(value) if isinstance(value, dict) else value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        """The JobSpec a :meth:`to_dict` dict describes; unknown fields raise SpecError."""
        if not isinstance(data, Mapping):
            raise error("job spec", type(data).__name__, "must be a mapping")
        return cls(**known_fields(cls, data, "job spec"))

    def with_identity(self, key: bytes | None, server: str = "") -> JobSpec:
        """A copy that carries the identity of the workflow task run its context names, keyed with
        ``key`` and naming ``server`` (:func:`tony_workflow.context.identity`); none without a key
        or without such a context."""
        from ..context import identity
        return dataclasses.replace(self, identity=identity(self.context, key, server))

    def with_overrides(self, pairs: Iterable[str] | Mapping[str, object], origin: str = "--conf") -> JobSpec:
        """A copy with ``key=value`` overrides applied as :func:`apply_overrides` does."""
        parsed = parse_overrides(pairs, origin)
        key_origin = dict(self.key_origin)
        key_origin.update({key: f"{origin} {key}" for key, _ in parsed})
        return dataclasses.replace(self, conf=apply_pairs(self.conf, parsed), key_origin=key_origin)
