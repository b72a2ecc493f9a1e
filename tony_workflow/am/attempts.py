"""ApplicationMaster attempts: what a later attempt takes over from the ones before it.

A job's AM may die (killed, out of memory, its machine lost) or hang. The supervisor
(:mod:`tony_workflow.am.supervisor`) then starts another attempt, up to ``tony.am.max-attempts``. The
new attempt knows nothing but what the job persisted: its status (which session ran, how many
session relaunches were spent, when the job started), its events, and its checkpoint store. It
starts the next session, whose tasks restore the newest checkpoint, keeps the job's start time (so
``tony.application.timeout`` counts from the submission) and listens where the earlier attempt
did when it can (so the tracking URL stays the same).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..protocol import ATTEMPT_ENV, COUNTED_ENV, OWNER_ENV, RESULT_FILE
from ..status import JobState, JobStatus, TaskState, TaskStatus, status_from_state

if TYPE_CHECKING:
    from ..spec import JobSpec
    from .policy import Policy

__all__ = [
    "ATTEMPT_ENV",
    "COUNTED_ENV",
    "OWNER_ENV",
    "RESULT_FILE",
    "Resume",
    "attempt_state",
    "finished_verdict",
    "mark_am_stopped",
    "resume_point",
    "status_from_state",
    "write_am_info",
]



def write_am_info(app_dir: Path, address: str, tracking_url: str | None) -> None:
    """``am.json``: where the running attempt listens (a later one takes the same port), and its
    pid with its start time (once the process is gone, the pid may name another one)."""
    from ..process import start_time

    (Path(app_dir) / "am.json").write_text(json.dumps({"address": address, "pid": os.getpid(),
                                                       "started": start_time(os.getpid()),
                                                       "tracking_url": tracking_url}))


def mark_am_stopped(app_dir: Path) -> None:
    """Marks ``am.json`` stopped: what clients wait for once the final status is written. Written
    by the AM as it ends, or by its supervisor for an AM that could not."""
    path = Path(app_dir) / "am.json"
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if not info.get("stopped"):
        info["stopped"] = True
        path.write_text(json.dumps(info))


@dataclass(frozen=True)
class Resume:
    """Where attempt ``attempt`` of the AM starts."""

    attempt: int = 1
    #: earlier attempts that count against tony.am.max-attempts
    counted: int = 0
    first_session: int = 0
    retries: int = 0
    reclaims: int = 0
    started_at: float | None = None
    port: int = 0
    #: why the earlier attempt ended, for the status
    diagnostics: str = ""


def resume_point(app_dir: Path, attempt: int | None = None) -> Resume:
    """How attempt ``attempt`` (default: from the environment) of the AM in ``app_dir`` starts."""
    attempt = attempt if attempt is not None else int(os.environ.get(ATTEMPT_ENV) or 1)
    counted = int(os.environ.get(COUNTED_ENV) or max(0, attempt - 1))
    if attempt <= 1:
        return Resume()
    try:
        st = JobStatus.from_dict(json.loads((app_dir / "status.json").read_text()))
    except (OSError, ValueError):
        return Resume(attempt=attempt, counted=counted)
    port = 0
    try:
        port = int(json.loads((app_dir / "am.json").read_text())["address"].rsplit(":", 1)[1])
    except (OSError, ValueError, KeyError, IndexError):
        pass
    # A session that started is over with its attempt: the next one takes its place.
    first = st.session_id + 1 if st.attempts else 0
    return Resume(attempt=attempt, counted=counted, first_session=first, retries=st.retries, reclaims=st.reclaims,
                  started_at=st.started_at, port=port, diagnostics=st.diagnostics)


def attempt_state(status: JobStatus, resume: Resume) -> dict[str, Any]:
    """What a later attempt in another container needs of this one (the job's status file stays
    behind with the container): kept by the cluster (:meth:`ClusterManager.save_attempt_state`)."""
    started = bool(status.attempts)  # this attempt has started a session (else: where it will)
    return {"attempt": resume.attempt, "counted": resume.counted,
            "session_id": status.session_id if started else max(0, resume.first_session - 1),
            "attempts": status.attempts if started else resume.first_session,
            "retries": status.retries, "reclaims": status.reclaims,
            "started_at": status.started_at, "diagnostics": status.diagnostics, "name": status.name,
            "backend": status.backend, "tracking_url": status.tracking_url}


def finished_verdict(policy: Policy, spec: JobSpec, results: dict[str, int]) -> tuple[str, str] | None:
    """The job's end when the last session's training had completed, as ``results`` (task id ->
    exit code, from the executors' result files) says, and the failure rules call that a success;
    else None (a new session runs). Completed means: every tracked task finished, or the chief
    finished successfully (it ends training; the others may have been stopped for losing their AM
    a moment later). Training that completed while the AM was gone is not run again: a trainer
    may well have removed its backup once it was done."""
    chief = f"{policy.chief[0]}:{policy.chief[1]}"
    chief_done = results.get(chief) == 0
    if any(code != 0 for code in results.values()):
        return None  # a failure: the failure rules decide, in a new session
    tasks = []
    for ttype, task in spec.tasks.items():
        if ttype not in policy.tracked:
            continue
        for index in range(task.instances):
            code = results.get(f"{ttype}:{index}")
            if code is None and not chief_done:
                return None
            state = TaskState.KILLED if code is None else TaskState.SUCCEEDED if code == 0 else TaskState.FAILED
            tasks.append(TaskStatus(type=ttype, index=index, exit_code=code, state=state))
    if not tasks:
        return None
    state, diagnostics = policy.verdict(tasks)
    if state != JobState.SUCCEEDED:
        return None
    return state, ("every tracked task had finished when the earlier ApplicationMaster attempt ended"
                   + (f"; {diagnostics}" if diagnostics else ""))
