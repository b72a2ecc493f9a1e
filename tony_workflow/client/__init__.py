"""The client's program: validate a spec, submit it to a backend, and follow the application.

The command line (``cli``) and the workflow front ends (``airflow_provider``, ``azkaban_jobtype``)
go through this package; ``follow`` says what changed between two statuses, which every front end
formats in its own way.

``TonyClient.submit(spec)`` returns a :class:`JobHandle`; ``TonyClient.attach(app_id)`` returns one
for an application submitted earlier (by this process or any other). Every front end (CLI, Airflow,
Azkaban) goes through here.
"""
from __future__ import annotations

import difflib
import itertools
import os
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..archive import unsafe_entry
from ..backends import Backend, get_backend, history_server
from ..context import identity_tag, matches
from ..errors import SubmissionRefused, UnknownApplication
from ..rpc import AMClient, AMError, AMUnreachable
from ..spec import JobSpec, SpecError, SpecIssue, load_job
from ..spec.keys import task_key
from ..spec.notebook import absent_jupyter, is_notebook, notebook_problem
from ..spec.resources import resource_issues
from ..spec.validation import problems as validation_problems
from ..status import JobStatus, check_application_id
from .data import data_issues, with_manifest
from .follow import Follower, JobUpdate
from .output import OUTPUT_INTERVAL_S, TAIL_LINES, Cursor, OutputFollower, OutputLine, Piece, StatusGap, failed_output

if TYPE_CHECKING:
    from ..history import JobHistory, SubmitterHistory

__all__ = ["JobHandle", "SubmissionRefused", "TonyClient", "UnknownApplication", "check_paths", "executes_problem", "load_job",
           "reads_cluster_files", "venv_problem"]

# How long ``JobHandle.wait`` gives an AM that has announced its final state to unregister.
FINISH_GRACE_S = 60.0


def check_paths(spec: JobSpec, backend: str = "local") -> None:
    """SpecError when ``src_dir`` or ``python_venv`` names nothing on this machine, or ``python_venv``
    is an archive that would unpack outside its directory (or, on YARN, an ``hdfs://`` URI, which
    the cluster localizes)."""
    issues = []
    if spec.src_dir and not Path(spec.src_dir).is_dir():
        issues.append(SpecIssue("src_dir", spec.src_dir, "must be an existing directory", spec.source))
    if spec.python_venv:
        problem = venv_problem(spec.python_venv, remote=backend == "yarn")
        if problem:
            issues.append(SpecIssue("python_venv", spec.python_venv, problem, spec.source))
    problem = executes_problem(spec)
    if problem:
        issues.append(SpecIssue("executes", spec.executes, problem, spec.source))
    issues.extend(resource_issues(spec.conf, set(spec.declared_types()), remote_ok=reads_cluster_files(backend),
                                  source=spec.source))
    if issues:
        raise SpecError(issues)


def _conf_dir(backend: Backend) -> str | None:
    conf_dir = getattr(backend, "conf_dir", None)
    return str(conf_dir) if conf_dir else None


def reads_cluster_files(backend: str) -> bool:
    """Whether ``backend`` can give a container files from the cluster's file system: YARN
    always; the embedded cluster when a Hadoop configuration says where HDFS is."""
    return backend == "yarn" or bool(os.environ.get("HADOOP_CONF_DIR"))


def executes_problem(spec: JobSpec) -> str | None:
    """Why the script ``executes`` names cannot run, or None: a relative script that some task runs
    (no command of its own replaces it), or that a single-node job runs in its ApplicationMaster
    (no tony.am.command replaces it), must be in ``src_dir``, which is what every task is given.
    Without ``src_dir`` the script is the nodes' own, which only the nodes can tell."""
    if not spec.executes or not spec.src_dir or not Path(spec.src_dir).is_dir():
        return None
    try:
        types = list(spec.tasks)
    except SpecError:  # a type's values do not parse (said elsewhere): its script is still checked
        types = spec.declared_types()
    runners = [task_key(t, "command") for t in types] or ["tony.am.command"]
    if all(spec.get(key) or spec.container_command for key in runners):
        return None
    try:
        words = shlex.split(spec.executes)
    except ValueError:
        return None
    # The script itself, also in TonY's form of a whole command line ("python x.py --flag").
    script = next((w for w in words if w.endswith((".py", ".sh", ".ipynb"))), None)
    if script is None or "://" in script or Path(script).is_absolute():
        return None
    src = Path(spec.src_dir)
    if (src / script).is_file():
        return _notebook_problem(spec, src / script) if is_notebook(script) else None
    scripts = [p.relative_to(src).as_posix() for p in itertools.islice(src.rglob("*"), 5000)
               if p.suffix in (".py", ".sh", ".ipynb") and p.is_file()]
    close = difflib.get_close_matches(script, scripts, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    names = "is" if script == spec.executes.strip() else f"names {script}, which is"
    return f"{names} not a file in src_dir {spec.src_dir}{hint}: every task runs it from there"


def _notebook_problem(spec: JobSpec, path: Path) -> str | None:
    """Why the notebook at ``path`` cannot run, or None: not a notebook, or no Jupyter to run it
    in the job's Python (this one's, which the tasks run, or ship on YARN, unless the job names
    its own)."""
    problem = notebook_problem(path)
    if problem or spec.python_venv or spec.python_binary_path:
        return problem
    absent = absent_jupyter()
    if absent:
        return (f"runs a notebook, which needs {', '.join(absent)} in the job's Python (pip install "
                "'tony-workflow[notebook]' where you submit from, or give the job a python_venv that has them)")
    return None


def venv_problem(path: str, remote: bool = False) -> str | None:
    """Why ``path`` cannot be shipped as a job's virtualenv, or None. ``remote``: a cluster that
    localizes files from HDFS (YARN), where an ``hdfs://`` URI of a zip is one too (TonY's form)."""
    if "://" in path:
        if remote and path.startswith("hdfs://"):
            return None
        return ("must be a virtualenv directory or zip file on this machine" + (", or an hdfs:// URI of a zip"
                                                                               if remote else
                                                                               " (an hdfs:// URI needs YARN)"))
    venv = Path(path)
    if venv.is_dir():
        return None
    if not venv.is_file():
        return "must be an existing virtualenv directory or zip file"
    try:
        unsafe = unsafe_entry(venv)
    except (ValueError, OSError) as exc:
        return f"must be a virtualenv directory or zip file: it {exc}"
    return f"cannot be unpacked safely: {unsafe}" if unsafe else None


def _pause(seconds: float, deadline: float | None, stop: Callable[[], bool] | None) -> bool:
    """Sleeps ``seconds`` (never past ``deadline``); True when ``stop()`` said to stop meanwhile."""
    end = time.monotonic() + seconds
    if deadline is not None:
        end = min(end, deadline)
    while True:
        if stop is not None and stop():
            return True
        left = end - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(left, 0.1) if stop is not None else left)


def _links_after_the_end(st: JobStatus) -> JobStatus:
    """``st`` with a final job's links on the history server's pages, when one is configured."""
    if not st.is_final:
        return st
    server = history_server()
    if server:
        st.tracking_url = f"{server}/jobs/{st.application_id}"
        if st.tensorboard_url:
            st.tensorboard_url = f"{server}/jobs/{st.application_id}/tensorboard/"
    return st


class JobHandle:
    """One application: status, wait, kill and logs. Cheap to create; holds no connection."""

    def __init__(self, app_id: str, backend: Backend, spec: JobSpec | None = None):
        self.app_id = check_application_id(app_id)
        self.backend = backend
        #: The spec as submitted (its inputs planned), when this handle submitted it.
        self.spec = spec

    def __repr__(self) -> str:
        return f"JobHandle({self.app_id!r}, backend={self.backend.name!r})"

    def _am(self) -> AMClient | None:
        ep = self.backend.endpoint(self.app_id)
        return AMClient(ep.address, ep.token, timeout=5, retries=1) if ep else None

    def status(self) -> JobStatus:
        """Live status from the AM, or the last persisted one once the AM is gone. A job that
        ended has its tracking and TensorBoard links on the history server, where one is
        configured (:func:`~tony_workflow.backends.history_server`): its own died with it."""
        am = self._am()
        if am is not None:
            try:
                return _links_after_the_end(JobStatus.from_dict(am.status()))
            except (AMUnreachable, AMError):
                pass
        return _links_after_the_end(self.backend.stored_status(self.app_id))

    def record(self) -> dict | None:
        """The job's record (timeline, tasks with their figures, figures over time, configuration:
        :mod:`tony_workflow.history`): live from the AM while it runs, then from the job history,
        else (a job whose AM has not started: a YARN job waiting for its turn) built from what
        the cluster says of it; None when the cluster does not know it either."""
        am = self._am()
        if am is not None:
            try:
                return am.record()
            except (AMUnreachable, AMError):
                pass
        from ..history import build_record, submitter_history

        record = submitter_history(self.backend).get(self.app_id)
        if record is None:
            # Not started yet (a YARN job waiting for its turn at the gate), or gone without a
            # record: what the cluster says of it.
            try:
                status = self.backend.stored_status(self.app_id)
            except UnknownApplication:
                return None
            record = build_record(status.to_dict(), [], user="", conf={}, requested={})
        return record

    def follow(self, *, poll_interval: float = 1.0, timeout: float | None = None,
               stop: Callable[[], bool] | None = None, output: OutputFollower | None = None,
               on_output: Callable[[list[OutputLine]], None] | None = None,
               output_interval: float = OUTPUT_INTERVAL_S) -> Iterator[JobUpdate]:
        """Yields a :class:`~tony_workflow.client.follow.JobUpdate` for the first status and for every
        change after it, reading the status every ``poll_interval`` seconds. Ends after the update
        with the final status (once the AM has released its containers and unregistered: see
        :meth:`wait`), when ``timeout`` seconds have passed, or when ``stop()`` returns true (it is
        asked at least every 0.1 s while waiting).

        With ``output`` (:meth:`output`), what the followed tasks print is passed to
        ``on_output`` as it comes, every ``output_interval`` seconds, each batch before the update
        read with it; at the end, every last line before the final update."""
        deadline = None if timeout is None else time.monotonic() + timeout
        follower = Follower(self.status)

        def lines(st: JobStatus, final: bool = False) -> None:
            if output is not None and on_output is not None:
                got = output.drain(st) if final else output.poll(st)
                if got:
                    on_output(got)

        while True:
            update = follower.poll()
            st = follower.last
            if st.is_final:
                settled = self._settled(st, poll_interval, deadline)
                update = follower.see(settled) or update
                lines(settled, final=True)
                if update is not None:
                    yield update
                return
            lines(st)
            if update is not None:
                yield update
            if deadline is not None and time.monotonic() >= deadline:
                return
            if output is None or on_output is None:
                if _pause(poll_interval, deadline, stop):
                    return
                continue
            gap = StatusGap(poll_interval, output_interval)
            while (pause := gap.pause()) is not None:
                if _pause(pause, deadline, stop):
                    return
                if gap.look():
                    lines(st)

    def failed_output(self, status: JobStatus, lines: int = TAIL_LINES) -> str:
        """The last ``lines`` of each failed task's stdout and stderr in ``status``, as a block for
        an error (:func:`.output.failed_output`); empty when none failed or none can be read."""
        try:
            return failed_output(status, self._read_output, lines)
        except Exception:  # noqa: BLE001 - the error itself matters more than its last lines
            return ""

    def wait(self, *, poll_interval: float = 1.0, timeout: float | None = None,
             on_update: Callable[[JobStatus], None] | None = None) -> JobStatus:
        """Blocks until the application ends (or ``timeout`` seconds pass); returns the last status.
        ``on_update`` is called with every status that differs from the previous one."""
        last = None
        for update in self.follow(poll_interval=poll_interval, timeout=timeout):
            last = update.status
            if on_update:
                on_update(update.status)
        return last if last is not None else self.status()

    def _settled(self, st: JobStatus, poll_interval: float, deadline: float | None) -> JobStatus:
        """The AM announces a final state before it has released its containers, written the final
        status and unregistered from the cluster. Waits (briefly) for that to finish, so that when
        ``wait`` returns the resources are free and the cluster's own record agrees."""
        grace = time.monotonic() + FINISH_GRACE_S
        if deadline is not None:
            grace = min(grace, max(deadline, time.monotonic() + 5.0))
        while not self.backend.am_gone(self.app_id) and time.monotonic() < grace:
            time.sleep(min(poll_interval, 0.5))
        try:
            stored = _links_after_the_end(self.backend.stored_status(self.app_id))
        except UnknownApplication:
            return st
        return stored if stored.is_final else st

    def kill(self, reason: str = "killed by user", timeout: float = 60.0) -> JobStatus:
        """Asks the AM to stop every task; force-kills if the AM does not answer, or when the
        cluster must decide whether this user may (another user's job on YARN)."""
        am = self._am()
        if am is not None and self.backend.kills_through_cluster(self.app_id):
            am = None
        if am is not None:
            try:
                am.kill(reason)
                st = self.wait(poll_interval=0.2, timeout=timeout)
                if st.is_final:
                    return st
            except (AMUnreachable, AMError):
                pass
        st = self.backend.stored_status(self.app_id)
        if not st.is_final:
            self.backend.force_kill(self.app_id)
        return _links_after_the_end(self.backend.stored_status(self.app_id))

    def output(self, tasks: Sequence[str] | None = None, cursor: Cursor | None = None) -> OutputFollower:
        """A follower of what ``tasks`` (task ids or types; None: the chief; ``[]``: none) print,
        from ``cursor`` (:mod:`.output`): poll it with the job's status, let it
        :meth:`~.OutputFollower.follow` the job, or give it to :meth:`follow`."""
        return OutputFollower(self._read_output, tasks, cursor)

    def _read_output(self, p: Piece, offset: int, limit: int) -> tuple[bytes, int | None] | None:
        return self.backend.read_output(self.app_id, p.container, p.stream, p.where, offset, limit)

    def logs(self, task: str | None = None, into: Path | None = None) -> dict[str, Path]:
        """The log files of ``task``, or of every task and the AM, by name (``worker:0/stdout``).
        A cluster whose files live elsewhere (YARN) copies them under ``into`` (by default a
        folder of the job's in TONY_HOME, replaced at each call)."""
        return self.backend.logs(self.app_id, task, status=self.status(), into=into)


class TonyClient:
    """Entry point for submitting and following applications on one backend."""

    def __init__(self, backend: str | Backend = "local", **backend_kwargs: object):
        self.backend = backend if isinstance(backend, Backend) else get_backend(backend, **backend_kwargs)

    def submit(self, spec: JobSpec, *, checked: bool = False) -> JobHandle:
        """Validates ``spec`` (raising :class:`SpecError` listing every problem, with nothing
        submitted), checks the cluster can ever hold it (:class:`SubmissionRefused`, naming the key
        to change, otherwise), and starts the application. ``checked``: the spec is what
        :meth:`preflight` or :meth:`checked` returned, not to be checked again."""
        if not checked:
            spec = self.preflight(spec)
        app_id = self.backend.submit(spec)
        handle = JobHandle(app_id, self.backend, spec)
        # Return once the AM answers, so callers can show the tracking URL straight away.
        deadline = time.time() + 30
        while time.time() < deadline:
            st = handle.status()
            if st.tracking_url or st.is_final:
                break
            time.sleep(0.05)
        return handle

    def preflight(self, spec: JobSpec) -> JobSpec:
        """Every check a submission makes before anything is sent, every problem at once (one
        SpecError): the keys and their values, the paths this machine must have, and the inputs,
        which it plans. Returns the spec as it would be submitted (its inputs' plan named)."""
        issues = validation_problems(spec)
        try:
            check_paths(spec, self.backend.name)
        except SpecError as e:
            issues.extend(e.issues)
        data, plans = data_issues(spec, self.backend.name, reads_cluster_files(self.backend.name),
                                  hadoop_conf_dir=_conf_dir(self.backend), login=getattr(self.backend, "login", None))
        issues.extend(data)
        if issues:
            raise SpecError(issues)
        return with_manifest(spec, plans)

    def checked(self, load: Callable[[], JobSpec]) -> JobSpec:
        """The spec ``load()`` gives (:func:`load_job`), through :meth:`preflight`: every problem
        of both at once, in one SpecError. A spec that loads with problems (an unknown field, a
        value that does not parse) is still checked as far as it could be read."""
        try:
            return self.preflight(load())
        except SpecError as exc:
            if exc.spec is None:
                raise
            found = exc.issues
            try:
                self.preflight(exc.spec)
            except SpecError as more:
                found = [*found, *more.issues]
            raise SpecError(found) from None

    def attach(self, app_id: str) -> JobHandle:
        """A handle on an existing application; :class:`UnknownApplication` if the cluster does not
        know it (:class:`~tony_workflow.errors.NotAnApplicationId` if ``app_id`` is no id at all)."""
        handle = JobHandle(app_id, self.backend)  # the id is checked as the handle is made
        self.backend.check_exists(handle.app_id)
        return handle

    def record(self, app_id: str) -> dict | None:
        """An application's record (see :meth:`JobHandle.record`), also when the cluster no longer
        knows it and only the job history does; None when neither has it."""
        try:
            return self.attach(app_id).record()
        except UnknownApplication:
            return self.history().get(app_id)

    def history(self) -> JobHistory | SubmitterHistory:
        """The job history this client's backend reads, as its login where the cluster is secure:
        with the jobs it submitted to run as other users, whose records are theirs
        (:func:`~tony_workflow.history.submitter_history`)."""
        from ..history import submitter_history

        return submitter_history(self.backend)

    def list(self, context: Mapping[str, str] | None = None, tags: Sequence[str] = ()) -> list[JobStatus]:
        """Every application's status, oldest first; with ``context``, those whose context has
        these fields (by name, compared without case: ``{"dag_id": "nightly"}``), with ``tags``,
        those with all these tags (the user's or the context's, as YARN writes them)."""
        out = []
        for app_id in self.backend.list_applications():
            try:
                status = JobHandle(app_id, self.backend).status()
            except UnknownApplication:  # ended and cleaned up between the listing and the look
                continue
            if context and not matches(status.context, context):
                continue
            if tags and not {t.lower() for t in tags} <= set(self.backend.tags(app_id)):
                continue
            out.append(status)
        return out

    def find_running(self, spec: JobSpec) -> str | None:
        """The newest application not yet final that the workflow task run ``spec`` comes from
        submitted before, as the same user, or None: found by the identity a front end gave
        ``spec`` (:meth:`~tony_workflow.spec.JobSpec.with_identity`); a spec without one (submitted
        by hand, or by a front end with no key) finds nothing."""
        tag = identity_tag(spec.identity)
        found = self.backend.running_with(tag, spec) if tag else []
        return found[-1] if found else None

