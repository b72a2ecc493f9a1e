"""Checks of a whole :class:`~.model.JobSpec`: every problem found at once, each naming the key as the
user spelled it, the bad value and what is allowed.

Kept apart from the model so that the model reads as what a job *is*, and this module as the
rules a job must keep (typed keys, task type names, TonY's constraints between keys).
"""
from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ..frameworks import RANKED_TYPES
from .data import inputs_of
from .errors import SpecIssue
from .groups import problems as group_problems
from .keys import (
    CLIENT_KEY_REASON,
    ENV_NAME,
    KNOWN_TYPES,
    LOCAL_KEY_REASON,
    RESERVED_TYPES,
    TYPE_NAME,
    task_key,
)
from .table import KEYS, TASK_DEFAULTS, TASK_KEY, TASK_KEYS, UNTYPED_BOOLEANS, UNTYPED_INTEGERS, known_keys, unknown_key
from .unhonoured import refusals
from .values import (
    parse_bool,
    parse_framework,
    parse_int,
    parse_int_or_none,
    parse_memory,
)

__all__ = ["MAX_COMMAND_BYTES", "MAX_INSTANCES", "near_miss", "one_edit_apart", "problems", "type_name_problem"]

#: Instances of one task type: far beyond what one job runs on any cluster, and refused before
#: anything is built per instance.
MAX_INSTANCES = 10_000
#: A task's command runs as one ``bash -c`` argument, which Linux caps at 128 KiB (MAX_ARG_STRLEN).
MAX_COMMAND_BYTES = 128 * 1024 - 1

_T = TypeVar("_T")


class _Check(Protocol):
    """The ``check`` of :func:`problems`: ``parse`` applied to a key's value, or None with the
    problem recorded."""

    def __call__(self, key: str, parse: Callable[[Any], _T], fallback: str | None = None) -> _T | None: ...


class JobSpec(Protocol):
    """What the rules read of a job spec (:class:`.model.JobSpec`, whose ``validate()`` applies
    them: named here by what it offers, so that neither module imports the other)."""

    @property
    def conf(self) -> dict[str, str]: ...
    @property
    def source(self) -> str | None: ...
    @property
    def shell_env(self) -> dict[str, str]: ...
    @property
    def tags(self) -> Any: ...
    @property
    def prepare_stage(self) -> Any: ...
    @property
    def training_stage(self) -> Any: ...
    @property
    def sidecar_types(self) -> Any: ...
    @property
    def stop_on_failure_types(self) -> Any: ...
    @property
    def untracked_types(self) -> Any: ...
    @property
    def single_node_asked(self) -> Any: ...
    @property
    def container_command(self) -> Any: ...
    @property
    def docker_mounts(self) -> Any: ...
    def get(self, key: str, default: str | None = None) -> str | None: ...
    def issue(self, key: str, value: object, message: str) -> SpecIssue: ...
    def declared_types(self) -> list[str]: ...
    def docker_image(self, task_type: str) -> str | None: ...
    def command_for(self, task_type: str, python: str | None = None) -> str | None: ...


def problems(spec: JobSpec) -> list[SpecIssue]:
    """Every problem of ``spec``, each naming the key as the user wrote it; empty when it is usable."""
    issues: list[SpecIssue] = []

    def check(key: str, parse: Callable[[Any], _T], fallback: str | None = None) -> _T | None:
        raw = spec.get(key, fallback)
        try:
            return parse(raw)
        except ValueError as exc:
            issues.append(spec.issue(key, raw, str(exc)))
            return None

    issues.extend(_unknown_keys(spec))
    issues.extend(spec.issue(key, value, why) for key, value, why in refusals(spec.conf))
    issues.extend(spec.issue(key, value, why) for key, value, why in group_problems(spec.conf, spec.declared_types()))
    issues.extend(spec.issue(key, value, why) for key, value, why in inputs_of(spec.conf)[1])
    framework = check("tony.application.framework", parse_framework)
    for k in KEYS:  # every key of the table, with its own parser and bound
        check(k.name, k.parse)
    for name in UNTYPED_BOOLEANS:
        check(name, parse_bool)
    for name in UNTYPED_INTEGERS:
        check(name, parse_int)
    check("tony.am.memory", parse_memory)
    check("tony.am.vcores", lambda v: parse_int(v, 1))
    check("tony.am.gpus", lambda v: parse_int(v, 0))
    for name in spec.shell_env:
        if not ENV_NAME.match(name):
            issues.append(SpecIssue("shell_env", name, "names must be valid environment variable names "
                                    "(letters, digits and '_', not starting with a digit)", spec.source))

    if check("tony.docker.enabled", parse_bool):
        issues.extend(_docker_problems(spec))
    issues.extend(_tag_problems(spec))
    issues.extend(_check_tasks(spec, check, framework))
    return issues


def _output_problems(spec: JobSpec, active: dict[str, int]) -> list[SpecIssue]:
    """``tony.output.tasks`` names tasks the job runs."""
    raw = (spec.get("tony.output.tasks") or "").strip()
    names = [v.strip() for v in raw.split(",") if v.strip()]
    if not active or names in ([], ["none"], ["chief"]):
        return []
    tasks = ", ".join(f"{t} (0 to {n - 1})" if n > 1 else f"{t} (0)" for t, n in active.items())
    strangers = []
    for name in names:
        task_type, colon, index = name.partition(":")
        if task_type not in active or (colon and not (index.isdigit() and int(index) < active[task_type])):
            strangers.append(name)
    if not strangers:
        return []
    return [spec.issue("tony.output.tasks", raw, f"names {', '.join(strangers)}, which the job does not run; "
                       f"task ids or types of its tasks: {tasks}; none for none; empty for the chief")]


def _tag_problems(spec: JobSpec) -> list[SpecIssue]:
    """The user's tags and the application type must fit YARN's limits beside TonY's own; the
    context's source must be one a context is made of (:mod:`tony_workflow.context`)."""
    from ..context import IDENTITY_TAG, MAX_TAG_LENGTH, MAX_TAGS, SOURCES, TONY_TAGS
    issues = []
    tags = spec.tags
    room = MAX_TAGS - TONY_TAGS
    if len(tags) > room:
        issues.append(spec.issue("tony.application.tags", ",".join(tags),
                                 f"{len(tags)} tags; YARN takes at most {MAX_TAGS} per application and TonY "
                                 f"uses {TONY_TAGS} of them (tony, the gang's, the context's): at most {room}"))
    for tag in tags:
        if len(tag) > MAX_TAG_LENGTH or not tag.isascii() or not tag.isprintable():
            issues.append(spec.issue("tony.application.tags", tag, f"a tag is at most {MAX_TAG_LENGTH} "
                                     "printable ASCII characters (YARN's limit)"))
        elif tag.lower().startswith(IDENTITY_TAG + ":"):
            issues.append(spec.issue("tony.application.tags", tag, f"a tag other than {IDENTITY_TAG}:…, which names "
                                     "the workflow run that submitted a job and is given by Airflow or "
                                     "Azkaban only"))
    app_type = (spec.get("tony.application.type") or "").strip()
    if app_type and (len(app_type) > 20 or not app_type.isascii() or not app_type.isprintable() or "," in app_type):
        issues.append(spec.issue("tony.application.type", app_type, "at most 20 printable ASCII characters and no "
                                 "comma (YARN cuts a longer type, and lists types separated by commas)"))
    source = (spec.get("tony.context.source") or "").strip()
    if source and source not in SOURCES:
        issues.append(spec.issue("tony.context.source", source, f"one of {', '.join(SOURCES)} (or empty: the "
                                 "source whose tony.context.* keys are set)"))
    return issues


def _check_tasks(spec: JobSpec, check: _Check, framework: str | None) -> list[SpecIssue]:
    issues: list[SpecIssue] = []
    active: dict[str, int] = {}
    unreadable = []
    total_gpus = 0
    for task_type in spec.declared_types():
        key = task_key(task_type, "instances")
        instances = check(key, TASK_KEY["instances"].parse)
        if instances == 0:
            continue
        name_problem = (type_name_problem(task_type, framework, spec.sidecar_types)
                        or near_miss(task_type, spec.declared_types()))
        if name_problem:
            issues.append(spec.issue(key, task_type, name_problem))
        for setting in TASK_KEYS:
            if not setting.checked:
                continue
            value = check(setting.key(task_type), setting.parse, setting.default)
            if setting.name == "gpus" and isinstance(value, int) and value and instances:
                total_gpus += value * instances
        if instances is None:
            unreadable.append(task_type)
            continue
        active[task_type] = instances
        issues.extend(_processes_problems(spec, check, task_type, framework))
        issues.extend(_elastic_problems(spec, check, task_type, instances, framework))
        max_instances = check(task_key(task_type, "max-instances"), TASK_KEY["max-instances"].parse, "")
        if max_instances is not None and 0 <= max_instances < instances:
            issues.append(spec.issue(key, instances, f"at most {max_instances} allowed by "
                                      f"tony.{task_type}.max-instances"))
        if instances > MAX_INSTANCES:
            issues.append(spec.issue(key, instances, f"more instances than any cluster runs for one job (at most "
                                     f"{MAX_INSTANCES} per task type)"))
        command = spec.command_for(task_type)
        serves_only = task_type == "tensorboard" and task_type in spec.sidecar_types  # TensorBoard alone
        if command is None and not serves_only:
            issues.append(spec.issue(
                task_key(task_type, "command"), None,
                f"task type '{task_type}' has no command: set tony.{task_type}.command (command: of the "
                "task), tony.containers.command (top-level command:), or executes"))
        elif command is not None and len(command.encode()) > MAX_COMMAND_BYTES:
            own = (spec.get(task_key(task_type, "command")) or "").strip()
            where = (task_key(task_type, "command") if own else
                     "tony.containers.command" if spec.container_command else "task_params")
            issues.append(spec.issue(where, command, f"the command of '{task_type}' is {len(command.encode())} "
                                     f"bytes; a command line carries at most {MAX_COMMAND_BYTES} (put long "
                                     "arguments in a file the task reads)"))

    for key, total, what in (("tony.task.max-total-instances", sum(active.values()), "instances"),
                             ("tony.task.max-total-gpus", total_gpus, "GPUs")):
        limit = parse_int_or_none(spec.get(key))
        if limit is not None and 0 <= limit < total:
            issues.append(spec.issue(key, spec.get(key), f"the job asks for {total} {what} in all, "
                                      "more than this limit (-1 means no limit)"))

    ignored = set(spec.untracked_types) | set(spec.sidecar_types)
    if not active and not unreadable and spec.command_for("am") is None:
        issues.append(SpecIssue(
            "tasks", None, "no tracked task type: no type has instances > 0; set tony.<type>.instances "
            "(tasks.<type>.instances in YAML) for at least one type, e.g. tony.worker.instances=1 (or give a "
            "single-node job, run in the ApplicationMaster, its command: executes or tony.am.command)",
            spec.source))
    elif active and spec.single_node_asked:
        issues.append(spec.issue("tony.application.single-node", "true", "a single-node job runs its command in "
                                 "the ApplicationMaster and has no task instances, but this job has "
                                 + ", ".join(f"{t} {n}" for t, n in active.items())))
    elif active and all(t in ignored for t in active):
        issues.append(spec.issue(
            "tony.application.untracked.jobtypes", ",".join(active),
            "no tracked task type: every task type is untracked (tony.application.untracked.jobtypes) "
            "or a sidecar (tony.application.sidecar.jobtypes), so nothing decides when the job ends"))

    for key, stage in (("tony.application.prepare-stage", spec.prepare_stage),
                       ("tony.application.training-stage", spec.training_stage)):
        strangers = [t for t in stage if t not in active]
        if strangers and active:
            issues.append(spec.issue(key, ",".join(stage), f"names {', '.join(strangers)}, which the job does not "
                                     f"run (its task types: {', '.join(active)})"))
    issues.extend(_output_problems(spec, active))
    if both := sorted(set(spec.prepare_stage) & set(spec.training_stage)):
        issues.append(spec.issue("tony.application.training-stage", ",".join(spec.training_stage),
                                 f"{', '.join(both)} cannot be in both stages"))
    if framework == "horovod":
        given = sorted(k for k in spec.conf if k.startswith("tony.driver."))
        debug = parse_bool(spec.get("tony.horovod.driver.mode.debug") or "false")
        if given and not debug:
            issues.append(spec.issue(given[0], spec.conf[given[0]], "a Horovod job's driver task is tony-workflow's "
                                     "(Horovod's rendezvous server); give one of your own only with "
                                     "tony.horovod.driver.mode.debug=true"))
        elif debug and not (spec.get("tony.driver.command") or "").strip():
            issues.append(spec.issue("tony.horovod.driver.mode.debug", "true", "the job runs its own Horovod "
                                     "driver: set tony.driver.instances and tony.driver.command"))
    if framework == "standalone" and sum(active.values()) > 1:
        tasks = ", ".join(f"{t} {n}" for t, n in active.items())
        issues.append(spec.issue("tony.application.framework", framework,
                                 f"a standalone job is one task, whose process is the job (TonY's rule); this "
                                 f"one has {sum(active.values())} ({tasks}): use one instance, or the "
                                 "tensorflow framework (the default) for several tasks"))
    if active.get("chief", 0) > 1:
        issues.append(spec.issue(task_key("chief", "instances"), active["chief"],
                                 "at most one chief: the chief is a single task (it writes checkpoints and "
                                 "summaries and serves TensorBoard); for more tasks like it use 'worker'"))
    chief_type = "chief" if "chief" in active else "worker"
    stop_on_failure = spec.stop_on_failure_types
    for task_type in active:
        key = task_key(task_type, "restart-policy")
        if (spec.get(key) or "").strip().lower() != "task":
            continue
        if task_type == chief_type:
            issues.append(spec.issue(key, "task", f"not allowed on the chief type '{task_type}': a failed "
                                      "chief always ends the session; use 'session'"))
        elif task_type in stop_on_failure:
            issues.append(spec.issue(key, "task", f"not allowed on '{task_type}', a stop-on-failure type "
                                      "(tony.application.stop-on-failure-jobtypes): its failure always "
                                      "ends the session; use 'session'"))

    if framework == "pytorch" and active and not {"worker", "chief"} & set(active):
        issues.append(spec.issue("tony.application.framework", framework,
                                  "pytorch needs a 'worker' or 'chief' task type: its first task is "
                                  "the rendezvous master (MASTER_ADDR)"))
    return issues



def _elastic_problems(spec: JobSpec, check: _Check, task_type: str, instances: int,
                      framework: str | None) -> list[SpecIssue]:
    """tony.<type>.min-instances: below instances, a PyTorch ranked type goes on without a lost task."""
    key = task_key(task_type, "min-instances")
    value = check(key, TASK_KEY["min-instances"].parse, "")
    if value is None or value >= instances:
        if value is not None and value > instances:
            return [spec.issue(key, value, f"more than tony.{task_type}.instances={instances}: the type can never "
                               f"have that many tasks; at most {instances} (equal: not elastic)")]
        return []
    if framework != "pytorch":
        return [spec.issue(key, value, "elastic training (min-instances below instances) is for PyTorch jobs, "
                           f"whose processes re-form their group under torch's elastic agent; this job's "
                           f"framework is {framework}: remove the key, or set it to {instances}")]
    if task_type not in RANKED_TYPES:
        return [spec.issue(key, value, f"only the ranked types ({', '.join(RANKED_TYPES)}) of a PyTorch job can "
                           f"be elastic; '{task_type}' is not one")]
    if task_type in spec.stop_on_failure_types:
        return [spec.issue(key, value, f"'{task_type}' is a stop-on-failure type "
                           "(tony.application.stop-on-failure-jobtypes): its failure always ends the session, "
                           "so it cannot be elastic")]
    processes = (spec.get(task_key(task_type, "processes")) or "1").strip()
    if processes != "1" and (spec.get("tony.elastic.regroup") or "").strip().lower() == "in-place":
        return [spec.issue("tony.elastic.regroup", "in-place", f"a trainer regrouping in place is the only process "
                           f"of its container, and tony.{task_type}.processes is {processes}: set it to 1, or "
                           "tony.elastic.regroup to restart")]
    if (spec.get(task_key(task_type, "restart-policy")) or "").strip().lower() == "task":
        return [spec.issue(key, value, f"an elastic type replaces a lost task itself; tony.{task_type}.restart-policy "
                           "'task' (relaunch at the same address) does not apply: remove one of the two")]
    return []


def _processes_problems(spec: JobSpec, check: _Check, task_type: str, framework: str | None) -> list[SpecIssue]:
    """tony.<type>.processes: a PyTorch type's processes per container, launched by torch's agent."""
    key = task_key(task_type, "processes")
    value = check(key, TASK_KEY["processes"].parse, TASK_DEFAULTS["processes"])
    if value in (None, 1):
        return []
    gpus = parse_int_or_none(spec.get(task_key(task_type, "gpus"), TASK_DEFAULTS["gpus"])) or 0
    if framework != "pytorch":
        return [spec.issue(key, value, "several processes per container are for PyTorch jobs (torch's elastic "
                           f"agent starts them); this job's framework is {framework}: use 1, or more instances")]
    if task_type not in RANKED_TYPES:
        return [spec.issue(key, value, f"only the ranked types ({', '.join(RANKED_TYPES)}) of a PyTorch job run "
                           f"several processes per container; '{task_type}' is not one")]
    if value == "gpus" and gpus <= 0:
        return [spec.issue(key, value, f"'gpus' runs one process per GPU, and tony.{task_type}.gpus is 0: set "
                           "the GPUs, or a number of processes")]
    if isinstance(value, int) and 0 < gpus < value:
        return [spec.issue(key, value, f"more processes than the container's {gpus} GPUs "
                           f"(tony.{task_type}.gpus): two ranks cannot share a GPU under NCCL; at most {gpus}")]
    return []


def type_name_problem(task_type: str, framework: str | None, sidecars: list[str]) -> str | None:
    if not TYPE_NAME.match(task_type):
        return ("task type names must match ^[a-z][a-z0-9_-]*$ (a lower-case letter, then lower-case letters, "
                "digits, '_' or '-'): the name becomes part of tony.<type>.* keys, TF_CONFIG and JOB_NAME")
    if task_type in RESERVED_TYPES:
        return (f"'{task_type}' is reserved: tony.{task_type}.* keys configure the job as a whole, "
                "not a task type; choose another name")
    if framework == "tensorflow" and "-" in task_type and task_type not in sidecars:
        return ("TensorFlow job names allow letters, digits and '_' only (they appear in device names "
                "such as /job:<type>/task:0); use '_' instead of '-'")
    return None


def one_edit_apart(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with one letter added, dropped, changed, or two neighbours swapped."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
                                  and a[diff[1]] == b[diff[0]])
    short, long_ = sorted((a, b), key=len)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


def near_miss(task_type: str, declared: list[str]) -> str | None:
    """A declared type that is a typo of another (``tony.wroker.instances`` beside, or instead of,
    ``tony.worker.instances``): it would start containers of a type nobody meant, and enter TF_CONFIG
    under that name. It is compared with the types TonY's frameworks know, the words reserved for
    job-wide keys and the other declared types; names that differ in digits only (``worker1`` and
    ``worker``, ``t12`` and ``t21``) are meant. A known type is never a typo."""
    if task_type in KNOWN_TYPES:
        return None

    def near(other: str) -> bool:
        return one_edit_apart(task_type, other) and _letters(task_type) != _letters(other)

    for other in (*KNOWN_TYPES, *sorted(RESERVED_TYPES)):
        if near(other):
            if other in RESERVED_TYPES:
                return (f"'{task_type}' is one letter away from '{other}', whose tony.{other}.* keys configure the "
                        "job as a whole (did you mean one of those?); a task type needs a name further from it")
            return (f"'{task_type}' is one letter away from the task type '{other}' (did you mean '{other}'?); "
                    "a type of its own needs a name further from it")
    for other in declared:
        if near(other):
            return (f"'{task_type}' is one letter away from the task type '{other}', declared too (did you mean "
                    f"'{other}'?); a type of its own needs a name further from it")
    return None


def _letters(name: str) -> str:
    return "".join(c for c in name if not c.isdigit())


def _unknown_keys(spec: JobSpec) -> list[SpecIssue]:
    """A key nobody reads is a typo until shown otherwise: it would run the job with a default the
    user did not mean. Each is named with the closest key that exists."""
    declared = set(spec.declared_types())
    issues = []
    for key in spec.conf:
        why = unknown_key(key, declared)
        if why is None:
            continue
        if why in (LOCAL_KEY_REASON, CLIENT_KEY_REASON):
            issues.append(spec.issue(key, spec.conf[key], f"a job may not set this key: it {why}"))
            continue
        close = difflib.get_close_matches(key, known_keys(declared), n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]}?)" if close else ""
        issues.append(spec.issue(key, None, f"unknown key{hint}: it {why}"))
    return issues


def _docker_problems(spec: JobSpec) -> list[SpecIssue]:
    """A docker job needs an image for every container it starts, and mounts YARN can read."""
    issues = []
    for ttype in ["am", *spec.declared_types()]:
        if spec.docker_image(ttype) is None:
            issues.append(spec.issue("tony.docker.enabled", "true",
                                     f"needs an image for the {ttype!r} containers: set tony.docker.containers.image "
                                     f"(every container) or tony.docker.{ttype}.image"))
            break
    for mount in spec.docker_mounts:
        parts = mount.split(":")
        if len(parts) != 3 or not all(p.startswith("/") for p in parts[:2]) or parts[2] not in ("ro", "rw"):
            issues.append(spec.issue("tony.docker.mounts", mount,
                                     "each mount is 'host path:container path:ro' or ':rw', both paths absolute"))
    return issues
