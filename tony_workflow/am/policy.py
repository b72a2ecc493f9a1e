"""TonY's failure rules, as plain data in and a decision out.

The ApplicationMaster asks two questions: what one task's failure means for the job
(:meth:`Policy.decide`), and, once a session is over, what the job's final state is
(:meth:`Policy.verdict`). Both answers depend on the spec and on a few counters only, so they are
computed here from values, with no threads, no I/O and no clock: every rule can be checked by a
table of cases, and the AM is left with the mechanics (killing, relaunching, recording events).

The rules, in the order they apply (docs/architecture.md has the long form):

1. A sidecar type's failure is ignored.
1b. A task that failed before it or any other of its type reported progress, in a way no relaunch can change (its
   script is not there or does not parse, a module it imports is not installed, its container went
   over its memory), fails the job at once with that cause and what to change
   (:func:`deterministic_cause`): every relaunch would end the same way.
2. Restart policy ``task`` relaunches that task alone, in the same session, up to
   ``tony.am.retry-count`` times per task; never the chief, never a stop-on-failure type.
3. While session retries remain, any other failure ends the session and the next one starts.
4. With none left: a failed chief, a failed stop-on-failure type, or (with
   ``tony.application.fail-on-worker-failure-enabled``) any failed tracked task fails the job at
   once; a failed untracked task ends the session and the verdict follows; any other worker
   failure is tolerated.

Before them, a task whose container the cluster took back (:meth:`Policy.decide_reclaimed`: YARN
preempted it, or lost it with its node) did not fail: it is relaunched as rules 2 and 3 would,
without spending ``tony.am.retry-count``, up to ``tony.am.reclaim-retry-count`` times per job.
"""
from __future__ import annotations

import enum
import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..status import JobState, TaskState, TaskStatus

if TYPE_CHECKING:
    from ..spec import JobSpec

__all__ = ["LOST_EXIT_CODE", "Action", "Decision", "Failure", "Policy", "describe_exit", "deterministic_cause",
           "failure_message"]

#: TonY's exit code for a task whose heartbeats stopped (YARN's ContainerExitStatus.INVALID).
LOST_EXIT_CODE = -1000

_FINAL = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED, TaskState.LOST})
_FAILED = frozenset({TaskState.FAILED, TaskState.LOST})


def describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code == LOST_EXIT_CODE:
        return "exit code -1000 (lost: the AM gave up on it)"
    if code > 128 and code - 128 < 65:
        try:
            return f"exit code {code} ({signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return f"exit code {code}"


def failure_message(task_id: str, exit_code: int | None, host: str | None, log_url: str | None = None,
                    extra: str = "") -> str:
    """TonY's line for a failed task, with where to find its log and the tail of its stderr."""
    msg = f"Job {task_id} exited with {describe_exit(exit_code)} on host:{host}"
    if log_url:
        msg += f" (log: {log_url})"
    return msg + (f". {extra.strip()}" if extra.strip() else "")


#: YARN's exit status of a container killed for going over its memory (the embedded cluster's too).
MEMORY_KILLED_EXIT_CODE = -104
_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")
_CANNOT_IMPORT = re.compile(r"ImportError: cannot import name '([^']+)' from '([^']+)'")
_NO_SCRIPT = re.compile(r"can't open file '([^']+)'")
_SYNTAX = re.compile(r"^\s*(SyntaxError|IndentationError|TabError): (.*)$", re.MULTILINE)


def deterministic_cause(failure: Failure) -> str | None:
    """Why every relaunch of ``failure``'s task would fail the same way, with what to change; None
    when that is not certain (it got past its start, or failed for a reason a relaunch may not
    meet again)."""
    if failure.progressed:
        return None
    text = failure.diagnostics
    if m := _NO_MODULE.search(text):
        module = m.group(1).split(".", 1)[0]
        return (f"{failure.task_id} could not import {m.group(1)}: {module} is not in the job's environment "
                f"(install it where the job is submitted from, and on YARN import it in the job's source or name "
                f"it in tony.yarn.environment-packages so that it goes with the job; or give the job a "
                f"python_venv that has it)")
    if m := _CANNOT_IMPORT.search(text):
        return (f"{failure.task_id} could not import {m.group(1)} from {m.group(2)}: the job's environment has "
                f"another version of {m.group(2).split('.', 1)[0]} than its source expects")
    if m := _NO_SCRIPT.search(text):
        return f"{failure.task_id}'s script {m.group(1)} is not there (executes, src_dir)"
    if m := _SYNTAX.search(text):
        return f"{failure.task_id}'s script does not parse ({m.group(1)}: {m.group(2).strip()})"
    if failure.exit_code == MEMORY_KILLED_EXIT_CODE:
        return (f"{failure.task_id}'s container went over its memory before it reported any progress: raise "
                f"tony.{failure.type}.memory")
    return None


class Action(enum.Enum):
    """What the AM does about one failed task."""

    IGNORE = "ignore"                    # a sidecar: recorded, nothing else
    RESTART_TASK = "restart_task"        # relaunch this task alone, in the same session
    RESTART_SESSION = "restart_session"  # tear the session down; the next one starts
    FAIL_JOB = "fail_job"                # the job fails now
    END_SESSION = "end_session"          # the session stops and the verdict decides
    TOLERATE = "tolerate"                # the session goes on without the task


@dataclass(frozen=True)
class Failure:
    """One task's failure, as the AM saw it."""

    type: str
    index: int
    exit_code: int | None
    host: str | None = None
    log_url: str | None = None
    diagnostics: str = ""
    #: whether the task, or another of its type in this job, reported any progress before it
    #: failed: a container of the same size and command got past its start, so its failure may not
    #: come again (a replacement killed for memory while restoring, where the others trained on)
    progressed: bool = False

    @classmethod
    def of(cls, status: TaskStatus, diagnostics: str = "",
           progressed_types: frozenset[str] | set[str] = frozenset()) -> Failure:
        return cls(status.type, status.index, status.exit_code, status.host, status.log_url, diagnostics,
                   status.progress is not None or status.type in progressed_types)

    @property
    def task_id(self) -> str:
        return f"{self.type}:{self.index}"

    @property
    def message(self) -> str:
        return failure_message(self.task_id, self.exit_code, self.host, self.log_url, self.diagnostics)


@dataclass(frozen=True)
class Decision:
    action: Action
    #: why, in TonY's words; empty for the actions that end nothing
    diagnostics: str = ""


@dataclass(frozen=True)
class Policy:
    """The failure rules of one job, taken from its spec once."""

    chief: tuple[str, int]
    tracked: frozenset[str]
    sidecars: frozenset[str] = frozenset()
    stop_on_failure: frozenset[str] = frozenset()
    #: task types with ``tony.<type>.restart-policy: task``
    task_restart_types: frozenset[str] = frozenset()
    retry_count: int = 0
    fail_on_worker_failure: bool = False
    reclaim_retry_count: int = 0

    @classmethod
    def from_spec(cls, spec: JobSpec) -> Policy:
        return cls(chief=spec.chief, tracked=frozenset(spec.tracked_types),
                   sidecars=frozenset(spec.sidecar_types), stop_on_failure=frozenset(spec.stop_on_failure_types),
                   task_restart_types=frozenset(t for t, ts in spec.tasks.items() if ts.restart_policy == "task"),
                   retry_count=spec.retry_count, fail_on_worker_failure=spec.fail_on_worker_failure,
                   reclaim_retry_count=spec.reclaim_retry_count)

    def decide(self, failure: Failure, retries_used: int, task_restarts_used: int) -> Decision:
        """What ``failure`` means when the job has relaunched its session ``retries_used`` times
        (the session id, unless an ApplicationMaster attempt started a session too) and the task
        was already relaunched alone ``task_restarts_used`` times."""
        ttype = failure.type
        if ttype in self.sidecars:
            return Decision(Action.IGNORE)
        cause = deterministic_cause(failure)
        if cause is not None:
            return Decision(Action.FAIL_JOB, f"{failure.message}. {cause}; every relaunch would fail the same way, so "
                                             "the job ends now")
        is_chief = (ttype, failure.index) == self.chief
        if (ttype in self.task_restart_types and not is_chief and ttype not in self.stop_on_failure
                and task_restarts_used < self.retry_count):
            return Decision(Action.RESTART_TASK)
        message = failure.message
        if retries_used < self.retry_count:
            return Decision(Action.RESTART_SESSION, message)
        tracked = ttype in self.tracked
        if is_chief or ttype in self.stop_on_failure or (tracked and self.fail_on_worker_failure):
            return Decision(Action.FAIL_JOB, message)
        if not tracked:
            # TonY stops the session when an untracked task dies; the verdict then follows the rules.
            return Decision(Action.END_SESSION, message)
        return Decision(Action.TOLERATE)

    def decide_reclaimed(self, failure: Failure, cause: str, reclaims_used: int) -> Decision | None:
        """What it means that the cluster took ``failure``'s container back (``cause``: "preempted
        by the scheduler", ...) after ``reclaims_used`` such relaunches in this job: the task alone
        or the session is relaunched for free; None once tony.am.reclaim-retry-count is spent (the
        ordinary rules then apply), and for a sidecar, which is never relaunched."""
        ttype = failure.type
        if ttype in self.sidecars or reclaims_used >= self.reclaim_retry_count:
            return None
        why = (f"the container of {failure.task_id} was {cause}: relaunched without spending "
               f"tony.am.retry-count ({reclaims_used + 1} of tony.am.reclaim-retry-count={self.reclaim_retry_count})")
        if (ttype in self.task_restart_types and (ttype, failure.index) != self.chief
                and ttype not in self.stop_on_failure):
            return Decision(Action.RESTART_TASK, why)
        return Decision(Action.RESTART_SESSION, why)

    def tracked_done(self, tasks: Iterable[TaskStatus]) -> bool:
        """Whether the session is over by itself: it has tracked tasks, and all of them ended."""
        tracked = [t for t in tasks if t.type in self.tracked]
        return bool(tracked) and all(t.state in _FINAL for t in tracked)

    def verdict(self, tasks: Iterable[TaskStatus], stopped_early: str | None = None) -> tuple[str, str]:
        """TonY's end-of-session rules over the tracked tasks: (job state, diagnostics).
        ``stopped_early`` says why the session was stopped before its tracked tasks ended."""
        tracked = [t for t in tasks if t.type in self.tracked]
        unfinished = [t for t in tracked if t.state not in _FINAL]
        failed = [t for t in tracked if t.state in _FAILED]
        notes = [stopped_early] if stopped_early else []
        notes += [f"Job {t.task_id} hasn't finished yet." for t in unfinished]
        notes += [failure_message(t.task_id, t.exit_code or 0, t.host, t.log_url) for t in failed]
        if unfinished:
            return JobState.FAILED, "\n".join(notes)
        if failed and (self.fail_on_worker_failure or len(failed) >= len(tracked)):
            return JobState.FAILED, "\n".join(
                [f"At least one job task exited with non-zero status, failedCnt={len(failed)}", *notes])
        if failed:
            return JobState.SUCCEEDED, "\n".join(
                [f"Training completed with some worker jobs failure, failedCnt={len(failed)}", *notes])
        return JobState.SUCCEEDED, ""
