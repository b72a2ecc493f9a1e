"""TonY's failure rules and end-of-session verdict, as tables: plain data in, a decision out.

Nothing here starts a process, a thread or a server.
"""
from __future__ import annotations

import pytest

from tony_workflow.am.policy import LOST_EXIT_CODE, Action, Failure, Policy, describe_exit, failure_message
from tony_workflow.spec import load_spec
from tony_workflow.status import JobState, TaskState, TaskStatus

# A job with a chief, workers, a ps (untracked, stop-on-failure), an evaluator (untracked only) and a
# TensorBoard sidecar, as the spec's defaults and these keys make it.
BASE = Policy(chief=("chief", 0), tracked=frozenset({"chief", "worker"}), sidecars=frozenset({"tensorboard"}),
              stop_on_failure=frozenset({"ps"}), task_restart_types=frozenset(), retry_count=0,
              fail_on_worker_failure=False)


def policy(**changes) -> Policy:
    fields = {name: getattr(BASE, name) for name in BASE.__dataclass_fields__}
    fields.update(changes)
    return Policy(**fields)


def failure(task_id: str, code: int = 3, diagnostics: str = "boom") -> Failure:
    ttype, index = task_id.split(":")
    return Failure(ttype, int(index), code, host="node1", log_url=f"/logs/{task_id}", diagnostics=diagnostics)


EVERY_TYPE = frozenset({"chief", "worker", "ps", "evaluator", "tensorboard"})

DECISIONS = [
    # rule 1: a sidecar's failure is ignored, whatever else holds
    ("sidecar, retries left", {"retry_count": 2}, "tensorboard:0", 0, 0, Action.IGNORE),
    ("sidecar, none left", {}, "tensorboard:0", 0, 0, Action.IGNORE),
    ("sidecar with restart policy task", {"task_restart_types": EVERY_TYPE, "retry_count": 1}, "tensorboard:0",
     0, 0, Action.IGNORE),
    # rule 2: restart policy task relaunches the task alone while its own restarts allow
    ("task policy, first failure", {"task_restart_types": {"worker"}, "retry_count": 2}, "worker:1", 0, 0,
     Action.RESTART_TASK),
    ("task policy, last restart", {"task_restart_types": {"worker"}, "retry_count": 2}, "worker:1", 0, 1,
     Action.RESTART_TASK),
    ("task policy in a later session", {"task_restart_types": {"worker"}, "retry_count": 2}, "worker:1", 2, 0,
     Action.RESTART_TASK),
    ("task policy, restarts used up, session retries left", {"task_restart_types": {"worker"}, "retry_count": 2},
     "worker:1", 0, 2, Action.RESTART_SESSION),
    ("task policy, restarts and sessions used up", {"task_restart_types": {"worker"}, "retry_count": 2},
     "worker:1", 2, 2, Action.TOLERATE),
    ("task policy never relaunches the chief alone", {"task_restart_types": EVERY_TYPE, "retry_count": 1},
     "chief:0", 0, 0, Action.RESTART_SESSION),
    ("task policy never relaunches a stop-on-failure type alone", {"task_restart_types": EVERY_TYPE,
     "retry_count": 1}, "ps:0", 0, 0, Action.RESTART_SESSION),
    ("task policy, no retries at all", {"task_restart_types": {"worker"}}, "worker:1", 0, 0, Action.TOLERATE),
    ("task policy of another type", {"task_restart_types": {"evaluator"}, "retry_count": 1}, "worker:1", 0, 0,
     Action.RESTART_SESSION),
    # rule 3: while session retries remain, any other failure ends the session for the next one
    ("worker, session retries left", {"retry_count": 1}, "worker:1", 0, 0, Action.RESTART_SESSION),
    ("chief, session retries left", {"retry_count": 1}, "chief:0", 0, 0, Action.RESTART_SESSION),
    ("ps, session retries left", {"retry_count": 3}, "ps:0", 2, 0, Action.RESTART_SESSION),
    ("untracked, session retries left", {"retry_count": 1}, "evaluator:0", 0, 0, Action.RESTART_SESSION),
    ("fail-on-worker-failure, session retries left", {"retry_count": 1, "fail_on_worker_failure": True},
     "worker:1", 0, 0, Action.RESTART_SESSION),
    # rule 4: no retries left
    ("chief fails the job", {}, "chief:0", 0, 0, Action.FAIL_JOB),
    ("chief, last session", {"retry_count": 2}, "chief:0", 2, 0, Action.FAIL_JOB),
    ("worker:0 is the chief without a chief type", {"chief": ("worker", 0)}, "worker:0", 0, 0, Action.FAIL_JOB),
    ("worker:1 is not the chief", {"chief": ("worker", 0)}, "worker:1", 0, 0, Action.TOLERATE),
    ("a stop-on-failure type fails the job", {}, "ps:0", 0, 0, Action.FAIL_JOB),
    ("a tracked stop-on-failure type fails the job", {"stop_on_failure": {"worker"}}, "worker:2", 0, 0,
     Action.FAIL_JOB),
    ("fail-on-worker-failure: a tracked task fails the job", {"fail_on_worker_failure": True}, "worker:1", 0, 0,
     Action.FAIL_JOB),
    ("fail-on-worker-failure does not cover untracked tasks", {"fail_on_worker_failure": True}, "evaluator:0",
     0, 0, Action.END_SESSION),
    ("an untracked task ends the session", {}, "evaluator:0", 0, 0, Action.END_SESSION),
    ("an untracked type without stop-on-failure", {"stop_on_failure": frozenset()}, "ps:0", 0, 0,
     Action.END_SESSION),
    ("another worker's failure is tolerated", {}, "worker:1", 0, 0, Action.TOLERATE),
]


@pytest.mark.parametrize("case, changes, task_id, session, restarts_used, action", DECISIONS,
                         ids=[d[0] for d in DECISIONS])
def test_decide(case, changes, task_id, session, restarts_used, action):
    changes = {k: frozenset(v) if isinstance(v, set) else v for k, v in changes.items()}
    decision = policy(**changes).decide(failure(task_id), session, restarts_used)
    assert decision.action is action
    if action in (Action.RESTART_SESSION, Action.FAIL_JOB, Action.END_SESSION):
        # TonY's words: which task, how it ended, where, its log and its last stderr lines
        assert decision.diagnostics == (f"Job {task_id} exited with exit code 3 on host:node1 "
                                        f"(log: /logs/{task_id}). boom")
    else:
        assert decision.diagnostics == ""


def test_a_lost_task_follows_the_same_rules():
    lost = failure("worker:1", LOST_EXIT_CODE, "Task with id [worker:1] has missed [4] heartbeats")
    assert policy().decide(lost, 0, 0).action is Action.TOLERATE
    decision = policy(retry_count=1).decide(lost, 0, 0)
    assert decision.action is Action.RESTART_SESSION
    assert decision.diagnostics.startswith("Job worker:1 exited with exit code -1000 (lost: the AM gave up on it)")


def test_restarts_are_counted_per_task_by_the_caller():
    p = policy(task_restart_types=frozenset({"worker"}), retry_count=1)
    assert p.decide(failure("worker:1"), 0, 1).action is Action.RESTART_SESSION
    assert p.decide(failure("worker:2"), 0, 0).action is Action.RESTART_TASK


@pytest.mark.parametrize("code, text", [
    (3, "exit code 3"),
    (None, "no exit code"),
    (LOST_EXIT_CODE, "exit code -1000 (lost: the AM gave up on it)"),
    (137, "exit code 137 (SIGKILL)"),
    (143, "exit code 143 (SIGTERM)"),
    (128, "exit code 128"),
    (250, "exit code 250"),
])
def test_exit_codes_are_described(code, text):
    assert describe_exit(code) == text


@pytest.mark.parametrize("log_url, extra, text", [
    (None, "", "Job worker:1 exited with exit code 3 on host:h"),
    ("/l", "", "Job worker:1 exited with exit code 3 on host:h (log: /l)"),
    (None, "  last lines\n", "Job worker:1 exited with exit code 3 on host:h. last lines"),
])
def test_failure_message(log_url, extra, text):
    assert failure_message("worker:1", 3, "h", log_url, extra) == text


def task(task_id: str, state: str, code: int | None = None) -> TaskStatus:
    ttype, index = task_id.split(":")
    return TaskStatus(type=ttype, index=int(index), state=state, exit_code=code, host="node1")


S, F, L, K, R = TaskState.SUCCEEDED, TaskState.FAILED, TaskState.LOST, TaskState.KILLED, TaskState.RUNNING
JOB_FAILED = "At least one job task exited with non-zero status, failedCnt={}"
SOME_FAILED = "Training completed with some worker jobs failure, failedCnt={}"

VERDICTS = [
    ("all succeeded", {}, [("chief:0", S, 0), ("worker:0", S, 0)], JobState.SUCCEEDED, []),
    ("untracked and sidecar failures do not count", {},
     [("chief:0", S, 0), ("ps:0", F, 1), ("tensorboard:0", F, 1), ("evaluator:0", K, 143)], JobState.SUCCEEDED, []),
    ("a tracked task still running", {}, [("chief:0", S, 0), ("worker:1", R, None)], JobState.FAILED,
     ["Job worker:1 hasn't finished yet."]),
    ("some workers failed", {}, [("chief:0", S, 0), ("worker:0", F, 3), ("worker:1", S, 0)], JobState.SUCCEEDED,
     [SOME_FAILED.format(1), "Job worker:0 exited with exit code 3 on host:node1"]),
    ("a lost worker counts as failed", {}, [("chief:0", S, 0), ("worker:0", L, LOST_EXIT_CODE)], JobState.SUCCEEDED,
     [SOME_FAILED.format(1), "Job worker:0 exited with exit code -1000 (lost: the AM gave up on it) on host:node1"]),
    ("a killed worker is finished, not failed", {}, [("chief:0", S, 0), ("worker:0", K, 143)], JobState.SUCCEEDED,
     []),
    ("every tracked task failed", {}, [("chief:0", F, 1), ("worker:0", F, 2)], JobState.FAILED,
     [JOB_FAILED.format(2), "Job chief:0 exited with exit code 1 on host:node1",
      "Job worker:0 exited with exit code 2 on host:node1"]),
    ("fail-on-worker-failure: one failure fails the job", {"fail_on_worker_failure": True},
     [("chief:0", S, 0), ("worker:0", F, 3), ("worker:1", S, 0)], JobState.FAILED,
     [JOB_FAILED.format(1), "Job worker:0 exited with exit code 3 on host:node1"]),
    ("unfinished wins over failed", {}, [("chief:0", F, 1), ("worker:0", R, None)], JobState.FAILED,
     ["Job worker:0 hasn't finished yet.", "Job chief:0 exited with exit code 1 on host:node1"]),
    ("no tracked tasks", {}, [("ps:0", F, 1)], JobState.SUCCEEDED, []),
]


@pytest.mark.parametrize("case, changes, tasks, state, lines", VERDICTS, ids=[v[0] for v in VERDICTS])
def test_verdict(case, changes, tasks, state, lines):
    got_state, diagnostics = policy(**changes).verdict([task(*t) for t in tasks])
    assert got_state == state
    assert diagnostics == "\n".join(lines)


def test_verdict_after_a_session_stopped_early_says_why_first():
    p = policy()
    tasks = [task("chief:0", S, 0), task("worker:0", R), task("ps:0", F, 1)]
    decision = p.decide(Failure.of(tasks[2], "ps died"), 0, 0)
    assert decision.action is Action.FAIL_JOB
    p = policy(stop_on_failure=frozenset())
    decision = p.decide(Failure.of(tasks[2], "ps died"), 0, 0)
    assert decision.action is Action.END_SESSION
    state, diagnostics = p.verdict(tasks, stopped_early=decision.diagnostics)
    assert state == JobState.FAILED
    assert diagnostics.splitlines() == ["Job ps:0 exited with exit code 1 on host:node1. ps died",
                                        "Job worker:0 hasn't finished yet."]


@pytest.mark.parametrize("tasks, done", [
    ([("chief:0", S, 0), ("worker:0", F, 1), ("ps:0", R, None)], True),
    ([("chief:0", S, 0), ("worker:0", R, None)], False),
    ([("chief:0", K, 143), ("worker:0", L, LOST_EXIT_CODE)], True),
    ([("ps:0", F, 1), ("tensorboard:0", S, 0)], False),  # no tracked task: nothing ends the session by itself
    ([], False),
])
def test_tracked_done(tasks, done):
    assert BASE.tracked_done([task(*t) for t in tasks]) is done


SPEC = """
name: p
command: "true"
tasks:
  chief: {instances: 1}
  worker: {instances: 2, restart_policy: task}
  ps: {instances: 1}
  evaluator: {instances: 1}
"""


@pytest.mark.parametrize("conf, expected", [
    ({}, {"chief": ("chief", 0), "tracked": {"chief", "worker", "evaluator"}, "stop_on_failure": {"ps"},
          "task_restart_types": {"worker"}, "retry_count": 0, "fail_on_worker_failure": False}),
    ({"tony.application.untracked.jobtypes": "ps,evaluator", "tony.am.retry-count": "2",
      "tony.application.fail-on-worker-failure-enabled": "true", "tony.application.stop-on-failure-jobtypes": ""},
     {"tracked": {"chief", "worker"}, "stop_on_failure": set(), "retry_count": 2,
      "fail_on_worker_failure": True}),
])
def test_the_policy_comes_from_the_spec(conf, expected):
    p = Policy.from_spec(load_spec(SPEC, overrides=conf))
    for name, value in expected.items():
        got = getattr(p, name)
        assert (set(got) if isinstance(got, frozenset) else got) == value, name


def test_without_a_chief_type_worker_0_is_the_chief():
    p = Policy.from_spec(load_spec(SPEC.replace("  chief: {instances: 1}\n", "")))
    assert p.chief == ("worker", 0)
    assert p.decide(failure("worker:0"), 0, 0).action is Action.FAIL_JOB


def test_a_later_am_attempt_ends_the_job_only_when_training_had_completed():
    from tony_workflow.am.attempts import finished_verdict
    from tony_workflow.spec import JobSpec

    spec = JobSpec(conf={"tony.worker.instances": "2", "tony.ps.instances": "1"})
    rules = Policy.from_spec(spec)  # worker:0 is the chief; ps is untracked
    assert finished_verdict(rules, spec, {"worker:0": 0, "worker:1": 0})[0] == "SUCCEEDED"
    # The chief finished: the other worker was stopped a moment later, training is done.
    assert finished_verdict(rules, spec, {"worker:0": 0})[0] == "SUCCEEDED"
    assert finished_verdict(rules, spec, {"worker:1": 0}) is None  # the chief was still training
    assert finished_verdict(rules, spec, {}) is None
    assert finished_verdict(rules, spec, {"worker:0": 0, "worker:1": 3}) is None  # failures: a new session decides
    assert finished_verdict(rules, spec, {"worker:0": 1, "worker:1": 0}) is None


RECLAIMS = [
    # (case, policy changes, task, reclaims used, action or None for "the ordinary rules apply")
    ("a preempted worker relaunches the session, no retry left", {"reclaim_retry_count": 3}, "worker:1", 0,
     Action.RESTART_SESSION),
    ("a preempted ps relaunches the session: it did not fail", {"reclaim_retry_count": 3}, "ps:0", 2,
     Action.RESTART_SESSION),
    ("a preempted chief relaunches the session", {"reclaim_retry_count": 1}, "chief:0", 0, Action.RESTART_SESSION),
    ("restart policy task relaunches the worker alone", {"reclaim_retry_count": 1, "task_restart_types": {"worker"}},
     "worker:2", 0, Action.RESTART_TASK),
    ("restart policy task never relaunches the chief alone",
     {"reclaim_retry_count": 1, "task_restart_types": EVERY_TYPE}, "chief:0", 0, Action.RESTART_SESSION),
    ("the reclaim cap spent: the ordinary rules", {"reclaim_retry_count": 2}, "worker:1", 2, None),
    ("no reclaims allowed: the ordinary rules", {"reclaim_retry_count": 0}, "worker:1", 0, None),
    ("a sidecar is never relaunched", {"reclaim_retry_count": 5}, "tensorboard:0", 0, None),
]


@pytest.mark.parametrize("case,changes,task_id,used,action", RECLAIMS, ids=[r[0] for r in RECLAIMS])
def test_decide_reclaimed(case, changes, task_id, used, action):
    decision = policy(**changes).decide_reclaimed(failure(task_id, code=143), "preempted by the scheduler", used)
    if action is None:
        assert decision is None
    else:
        assert decision.action is action
        assert f"the container of {task_id} was preempted by the scheduler" in decision.diagnostics
        assert "without spending tony.am.retry-count" in decision.diagnostics


def test_the_spec_carries_the_reclaim_cap():
    assert Policy.from_spec(load_spec(SPEC, overrides=["tony.am.reclaim-retry-count=4"])).reclaim_retry_count == 4
    assert Policy.from_spec(load_spec(SPEC)).reclaim_retry_count == 10


STDERR = "Last lines of stderr:\nTraceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
DETERMINISTIC = [
    ("a module not installed", STDERR + "ModuleNotFoundError: No module named 'numpy.linalg'", 1,
     ["could not import numpy.linalg", "numpy is not in the job's environment", "tony.yarn.environment-packages"]),
    ("another version than the source expects", STDERR + "ImportError: cannot import name 'Thing' from 'lib.sub' "
     "(/x/lib/sub.py)", 1, ["could not import Thing from lib.sub", "another version of lib"]),
    ("no script", "python3: can't open file '/c/work/trian.py': [Errno 2] No such file or directory", 2,
     ["script /c/work/trian.py is not there"]),
    ("a syntax error", STDERR + "    def (:\n        ^\nSyntaxError: invalid syntax", 1,
     ["does not parse (SyntaxError: invalid syntax)"]),
    ("over its memory before any progress", "The cluster said: Container is running beyond physical memory", -104,
     ["went over its memory", "raise tony.worker.memory"]),
]


@pytest.mark.parametrize("why,diagnostics,code,said", DETERMINISTIC, ids=[d[0] for d in DETERMINISTIC])
def test_a_failure_no_relaunch_can_change_fails_the_job_at_once_with_what_to_change(why, diagnostics, code, said):
    # Retries and a task restart policy left: every relaunch would fail the same way.
    p = policy(retry_count=3, task_restart_types=frozenset({"worker"}))
    decision = p.decide(failure("worker:1", code, diagnostics), 0, 0)
    assert decision.action is Action.FAIL_JOB, why
    assert all(s in decision.diagnostics for s in said), decision.diagnostics
    assert "every relaunch would fail the same way" in decision.diagnostics
    # A task that reported progress got past its start: the ordinary rules apply.
    later = Failure("worker", 1, code, diagnostics=diagnostics, progressed=True)
    assert p.decide(later, 0, 0).action is Action.RESTART_TASK
    assert policy(retry_count=1).decide(later, 0, 0).action is Action.RESTART_SESSION


def test_any_other_failure_before_progress_is_relaunched_as_ever():
    other = failure("worker:1", 1, STDERR + "RuntimeError: connection reset by peer")
    assert policy(retry_count=1).decide(other, 0, 0).action is Action.RESTART_SESSION
