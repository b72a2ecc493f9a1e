"""Killing parts of a running job on the embedded cluster: each death is survived, and nothing it
started is left running. Real processes throughout; leftovers are found by scanning the machine
(``app_processes``), not by asking the runtime.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.conftest import app_processes, wait_for
from tony_workflow.client import TonyClient, load_job

pytestmark = pytest.mark.job

# A user process that stands for a TensorFlow server: it listens on its task's port (with
# SO_REUSEPORT, as gRPC does), records its pid, and waits. A relaunched one first checks that the
# process it replaces is gone: an orphan would still hold the port and serve the old session.
HOLDER = textwrap.dedent("""
    import json, os, socket, sys, time
    from pathlib import Path
    marks = Path(os.environ["MARKS"])
    task = os.environ["TONY_TASK_ID"].replace(":", "-")
    cfg = json.loads(os.environ["TF_CONFIG"])
    host, port = cfg["cluster"][cfg["task"]["type"]][cfg["task"]["index"]].rsplit(":", 1)
    earlier = sorted(marks.glob(task + ".*.pid"))
    for mark in earlier:
        pid = int(mark.read_text())
        try:  # a zombie is dead (it holds no port), whether or not anyone has reaped it yet
            with open(f"/proc/{pid}/stat") as stat:
                running = stat.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            running = False
        if running:
            sys.exit(f"orphan {pid} of an earlier launch of {task} still runs")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((host, int(port)))
    s.listen()
    # Written aside and renamed into place: a reader never sees the file empty.
    (marks / f"{task}.tmp").write_text(str(os.getpid()))
    (marks / f"{task}.tmp").rename(marks / f"{task}.{len(earlier)}.pid")
    if earlier:
        time.sleep(0.5)
    elif task in ("worker-1", "ps-0"):
        time.sleep(120)  # worker 1's first launch is killed through its executor; ps runs until the end
    else:
        time.sleep(8)
""")


def _job(tmp_path: Path, tasks: dict, conf: dict | None = None) -> Path:
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    doc = {"name": "deaths", "framework": "tensorflow", "command": f"{sys.executable} {script}",
           "am": {"memory": "128m"}, "env": {"MARKS": str(tmp_path / "marks")},
           "tasks": {t: {"memory": "128m", **v} for t, v in tasks.items()},
           "conf": {"tony.task.tensorboard.enabled": "false", **(conf or {})}}
    (tmp_path / "marks").mkdir()
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _container_pid(handle, task_id: str) -> int:
    task = next(t for t in handle.status().tasks if t.task_id == task_id)
    return int((Path(task.log_url).parent / "pid").read_text())


@pytest.mark.parametrize("layout, conf", [
    # ParameterServerStrategy: a worker is relaunched alone, at the same address.
    ({"chief": {"instances": 1}, "ps": {"instances": 1}, "worker": {"instances": 2, "restart_policy": "task"}},
     {"tony.am.retry-count": 1}),
    # MultiWorkerMirroredStrategy: the whole session is relaunched.
    ({"worker": {"instances": 2}}, {"tony.am.retry-count": 1}),
])
def test_a_killed_executor_takes_its_user_process_with_it(tony_home, tmp_path, layout, conf):
    handle = TonyClient("local").submit(load_job(str(_job(tmp_path, layout, conf))))
    marks = tmp_path / "marks"
    wait_for(lambda: (marks / "worker-1.0.pid").exists(), timeout=120)
    orphan = int((marks / "worker-1.0.pid").read_text())
    os.kill(_container_pid(handle, "worker:1"), signal.SIGKILL)
    status = handle.wait(poll_interval=0.2, timeout=120)
    assert status.state == "SUCCEEDED", status.diagnostics
    relaunched = next(t for t in status.tasks if t.task_id == "worker:1")
    if "ps" in layout:
        assert relaunched.restarts == 1 and status.session_id == 0  # the task alone, same session
    else:
        assert status.session_id == 1
    assert (marks / "worker-1.1.pid").exists()  # the relaunch bound the same port and found no orphan
    assert not _alive(orphan)
    assert app_processes(handle.app_id) == []


def _alive(pid: int) -> bool:
    import psutil
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# A trainer that checkpoints a step counter into TONY_CHECKPOINT_DIR (mirrored by the runtime) and
# records where each session started from.
TRAINER = textwrap.dedent("""
    import os, time
    from pathlib import Path
    ck, marks = Path(os.environ["TONY_CHECKPOINT_DIR"]), Path(os.environ["MARKS"])
    saved = ck / "step"
    start = int(saved.read_text()) if saved.exists() else 0
    (marks / f"session{os.environ['SESSION_ID']}.start").write_text(str(start))
    for step in range(start, 40):
        time.sleep(0.2)
        tmp = ck / "step.tmp"
        tmp.write_text(str(step + 1))
        os.replace(tmp, saved)
        (marks / "progress.tmp").write_text(str(step + 1))
        os.replace(marks / "progress.tmp", marks / "progress")
""")


def _trainer(tmp_path: Path, conf: dict | None = None, at_step: int = 15):
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    (tmp_path / "marks").mkdir()
    doc = {"name": "am-deaths", "command": f"{sys.executable} {script}", "am": {"memory": "128m"},
           "env": {"MARKS": str(tmp_path / "marks")}, "tasks": {"worker": {"instances": 1, "memory": "128m"}},
           "conf": {"tony.task.tensorboard.enabled": "false", "tony.am.liveness-timeout-ms": 3000, **(conf or {})}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    handle = TonyClient("local").submit(load_job(str(path)))
    marks = tmp_path / "marks"
    wait_for(lambda: (marks / "progress").exists() and int((marks / "progress").read_text()) >= at_step, timeout=120)
    am = json.loads((handle.backend.app_dir(handle.app_id) / "am.json").read_text())
    return handle, marks, am["pid"]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_a_dead_or_hung_am_is_replaced_and_training_resumes(tony_home, tmp_path, sig):
    handle, marks, am_pid = _trainer(tmp_path)
    tracking = handle.status().tracking_url
    os.kill(am_pid, sig)
    status = handle.wait(poll_interval=0.2, timeout=180)
    assert status.state == "SUCCEEDED", status.diagnostics
    assert status.am_attempt == 2 and status.session_id == 1
    assert status.tracking_url == tracking  # the new attempt listens where the old one did
    assert int((marks / "session1.start").read_text()) > 0  # from the checkpoint, not from step 0
    assert not _alive(am_pid)
    failed = [e for e in events(handle) if e["event"] == "am_attempt_failed"]
    assert len(failed) == 1 and failed[0]["attempt"] == 1
    assert ("did not answer" if sig == signal.SIGSTOP else "killed by signal 9") in failed[0]["reason"]
    assert [e["attempt"] for e in events(handle) if e["event"] == "am_started"] == [1, 2]
    assert app_processes(handle.app_id) == []


def test_training_that_finished_while_the_am_was_hung_is_not_run_again(tony_home, tmp_path):
    # The AM stops answering near the end; the tasks finish before the supervisor's patience runs
    # out, and record their outcome in their containers. The next attempt finds it there.
    handle, marks, am_pid = _trainer(tmp_path, {"tony.am.liveness-timeout-ms": 10000}, at_step=32)
    os.kill(am_pid, signal.SIGSTOP)
    status = handle.wait(poll_interval=0.2, timeout=180)
    assert status.state == "SUCCEEDED", status.diagnostics
    assert status.am_attempt == 2 and "had finished" in status.diagnostics
    assert not (marks / "session1.start").exists()  # no second run of the training
    assert int((marks / "progress").read_text()) == 40
    assert app_processes(handle.app_id) == []


def test_without_attempts_left_a_dead_am_fails_the_job_and_leaves_nothing(tony_home, tmp_path):
    handle, marks, am_pid = _trainer(tmp_path, {"tony.am.max-attempts": 1})
    os.kill(am_pid, signal.SIGKILL)
    status = handle.wait(poll_interval=0.2, timeout=120)
    assert status.state == "FAILED"
    assert "killed by signal 9" in status.diagnostics and "tony.am.max-attempts=1" in status.diagnostics
    assert not (marks / "session1.start").exists()
    assert app_processes(handle.app_id) == []
    assert handle.backend.am_gone(handle.app_id)
    # No attempt lived to write the job's history: its supervisor did.
    from tony_workflow.history import JobHistory, history_default
    record = JobHistory.at(history_default("local")).get(handle.app_id)
    assert record is not None and record["state"] == "FAILED" and "tony.am.max-attempts=1" in record["diagnostics"]


def events(handle) -> list[dict]:
    from tony_workflow.events import read_events
    return list(read_events(handle.backend.app_dir(handle.app_id) / "events.jsonl"))


def test_a_module_the_job_cannot_import_ends_it_at_once_naming_it_and_what_to_change(tony_home, tmp_path):
    # Retries left, on every task: no relaunch could find the module, so none is spent.
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("import json\nimport no_such_module_for_tony\n")
    job = {"name": "no-module", "framework": "tensorflow", "executes": "train.py", "src_dir": str(src),
           "tasks": {"chief": {"instances": 1, "memory": "256m"},
                     "worker": {"instances": 2, "memory": "256m", "restart_policy": "task"}},
           "conf": {"tony.am.memory": "256m", "tony.am.retry-count": "3", "tony.task.tensorboard.enabled": "false"}}
    st = TonyClient("local").submit(load_job(job)).wait(poll_interval=0.2, timeout=120)
    assert st.state == "FAILED" and st.session_id == 0 and st.retries == 0, (st.state, st.session_id)
    assert all(t.restarts == 0 for t in st.tasks), st.tasks
    assert "could not import no_such_module_for_tony" in st.diagnostics, st.diagnostics
    assert "every relaunch would fail the same way" in st.diagnostics
    assert "tony.yarn.environment-packages" in st.diagnostics and "python_venv" in st.diagnostics
    wait_for(lambda: not app_processes(st.application_id), timeout=30)


# A trainer that gets going (it reports progress) and then loses its container's first process, as
# when a cluster kills an executor, leaving its own processes to the AM: among them a child slow to
# go (it ignores SIGTERM, as a process freeing gigabytes after a memory kill is slow to die).
STORM = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from tony_workflow import report
    subprocess.Popen([sys.executable, "-c",
                      "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    report(step=1, total=100)
    time.sleep(3)
    os.kill(os.getppid(), signal.SIGKILL)  # the executor, which runs this command
    time.sleep(600)
""")


def test_a_storm_of_task_deaths_leaves_the_am_answering(tony_home, tmp_path):
    """Seven tasks that die together in each of two sessions, each leaving a slow-to-die child: the
    AM stops them all while it goes on answering. Its liveness watch (its supervisor probing its
    status route, here with a 3 s limit) never replaces it, and nothing is left running."""
    script = tmp_path / "storm.py"
    script.write_text(STORM)
    doc = {"name": "storm", "command": f"{sys.executable} {script}", "am": {"memory": "128m"},
           "tasks": {"worker": {"instances": 7, "memory": "128m"}},
           "conf": {"tony.task.tensorboard.enabled": "false", "tony.am.retry-count": "1",
                    "tony.am.liveness-timeout-ms": "3000"}}
    h = TonyClient("local").submit(load_job(doc))
    st = h.wait(timeout=300)
    assert st.state == "FAILED" and st.retries == 1, st.diagnostics
    assert "did not answer" not in st.diagnostics, st.diagnostics
    assert st.am_attempt == 1, "the AM was replaced: it stopped answering while it stopped the tasks"
    events = [json.loads(line) for line in (h.backend.app_dir(h.app_id) / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if e["event"] == "am_attempt_failed"], events
    assert app_processes(h.app_id) == []
