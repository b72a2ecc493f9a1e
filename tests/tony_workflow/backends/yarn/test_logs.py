"""A YARN job's logs one section per task (:mod:`tony_workflow.backends.yarn.logs`): reading
``yarn logs`` output and task log links, then `tony logs` on the mini cluster while a job runs
(from the NodeManager) and once it has ended (from HDFS), leaving nothing behind."""
from __future__ import annotations

import json

import pytest

from tests.conftest import run_tony, wait_for
from tony_workflow.backends.yarn.logs import container_of, parse_aggregated, sections
from tony_workflow.status import JobStatus, TaskStatus

C2, C3 = "container_1795909161406_0001_01_000002", "container_e17_1795909161406_0001_01_000003"


def aggregated(container: str, log_type: str, contents: bytes) -> bytes:
    """One file as ``yarn logs`` prints it (Hadoop 3.5's layout)."""
    return (f"Container: {container} on localhost_34187\nLogAggregationType: AGGREGATED\n"
            f"{'=' * 68}\nLogType:{log_type}\nLogLastModifiedTime:Sat Nov 28 23:39:36 +0000 2026\n"
            f"LogLength:{len(contents)}\nLogContents:\n").encode() + contents + \
        f"\nEnd of LogType:{log_type}\n{'*' * 80}\n\n".encode()


def test_yarn_logs_output_is_split_by_container_and_file_by_the_lengths_it_states():
    tricky = b"epoch 1\nLogType:stdout\nContainer: container_9 on x\n\xe2\x9c\x93 done\n"  # looks like headers
    text = (aggregated(C3, "stdout", tricky) + aggregated(C3, "stderr", b"") +
            aggregated(C2, "am.stderr", b"AM line\n") + aggregated(C2, "launch_container.sh", b"#!/bin/bash\n"))
    found = parse_aggregated(text)
    assert found == {C3: {"stdout": tricky, "stderr": b""},
                     C2: {"am.stderr": b"AM line\n", "launch_container.sh": b"#!/bin/bash\n"}}
    assert parse_aggregated(b"") == {} and parse_aggregated(b"Container: c on h\nLogType:x\nLogContents:\n") == {}


def test_a_task_log_link_names_its_node_and_container():
    assert container_of(f"http://nm1:8042/node/containerlogs/{C3}/alice") == ("nm1:8042", C3)
    assert container_of(f"http://nm1:8042/node/containerlogs/{C2}") == ("nm1:8042", C2)
    assert container_of("/home/a/.tony/local/apps/x/containers/c/stdout") is None and container_of(None) is None


def test_sections_are_the_tasks_with_a_container_and_the_am():
    status = JobStatus("application_1795909161406_0001", am_log_url=f"http://nm2:8042/node/containerlogs/{C2}/u",
                       tasks=[TaskStatus("worker", 0, log_url=f"http://nm1:8042/node/containerlogs/{C3}/u"),
                              TaskStatus("worker", 1, state="REQUESTED")])
    every = sections(status, None)
    assert list(every) == ["am", "worker:0"]  # worker:1 waits for its container: nothing to read yet
    assert every["am"] == (("nm2:8042", C2), {"stdout": "am.stdout", "stderr": "am.stderr"})
    assert every["worker:0"] == (("nm1:8042", C3), {"stdout": "stdout", "stderr": "stderr"})
    assert list(sections(status, "worker:0")) == ["worker:0"] and sections(status, "worker:7") == {}


def shown(text: str) -> list[str]:
    """The section headers `tony logs` printed."""
    return [line for line in text.splitlines() if line.startswith("==> ")]


@pytest.mark.yarn
def test_tony_logs_gives_each_task_its_own_sections_while_running_and_after(yarn_cluster, tmp_path):
    done = tmp_path / "done"
    spec = tmp_path / "talkers.json"
    spec.write_text(json.dumps({
        "name": "talkers", "framework": "tensorflow",
        "tasks": {"worker": {"instances": 2, "memory": "512m", "vcores": 1,
                             "command": f'echo "out of $JOB_NAME:$TASK_INDEX"; echo "err of $JOB_NAME:$TASK_INDEX" >&2; '
                                        f'while [ ! -e {done} ]; do sleep 0.2; done'}},
        "conf": {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false"}}))
    scratch = tmp_path / "tmp"  # the commands' temporary directory, to see what they leave there
    scratch.mkdir()

    def tony(*args: str):
        return run_tony("--backend", "yarn", *args, env={"TMPDIR": str(scratch)}, timeout=300)

    r = run_tony("--backend", "yarn", "submit", str(spec), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    app_id = r.stdout.split()[-1]
    try:
        # Running: each task's files come from its NodeManager, one task's alone with --task.
        one = wait_for(lambda: ((x := tony("logs", app_id, "--task", "worker:1"))
                                .returncode == 0 and "out of worker:1" in x.stdout and x), timeout=240, interval=1)
        assert shown(one.stdout) == ["==> worker:1/stdout <==", "==> worker:1/stderr <=="], one.stdout
        stdout, stderr = one.stdout.split("==> worker:1/stderr <==")
        assert "out of worker:1" in stdout and "err of worker:1" in stderr and "err of" not in stdout
        assert "worker:0" not in one.stdout and "LogType:" not in one.stdout  # the file alone, not YARN's headings
        quiet = tony("logs", app_id, "--task", "worker:0", "--stdout-only")
        assert shown(quiet.stdout) == ["==> worker:0/stdout <=="] and "out of worker:0" in quiet.stdout, quiet.stdout
        unknown = tony("logs", app_id, "--task", "worker:7")
        assert unknown.returncode == 2 and unknown.stdout == "", unknown.stdout  # a usage error: the job is there
        assert "no task 'worker:7'" in unknown.stderr and "am, worker:0, worker:1" in unknown.stderr, unknown.stderr
        live_am = tony("logs", app_id, "--task", "am")
        assert shown(live_am.stdout) == ["==> am/stdout <==", "==> am/stderr <=="], live_am.stdout
        assert "tony-am INFO session_started" in live_am.stdout, live_am.stdout  # the AM's own lines
    finally:
        done.touch()
    final = tony("status", app_id, "--wait")
    assert "SUCCEEDED" in final.stdout, final.stdout + final.stderr
    # Ended: the same sections, from what log aggregation kept on HDFS.
    every = tony("logs", app_id)
    assert every.returncode == 0, every.stderr
    assert shown(every.stdout) == [f"==> {t}/{f} <==" for t in ("am", "worker:0", "worker:1")
                                   for f in ("stdout", "stderr")], every.stdout
    for task in ("worker:0", "worker:1"):
        assert f"out of {task}" in every.stdout and f"err of {task}" in every.stdout
    am_part = every.stdout.split("==> worker:0/stdout <==")[0]
    assert "tony-am INFO session_finished" in am_part, am_part
    assert "LogType:" not in every.stdout and "launch_container" not in every.stdout
    assert list(scratch.iterdir()) == []  # the copies went with each command
