"""Where a job came from: the workflow run that submitted it, carried everywhere the job is seen.

A job submitted by a workflow carries that workflow's context in its ``tony.context.*`` keys: for
Airflow the DAG, its run, the task, the try and the map index; for Azkaban the project, the flow,
the execution, the job, its attempt and the web server's host; for both the link back to the run
(``tony.context.url``). The front ends set these keys (:class:`airflow_provider.operators.TonyOperator`,
:mod:`azkaban_jobtype.translate`); a spec submitted by hand may set them too.

From the keys the job gets:

- **YARN application tags** (:func:`application_tags`), in TonY's ``name:value`` form
  (``azkaban.flow.execid:42``, ``airflow.dag_id:nightly``). YARN takes at most
  :data:`MAX_TAGS` tags of at most :data:`MAX_TAG_LENGTH` ASCII characters each, and lowercases
  them. A value too long for its tag, or with characters a tag cannot hold, is cut and ends in
  ``~`` and eight hex digits of its hash, so the tag still tells one value from another; when
  there are more tags than room, the context's come last and those that do not fit are left off
  (in :data:`FIELDS` order, the identifying fields first). What was left off is said in the job's
  warnings; the whole context is always in the job's status and history.
- **The identity tag** ``tony.context:<hmac>`` (:func:`identity`), which only a front end gives a
  job (:attr:`tony_workflow.spec.JobSpec.identity`), never a spec: an HMAC, under a key the
  deployment holds (:func:`deployment_key`), of the fields that name one run of one workflow task
  (Airflow: DAG, run, task, map index; Azkaban: execution, flow, job) and of the server that ran it,
  not of the try. A retried task, or a worker restarted before it recorded the application id,
  finds its still-running application by it instead of submitting a second one; a job whose spec
  merely sets the same ``tony.context.*`` keys, or one from another deployment with the same DAG
  ids or execution ids, has another identity or none, and is never followed.
- **Environment variables** in every task (:func:`task_env`): ``TONY_CONTEXT_<FIELD>`` for each
  field set (``TONY_CONTEXT_DAG_ID``, ``TONY_CONTEXT_EXECUTION_ID``, ...), and for Airflow jobs
  Airflow's own ``AIRFLOW_CTX_DAG_ID``, ``AIRFLOW_CTX_DAG_RUN_ID``, ``AIRFLOW_CTX_TASK_ID`` and
  ``AIRFLOW_CTX_TRY_NUMBER``, as Airflow sets them for its own tasks.
- **The status and the history record** (``context``: the fields set, by name), and so the TonY
  pages and ``tony list`` / ``tony history``, which filter on it (:func:`matches`).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FIELDS",
    "IDENTITY_TAG",
    "MAX_TAGS",
    "MAX_TAG_LENGTH",
    "SOURCES",
    "TONY_TAGS",
    "Field",
    "application_tags",
    "deployment_key",
    "describe",
    "dropped_warning",
    "fit_tag",
    "from_conf",
    "from_tags",
    "identity",
    "identity_tag",
    "matches",
    "task_env",
]

#: YARN's limits on an application's tags (``yarn.resourcemanager.application.max-tags`` and
#: ``.max-tag.length``, at their defaults): more, or longer, and the submission is refused.
MAX_TAGS = 10
MAX_TAG_LENGTH = 100

#: The identity tag's name.
IDENTITY_TAG = "tony.context"
#: Tags every TonY application carries before the user's: ``tony``, the gang's
#: (:mod:`tony_workflow.backends.yarn.gang`) and the identity tag.
TONY_TAGS = 3

SOURCES = ("airflow", "azkaban")


@dataclass(frozen=True)
class Field:
    """One field of the context: its name (in the status, the history and ``TONY_CONTEXT_<NAME>``),
    its key, the source it belongs to, its tag's name (None: not tagged) and the option of
    ``tony list`` / ``tony history`` that filters on it."""

    name: str
    key: str
    source: str | None
    tag: str | None
    option: str | None
    doc: str

    @property
    def env(self) -> str:
        return f"TONY_CONTEXT_{self.name.upper()}"


#: Every field, in the order tags are given room: what names the run first.
FIELDS: tuple[Field, ...] = (
    Field("source", "tony.context.source", None, None, None, "what submitted the job: airflow or azkaban"),
    Field("dag_id", "tony.context.dag-id", "airflow", "airflow.dag_id", "dag", "Airflow: the DAG"),
    Field("dag_run_id", "tony.context.dag-run-id", "airflow", "airflow.dag_run_id", "run", "Airflow: the DAG run"),
    Field("task_id", "tony.context.task-id", "airflow", "airflow.task_id", "task", "Airflow: the task"),
    Field("execution_id", "tony.context.execution-id", "azkaban", "azkaban.flow.execid", "exec",
          "Azkaban: the execution"),
    Field("flow_id", "tony.context.flow-id", "azkaban", "azkaban.flow.flowid", "flow", "Azkaban: the flow"),
    Field("project", "tony.context.project", "azkaban", "azkaban.flow.projectname", "project",
          "Azkaban: the project"),
    Field("job_id", "tony.context.job-id", "azkaban", "azkaban.job.id", "job", "Azkaban: the job"),
    Field("try_number", "tony.context.try-number", "airflow", "airflow.try_number", None, "Airflow: the try"),
    Field("map_index", "tony.context.map-index", "airflow", "airflow.map_index", None,
          "Airflow: the mapped task's index (-1: not mapped)"),
    Field("attempt", "tony.context.attempt", "azkaban", "azkaban.job.attempt", None, "Azkaban: the job's attempt"),
    Field("host", "tony.context.host", "azkaban", "azkaban.webserverhost", None, "Azkaban: the web server's host"),
    Field("url", "tony.context.url", None, None, None, "the link back to the run that submitted the job"),
)
BY_NAME = {f.name: f for f in FIELDS}

#: The fields whose values name one run of one workflow task (the try is not one of them).
_IDENTITY = {"airflow": ("dag_id", "dag_run_id", "task_id", "map_index"),
             "azkaban": ("execution_id", "flow_id", "job_id")}

#: Airflow's own variables for its tasks' context, set as Airflow sets them.
_AIRFLOW_ENV = {"dag_id": "AIRFLOW_CTX_DAG_ID", "dag_run_id": "AIRFLOW_CTX_DAG_RUN_ID",
                "task_id": "AIRFLOW_CTX_TASK_ID", "try_number": "AIRFLOW_CTX_TRY_NUMBER"}

_TAG_SAFE = re.compile(r"[^\x20-\x7e]|,")


def from_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The context the ``tony.context.*`` keys of ``conf`` set, by field name (empty ones left out).
    Without ``source``, it is the source whose fields are set."""
    context = {f.name: str(conf[f.key]).strip() for f in FIELDS if str(conf.get(f.key) or "").strip()}
    if context and "source" not in context:
        sources = {BY_NAME[n].source for n in context} - {None}
        if len(sources) == 1:
            context["source"] = sources.pop()  # type: ignore[assignment]
    return context


def identity(context: Mapping[str, str], key: bytes | None, server: str = "") -> str | None:
    """The keyed hash naming the workflow task run that submitted the job: an HMAC-SHA256 under
    ``key`` (the deployment's secret, :func:`deployment_key`) of the context's identifying fields
    and ``server`` (what runs the workflow: the Airflow deployment's address, the Azkaban web
    server), 32 hex digits. None without a key, or without the fields that name a run (a job
    submitted by hand)."""
    names = _IDENTITY.get(context.get("source") or "")
    if not key or not names or not all(context.get(n) for n in names if n != "map_index"):
        return None
    text = "\x1f".join([context["source"], server.strip().lower(), *(context.get(n) or "" for n in names)])
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()[:32]


def identity_tag(identity_hash: str | None) -> str | None:
    """The tag an application with ``identity_hash`` (:func:`identity`) carries."""
    return f"{IDENTITY_TAG}:{identity_hash}" if identity_hash else None


#: How long a deployment key is, in bytes, when one is made.
KEY_BYTES = 32


def deployment_key(path: str | os.PathLike[str], create: bool = True) -> bytes:
    """The key in the file ``path``, made there (random, readable by its owner only) when there is
    none and ``create``. A key that others may read is refused: whoever reads it can name jobs as
    this deployment's. OSError when it cannot be read or made."""
    p = Path(path).expanduser()
    if create and not p.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process made it first: read theirs
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(KEY_BYTES) + "\n")
    mode = p.stat().st_mode
    if mode & 0o077:
        raise OSError(f"the key file {p} may be read by others (mode {mode & 0o777:o}): make it 600")
    text = p.read_text().strip()
    if len(text) < 16:
        raise OSError(f"the key file {p} holds no key (at least 16 characters)")
    return text.encode()


def fit_tag(name: str, value: str) -> str:
    """``name:value`` as a YARN tag: lowercased (YARN does so itself), printable ASCII without
    commas, at most :data:`MAX_TAG_LENGTH` characters; a value that had to change ends in ``~`` and
    eight hex digits of its hash."""
    tag = f"{name}:{value}".lower()
    if len(tag) <= MAX_TAG_LENGTH and not _TAG_SAFE.search(tag):
        return tag
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    room = MAX_TAG_LENGTH - len(name) - 1 - 9
    return f"{name}:{_TAG_SAFE.sub('_', value.lower())[:room]}~{digest}"


def application_tags(required: Iterable[str], user_tags: Iterable[str], context: Mapping[str, str],
                     identity_hash: str | None = None) -> tuple[list[str], list[str]]:
    """(tags, left off): ``required`` (TonY's own), the identity tag (of ``identity_hash``, which a
    front end gave the job), the user's tags, then the context's fields while there is room; the
    names of the context's fields left off."""
    tags: list[str] = []
    for tag in [*required, identity_tag(identity_hash), *user_tags]:
        if tag and tag.lower() not in tags:
            tags.append(tag.lower())
    dropped = []
    for f in FIELDS:
        if f.tag and context.get(f.name):
            tag = fit_tag(f.tag, context[f.name])
            if tag in tags:
                continue
            if len(tags) < MAX_TAGS:
                tags.append(tag)
            else:
                dropped.append(f.name)
    return tags, dropped


def dropped_warning(dropped: list[str]) -> str | None:
    """What the job's warnings say when context fields found no room among its tags."""
    if not dropped:
        return None
    return (f"YARN takes at most {MAX_TAGS} tags per application: the context's {', '.join(dropped)} "
            "went untagged (the whole context is in the job's status and history)")


def from_tags(tags: Iterable[str]) -> dict[str, str]:
    """The context an application's tags tell (lowercased, as YARN keeps tags; a value cut to
    fit ends in ``~`` and a hash): what is known of a job before its AM says more."""
    by_tag = {f.tag: f for f in FIELDS if f.tag}
    context: dict[str, str] = {}
    for tag in tags:
        name, sep, value = tag.partition(":")
        if sep and name in by_tag:
            context[by_tag[name].name] = value
            context.setdefault("source", by_tag[name].source or "")
    return context


def task_env(context: Mapping[str, str]) -> dict[str, str]:
    """The variables every task of a job with ``context`` sees."""
    env = {BY_NAME[n].env: v for n, v in context.items() if n in BY_NAME}
    if context.get("source") == "airflow":
        env.update({var: context[n] for n, var in _AIRFLOW_ENV.items() if context.get(n)})
    return env


def matches(context: Mapping[str, str] | None, wanted: Mapping[str, str]) -> bool:
    """Whether ``context`` has every field of ``wanted`` (by field name), compared without case."""
    have = context or {}
    return all(str(have.get(n) or "").lower() == str(v).lower() for n, v in wanted.items())


def describe(context: Mapping[str, str] | None) -> str:
    """One line saying where the job came from ('' for a job submitted by hand)."""
    c = context or {}
    if c.get("source") == "airflow":
        text = f"Airflow DAG {c.get('dag_id', '?')}, run {c.get('dag_run_id', '?')}, task {c.get('task_id', '?')}"
        if c.get("map_index") not in (None, "", "-1"):
            text += f"[{c['map_index']}]"
        if c.get("try_number"):
            text += f", try {c['try_number']}"
        return text
    if c.get("source") == "azkaban":
        text = (f"Azkaban project {c.get('project', '?')}, flow {c.get('flow_id', '?')}, "
                f"execution {c.get('execution_id', '?')}, job {c.get('job_id', '?')}")
        if c.get("attempt"):
            text += f", attempt {c['attempt']}"
        return text
    return ", ".join(f"{n}={v}" for n, v in c.items() if n != "url")
