"""Validation (:mod:`tony_workflow.spec.validation`): the corpus of bad specs, each refused naming its key, and
every problem reported at once."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.tony_workflow.spec.common import BAD_SPECS, errors_of


def _expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    match = re.match(r"\s*(?:#|<!--)\s*expect:\s*(.*?)\s*(?:-->)?\s*$", first)
    assert match, f"{path.name} must start with an expect comment"
    return match.group(1)


def test_bad_corpus_is_large_and_mixed():
    assert len(BAD_SPECS) >= 30
    assert {p.suffix for p in BAD_SPECS} == {".yaml", ".xml"}


@pytest.mark.parametrize("path", BAD_SPECS, ids=lambda p: p.name)
def test_bad_spec_is_refused_with_a_named_key(path):
    message = str(errors_of(path))
    assert _expected(path) in message
    for line in message.splitlines():
        assert line.startswith(str(path)), line  # every issue names the file
        assert not line.startswith("Traceback") and not line.lstrip().startswith('File "'), line


def test_every_problem_is_reported_at_once(tmp_path):
    path = tmp_path / "many.yaml"
    path.write_text(
        "framework: caffe\n"
        "retries: -2\n"
        "env: [NOEQUALS]\n"
        "am: {memory: 1x}\n"
        "tasks:\n"
        "  chief: {instances: 1, restart_policy: task}\n"
        "  worker: {instances: two, memory: 2x, vcores: -1, gpus: 0.5}\n"
        "  ps: {instances: 1, command: serve}\n")
    error = errors_of(path)
    keys = [issue.key for issue in error.issues]
    for expected in ("framework (tony.application.framework)", "retries (tony.am.retry-count)",
                     "env (tony.containers.envs)", "am.memory (tony.am.memory)",
                     "tasks.worker.instances (tony.worker.instances)", "tasks.worker.memory (tony.worker.memory)",
                     "tasks.worker.vcores (tony.worker.vcores)", "tasks.worker.gpus (tony.worker.gpus)",
                     "tasks.chief.restart_policy (tony.chief.restart-policy)", "tony.chief.command"):
        assert expected in keys, (expected, keys)
    assert len(keys) == len(set(keys))
    assert "allowed: tensorflow, pytorch, horovod, mxnet, jax, standalone" in str(error)


def test_a_task_type_one_letter_from_another_is_taken_for_a_typo_unless_they_differ_in_digits(tmp_path):
    from tony_workflow.spec.validation import near_miss, one_edit_apart
    assert one_edit_apart("wroker", "worker") and one_edit_apart("workr", "worker") and one_edit_apart("pss", "ps")
    assert not one_edit_apart("work", "worker") and not one_edit_apart("worker", "worker")
    assert not one_edit_apart("wrokre", "worker")  # two swaps
    assert near_miss("worker", ["worker", "wroker"]) is None  # a known type is never the typo
    assert "'wroker' is one letter away from the task type 'worker'" in near_miss("wroker", ["wroker"])
    assert near_miss("reader1", ["reader1", "reader2"]) is None and near_miss("trainer", ["trainer", "ps"]) is None
    assert near_miss("t1", ["t1", "t11"]) is None and near_miss("t12", ["t12", "t21"]) is None
    assert near_miss("worker1", ["worker", "worker1"]) is None  # digits only: meant
    assert "'readr', declared too" in near_miss("reader", ["readr", "reader"])
    assert "tony.task.* keys configure the job as a whole" in near_miss("tasks", ["tasks"])
