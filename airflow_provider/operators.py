"""TonyOperator: run a distributed training job as an Airflow task.

The operator is declarative: it turns its arguments into a JobSpec, and otherwise reports what the
hook and the job follower say (XComs for the links, log lines for the progress). Submission,
status, reattaching and killing belong to :class:`~airflow_provider.hooks.TonyHook`.
"""
from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import jinja2
from airflow.sdk import Asset, BaseOperator, ResumableJobMixin
from airflow.sdk import conf as airflow_conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider.hooks import TonyHook
from airflow_provider.links import TonyLogsLink, TonyTensorBoardLink, TonyTrackingLink
from airflow_provider.triggers import OUTPUT_CURSOR_KEY, TonyJobTrigger
from tony_workflow.client import load_job
from tony_workflow.client.follow import JobUpdate
from tony_workflow.client.output import Cursor, OutputLine, parse_tasks
from tony_workflow.context import describe as describe_context
from tony_workflow.errors import ConfigError, LoginError, SpecError, SubmissionRefused, TonyError, UnknownApplication
from tony_workflow.spec import JobSpec
from tony_workflow.status import JobState, JobStatus, hanging

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["TonyOperator"]

_ACTIVE = {JobState.NEW, JobState.SUBMITTED, JobState.ALLOCATING, JobState.RUNNING}


#: How the operator reports the project's errors. Input that must change (a bad spec, a job that can
#: never fit, a missing login, a wrong connection) fails the task without retries; anything else
#: (the cluster or a store failing, an ApplicationMaster gone) fails this try, and Airflow's retries
#: apply.
_NO_RETRY: tuple[tuple[type[TonyError], str], ...] = (
    (SpecError, "Invalid TonY job spec, nothing was submitted"),
    (SubmissionRefused, "The TonY job can never run on this cluster, nothing was submitted"),
    (LoginError, "Cannot log in to the cluster, nothing was submitted"),
    (ConfigError, "The tony connection or the cluster's configuration is wrong, nothing was submitted"),
)


def task_context_conf(context: Context | Mapping[str, Any] | None) -> dict[str, str]:
    """The ``tony.context.*`` keys of the task instance in ``context`` (none without one)."""
    ti = (context or {}).get("ti")
    if ti is None:
        return {}
    map_index = getattr(ti, "map_index", None)
    conf = {"tony.context.source": "airflow", "tony.context.dag-id": ti.dag_id,
            "tony.context.dag-run-id": ti.run_id, "tony.context.task-id": ti.task_id,
            "tony.context.try-number": str(getattr(ti, "try_number", "") or ""),
            "tony.context.map-index": str(map_index if map_index is not None else -1)}
    with contextlib.suppress(Exception):  # a task instance without Airflow's configuration: no link back
        conf["tony.context.url"] = str(ti.log_url)
    return {k: v for k, v in conf.items() if v}


def model_event_extra(status: JobStatus) -> dict[str, Any]:
    """The extra of a model asset's event: which job made the model, where it is, how it scored."""
    progress = status.progress or {}
    return {"application_id": status.application_id, "checkpoint_location": status.checkpoint_location,
            "final_state": status.state, "step": progress.get("step"), "metrics": dict(progress.get("metrics") or {}),
            "tracking_url": status.tracking_url, "context": dict(status.context or {})}


def airflow_error(error: TonyError) -> AirflowException:
    """The Airflow exception the task raises for ``error``: the one place the operator maps the
    project's errors onto Airflow's conventions."""
    for kind, opening in _NO_RETRY:
        if isinstance(error, kind):
            return AirflowFailException(f"{opening}:\n{error}")
    return AirflowException(f"TonY: {error}")


class _WithAbsolutePaths(jinja2.BaseLoader):
    """A Jinja loader: a file given by its absolute path, else what ``inner`` finds."""

    def __init__(self, inner: jinja2.BaseLoader | None):
        self.inner = inner

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str | None, Any]:
        path = Path(template)
        if path.is_absolute() and path.is_file():
            mtime = path.stat().st_mtime
            return path.read_text(), str(path), lambda: path.is_file() and path.stat().st_mtime == mtime
        if self.inner is None:
            raise jinja2.TemplateNotFound(template)
        return self.inner.get_source(environment, template)


class TonyOperator(ResumableJobMixin, BaseOperator):
    """Submits a TonY job, shows its TensorBoard and tracking links while it runs, and waits for it.

    :param job_spec: the job: a dict (the YAML schema), a YAML/XML/JSON string, or a path to a spec
        file (``.yaml .yml .xml .j2`` files are rendered as Jinja templates by Airflow).
    :param conf: ``tony.*`` overrides, applied like ``tony submit --conf`` (env keys append).
    :param executes: script each task runs with ``python_binary_path`` (TonY's ``--executes``).
    :param task_params: arguments for ``executes``.
    :param src_dir: directory shipped into each task's working directory; relative paths are
        relative to the DAG file's folder.
    :param python_venv: a virtualenv directory or zip the tasks run with.
    :param python_binary_path: the interpreter for ``executes`` (relative to the venv if one is given).
    :param shell_env: extra environment for the training processes.
    :param tony_conn_id: the ``tony`` connection; ``tony_default`` with no connection defined is the
        embedded local cluster.
    :param deferrable: wait in the triggerer instead of a worker slot (default from
        ``[operators] default_deferrable``).
    :param poll_interval: seconds between status checks.
    :param tensorboard_wait: when deferrable, seconds to wait after submission for TensorBoard's
        URL before handing the job to the triggerer, so that the link is there while the job runs
        (the job keeps running either way; a task that follows the job itself pushes the link as
        soon as it comes).
    :param model_asset: an Airflow asset standing for the trained model. It is one of the task's
        outlets, and when the job succeeds its asset event's extra says which model this is:
        ``application_id``, ``checkpoint_location`` (the URI of the job's checkpoints: the model),
        the last reported ``step`` and ``metrics``, ``final_state``, ``tracking_url`` and where the
        job came from (``context``). DAGs scheduled on the asset start with it.
    :param proxy_user: on YARN, the user the job runs as (``tony.application.proxy-user``),
        impersonated by the connection's login, which the cluster's ``hadoop.proxyuser.*`` settings
        must allow; default the connection's ``proxy_user`` extra, else the login itself. As with
        ``SparkSubmitOperator``'s.
    :param output_tasks: whose output (stdout and stderr) is written into the task's log as the job
        prints it, each line after its task (``[worker:0] loss=0.31``): task ids or types, a list
        or comma-separated (templated); ``"none"`` or ``[]`` for none; by default the job's
        ``tony.output.tasks``, else the chief (``chief:0``, else ``worker:0``). In deferrable mode
        the trigger writes them (Airflow shows them in the task's log). A later try that reattaches
        to the job goes on where this one stopped. Whatever this follows, a failed job's error
        carries the last lines of each failed task's stdout and stderr.
    :param reattach: before submitting, look for an application this task run (DAG, run, task,
        map index; any try) submitted earlier, as the same user, and that still runs, and follow
        it instead of submitting a second one. That covers a worker lost between the submission
        and the recording of the application id, which Airflow's own reconnection cannot. The
        job is found by its identity tag: an HMAC of the task run and the deployment's
        ``[api] base_url`` under the deployment's key (:meth:`TonyHook.deployment
        <airflow_provider.hooks.TonyHook.deployment>`), so a job of another deployment with the
        same DAG, or one whose spec merely sets the same ``tony.context.*`` keys, is never followed.

    Every job carries the task's context (:mod:`tony_workflow.context`): DAG, run, task, try and
    map index, and the link to the task's log, as ``tony.context.*`` keys, YARN tags and
    ``TONY_CONTEXT_*`` / ``AIRFLOW_CTX_*`` variables in every task.
    """

    template_fields: Sequence[str] = ("job_spec", "conf", "executes", "task_params", "src_dir", "python_venv", "proxy_user",
                                      "python_binary_path", "shell_env", "output_tasks")
    template_ext: Sequence[str] = (".yaml", ".yml", ".xml", ".j2")
    template_fields_renderers: ClassVar[dict[str, str]] = {"job_spec": "yaml", "conf": "json", "shell_env": "json"}
    ui_color = "#f2a65a"
    operator_extra_links = (TonyTensorBoardLink(), TonyTrackingLink(), TonyLogsLink())
    external_id_key = "tony_application_id"
    # Copies of the operator share its hook, and so its one client (on YARN, one skein driver).
    shallow_copy_attrs: Sequence[str] = ("hook",)

    def __init__(self, *, job_spec: Mapping[str, Any] | str, conf: Mapping[str, Any] | None = None,
                 executes: str | None = None, task_params: str | None = None, src_dir: str | None = None,
                 python_venv: str | None = None, python_binary_path: str | None = None,
                 shell_env: Mapping[str, str] | None = None, tony_conn_id: str = TonyHook.default_conn_name,
                 deferrable: bool = airflow_conf.getboolean("operators", "default_deferrable", fallback=False),
                 poll_interval: float = 5.0, tensorboard_wait: float = 60.0, reattach: bool = True,
                 model_asset: Asset | None = None, proxy_user: str | None = None,
                 output_tasks: str | Sequence[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model_asset = model_asset
        if model_asset is not None and model_asset not in (self.outlets or []):
            self.outlets = [*(self.outlets or []), model_asset]
        self.job_spec = job_spec
        self.conf = dict(conf or {})
        self.executes = executes
        self.task_params = task_params
        self.src_dir = src_dir
        self.python_venv = python_venv
        self.python_binary_path = python_binary_path
        self.shell_env = dict(shell_env or {})
        self.tony_conn_id = tony_conn_id
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.tensorboard_wait = tensorboard_wait
        self.reattach = reattach
        self.proxy_user = proxy_user
        self.output_tasks = output_tasks
        self.application_id: str | None = None

    @functools.cached_property
    def hook(self) -> TonyHook:
        return TonyHook(self.tony_conn_id)

    # ------------------------------------------------------------------ spec
    def _base_dir(self) -> Path:
        fileloc = getattr(getattr(self, "dag", None), "fileloc", None)
        return Path(fileloc).resolve().parent if fileloc else Path.cwd()

    def build_spec(self, context: Context | None = None, check: bool = False) -> JobSpec:
        """The validated JobSpec; a bad spec fails the task at once, naming the key, with no retry.
        Relative paths (the spec file, ``src_dir``, ``python_venv``) are relative to the DAG file's
        folder. With the task's ``context``, the job carries it (``tony.context.*``). With
        ``check``, through the connection's client's preflight, as ``tony validate`` and ``tony
        submit`` check a spec: every problem at once, its paths and its inputs included."""
        spec_in = self.job_spec
        base = self._base_dir()
        if isinstance(spec_in, str) and "\n" not in spec_in.strip() and not spec_in.lstrip().startswith(("<", "{")):
            spec_in = str(base / spec_in.strip())
        conf = {**self.hook.connection_conf(), **{k: str(v) for k, v in self.conf.items()},
                **({"tony.application.proxy-user": self.proxy_user} if self.proxy_user else {}),
                **task_context_conf(context)}
        def load() -> JobSpec:
            return load_job(spec_in, conf=conf, conf_origin="TonyOperator conf", base_dir=base, executes=self.executes,
                            task_params=self.task_params, src_dir=self.src_dir, python_venv=self.python_venv,
                            python_binary_path=self.python_binary_path, shell_env=self.shell_env or None)

        try:
            if check:
                spec = self.hook.get_conn().checked(load)
            else:
                spec = load()
                spec.validate()
        except TonyError as e:
            raise airflow_error(e) from None
        if spec.context:
            # What a later try of this task run finds the job by, and nobody else can give a job.
            spec = spec.with_identity(*self.hook.deployment())
        return spec

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        # A spec file given by its absolute path (job_spec="/srv/jobs/train.yaml") is found there,
        # not only under the DAG's folder and template_searchpath.
        jinja_env = jinja_env or self.get_template_env()
        if not isinstance(jinja_env.loader, _WithAbsolutePaths):
            jinja_env.loader = _WithAbsolutePaths(jinja_env.loader)
        super().render_template_fields(context, jinja_env)
        # What the lineage start event describes, built now that the fields are rendered and while
        # the task's process may still read its connection.
        try:
            self._rendered_spec = self.build_spec(context)
        except Exception:  # noqa: BLE001 - a bad spec fails the task in execute, with its message
            self._rendered_spec = None

    # ------------------------------------------------------------------ execute
    def execute(self, context: Context) -> Any:
        # Airflow reads every link's XCom as the task ends: written empty first, a task that fails
        # before its job has links (a bad spec) ends without an "XCom not found" error per link.
        for link in self.operator_extra_links:
            context["ti"].xcom_push(key=link.xcom_value_key, value=None)
        self._spec, self._checked = self.build_spec(context, check=True), True
        return self.execute_resumable(context)

    def submit_job(self, context: Context) -> str:
        if self.reattach and self._spec.identity:
            try:
                running = self.hook.get_conn().find_running(self._spec)
            except TonyError as e:
                raise airflow_error(e) from None
            if running:
                self.log.warning("Application %s, submitted earlier by this task run (%s), still runs: "
                                 "following it instead of submitting another", running,
                                 describe_context(self._spec.context))
                self.application_id = running
                return running
        try:
            handle = self.hook.submit(self._spec, checked=getattr(self, "_checked", False))
        except TonyError as e:
            raise airflow_error(e) from None
        self.application_id = handle.app_id
        if handle.spec is not None:  # as submitted: its inputs planned, for their lineage
            self._spec = handle.spec
        self.log.info("Submitted application %s", handle.app_id)
        # Returned at once: the id is recorded for a retry to reattach to only after this returns,
        # so nothing else may stand between the submission and the record. The links follow.
        return handle.app_id

    def _show_links(self, context: Context, app_id: str) -> None:
        """Pushes the job's links. A deferred task waits briefly for TensorBoard first, so that its
        link shows while the job runs (the trigger pushes none), and says how the job does
        meanwhile; a task that follows the job itself pushes the link when it comes."""
        status = self.hook.get_status(app_id)
        spec = getattr(self, "_spec", None)
        wait = self.deferrable and self.tensorboard_wait > 0 and (spec is None or spec.tensorboard_enabled)
        if wait and not status.tensorboard_url and not status.is_final:
            self.log.info("Waiting up to %.0f s for TensorBoard, so that its link shows while the job runs "
                          "(tensorboard_wait)", self.tensorboard_wait)
        deadline, shown = time.time() + self.tensorboard_wait, None
        while wait and not status.tensorboard_url and not status.is_final and time.time() < deadline:
            if status.summary() != shown:
                shown = status.summary()
                self.log.info("%s", shown)
            time.sleep(min(1.0, self.poll_interval))
            status = self.hook.get_status(app_id)
        self._push_urls(context, status)
        self.log.info("Tracking URL: %s", status.tracking_url)
        if status.tensorboard_url:
            self.log.info("TensorBoard: %s", status.tensorboard_url)

    def _push_urls(self, context: Context, status: JobStatus) -> None:
        ti = context["ti"]
        values = {
            "application_id": status.application_id,
            "tracking_url": status.tracking_url,
            "tensorboard_url": status.tensorboard_url,
            "logs_url": f"{status.tracking_url}/logs" if status.tracking_url else None,
        }
        for key, value in values.items():
            ti.xcom_push(key=key, value=value)
        # Link XComs are normally written when the task ends; writing them now shows the links
        # in the UI while the job is still running.
        for link in self.operator_extra_links:
            if values.get(link.xcom_value_key):
                ti.xcom_push(key=link.xcom_key, value=values[link.xcom_value_key])
        self._pushed = values

    def get_job_status(self, external_id: Any, context: Context) -> str:
        try:
            return self.hook.get_status(str(external_id)).state
        except UnknownApplication:
            return "UNKNOWN"

    def is_job_active(self, status: str) -> bool:
        return status in _ACTIVE

    def is_job_succeeded(self, status: str) -> bool:
        return status == JobState.SUCCEEDED

    def poll_until_complete(self, external_id: Any, context: Context) -> None:
        self.application_id = app_id = str(external_id)
        # After a submission, or when reattached after a crash: the links point at this job.
        self._show_links(context, app_id)
        tasks, cursor = self._output_tasks(), self._cursor(context, app_id)
        if self.deferrable:
            self.defer(trigger=TonyJobTrigger(app_id, self.tony_conn_id, self.poll_interval, output_tasks=tasks,
                                              cursor=cursor.to_json()), method_name="execute_complete")
        handle = self.hook.attach(app_id)
        output = handle.output(tasks, cursor) if tasks != [] else None
        final = None
        for update in handle.follow(poll_interval=self.poll_interval, output=output,
                                    on_output=lambda lines: self._output(context, app_id, lines, cursor)):
            self._report(context, update)
            final = update.status
        self._finish(context, final if final is not None else self.hook.get_status(app_id))

    def _output_tasks(self) -> list[str] | None:
        """The tasks whose output goes to the task's log (None: the chief; ``[]``: none)."""
        if self.output_tasks is not None:
            return parse_tasks(self.output_tasks)
        spec = getattr(self, "_spec", None)
        return parse_tasks(spec.get("tony.output.tasks") if spec is not None else None)

    def _cursor(self, context: Context, app_id: str) -> Cursor:
        """How far an earlier try of this task run followed this job's output (from the start
        when it followed another job, or none)."""
        store = context.get("task_state_store")
        try:
            kept = store.get(OUTPUT_CURSOR_KEY) if store is not None else None
        except Exception:  # noqa: BLE001 - no state store here: the output is followed from its start
            kept = None
        if isinstance(kept, dict) and kept.get("application_id") == app_id:
            return Cursor.from_json(json.dumps(kept.get("cursor") or {}))
        return Cursor()

    def _output(self, context: Context, app_id: str, lines: list[OutputLine], cursor: Cursor) -> None:
        """Writes the job's lines into the task's log, then keeps how far they went, so that a
        later try reattaching to the job writes none of them again."""
        for line in lines:
            self.log.info("%s", line.render())
        self._keep_cursor(context, app_id, cursor)

    def _keep_cursor(self, context: Context, app_id: str, cursor: Cursor) -> None:
        store = context.get("task_state_store")
        if store is None or getattr(self, "_no_store", False):
            return
        try:
            store.set(OUTPUT_CURSOR_KEY, {"application_id": app_id, "cursor": json.loads(cursor.to_json())})
        except Exception as e:  # noqa: BLE001 - following goes on; only a later try's resumption is lost
            self._no_store = True
            self.log.warning("Cannot keep how far the job's output was followed (%s): a later try that "
                             "reattaches writes it from its start", e)

    def get_job_result(self, external_id: Any, context: Context) -> dict:
        status = self._final = self.hook.get_status(str(external_id))
        context["ti"].xcom_push(key="status", value=status.to_dict())
        if status.succeeded and self.model_asset is not None:
            context["outlet_events"][self.model_asset].extra = model_event_extra(status)
        return status.to_dict()

    def _report(self, context: Context, update: JobUpdate) -> None:
        status = update.status
        self.log.info("%s", status.summary())
        if update.new_session:
            self.log.warning("%s", hanging(f"Session {status.session_id} started: the previous session failed and "
                                           f"was relaunched ({status.diagnostics})"))
        for task in update.relaunched:
            self.log.warning("Task %s relaunched (%d so far)", task.task_id, task.restarts)
        if update.new_am_attempt:
            self.log.warning("%s", hanging(f"ApplicationMaster attempt {status.am_attempt}: {status.diagnostics}"))
        for warning in update.new_warnings:
            self.log.warning("%s", warning)
        if update.starting:
            self.log.info("%s", update.starting)
        # The first update names the URL submission already pushed and logged: only a new one is news.
        if update.tensorboard_url and update.tensorboard_url != getattr(self, "_pushed", {}).get("tensorboard_url"):
            self._push_urls(context, status)
            self.log.info("TensorBoard: %s", update.tensorboard_url)

    def _finish(self, context: Context, status: JobStatus) -> dict:
        self._final = status
        context["ti"].xcom_push(key="status", value=status.to_dict())
        pushed = getattr(self, "_pushed", {})
        if (status.tensorboard_url, status.tracking_url) != (pushed.get("tensorboard_url"), pushed.get("tracking_url")):
            self._push_urls(context, status)
        if status.succeeded and self.model_asset is not None:
            context["outlet_events"][self.model_asset].extra = model_event_extra(status)
        if not status.succeeded:
            failed = [f"{t.task_id} {t.state} exit={t.exit_code} log={t.log_url}" for t in status.tasks
                      if t.state in ("FAILED", "LOST")]
            # What the failed tasks printed last (their tracebacks), above the links to the rest.
            tails = self.hook.attach(status.application_id).failed_output(status)
            raise AirflowException(f"TonY application {status.application_id} ended {status.state}.\n"
                                   f"Diagnostics: {status.diagnostics}\n" + (f"{tails}\n" if tails else "")
                                   + "\n".join(failed))
        self.log.info("Application %s SUCCEEDED", status.application_id)
        return status.to_dict()

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict:
        if not isinstance(event, dict) or "status" not in event or "application_id" not in event:
            raise AirflowException(f"Unexpected event from TonyJobTrigger: {event!r}")
        self.application_id = event["application_id"]
        if event.get("cursor"):
            # How far the trigger wrote the job's output: a later try that reattaches goes on from there.
            self._keep_cursor(context, self.application_id, Cursor.from_json(str(event["cursor"])))
        if "job" not in event:
            raise AirflowException(f"Following TonY application {event['application_id']} failed: "
                                   f"{event.get('message', 'no detail')}")
        status = JobStatus.from_dict(event["job"])
        self.log.info("%s", status.summary())
        return self._finish(context, status)

    # ------------------------------------------------------------------ OpenLineage
    def _lineage(self, final: bool) -> Any:
        """What the job reads and writes and the job itself (:mod:`airflow_provider.lineage`)."""
        from airflow_provider.lineage import lineage

        # The start event comes before execute, in a process forked off the task's: the spec as
        # rendered, not anything that asks Airflow's metadata (a forked child must not).
        spec = getattr(self, "_spec", None) or getattr(self, "_rendered_spec", None)
        status = getattr(self, "_final", None) if final else None
        if final and status is None and self.application_id:
            with contextlib.suppress(TonyError):
                status = self.hook.get_status(self.application_id)
        return lineage(spec, self.hook.backend, qualify=self.hook.qualify, inlets=self.inlets or [],
                       outlets=self.outlets or [], status=status)

    def get_openlineage_facets_on_start(self) -> Any:
        return self._lineage(final=False)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self._lineage(final=True)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return self._lineage(final=True)

    def on_kill(self) -> None:
        if self.application_id:
            self.log.info("Killing TonY application %s", self.application_id)
            self.hook.kill(self.application_id, "task killed from Airflow")
