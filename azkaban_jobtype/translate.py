"""The props of a ``TensorFlowJob`` or ``TonyJob`` as the :class:`~tony_workflow.spec.JobSpec` it submits.

What a job's props mean (the keys of TonY's own Azkaban job type):

``tony.*``
    TonY configuration, taken as it is, over :data:`~tony_workflow.spec.TONY_DEFAULTS`.
``executes``, ``task_params``, ``python_binary_path``, ``python_venv``
    What every task runs: ``<python> <executes> <task_params>``.
``src_dir``
    The directory shipped to every task (default ``src``). Relative paths, here and in
    ``python_venv``, start at the job's working directory: the directory of its ``.job`` (or
    ``.flow``) file in the unpacked project, where Azkaban runs it.
``hdfs_classpath``
    A path whose files TonY localises into every container; appended to ``tony.containers.resources``,
    the runtime's list of what is localised into every container.
``worker_env.NAME=value``
    Environment of the user process, appended to ``tony.execution.envs``.
``azkaban.input.dataset``, ``azkaban.output.dataset``
    Passed to the user process as ``AZKABAN_INPUT_DATASET`` and ``AZKABAN_OUTPUT_DATASET``, with
    ``,`` turned into ``;`` (commas separate the entries of ``tony.execution.envs``).

The job carries the execution's context (:mod:`tony_workflow.context`): project, flow, execution
id, job id, attempt, web server host and the execution's link, as ``tony.context.*`` keys
(:func:`context_conf`). On YARN they tag the application in TonY's ``key:value`` form
(``azkaban.flow.execid:42``), so the application can be found from the execution and back; every
task sees them as ``TONY_CONTEXT_*`` variables.
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path

from tony_workflow.client import executes_problem, reads_cluster_files, venv_problem
from tony_workflow.spec import TONY_DEFAULTS, JobSpec, SpecError, SpecIssue, apply_overrides
from tony_workflow.spec.loading import located_paths
from tony_workflow.spec.resources import absolute, resource_issues, resources_by_type
from tony_workflow.status import counted

from .props import Origin

__all__ = [
    "CONTEXT_PROPS",
    "DEFAULT_SRC_DIR",
    "TONY_JOB_TYPES",
    "WORKER_ENV_PREFIX",
    "backend_name",
    "context_conf",
    "describe",
    "path_issues",
    "translate",
]

#: The job types this job type is registered under: TonY's current name and its earlier one.
TONY_JOB_TYPES = ("TonyJob", "TensorFlowJob")

#: Azkaban's runtime properties -> the context's keys (tagged ``property:value`` on YARN).
CONTEXT_PROPS = {"azkaban.flow.projectname": "tony.context.project", "azkaban.flow.flowid": "tony.context.flow-id",
                 "azkaban.flow.execid": "tony.context.execution-id", "azkaban.job.id": "tony.context.job-id",
                 "azkaban.job.attempt": "tony.context.attempt", "azkaban.webserverhost": "tony.context.host",
                 "azkaban.link.execution.url": "tony.context.url"}

WORKER_ENV_PREFIX = "worker_env."
DEFAULT_SRC_DIR = "src"
DATASET_ENV = {"azkaban.input.dataset": "AZKABAN_INPUT_DATASET",
               "azkaban.output.dataset": "AZKABAN_OUTPUT_DATASET"}

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


#: The executor's say whether jobs run as their flow's ``user.to.proxy`` (``install-plugin --proxy``).
SHOULD_PROXY = "azkaban.should.proxy"


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("true", "yes", "1")


def context_conf(props: Mapping[str, str]) -> dict[str, str]:
    """The ``tony.context.*`` keys of the execution Azkaban's runtime ``props`` describe (none
    when Azkaban set none of them: a job run by hand)."""
    conf = {key: str(props[prop]).strip() for prop, key in CONTEXT_PROPS.items() if str(props.get(prop) or "").strip()}
    return {"tony.context.source": "azkaban", **conf} if conf else {}


def translate(props: Mapping[str, str], *, source: str | None = None,
              origins: Mapping[str, Origin] | None = None, base_dir: str | os.PathLike | None = None,
              check_paths: bool = False) -> JobSpec:
    """The JobSpec a TonY job's resolved ``props`` describe (see the module docstring).

    ``source`` names the job (its ``.job`` file) in messages, and ``origins`` says where each key
    was set, so that a problem names the file and line to fix. ``base_dir`` is the job's working
    directory, against which relative ``src_dir`` and ``python_venv`` are resolved (default: they
    stay relative). With ``check_paths``, those directories must exist.

    Every problem, from these keys or from :meth:`JobSpec.validate`, is raised together as one
    :class:`SpecError`.
    """
    origins = origins or {}
    issues: list[SpecIssue] = []

    def problem(key: str, value: object, message: str) -> None:
        issues.append(SpecIssue(_spelled(key, origins, source), value, message, source))

    # tony.backend chooses where the runner submits; it is the runner's setting, not the job's.
    conf = {**TONY_DEFAULTS, **{k: v for k, v in props.items() if k.startswith("tony.") and k != "tony.backend"}}
    key_origin = {k: _spelled(k, origins, source) for k in props if k.startswith("tony.") and k in origins}

    execution_env: list[str] = []
    for key in sorted(k for k in props if k.startswith(WORKER_ENV_PREFIX)):
        name, value = key[len(WORKER_ENV_PREFIX):], props[key]
        if not _ENV_NAME.match(name):
            problem(key, None, f"'{name}' is not an environment variable name (letters, digits and '_', "
                    "not starting with a digit)")
        elif "," in value:
            problem(key, value, "the value must not contain ',': it separates the entries of "
                    "tony.execution.envs, which carries it to the tasks")
        else:
            execution_env.append(f"{name}={value}")
    for key, env_name in DATASET_ENV.items():
        if key in props:
            execution_env.append(f"{env_name}={props[key].replace(',', ';')}")

    # Appended as --conf appends to these multi-valued keys, after whatever the job set itself.
    appended = {"tony.execution.envs": execution_env,
                "tony.containers.resources": [props.get("hdfs_classpath", "").strip()]}
    conf = apply_overrides(conf, {key: ",".join(v for v in values if v) for key, values in appended.items()
                                  if any(values)})
    # Where the job came from is Azkaban's to say, not the job's.
    conf = apply_overrides(conf, context_conf(props))
    # As TonY's job type did: where the executor proxies (azkaban.should.proxy), the job runs as
    # the flow's user.to.proxy, whatever the job's own keys say.
    if _true(props.get(SHOULD_PROXY)) and (proxy := (props.get("user.to.proxy") or "").strip()):
        conf = apply_overrides(conf, {"tony.application.proxy-user": proxy})

    fields = {name: _text(props.get(name)) for name in ("executes", "task_params", "python_binary_path",
                                                        "python_venv")}
    fields["src_dir"] = _text(props.get("src_dir")) or DEFAULT_SRC_DIR
    if base_dir is not None:
        for name in ("src_dir", "python_venv"):
            if fields[name] and "://" not in fields[name] and not os.path.isabs(fields[name]):
                fields[name] = str(Path(base_dir) / fields[name])
        # TonY's resources and the inputs: a relative local path starts at the job's working directory too.
        conf = {k: absolute(v, Path(base_dir)) if located_paths(k) and v else v for k, v in conf.items()}

    no_executes = not fields["executes"] and not _every_type_has_command(conf)
    if no_executes:
        problem("executes", None, "is required: the script every task runs, relative to src_dir "
                "(or give every task type a command with tony.containers.command or tony.<type>.command)")
    spec = None
    try:
        spec = JobSpec(conf=conf, source=source, key_origin=key_origin, **fields)
        spec.validate()
    except SpecError as exc:
        # The runtime's per-type "has no command" says again, in its YAML terms, what the
        # executes problem above says in the job's.
        issues.extend(i for i in exc.issues if not (no_executes and "has no command" in i.message))
    if spec is not None and check_paths:
        issues.extend(path_issues(spec, props, source=source, origins=origins, project_dir=base_dir))
    if issues:
        raise SpecError(issues, spec=spec)  # the spec as far as it could be read: its paths are still checked
    return spec


def path_issues(spec: JobSpec, props: Mapping[str, str], *, source: str | None = None,
                origins: Mapping[str, Origin] | None = None,
                project_dir: str | os.PathLike | None = None) -> list[SpecIssue]:
    """Problems with the directories ``spec`` ships: ``src_dir`` must be a directory and ``python_venv``
    (when set) a directory or a zip that unpacks inside its directory, both inside ``project_dir``
    when it is given. ``props`` tells whether src_dir was given or defaulted."""
    origins = origins or {}
    issues = []
    if project_dir is not None:
        # By the path as written (normalised, links not followed): ``..`` or an absolute path
        # elsewhere leaves the project; a link the project itself holds is the project's business.
        root = Path(os.path.abspath(project_dir))
        shipped = [(name, getattr(spec, name), getattr(spec, name)) for name in ("src_dir", "python_venv")]
        shipped += [(r.key, spec.conf[r.key], str(r.local_path)) for rs in _resources(spec).values() for r in rs
                    if not r.remote]
        for name, value, path in shipped:
            if path and "://" not in path and not Path(os.path.abspath(path)).is_relative_to(root):
                issues.append(SpecIssue(_spelled(name, origins, source), value,
                                        f"must stay inside the project directory {root}: a job ships its "
                                        "project's files, not others of the machine", source))
        if issues:
            return issues
    if spec.src_dir and not Path(spec.src_dir).is_dir():
        default = "" if "src_dir" in props else " (the default, since src_dir is not set)"
        issues.append(SpecIssue(_spelled("src_dir", origins, source), spec.src_dir,
                                f"must be an existing directory{default}: it is shipped to every task, and a "
                                "relative path starts at the directory of the job's file", source))
    on_yarn = backend_name(props) == "yarn"
    problem = venv_problem(spec.python_venv, remote=on_yarn) if spec.python_venv else None
    if problem:
        issues.append(SpecIssue(_spelled("python_venv", origins, source), spec.python_venv, problem, source))
    problem = executes_problem(spec)
    if problem:
        issues.append(SpecIssue(_spelled("executes", origins, source), spec.executes, problem, source))
    for issue in resource_issues(spec.conf, set(spec.declared_types()), remote_ok=on_yarn or reads_cluster_files("local"),
                                 source=source):
        issues.append(dataclasses.replace(issue, key=_spelled(issue.key, origins, source)))
    return issues


def _resources(spec: JobSpec) -> dict:
    """The spec's resources by type; none where an entry cannot be read (resource_issues says why)."""
    try:
        return resources_by_type(spec.conf)
    except ValueError:
        return {}


def backend_name(props: Mapping[str, str], env: Mapping[str, str] | None = None) -> str:
    """The backend a job goes to: the props' ``tony.backend``, else ``$TONY_BACKEND``, else ``local``."""
    from tony_workflow.backends import default_backend

    return (props.get("tony.backend") or "").strip() or default_backend(os.environ if env is None else env)


def _text(value: str | None) -> str | None:
    value = (value or "").strip()
    return value or None


def _every_type_has_command(conf: Mapping[str, str]) -> bool:
    if (conf.get("tony.containers.command") or "").strip():
        return True
    types = [m.group(1) for key in conf if (m := re.match(r"^tony\.(.+)\.instances$", key))]
    return bool(types) and all((conf.get(f"tony.{t}.command") or "").strip() for t in types)


def _spelled(key: str, origins: Mapping[str, Origin], source: str | None) -> str:
    """The key with where it was set, when that is not simply the job's own file."""
    origin = origins.get(key)
    if origin is None:
        return key
    if origin.source == source:
        return f"{key} (line {origin.line})" if origin.line else key
    return f"{key} (from {origin})"


def describe(spec: JobSpec) -> list[str]:
    """Lines that say what ``spec`` submits: tasks, AM, command, env, tags and every other key that
    differs from TonY's defaults."""
    lines = []
    for task in spec.tasks.values():
        res = task.resources
        lines.append(f"  {task.type}: {task.instances} x ({res.memory_mb} MB, {counted(res.vcores, 'vcore')}, "
                     f"{counted(res.gpus, 'GPU')})")
    am = spec.am
    lines.append(f"  am: {am.memory_mb} MB, {counted(am.vcores, 'vcore')}, {counted(am.gpus, 'GPU')}")
    for name in ("executes", "task_params", "python_binary_path", "python_venv", "src_dir"):
        value = getattr(spec, name)
        if value:
            lines.append(f"  {name}: {value}")
    env = spec.execution_env
    if env:
        lines.append("  env: " + " ".join(f"{k}={v}" for k, v in env.items()))
    if spec.tags:
        lines.append("  tags: " + ",".join(spec.tags))
    shown = {"tony.execution.envs", "tony.application.tags"}
    shown |= {k for k in spec.conf if re.match(r"^tony\.(am|[^.]+)\.(instances|memory|vcores|gpus)$", k)}
    others = {k: v for k, v in spec.conf.items() if k not in shown and TONY_DEFAULTS.get(k) != v}
    for key, value in sorted(others.items()):
        lines.append(f"  {key}={value}")
    return lines
