"""The process Azkaban runs for a ``TensorFlowJob`` or ``TonyJob``: ``python -m azkaban_jobtype``.

Azkaban's ProcessJob writes the job's resolved props to a file and starts the job type's
``command`` with, among others, these variables set:

``JOB_PROP_FILE``
    The props, as ``java.util.Properties.store`` writes them.
``JOB_OUTPUT_PROP_FILE``
    Where the job may leave a JSON object of output properties for the jobs after it.
``JOB_NAME``
    The job's name.

The runner translates the props (:mod:`azkaban_jobtype.translate`), submits the job, and follows
it until it ends. Its output is the job's log in Azkaban, so it prints:

* ``Submitted application <id>``, the id as a token of its own: Azkaban's log scanner finds YARN
  applications that way (to show them, and to kill them).
* The tracking and TensorBoard URLs as soon as they are known, and a line on every change of state.
* What the training prints, as it prints it, each line after its task (``[worker:0] loss=0.31``):
  the chief's, or the tasks ``tony.output.tasks`` names (``none``: none).
* For a job that failed, at the very end, the last lines of each failed task's stdout and stderr
  (its traceback).

It writes ``tony.application.id``, ``tony.final.status``, ``tony.tracking.url`` and
``tony.tensorboard.url`` to ``JOB_OUTPUT_PROP_FILE`` (with ``tony.lineage.namespace``,
``tony.lineage.job`` and ``tony.lineage.run-id`` where OpenLineage is configured: the run it
reports, see :mod:`.lineage`; once on submission, again at the end, then
with the final figures: ``tony.progress.step``, ``tony.progress.total``, ``tony.metric.<name>`` for
each metric the training reported last, and ``tony.<type>.<index>.max_rss_mb`` /
``.gpu_util_percent`` per task), writes the final status, URLs and figures to the job's
attachment file when its props name one (``azkaban.job.attachment.file``: Azkaban returns it
through ``fetchExecJobStats``) as a JSON list holding one record, and
exits 0 only when the application SUCCEEDED: 1 when it failed or was killed, 2 when the props
are wrong (nothing is submitted then), 128 + the signal number when it was stopped.

Azkaban cancels a job with SIGTERM and follows with SIGKILL 30 seconds later; on SIGTERM (or
SIGINT) the runner kills the application, waiting at most :data:`KILL_TIMEOUT` seconds for it to
stop, records the final status and exits.

An application an earlier attempt of the same job in the same execution submitted and that still
runs (its runner was killed without the chance to stop it) is followed instead of submitting a
second one. It is found by the identity the runner gives its job (:mod:`tony_workflow.context`):
an HMAC of the execution id, flow and job and of the web server's host, keyed by the executor's
own key, the file ``TONY_REATTACH_KEY_FILE`` names (the plugin's ``reattach.key``, which
``tony-azkaban install-plugin`` makes), else ``$TONY_HOME/azkaban-reattach.key``, made on first
use. Another Azkaban server (another key, another host) counts its execution ids from 1 too, and
a job whose props merely carry the same ids is not followed either; nor is another user's job.

The backend is the props' ``tony.backend``, else ``$TONY_BACKEND``, else ``local``.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from tony_workflow.client import TonyClient
from tony_workflow.client.follow import JobUpdate, diff
from tony_workflow.client.output import parse_tasks
from tony_workflow.client.saying import saying
from tony_workflow.errors import ConfigError, SpecError, SubmissionRefused, TonyError
from tony_workflow.spec import SpecIssue
from tony_workflow.status import JobStatus, hanging

from .props import load_properties
from .translate import backend_name, describe, translate

__all__ = ["KILL_TIMEOUT", "OUTPUT_KEYS", "main", "run"]

#: The keys of the output JSON object.
OUTPUT_KEYS = ("tony.application.id", "tony.final.status", "tony.tracking.url", "tony.tensorboard.url")

#: Seconds the runner waits for a killed application to stop before it force-kills it; well
#: inside the 30 s Azkaban allows between SIGTERM and SIGKILL.
KILL_TIMEOUT = 15.0

POLL_INTERVAL = 1.0
EXIT_FAILED = 1
EXIT_USAGE = 2


class _Terminate:
    """Remembers the first stop signal; the main loop polls it, so a signal never interrupts a request."""

    def __init__(self):
        self.signum: int | None = None

    def __call__(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self)


def refused(error: TonyError, what: str, say) -> int:
    """Writes why nothing was submitted to the job's log and returns the runner's exit code: the
    one place the job type maps the project's errors. A spec's problems get a line each."""
    if isinstance(error, SpecError):
        say(f"error: {what}:")
        for issue in error.issues:
            say(f"  {issue}")
    elif isinstance(error, SubmissionRefused):
        say(f"error: {what} by the cluster: {error}")
    else:
        say(f"error: {what}: {error}")
    return EXIT_USAGE


def run(out: TextIO | None = None) -> int:
    """Runs the job Azkaban's environment describes, printing to ``out`` (default stdout); returns the
    exit code."""
    env = os.environ
    out = out or sys.stdout

    def say(line: str) -> None:
        print(line, file=out, flush=True)

    stop = _Terminate()
    stop.install()

    prop_file = env.get("JOB_PROP_FILE")
    if not prop_file:
        say("error: JOB_PROP_FILE is not set: this command is started by Azkaban's ProcessJob "
            "for a TensorFlowJob or TonyJob, with the job's props in that file")
        return EXIT_USAGE
    job_name = env.get("JOB_NAME") or Path(prop_file).stem
    label = f"job {job_name}"
    try:
        # Azkaban substituted ${...} before it stored the props. Not again: a value may hold text
        # that looks like a reference only after substitution, and Azkaban does not rescan it either.
        resolved = load_properties(prop_file, source=label).flatten()
        base_dir = resolved.get("working.dir") or os.getcwd()
        spec = translate(resolved, source=label, base_dir=base_dir, check_paths=True)
        if spec.context:
            spec = spec.with_identity(_reattach_key(env, say), spec.context.get("host", ""))
        backend = backend_name(resolved, env)
        try:
            client = TonyClient(backend)
        except ConfigError as exc:
            raise SpecError([SpecIssue("tony.backend", backend, str(exc), label)]) from None
    except TonyError as exc:
        return refused(exc, f"the props of {label} cannot be submitted", say)

    if stop.signum is not None:
        say(f"Received {signal.Signals(stop.signum).name} before submission: nothing was submitted")
        return 128 + stop.signum
    try:
        # An earlier attempt of this job in this execution whose runner died (an executor restarted)
        # may have left its application running: follow that one rather than train twice.
        running = client.find_running(spec)
    except TonyError as exc:
        say(f"warning: could not look for an application of an earlier attempt: {exc}")
        running = None
    if running:
        say(f"Application {running}, submitted by an earlier attempt of {label} in this execution, still runs: "
            "following it instead of submitting another")
        handle = client.attach(running)
    else:
        say(f"Submitting {label} ({spec.name}) to the {backend} backend:")
        for line in describe(spec):
            say(line)
        try:
            with saying(say):
                handle = client.submit(spec)
        except TonyError as exc:
            return refused(exc, f"{label} was refused", say)

    # Its own line, the id its own whitespace-separated token: what Azkaban's log scanner looks for.
    say(f"Submitted application {handle.app_id}")
    spec = handle.spec or spec  # as submitted: its inputs planned, for their lineage
    lineage = _lineage(spec, client, say)
    linked = lineage.output_props() if lineage else {}
    if lineage:
        say(f"OpenLineage run {lineage.run_id} of job {lineage.job} (namespace {lineage.namespace})")
    output = env.get("JOB_OUTPUT_PROP_FILE")
    status = shown = None
    # What the followed tasks print (tony.output.tasks; the chief by default) goes into the job's log too.
    tasks = parse_tasks(spec.get("tony.output.tasks"))
    printed = handle.output(tasks) if tasks != [] else None
    for update in handle.follow(poll_interval=POLL_INTERVAL, stop=lambda: stop.signum is not None, output=printed,
                                on_output=lambda lines: [say(line.render()) for line in lines]):
        status = shown = update.status
        _show(update, say)
        if update.first:
            _write_output(output, status, linked=linked)
        # Once the AM says where the checkpoints go, the run's outputs are known.
        if lineage and (status.checkpoint_location or status.is_final):
            lineage.start(status)
    if status is None:
        status = handle.status()
    if stop.signum is not None and not status.is_final:
        name = signal.Signals(stop.signum).name
        say(f"Received {name}: killing application {handle.app_id}")
        try:
            status = handle.kill(f"killed by Azkaban ({name})", timeout=KILL_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - a kill that fails must still leave the output and an exit code
            say(f"error: killing {handle.app_id} failed: {exc}")
            status = handle.status()
        update = diff(shown, status)
        if update is not None:
            _show(update, say)

    _write_output(output, status, final=True, linked=linked)
    if lineage:
        lineage.end(status)
    _write_attachment(resolved.get("azkaban.job.attachment.file"), status, say)
    say(f"Final status of {handle.app_id}: {status.state}")
    if status.diagnostics and not status.succeeded:
        say(hanging(f"Diagnostics: {status.diagnostics}"))
    if status.is_final:
        _advise(client, handle.app_id, say)
    if status.is_final and not status.succeeded and (tails := handle.failed_output(status)):
        say(tails)  # the log ends with what the failed tasks printed last: their tracebacks
    if stop.signum is not None:
        return 128 + stop.signum
    return 0 if status.succeeded else EXIT_FAILED


def _advise(client: TonyClient, app_id: str, say, wait_s: float = 15.0) -> None:
    """The advice for this job's next run, from its record and the earlier runs of this job
    (:mod:`tony_workflow.advice`), as props to set; nothing when the history cannot be read. The
    ApplicationMaster writes the record as it ends: it is waited for a moment."""
    from tony_workflow.advice import advise, runs_of

    try:
        history = client.history()
        deadline = time.monotonic() + wait_s
        while (record := history.get(app_id)) is None and time.monotonic() < deadline:
            time.sleep(0.5)
        found = advise(runs_of(history, record)) if record is not None else []
    except Exception as exc:  # noqa: BLE001 - the history's store failing leaves the job's outcome as it is
        say(f"warning: no advice for the next run: the job history could not be read ({exc})")
        return
    for a in found:
        changes = ", ".join(f"{k}={v}" for k, v in a.changes.items())
        say(f"Advice for the next run [{a.severity}] {a.heuristic}: {a.message}" + (f"; set {changes}" if changes else ""))


def _show(update: JobUpdate, say) -> None:
    """The job log's lines for one update: new URLs, then the status line."""
    if update.tracking_url:
        say(f"Tracking URL: {update.tracking_url}")
    if update.tensorboard_url:
        say(f"TensorBoard URL: {update.tensorboard_url}")
    stamp = time.strftime('%H:%M:%S')
    say(f"[{stamp}] {update.status.summary()}")
    if update.new_am_attempt:
        say(hanging(f"[{stamp}] ApplicationMaster attempt {update.status.am_attempt}: {update.status.diagnostics}"))
    for warning in update.new_warnings:
        say(f"[{stamp}] WARNING {warning}")
    if update.starting:
        say(f"[{stamp}] {update.starting}")


def _final_figures(status: JobStatus) -> dict[str, str]:
    """Output properties for the jobs after this one: where training got and what it used."""
    out: dict[str, str] = {}
    progress = status.progress or {}
    for key in ("step", "total"):
        if progress.get(key) is not None:
            out[f"tony.progress.{key}"] = str(progress[key])
    for name, value in (progress.get("metrics") or {}).items():
        out[f"tony.metric.{name}"] = repr(value)
    for t in status.tasks:
        for figure in ("max_rss_mb", "gpu_util_percent"):
            if t.metrics.get(figure) is not None:
                out[f"tony.{t.type}.{t.index}.{figure}"] = str(t.metrics[figure])
    return out


def _lineage(spec, client: TonyClient, say):
    """The job's OpenLineage run (:mod:`.lineage`), where OpenLineage is configured; else None."""
    from .lineage import configured
    if not configured():
        return None
    try:
        from tony_workflow.storage import qualified

        from .lineage import Lineage
        conf_dir = getattr(client.backend, "conf_dir", None)
        return Lineage(spec, client.backend.name, lambda location: qualified(location, conf_dir), say)
    except Exception as exc:  # noqa: BLE001 - no lineage is no reason to fail a training job
        say(f"warning: OpenLineage is configured but cannot report this job: {exc}")
        return None


def _write_output(path: str | None, status: JobStatus, final: bool = False,
                  linked: dict[str, str] | None = None) -> None:
    if not path:
        return
    # Azkaban turns every value into a string with toString(); a null would lose the whole
    # object, so missing URLs are empty strings.
    values = dict(zip(OUTPUT_KEYS, (status.application_id, status.state, status.tracking_url or "",
                                    status.tensorboard_url or "")))
    values.update(linked or {})
    if final:
        values.update(_final_figures(status))
    Path(path).write_text(json.dumps(values, indent=1) + "\n", encoding="utf-8")


def _write_attachment(path: str | None, status: JobStatus, say) -> None:
    """The job's attachment (Azkaban shows it with the job's stats): the final status, its URLs,
    progress and every task's end and figures, as the only record of a list."""
    if not path:
        return
    record = {"application_id": status.application_id, "state": status.state, "diagnostics": status.diagnostics,
              "tracking_url": status.tracking_url, "tensorboard_url": status.tensorboard_url,
              "sessions": status.session_id + 1, "am_attempts": status.am_attempt, "progress": status.progress,
              "started_at": status.started_at, "finished_at": status.finished_at,
              "tasks": [{"task_id": t.task_id, "state": t.state, "exit_code": t.exit_code, "restarts": t.restarts,
                         "metrics": {k: v for k, v in t.metrics.items() if k != "gpus"}} for t in status.tasks]}
    try:
        # Azkaban reads an attachment as a list of stats records; anything else makes its
        # fetchExecJobStats fail with a server error.
        Path(path).write_text(json.dumps([record], indent=1) + "\n", encoding="utf-8")
    except OSError as exc:  # the job's outcome does not depend on its attachment
        say(f"warning: the job's attachment {path} was not written: {exc}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m azkaban_jobtype``: takes no arguments; everything comes from Azkaban's environment."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args:
        print("usage: python -m azkaban_jobtype  (run by Azkaban's ProcessJob; reads JOB_PROP_FILE)",
              file=sys.stderr)
        return EXIT_USAGE
    return run()


#: The variable naming the executor's key (the plugin's ``env.TONY_REATTACH_KEY_FILE``).
KEY_FILE_VAR = "TONY_REATTACH_KEY_FILE"


def _reattach_key(env, say) -> bytes | None:
    """The executor's key for naming its jobs (see the module's notes); None, said once, when
    there is none to be had: an earlier attempt's application is then not looked for."""
    from tony_workflow.context import deployment_key
    from tony_workflow.spec.site import tony_home
    path = env.get(KEY_FILE_VAR) or str(tony_home() / "azkaban-reattach.key")
    try:
        return deployment_key(path, create=not env.get(KEY_FILE_VAR))
    except OSError as exc:
        say(f"warning: no key to name this job's application by ({exc}): an application left by an earlier "
            "attempt will not be found")
        return None
